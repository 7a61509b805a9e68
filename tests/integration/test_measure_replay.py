"""Measured replay: two real processes in a gloo group run two schedules, paired and
interleaved, and the summary compares them with the model's prediction."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")

from seqpart.solver import Cost  # noqa: E402
from seqpart.solver.measure.compare import (  # noqa: E402
    PLAN,
    ScheduleResult,
    probe_set,
    replay_batch,
    scale_factor,
    scale_lengths,
)
from seqpart.solver.measure.profile import CostProfile  # noqa: E402
from seqpart.solver.measure.replay import RunnerSpec, ratio_ci  # noqa: E402

TINY = {"hidden": 32, "layers": 1, "heads": 2, "ffn": 64, "vocab": 64}


def _profile() -> CostProfile:
    return CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                       torch_version="x", model={"kind": "reference"})


def test_replay_runs_every_schedule_on_two_gloo_ranks() -> None:
    lengths = [90, 12, 40, 33, 7, 60, 25, 18]
    calibrated = [{"lengths": [64], "seconds": 0.002, "held_out": False},
                  {"lengths": [8] * 8, "seconds": 0.003, "held_out": False},
                  {"lengths": [32, 16], "seconds": 0.0025, "held_out": False}]
    profile = replace(_profile(), measurements=calibrated)
    res = replay_batch(lengths, 2, 128, profile, RunnerSpec("reference", TINY), repeats=2, warmup=1,
                       trainers=["megatron", "verl"], time_limit=0.2)
    assert set(res.schedules) == {"megatron", "verl", PLAN}
    # every rank timed the three probes before every trial (2 repeats x 3 schedules)
    assert len(res.trials) == 6 and all(len(t.probes) == 2 for t in res.trials)
    assert all(w > 0 and c > 0 for t in res.trials for w, c in t.probes)
    for r in res.schedules.values():
        assert r.wall_s > 0 and r.cpu_s > 0 and r.predicted_s > 0 and r.micro_batches >= 2
        for clock in ("wall", "cpu"):
            now = [p[0 if clock == "wall" else 1] for t in res.trials for p in t.probes]
            assert r.speed[clock] == pytest.approx(float(np.median(now)) / 0.0075)
    for clock in ("wall", "cpu"):
        assert res.best[clock] in {"megatron", "verl"}
        mid, lo, hi = res.ratio[clock]
        assert lo <= mid <= hi and res.predicted_ratio[clock] > 0
    assert res.allreduce_s > 0


def test_ratio_ci_and_scaling() -> None:
    mid, lo, hi = ratio_ci([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    assert mid == lo == hi == 1.0
    assert scale_factor(_profile(), Cost(2000, 1)) == pytest.approx(1.0)
    assert scale_lengths([1000, 3], 0.5) == [500, 2]
    with pytest.raises(ValueError, match="scale factor"):
        scale_lengths([1], 0.0)


def test_pp2_replay_combines_each_rank_s_measured_micro_batches_with_the_pipeline() -> None:
    from seqpart.solver.step.pipeline import makespan

    lengths = [90, 12, 40, 33, 7, 60, 25, 18, 44, 70, 9, 51]
    res = replay_batch(lengths, 2, 128, _profile(), RunnerSpec("reference", TINY), repeats=1, warmup=0,
                       trainers=["megatron"], time_limit=0.2, pp=2)
    assert res.pp == 2 and "NOT a real pipeline run" in res.method
    for t in res.trials:
        # every micro-batch of every rank was timed, in the schedule's order
        assert len(t.micro) == 2 and sum(map(len, t.micro)) == res.schedules[t.schedule].micro_batches
        assert all(w > 0 and c > 0 for r in t.micro for w, c in r)
        spans = [makespan([round(w * 1e9) for w, _ in r], 2) for r in t.micro]
        step = float(max(spans)) / 1e9 + t.allreduce
        assert res.schedules[t.schedule].wall_s == pytest.approx(step, rel=1e-12)
        assert step > max(sum(w for w, _ in r) for r in t.micro)  # the modelled bubble is on top


def test_probes_are_calibrated_micro_batches_of_different_shapes() -> None:
    rows = [{"lengths": [x], "seconds": x * 1e-4, "held_out": False} for x in (64, 128, 256, 512)]
    rows += [{"lengths": [16] * c, "seconds": c * 1e-3, "held_out": False} for c in (2, 4, 8)]
    rows += [{"lengths": [100] * 40, "seconds": 0.001, "held_out": True}]  # scored only: never a probe
    probes, seconds = probe_set(replace(_profile(), measurements=rows), seconds=0.03)
    # under 10 ms each: the longest single sequence, the most sequences, the median of the rest
    assert probes == [[64], [16] * 8, [16] * 4]
    assert seconds == pytest.approx(0.0064 + 0.008 + 0.004)
    assert probe_set(_profile()) == ([], pytest.approx(float("nan"), nan_ok=True))


def test_drift_scales_the_model_s_compute_part_only() -> None:
    r = ScheduleResult("x", predicted_s=1.1, wall_s=1.2, cpu_s=1.0, micro_batches=4, allreduce_s=0.1,
                       speed={"wall": 1.1, "cpu": float("nan")})
    assert r.error("wall") == pytest.approx((1.1 - 1.2) / 1.2)
    assert r.error("wall", drift=True) == pytest.approx((1.0 * 1.1 + 0.1 - 1.2) / 1.2)
    assert r.error("cpu", drift=True) == r.error("cpu")  # no probe times: as calibrated
