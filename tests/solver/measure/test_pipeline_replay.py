"""Replay at pp > 1: measured per-micro-batch times combined with the modelled pipeline.

The trials here are recorded by hand (a fake runner's times), so no process runs; the real
gloo run is in tests/integration/test_measure_replay.py."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from seqpart.solver.measure.compare import PLAN, runnable, slower_than_any, summarise
from seqpart.solver.measure.pipeline_replay import NS_PER_SECOND, PipelineSetting, to_ns
from seqpart.solver.measure.profile import CostProfile
from seqpart.solver.measure.replay import Trial
from seqpart.solver.step.pipeline import PipelineModel, makespan
from seqpart.solver.study.measure_cli import format_replay

LENGTHS = [90, 12, 40, 33, 7, 60, 25, 18, 50, 41, 9, 70, 15, 22, 64, 30]
#: two ranks of four micro-batches each, in execution order (indices into LENGTHS)
SCHEDULES = {
    PLAN: [[[0], [1, 2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11], [12, 13], [14, 15]]],
    "megatron": [[[0, 1], [2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11], [12, 13], [14, 15]]],
}


def _profile() -> CostProfile:
    return CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                       torch_version="x", model={"kind": "reference"})


def _fake_run(schedules: dict, repeats: int, seed: int = 0) -> list[Trial]:
    """What run_trials records, from a fake runner: each micro-batch takes the profile's time
    with noise on both clocks; the all-reduce takes 2 ms."""
    prof, rng = _profile(), np.random.default_rng(seed)
    out = []
    for rep in range(repeats):
        for name, sched in schedules.items():
            micro = tuple(tuple((prof.seconds([LENGTHS[i] for i in mb]) * rng.uniform(0.9, 1.2),
                                 prof.seconds([LENGTHS[i] for i in mb]) * rng.uniform(0.9, 1.1))
                                for mb in rank) for rank in sched)
            ranks = tuple((sum(w for w, _ in r), sum(c for _, c in r), 2e-3 + rng.uniform(0, 1e-4))
                          for r in micro)
            out.append(Trial(name, rep, ranks, micro))
    return out


@pytest.mark.parametrize(("pp", "vpp"), [(2, 1), (4, 1), (2, 2)])
def test_steps_are_the_pipeline_makespan_of_the_recorded_times(pp: int, vpp: int) -> None:
    trials = _fake_run(SCHEDULES, repeats=3)
    pipe = PipelineSetting(pp, vpp)
    res = summarise(trials, SCHEDULES, LENGTHS, _profile(), pipe)
    for clock, col in (("wall", 0), ("cpu", 1)):
        for name in SCHEDULES:
            steps = []
            for t in (t for t in trials if t.schedule == name):
                spans = [makespan([round(mb[col] * NS_PER_SECOND) for mb in rank], pp, vpp)
                         for rank in t.micro]
                assert pipe.rank_makespans(t, clock) == spans
                last = max(range(len(t.ranks)), key=lambda r: t.ranks[r][0])
                steps.append(float(Fraction(max(spans)) / NS_PER_SECOND) + t.ranks[last][2])
            got = res.schedules[name].wall_s if clock == "wall" else res.schedules[name].cpu_s
            assert got == pytest.approx(float(np.median(steps)), rel=1e-12)
            # the bubble: a pipeline step is longer than the rank's measured compute alone
            alone = [max(r[col] for r in t.ranks) for t in trials if t.schedule == name]
            assert got > float(np.median(alone))
    assert (res.pp, res.vpp) == (pp, vpp) and len(res.trials) == len(trials)


def test_pp1_is_the_measured_step_and_the_label_says_which() -> None:
    trials = _fake_run(SCHEDULES, repeats=2)
    one = summarise(trials, SCHEDULES, LENGTHS, _profile())
    assert one.schedules[PLAN].wall_s == pytest.approx(
        float(np.median([t.step("wall") for t in trials if t.schedule == PLAN])))
    assert "NOT a real pipeline" not in one.method
    four = summarise(trials, SCHEDULES, LENGTHS, _profile(), PipelineSetting(4))
    assert "NOT a real pipeline run" in four.method and "1f1b" in four.method
    text = format_replay(four, 1.0, LENGTHS, 128, 2, 0.1, as_json=False)
    assert "NOT a real pipeline run" in text and "modelled pp=4 vpp=1 pipeline" in text
    assert "interleaved" in PipelineSetting(2, 2).describe()
    # the model's prediction is the exact makespan too, so it moves with pp as the steps do
    assert four.schedules[PLAN].predicted_s > one.schedules[PLAN].predicted_s


def test_bad_pipeline_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match="pp must be >= 1"):
        PipelineSetting(0)
    with pytest.raises(TypeError, match="pp must be an int"):
        PipelineSetting(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="vpp must be an int"):
        PipelineSetting(2, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs pp > 1"):
        PipelineSetting(1, 2)
    with pytest.raises(TypeError, match="PipelineModel"):
        PipelineSetting(2, 1, "megatron")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vpp must be 1"):
        PipelineSetting(2, 2, PipelineModel(schedule="1f1b"))
    with pytest.raises(ValueError, match="no per-micro-batch times"):
        PipelineSetting(2).step(Trial("x", 0, ((1.0, 1.0, 0.1),)), "wall")
    unmeasured = Trial("x", 0, ((1.0, 1.0, 0.1),), (((0.5, float("nan")), (0.5, float("nan"))),))
    assert PipelineSetting(2).step(unmeasured, "wall") > 1.0
    with pytest.raises(ValueError, match="micro_cpu=True"):
        PipelineSetting(2).step(unmeasured, "cpu")
    with pytest.raises(ValueError, match="clock"):
        PipelineSetting(2).rank_makespans(_fake_run(SCHEDULES, 1)[0], "gpu")


def test_a_count_the_pipeline_cannot_run_is_left_out_with_why() -> None:
    three = {PLAN: [[[0, 1], [2, 3], [4, 5], [6, 7]]], "slime_rr": [[[0, 1, 2], [3, 4], [5, 6, 7]]],
             "verl": [[[0, 1], [2, 3], [4, 5], [6, 7]]]}
    keep, skipped = runnable(three, PipelineSetting(4, 2))
    assert set(keep) == {PLAN, "verl"} and "3 micro-batches" in skipped["slime_rr"]
    with pytest.raises(ValueError, match="no pair to compare"):
        runnable({PLAN: three[PLAN], "slime_rr": three["slime_rr"]}, PipelineSetting(4, 2))


def test_seconds_become_exact_nanoseconds() -> None:
    assert to_ns(1.5e-3) == 1_500_000 and to_ns(-1e-12) == 0
    # integer makespans divided back: equal times on pp stages take (m + pp - 1) * t
    assert PipelineSetting(4).makespan_ns([1e-3] * 6) == 9 * 1_000_000
    assert PipelineSetting(4).fitted_step([[1e-3] * 6, [2e-3]]) == pytest.approx(9e-3)
    assert PipelineSetting().fitted_step([[1e-3] * 6, [2e-3]]) == pytest.approx(6e-3)


def _trials(steps: dict[str, list[float]]) -> list[Trial]:
    """One rank per trial, the given step (compute) times, no all-reduce."""
    return [Trial(name, rep, ((s, s, 0.0),)) for name, times in steps.items() for rep, s in enumerate(times)]


def test_slower_than_any_corrects_for_picking_the_fastest_of_several() -> None:
    sched = {PLAN: [[[0]]], "a": [[[0]]], "b": [[[0]]]}
    plan = [1.00, 1.01, 0.99, 1.02, 1.00, 0.98, 1.01]
    clear = _trials({PLAN: plan, "a": [x / 1.10 for x in plan], "b": [1.0] * 7})
    res = summarise(clear, sched, [5], _profile())
    slower = slower_than_any(res, "wall")
    assert list(slower) == ["a"] and slower["a"][1] > 1.0  # 10% slower on every repeat
    # every ratio within 3% of 1, on both sides: slower than neither
    ties = _trials({PLAN: [1.0] * 7, "a": [1.02, 0.99, 1.03, 0.98, 1.01, 1.0, 0.97], "b": [1.0] * 7})
    assert slower_than_any(summarise(ties, sched, [5], _profile()), "wall") == {}
