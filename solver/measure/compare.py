"""One step replayed under every schedule: plan_step's (with the calibrated cost) against each
trainer scheduler's, measured (:mod:`.replay`) and predicted by the step model.

Scale: a CPU cannot run a target model's lengths, so lengths are multiplied by
``scale = (a/b of the calibrated model) / (a/b of the target)``. A sequence's quadratic share of
its cost depends on ``l / (a/b)`` only, so the scaled batch on the small model has the target's
balance of linear and quadratic work (the overhead's share is the measured one's, not the
target's). The cap scales with the lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.heuristics import TRAINER_SCHEDULERS
from seqpart.solver import Cost, plan_step, step_time

from .profile import CostProfile
from .replay import RunnerSpec, Trial, ratio_ci, run_trials, schedule_lengths

PLAN = "plan_step"


def scale_factor(profile: CostProfile, target: Cost) -> float:
    """``profile.ratio / (target.linear / target.quadratic)``: 1 for a cost without l^2 term."""
    if target.quadratic == 0 or profile.quadratic_s == 0:
        return 1.0
    return profile.ratio / (target.linear / target.quadratic)


def scale_lengths(lengths: Sequence[int], factor: float) -> list[int]:
    if not factor > 0:
        raise ValueError(f"scale factor must be > 0, got {factor}")
    return [max(1, round(int(x) * factor)) for x in lengths]


def build_schedules(lengths: Sequence[int], dp: int, cap: int | None, profile: CostProfile,
                    time_limit: float = 1.0, trainers: Sequence[str] | None = None) -> dict[str, Any]:
    """plan_step's schedule (cost and overhead from ``profile``) and each trainer's, raw (the
    trainers balance the same calibrated per-sequence cost)."""
    cost = profile.cost
    costs = [cost.linear * x + cost.quadratic * x * x for x in lengths]
    out: dict[str, Any] = {}
    for name in trainers if trainers is not None else TRAINER_SCHEDULERS:
        out[name] = TRAINER_SCHEDULERS[name](list(lengths), dp, cap, costs=costs)
    plan = plan_step(list(lengths), dp, cap, cost=cost, overhead=profile.overhead, time_limit=time_limit)
    out[PLAN] = plan.ranks
    return out


@dataclass(frozen=True)
class ScheduleResult:
    name: str
    predicted_s: float  # model step + the measured all-reduce time
    wall_s: float  # median measured step, wall clock
    cpu_s: float  # median measured step, CPU clock for the compute part
    micro_batches: int

    def error(self, clock: str = "wall") -> float:
        meas = self.wall_s if clock == "wall" else self.cpu_s
        return (self.predicted_s - meas) / meas


@dataclass(frozen=True)
class BatchResult:
    schedules: dict[str, ScheduleResult]
    best_trainer: str  # fastest trainer schedule by median wall time
    ratio_wall: tuple[float, float, float]  # plan/best trainer: median, CI low, CI high
    ratio_cpu: tuple[float, float, float]
    predicted_ratio: float
    noise: float  # median over schedules of the repeats' (p90 - p10) / median, wall clock
    allreduce_s: float


def summarise(trials: Sequence[Trial], schedules: dict[str, Any], lengths: Sequence[int],
              profile: CostProfile) -> BatchResult:
    names = list(schedules)
    allreduce = float(np.median([t.ranks[max(range(len(t.ranks)), key=lambda r: t.ranks[r][0])][2]
                                 for t in trials]))
    per: dict[str, dict[int, Trial]] = {n: {} for n in names}
    for t in trials:
        per[t.schedule][t.repeat] = t
    res, noise = {}, []
    for n in names:
        walls = np.array([per[n][r].step("wall") for r in sorted(per[n])])
        cpus = np.array([per[n][r].step("cpu") for r in sorted(per[n])])
        model = float(step_time(schedules[n], lengths, cost=profile.cost, overhead=profile.overhead))
        res[n] = ScheduleResult(n, model * profile.unit_seconds + allreduce, float(np.median(walls)),
                                float(np.median(cpus)), sum(len(r) for r in schedules[n]))
        if len(walls) > 2:
            noise.append(float((np.quantile(walls, 0.9) - np.quantile(walls, 0.1)) / np.median(walls)))
    trainers = [n for n in names if n != PLAN]
    best = min(trainers, key=lambda n: res[n].wall_s)
    reps = sorted(set(per[PLAN]) & set(per[best]))

    def ci(clock: str) -> tuple[float, float, float]:
        return ratio_ci([per[PLAN][r].step(clock) for r in reps], [per[best][r].step(clock) for r in reps])

    return BatchResult(res, best, ci("wall"), ci("cpu"), res[PLAN].predicted_s / res[best].predicted_s,
                       float(np.median(noise)) if noise else float("nan"), allreduce)


def replay_batch(lengths: Sequence[int], dp: int, cap: int | None, profile: CostProfile, spec: RunnerSpec,
                 *, repeats: int = 5, warmup: int = 1, seed: int = 0, time_limit: float = 1.0,
                 trainers: Sequence[str] | None = None) -> BatchResult:
    """Plan, run and summarise one batch (``lengths`` already at the replay's scale)."""
    schedules = build_schedules(lengths, dp, cap, profile, time_limit, trainers)
    runs = {n: schedule_lengths(s, lengths) for n, s in schedules.items()}
    trials = run_trials(runs, spec, repeats=repeats, warmup=warmup, seed=seed)
    return summarise(trials, schedules, lengths, profile)
