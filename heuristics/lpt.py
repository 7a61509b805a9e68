"""LPT: longest processing time first, each sequence to the least-loaded micro-batch.

Graham's classic 4/3-approximation for makespan. With a ``cap`` it sends each sequence to the
least-loaded micro-batch whose token sum still fits; when none fits it falls back to the
least-loaded one (the validator then reports the cap violation), so the caller always gets k bins.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from ._common import Bins, order_desc, prepare


def lpt(
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> Bins:
    """Greedy largest-cost-first to the least-loaded micro-batch; returns exactly ``k`` bins."""
    tokens, cost, count, k, cap = prepare(lengths, k, cap, costs, counts)
    return lpt_lists(tokens, cost, count, k, cap, max_count)


def lpt_lists(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    k: int,
    cap: int | None,
    max_count: int | None,
    order: list[int] | None = None,
) -> Bins:
    """LPT on validated plain lists (the hot path other heuristics reuse)."""
    bins: Bins = [[] for _ in range(k)]
    heap = [(0, b) for b in range(k)]  # (cost load, bin): ties go to the lowest bin index
    tok = [0] * k
    cnt = [0] * k
    unconstrained = cap is None and max_count is None
    by_tokens = cost is tokens or cost == tokens
    for i in order if order is not None else order_desc(cost):
        if unconstrained:
            load, b = heap[0]
            heapq.heapreplace(heap, (load + cost[i], b))
        else:
            skipped = []
            chosen = None
            while heap:
                entry = heapq.heappop(heap)
                b = entry[1]
                fits_cap = cap is None or tok[b] + tokens[i] <= cap
                fits_count = max_count is None or cnt[b] + count[i] <= max_count
                if fits_cap and fits_count:
                    chosen = entry
                    break
                skipped.append(entry)
                if by_tokens and fits_count:
                    break  # loads are tokens: the least-loaded bin has the most room
            if chosen is None:  # nothing fits: least-loaded bin, the validator will flag it
                chosen = skipped.pop(0)
            load, b = chosen
            heapq.heappush(heap, (load + cost[i], b))
            for entry in skipped:
                heapq.heappush(heap, entry)
        bins[b].append(i)
        tok[b] += tokens[i]
        cnt[b] += count[i]
    return bins
