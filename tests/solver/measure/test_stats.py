"""Exact statistics of paired ratios: the intervals cover what they say, and two identical
schedules are not called different more often than the level allows."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.solver.measure.compare import (
    PLAN,
    comparisons,
    min_repeats,
    same_schedule,
    slower_than_any,
    summarise,
)
from seqpart.solver.measure.profile import CostProfile
from seqpart.solver.measure.replay import Trial
from seqpart.solver.measure.stats import coverage, holm, median_ci, ratio_ci, repeats_for, sign_test_slower


def test_coverage_is_the_binomial_count() -> None:
    assert coverage(5, 1) == pytest.approx(1 - 2 / 32)
    assert coverage(8, 2) == pytest.approx(1 - 2 * 9 / 256)
    with pytest.raises(ValueError, match="j=4"):
        coverage(5, 4)


def test_repeats_for_a_level() -> None:
    assert repeats_for(0.95) == 6
    assert repeats_for(1 - 0.05 / 6) == 8 == min_repeats(6)
    assert repeats_for(1 - 0.05 / 120) == 13
    with pytest.raises(ValueError, match="level"):
        repeats_for(1.0)


def test_median_ci_picks_the_narrowest_interval_that_reaches_the_level() -> None:
    x = list(range(1, 21))  # n=20: j=6 covers 95.9%, j=7 only 88.5%
    ci = median_ci(x[::-1], 0.95)
    assert (ci.median, ci.low, ci.high) == (10.5, 6.0, 15.0) and ci.level == pytest.approx(coverage(20, 6))
    few = median_ci([3.0, 1.0, 2.0], 0.95)  # the range, at the 75% it can reach
    assert (few.low, few.high, few.level) == (1.0, 3.0, 0.75)
    for bad, match in (([], "at least one"), ([1.0, float("inf")], "finite")):
        with pytest.raises(ValueError, match=match):
            median_ci(bad)
    with pytest.raises(ValueError, match="same number"):
        ratio_ci([1.0], [1.0, 2.0])


def test_sign_test_and_holm() -> None:
    assert sign_test_slower([1.1] * 5) == pytest.approx(1 / 32)
    assert sign_test_slower([1.1, 1.2, 0.9]) == pytest.approx(0.5)
    assert sign_test_slower([1.0, 1.0]) == 1.0
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert holm([0.01, 0.02, 0.02], 0.05) == [True, True, True]


def test_identical_schedules_are_rarely_called_different() -> None:
    """Simulated A/A replays (both sides the same lognormal noise) at the level one comparison of
    six gets (Bonferroni): the exact interval says "slower" at most at its one-sided rate, where
    the bootstrap of a 5-repeat median it replaces says so on about 1 batch in 32, 7.5 times
    its nominal rate."""
    rng = np.random.default_rng(0)
    trials, level = 4000, 1 - 0.05 / 6
    for n in (8, 12):
        ratios = rng.lognormal(0.0, 0.04, size=(trials, n)) / rng.lognormal(0.0, 0.04, size=(trials, n))
        false = sum(median_ci(r, level).low > 1.0 for r in ratios)
        assert false / trials <= (1 - level) / 2 + 0.003
    five = rng.lognormal(0.0, 0.04, size=(trials, 5)) / rng.lognormal(0.0, 0.04, size=(trials, 5))
    boot_false = 0
    for r in five:
        boots = np.median(rng.choice(r, size=(400, 5)), axis=1)
        boot_false += np.quantile(boots, (1 - level) / 2) > 1.0
    assert boot_false / trials > 5 * (1 - level) / 2  # what the old bootstrap interval did
    assert median_ci(five[0], level).level < level  # and what the exact one says of 5 repeats


def test_same_schedule_ignores_order_inside_micro_batches_and_rank_numbering() -> None:
    a = [[[0, 1], [2]], [[3], [4, 5]]]
    assert same_schedule(a, [[[3], [5, 4]], [[1, 0], [2]]])
    assert not same_schedule(a, [[[2], [0, 1]], [[3], [4, 5]]])  # micro-batch order differs
    assert same_schedule(a, [[[2], [0, 1]], [[3], [4, 5]]], ordered=False)  # which pp=1 ignores
    assert not same_schedule(a, [[[0], [1, 2]], [[3], [4, 5]]])


def _profile() -> CostProfile:
    return CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                       torch_version="x", model={"kind": "reference"})


def _trials(steps: dict[str, list[float]]) -> list[Trial]:
    return [Trial(name, rep, ((s, s, 0.0),)) for name, times in steps.items() for rep, s in enumerate(times)]


def test_comparisons_flag_identical_schedules_and_need_enough_repeats() -> None:
    sched = {PLAN: [[[0], [1]]], "same": [[[0], [1]]], "other": [[[0, 1]]]}
    plan = [1.00, 1.01, 0.99, 1.02, 1.00, 0.98, 1.01, 1.0]
    slow = _trials({PLAN: plan, "same": [x / 1.05 for x in plan], "other": [x / 1.05 for x in plan]})
    res = summarise(slow, sched, [5, 7], _profile())
    assert res.identical == ("same",)
    comp = comparisons(res, "wall")
    assert comp["same"].identical and not comp["other"].identical
    assert comp["other"].p_slower == pytest.approx(1 / 256) and comp["other"].ratio.low > 1.0
    assert set(slower_than_any(res, "wall")) == {"same", "other"}
    # 5 repeats cannot reach 1 - 0.05/2 on a [min, max] interval: nothing is called slower
    few = summarise(_trials({PLAN: plan[:5], "same": plan[:5], "other": [x / 1.05 for x in plan[:5]]}),
                    sched, [5, 7], _profile())
    assert slower_than_any(few, "wall") == {} and few.ci_level < 0.95
