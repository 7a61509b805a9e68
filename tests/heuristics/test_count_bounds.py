"""The Fekete-Schepers bin-count bound: valid (never above the optimum), and stronger than L2
where it was built to be."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpart.heuristics import min_bins_lower_bound
from seqpart.heuristics.bounds import min_bins_fekete_schepers

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _min_bins(sizes: list[int], cap: int) -> int:
    """The optimal number of bins, by trying every assignment (n <= 7)."""
    n = len(sizes)
    for k in range(1, n + 1):
        for assign in itertools.product(range(k), repeat=n):
            loads = [0] * k
            for x, b in zip(sizes, assign, strict=True):
                loads[b] += x
            if max(loads) <= cap:
                return k
    return n


def _by_definition(sizes: list[int], cap: int, max_k: int) -> int:
    """The same bound, written out from its definition with fractions."""
    from fractions import Fraction

    best = -(-sum(sizes) // cap)  # L1
    for eps in {0, *(x for x in sizes if 2 * x <= cap)}:
        u = [cap if x > cap - eps else 0 if x < eps else x for x in sizes]
        for k in range(1, max_k + 1):
            total = sum(
                Fraction(x) if ((k + 1) * x) % cap == 0 else Fraction(((k + 1) * x) // cap * cap, k)
                for x in u
            )
            best = max(best, -(-total // cap))
    return int(best)


@FAST
@given(st.lists(st.integers(1, 60), min_size=1, max_size=7), st.integers(60, 100))
def test_never_above_the_optimum(sizes: list[int], cap: int) -> None:
    assert min_bins_fekete_schepers(sizes, cap) <= _min_bins(sizes, cap)


@FAST
@given(st.lists(st.integers(1, 100), min_size=1, max_size=40), st.integers(100, 130),
       st.integers(1, 4))
def test_matches_its_definition(sizes: list[int], cap: int, max_k: int) -> None:
    assert min_bins_fekete_schepers(sizes, cap, max_k) == _by_definition(sizes, cap, max_k)


def test_thirds_beat_l2() -> None:
    # Five items over a third of the cap: at most two per bin, so three bins; L1 and L2 see only
    # the token total (two bins), the k=2 function sees the thirds.
    sizes = [34] * 5 + [30]
    assert min_bins_lower_bound(sizes, 100) == 2
    assert min_bins_fekete_schepers(sizes, 100) == 3 == _min_bins(sizes, 100)


def test_rejects_items_over_the_cap_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at most cap"):
        min_bins_fekete_schepers([5, 11], 10)
    with pytest.raises(ValueError):
        min_bins_fekete_schepers([5], 0)
    with pytest.raises(ValueError):
        min_bins_fekete_schepers([5], 10, 0)


def test_huge_values_stay_exact() -> None:
    cap = 2**61
    sizes = np.array([2**60 + 1, 2**60 + 1, 2**60 + 1], dtype=np.int64)
    # The scaled sums would overflow int64: the bound falls back to L1 (2), still valid (the
    # optimum is 3: each item is over half the cap).
    assert min_bins_fekete_schepers(sizes, cap) == 2


#: Small capped splits for brute force: lengths, k, cost a*l + b*l*l, and how far the cap
#: sits above the least that fits (a tight cap: where the capped bounds rise).
SMALL_CAPPED = (st.lists(st.integers(1, 40), min_size=2, max_size=7), st.integers(1, 3),
                st.integers(0, 30), st.integers(0, 3), st.integers(0, 4))


@settings(max_examples=200, deadline=None)
@given(*SMALL_CAPPED)
def test_the_token_room_bound_never_exceeds_the_optimum(
    lengths: list[int], k: int, a: int, b: int, extra: int
) -> None:
    """Brute force: for every feasible split into k micro-batches under the cap, the largest
    load is at least the bound (costs a*l + b*l*l, or tokens when both are 0)."""
    from seqpart.heuristics.bounds import load_lower_bound, load_lower_bound_token_room

    from _brute import brute_force_min_max

    if k > len(lengths):
        return
    costs = [a * x + b * x * x for x in lengths] if a or b else list(lengths)
    cap = max(max(lengths), -(-sum(lengths) // k)) + extra
    optimum = brute_force_min_max(lengths, k, cap, costs)
    bound = load_lower_bound_token_room(lengths, costs, k, cap, load_lower_bound(costs, k))
    assert optimum is None or bound <= optimum


def test_the_token_room_bound_closes_most_of_an_attention_gap_under_a_tight_cap() -> None:
    """500 long-tail lengths at their smallest count under a 64k cap (tokens fill 99.3%): the
    cost-only bound sits 14% under the best plan known; this one within 2.3% of it."""
    from seqpart.heuristics.bounds import load_lower_bound, load_lower_bound_token_room

    rng = np.random.default_rng(0)
    x = np.clip(np.exp(rng.normal(np.log(3000), 1.0, 500)), 200, 32000).astype(np.int64)
    costs = 24576 * x + x * x
    lb = load_lower_bound(costs, 36)
    bound = load_lower_bound_token_room(x, costs, 36, 65536, lb)
    from seqpart.solver import SolverOptions, partition  # a valid plan to hold it against

    plan = partition(x, 36, 65536, cost="attention", time_limit=0.1,
                     options=SolverOptions(deterministic=True))
    assert lb * 1.1 < plan.max_load and bound <= plan.max_load < bound * 1.03
    assert plan.lower_bound >= bound  # partition reports it


@settings(max_examples=300, deadline=None)
@given(*SMALL_CAPPED, st.integers(0, 50))  # and a per-sequence cost
def test_the_full_pair_bound_never_exceeds_the_optimum(
    lengths: list[int], k: int, a: int, b: int, extra: int, c: int
) -> None:
    """Brute force: for every feasible split into k micro-batches under the cap, the largest
    load is at least the bound (costs a*l + b*l*l + c, or tokens when a and b are 0)."""
    from seqpart.heuristics.bounds import load_lower_bound_full_pair

    from _brute import brute_force_min_max

    if k > len(lengths):
        return
    costs = [a * x + b * x * x + c for x in lengths] if a or b else list(lengths)
    cap = max(max(lengths), -(-sum(lengths) // k)) + extra
    optimum = brute_force_min_max(lengths, k, cap, costs)
    bound = load_lower_bound_full_pair(lengths, costs, k, cap)
    assert optimum is None or bound <= optimum


def test_the_full_pair_bound_sees_two_long_sequences_in_a_full_micro_batch() -> None:
    """3 micro-batches of at most 100 tokens hold 4 sequences of 40 and 130 of 1 (290 tokens,
    so each holds at least 90). Costs 10*l + l^2: the cost-only bound is two long sequences,
    4,000; the micro-batch holding them also holds 10 more tokens, so 4,110, which a plan
    reaches (optimal)."""
    from seqpart.heuristics.bounds import load_lower_bound, load_lower_bound_full_pair
    from seqpart.solver import partition

    lengths = [40] * 4 + [1] * 130
    costs = [10 * x + x * x for x in lengths]
    assert load_lower_bound(costs, 3) == 4000
    bound = load_lower_bound_full_pair(lengths, costs, 3, 100)
    plan = partition(lengths, 3, 100, cost=(10, 1), time_limit=1.0)
    assert bound == 4110 == plan.max_load == plan.lower_bound and plan.status == "optimal"
    assert load_lower_bound_full_pair(lengths, costs, 3, 1000) == 4000  # no token forced: the pair
    assert load_lower_bound_full_pair([5, 6], [5, 6], 2, 10) == 0  # n <= k


def test_the_full_pair_bound_when_several_micro_batches_must_pair() -> None:
    """23 long sequences in 21 micro-batches nearly full in tokens: two micro-batches hold two
    long ones each (or one holds three), and together they hold what the other 19 cannot."""
    from seqpart.heuristics.bounds import load_lower_bound, load_lower_bound_full_pair

    lengths = [3000] * 23 + [100] * 650  # 134,000 tokens; 21 micro-batches of at most 6,400
    costs = [100 * x + x * x for x in lengths]  # rho = 200 per token (the short ones)
    bound = load_lower_bound_full_pair(lengths, costs, 21, 6400)
    # the two pairing micro-batches hold >= 134,000 - 19 * 6,400 = 12,400 tokens together:
    # their loads sum to at least 4 * (9,300,000 - 200 * 3,000) + 200 * 12,400
    assert bound == (4 * 8_700_000 + 200 * 12_400) // 2 == 18_640_000
    assert load_lower_bound(costs, 21) == 18_600_000  # two long sequences alone
