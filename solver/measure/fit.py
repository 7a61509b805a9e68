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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from seqpart.solver.measure.profile import feature

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
