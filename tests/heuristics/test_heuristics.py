"""Every heuristic: exactly k bins, every index once; the capped ones also respect the cap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart import heuristics
from seqpart.heuristics import (
    HEURISTICS,
    capped_balance,
    first_fit,
    first_fit_decreasing,
    improve,
    karmarkar_karp,
    load_lower_bound,
    load_lower_bound_packing,
    min_bins_l1,
    min_bins_l2,
    min_bins_lower_bound,
)
from seqpart.heuristics.bounds import packing_bound
from seqpart.solver import find_violations

from _brute import brute_force_min_max

SEED = [8, 7, 6, 5, 4]


def test_seed_counterexample_first_fit_and_kk() -> None:
    # First-fit needs 2 micro-batches under cap 15 ...
    assert len(first_fit(SEED, None, 15)) == 2
    # ... but Karmarkar-Karp with k=2 balances to 16/14 and breaks the cap.
    kk = karmarkar_karp(SEED, 2)
    assert sorted(sum(SEED[i] for i in b) for b in kk) == [14, 16]
    assert find_violations(kk, SEED, 2, 15).over_cap_bins == 1
    # The capped balancer finds the 15/15 split.
    assert sorted(sum(SEED[i] for i in b) for b in capped_balance(SEED, 2, 15)) == [15, 15]


def test_first_fit_into_more_bins_than_needed_leaves_them_empty() -> None:
    lengths = [10, 10, 10, 1, 1]
    bins = first_fit(lengths, 4, 31)
    assert [len(b) for b in bins] == [4, 1, 0, 0]
    assert find_violations(bins, lengths, 4, 31).empty_bins == 2
    assert find_violations(capped_balance(lengths, 4, 31), lengths, 4, 31).ok


def test_first_fit_decreasing_count() -> None:
    lengths = [2, 2, 5, 5, 4, 4]
    assert len(first_fit_decreasing(lengths, None, 8)) == 3
    assert len(first_fit(lengths, None, 8)) == 4  # arrival order wastes room: 2,2,4 | 5 | 5 | 4


def test_karmarkar_karp_equal_size() -> None:
    lengths = [9, 8, 7, 6, 5, 4, 3, 2]
    bins = karmarkar_karp(lengths, 4, max_count=2)
    assert [len(b) for b in bins] == [2, 2, 2, 2]


def test_registry() -> None:
    assert set(HEURISTICS) == {
        "lpt",
        "karmarkar_karp",
        "first_fit",
        "first_fit_decreasing",
        "capped_balance",
        "local_search",
    }
    assert heuristics.get("lpt") is heuristics.lpt


def test_load_lower_bound() -> None:
    assert load_lower_bound(SEED, 2) == 15  # ceil(30 / 2)
    assert load_lower_bound([10, 9, 1], 2) == 10  # l_max
    assert load_lower_bound([5, 5, 5], 2) == 10  # l_k + l_{k+1}
    # generalisation with t = 2: among the 5 largest some bin holds 3: 4+4+4
    assert load_lower_bound([4, 4, 4, 4, 4], 2) == 12
    assert load_lower_bound([9, 1, 1, 1], 2, max_count=2) == 10  # c_1 + smallest


def test_packing_bound_sees_what_counting_misses() -> None:
    # [5,3,2,2] into 2: counting gives max(ceil(12/2), 5, 3+2) = 6, but no two bins of 6 hold
    # these (5 needs a bin, 3+2+2 = 7): L2 at capacity 6 asks for 3 bins, so the optimum is 7.
    assert load_lower_bound([5, 3, 2, 2], 2) == 6
    assert load_lower_bound_packing([5, 3, 2, 2], 2, 6, 12) == 7
    assert load_lower_bound_packing([5, 3, 2, 2], 2, 6, 7) == 7
    assert load_lower_bound_packing([4, 4, 4], 3, 4, 9) == 4  # already tight: unchanged


def test_bin_count_bounds() -> None:
    assert min_bins_l1([5, 5, 5], 10) == 2
    # three items over half the cap need three bins; L1 says only two
    assert min_bins_l1([6, 6, 6], 12) == 2
    assert min_bins_l2([6, 6, 6], 11) == 3
    assert min_bins_lower_bound([6, 6, 6, 1], 11) == 3


def test_improve_keeps_constraints_and_never_worsens() -> None:
    lengths = [9, 9, 1, 1, 1, 1]
    start = [[0, 1], [2, 3, 4, 5]]
    better = improve(lengths, start, cap=12)
    loads = [sum(lengths[i] for i in b) for b in better]
    assert max(loads) <= 18 and all(t <= 12 for t in loads)
    assert find_violations(better, lengths, 2, 12).ok


lengths_st = st.lists(st.integers(1, 50), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, data=st.data())
def test_every_heuristic_returns_k_bins_covering_each_index_once(
    lengths: list[int], data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, len(lengths)))
    cap = data.draw(st.one_of(st.none(), st.integers(max(lengths), 3 * max(lengths) + 10)))
    for name, fn in HEURISTICS.items():
        bins = fn(lengths, k, cap)
        found = find_violations(bins, lengths, k, cap)
        assert not found.wrong_bin_count and not found.missing and not found.duplicated, name
        if name in ("capped_balance", "local_search", "lpt", "karmarkar_karp"):
            assert found.empty_bins == 0, name  # n >= k: the balancers never leave one empty
        if name == "local_search" and cap is not None:
            # never worse than the start it improves on, and valid whenever the start was
            start = capped_balance(lengths, k, cap)
            if find_violations(start, lengths, k, cap).ok:
                assert found.ok


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=7), data=st.data())
def test_lower_bound_never_exceeds_the_optimum(lengths: list[int], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(lengths)))
    opt = brute_force_min_max(lengths, k, None)
    assert opt is not None
    assert load_lower_bound(lengths, k) <= opt
    assert load_lower_bound_packing(lengths, k, 1, sum(lengths)) <= opt
    assert max(sum(lengths[i] for i in b) for b in karmarkar_karp(lengths, k)) >= opt


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=7), data=st.data())
def test_bin_count_bound_never_exceeds_first_fit_decreasing(
    lengths: list[int], data: st.DataObject
) -> None:
    cap = data.draw(st.integers(max(lengths), 45))
    lb = min_bins_lower_bound(lengths, cap)
    assert lb <= len(first_fit_decreasing(lengths, None, cap))
    # and it is a true bound: no split into fewer bins respects the cap
    if lb > 1:
        assert brute_force_min_max(lengths, lb - 1, cap) is None


@pytest.mark.parametrize("name", sorted(HEURISTICS))
def test_heuristics_are_deterministic(name: str) -> None:
    lengths = [((i * 7919) % 97) + 1 for i in range(300)]
    fn = HEURISTICS[name]
    assert fn(lengths, 9, 4000) == fn(list(lengths), 9, 4000)


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(1, 500), min_size=2, max_size=7), data=st.data())
def test_packing_bound_cut_short_is_still_a_bound(lengths: list[int], data: st.DataObject) -> None:
    """A budgeted search (max_steps) stops early with a weaker bound, never a wrong one."""
    k = data.draw(st.integers(1, len(lengths)))
    steps = data.draw(st.integers(0, 6))
    opt = brute_force_min_max(lengths, k, None)
    assert opt is not None
    full = load_lower_bound_packing(lengths, k, 1, sum(lengths))
    short = packing_bound(lengths, k, 1, sum(lengths), max_steps=steps)
    assert short.bound <= full <= opt
    assert short.steps <= steps


def test_best_fit_places_each_sequence_once_when_some_fit_nowhere() -> None:
    """Runs of equal lengths that fit in no bin go to the roomiest bins, each exactly once (the
    flat-key path once listed them twice)."""
    from seqpart.heuristics.kernels import best_fit_with_room

    for lengths, k, cap in (([10, 10, 10, 10], 2, 10), ([10, 10, 10, 10, 3], 2, 10),
                            ([7, 7, 7, 7, 7, 2, 2], 3, 9)):
        bins, room = best_fit_with_room(np.asarray(lengths), k, cap)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        assert room == [cap - sum(lengths[i] for i in b) for b in bins]


def _capped_lpt_by_definition(tokens: list[int], costs: list[int], k: int, cap: int) -> list[list[int]]:
    """Costliest first (ties by index), each to the least-loaded bin whose tokens stay under
    the cap (ties by bin index), else to the least-loaded bin of all: O(n k), plainly."""
    bins: list[list[int]] = [[] for _ in range(k)]
    load, tok = [0] * k, [0] * k
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        room = [b for b in range(k) if tok[b] + tokens[i] <= cap] or list(range(k))
        b = min(room, key=lambda q: (load[q], q))
        bins[b].append(i)
        load[b] += costs[i]
        tok[b] += tokens[i]
    return bins


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=40), st.integers(1, 8),
       st.integers(30, 200), st.integers(0, 3))
def test_capped_lpt_with_a_separate_cost_is_lpt_by_definition(
    tokens: list[int], k: int, cap: int, noise: int
) -> None:
    # The heap's fast step (the least-loaded bin has room) and its parked bins choose what the
    # definition chooses, bin for bin and in the same order.
    k = min(k, len(tokens))
    costs = [t * t + (i * noise) % 7 for i, t in enumerate(tokens)]
    got = heuristics.lpt(tokens, k, cap, costs=costs)
    assert got == _capped_lpt_by_definition(tokens, costs, k, cap)
