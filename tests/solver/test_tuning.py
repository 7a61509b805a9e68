"""The tuned shares and rates live in one table, ``seqpart.solver.tuning``: no other module
defines one, and each in the table is ``Final`` with a ``#:`` comment saying how it was measured."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "solver" / "tuning.py"
#: The package's source folders (the namespace layout maps seqpart.solver to solver/ etc.).
FOLDERS = (ROOT / "solver", ROOT / "heuristics")
#: A tuned share or rate, by its name: ``KK_SHARE``, ``OPS_PER_SECOND``, ``KK_SECONDS_PER_ITEM``.
TUNED = re.compile(r"[A-Z0-9_]*(_SHARE|_RATE|_PER_SECOND|_SECONDS_PER_[A-Z0-9_]*)")


def _assigned(node: ast.AST) -> Iterator[tuple[int, str, ast.AST]]:
    """(line, name, statement) of each name bound by an assignment at module or class level
    (plain, annotated or augmented, tuples unpacked), at any depth of ``if``/``try`` blocks;
    a function's locals are not constants and are skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        targets: list[ast.expr] = []
        if isinstance(child, ast.Assign):
            targets = child.targets
        elif isinstance(child, (ast.AnnAssign, ast.AugAssign)):
            targets = [child.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    yield child.lineno, leaf.id, child
        yield from _assigned(child)


def misplaced(paths: list[Path]) -> list[str]:
    """Each tuned share or rate that a module other than the table defines."""
    found = []
    for path in paths:
        if path.resolve() == TABLE:
            continue
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        for line, name, _ in _assigned(ast.parse(path.read_text(encoding="utf-8"))):
            if TUNED.fullmatch(name):
                found.append(f"{where}:{line} defines {name}: define it in solver/tuning.py")
    return found


def undocumented(source: str) -> list[str]:
    """Each constant of a table's ``source`` that is not ``Final``, has no ``#:`` comment on the
    line above it, or is defined twice."""
    lines = source.splitlines()
    found, seen = [], set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            continue
        names = [name for _, name, _ in _assigned(ast.Module(body=[node], type_ignores=[]))]
        label = ", ".join(names)
        annotation = node.annotation if isinstance(node, ast.AnnAssign) else None
        if isinstance(annotation, ast.Subscript):
            annotation = annotation.value
        if not (isinstance(annotation, ast.Name) and annotation.id == "Final"):
            found.append(f"{label} (line {node.lineno}) is not annotated Final")
        if node.lineno < 2 or not lines[node.lineno - 2].startswith("#:"):
            found.append(f"{label} (line {node.lineno}) has no #: comment directly above it")
        found += [f"{name} is defined twice" for name in names if name in seen]
        seen.update(names)
    return found


def _package_modules() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in folder.rglob("*.py"))


def test_no_module_but_the_table_defines_a_share_or_rate() -> None:
    assert len(_package_modules()) > 50  # the package was found
    found = misplaced(_package_modules())
    assert not found, "\n".join(found)


def test_every_constant_of_the_table_is_final_and_documented() -> None:
    source = TABLE.read_text(encoding="utf-8")
    found = undocumented(source)
    assert not found, "\n".join(found)
    defined = {name for _, name, _ in _assigned(ast.parse(source))}
    assert len(defined) >= 50 and sum(bool(TUNED.fullmatch(name)) for name in defined) >= 50


def test_the_table_imports_nothing_from_seqpart() -> None:
    """The table sits below every solver module: it may import typing, never seqpart."""
    for node in ast.walk(ast.parse(TABLE.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert not node.level and node.module in ("__future__", "typing"), ast.unparse(node)
        assert not isinstance(node, ast.Import), ast.unparse(node)


def test_the_rules_can_fail(tmp_path: Path) -> None:
    """A share at module level, a rate in a class, one under an ``if`` and an annotated one are
    caught outside the table; a function's local is not a constant. In a table, a constant
    without ``Final`` or without its ``#:`` comment is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\n"
        "NEW_SHARE = 0.5\n"
        "class Phase:\n"
        "    SCAN_RATE: float = 2.0\n"
        "if sys.platform:\n"
        "    A, ITEMS_PER_SECOND = 1, 2\n"
        "WALL_SECONDS_PER_ITEM: float = 1e-6\n"
        "ORDER_WORK = 3\n"
        "def f() -> float:\n"
        "    LOCAL_SHARE = 0.1\n"
        "    return LOCAL_SHARE\n",
        encoding="utf-8")
    assert [entry.split(" defines ")[1].split(":")[0] for entry in misplaced([probe])] == [
        "NEW_SHARE", "SCAN_RATE", "ITEMS_PER_SECOND", "WALL_SECONDS_PER_ITEM"]
    table = ("from typing import Final\n"
             "#: Measured: fine.\n"
             "GOOD_SHARE: Final[float] = 0.5\n"
             "#: Not Final.\n"
             "LOOSE_SHARE: float = 0.5\n"
             "\n"
             "BARE_RATE: Final = 2.0\n"
             "#: Again.\n"
             "GOOD_SHARE: Final[float] = 0.6\n")
    assert undocumented(table) == [
        "LOOSE_SHARE (line 5) is not annotated Final",
        "BARE_RATE (line 7) has no #: comment directly above it",
        "GOOD_SHARE is defined twice",
    ]
