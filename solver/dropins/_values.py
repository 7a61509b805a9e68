"""What the trainers pass, made exact: weights, token counts, counts and caps; and the cost a
drop-in balances (a ``Cost``, or a calibrated profile's cost and overhead).

Why a module of its own: the originals are plain Python over whatever the caller hands them
(lists of ints or floats, numpy arrays, CPU or CUDA tensors, 0-d tensors, ``16384.0`` as a cap),
so every drop-in must take all of that, and each must turn it into exact integers the same way.

Real-valued weights (FLOP estimates such as slime's ``52544.0``) are balanced as integers:

* integral values (``52544.0``) are taken as the integers they are: exact;
* otherwise every weight is scaled by one power of two ``2**s`` and rounded, with ``s`` the largest
  that keeps the scaled total under ``2**52``: each weight moves by at most half a unit, i.e. by
  at most ``total * 2**-53``, which is the rounding float64 itself applies when it adds up that
  total. The plan is then exact for the scaled integers, and its loads in the caller's floats
  differ from the scaled ones by that float64 noise only (``scale_note`` says which path ran).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...heuristics.inputs import refuse_unordered
from ..batch_cost import MicroBatchCost
from ..errors import TrainerInputError
from ..measure.profile import CostProfile, load_cost_profile
from ..problem import Cost

_INT64_MAX = np.iinfo(np.int64).max
#: Scaled totals stay below this, so sums (and CP-SAT's linear expressions) never near int64.
_SCALED_TOTAL = 2**52


@dataclass(frozen=True)
class Weights:
    """Weights as exact non-negative integers, and how they were obtained."""

    values: np.ndarray  # int64, >= 0
    scale_exponent: int  # values ~= original * 2**scale_exponent (0: taken as given)
    exact: bool  # values == original * 2**scale_exponent exactly


def _to_array(values: Any, name: str) -> np.ndarray:
    """A 1-D numpy array from a list, array or tensor (CPU or not), or a list of 0-d tensors."""
    if isinstance(values, (str, bytes)) or values is None or np.isscalar(values):
        raise TypeError(f"{name} must be a list of numbers, got {type(values).__name__}")
    refuse_unordered(values, name)
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # torch.Tensor, without torch
        values = _tensor_values(values, name)
    if isinstance(values, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(values))
        if masked:  # the original would index past them or drop them: never guess which
            raise TrainerInputError(
                f"{name} is a masked array with {masked} masked entries: pass one value per "
                f"sample, e.g. {name}.compressed() with the indices mapped back"
            )
        values = np.asarray(values.data)
    if not isinstance(values, np.ndarray):
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"{name} must be a list of numbers, got {type(values).__name__}") from None
        kinds = set(map(type, items))
        if not kinds <= {int, float}:
            # Elements may be 0-d tensors or numpy scalars: take their Python value.
            items = [_scalar(x, f"{name}[{i}]") for i, x in enumerate(items)]
            kinds = set(map(type, items))
        if float in kinds:
            values = np.asarray(items, dtype=np.float64) if items else np.zeros(0, np.int64)
        else:
            try:
                values = np.asarray(items, dtype=np.int64) if items else np.zeros(0, np.int64)
            except OverflowError:
                raise ValueError(f"{name} holds a value above 2**63-1: it must fit in int64") from None
    if values.ndim != 1:
        raise ValueError(f"{name} must be a flat list, got shape {values.shape}: flatten it")
    if values.dtype == np.bool_:
        raise TypeError(f"{name} holds bools: pass the lengths or weights, not a mask")
    if values.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold numbers, got dtype {values.dtype}")
    if values.dtype.kind == "f" and values.dtype != np.float64:
        values = values.astype(np.float64)  # float16/32 sums round early; the values are exact in float64
    return values


def _tensor_values(tensor: Any, name: str) -> np.ndarray:
    """A tensor's values as numpy: refuses the meta device (no values), widens what numpy lacks."""
    if getattr(getattr(tensor, "device", None), "type", "cpu") == "meta":
        raise TrainerInputError(
            f"{name} is a tensor on the meta device, which holds no values: pass the real "
            "values (a CPU or GPU tensor, or a list)"
        )
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point() and tensor.dtype.itemsize < 4:  # bfloat16, float16
        tensor = tensor.double()
    return tensor.numpy()


def _scalar(x: Any, name: str) -> int | float:
    if hasattr(x, "item") and not isinstance(x, (int, float)):  # numpy scalar, 0-d tensor
        if getattr(x, "ndim", 0) != 0:
            raise ValueError(f"{name} has shape {tuple(x.shape)}: pass one number per sample")
        x = x.item()
    if isinstance(x, bool):
        raise TypeError(f"{name} is a bool ({x}): pass the lengths or weights, not a mask")
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x
    raise TypeError(f"{name} is {x!r} ({type(x).__name__}): pass numbers")


def _check_finite_non_negative(arr: np.ndarray, name: str) -> None:
    if arr.size == 0:
        return
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name}[{i}] is {arr[i]}: drop or fix that sample")
    if arr.dtype.kind == "u" and int(arr.max()) > _INT64_MAX:
        raise ValueError(f"{name} holds a value above 2**63-1: it must fit in int64")
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        i = int(neg[0])
        raise ValueError(f"{name}[{i}] is {arr[i]}; values must be >= 0")


def as_weights(values: Any, name: str) -> Weights:
    """Balancing weights: non-negative ints or floats, made exact integers (see module doc)."""
    arr = _to_array(values, name)
    _check_finite_non_negative(arr, name)
    if arr.dtype.kind in "iu":
        return Weights(arr.astype(np.int64), 0, True)
    if arr.size == 0:
        return Weights(np.zeros(0, np.int64), 0, True)
    integral = bool(np.all(arr == np.floor(arr)))
    try:
        total = math.fsum(arr.tolist())
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        raise TrainerInputError(
            f"{name} sums beyond float64's range (~1.8e308): scale the weights down (only their "
            "ratios matter for the balance)"
        )
    if integral and total < _SCALED_TOTAL:
        # Below 2**52 every integral float is an exact int64.
        return Weights(arr.astype(np.int64), 0, True)
    if total == 0:
        return Weights(np.zeros(len(arr), np.int64), 0, True)
    # The largest power of two that keeps the scaled total under 2**52 (may be negative).
    s = _SCALED_TOTAL.bit_length() - 1 - math.frexp(total)[1]
    scaled = np.ldexp(arr, s)  # exact: a power-of-two scale only shifts exponents
    rounded = np.rint(scaled)
    return Weights(rounded.astype(np.int64), s, bool(np.all(rounded == scaled)))


def as_tokens(values: Any, name: str) -> np.ndarray:
    """Token counts: non-negative integers, given as ints or as floats with integral values."""
    arr = _to_array(values, name)
    _check_finite_non_negative(arr, name)
    if arr.dtype.kind == "f":
        frac = np.flatnonzero(arr != np.floor(arr))
        if frac.size:
            i = int(frac[0])
            raise TypeError(
                f"{name}[{i}] is {arr[i]}: token counts must be whole numbers; pass the lengths "
                "(e.g. [len(t) for t in tokens])"
            )
        if arr.size and float(arr.max()) >= 2.0**63:
            raise ValueError(f"{name} holds a value above 2**63-1: it must fit in int64")
    return arr.astype(np.int64)


def as_count(value: Any, name: str, *, minimum: int = 1) -> int:
    """An int >= ``minimum``: ints, numpy ints, 0-d tensors and floats with integral values."""
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        if getattr(value, "ndim", 0) != 0:
            raise TypeError(f"{name} must be one number, got shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or value != math.floor(value):
            raise TypeError(f"{name} must be a whole number >= {minimum}, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > _INT64_MAX:
        raise ValueError(f"{name}={value} is above 2**63-1: pass a value that fits in int64")
    return value


def as_flag(value: Any, name: str) -> bool:
    """A bool (numpy and 0-d tensor bools too)."""
    if hasattr(value, "item") and not isinstance(value, (bool, int)):
        value = value.item()
    if isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def as_profile(cost_profile: Any) -> CostProfile:
    """A :class:`~seqpart.solver.CostProfile`, or one read from a path by
    :func:`~seqpart.solver.load_cost_profile` (whose ValueError names the file and the fix)."""
    if isinstance(cost_profile, CostProfile):
        return cost_profile
    if isinstance(cost_profile, (str, os.PathLike)):
        return load_cost_profile(cost_profile)
    raise TypeError(
        f"cost_profile must be a CostProfile (seqpart.solver.load_cost_profile(path)) or the path "
        f"of one, got {type(cost_profile).__name__}"
    )


@dataclass(frozen=True)
class CostChoice:
    """The cost a drop-in balances and its per-micro-batch overhead; None: the drop-in's own."""

    cost: Cost | None
    overhead: int | MicroBatchCost | None


def choose_cost(cost: Any = None, cost_profile: Any = None, overhead: Any = None) -> CostChoice:
    """``cost``/``overhead`` as given, or both from ``cost_profile``; giving a profile and
    either of the others is an error, so no caller wonders which one was used."""
    if cost_profile is not None:
        for name, value in (("cost", cost), ("overhead", overhead)):
            if value is not None:
                raise TrainerInputError(
                    f"pass {name}= or cost_profile=, not both: the profile sets the cost and the "
                    "overhead (its .cost and .overhead); drop one of the two arguments"
                )
        profile = as_profile(cost_profile)
        return CostChoice(profile.cost, profile.overhead)
    chosen = None
    if cost is not None:
        try:
            chosen = Cost.parse(cost)
        except ValueError as err:
            raise TrainerInputError(f"cost: {err}") from None
    if overhead is None or isinstance(overhead, MicroBatchCost):
        return CostChoice(chosen, overhead)
    return CostChoice(chosen, as_count(overhead, "overhead", minimum=0))
