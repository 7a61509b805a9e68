"""One step replayed under every schedule: plan_step's (with the calibrated cost) against each
trainer scheduler's, measured (:mod:`.replay`) and predicted by the step model.

Scale: a CPU cannot run a target model's lengths, so lengths are multiplied by
``scale = (a/b of the calibrated model) / (a/b of the target)``. A sequence's quadratic share of
its cost depends on ``l / (a/b)`` only, so the scaled batch on the small model has the target's
balance of linear and quadratic work (the overhead's share is the measured one's, not the
target's). The cap scales with the lengths.

Pipeline parallelism (``pipeline=PipelineSetting(pp, vpp)``, pp > 1): every schedule is planned
for that pipeline (plan_step told pp and vpp; the trainers asked for a count that is a multiple of
pp when interleaving, run in their own order), each rank's micro-batches run and are timed one
by one, and the step combines those measured times with the modelled pipeline schedule
(:mod:`.pipeline_replay`): not a real pipeline run, which ``BatchResult.method`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...heuristics import TRAINER_SCHEDULERS
from ..problem import Cost
from ..step import order_schedule, plan_step, step_time
from ..step.pipeline import DEFAULT_MODEL, PipelineModel
from .fit import Fit
from .pipeline_replay import PipelineSetting
from .profile import CostProfile
from .replay import RunnerSpec, Trial, run_trials, schedule_lengths
from .stats import MedianCI, ratio_ci, repeats_for, sign_test_slower

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
                    time_limit: float = 1.0, trainers: Sequence[str] | None = None,
                    pipeline: PipelineSetting | None = None, order_trainers: bool = False
                    ) -> dict[str, Any]:
    """plan_step's schedule (cost and overhead from ``profile``, planned for ``pipeline``) and
    each trainer's, raw (the trainers balance the same calibrated per-sequence cost; with
    ``order_trainers`` at pp > 1 their micro-batches run in the order seqpart finds for them)."""
    pipe = pipeline or PipelineSetting()
    cost = profile.cost
    costs = cost.exact(np.asarray(lengths, dtype=np.int64)).tolist()
    kw = {"cost": cost, "overhead": profile.overhead, "pp": pipe.pp, "vpp": pipe.vpp,
          "pipeline": pipe.in_units(profile.unit_seconds)}
    out: dict[str, Any] = {}
    for name in trainers if trainers is not None else TRAINER_SCHEDULERS:
        sched = TRAINER_SCHEDULERS[name](list(lengths), dp, cap, costs=costs, multiple_of=pipe.multiple_of)
        if order_trainers and pipe.combined and pipe.why_not(sched) is None:
            sched = order_schedule(sched, list(lengths), **kw)[0]
        out[name] = sched
    plan = plan_step(list(lengths), dp, cap, time_limit=time_limit, **kw)
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
    ratio to it (median of the paired per-repeat ratios and its exact order-statistic interval,
    at ``ci_level``: 95%, or less when the repeats are too few to reach it), the model's
    predicted ratio to that same trainer (and the extended fit's), and the repeats' noise.
    ``identical`` names the trainers whose schedule is plan_step's own (the same micro-batches on
    the same ranks, at pp > 1 in the same order): any measured difference to those is noise."""

    schedules: dict[str, ScheduleResult]
    best: dict[str, str]
    ratio: dict[str, tuple[float, float, float]]
    predicted_ratio: dict[str, float]
    extended_ratio: dict[str, float | None]
    noise: dict[str, float]  # median over schedules of (p90 - p10) / median of the repeats
    allreduce_s: float
    pp: int = 1
    vpp: int = 1
    #: what a step is; at pp > 1 it says the pipeline is modelled, not run
    method: str = PipelineSetting().describe()
    #: schedules left out, with why (a count the pipeline schedule cannot run)
    skipped: dict[str, str] = field(default_factory=dict)
    #: every measured trial, with its per-micro-batch times
    trials: tuple[Trial, ...] = ()
    #: trainers whose schedule is plan_step's own
    identical: tuple[str, ...] = ()
    #: what the ``ratio`` intervals cover, exactly
    ci_level: float = 0.95


def extended_step(schedule: Any, lengths: Sequence[int], profile: CostProfile,
                  pipeline: PipelineSetting | None = None) -> float | None:
    """The step in seconds under the profile's extended fit (the slowest rank's micro-batches'
    fitted times, summed, or at pp > 1 through the pipeline); None without an extended fit."""
    if not profile.extended:
        return None
    fit = Fit(coef=dict(profile.extended["coefficients"]))
    ranks = [[[int(lengths[i]) for i in mb] for mb in rank] for rank in schedule]
    times = [[float(x) for x in fit.predict(r)] if r else [] for r in ranks]
    return (pipeline or PipelineSetting()).fitted_step(times)


def _by_schedule(trials: Sequence[Trial]) -> dict[str, dict[int, Trial]]:
    """Trials by schedule name, then by repeat."""
    per: dict[str, dict[int, Trial]] = {}
    for t in trials:
        per.setdefault(t.schedule, {})[t.repeat] = t
    return per


def _paired_steps(per: dict[str, dict[int, Trial]], name: str, clock: str, pipe: PipelineSetting
                  ) -> tuple[np.ndarray, np.ndarray]:
    """plan_step's and ``name``'s steps on ``clock`` in the repeats both ran, paired by repeat."""
    reps = sorted(set(per.get(PLAN, {})) & set(per.get(name, {})))
    return (np.array([pipe.step(per[PLAN][r], clock) for r in reps]),
            np.array([pipe.step(per[name][r], clock) for r in reps]))


def summarise(trials: Sequence[Trial], schedules: dict[str, Any], lengths: Sequence[int],
              profile: CostProfile, pipeline: PipelineSetting | None = None,
              skipped: dict[str, str] | None = None) -> BatchResult:
    """Per schedule the median step and the model's prediction, and plan_step against the
    best trainer, on both clocks; at pp > 1 every step is ``pipeline``'s combination."""
    pipe = pipeline or PipelineSetting()
    names = list(schedules)
    allreduce = float(np.median([t.allreduce for t in trials]))
    per = {n: {} for n in names} | _by_schedule(trials)
    res, noise = {}, {c: [] for c in CLOCKS}
    for n in names:
        steps = {c: np.array([pipe.step(per[n][r], c) for r in sorted(per[n])]) for c in CLOCKS}
        model = float(step_time(schedules[n], lengths, cost=profile.cost, overhead=profile.overhead,
                                pp=pipe.pp, vpp=pipe.vpp, pipeline=pipe.in_units(profile.unit_seconds)))
        ext = extended_step(schedules[n], lengths, profile, pipe)
        res[n] = ScheduleResult(n, model * profile.unit_seconds + allreduce, float(np.median(steps["wall"])),
                                float(np.median(steps["cpu"])), sum(len(r) for r in schedules[n]),
                                None if ext is None else ext + allreduce)
        for c in CLOCKS:
            if len(steps[c]) > 2:
                spread = np.quantile(steps[c], 0.9) - np.quantile(steps[c], 0.1)
                noise[c].append(float(spread / np.median(steps[c])))
    trainers = [n for n in names if n != PLAN]
    best, ratio, predicted, extended = {}, {}, {}, {}
    level, ordered = 0.95, pipe.pp > 1
    for c in CLOCKS:
        b = best[c] = min(trainers, key=lambda n, c=c: res[n].wall_s if c == "wall" else res[n].cpu_s)
        ci = ratio_ci(*_paired_steps(per, b, c, pipe))
        ratio[c], level = ci.as_tuple(), ci.level
        predicted[c] = res[PLAN].predicted_s / res[b].predicted_s
        pe, be = res[PLAN].extended_s, res[b].extended_s
        extended[c] = None if pe is None or be is None else pe / be
    return BatchResult(res, best, ratio, predicted, extended,
                       {c: float(np.median(v)) if v else float("nan") for c, v in noise.items()}, allreduce,
                       pipe.pp, pipe.vpp, pipe.describe(), dict(skipped or {}), tuple(trials),
                       tuple(n for n in trainers if same_schedule(schedules[n], schedules[PLAN], ordered)),
                       level)


def same_schedule(a: Any, b: Any, ordered: bool = True) -> bool:
    """The same work: on some matching of ranks, each rank runs the same micro-batches (as sets
    of sequences), in the same order when ``ordered`` (a pipeline's step depends on it; at pp=1
    a rank's step is the sum of its micro-batches in any order). The order of sequences inside
    a micro-batch, and which process runs which rank, may differ."""
    def canon(s: Any) -> list[list[list[int]]]:
        ranks = [[sorted(int(i) for i in mb) for mb in rank] for rank in s]
        return sorted(r if ordered else sorted(r) for r in ranks)
    return len(a) == len(b) and canon(a) == canon(b)


@dataclass(frozen=True)
class Comparison:
    """plan_step against one trainer on one clock: the paired ratio (median and exact interval),
    the one-sided sign test's p-value for "plan_step is slower", and whether the two schedules
    are the same work (then a small p-value is a false alarm of the test, by construction)."""

    trainer: str
    ratio: MedianCI
    p_slower: float
    identical: bool


def comparisons(res: BatchResult, clock: str, level: float = 0.95) -> dict[str, Comparison]:
    """plan_step against every trainer, paired by repeat, on ``clock``."""
    pipe = PipelineSetting(res.pp, res.vpp)
    per = _by_schedule(res.trials)
    out = {}
    for name in (n for n in res.schedules if n != PLAN):
        plan, other = _paired_steps(per, name, clock, pipe)
        if not len(plan):
            continue
        out[name] = Comparison(name, ratio_ci(plan, other, level=level), sign_test_slower(plan / other),
                               name in res.identical)
    return out


def slower_than_any(res: BatchResult, clock: str, level: float = 0.95
                    ) -> dict[str, tuple[float, float, float]]:
    """The trainers plan_step is slower than beyond noise, each with its paired ratio (median,
    exact interval). Why every trainer and not only the fastest: picking the fastest of several
    by their measured medians favours the one whose repeats ran lucky, so an interval against it
    alone is too narrow. Each of the T comparisons gets a ``1 - (1 - level) / T`` interval
    (Bonferroni), so the chance of a false "slower" over the batch stays at most ``1 - level``;
    with fewer repeats than :func:`~.stats.repeats_for` that level needs, no interval can reach
    it and nothing is called slower (give more repeats)."""
    trainers = [n for n in res.schedules if n != PLAN]
    each = 1 - (1 - level) / max(1, len(trainers))
    out = {}
    for name, c in comparisons(res, clock, each).items():
        if c.ratio.level >= each and c.ratio.low > 1.0:
            out[name] = c.ratio.as_tuple()
    return out


def min_repeats(trainers: int, level: float = 0.95) -> int:
    """Repeats that :func:`slower_than_any` needs to call anything slower at ``level`` against
    ``trainers`` trainers (8 for 6 trainers at 95%)."""
    return repeats_for(1 - (1 - level) / max(1, trainers))


def runnable(schedules: dict[str, Any], pipeline: PipelineSetting) -> tuple[dict[str, Any], dict[str, str]]:
    """The schedules the pipeline can run, and why each other one cannot (a trainer's count
    the interleaved schedule deadlocks on); an error when plan_step's or every trainer's cannot."""
    skipped = {n: why for n, s in schedules.items() if (why := pipeline.why_not(s)) is not None}
    keep = {n: s for n, s in schedules.items() if n not in skipped}
    if PLAN not in keep or len(keep) < 2:
        raise ValueError(f"no pair to compare at pp={pipeline.pp} vpp={pipeline.vpp}: "
                         + "; ".join(f"{n}: {w}" for n, w in skipped.items()))
    return keep, skipped


def replay_batch(lengths: Sequence[int], dp: int, cap: int | None, profile: CostProfile, spec: RunnerSpec,
                 *, repeats: int = 5, warmup: int = 1, seed: int = 0, time_limit: float = 1.0,
                 trainers: Sequence[str] | None = None, pp: int = 1, vpp: int = 1,
                 pipeline: PipelineModel | None = None, order_trainers: bool = False) -> BatchResult:
    """Plan, run and summarise one batch (``lengths`` already at the replay's scale). With
    ``pp > 1`` every schedule is planned for ``pp``/``vpp`` and its steps are the measured
    micro-batch times combined with the modelled ``pipeline`` (default Megatron-LM's)."""
    pipe = PipelineSetting(pp, vpp, pipeline or DEFAULT_MODEL)
    schedules = build_schedules(lengths, dp, cap, profile, time_limit, trainers, pipe, order_trainers)
    schedules, skipped = runnable(schedules, pipe)
    runs = {n: schedule_lengths(s, lengths) for n, s in schedules.items()}
    trials = run_trials(runs, spec, repeats=repeats, warmup=warmup, seed=seed, micro_cpu=pipe.combined)
    return summarise(trials, schedules, lengths, profile, pipe, skipped)
