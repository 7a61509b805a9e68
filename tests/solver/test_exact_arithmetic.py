"""Exact arithmetic: costs and caps near and beyond 2**63 never wrap, and no plan is mislabelled.

Every plan is checked against Python's exact integers: its loads and token sums recomputed,
its cap respected, and an "optimal" label (or a lower bound) compared with the brute-force
optimum.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.solver import Cost, InfeasibleError, partition

from _brute import brute_force_min_max

BIG = 2**63


def _check(lengths: list[int], k: int, cap: int | None, cost: Cost, engine: str) -> None:
    exact = [cost.linear * x + cost.quadratic * x * x for x in lengths]
    best = brute_force_min_max(lengths, k, cap, exact)
    try:
        plan = partition(lengths, k, cap, cost=cost, time_limit=0.05, engine=engine)
    except InfeasibleError as err:
        assert best is None or not err.proven, "a feasible instance was called infeasible"
        return
    assert best is not None, "a plan for an instance with none"
    assert sorted(i for b in plan.bins for i in b) == list(range(len(lengths)))
    loads = [sum(exact[i] for i in b) for b in plan.bins]
    tokens = [sum(lengths[i] for i in b) for b in plan.bins]
    assert plan.loads == loads and plan.tokens == tokens
    assert plan.max_load == max(loads)
    if cap is not None:
        assert max(tokens) <= cap
    assert plan.lower_bound <= best <= plan.max_load
    if plan.status == "optimal":
        assert plan.max_load == best


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 6),
    linear=st.one_of(st.integers(0, 4), st.integers(2**40, 2**70)),
    quadratic=st.one_of(st.just(0), st.integers(1, 3), st.integers(2**30, 2**66)),
    big_lengths=st.booleans(),
    engine=st.sampled_from(["heuristics", "auto"]),
)
def test_costs_beyond_int64_are_exact(
    data: st.DataObject, n: int, linear: int, quadratic: int, big_lengths: bool, engine: str
) -> None:
    if linear == 0 and quadratic == 0:
        linear = 1
    top = 2**58 if big_lengths else 2**20
    lengths = data.draw(st.lists(st.integers(1, top), min_size=n, max_size=n))
    k = data.draw(st.integers(1, n))
    cap = data.draw(st.one_of(
        st.none(),
        st.integers(max(lengths), 2 * max(lengths) + sum(lengths) // k),
        st.integers(BIG - 8, BIG + 8),
        st.integers(2**64, 2**80),
    ))
    _check(lengths, k, cap, Cost(linear, quadratic), engine)


def test_the_issue_examples() -> None:
    # int64 costs used to wrap: the worst split came back labelled optimal.
    plan = partition([2**20, 2**20, 3], k=2, cost=(1, 2**40))
    assert sorted(map(sorted, plan.bins)) == [[0], [1, 2]] or sorted(
        map(sorted, plan.bins)) == [[0, 2], [1]]
    assert plan.status == "optimal" and plan.max_load == 2**20 + 2**80 + 3 + 9 * 2**40
    # Wrapped costs used to read as "costs[0] is 0".
    plan = partition([2**30, 2**30 - 1, 2**29, 5], k=2, cost=(2**40, 0))
    assert plan.max_load == (2**30 - 1 + 2**29) * 2**40 and plan.status == "optimal"


@pytest.mark.parametrize("cap", [2**63 - 1, 2**63, 2**64 + 5, 10**30])
def test_a_cap_above_the_total_is_no_cap(cap: int) -> None:
    plan = partition([5, 6, 7], k=2, cap=cap)
    assert plan.cap == cap and plan.max_load == 11 and plan.status == "optimal"
    assert partition([5, 6, 7], k=None, cap=cap).k == 1


def test_token_totals_beyond_2_62_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="beyond 2\\*\\*62"):
        partition([2**62 - 1, 2**61], k=2)
    with pytest.raises(ValueError, match="above 2\\*\\*63-1"):
        partition([2**64, 1], k=2)


def test_cost_of_refuses_rather_than_wraps() -> None:
    import numpy as np

    with pytest.raises(ValueError, match="beyond int64"):
        Cost(1, 2**40).of(np.asarray([2**20, 2**20], dtype=np.int64))
    exact = Cost(1, 2**40).exact(np.asarray([2**20, 3], dtype=np.int64))
    assert exact.tolist() == [2**20 + 2**80, 3 + 9 * 2**40]
