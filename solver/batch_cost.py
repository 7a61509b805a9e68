"""What a micro-batch costs beyond its sequences: a fixed overhead and a function of its size.

Measured on real hardware, a micro-batch's time is not only the sum of its sequences' costs.
Each micro-batch pays a fixed overhead (launches, optimizer hooks, data movement), and the cost
of a token depends on how full the micro-batch is: on a CPU it grows with the micro-batch's token
total (caches), on a GPU it falls (a small micro-batch under-uses the device). The step model
takes both, with ``T`` the micro-batch's token total::

    t = overhead + sum_i cost(l_i) + size(T)
    size(T) = square*T^2 + sum_h rise_h*max(0, T - knot_h) + sum_h fall_h*max(0, knot_h - T)

Every coefficient is an int >= 0, so ``size`` is convex and never negative. Why it matters:
convexity gives the bound that ``M`` micro-batches holding ``T`` tokens in all pay at least
``M*size(T/M)`` (Jensen), so the step bound stays a bound, and a non-negative ``size`` leaves
every bound computed without it valid. A rising per-token cost is ``square`` or a ``rise``; a
falling one is a ``fall`` (a small micro-batch pays as if it held ``knot`` tokens). A
calibration fills these in (:func:`seqpart.solver.load_cost_profile`); pass one as
``plan_step(..., overhead=MicroBatchCost(...))``, wherever an int overhead is taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MicroBatchCost", "split_overhead"]


def _nonnegative_int(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"MicroBatchCost.{name} must be an int >= 0 in the cost's units, got {value!r} "
            f"({type(value).__name__}): round it, e.g. int(x)"
        )
    if value < 0:
        raise ValueError(f"MicroBatchCost.{name} must be >= 0, got {value}")
    return int(value)


def _hinges(value: Any, name: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = [tuple(p) for p in value]
    except TypeError:
        raise TypeError(f"MicroBatchCost.{name} must be pairs (knot, slope), got {value!r}") from None
    out = []
    for j, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"MicroBatchCost.{name}[{j}] must be a pair (knot, slope), got {pair!r}")
        out.append((_nonnegative_int(pair[0], f"{name}[{j}] knot"),
                    _nonnegative_int(pair[1], f"{name}[{j}] slope")))
    return tuple(sorted(out))


@dataclass(frozen=True)
class MicroBatchCost:
    """The cost every micro-batch pays on top of its sequences' costs, in the cost's units:
    ``overhead + square*T^2 + sum rise*max(0, T-knot) + sum fall*max(0, knot-T)`` for a
    micro-batch of ``T`` tokens. ``rises`` and ``falls`` are ``(knot, slope)`` pairs."""

    overhead: int = 0
    square: int = 0
    rises: tuple[tuple[int, int], ...] = ()
    falls: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "overhead", _nonnegative_int(self.overhead, "overhead"))
        object.__setattr__(self, "square", _nonnegative_int(self.square, "square"))
        object.__setattr__(self, "rises", _hinges(self.rises, "rises"))
        object.__setattr__(self, "falls", _hinges(self.falls, "falls"))

    @property
    def has_size(self) -> bool:
        """Whether the cost depends on the micro-batch's size at all."""
        return bool(self.square or any(s for _, s in self.rises) or any(s for _, s in self.falls))

    def size(self, total: int) -> int:
        """``size(T)`` for a micro-batch of ``total`` tokens (exact int)."""
        t = int(total)
        out = self.square * t * t
        out += sum(s * (t - k) for k, s in self.rises if t > k)
        out += sum(s * (k - t) for k, s in self.falls if k > t)
        return out

    def size_array(self, totals: np.ndarray, dtype: Any = np.int64) -> np.ndarray:
        """``size`` of each token total, as ``dtype`` (int64 when the caller has checked that
        every value fits, else ``object`` for exact Python ints)."""
        if dtype is object:
            out = np.empty(len(totals), dtype=object)
            out[:] = [self.size(int(t)) for t in np.asarray(totals).ravel()]
            return out.reshape(np.shape(totals))
        t = np.asarray(totals, dtype=np.int64)
        out = self.square * t * t if self.square else np.zeros(t.shape, dtype=np.int64)
        for k, s in self.rises:
            out = out + s * np.maximum(t - k, 0)
        for k, s in self.falls:
            out = out + s * np.maximum(k - t, 0)
        return out

    def size_max(self, total: int) -> int:
        """The largest ``size`` on ``[0, total]``: at an end, as ``size`` is convex."""
        return max(self.size(0), self.size(total))

    def spread_bound(self, total: int, count: int) -> int:
        """A lower bound on the size ``count`` micro-batches holding ``total`` tokens pay in
        all: ``count * size(total / count)`` (Jensen), rounded down, exact."""
        if count <= 0:
            return 0
        out = self.square * total * total // count
        out += sum(s * (total - count * k) for k, s in self.rises if total > count * k)
        out += sum(s * (count * k - total) for k, s in self.falls if count * k > total)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"overhead": self.overhead, "square": self.square,
                "rises": [list(p) for p in self.rises], "falls": [list(p) for p in self.falls]}

    def __str__(self) -> str:
        parts = [str(self.overhead)]
        if self.square:
            parts.append(f"{self.square}*T^2")
        parts += [f"{s}*max(0, T-{k})" for k, s in self.rises if s]
        parts += [f"{s}*max(0, {k}-T)" for k, s in self.falls if s]
        return " + ".join(parts)


def split_overhead(overhead: Any) -> tuple[int, MicroBatchCost | None]:
    """``overhead`` (an int >= 0 or a :class:`MicroBatchCost`) as the fixed part and the size
    term (None when the micro-batch's size costs nothing, the fast path)."""
    if isinstance(overhead, MicroBatchCost):
        return overhead.overhead, (overhead if overhead.has_size else None)
    if isinstance(overhead, (bool, np.bool_)) or not isinstance(overhead, (int, np.integer)):
        raise TypeError(
            f"overhead must be an int >= 0 in the cost's units or a MicroBatchCost, got "
            f"{overhead!r} ({type(overhead).__name__}): round it, e.g. overhead=int(x)"
        )
    if overhead < 0:
        raise ValueError(f"overhead must be >= 0, got {overhead}: a micro-batch cannot save time")
    return int(overhead), None
