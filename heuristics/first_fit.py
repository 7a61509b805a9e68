"""First-fit in arrival order: what trainers use today to count micro-batches.

With ``k=None`` it opens a new micro-batch whenever a sequence fits in none of the open ones, so
``len(first_fit(lengths, None, cap))`` is the count a trainer's
``get_minimum_num_micro_batch_size`` reports. With a fixed ``k`` it packs into k bins, leaving the
tail empty when k is larger than needed: the seed issue's crash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._common import Bins, prepare


def first_fit(
    lengths: Any,
    k: int | None,
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> Bins:
    """Each sequence, in the given order, into the first micro-batch with room."""
    tokens, _cost, count, k, cap = prepare(lengths, k, cap, costs, counts, k_required=False)
    return first_fit_lists(tokens, count, k, cap, max_count, range(len(tokens)))


def first_fit_lists(
    tokens: list[int],
    count: list[int],
    k: int | None,
    cap: int | None,
    max_count: int | None,
    order: Sequence[int],
) -> Bins:
    """First-fit over ``order``; fixed k sends a sequence that fits nowhere to the emptiest bin."""
    if k is not None and max_count is None and cap is not None and k > 16:
        return _first_fit_fixed_numpy(tokens, k, cap, order)
    bins: Bins = [[] for _ in range(k or 0)]
    tok: list[int] = [0] * (k or 0)
    cnt: list[int] = [0] * (k or 0)
    for i in order:
        t, c = tokens[i], count[i]
        for b in range(len(bins)):
            if (cap is None or tok[b] + t <= cap) and (max_count is None or cnt[b] + c <= max_count):
                break
        else:
            if k is None:
                bins.append([])
                tok.append(0)
                cnt.append(0)
                b = len(bins) - 1
            else:  # no room anywhere: the least-filled bin, flagged later by the validator
                b = min(range(k), key=tok.__getitem__)
        bins[b].append(i)
        tok[b] += t
        cnt[b] += c
    return bins


def _first_fit_fixed_numpy(tokens: list[int], k: int, cap: int, order: Sequence[int]) -> Bins:
    """The same first-fit for many bins: one vectorised scan per sequence instead of k steps."""
    bins: Bins = [[] for _ in range(k)]
    room = np.full(k, cap, dtype=np.int64)
    for i in order:
        t = tokens[i]
        b = int(np.argmax(room >= t))
        if room[b] < t:
            b = int(np.argmax(room))
        bins[b].append(i)
        room[b] -= t
    return bins
