"""The cost profile: a calibration's result as versioned JSON, and its use by the planners.

A profile holds the fitted coefficients in seconds (``overhead``, ``linear`` per token,
``quadratic`` per token^2), the fit's error, and what was measured (device, dtype, torch
version, the model, the micro-batches and their times). ``docs/cost_profile.schema.json`` is its
schema. :func:`load_cost_profile` gives a :class:`CostProfile` whose ``cost`` and ``overhead``
are the integer forms the planners take (``plan_step(..., cost=p.cost, overhead=p.overhead)``),
with ``unit_seconds`` the seconds of one cost unit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..batch_cost import MicroBatchCost
from ..problem import Cost


def feature(mb: Sequence[int], term: str) -> float:
    """One feature of one micro-batch (float64: exact for totals far below 2**53)."""
    if term == "overhead":
        return 1.0
    if term == "linear":
        return float(sum(mb))
    if term == "quadratic":
        return float(sum(x * x for x in mb))
    if term == "count":
        return float(len(mb))
    if term == "total_sq":
        return float(sum(mb)) ** 2
    if term.startswith("hinge@"):
        return float(max(0, sum(mb) - int(term[6:])))
    if term.startswith("fall@"):
        return float(max(0, int(term[5:]) - sum(mb)))
    raise ValueError(f"unknown fit term {term!r}")



def _expressible(term: str) -> bool:
    """Whether the step model has this fit term (:class:`MicroBatchCost`, ``Cost.per_sequence``)."""
    return term in ("overhead", "linear", "quadratic", "count", "total_sq") or (
        term.startswith(("hinge@", "fall@")) and term.split("@")[1].isdigit())


#: Version of the file format this code writes; it reads this and every older one.
SCHEMA_VERSION = 1
KIND = "seqpart.cost_profile"
#: Integer coefficients are chosen so that rounding ``linear`` changes it by at most 1/(2*this).
_LINEAR_RESOLUTION = 512


@dataclass(frozen=True)
class CostProfile:
    """A calibrated step cost. ``overhead_s``, ``linear_s`` and ``quadratic_s`` are seconds per
    micro-batch, per token and per token^2 of each sequence."""

    overhead_s: float
    linear_s: float
    quadratic_s: float
    device: str
    dtype: str
    torch_version: str
    model: dict[str, Any]
    fit_error: dict[str, Any] = field(default_factory=dict)
    extended: dict[str, Any] | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    design: dict[str, Any] = field(default_factory=dict)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("overhead_s", "linear_s", "quadratic_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"cost profile: {name} must be a finite number >= 0, got {v!r}")
        if self.linear_s == 0 and self.quadratic_s == 0:
            raise ValueError("cost profile: linear_s and quadratic_s are both 0, so every sequence "
                             "would cost nothing: re-run the calibration with longer micro-batches")

    # --- the integer forms the planners take ---------------------------------------------------

    @property
    def planning_coefficients(self) -> dict[str, float]:
        """The fit the planners use, in seconds by term: the extended fit when the calibration
        kept one the step model can express (every coefficient >= 0, terms among the count,
        ``total_sq``, ``hinge@K`` and ``fall@K``), else the base fit."""
        if self.planning_fit == "extended":
            return {k: float(v) for k, v in self.extended["coefficients"].items()}  # type: ignore[index]
        return {"overhead": self.overhead_s, "linear": self.linear_s, "quadratic": self.quadratic_s}

    @property
    def planning_fit(self) -> str:
        """"extended" when the planners use the extended fit (see :attr:`planning_coefficients`),
        else "base"."""
        ext = (self.extended or {}).get("coefficients") or {}
        usable = bool(ext) and all(
            _expressible(k) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
            for k, v in ext.items()
        ) and (ext.get("linear", 0) > 0 or ext.get("quadratic", 0) > 0)
        return "extended" if usable else "base"

    @property
    def unit_seconds(self) -> float:
        """Seconds of one cost unit: ``quadratic_s / cost.quadratic``, with ``cost.quadratic``
        the smallest power of two that keeps every per-token coefficient (linear, the size
        term's) at least 512 units, so that rounding moves none of them by more than 0.1%."""
        coef = self.planning_coefficients
        fine = [v / _LINEAR_RESOLUTION for k, v in coef.items()
                if v > 0 and k not in ("overhead", "count", "quadratic")]
        q = coef.get("quadratic", 0.0)
        if q <= 0:
            return min(fine)
        need = min(fine, default=q)
        if q <= need:
            return q
        return q / min(2 ** 30, 2 ** math.ceil(math.log2(q / need)))

    def _units(self, key: str) -> int:
        return int(round(self.planning_coefficients.get(key, 0.0) / self.unit_seconds))

    @property
    def cost(self) -> Cost:
        """The :class:`~seqpart.solver.Cost` for ``plan_step``/``partition`` (integer units),
        with the fit's per-sequence cost when it kept one."""
        linear, quadratic = self._units("linear"), self._units("quadratic")
        if not linear and not quadratic:
            return Cost()
        return Cost(linear=linear, quadratic=quadratic, per_sequence=self._units("count"))

    @property
    def overhead(self) -> int | MicroBatchCost:
        """What each micro-batch pays beyond its sequences, for ``plan_step(overhead=...)``: an
        int in cost units, or a :class:`~seqpart.solver.MicroBatchCost` when the fit kept a
        size term (a per-token cost that changes with the micro-batch's size)."""
        coef = self.planning_coefficients
        batch = MicroBatchCost(
            overhead=self._units("overhead"),
            square=self._units("total_sq"),
            rises=[(int(k.split("@")[1]), self._units(k)) for k in coef if k.startswith("hinge@")],
            falls=[(int(k.split("@")[1]), self._units(k)) for k in coef if k.startswith("fall@")],
        )
        return batch if batch.has_size else batch.overhead

    @property
    def ratio(self) -> float:
        """``a/b`` in tokens of the base fit: the length at which a sequence's quadratic cost
        equals its linear one."""
        return self.linear_s / self.quadratic_s if self.quadratic_s else math.inf

    def seconds(self, lengths: Any) -> float:
        """Predicted seconds of one micro-batch with these sequence lengths (the planning fit)."""
        ls = [int(x) for x in lengths]
        return float(sum(v * feature(ls, k) for k, v in self.planning_coefficients.items()))

    # --- JSON -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema_version": self.schema_version,
            "coefficients": {"overhead_s": self.overhead_s, "linear_s": self.linear_s,
                             "quadratic_s": self.quadratic_s},
            "planner": self._planner_json(),
            "device": self.device,
            "dtype": self.dtype,
            "torch_version": self.torch_version,
            "model": self.model,
            "fit_error": self.fit_error,
            "extended": self.extended,
            "memory": self.memory,
            "design": self.design,
            "measurements": self.measurements,
            "created": self.created,
        }

    def _planner_json(self) -> dict[str, Any]:
        batch = self.overhead
        size = batch if isinstance(batch, MicroBatchCost) else MicroBatchCost(overhead=batch)
        return {**self.cost.as_dict(), **size.as_dict(), "unit_seconds": self.unit_seconds,
                "fit": self.planning_fit}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return p


def _require(raw: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in raw:
        raise ValueError(f"{where}: field {key!r} is missing (a corrupt or foreign file)")
    if not isinstance(raw[key], kind):
        raise ValueError(f"{where}: field {key!r} has the wrong type ({type(raw[key]).__name__})")
    return raw[key]


def profile_from_json(raw: Any, where: str = "cost profile") -> CostProfile:
    """A :class:`CostProfile` from a parsed file, with errors that say what is wrong."""
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise ValueError(f"{where} is not a seqpart cost profile (no \"kind\": \"{KIND}\")")
    version = _require(raw, "schema_version", int, where)
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where} has schema version {version}, newer than this seqpart reads "
                         f"({SCHEMA_VERSION}): upgrade seqpart, or re-run `seqpart calibrate`")
    if version < 1:
        raise ValueError(f"{where} has an invalid schema version {version}")
    coef = _require(raw, "coefficients", dict, where)
    nums = {}
    for key in ("overhead_s", "linear_s", "quadratic_s"):
        nums[key] = _require(coef, key, (int, float), f"{where} coefficients")
    return CostProfile(
        **nums,
        device=str(_require(raw, "device", str, where)),
        dtype=str(_require(raw, "dtype", str, where)),
        torch_version=str(_require(raw, "torch_version", str, where)),
        model=_require(raw, "model", dict, where),
        fit_error=raw.get("fit_error") or {},
        extended=raw.get("extended"),
        memory=raw.get("memory") or {},
        design=raw.get("design") or {},
        measurements=raw.get("measurements") or [],
        created=str(raw.get("created", "")),
        schema_version=version,
    )


def load_cost_profile(path: str | Path) -> CostProfile:
    """Read a profile written by ``seqpart calibrate`` (or :meth:`CostProfile.save`).

    Raises ValueError for a missing, unreadable, corrupt or newer-version file, naming it.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ValueError(f"cost profile {str(p)!r} does not exist: "
                         f"run `seqpart calibrate --out {p}`") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cost profile {str(p)!r} cannot be read ({exc})") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"cost profile {str(p)!r} is corrupt: not valid JSON ({exc})") from exc
    return profile_from_json(raw, f"cost profile {str(p)!r}")
