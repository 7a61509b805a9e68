"""Small helpers shared by the heuristics (not part of the public API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seqpart.heuristics.inputs import as_lengths, as_positive_int, check_k

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
    count = [1] * n if counts is None else [int(c) for c in counts]
    if len(count) != n:
        raise ValueError(f"counts has {len(count)} entries but lengths has {n}")
    return tokens.tolist(), cost.tolist(), count, k, cap


def order_desc(values: Sequence[int]) -> list[int]:
    """Indices by value, largest first, ties by index: deterministic everywhere."""
    return argsort_desc(np.asarray(values, dtype=np.int64)).tolist()


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
