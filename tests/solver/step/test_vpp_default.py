"""plan_step with interleaved pipelines: the count per rank is a multiple of pp unless told."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.solver import InfeasibleError, PipelineModel, SolverOptions, plan_step


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


def _megatron_accepts(pp: int, group: int, m: int) -> bool:
    """forward_backward_pipelining_with_interleaving's check on the count, written out."""
    return pp <= group <= m and (m % group == 0 or m % group >= pp)


@pytest.mark.parametrize(("lengths", "cap", "kw"), [
    ([364, 774, 248, 99, 328, 707, 610], 779, {"cost": "tokens", "time_limit": 0.05}),
    ([681, 793, 442, 79, 684, 645], 913, {"time_limit": 0.2}),
    ([12, 12, 2, 11, 9, 17], 19, {"overhead": 6, "time_limit": 0.05}),
])
def test_a_count_megatron_refuses_is_never_returned(lengths: list[int], cap: int, kw: dict) -> None:
    # Only m=3 fits these under the cap on 2 ranks, and 3 % 2 = 1 < pp: no schedule exists.
    with pytest.raises(InfeasibleError, match="multiple_of") as err:
        plan_step(lengths, 2, cap, pp=2, vpp=2, multiple_of=1, **kw)
    assert err.value.proven


def test_any_multiple_of_keeps_to_megatron_s_rule() -> None:
    rng = np.random.default_rng(3)
    for trial in range(24):
        n = int(rng.integers(4, 13))
        lengths = rng.integers(1, 800, n).tolist()
        cap = int(max(lengths) * rng.uniform(1.0, 2.5))
        multiple_of = 1 + trial % 3
        for group in (None, 3):
            model = PipelineModel(group=group)
            try:
                plan = plan_step(lengths, 2, cap, pp=2, vpp=2, multiple_of=multiple_of,
                                 pipeline=model, time_limit=0.05)
            except InfeasibleError:
                continue
            assert _megatron_accepts(2, group or 2, plan.m), (lengths, cap, multiple_of, plan.m)
            assert plan.m % multiple_of == 0
