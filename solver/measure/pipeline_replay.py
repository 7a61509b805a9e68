"""Pipeline parallelism in the measured replay: measured micro-batch times, modelled pipeline.

Why: one machine cannot run a real pipeline of ``pp`` devices per data-parallel rank. So at
``pp > 1`` the replay still runs every rank's micro-batches for real (forward and backward, in
the schedule's order, each one timed), and takes the rank's time as the exact makespan
(:func:`seqpart.solver.step.pipeline.makespan`) of those measured times under the pipeline
model (default Megatron-LM's 1F1B, interleaved when ``vpp > 1``). The step is the slowest rank's
makespan plus the measured all-reduce. The replayed model stands for one pipeline stage: every
stage runs each micro-batch for its measured time, as the step model's cost per micro-batch is
a time per device; the forward/backward split, the bubble and the stage-to-stage latency are the
model's, not measured. Such a step is labelled as combined, never as a pipeline run.

The pipeline evaluator is exact-integer, so seconds become integer nanoseconds first
(``PipelineModel.p2p_latency`` is then in nanoseconds too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ..step.pipeline import DEFAULT_MODEL, PipelineModel, makespan, schedule_error
from ..tuning import NS_PER_SECOND
from .replay import Trial


def to_ns(seconds: float) -> int:
    """Seconds as integer nanoseconds (>= 0; a clock can read a hair below zero)."""
    return max(0, round(float(seconds) * NS_PER_SECOND))


def _count(value: Any, name: str, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 1 (the {flag}), got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1 (the {flag}), got {value}")
    return value


@dataclass(frozen=True)
class PipelineSetting:
    """The pipeline a replay's steps are combined with: ``pp`` stages per data-parallel rank,
    ``vpp`` model chunks per stage, ``model`` the schedule. ``pp == 1``: no pipeline, the step
    is measured end to end."""

    pp: int = 1
    vpp: int = 1
    model: PipelineModel = DEFAULT_MODEL

    def __post_init__(self) -> None:
        _count(self.pp, "pp", "pipeline depth: stages per data-parallel rank")
        _count(self.vpp, "vpp", "model chunks per pipeline stage")
        if not isinstance(self.model, PipelineModel):
            raise TypeError(f"pipeline must be a PipelineModel, got {type(self.model).__name__}")
        if self.pp == 1 and self.vpp > 1:
            raise ValueError(f"vpp={self.vpp} interleaves pipeline stages, so it needs pp > 1: "
                             "give pp > 1, or vpp=1")
        self.model.resolved(self.vpp)  # a schedule that cannot interleave raises here

    @property
    def combined(self) -> bool:
        """True when steps are measured micro-batch times through the modelled pipeline."""
        return self.pp > 1

    @property
    def multiple_of(self) -> int:
        """The count per rank's multiple the trainers are asked for: ``pp`` when interleaving
        (Megatron-LM requires it), else 1 (the planners' default)."""
        return self.pp if self.vpp > 1 else 1

    @property
    def schedule(self) -> str:
        return self.model.resolved(self.vpp) if self.combined else "none"

    def describe(self) -> str:
        """What a reported step is: the label every output carries."""
        if not self.combined:
            return ("step measured end to end: each rank's micro-batches run back to back, then "
                    "the gradient all-reduce")
        m = self.model
        return (f"pp={self.pp} vpp={self.vpp}: NOT a real pipeline run. Each rank's micro-batches "
                f"ran for real and were timed one by one; the step is the exact makespan of those "
                f"measured times under the modelled {self.schedule} pipeline schedule "
                f"(forward:backward {m.forward}:{m.backward}, p2p latency {m.p2p_latency} ns; the "
                f"replayed model stands for one stage), plus the measured all-reduce")

    def in_units(self, unit_seconds: float) -> PipelineModel:
        """The model with its latency (ns here) in the cost units of the planners."""
        if not self.model.p2p_latency:
            return self.model
        lat = round(self.model.p2p_latency / NS_PER_SECOND / unit_seconds)
        return replace(self.model, p2p_latency=lat)

    def why_not(self, schedule: Sequence[Sequence[Any]]) -> str | None:
        """Why the pipeline schedule cannot run some rank's count of micro-batches, or None."""
        for m in sorted({len(r) for r in schedule if len(r)}):
            why = schedule_error(self.pp, self.vpp, m, self.model)
            if why is not None:
                return f"{m} micro-batches on a rank: {why}"
        return None

    def makespan_ns(self, seconds: Sequence[float]) -> int | Fraction:
        """One rank's makespan in nanoseconds, its micro-batches taking ``seconds`` in order."""
        return makespan([to_ns(t) for t in seconds], self.pp, self.vpp, self.model)

    def rank_makespans(self, trial: Trial, clock: str = "wall") -> list[int | Fraction]:
        """Each rank's makespan (ns) of the trial's measured micro-batch times on ``clock``."""
        col = _column(clock)
        if len(trial.micro) != len(trial.ranks):
            raise ValueError(f"trial of {trial.schedule!r} has no per-micro-batch times: "
                             "run it with run_trials")
        times = [[mb[col] for mb in rank] for rank in trial.micro]
        if any(t != t for r in times for t in r):  # NaN: not measured on this clock
            raise ValueError(f"trial of {trial.schedule!r} has no per-micro-batch {clock} times: "
                             "run it with run_trials(..., micro_cpu=True)")
        return [self.makespan_ns(r) for r in times]

    def step(self, trial: Trial, clock: str = "wall") -> float:
        """The trial's step in seconds: measured end to end at ``pp == 1``; else the slowest
        rank's makespan plus the all-reduce of the rank that arrived last."""
        if not self.combined:
            return trial.step(clock)
        return float(max(self.rank_makespans(trial, clock))) / NS_PER_SECOND + trial.allreduce

    def fitted_step(self, ranks: Sequence[Sequence[float]]) -> float:
        """The step in seconds of per-rank, per-micro-batch predicted times (no all-reduce)."""
        if not self.combined:
            return max((float(sum(r)) for r in ranks), default=0.0)
        return max((float(self.makespan_ns(r)) for r in ranks), default=0.0) / NS_PER_SECOND


def _column(clock: str) -> int:
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock={clock!r}: use 'wall' or 'cpu'")
    return 0 if clock == "wall" else 1
