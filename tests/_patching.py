"""Replacing one of partition's steps in a test, wherever partition's phases look it up."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

#: The modules whose globals partition's phases read their step functions from.
SOLVER_MODULES = ("seqpart.solver._partition", "seqpart.solver.engines.heuristic_phase")


def patch_solver(monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> None:
    """Replace ``name`` in partition and in its heuristic phase, wherever it is bound."""
    found = False
    for module_name in SOLVER_MODULES:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)
            found = True
    assert found, f"neither partition nor its heuristic phase uses {name}"
