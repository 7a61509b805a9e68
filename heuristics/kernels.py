"""The list-level fast paths behind the heuristics, for seqpart.solver and the benchmarks.

Each public heuristic module shows one function with the one signature (``fn(lengths, k, cap=None,
*, costs=None, counts=None, max_count=None) -> list[list[int]]``): that is the user's API. The
solver calls the same algorithms without re-checking its inputs on every call, on sorted orders
and plain lists it has already built, under a work budget or a deadline. Those entry points live
here, one import site; the heuristic modules themselves are private (``_lpt`` defines ``lpt``
and ``lpt_lists``). They take validated input and return raw bins (the local search and the capped balancer a
result whose fields also say what the search cost and why it stopped); nothing here checks a
cap or a count for the caller.
"""

from __future__ import annotations

from ._best_fit import best_fit_lists, best_fit_with_room
from ._capped_balance import (
    RepairResult,
    capped_balance_lists,
    fill_empty,
    repair_lists,
    repair_step_seconds,
)
from ._first_fit import first_fit_lists, first_fit_tree
from ._karmarkar_karp import karmarkar_karp_lists
from ._local_search import LocalSearchResult, improve_lists
from ._lpt import lpt_lists
from ._search_state import WORK_SECONDS
from .inputs import argsort_desc, order_desc, prepare

__all__ = [
    "WORK_SECONDS",
    "LocalSearchResult",
    "RepairResult",
    "argsort_desc",
    "best_fit_lists",
    "best_fit_with_room",
    "capped_balance_lists",
    "fill_empty",
    "first_fit_lists",
    "first_fit_tree",
    "improve_lists",
    "karmarkar_karp_lists",
    "lpt_lists",
    "order_desc",
    "prepare",
    "repair_lists",
    "repair_step_seconds",
]
