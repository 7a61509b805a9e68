"""Fast partitioning heuristics and lower bounds, one algorithm per module.

Every heuristic has the signature ``fn(lengths, k, cap=None, *, costs=None, counts=None,
max_count=None) -> list[list[int]]`` and returns exactly k lists of indices (first-fit and
first-fit decreasing also take ``k=None`` and open bins as needed). Their output is *raw*: a
balancing heuristic may break the cap and a packing one may leave bins empty, which is exactly
what the benchmarks measure. Use :func:`seqpart.solver.partition` for a plan that is checked.

``costs`` is the balancing objective per sequence (default: the token count), ``counts`` how many
samples an item stands for (grouped sequences), ``max_count`` a per-bin sample limit (equal sizes).
"""

from __future__ import annotations

from collections.abc import Callable

from ._capped_balance import capped_balance
from ._first_fit import first_fit
from ._first_fit_decreasing import first_fit_decreasing
from ._karmarkar_karp import karmarkar_karp
from ._local_search import improve, local_search
from ._lpt import lpt
from .bounds import (
    load_lower_bound,
    load_lower_bound_packing,
    min_bins_l1,
    min_bins_l2,
    min_bins_lower_bound,
)
from .trainer_baselines import TRAINER_SCHEDULERS, get_trainer_scheduler

Heuristic = Callable[..., list[list[int]]]

HEURISTICS: dict[str, Heuristic] = {
    "lpt": lpt,
    "karmarkar_karp": karmarkar_karp,
    "first_fit": first_fit,
    "first_fit_decreasing": first_fit_decreasing,
    "capped_balance": capped_balance,
    "local_search": local_search,
}


def get(name: str) -> Heuristic:
    """The heuristic registered under ``name`` (see ``HEURISTICS``)."""
    try:
        return HEURISTICS[name]
    except KeyError:
        raise ValueError(
            f"unknown heuristic {name!r}: choose one of {', '.join(sorted(HEURISTICS))}"
        ) from None


__all__ = [
    "HEURISTICS",
    "TRAINER_SCHEDULERS",
    "Heuristic",
    "capped_balance",
    "first_fit",
    "first_fit_decreasing",
    "get",
    "get_trainer_scheduler",
    "improve",
    "karmarkar_karp",
    "load_lower_bound",
    "load_lower_bound_packing",
    "local_search",
    "lpt",
    "min_bins_l1",
    "min_bins_l2",
    "min_bins_lower_bound",
]
