"""The cost model that splits ``partition``'s budget: estimated seconds per step, per item.

Every choice in the heuristic phase compares these estimates with the budget left, so the
choices depend on the sizes and the limit, not on the machine (repeatable plans). The figures
were measured on a 2-core machine; they and how they were measured are in
:mod:`~seqpart.solver.tuning`, the one table of tuned shares and rates.
"""

from __future__ import annotations

from ..tuning import (
    CAPPED_BALANCE_SECONDS_PER_ITEM,
    KK_SECONDS_PER_ITEM,
    KK_SECONDS_PER_ITEM_BIN,
    LPT_SECONDS_PER_ITEM,
    LPT_SECONDS_PER_ITEM_LOG_BIN,
    PACK_SECONDS_PER_ITEM,
    PACKING_BOUND_SECONDS_PER_ITEM_STEP,
    PACKING_BOUND_SECONDS_PER_STEP,
    PACKING_BOUND_SORT_SECONDS_PER_ITEM,
    TWO_TOTALS_FACTOR,
)

# Handed on to partition, which reads its per-item charges from this module.
from ..tuning import FFD_SECONDS_PER_ITEM as FFD_SECONDS_PER_ITEM
from ..tuning import FIXED_SECONDS_PER_ITEM as FIXED_SECONDS_PER_ITEM
from ..tuning import SEARCH_SETUP_SECONDS_PER_ITEM as SEARCH_SETUP_SECONDS_PER_ITEM

#: The wall-clock safety net fires this long after the work budget's end. The charges sit near
#: each step's 90th percentile: on an idle machine a single step still runs 10-50% over its
#: charge now and then (cache, frequency; bench_budget.py), and a net at the limit itself cut a
#: third to a half of the n=2048 batches of bench_deterministic idle, making those plans
#: unrepeatable. Under load the net
#: still bounds the call, at most this much later.
SAFETY_NET_SLACK = 0.003
#: Under a cap, KK runs before local search (once a valid plan is known) from this many
#: sequences per micro-batch on average; below, after it.
KK_FIRST_ITEMS_PER_BIN = 12
KK_FULL_BIN_TERM_FROM = 20_000


def karmarkar_karp_seconds(n: int, k: int) -> float:
    """Karmarkar-Karp's estimated cost for n items into k bins."""
    damp = min(1.0, n / KK_FULL_BIN_TERM_FROM)
    return n * (KK_SECONDS_PER_ITEM + KK_SECONDS_PER_ITEM_BIN * k * damp)


def lpt_seconds(n: int, k: int, by_tokens: bool = True) -> float:
    """LPT's estimated cost for n items into k bins."""
    per_item = LPT_SECONDS_PER_ITEM + LPT_SECONDS_PER_ITEM_LOG_BIN * max(k, 2).bit_length()
    return n * per_item * (1.0 if by_tokens else TWO_TOTALS_FACTOR)


def packing_bound_seconds(n: int, steps: int) -> float:
    """The packing bound's estimated cost: the sort, then ``steps`` L2 evaluations."""
    per_step = PACKING_BOUND_SECONDS_PER_STEP + PACKING_BOUND_SECONDS_PER_ITEM_STEP * n
    return PACKING_BOUND_SORT_SECONDS_PER_ITEM * n + steps * per_step


def packing_bound_steps(n: int, seconds: float) -> int:
    """How many L2 evaluations ``seconds`` pays for (after the sort)."""
    per_step = PACKING_BOUND_SECONDS_PER_STEP + PACKING_BOUND_SECONDS_PER_ITEM_STEP * n
    return max(0, int((seconds - PACKING_BOUND_SORT_SECONDS_PER_ITEM * n) / per_step))


#: Above this many items the fallback is best fit decreasing (``PACK_SECONDS_PER_ITEM``), where
#: the capped balancer's first fit and repair are too slow.
CAPPED_BALANCE_UP_TO = 20_000


def fallback_cost_seconds(n: int, by_tokens: bool = True) -> float:
    """What the fallback that always exists costs at this size."""
    if n <= CAPPED_BALANCE_UP_TO:
        return CAPPED_BALANCE_SECONDS_PER_ITEM * n * (1.0 if by_tokens else TWO_TOTALS_FACTOR)
    return PACK_SECONDS_PER_ITEM * n
