"""Argument checks shared by the measurement modules (errors name the argument and the fix)."""

from __future__ import annotations

from typing import Any


def positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def lengths_list(value: Any, name: str = "lengths") -> list[int]:
    """A non-empty list of positive Python ints (a micro-batch's sequence lengths)."""
    try:
        out = [int(x) for x in value]
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a sequence of positive ints, got {value!r}") from exc
    if not out or any(x < 1 or x != y for x, y in zip(out, value, strict=True)):
        raise ValueError(f"{name} must be a non-empty sequence of ints >= 1, got {value!r}")
    return out
