"""Exchanges of one item for two between the heaviest micro-batch and another."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import improve
from seqpart.solver.engines.resplit import exchange_items
from seqpart.solver.options import Budget

from _brute import brute_force_min_max


def _max_load(bins: list[list[int]], costs: list[int]) -> int:
    return max(sum(costs[i] for i in b) for b in bins)


def test_one_for_two_where_local_search_is_stuck() -> None:
    # Both micro-batches are full: any move or one-for-one swap breaks the cap, while the 6
    # for the two 3s keeps both full and lowers the sum of squares (136 -> 118, optimal).
    lengths, cap = [10, 6, 3, 3, 5, 5], 16
    costs = [x * x for x in lengths]
    start = [[0, 1], [2, 3, 4, 5]]
    assert _max_load(improve(lengths, start, cap, costs=costs), costs) == 136
    out = exchange_items(lengths, costs, start, cap)
    assert _max_load(out, costs) == 118 == brute_force_min_max(lengths, 2, cap, costs)


def test_no_work_no_change() -> None:
    lengths, costs = [10, 6, 3, 3, 5, 5], [100, 36, 9, 9, 25, 25]
    work = Budget(0)
    assert exchange_items(lengths, costs, [[0, 1], [2, 3, 4, 5]], 16,
                          work=work) == [[0, 1], [2, 3, 4, 5]]
    assert work.used == 0 and work.ran_out
    huge = [c << 56 for c in costs]  # beyond int64 scores: left alone
    assert exchange_items(lengths, huge, [[0, 1], [2, 3, 4, 5]], 16) == [[0, 1], [2, 3, 4, 5]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=8), st.data())
def test_keeps_plans_valid_and_never_worse(lengths: list[int], data: st.DataObject) -> None:
    n = len(lengths)
    k = data.draw(st.integers(2, min(n, 3)))
    costs = [5 * x + x * x for x in lengths]
    labels = data.draw(st.permutations(list(range(n))))
    start = [sorted(labels[j::k]) for j in range(k)]  # a round-robin deal: k non-empty bins
    cap = max(sum(lengths[i] for i in b) for b in start) + data.draw(st.integers(0, 3))
    out = exchange_items(lengths, costs, start, cap)
    assert sorted(i for b in out for i in b) == list(range(n))
    assert all(out) and max(sum(lengths[i] for i in b) for b in out) <= cap
    opt = brute_force_min_max(lengths, k, cap, costs)
    assert opt is not None and opt <= _max_load(out, costs) <= _max_load(start, costs)
