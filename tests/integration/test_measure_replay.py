"""Measured replay: two real processes in a gloo group run two schedules, paired and
interleaved, and the summary compares them with the model's prediction."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from seqpart.solver import Cost  # noqa: E402
from seqpart.solver.measure.compare import PLAN, replay_batch, scale_factor, scale_lengths  # noqa: E402
from seqpart.solver.measure.profile import CostProfile  # noqa: E402
from seqpart.solver.measure.replay import RunnerSpec  # noqa: E402
from seqpart.solver.measure.stats import ratio_ci  # noqa: E402

TINY = {"hidden": 32, "layers": 1, "heads": 2, "ffn": 64, "vocab": 64}


def _profile() -> CostProfile:
    return CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                       torch_version="x", model={"kind": "reference"})


def test_replay_runs_every_schedule_on_two_gloo_ranks() -> None:
    lengths = [90, 12, 40, 33, 7, 60, 25, 18]
    res = replay_batch(lengths, 2, 128, _profile(), RunnerSpec("reference", TINY), repeats=2, warmup=1,
                       trainers=["megatron", "verl"], time_limit=0.2)
    assert set(res.schedules) == {"megatron", "verl", PLAN}
    for r in res.schedules.values():
        assert r.wall_s > 0 and r.cpu_s > 0 and r.predicted_s > 0 and r.micro_batches >= 2
    for clock in ("wall", "cpu"):
        assert res.best[clock] in {"megatron", "verl"}
        mid, lo, hi = res.ratio[clock]
        assert lo <= mid <= hi and res.predicted_ratio[clock] > 0
    assert res.allreduce_s > 0


def test_ratio_ci_and_scaling() -> None:
    mid, lo, hi = ratio_ci([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]).as_tuple()
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
