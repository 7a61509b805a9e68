"""plan_step with interleaved pipelines: the count per rank is a multiple of pp unless told."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.solver import SolverOptions, plan_step


@pytest.fixture(scope="module")
def lengths() -> list[int]:
    return np.random.default_rng(7).integers(200, 6000, 512).tolist()


def test_vpp_above_one_makes_the_count_a_multiple_of_pp(lengths: list[int]) -> None:
    # Megatron's interleaved schedule needs it; the default used to be 1 (m=21 was returned).
    for pp in (2, 4):
        plan = plan_step(lengths, 8, 8192, pp=pp, vpp=2, time_limit=0.1)
        assert plan.m % pp == 0, (pp, plan.m)


def test_the_caller_can_say_otherwise(lengths: list[int]) -> None:
    odd = plan_step(lengths, 8, 8192, pp=4, vpp=2, multiple_of=3, time_limit=0.1)
    assert odd.m % 3 == 0


def test_without_interleaving_the_count_is_free(lengths: list[int]) -> None:
    # Repeatable mode: in clock timing a loaded machine may stop the two calls at different counts.
    still = SolverOptions(deterministic=True)
    plans = [plan_step(lengths, 8, 8192, pp=4, vpp=1, time_limit=0.1, options=still),
             plan_step(lengths, 8, 8192, pp=4, vpp=1, multiple_of=1, time_limit=0.1, options=still)]
    assert plans[0].m == plans[1].m


def test_plan_step_across_ranks_takes_the_same_rule() -> None:
    from seqpart.solver import plan_step_across_ranks

    result = plan_step_across_ranks(list(range(100, 164)), 2000, pp=4, vpp=2, time_limit=0.2)
    assert result.schedule.m % 4 == 0
    explicit = plan_step_across_ranks(list(range(100, 164)), 2000, pp=4, vpp=2, multiple_of=1,
                                      time_limit=0.2)
    assert explicit.schedule.m >= 1
