"""The long-sequence term of Cost: exact in Python ints, used by the planners' validator."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.solver import Cost, find_violations, partition, plan_step, step_time


def test_long_term_is_exact_and_printed() -> None:
    c = Cost(linear=3, quadratic=1, per_sequence=5, long_linear=7, long_from=10)
    t = np.array([4, 10, 11, 25])
    expect = [3 * x + x * x + 5 + 7 * max(0, x - 10) for x in t.tolist()]
    assert c.exact(t).tolist() == expect and c.of(t).tolist() == expect
    assert c.as_dict() == {"linear": 3, "quadratic": 1, "per_sequence": 5, "long_linear": 7, "long_from": 10}
    assert str(c) == "3*l + 1*l^2 + 7*max(0, l - 10) + 5"
    big = Cost(linear=1, long_linear=2**61, long_from=0)  # beyond int64: exact Python ints
    assert big.exact(np.array([4, 4])).tolist() == [4 + 4 * 2**61] * 2
    with pytest.raises(ValueError, match="long_linear"):
        Cost(long_linear=-1)
    assert "long_linear" not in Cost.attention().as_dict()


def test_planners_balance_the_long_term() -> None:
    lengths = [900, 40, 35, 30, 880, 45, 50, 60, 20, 25, 700, 15]
    cost = Cost(linear=10, quadratic=1, long_linear=400, long_from=100)
    plan = partition(lengths, 3, 1500, cost=cost, time_limit=0.5)
    assert find_violations(plan.bins, lengths, 3, 1500).ok
    weights = cost.exact(np.array(lengths)).tolist()
    assert plan.max_load == max(sum(weights[i] for i in b) for b in plan.bins)
    step = plan_step(lengths, 2, 1500, cost=cost, overhead=1000, time_limit=0.3)
    assert step.step_time == step_time(step.ranks, lengths, cost=cost, overhead=1000)
