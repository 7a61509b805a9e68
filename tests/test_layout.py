"""The package's layout: every module imports on its own, and the modules import one way only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Source folder of each package (the namespace layout maps seqpart.solver to solver/ etc.).
PACKAGES = {"seqpart.solver": ROOT / "solver", "seqpart.heuristics": ROOT / "heuristics"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


MODULES = _modules()
def _imports(name: str, path: Path) -> set[str]:
    """The seqpart modules that ``name`` imports (at any depth of its code, lazily or not)."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                stem = f"{base}.{node.module}" if node.module else base
            else:
                stem = node.module or ""
            # `from . import x` and `from .pkg import mod` may name modules.
            targets = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def test_the_modules_are_found() -> None:
    assert {"seqpart.solver.cli", "seqpart.solver.study", "seqpart.solver.partition",
            "seqpart.heuristics"} <= set(MODULES)


def test_import_graph_has_no_cycle() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    # A package's __init__ re-exports its modules; an edge into a package means "its __init__".
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_core_does_not_import_the_cli_layer() -> None:
    """Dependencies flow one way: nothing below the CLI/study/plots layer imports it."""
    top = {"seqpart.solver.cli", "seqpart.solver.study", "seqpart.solver.study_runner",
           "seqpart.solver.plots", "seqpart.solver.lengths_io", "seqpart.solver.__main__",
           "seqpart.solver.step_study"}
    for name, path in MODULES.items():
        if name in top:
            continue
        assert not (_imports(name, path) & top), f"{name} imports {_imports(name, path) & top}"
    for name, path in MODULES.items():
        if name.startswith("seqpart.heuristics"):
            solver = {m for m in _imports(name, path) if m.startswith("seqpart.solver")}
            assert not solver, f"{name} (pure heuristics) imports {solver}"


FORK_EACH = """
import importlib, importlib.util, os, sys, traceback
# Core dependencies are loaded once, before forking: what is checked is seqpart's own
# import order, and a fork per module keeps this fast.
for lib in ("numpy", "ortools.sat.python.cp_model"):
    if importlib.util.find_spec(lib.split(".")[0]) is not None:
        importlib.import_module(lib)
assert not [m for m in sys.modules if m.startswith("seqpart")]
children = {}
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except ImportError as err:
            missing = getattr(err, "name", None) or ""
            optional = missing.split(".")[0] in ("torch", "matplotlib")
            print(f"{name}: {'skipped, needs ' + missing if optional else err!r}", flush=True)
            os._exit(0 if optional else 1)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    children[pid] = name
failed = 0
for pid, name in children.items():
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print(f"FAILED {name}")
        failed += 1
sys.exit(1 if failed else 0)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="uses os.fork")
def test_every_module_imports_alone() -> None:
    """Each module imported first, in a fresh process: catches an import that only works when
    another module was imported before it (a hidden cycle or order dependency)."""
    names = sorted(n for n in MODULES if not n.endswith("__main__"))
    proc = subprocess.run([sys.executable, "-c", FORK_EACH, *names], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
