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

from .fit import Fit
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
    costs = [cost.linear * x + cost.quadratic * x * x + cost.per_sequence for x in lengths]
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
    #: the profile's extended fit (extra terms, e.g. a per-micro-batch-size term) + all-reduce;
    #: None when calibration kept no extra term. The planners do not optimise it.
    extended_s: float | None = None

    def error(self, clock: str = "wall") -> float:
        meas = self.wall_s if clock == "wall" else self.cpu_s
        return (self.predicted_s - meas) / meas


CLOCKS = ("wall", "cpu")


@dataclass(frozen=True)
class BatchResult:
    """Per clock ("wall", "cpu"): the fastest trainer schedule by median step, plan_step's
    ratio to it (median of the paired per-repeat ratios, 95% bootstrap CI), the model's
    predicted ratio to that same trainer (and the extended fit's), and the repeats' noise."""

    schedules: dict[str, ScheduleResult]
    best: dict[str, str]
    ratio: dict[str, tuple[float, float, float]]
    predicted_ratio: dict[str, float]
    extended_ratio: dict[str, float | None]
    noise: dict[str, float]  # median over schedules of (p90 - p10) / median of the repeats
    allreduce_s: float


def extended_step(schedule: Any, lengths: Sequence[int], profile: CostProfile) -> float | None:
    """The step in seconds under the profile's extended fit (max over ranks of the sum of its
    micro-batches' fitted times); None when the profile has no extended fit."""
    if not profile.extended:
        return None
    fit = Fit(coef=dict(profile.extended["coefficients"]))
    ranks = [[[int(lengths[i]) for i in mb] for mb in rank] for rank in schedule]
    return max(float(fit.predict(r).sum()) if r else 0.0 for r in ranks)


def summarise(trials: Sequence[Trial], schedules: dict[str, Any], lengths: Sequence[int],
              profile: CostProfile) -> BatchResult:
    names = list(schedules)
    allreduce = float(np.median([t.ranks[max(range(len(t.ranks)), key=lambda r: t.ranks[r][0])][2]
                                 for t in trials]))
    per: dict[str, dict[int, Trial]] = {n: {} for n in names}
    for t in trials:
        per[t.schedule][t.repeat] = t
    res, noise = {}, {c: [] for c in CLOCKS}
    for n in names:
        steps = {c: np.array([per[n][r].step(c) for r in sorted(per[n])]) for c in CLOCKS}
        model = float(step_time(schedules[n], lengths, cost=profile.cost, overhead=profile.overhead))
        ext = extended_step(schedules[n], lengths, profile)
        res[n] = ScheduleResult(n, model * profile.unit_seconds + allreduce, float(np.median(steps["wall"])),
                                float(np.median(steps["cpu"])), sum(len(r) for r in schedules[n]),
                                None if ext is None else ext + allreduce)
        for c in CLOCKS:
            if len(steps[c]) > 2:
                spread = np.quantile(steps[c], 0.9) - np.quantile(steps[c], 0.1)
                noise[c].append(float(spread / np.median(steps[c])))
    trainers = [n for n in names if n != PLAN]
    best, ratio, predicted, extended = {}, {}, {}, {}
    for c in CLOCKS:
        b = best[c] = min(trainers, key=lambda n, c=c: res[n].wall_s if c == "wall" else res[n].cpu_s)
        reps = sorted(set(per[PLAN]) & set(per[b]))
        ratio[c] = ratio_ci([per[PLAN][r].step(c) for r in reps], [per[b][r].step(c) for r in reps])
        predicted[c] = res[PLAN].predicted_s / res[b].predicted_s
        pe, be = res[PLAN].extended_s, res[b].extended_s
        extended[c] = None if pe is None or be is None else pe / be
    return BatchResult(res, best, ratio, predicted, extended,
                       {c: float(np.median(v)) if v else float("nan") for c, v in noise.items()}, allreduce)


def replay_batch(lengths: Sequence[int], dp: int, cap: int | None, profile: CostProfile, spec: RunnerSpec,
                 *, repeats: int = 5, warmup: int = 1, seed: int = 0, time_limit: float = 1.0,
                 trainers: Sequence[str] | None = None) -> BatchResult:
    """Plan, run and summarise one batch (``lengths`` already at the replay's scale)."""
    schedules = build_schedules(lengths, dp, cap, profile, time_limit, trainers)
    runs = {n: schedule_lengths(s, lengths) for n, s in schedules.items()}
    trials = run_trials(runs, spec, repeats=repeats, warmup=warmup, seed=seed)
    return summarise(trials, schedules, lengths, profile)
