"""seqpart: capped micro-batch and step plans for variable-length sequences.

``from seqpart import partition, plan_step, Cost`` works: every name of the front door
:mod:`seqpart.solver` (its ``__all__``) is reachable here too. They are loaded on first use
(PEP 562), so ``import seqpart.heuristics`` alone still does not load the solver.

This file is installed as the top-level ``seqpart`` package (``package-dir`` in
pyproject.toml maps ``seqpart`` here): the repository keeps ``solver/`` and ``heuristics/`` as
its top-level folders, and ``seqpart.solver`` / ``seqpart.heuristics`` are mapped to them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ loads them
    from seqpart.solver import (  # noqa: F401
        Cost,
        SolverOptions,
        partition,
        plan_global,
        plan_step,
    )

_SUBPACKAGES = ("solver", "heuristics")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"seqpart.{name}")
    solver = importlib.import_module("seqpart.solver")
    if name == "__all__":
        return list(solver.__all__)
    if name in solver.__all__:
        return getattr(solver, name)
    raise AttributeError(f"module 'seqpart' has no attribute {name!r}; the API is in "
                         "seqpart.solver (see its docstring) and seqpart.heuristics")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBPACKAGES, *importlib.import_module("seqpart.solver").__all__})
