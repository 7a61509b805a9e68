"""The cost model that splits ``partition``'s budget: estimated seconds per step, per item.

Every choice in the heuristic phase compares these estimates with the budget left, so the
choices depend on the sizes and the limit, not on the machine (repeatable plans). The figures
are measured on a 2-core machine and documented beside each one.
"""

from __future__ import annotations

#: Costs used to split the budget, in seconds per item, measured with
#: ``python benchmarks/bench_scale.py --calibrate`` (CPU time). They are meant for an idle
#: 2-core machine: CPU time still grows under load (shared caches and cores), so figures taken
#: on the loaded shared machine were scaled back towards the idle ones. KK: 6.2-8.4 us/item
#: at n=1024-2048 (k=8-400, best of 3, otherwise idle); a lower figure let it eat the time
#: LPT's repair and the fallback needed at 20 ms.
KK_SECONDS_PER_ITEM = 7e-6
#: Karmarkar-Karp's lone merges copy a state of up to k subsets: at large n its cost per item
#: grows with k (measured at load ~1: 30 us/item at n=10^5, k=2483; 12 at k=300; 7-8.5 at
#: n=2048, k=64-512, where the term is damped). It once took 3.2 s under a 1 s limit.
KK_SECONDS_PER_ITEM_BIN = 8e-9
#: Karmarkar-Karp is planned only when its estimate is under this share of the limit.
KK_SHARE = 0.75
KK_FULL_BIN_TERM_FROM = 20_000


def karmarkar_karp_seconds(n: int, k: int) -> float:
    """Karmarkar-Karp's estimated cost for n items into k bins."""
    damp = min(1.0, n / KK_FULL_BIN_TERM_FROM)
    return n * (KK_SECONDS_PER_ITEM + KK_SECONDS_PER_ITEM_BIN * k * damp)


LPT_SECONDS_PER_ITEM = 1.5e-6
#: The capped balancer (best fit, first fit, repair; LPT comes from step 1) on the tight-cap
#: batch of issue 10: 1.3 us/item with LPT's plan given, 2.4 with its own LPT (bench_scale
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
#: The bin-packing load bound: a binary search, one Martello-Toth L2 (sort-free) per step.
PACKING_BOUND_SECONDS_PER_ITEM = 0.5e-6
#: Checking the input, merging items, the bounds, and checking and assembling the plan:
#: 0.23-0.53 us/item measured at n=2048-10^5 (load ~2; 0.30-0.42 before the plan's assembly
#: was vectorised), kept above for the offers' checks and the count bound.
FIXED_SECONDS_PER_ITEM = 0.75e-6


def fallback_cost_seconds(n: int) -> float:
    """What the fallback that always exists costs at this size."""
    if n <= CAPPED_BALANCE_UP_TO:
        return CAPPED_BALANCE_SECONDS_PER_ITEM * n
    return PACK_SECONDS_PER_ITEM * n
