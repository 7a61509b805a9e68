"""Optimal re-split of two micro-batches: against brute force, and as an improvement step."""

from __future__ import annotations

import importlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics.kernels import karmarkar_karp_lists
from seqpart.solver import SolverOptions, check_plan, partition
from seqpart.solver.engines.resplit import best_split, resplit_groups, resplit_pairs
from seqpart.solver.options import Budget

_RESPLIT = importlib.import_module("seqpart.solver.engines.resplit")


def _brute_split(tokens: list[int], costs: list[int], counts: list[int], cap: int | None,
                 count: int | None) -> int | None:
    best = None
    m = len(tokens)
    for mask in itertools.product([0, 1], repeat=m):
        if all(mask) or not any(mask):
            continue
        a = [i for i in range(m) if mask[i]]
        b = [i for i in range(m) if not mask[i]]
        if cap is not None and (sum(tokens[i] for i in a) > cap or sum(tokens[i] for i in b) > cap):
            continue
        if count is not None and (sum(counts[i] for i in a) != count
                                  or sum(counts[i] for i in b) != count):
            continue
        score = max(sum(costs[i] for i in a), sum(costs[i] for i in b))
        best = score if best is None else min(best, score)
    return best


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=9), st.data())
def test_best_split_matches_brute_force(tokens: list[int], data: st.DataObject) -> None:
    costs = [t * t + 3 * t for t in tokens] if data.draw(st.booleans()) else list(tokens)
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(tokens), max_size=len(tokens)))
    cap = data.draw(st.one_of(st.none(), st.integers(1, sum(tokens))))
    count = data.draw(st.one_of(st.none(), st.integers(1, 6)))
    found = best_split(tokens, costs, counts, cap, count)
    want = _brute_split(tokens, costs, counts, cap, count)
    assert (found[0] if found else None) == want
    if found:
        mask = found[1]
        assert mask[0] and not all(mask)


def test_three_per_bin_needs_two_items_to_change_sides() -> None:
    # {19, 3, 10} = 32 and {4, 8, 2} = 14: the best single move or swap gives 24 (move 10),
    # the best split is {19, 4} = 23 and {3, 10, 8, 2} = 23 (found by a random search).
    tokens = [19, 3, 10, 4, 8, 2]
    bins = [[0, 1, 2], [3, 4, 5]]
    out = resplit_pairs(tokens, tokens, [1] * 6, bins, cap=32)
    check_plan(out, tokens, 2, 32)
    assert sorted(sum(tokens[i] for i in b) for b in out) == [23, 23]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=4, max_size=24), st.data())
def test_resplit_never_raises_the_max_and_keeps_the_plan_valid(
    tokens: list[int], data: st.DataObject
) -> None:
    k = data.draw(st.integers(2, len(tokens) // 2))
    bins = [list(range(j, len(tokens), k)) for j in range(k)]
    cap = max(sum(tokens[i] for i in b) for b in bins)
    before = cap
    out = resplit_pairs(tokens, tokens, [1] * len(tokens), bins, cap=cap, max_union=10)
    check_plan(out, tokens, k, cap)
    assert max(sum(tokens[i] for i in b) for b in out) <= before
    assert out == resplit_pairs(tokens, tokens, [1] * len(tokens), bins, cap=cap, max_union=10)


# ------------------------------------------------------------------ groups of three or four

_STUCK = [12201, 19325, 23884, 23144, 22513, 11033, 14179, 11931, 18117, 22467, 17364, 17737,
          20675, 16219, 22922, 13439, 11537, 17993, 10464, 24636, 23693, 16386, 17090, 19952]


def test_a_group_lowers_the_max_where_no_pair_can() -> None:
    # 24 sequences in 8 micro-batches, 3 each: Karmarkar-Karp, then every pairwise re-split,
    # leave the heaviest at 53,947; pooling it with two or three others lowers it.
    n, k = len(_STUCK), 8
    pairs = resplit_pairs(_STUCK, _STUCK, [1] * n, karmarkar_karp_lists(_STUCK, [1] * n, k, None))
    assert max(sum(_STUCK[i] for i in b) for b in resplit_pairs(_STUCK, _STUCK, [1] * n, pairs)
               ) == max(sum(_STUCK[i] for i in b) for b in pairs)  # no pair helps any more
    stuck = max(sum(_STUCK[i] for i in b) for b in pairs)
    assert stuck == 53947
    nodes = Budget(10**6)
    found = resplit_groups(_STUCK, _STUCK, [1] * n, pairs, None, None, lower_bound=0,
                           work=nodes)
    check_plan(found, _STUCK, k)
    assert max(sum(_STUCK[i] for i in b) for b in found) < stuck
    assert not nodes.cut and nodes.used > 0


def test_groups_stop_at_the_node_budget_and_at_the_bound() -> None:
    n, k = len(_STUCK), 8
    start = resplit_pairs(_STUCK, _STUCK, [1] * n, karmarkar_karp_lists(_STUCK, [1] * n, k, None))
    nodes = Budget(0)
    none = resplit_groups(_STUCK, _STUCK, [1] * n, start, None, None, lower_bound=0,
                          work=nodes)
    assert none == start and nodes.used == 0 and nodes.ran_out
    nodes = Budget(10**6)
    at_bound = resplit_groups(_STUCK, _STUCK, [1] * n, start, None, None, lower_bound=10**9,
                              work=nodes)
    assert at_bound == start and nodes.used == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=6, max_size=18), st.data())
def test_groups_keep_the_plan_valid_and_never_raise_a_load_above_the_max(
    tokens: list[int], data: st.DataObject
) -> None:
    k = data.draw(st.integers(3, len(tokens) // 2))
    costs = [t * t + 7 * t for t in tokens] if data.draw(st.booleans()) else list(tokens)
    bins = [list(range(j, len(tokens), k)) for j in range(k)]
    cap = data.draw(st.one_of(st.none(), st.just(max(sum(tokens[i] for i in b) for b in bins))))
    before = sorted((sum(costs[i] for i in b) for b in bins), reverse=True)
    found = resplit_groups(tokens, costs, [1] * len(tokens), bins, cap, None, lower_bound=0,
                           work=Budget(20_000))
    check_plan(found, tokens, k, cap)
    after = sorted((sum(costs[i] for i in b) for b in found), reverse=True)
    assert after <= before  # the sorted loads fall lexicographically, or stay
    assert found == resplit_groups(tokens, costs, [1] * len(tokens), bins, cap, None,
                                   lower_bound=0, work=Budget(20_000))


def test_equal_sizes_keep_their_counts() -> None:
    tokens = [30, 29, 5, 4, 3, 2, 28, 1, 27, 6, 7, 8]
    bins = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    found = resplit_groups(tokens, tokens, [1] * 12, bins, None, 3, lower_bound=0,
                           work=Budget(10**6))
    assert all(len(b) == 3 for b in found)
    assert max(sum(tokens[i] for i in b) for b in found) < 64


def test_partition_re_splits_groups_in_its_heuristic_phase(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    options = SolverOptions(deterministic=True)  # work counted: the same plan on every run
    plan = partition(_STUCK, 8, time_limit=0.02, options=options)
    assert plan.method.endswith("+groups")
    assert plan.bins == partition(_STUCK, 8, time_limit=0.02, options=options).bins
    monkeypatch.setattr(_RESPLIT, "GROUP_SHARE", 0.0)
    without = partition(_STUCK, 8, time_limit=0.02, options=options)
    assert "+groups" not in without.method and plan.max_load < without.max_load
