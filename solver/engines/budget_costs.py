"""The cost model that splits ``partition``'s budget: estimated seconds per step, per item.

Every choice in the heuristic phase compares these estimates with the budget left, so the
choices depend on the sizes and the limit, not on the machine (repeatable plans). The figures
are measured on a 2-core machine and documented beside each one.
"""

from __future__ import annotations

#: Costs used to split the budget, in seconds per item. They are meant for an idle 2-core
#: machine and were measured inside ``partition`` on bench_cpsat's online batches, tokens and
#: attention cost, each step timed against its charge (``python benchmarks/bench_budget.py``).
#: A charge is set near the step's 90th percentile, not its median: a step that runs over its
#: charge pushes the wall clock past the budget, and the safety net's cut makes the plan
#: unrepeatable. KK (its loop sped up ~40% since): 3.0 us/item p50, 4.3 p90 alone (n=1024-2048,
#: k=20-736, CPU time); in partition the p90 of real/charged was 0.92-1.06 at this figure.
KK_SECONDS_PER_ITEM = 4.3e-6
#: The wall-clock safety net fires this long after the work budget's end. The charges sit near
#: each step's 90th percentile: on an idle machine a single step still runs 10-50% over its
#: charge now and then (cache, frequency; bench_budget.py), and a net at the limit itself cut a
#: third to a half of the n=2048 batches of bench_deterministic idle, making those plans
#: unrepeatable. Under load the net
#: still bounds the call, at most this much later.
SAFETY_NET_SLACK = 0.003
#: Karmarkar-Karp's lone merges copy a state of up to k subsets: at large n its cost per item
#: grows with k (measured at load ~1: 30 us/item at n=10^5, k=2483; 12 at k=300; 7-8.5 at
#: n=2048, k=64-512, where the term is damped). It once took 3.2 s under a 1 s limit.
KK_SECONDS_PER_ITEM_BIN = 8e-9
#: Karmarkar-Karp is planned only when its estimate is under this share of the limit.
KK_SHARE = 0.75
#: Under a cap, KK runs before local search (once a valid plan is known) from this many
#: sequences per micro-batch on average; below, after it.
KK_FIRST_ITEMS_PER_BIN = 12
KK_FULL_BIN_TERM_FROM = 20_000


def karmarkar_karp_seconds(n: int, k: int) -> float:
    """Karmarkar-Karp's estimated cost for n items into k bins."""
    damp = min(1.0, n / KK_FULL_BIN_TERM_FROM)
    return n * (KK_SECONDS_PER_ITEM + KK_SECONDS_PER_ITEM_BIN * k * damp)


#: LPT: a heap of k bins, so log2(k) per item on top of a fixed per-item cost (measured in
#: partition at n=2048: 3 ms at k=40, 4-5 ms at k=700; it was charged 3 ms flat). p90 of
#: real/charged 1.1-1.4 at n=256-2048 with 0.9 us; hence 1.05.
LPT_SECONDS_PER_ITEM = 1.05e-6
LPT_SECONDS_PER_ITEM_LOG_BIN = 0.09e-6


#: LPT and the capped balancer with a cost that is not the token count keep two totals per
#: bin (cost balanced, tokens capped): measured 1.8-2.5x their token-only cost inside
#: partition (attention cost, n=1024-2048, k=246-492).
TWO_TOTALS_FACTOR = 2.0


def lpt_seconds(n: int, k: int, by_tokens: bool = True) -> float:
    """LPT's estimated cost for n items into k bins."""
    per_item = LPT_SECONDS_PER_ITEM + LPT_SECONDS_PER_ITEM_LOG_BIN * max(k, 2).bit_length()
    return n * per_item * (1.0 if by_tokens else TWO_TOTALS_FACTOR)


#: The bin-packing load bound: a binary search over [lo, hi], one Martello-Toth L2 per step,
#: each 35-95 us of numpy calls plus ~0.11 us per item (measured at n=64..10^4); the fixed
#: part is set at its p90 inside partition. Charged per item alone, it cost 10x its charge on
#: small batches with attention costs (wide ranges, many steps).
PACKING_BOUND_SECONDS_PER_STEP = 120e-6
PACKING_BOUND_SECONDS_PER_ITEM_STEP = 0.08e-6
PACKING_BOUND_SORT_SECONDS_PER_ITEM = 0.1e-6


def packing_bound_seconds(n: int, steps: int) -> float:
    """The packing bound's estimated cost: the sort, then ``steps`` L2 evaluations."""
    per_step = PACKING_BOUND_SECONDS_PER_STEP + PACKING_BOUND_SECONDS_PER_ITEM_STEP * n
    return PACKING_BOUND_SORT_SECONDS_PER_ITEM * n + steps * per_step


def packing_bound_steps(n: int, seconds: float) -> int:
    """How many L2 evaluations ``seconds`` pays for (after the sort)."""
    per_step = PACKING_BOUND_SECONDS_PER_STEP + PACKING_BOUND_SECONDS_PER_ITEM_STEP * n
    return max(0, int((seconds - PACKING_BOUND_SORT_SECONDS_PER_ITEM * n) / per_step))


#: The capped balancer (best fit, first fit, repair; LPT comes from step 1) on the tight-cap
#: batch: 1.3 us/item with LPT's plan given, 2.4 with its own LPT (bench_scale
#: --calibrate, CPU, best of 3, load ~2; 2.0 and 3.1-5.1 before best fit's loop was written
#: out; 7-8 us/item before best fit was grouped).
CAPPED_BALANCE_SECONDS_PER_ITEM = 2e-6
#: Best fit decreasing into k bins and refilling empty ones: the fallback above
#: CAPPED_BALANCE_UP_TO items, where the capped balancer's first fit and repair are too slow.
#: Measured 0.34-0.46 us/item at n=10^5, 0.44-0.81 at 10^4, 0.64-0.94 at 2048 (load ~2; it
#: was 0.46-0.52 at 10^5 and twice this at 10^6 before its loop was written out).
PACK_SECONDS_PER_ITEM = 1.0e-6
CAPPED_BALANCE_UP_TO = 20_000
#: First fit decreasing with the max-tree: 0.66-1.70 us/item at n=2048-10^5 (bench_scale
#: --calibrate, load ~2.8; 0.79-1.84 at load ~2 before its tree updates stopped at the first
#: unchanged ancestor, which halved it at n=10^5-10^6).
FFD_SECONDS_PER_ITEM = 1.5e-6
#: Building local search's state (arrays, item types) before its first step.
SEARCH_SETUP_SECONDS_PER_ITEM = 1.5e-6
#: Checking the input, merging items, the bounds, and checking and assembling the plan:
#: 0.23-0.53 us/item measured at n=2048-10^5 (load ~2; 0.30-0.42 before the plan's assembly
#: was vectorised), kept above for the offers' checks and the count bound.
FIXED_SECONDS_PER_ITEM = 0.75e-6


def fallback_cost_seconds(n: int, by_tokens: bool = True) -> float:
    """What the fallback that always exists costs at this size."""
    if n <= CAPPED_BALANCE_UP_TO:
        return CAPPED_BALANCE_SECONDS_PER_ITEM * n * (1.0 if by_tokens else TWO_TOTALS_FACTOR)
    return PACK_SECONDS_PER_ITEM * n
