"""calibrate_in_steps: steps run on two gloo processes, each micro-batch timed inside them, and
the design's profile refitted on them."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")

from seqpart.solver.measure import calibrate, make_design  # noqa: E402
from seqpart.solver.measure.calibrate import calibrate_in_steps  # noqa: E402
from seqpart.solver.measure.models import ReferenceConfig  # noqa: E402
from seqpart.solver.measure.replay import RunnerSpec  # noqa: E402

TINY = {"hidden": 32, "layers": 1, "heads": 2, "ffn": 64, "vocab": 64}


def test_steps_are_timed_on_gloo_ranks_and_whole_steps_held_out() -> None:
    prior = calibrate(reference=ReferenceConfig(**TINY), design=make_design(256, 4, 4), repeats=1,
                      warmup=1, progress=False, clock="cpu", min_seconds=0)
    steps = {
        f"s{i}": [[[16 * (i + 1)], [8, 8 + i], [40, 4, 4]], [[64 + 8 * i], [12] * (i + 1)]]
        for i in range(8)
    }
    p = calibrate_in_steps(steps, RunnerSpec("reference", TINY), prior, repeats=1, warmup=1,
                           hold_out=4)
    # s3 and s7 are held out: 2 steps x 2 ranks, 5 micro-batches each step
    assert p.design["step_runs"] == 12 and p.design["step_held_out"] == 4
    assert p.fit_error["held_out"]["count"] == 10 and p.fit_error["held_out_steps"]["count"] == 4
    assert p.design["context"] == "steps" and p.design["step_level"] > 0
    assert p.model == prior.model and p.measurements == prior.measurements
    assert p.seconds([64]) > 0


def test_bad_arguments_are_named() -> None:
    spec = RunnerSpec("reference", TINY)
    with pytest.raises(ValueError, match="steps is empty"):
        calibrate_in_steps({}, spec, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clock='gpu'"):
        calibrate_in_steps({"a": [[[1]]]}, spec, None, clock="gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hold_out must be an int >= 0"):
        calibrate_in_steps({"a": [[[1]]]}, spec, None, hold_out=-1)  # type: ignore[arg-type]
