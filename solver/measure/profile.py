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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpart.solver.problem import Cost

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
    def unit_seconds(self) -> float:
        """Seconds of one cost unit: ``quadratic_s / cost.quadratic`` (or ``linear_s / cost.linear``)."""
        if self.quadratic_s > 0:
            return self.quadratic_s / self._quadratic_int()
        return self.linear_s / _LINEAR_RESOLUTION

    def _quadratic_int(self) -> int:
        """The smallest power of two that makes ``round(linear)`` precise to 1/(2*512)."""
        ratio = self.linear_s / self.quadratic_s
        if ratio >= _LINEAR_RESOLUTION:
            return 1
        if ratio == 0:
            return 1
        return min(2 ** 20, 2 ** math.ceil(math.log2(_LINEAR_RESOLUTION / ratio)))

    @property
    def cost(self) -> Cost:
        """The :class:`~seqpart.solver.Cost` for ``plan_step``/``partition`` (integer units)."""
        if self.quadratic_s == 0:
            return Cost(linear=_LINEAR_RESOLUTION, quadratic=0)
        q = self._quadratic_int()
        linear = round(self.linear_s / self.unit_seconds)
        return Cost(linear=int(linear), quadratic=q) if linear or q else Cost()

    @property
    def overhead(self) -> int:
        """The per-micro-batch overhead in cost units, for ``plan_step(overhead=...)``."""
        return int(round(self.overhead_s / self.unit_seconds))

    @property
    def ratio(self) -> float:
        """``a/b`` in tokens: the length at which a sequence's quadratic cost equals its linear one."""
        return self.linear_s / self.quadratic_s if self.quadratic_s else math.inf

    def seconds(self, lengths: Any) -> float:
        """Predicted seconds of one micro-batch with these sequence lengths."""
        ls = [int(x) for x in lengths]
        return self.overhead_s + self.linear_s * sum(ls) + self.quadratic_s * sum(x * x for x in ls)

    # --- JSON -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema_version": self.schema_version,
            "coefficients": {"overhead_s": self.overhead_s, "linear_s": self.linear_s,
                             "quadratic_s": self.quadratic_s},
            "planner": {"linear": self.cost.linear, "quadratic": self.cost.quadratic,
                        "overhead": self.overhead, "unit_seconds": self.unit_seconds},
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
