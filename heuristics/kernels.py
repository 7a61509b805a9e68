"""The list-level fast paths behind the heuristics, for seqpart.solver and the benchmarks.

Each public heuristic module shows one function with the one signature (``fn(lengths, k, cap=None,
*, costs=None, counts=None, max_count=None) -> list[list[int]]``): that is the user's API. The
solver calls the same algorithms without re-checking its inputs on every call, on sorted orders
and plain lists it has already built, under a work budget or a deadline. Those entry points live
here, one import site, so the heuristic modules keep them private. They take validated input
and return raw bins; nothing here checks a cap or a count for the caller.
"""

from __future__ import annotations

from ._best_fit import _best_fit_lists as best_fit_lists
from ._best_fit import _best_fit_with_room as best_fit_with_room
from ._search_state import _WORK_SECONDS as WORK_SECONDS
from .capped_balance import _capped_balance_lists as capped_balance_lists
from .capped_balance import _fill_empty as fill_empty
from .capped_balance import _repair_lists as repair_lists
from .capped_balance import _repair_step_seconds as repair_step_seconds
from .first_fit import _first_fit_lists as first_fit_lists
from .first_fit import _first_fit_tree as first_fit_tree
from .inputs import argsort_desc, order_desc, prepare
from .karmarkar_karp import _karmarkar_karp_lists as karmarkar_karp_lists
from .local_search import _improve_lists as improve_lists
from .lpt import _lpt_lists as lpt_lists

__all__ = [
    "WORK_SECONDS",
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
