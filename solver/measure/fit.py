"""Fitting micro-batch times: non-negative least squares on relative error, term selection by
cross-validation, and the held-out error report.

The base model is ``t = overhead + a*sum(l) + b*sum(l^2)``. Candidate extra terms are the
sequence count (a per-sequence cost such as a kernel launch per sequence), ``T^2`` for the
micro-batch's token total ``T`` (a per-token cost growing linearly with the micro-batch's size,
as caches make it on a CPU), rises ``max(0, T - knot)`` (a per-token cost that steps up past a
size) and falls ``max(0, knot - T)`` (a micro-batch below ``knot`` tokens paying as if it were
larger, as an under-filled GPU does). Every coefficient is >= 0, so the fitted size term is
convex: exactly the form the step model optimises
(:class:`~seqpart.solver.batch_cost.MicroBatchCost`, ``Cost.per_sequence``). An extra
term is kept only when it lowers the cross-validated error on the training micro-batches, so the
held-out micro-batches stay unseen until the final report. Rows are divided by their measured
time, so the fit minimises squared *relative* error (times span two orders of magnitude).

:func:`refit_in_steps` refits for the step's own context. Why: a micro-batch timed on its own
runs in another context than inside a step, where it follows micro-batches of its own rank's
kind while the other ranks run theirs. Measured on the reference decoder on a 2-core CPU (two
processes, as the replay's ranks): the isolated design's fit kept a per-sequence term and a size
term (``T^2``), and inside steps plan_step's ranks, split into more micro-batches to use that
size term, mostly ran 1-3% slower than predicted and the trainers' 1-6% faster, so the model
over-stated plan_step's gain on long-CoT by 2-5 points. Refitting on in-step times alone does
not work: a workload's micro-batches are all alike (every math micro-batch near the cap, a few
hundred tokens), so the terms are collinear, and such fits were up to 150% off on other kinds
of steps. So the work is split:

1. the coefficients of every candidate term set come from the design (micro-batches timed
   alone: they vary the terms independently);
2. the term set is the one that predicts the in-step ranks' times best *up to one common
   factor* (a shape error: which terms are real inside a step);
3. that factor (the median of measured over predicted, per rank) scales every coefficient: the
   step context's speed (contention, warm caches), which the design's timings do not see.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import lengths_list
from .profile import CostProfile, feature

#: The planning model's terms; every fit has them.
BASE_TERMS = ("overhead", "linear", "quadratic")


@dataclass(frozen=True)
class FitError:
    """How well a fit predicts micro-batches: relative errors |pred - meas| / meas, and R^2."""

    median_rel: float
    max_rel: float
    r2: float
    count: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median_rel": self.median_rel, "max_rel": self.max_rel, "r2": self.r2, "count": self.count}


@dataclass(frozen=True)
class Fit:
    """Coefficients in seconds per feature unit, keyed by term name."""

    coef: dict[str, float]
    knots: tuple[int, ...] = ()
    train_error: FitError | None = None
    held_out_error: FitError | None = None
    cv_error: float | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(self.coef)

    def predict(self, micro_batches: Sequence[Sequence[int]]) -> np.ndarray:
        return features(micro_batches, self.terms) @ np.array([self.coef[t] for t in self.terms])


def features(micro_batches: Sequence[Sequence[int]], terms: Sequence[str]) -> np.ndarray:
    return np.array([[feature(mb, t) for t in terms] for mb in micro_batches], dtype=np.float64)


def _solve(x: np.ndarray, y: np.ndarray, terms: Sequence[str]) -> np.ndarray:
    """Least squares on relative error, every coefficient >= 0 (a convex size term: a rising
    per-token cost is a rise or ``T^2``, a falling one a fall)."""
    from scipy.optimize import lsq_linear

    w = 1.0 / y
    xs, ys = x * w[:, None], y * w
    scale = np.maximum(np.abs(xs).max(axis=0), 1e-300)  # column scaling: features span 1..1e7
    lower = np.zeros(len(terms))
    res = lsq_linear(xs / scale, ys, bounds=(lower, np.full(len(terms), np.inf)), method="bvls")
    return res.x / scale


def error_of(pred: np.ndarray, meas: np.ndarray) -> FitError:
    rel = np.abs(pred - meas) / meas
    ss_res = float(np.sum((pred - meas) ** 2))
    ss_tot = float(np.sum((meas - meas.mean()) ** 2))
    return FitError(
        median_rel=float(np.median(rel)) if len(rel) else float("nan"),
        max_rel=float(np.max(rel)) if len(rel) else float("nan"),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        count=len(meas),
    )


def fit_terms(micro_batches: Sequence[Sequence[int]], times: Sequence[float], terms: Sequence[str]) -> Fit:
    y = np.asarray(times, dtype=np.float64)
    if len(y) != len(micro_batches):
        raise ValueError(f"{len(y)} times for {len(micro_batches)} micro-batches: pass one per micro-batch")
    if len(y) < len(terms):
        raise ValueError(f"{len(y)} micro-batches cannot fit {len(terms)} terms: time more micro-batches")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("times must be finite and > 0 seconds")
    x = features(micro_batches, terms)
    coef = _solve(x, y, terms)
    knots = tuple(int(t.split("@")[1]) for t in terms if "@" in t)
    return Fit(coef=dict(zip(terms, (float(c) for c in coef), strict=True)), knots=knots,
               train_error=error_of(x @ coef, y))


def cv_error(micro_batches: Sequence[Sequence[int]], times: Sequence[float], terms: Sequence[str],
             folds: int = 5, seed: int = 0) -> float:
    """Mean relative error over ``folds`` cross-validation folds (each point predicted once)."""
    y = np.asarray(times, dtype=np.float64)
    order = np.random.default_rng(seed).permutation(len(y))
    rel = np.empty(len(y))
    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(order, test)
        coef = _solve(features([micro_batches[i] for i in train], terms), y[train], terms)
        pred = features([micro_batches[i] for i in test], terms) @ coef
        rel[test] = np.abs(pred - y[test]) / y[test]
    return float(np.mean(rel))


def candidate_terms(max_tokens: int) -> list[tuple[str, ...]]:
    """Extra-term sets tried on top of the base: the count, T^2, rises, a fall, and pairs."""
    knots = [max_tokens // 4, max_tokens // 2]
    hinge = [f"hinge@{k}" for k in knots]
    fall = f"fall@{max_tokens // 4}"
    return [("count",), ("total_sq",), ("count", "total_sq"), (hinge[1],), tuple(hinge),
            ("count", hinge[1]), ("count", *hinge), (fall,), ("count", fall)]


def select_and_fit(train: Sequence[Sequence[int]], train_times: Sequence[float],
                   held_out: Sequence[Sequence[int]], held_out_times: Sequence[float],
                   max_tokens: int, min_gain: float = 0.1) -> tuple[Fit, Fit]:
    """The planning fit (base terms) and the best extended fit: an extra-term set replaces the
    current one only if it lowers the cross-validated error by ``min_gain`` (10%) of it."""
    base = fit_terms(train, train_times, BASE_TERMS)
    base_cv = cv_error(train, train_times, BASE_TERMS)
    best_terms, best_cv = BASE_TERMS, base_cv
    for extra in candidate_terms(max_tokens):
        terms = (*BASE_TERMS, *extra)
        if len(train) < 2 * len(terms):
            continue
        err = cv_error(train, train_times, terms)
        if err < best_cv * (1 - min_gain):
            best_terms, best_cv = terms, err
    ext = base if best_terms == BASE_TERMS else fit_terms(train, train_times, best_terms)
    out = []
    for fit, cv in ((base, base_cv), (ext, best_cv)):
        held = error_of(fit.predict(held_out), np.asarray(held_out_times)) if len(held_out) else None
        out.append(Fit(coef=fit.coef, knots=fit.knots, train_error=fit.train_error,
                       held_out_error=held, cv_error=cv))
    return out[0], out[1]


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
    """Each run's predicted total (a rank's time in its step)."""
    fit = Fit(coef=dict(coef))
    return np.array([float(fit.predict(run).sum()) for run in runs])


def _level_and_shape(coef: Mapping[str, float], runs: Sequence[Run], measured: np.ndarray
                     ) -> tuple[float, float]:
    """The common factor (median measured/predicted per run) and the mean relative error left
    after it."""
    predicted = _totals(coef, runs)
    if not (predicted > 0).all():  # a fit that prices some step at 0 s: never chosen
        return float("nan"), float("inf")
    ratio = measured / predicted
    level = float(np.median(ratio))
    return level, float(np.mean(np.abs(ratio / level - 1)))


def _score_term_sets(mbs: list[list[int]], secs: list[float], runs: Sequence[Run],
                     measured: np.ndarray) -> list[tuple[tuple[str, ...], dict[str, float], float, float]]:
    """(terms, coefficients fitted on the design, common factor, shape error on ``runs``) for
    the base terms and each candidate set, base first."""
    sets = [BASE_TERMS] + [(*BASE_TERMS, *extra) for extra in candidate_terms(max(map(sum, mbs)))]
    scored = []
    for terms in sets:
        if len(mbs) < 2 * len(terms):
            continue
        coef = fit_terms(mbs, secs, terms).coef
        level, shape = _level_and_shape(coef, runs, measured)
        scored.append((terms, coef, level, shape))
    return scored


def _step_errors(coef: Mapping[str, float], train: Sequence[Run], train_s: list[list[float]],
                 held: Sequence[Run], held_s: list[list[float]]) -> dict[str, Any]:
    """Relative errors of ``coef``: per micro-batch of the training and the held-out runs, and
    per held-out run (a rank's step)."""
    fit = Fit(coef=dict(coef))

    def per_mb(runs: Sequence[Run], secs: list[list[float]]) -> dict[str, Any] | None:
        ys = np.array([s for row in secs for s in row])
        return error_of(fit.predict([mb for run in runs for mb in run]), ys).as_dict() if len(ys) else None

    steps = error_of(_totals(coef, held), np.array([sum(s) for s in held_s])) if held else None
    return {"held_out": per_mb(held, held_s), "train": per_mb(train, train_s),
            "held_out_steps": steps.as_dict() if steps else None}


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
    measured = np.array([sum(s) for s in train_s])
    scored = _score_term_sets([list(r["lengths"]) for r in design],
                              [float(r["seconds"]) for r in design], train, measured)
    if not np.isfinite(scored[0][3]):
        raise ValueError("prior's design fit prices some of runs at 0 s: re-run calibrate() with "
                         "a design that covers these micro-batches")
    best = scored[0]
    for cand in scored[1:]:
        if cand[3] < best[3] * (1 - min_gain):
            best = cand
    base_terms, base_coef, base_level, base_shape = scored[0]
    terms, coef, level, shape = best

    def report(c: Mapping[str, float], sh: float) -> dict[str, Any]:
        return {**_step_errors(c, train, train_s, held, held_s), "shape_rel": sh, "cv_mean_rel": None}

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
        measurements=prior.measurements,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
