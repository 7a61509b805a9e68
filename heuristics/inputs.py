"""Input coercion shared by every entry point, and the list forms the heuristics work on.

Why here: the heuristics are usable on their own, so they validate their own input; the solver
reuses the same checks so that a bad length gets the same message whichever door it came in by.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


def as_lengths(values: Any, name: str = "lengths") -> np.ndarray:
    """Return ``values`` as a 1-D int64 array of positive integers, or raise ``ValueError``.

    Accepts lists, tuples, numpy arrays and torch tensors (anything with ``tolist``). Rejects,
    naming the first offending position: empty input, bools, floats (NaN included), values <= 0.
    """
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name} must be a sequence of positive ints, got {type(values).__name__}")
    refuse_unordered(values, name)
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # torch.Tensor, without importing torch
        values = _torch_to_numpy(values, name)
    if isinstance(values, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(values))
        if masked:
            raise ValueError(
                f"{name} is a masked array with {masked} masked entries: pass only the real "
                f"lengths, e.g. {name}.compressed()"
            )
        values = np.asarray(values.data)
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {values.shape}: flatten it")
        items: Sequence[Any] = values.tolist() if values.dtype.kind not in "iu" else values
    else:
        try:
            items = list(values)
        except TypeError:
            raise TypeError(
                f"{name} must be a sequence of positive ints, got {type(values).__name__}"
            ) from None
    if len(items) == 0:
        raise ValueError(f"{name} is empty: pass at least one sequence length")
    if isinstance(items, np.ndarray):  # integer dtype: only the sign can be wrong
        arr = items.astype(np.int64, copy=False)
        if values.dtype.kind == "u" and values.max() > _INT64_MAX:
            raise ValueError(f"{name} holds a value above 2**63-1: token counts must fit in int64")
    elif set(map(type, items)) <= {int}:  # the common case: plain ints, checked in bulk
        try:
            arr = np.asarray(items, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{name} holds a value above 2**63-1: token counts must fit in int64") from None
    else:
        for i, x in enumerate(items):
            if isinstance(x, (bool, np.bool_)):
                raise TypeError(
                    f"{name}[{i}] is a bool ({x}); {name} must hold ints > 0: "
                    "pass the lengths, not a mask"
                )
            if not isinstance(x, (int, np.integer)):
                if isinstance(x, (float, np.floating)) and math.isnan(x):
                    raise ValueError(f"{name}[{i}] is NaN: drop or fix that sample's length")
                raise TypeError(
                    f"{name}[{i}] is {x!r} ({type(x).__name__}); {name} must hold ints > 0: "
                    "convert them, e.g. [int(x) for x in lengths]"
                )
        try:
            arr = np.asarray(items, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{name} holds a value above 2**63-1: token counts must fit in int64") from None
    bad = np.flatnonzero(arr <= 0)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name}[{i}] is {int(arr[i])}; every length must be > 0: "
            "drop empty sequences before partitioning"
        )
    return arr


def refuse_unordered(values: Any, name: str) -> None:
    """A mapping or a set is not a list of lengths: the plan's indices would point into an order
    the caller never sees (a set also drops equal lengths), so both are refused, never guessed."""
    if isinstance(values, Mapping):
        raise TypeError(
            f"{name} is a {type(values).__name__}: pass the lengths as a list, e.g. "
            f"list({name}.values()), and keep list({name}) to map the plan's indices back to keys"
        )
    if isinstance(values, AbstractSet):
        raise TypeError(
            f"{name} is a {type(values).__name__}, which has no order and keeps one copy of equal "
            "lengths: pass a list with one entry per sequence"
        )


def _torch_to_numpy(tensor: Any, name: str) -> np.ndarray:
    """A torch tensor's values as numpy, refusing what has no integer values to give."""
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device == "meta":
        raise ValueError(
            f"{name} is a torch tensor on the meta device, which holds no values: pass the "
            "real lengths (a CPU or GPU tensor, or a list)"
        )
    is_float = getattr(tensor, "is_floating_point", None)
    if (is_float is not None and is_float()) or getattr(tensor, "is_complex", lambda: False)():
        raise TypeError(
            f"{name} is a {tensor.dtype} tensor; {name} must hold ints > 0: convert it, "
            f"e.g. {name}.long()"
        )
    return tensor.detach().cpu().numpy()


def as_positive_int(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """Return ``value`` as an int >= 1 (or None when allowed), else raise with a fix."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_k(k: int, n: int) -> None:
    """k non-empty micro-batches need at least k sequences."""
    if k > n:
        raise ValueError(
            f"k={k} micro-batches cannot all be non-empty with only {n} sequences: "
            f"use k <= {n} (or k=None for the smallest feasible count)"
        )


def check_nesting(value: Any, name: str, depth: int) -> None:
    """Refuse a malformed plan or schedule up front, naming the first bad part: ``depth`` 1 is a
    plan (a list of micro-batches, each a list of indices), 2 a schedule (a list over ranks of
    plans). The entries themselves are checked by the validators."""
    shape = "a list of micro-batches, each a list of sequence indices"
    if depth == 2:
        shape = "a list over ranks of lists of micro-batches, each a list of sequence indices"

    plain = (list, tuple, np.ndarray)  # the common cases, checked without the abc machinery

    def is_list(x: Any) -> bool:
        return type(x) in plain or (
            not isinstance(x, (str, bytes, dict)) and isinstance(x, (Sequence, np.ndarray)))

    def refuse(label: str, part: Any) -> TypeError:
        return TypeError(f"{label} is {part!r} ({type(part).__name__}): {name} must be {shape}")

    if not is_list(value):
        raise TypeError(f"{name} must be {shape}, got {type(value).__name__}")
    ranks = list(value) if depth == 2 else [value]
    for r, part in enumerate(ranks):
        if not is_list(part):
            raise refuse(f"{name}[{r}]", part)
        for j, mb in enumerate(part):
            if not is_list(mb):  # labels are built for the bad part only (n can be 10^6)
                raise refuse(f"{name}[{r}][{j}]" if depth == 2 else f"{name}[{j}]", mb)



def check_bins(bins: Any, n: int) -> None:
    """``bins`` as a starting split of n sequences: lists of indices, each index exactly once."""
    check_nesting(bins, "bins", 1)
    seen = [0] * n
    for j, b in enumerate(bins):
        for i in b:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
                raise ValueError(f"bins[{j}] holds {i!r}, not an index in range(0, {n})")
            seen[int(i)] += 1
    if any(c != 1 for c in seen):
        i = next(i for i, c in enumerate(seen) if c != 1)
        where = "no micro-batch" if seen[i] == 0 else f"{seen[i]} micro-batches"
        raise ValueError(f"sequence {i} is in {where}: bins must hold every index in range(0, {n}) once")


# --------------------------------------------------------------------------- list forms

Bins = list[list[int]]


def prepare(
    lengths: Any,
    k: int | None,
    cap: int | None,
    costs: Any | None,
    counts: Sequence[int] | None,
    *,
    k_required: bool = True,
) -> tuple[list[int], list[int], list[int], int | None, int | None]:
    """Validate the common arguments and return plain Python lists (fast for scalar loops)."""
    tokens = as_lengths(lengths)
    n = len(tokens)
    if k_required or k is not None:
        k = as_positive_int(k, "k")
        check_k(k, n)
    cap = as_positive_int(cap, "cap", allow_none=True)
    cost = tokens if costs is None else as_lengths(costs, "costs")
    if len(cost) != n:
        raise ValueError(f"costs has {len(cost)} entries but lengths has {n}: pass one per sequence")
    count = [1] * n if counts is None else as_lengths(counts, "counts").tolist()
    if len(count) != n:
        raise ValueError(f"counts has {len(count)} entries but lengths has {n}")
    return tokens.tolist(), cost.tolist(), count, k, cap


def order_desc(values: Sequence[int]) -> list[int]:
    """Indices by value, largest first, ties by index: deterministic everywhere. Exact for
    Python ints beyond int64 (costs of huge coefficients), sorted in Python then."""
    try:
        arr = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return sorted(range(len(values)), key=lambda i: (-values[i], i))
    return argsort_desc(arr).tolist()


def argsort_desc(arr: np.ndarray) -> np.ndarray:
    """Indices of an int64 array by value, largest first, ties by index (a stable sort of
    max - value, in the narrowest unsigned type that holds it: numpy radix-sorts 8- and
    16-bit keys, ~10x faster than int64 at 10^6)."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    top = int(arr.max())
    spread = top - int(arr.min())
    for dtype in (np.uint8, np.uint16, np.uint32):
        if spread <= np.iinfo(dtype).max:
            return np.argsort((top - arr).astype(dtype), kind="stable")
    return np.argsort(-arr, kind="stable")


def bins_from_labels(labels: np.ndarray, k: int) -> Bins:
    """Bin lists (indices ascending) from a per-item bin label array, without a Python loop
    over items."""
    narrow = labels.astype(np.uint16) if k <= 2**16 else labels  # uint16: a radix sort
    by_bin = np.argsort(narrow, kind="stable")
    ends = np.cumsum(np.bincount(labels, minlength=k)).tolist()
    flat = by_bin.tolist()
    return [flat[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]


def apply_move_or_swap(
    members: Bins,
    where: np.ndarray,
    totals: Sequence[tuple[np.ndarray, np.ndarray]],
    a: int,
    src: int,
    dst: int,
    b: int = -1,
) -> None:
    """Move item ``a`` from bin ``src`` to ``dst`` and, for a swap, item ``b`` back, keeping
    ``where`` and each (per-bin total, per-item value) pair in ``totals`` in step."""
    members[src].remove(a)
    members[dst].append(a)
    where[a] = dst
    if b >= 0:
        members[dst].remove(b)
        members[src].append(b)
        where[b] = src
    for per_bin, per_item in totals:  # one net change per total: it runs in local search's loop
        moved = per_item[a] - per_item[b] if b >= 0 else per_item[a]
        per_bin[src] -= moved
        per_bin[dst] += moved
