"""The micro-batch size term and the per-sequence cost: the model, its bound and plan_step."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpart.solver import Cost, InfeasibleError, MicroBatchCost, partition
from seqpart.solver.step import plan_step, rank_times, step_lower_bound, step_time
from seqpart.solver.step.search import improve_schedule, schedule_objective

from _brute import brute_force_step

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sizes = st.builds(
    MicroBatchCost,
    overhead=st.sampled_from([0, 7]),
    square=st.sampled_from([0, 1]),
    rises=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 9)), max_size=2),
    falls=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 9)), max_size=2),
)


def test_size_term_values_and_checks() -> None:
    size = MicroBatchCost(overhead=3, square=2, rises=[(10, 5)], falls=[(4, 7)])
    assert size.size(0) == 7 * 4
    assert size.size(12) == 2 * 144 + 5 * 2
    assert size.size_array(np.array([0, 12])).tolist() == [28, 298]
    assert size.size_array(np.array([0, 12]), object).tolist() == [28, 298]
    assert size.has_size and not MicroBatchCost(overhead=5).has_size
    assert "2*T^2" in str(size)
    with pytest.raises(ValueError, match="square"):
        MicroBatchCost(square=-1)
    with pytest.raises(TypeError, match="rises"):
        MicroBatchCost(rises=5)
    with pytest.raises(ValueError, match="pair"):
        MicroBatchCost(falls=[(1, 2, 3)])
    with pytest.raises(TypeError, match="int"):
        MicroBatchCost(overhead=1.5)
    # Exact at any size: no int64 wrap.
    huge = MicroBatchCost(square=2**40)
    assert huge.size(2**40) == 2**120


@FAST
@given(sizes, st.lists(st.integers(0, 80), min_size=1, max_size=8))
def test_spread_bound_is_jensen(size: MicroBatchCost, totals: list[int]) -> None:
    """``count`` micro-batches holding ``T`` tokens pay at least ``spread_bound(T, count)``."""
    assert size.spread_bound(sum(totals), len(totals)) <= sum(size.size(t) for t in totals)


def test_per_sequence_cost() -> None:
    cost = Cost(2, 1, per_sequence=50)
    assert cost.exact(np.array([3, 4])).tolist() == [2 * 3 + 9 + 50, 2 * 4 + 16 + 50]
    assert Cost.parse((2, 1, 50)) == cost
    assert str(cost).endswith("+ 50")
    assert cost.as_dict() == {"linear": 2, "quadratic": 1, "per_sequence": 50}
    assert Cost(2, 1).as_dict() == {"linear": 2, "quadratic": 1}
    with pytest.raises(ValueError, match="per_sequence"):
        Cost(1, 0, per_sequence=-1)
    # partition balances it: each micro-batch's load counts 50 per sequence.
    lengths = [10, 10, 10, 10, 40]
    plan = partition(lengths, k=2, cost=Cost(1, 0, per_sequence=50))
    assert sorted(plan.loads) == sorted(sum(lengths[i] + 50 for i in b) for b in plan.bins)
    # Tokens alone would pair 40 with one 10 (50 | 30); with 50 per sequence the optimum is
    # 40+10 | 10+10+10 at loads 150 | 180, the best split of 5 sequences into 2.
    assert max(plan.loads) == 180 and plan.optimal


def test_search_bookkeeping_matches_the_model() -> None:
    """The local search's incremental times equal a recomputation, with every kind of term."""
    rng = random.Random(0)
    for _ in range(60):
        n, dp, m = rng.randint(4, 12), rng.choice([1, 2, 3]), rng.randint(1, 3)
        if dp * m > n:
            continue
        tok = [rng.randint(1, 50) for _ in range(n)]
        costs = [3 * x + x * x // 5 + 1 for x in tok]
        size = MicroBatchCost(overhead=5, square=rng.choice([0, 1]),
                              rises=[(rng.randint(0, 80), rng.randint(0, 4))],
                              falls=[(rng.randint(0, 60), rng.randint(0, 4))])
        pp, vpp, k = rng.choice([1, 2, 4]), rng.choice([1, 2]), dp * m
        start = np.array([i % k for i in range(n)])
        c = np.array(costs, dtype=np.int64)
        before = schedule_objective(start, c, k, m, 5, pp, vpp, size, np.array(tok))
        out = improve_schedule(start, tok, costs, dp, m, None, 5, pp, vpp, size=size)
        after = schedule_objective(out.mb_of, c, k, m, 5, pp, vpp, size, np.array(tok))
        assert after == out.objective <= before
        assert len(set(out.mb_of.tolist())) == k


small = st.tuples(
    st.lists(st.integers(1, 20), min_size=2, max_size=5),  # lengths
    st.integers(1, 2),  # dp
    st.sampled_from([None, 30]),  # cap
    st.integers(1, 2),  # pp
    st.integers(1, 2),  # vpp
    sizes,
    st.sampled_from([(1, 0), (3, 1), (2, 0, 9)]),  # cost
)


@FAST
@given(small)
def test_bound_and_plan_step_against_brute_force_with_size(inst: tuple) -> None:
    """Every schedule and order tried: the bound never exceeds the optimum, plan_step's reported
    step is the model's figure for its schedule, and the optimum is between the two."""
    lengths, dp, cap, pp, vpp, size, cost = inst
    best = brute_force_step(lengths, dp, cap, cost=cost, overhead=size.overhead, size=size,
                            pp=pp, vpp=vpp)
    kw = {"cost": cost, "overhead": size, "pp": pp, "vpp": vpp}
    if best is None:
        with pytest.raises(InfeasibleError):
            plan_step(lengths, dp, cap, multiple_of=1, **kw)
        return
    bound = step_lower_bound(lengths, dp, cap, **kw)
    assert bound <= best
    plan = plan_step(lengths, dp, cap, time_limit=1.0, multiple_of=1, **kw)
    assert plan.step_time == step_time(plan.ranks, lengths, **kw)
    assert plan.rank_times == rank_times(plan.ranks, lengths, **kw)
    assert plan.lower_bound <= best <= plan.step_time
    assert plan.overhead == (size if size.has_size else size.overhead)


def test_size_term_changes_the_count() -> None:
    """A per-token cost that grows with the micro-batch's size asks for more, smaller
    micro-batches; one that falls (an under-filled device) asks for fewer, fuller ones."""
    rng = random.Random(3)
    lengths = [rng.randint(100, 2000) for _ in range(48)]
    kw = {"cost": (2000, 1), "time_limit": 0.5}
    plain = plan_step(lengths, 2, 16384, overhead=MicroBatchCost(overhead=1000), **kw)
    rising = plan_step(lengths, 2, 16384, overhead=MicroBatchCost(overhead=1000, square=4), **kw)
    falling = plan_step(lengths, 2, 16384, overhead=MicroBatchCost(overhead=1000,
                                                                     falls=[(16384, 20000)]), **kw)
    assert rising.m > plain.m
    assert falling.m <= plain.m
    assert falling.to_dict()["overhead"]["falls"] == [[16384, 20000]]
