"""Calibration in the step's own context: the design's fit, checked and scaled on real steps.

Why: a micro-batch timed on its own runs in another context than inside a step, where it follows
micro-batches of its own rank's kind while the other ranks run theirs. Measured on the reference
decoder on a 2-core CPU (two processes, as the replay's ranks): the fit of the isolated design
kept a per-sequence term and a size term (``T^2``), and inside steps plan_step's ranks, split
into more micro-batches to use that size term, ran 1-3% slower than predicted while the
trainers' ran 1-6% faster. So the model over-stated plan_step's gain on long-CoT by 2-4 points.

Refitting on in-step times alone does not work: a workload's micro-batches are all alike (every
math micro-batch near the cap, a few hundred tokens), so the terms are collinear, and such fits
were 30-150% off on other kinds of steps. So the work is split:

1. the coefficients of every candidate term set come from the design (:func:`calibrate`'s
   micro-batches, timed alone: they vary the terms independently);
2. the term set is the one that predicts the in-step ranks' times best *up to one common
   factor* (a shape error: which terms are real inside a step);
3. that factor (the median of measured over predicted, per rank) scales every coefficient: the
   step context's speed (contention, warm caches), which the design's timings do not see.

Whole steps are held out and only scored. :func:`refit_in_steps` is pure (a trainer can pass the
micro-batch times it records in its own steps); :func:`calibrate_in_steps` runs the steps on dp
gloo processes (:func:`~seqpart.solver.measure.replay.run_trials`) and refits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .checks import lengths_list, positive_int
from .fit import BASE_TERMS, FitError, candidate_terms, error_of, fit_terms
from .profile import CostProfile, feature
from .replay import RunnerSpec, Schedule, run_trials

#: A rank's micro-batches in one step (lengths), and each one's measured seconds.
Run = Sequence[Sequence[int]]


def _checked(runs: Sequence[Run], seconds: Sequence[Sequence[float]], name: str
             ) -> tuple[list[list[list[int]]], list[list[float]]]:
    if len(runs) != len(seconds):
        raise ValueError(f"{name} has {len(runs)} runs but {len(seconds)} rows of seconds: "
                         "pass one row of micro-batch seconds per run")
    out_runs, out_secs = [], []
    for i, (run, secs) in enumerate(zip(runs, seconds, strict=True)):
        mbs = [lengths_list(mb, f"{name}[{i}][{j}]") for j, mb in enumerate(run)]
        ys = [float(s) for s in secs]
        if not mbs or len(ys) != len(mbs):
            raise ValueError(f"{name}[{i}] has {len(mbs)} micro-batches and {len(ys)} seconds: "
                             "pass one time per micro-batch (and at least one micro-batch)")
        if not all(np.isfinite(ys)) or min(ys) <= 0:
            raise ValueError(f"{name}[{i}]'s seconds must be finite and > 0, got {ys}")
        out_runs.append(mbs)
        out_secs.append(ys)
    return out_runs, out_secs


def _totals(coef: Mapping[str, float], runs: Sequence[Run]) -> np.ndarray:
    return np.array([sum(v * feature(mb, k) for mb in run for k, v in coef.items()) for run in runs])


def _level_and_shape(coef: Mapping[str, float], runs: Sequence[Run], measured: np.ndarray
                     ) -> tuple[float, float]:
    """The common factor (median measured/predicted per run) and the mean relative error left
    after it."""
    ratio = measured / _totals(coef, runs)
    level = float(np.median(ratio))
    return level, float(np.mean(np.abs(ratio / level - 1)))


def refit_in_steps(prior: CostProfile, runs: Sequence[Run], seconds: Sequence[Sequence[float]], *,
                   held_out: Sequence[Run] = (), held_out_seconds: Sequence[Sequence[float]] = (),
                   min_gain: float = 0.1) -> CostProfile:
    """``prior`` (a :func:`calibrate` profile with its measurements) refitted for the step
    context: term set chosen and coefficients scaled on ``runs`` (each a rank's micro-batches in
    one step, timed one by one: ``seconds``), as the module says. An extra term set replaces a
    smaller one only if it lowers the shape error by ``min_gain`` (10%) of it, as the design's
    own selection does. ``held_out`` runs are only scored."""
    design = [r for r in prior.measurements if not r.get("held_out")]
    if len(design) < 2 * (len(BASE_TERMS) + 2):
        raise ValueError("prior holds too few design measurements to refit: pass a profile "
                         "from calibrate() (it saves them)")
    train, train_s = _checked(runs, seconds, "runs")
    held, held_s = _checked(held_out, held_out_seconds, "held_out")
    if len(train) < 4:
        raise ValueError(f"{len(train)} runs are too few to refit on: time at least 4 ranks' steps")
    mbs = [list(r["lengths"]) for r in design]
    secs = [float(r["seconds"]) for r in design]
    measured = np.array([sum(s) for s in train_s])
    max_tokens = max(sum(mb) for mb in mbs)
    sets = [BASE_TERMS] + [(*BASE_TERMS, *extra) for extra in candidate_terms(max_tokens)]
    scored = []
    for terms in sets:
        if len(mbs) < 2 * len(terms):
            continue
        coef = fit_terms(mbs, secs, terms).coef
        level, shape = _level_and_shape(coef, train, measured)
        scored.append((terms, coef, level, shape))
    best = scored[0]
    for cand in scored[1:]:
        if cand[3] < best[3] * (1 - min_gain):
            best = cand
    base_terms, base_coef, base_level, base_shape = scored[0]
    terms, coef, level, shape = best
    every_mb = [mb for run in train for mb in run]
    every_s = np.array([s for row in train_s for s in row])
    held_mb = [mb for run in held for mb in run]
    held_mb_s = np.array([s for row in held_s for s in row])

    def report(c: Mapping[str, float], sh: float) -> dict[str, Any]:
        def per_mb(batch: list[list[int]], ys: np.ndarray) -> FitError | None:
            return error_of(_totals(c, [[mb] for mb in batch]), ys) if len(ys) else None

        held_err, train_err = per_mb(held_mb, held_mb_s), per_mb(every_mb, every_s)
        steps_err = error_of(_totals(c, held), np.array([sum(s) for s in held_s])) if held else None
        return {"held_out": held_err.as_dict() if held_err else None,
                "train": train_err.as_dict() if train_err else None,
                "held_out_steps": steps_err.as_dict() if steps_err else None,
                "shape_rel": sh, "cv_mean_rel": None}

    base = {k: base_level * v for k, v in base_coef.items()}
    chosen = {k: level * v for k, v in coef.items()}
    extended = None if terms == base_terms else {"coefficients": chosen, **report(chosen, shape)}
    return CostProfile(
        overhead_s=base["overhead"], linear_s=base["linear"], quadratic_s=base["quadratic"],
        device=prior.device, dtype=prior.dtype, torch_version=prior.torch_version, model=prior.model,
        fit_error={**report(base, base_shape), "noise": prior.fit_error.get("noise")},
        extended=extended, memory=prior.memory,
        design={**prior.design, "context": "steps", "step_level": level,
                "step_runs": len(train), "step_held_out": len(held),
                "terms_by_shape": {"+".join(t[len(BASE_TERMS):]) or "base": s for t, _, _, s in scored}},
        measurements=prior.measurements, created=prior.created,
    )


def calibrate_in_steps(steps: Mapping[str, Schedule], spec: RunnerSpec, prior: CostProfile, *,
                       repeats: int = 3, warmup: int = 1, seed: int = 0, hold_out: int = 4,
                       clock: str = "cpu", timeout: float = 1800.0) -> CostProfile:
    """Run every step of ``steps`` (name -> [rank][micro-batch] = lengths, one dp size) on the
    model of ``spec``, ``repeats`` times, paired and interleaved after ``warmup`` rounds, time
    each micro-batch inside them (its median over the repeats, on ``clock``: "cpu" or "wall"),
    and :func:`refit_in_steps` ``prior`` (the same model's :func:`calibrate` profile). Every
    ``hold_out``-th step (in the mapping's order; 0: none) is held out whole.

    Give steps like those the profile will plan and predict (the same kinds of batches and
    schedulers, other draws)."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock={clock!r} is not understood: use 'cpu' or 'wall'")
    positive_int(hold_out, "hold_out", minimum=0)
    if not steps:
        raise ValueError("steps is empty: pass name -> [rank][micro-batch] = lengths")
    names = list(steps)
    trials = run_trials({k: steps[k] for k in names}, spec, repeats=repeats, warmup=warmup,
                        seed=seed, timeout=timeout, micro_cpu=True)
    col = 1 if clock == "cpu" else 0
    times: dict[tuple[str, int, int], list[float]] = {}
    for trial in trials:
        for r, rank in enumerate(trial.micro):
            for j, pair in enumerate(rank):
                times.setdefault((trial.schedule, r, j), []).append(pair[col])
    split: dict[bool, tuple[list[Run], list[list[float]]]] = {False: ([], []), True: ([], [])}
    for i, name in enumerate(names):
        held = hold_out > 0 and i % hold_out == hold_out - 1
        for r, rank in enumerate(steps[name]):
            if rank:
                split[held][0].append(rank)
                split[held][1].append([float(np.median(times[(name, r, j)])) for j in range(len(rank))])
    return refit_in_steps(prior, *split[False], held_out=split[True][0],
                          held_out_seconds=split[True][1])
