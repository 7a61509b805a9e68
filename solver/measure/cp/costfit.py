"""Fitting the context-parallel step model to micro-batches timed at each degree.

The planner's model of one group step, on each of its ``c`` GPUs:
``overhead + (a*sum l + b*sum l^2)/c + cp_comm * sum l * (c-1)/c``. ``cp_comm`` is the exposed
cost per KV token a GPU receives (the all-gather brings ``sum l * (c-1)/c`` tokens' K and V).

Three fits, each by non-negative least squares on relative error (rows divided by their time, as
:mod:`~seqpart.solver.measure.fit` does; times span an order of magnitude):

* ``model``: the planner's four coefficients, shared by every degree. At one degree ``cp_comm``
  and ``a/c`` are both per-token terms; degree 1 fixes ``a``, so ``cp_comm`` is what degree 2
  costs per token beyond half of degree 1's work: communication and whatever else CP adds.
* ``per_degree``: ``overhead_c + a_c*sum l + b_c*sum l^2`` at each degree on its own, with the
  efficiency ``a_1 / (c*a_c)`` and ``b_1 / (c*b_c)`` (1: the work divides perfectly by ``c``).
* ``collectives``: the seconds timed inside the collectives alone, ``fixed + per_token * sum l *
  (c-1)/c``, the part of ``cp_comm`` that is communication.

Noise: every repeat (round) is fitted on its own, and each coefficient is reported as the
median over rounds with its exact order-statistic interval (:func:`~..stats.median_ci`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..stats import median_ci

MODEL_TERMS = ("overhead", "linear", "quadratic", "cp_comm")
#: The units of :func:`in_units`: the linear coefficient in these units is the benchmark cost's 24576.
LINEAR_UNITS = 24576


def model_features(lengths: Sequence[int], degree: int) -> list[float]:
    s1 = float(sum(lengths))
    s2 = float(sum(x * x for x in lengths))
    return [1.0, s1 / degree, s2 / degree, s1 * (degree - 1) / degree]


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares of relative error, columns scaled for conditioning."""
    from scipy.optimize import nnls

    rows = x / y[:, None]
    scale = np.abs(rows).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(rows / scale, np.ones(len(y)))
    return coef / scale


def fit_model(rows: Sequence[tuple[Sequence[int], int, float]]) -> dict[str, float]:
    """The planner's coefficients (seconds per unit) from (lengths, degree, seconds) rows."""
    x = np.array([model_features(mb, c) for mb, c, _ in rows])
    return dict(zip(MODEL_TERMS, _nnls(x, np.array([t for _, _, t in rows])).tolist(), strict=True))


def fit_degree(rows: Sequence[tuple[Sequence[int], float]]) -> dict[str, float]:
    x = np.array([[1.0, float(sum(mb)), float(sum(v * v for v in mb))] for mb, _ in rows])
    coef = _nnls(x, np.array([t for _, t in rows]))
    return dict(zip(("overhead", "linear", "quadratic"), coef.tolist(), strict=True))


def fit_collectives(rows: Sequence[tuple[Sequence[int], int, float]]) -> dict[str, float]:
    x = np.array([[1.0, sum(mb) * (c - 1) / c] for mb, c, _ in rows])
    coef = _nnls(x, np.array([t for _, _, t in rows]))
    return {"fixed": float(coef[0]), "per_token": float(coef[1])}


def group_seconds(coef: Mapping[str, float], lengths: Sequence[int], degree: int) -> float:
    """The model's time of one group step on each of its GPUs."""
    return float(np.dot(model_features(lengths, degree), [coef[t] for t in MODEL_TERMS]))


def barrier_seconds(coef: Mapping[str, float], lengths: Sequence[int],
                    steps: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]]) -> float:
    """A schedule's time under ``sync="barrier"``: each step ends with its slowest group."""
    return sum(max(group_seconds(coef, [lengths[i] for i in seqs], len(ranks)) for ranks, seqs in step)
               for step in steps)


def in_units(coef: Mapping[str, float]) -> dict[str, Any]:
    """The coefficients as the planner's integers: units in which ``linear`` is
    :data:`LINEAR_UNITS` (so ``cp_comm / linear`` reads against the benchmark's 0.25). When the
    fit has no linear term (a device where these micro-batches cost only their launches), the
    units make the quadratic term 1, or, with neither, the overhead :data:`LINEAR_UNITS`; a
    planner cost needs a linear or a quadratic term, so then ``linear`` is 1 (tokens)."""
    if coef["linear"] > 0:
        unit = coef["linear"] / LINEAR_UNITS
    elif coef["quadratic"] > 0:
        unit = coef["quadratic"]
    else:
        unit = max(coef["overhead"], coef["cp_comm"], 1e-30) / LINEAR_UNITS
    out: dict[str, Any] = {k: int(round(coef[k] / unit)) for k in MODEL_TERMS}
    if out["linear"] == 0 and out["quadratic"] == 0:
        out["linear"] = 1
    out["unit_seconds"] = unit
    out["cp_comm_over_linear"] = coef["cp_comm"] / coef["linear"] if coef["linear"] > 0 else None
    return out


def _interval(values: Sequence[float]) -> dict[str, float]:
    ci = median_ci(values)
    return {"median": ci.median, "low": ci.low, "high": ci.high, "level": ci.level}


def fit_with_noise(items: Sequence[tuple[Sequence[int], int]],
                   rows: Sequence[tuple[int, int, float, float]]) -> dict[str, Any]:
    """All three fits on the median over rounds, and each coefficient's interval over the
    per-round fits. ``rows``: (round, item, seconds, collective seconds), each item of
    ``items`` (lengths, degree) measured once per round (its step: the slowest rank's)."""
    rounds = sorted({r for r, *_ in rows})
    per: dict[tuple[int, int], tuple[float, float]] = {(r, i): (t, c) for r, i, t, c in rows}
    median = {i: (float(np.median([per[r, i][0] for r in rounds])),
                  float(np.median([per[r, i][1] for r in rounds]))) for i in range(len(items))}

    def fits(times: Mapping[int, tuple[float, float]]) -> dict[str, Any]:
        model = fit_model([(mb, c, times[i][0]) for i, (mb, c) in enumerate(items)])
        degrees = sorted({c for _, c in items})
        each = {c: fit_degree([(mb, times[i][0]) for i, (mb, d) in enumerate(items) if d == c])
                for c in degrees}
        coll = fit_collectives([(mb, c, times[i][1]) for i, (mb, c) in enumerate(items) if c > 1])
        return {"model": model, "per_degree": each, "collectives": coll}

    best = fits(median)
    by_round = [fits({i: per[r, i] for i in range(len(items))}) for r in rounds]
    noise = {"model": {t: _interval([f["model"][t] for f in by_round]) for t in MODEL_TERMS},
             "collectives_per_token": _interval([f["collectives"]["per_token"] for f in by_round])}
    eff = {}
    base = best["per_degree"].get(1)
    for c, f in best["per_degree"].items():
        if base and c > 1:
            eff[c] = {k: (base[k] / (c * f[k]) if f[k] > 0 else None) for k in ("linear", "quadratic")}
    return {"model": best["model"], "units": in_units(best["model"]),
            "per_degree": {str(c): f for c, f in best["per_degree"].items()},
            "efficiency": {str(c): e for c, e in eff.items()},
            "collectives": best["collectives"], "noise": noise, "rounds": len(rounds),
            "measurements": [{"lengths": list(mb), "degree": c, "seconds": median[i][0],
                              "collective_seconds": median[i][1]} for i, (mb, c) in enumerate(items)]}
