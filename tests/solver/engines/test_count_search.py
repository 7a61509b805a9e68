"""The count search: the LP bound on the count, the LP-guided dive, and their use in partition
and the drop-ins' counter."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import first_fit_decreasing, min_bins_lower_bound
from seqpart.solver import SolverOptions, partition
from seqpart.solver.dropins.balance import _count_with_path, get_minimum_num_micro_batch_size
from seqpart.solver.engines.count_lp import PatternLP, knapsack_pass
from seqpart.solver.engines.count_search import NOTE_COUNT_LP, search_count
from seqpart.solver.options import Budget

from _brute import brute_force_min_max

CAP = 1000
STRICT = SolverOptions(timing="strict")  # counted work only: the same steps on any machine


def triplets(bins: int, seed: int) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Falkenauer's triplet recipe (sizes in tenths): three items in (250, 500) that fill a
    bin of 1000 exactly, so the optimum is n/3 with every bin full. Returns the shuffled
    sizes and the index triples of that packing."""
    rng = random.Random(seed)
    sizes: list[int] = []
    for _ in range(bins):
        first = rng.randint(380, 490)
        second = rng.randint(max(251, CAP - first - 499), (CAP - first) // 2)
        sizes += [first, second, CAP - first - second]
    order = list(range(len(sizes)))
    rng.shuffle(order)
    where = {old: new for new, old in enumerate(order)}
    groups = [tuple(where[3 * b + j] for j in range(3)) for b in range(bins)]
    return [sizes[i] for i in order], groups


def _valid(bins: list[list[int]], sizes: list[int], cap: int) -> bool:
    flat = sorted(i for b in bins for i in b)
    return flat == list(range(len(sizes))) and all(sum(sizes[i] for i in b) <= cap for b in bins)


def test_triplets_reach_and_prove_n_over_3() -> None:
    sizes, _ = triplets(20, seed=1)
    ffd = first_fit_decreasing(sizes, None, CAP)
    assert len(ffd) > 20  # first fit decreasing leaves bins part-empty
    found = search_count(sizes, CAP, min_bins_lower_bound(sizes, CAP), ffd, Budget(10**9))
    assert found.bins is not None and len(found.bins) == 20 == found.lower_bound
    assert _valid(found.bins, sizes, CAP)


def test_partition_finds_the_optimal_count_with_every_option() -> None:
    sizes, packing = triplets(16, seed=2)
    plan = partition(sizes, k=None, cap=CAP, time_limit=1.0, options=STRICT)
    assert (plan.k, plan.k_status) == (16, "optimal")
    # Attention cost (the count is about tokens), pairs that must share a micro-batch, and
    # two sequences over the cap that go alone: the same count of the rest.
    groups = [list(t[:2]) for t in packing[:5]]
    plan = partition(sizes + [1500, 1200], k=None, cap=CAP, time_limit=1.0, cost="attention",
                     groups=groups, oversize="alone", options=STRICT)
    assert (plan.k, plan.k_status) == (18, "optimal")


def test_the_lp_proves_a_count_the_counting_bounds_miss() -> None:
    # L1 = L2 = 3, yet no 3 bins of 19 hold these (the LP refutes it): 4 is optimal.
    lengths = [10, 7, 6, 6, 12, 10, 6]
    assert min_bins_lower_bound(lengths, 19) == 3
    plan = partition(lengths, k=None, cap=19, time_limit=1.0, options=STRICT)
    assert (plan.k, plan.k_status, plan.k_lower_bound) == (4, "optimal", 4)
    assert NOTE_COUNT_LP in plan.notes


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=7), st.integers(12, 20))
def test_bound_never_above_the_optimum_and_bins_valid(lengths: list[int], cap: int) -> None:
    optimum = next(k for k in range(1, len(lengths) + 1)
                   if brute_force_min_max(lengths, k, cap) is not None)
    ffd = first_fit_decreasing(lengths, None, cap)
    found = search_count(lengths, cap, 1, ffd, Budget(10**8))
    assert found.lower_bound <= optimum <= len(found.bins or ffd) <= len(ffd)
    assert found.bins is not None and _valid(found.bins, lengths, cap)


def test_lp_bound_and_waste_limit() -> None:
    # Sizes 6, 5, 4 (two of each) in bins of 10: 6+4 twice and 5+5, three bins.
    lp = PatternLP([6, 5, 4], 10)
    assert lp.solve([2, 2, 2], Budget(10**8)).bound == 3
    lp.set_waste(0)  # only exactly full bins: still three
    result = lp.solve([2, 2, 2], Budget(10**8))
    assert result.bound == 3 and result.converged
    # A third 6 has no full bin; the LP's patterns may cover more than the demand, so it
    # only sees the total (the dive's waste count refutes the rest).
    assert lp.solve([3, 2, 2], Budget(10**8)).bound == 4


def test_small_budget_still_returns_a_count_at_most_ffd() -> None:
    sizes, _ = triplets(40, seed=3)
    plan = partition(sizes, k=None, cap=CAP, time_limit=0.02)
    assert plan.k <= len(first_fit_decreasing(sizes, None, CAP))


def test_dropin_counter_uses_the_count_search() -> None:
    sizes, _ = triplets(12, seed=4)
    count, path = _count_with_path(sizes, CAP)
    assert (count, path) == (12, "count-search")
    assert get_minimum_num_micro_batch_size(sizes, CAP) == 12  # repeatable


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(-5, 20)),
                min_size=1, max_size=6), st.integers(1, 30))
def test_the_knapsack_pass_finds_the_best_value_at_every_exact_load(
        chunks_in: list[tuple[int, int, int]], cap: int) -> None:
    """The in-place pass against every subset of the chunks: dp[c] is the best value of a
    subset of load exactly c, and its ``taken`` marks walk back to such a subset."""
    weights = [w for _, _, w in chunks_in]
    chunks = [(i, copies, size * copies) for i, (size, copies, _) in enumerate(chunks_in)]
    chunks = [c for c in chunks if c[2] <= cap]
    dp = np.full(cap + 1, -(1 << 62), dtype=np.int64)
    dp[0] = 0
    taken = knapsack_pass(dp, chunks, weights, cap)
    best: dict[int, int] = {}
    for mask in range(1 << len(chunks)):
        picked = [c for j, c in enumerate(chunks) if mask >> j & 1]
        load = sum(size for _, _, size in picked)
        if load <= cap:
            value = sum(weights[i] * copies for i, copies, _ in picked)
            best[load] = max(best.get(load, value), value)
    for load in range(cap + 1):
        assert (int(dp[load]) if dp[load] > -(1 << 61) else None) == best.get(load)
    for load, value in best.items():  # walk the choice back from each reachable load
        c, total = load, 0
        for (i, copies, size), better in zip(reversed(chunks), reversed(taken), strict=True):
            if c >= size and better[c - size]:
                total, c = total + weights[i] * copies, c - size
        assert c == 0 and total == value
