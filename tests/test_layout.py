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
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
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
            # `from pkg import mod` names the module, not (only) the package's __init__.
            named = [f"{stem}.{alias.name}" for alias in node.names]
            targets = [t for t in named if t in MODULES] or [stem]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def test_the_modules_are_found() -> None:
    assert {"seqpart.solver.cli", "seqpart.solver.study.methods", "seqpart.solver._partition",
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



def test_the_package_imports_itself_relatively() -> None:
    """Inside the package every import of seqpart is relative (``from ..heuristics import``), so
    that static tools (IDEs, type checkers, structure viewers), which do not run the editable
    install's import hook, map each import to its file. Strings given to importlib are exempt."""
    for name, path in MODULES.items():
        if name == "seqpart.solver._toplevel":  # installed as the top-level seqpart itself
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                absolute = [a.name for a in node.names if a.name.split(".")[0] == "seqpart"]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                absolute = [node.module] if (node.module or "").split(".")[0] == "seqpart" else []
            else:
                continue
            assert not absolute, f"{name}:{node.lineno} imports {absolute[0]} absolutely: make it relative"


def test_no_module_imports_the_front_door() -> None:
    """The front door (``seqpart.solver``'s ``__init__``) only hands names on: a module of its
    layer or below (measurement included) imports each name from its home, so no arrow runs back
    up through it. The study and the command line, above it, may use it."""
    door = _layer("seqpart.solver")
    for name, path in MODULES.items():
        if _layer(name) <= door + 1:
            assert "seqpart.solver" not in _imports(name, path), f"{name} imports the front door"

#: The layers, lowest first: a module may import its own layer and the ones below it only.
#: Matched by the longest prefix; the front door ``seqpart.solver`` re-exports the layers below it.
LAYERS: list[tuple[str, ...]] = [
    ("seqpart.heuristics",),
    ("seqpart.solver.tuning",),  # the table of tuned shares and rates: imports nothing of seqpart
    ("seqpart.solver.errors", "seqpart.solver.problem", "seqpart.solver.batch_cost",
     "seqpart.solver.flops", "seqpart.solver.plan",
     "seqpart.solver.options", "seqpart.solver.measure.profile", "seqpart.solver.measure.checks"),
    ("seqpart.solver.engines", "seqpart.solver.assemble"),
    ("seqpart.solver._partition",),
    ("seqpart.solver.step", "seqpart.solver.dynamic_cp"),
    ("seqpart.solver.distributed",),
    ("seqpart.solver",),  # the front door
    ("seqpart.solver.dropins", "seqpart.solver.measure"),
    ("seqpart.solver.study",),
    ("seqpart.solver.cli", "seqpart.solver.__main__"),
    # Installed as the top-level ``seqpart``: it hands on the front door's names, from above.
    ("seqpart.solver._toplevel",),
]


def _layer(name: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    assert best >= 0, f"{name} is in no layer: add its folder to LAYERS"
    return best


def test_imports_flow_one_way() -> None:
    """Nothing imports a higher layer: the solver never imports the study, the CLI or a drop-in."""
    for name, path in MODULES.items():
        for target in _imports(name, path):
            assert _layer(target) <= _layer(name), (
                f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})")


def _private_owner(target: str) -> str | None:
    """The package that holds ``target``'s deepest private (``_x``) part, or None when no part
    of its path is private: ``seqpart.solver.dynamic_cp._model`` -> ``seqpart.solver.dynamic_cp``."""
    parts = target.split(".")
    private = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
    return ".".join(parts[:private[-1]]) if private else None


def _private_import_violations(modules: dict[str, Path]) -> list[str]:
    """A private module is its package's own: any module inside that package may import it, its
    subpackages included (``seqpart.solver.step`` may import ``seqpart.solver._partition``);
    nothing outside it may (neither ``seqpart.heuristics`` nor a sibling subpackage, e.g.
    ``seqpart.solver.step`` importing ``seqpart.solver.dynamic_cp._model``). What others use
    goes through the package's public modules or its __init__."""
    found = []
    for name, path in modules.items():
        for target in sorted(_imports(name, path)):
            owner = _private_owner(target)
            if owner is not None and name != owner and not name.startswith(owner + "."):
                found.append(f"{name} imports {owner}'s private {target}")
    return found


def test_no_module_imports_a_private_module_from_outside_its_package() -> None:
    assert not _private_import_violations(MODULES)


def test_the_private_module_rule_catches_an_import_from_outside(tmp_path: Path) -> None:
    """The rule can fail: a sibling subpackage's or another package's private module is caught;
    the package's own modules, its subpackages and its __init__ pass."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..dynamic_cp._model import CPInstance\nfrom .._partition import partition\n",
                     encoding="utf-8")
    assert _private_import_violations({"seqpart.solver.step.probe": probe}) == [
        "seqpart.solver.step.probe imports seqpart.solver.dynamic_cp's private "
        "seqpart.solver.dynamic_cp._model"]
    assert _private_import_violations({"seqpart.solver.dynamic_cp.probe": probe}) == []
    (tmp_path / "pkg").mkdir()
    init = tmp_path / "pkg" / "__init__.py"
    init.write_text("from ._partition import partition\n", encoding="utf-8")
    assert _private_import_violations({"seqpart.solver": init}) == []
    outside = tmp_path / "outside.py"
    outside.write_text("from ..solver import _partition\n", encoding="utf-8")
    assert _private_import_violations({"seqpart.heuristics.outside": outside}) == [
        "seqpart.heuristics.outside imports seqpart.solver's private seqpart.solver._partition"]
    assert _private_owner("seqpart.solver.dynamic_cp") is None


def test_modules_folders_and_functions_stay_small() -> None:
    """A module does one thing: at most 500 lines; a folder at most 12 modules (its __init__ aside);
    a function's code at most 100 lines (its docstring aside), so its steps have names."""
    folders: dict[Path, int] = {}
    for name, path in MODULES.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 500, f"{name} has {lines} lines: split it"
        if path.stem != "__init__":
            folders[path.parent] = folders.get(path.parent, 0) + 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # The code, not its docstring: a long Args section hides no steps.
                first = node.body[0]
                documented = isinstance(first, ast.Expr) and isinstance(
                    getattr(first, "value", None), ast.Constant) and isinstance(first.value.value, str)
                start = (first.end_lineno or first.lineno) + 1 if documented and len(node.body) > 1 \
                    else node.lineno
                length = (node.end_lineno or node.lineno) - start + 1
                assert length <= 100 or (name, node.name) in LONG_FUNCTIONS, (
                    f"{name}.{node.name} has {length} lines: name its steps")
    for folder, count in folders.items():
        assert count <= 12, f"{folder.relative_to(ROOT)} holds {count} modules: split it by role"


#: Functions allowed past 100 lines, each with the reason it is one piece.
LONG_FUNCTIONS: set[tuple[str, str]] = set()


def test_heuristic_modules_show_one_public_function() -> None:
    """Each registered heuristic lives in a private module named for it (``_lpt`` defines
    ``lpt``), which exports just that function; the solver's fast paths are reached through
    seqpart.heuristics.kernels, which re-exports no private name."""
    from seqpart.heuristics import HEURISTICS, kernels

    for name, fn in HEURISTICS.items():
        assert fn.__module__ == f"seqpart.heuristics._{name}", (name, fn.__module__)
        module = sys.modules[fn.__module__]
        public = getattr(module, "__all__", None)
        assert public is not None, f"{fn.__module__} has no __all__"
        assert fn.__name__ in public and len(public) <= 2, f"{fn.__module__} exports {public}"
    for name in kernels.__all__:
        if callable(getattr(kernels, name)):
            assert not getattr(kernels, name).__name__.startswith("_"), name


FORK_EACH = """
import importlib, importlib.util, os, sys, traceback
# Core dependencies are loaded once, before forking: what is checked is seqpart's own
# import order, and a fork per module keeps this fast.
for lib in ("numpy", "ortools.sat.python.cp_model"):
    if importlib.util.find_spec(lib.split(".")[0]) is not None:
        importlib.import_module(lib)
assert not [m for m in sys.modules if m.startswith("seqpart")]


def child(name, report=None):
    \"\"\"Fork a process that imports ``name`` first; it writes the seqpart modules it loaded
    to the pipe ``report`` when given.\"\"\"
    pid = os.fork()
    if pid:
        return pid
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
    if report is not None:
        with os.fdopen(report, "w") as out:
            out.write(" ".join(m for m in sys.modules if m.startswith("seqpart")))
    os._exit(0)


# Importing a.b.c first imports a.b first; when a.b's own import loads a.b.c, that is the whole
# story. So each package is imported alone first, then each module its package does not load.
names = sys.argv[1:]
packages = sorted({n.rsplit(".", 1)[0] for n in names if "." in n})
children, pipes = {}, {}
for name in packages:
    read, write = os.pipe()
    children[child(name, write)] = name
    os.close(write)
    pipes[name] = read
loaded = {}
for name, read in pipes.items():
    with os.fdopen(read) as pipe:
        loaded[name] = set(pipe.read().split())
for name in names:
    parent = name.rsplit(".", 1)[0]
    if name not in packages and name not in loaded.get(parent, ()):
        children[child(name)] = name
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
    another module was imported before it (a hidden cycle or order dependency). A module that
    its package's own import loads is checked by importing the package first."""
    names = sorted(n for n in MODULES if not n.endswith("__main__"))
    proc = subprocess.run([sys.executable, "-c", FORK_EACH, *names], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
