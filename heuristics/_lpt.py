"""LPT: longest processing time first, each sequence to the least-loaded micro-batch.

Graham's classic 4/3-approximation for makespan. With a ``cap`` it sends each sequence to the
least-loaded micro-batch whose token sum still fits; when none fits it falls back to the
least-loaded one (the validator then reports the cap violation), so the caller always gets k bins.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from .inputs import Bins, argsort_desc, bins_from_labels, order_desc, prepare

__all__ = ["lpt"]

#: From this many items, LPT places a whole round of k items at once (heaviest item to the
#: lightest bin, vectorised): one heap step per item costs ~1 us in Python, too much at 10^6.
ROUNDS_FROM = 16_384


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
    n = len(cost)
    by_tokens = cost is tokens or cost == tokens
    # With loads in tokens the least-loaded bin has the most room, so the cap never changes
    # LPT's choice: only the per-bin sample limit or a separate cost needs the heap.
    if n >= ROUNDS_FROM and k >= 32 and max_count is None and (cap is None or by_tokens):
        return _lpt_rounds(cost, k, order)
    if cap is not None and max_count is None and not by_tokens:
        return _lpt_capped(tokens, cost, k, cap, order_desc(cost) if order is None else order)
    bins: Bins = [[] for _ in range(k)]
    heap = [(0, b) for b in range(k)]  # (cost load, bin): ties go to the lowest bin index
    tok = [0] * k
    cnt = [0] * k
    load_of = [0] * k
    # Bins the current sequence's tokens did not fit, keyed by room (most first): they wait
    # here until a sequence short enough comes, instead of being popped and pushed back for
    # every sequence (which made capped LPT O(n k) when many bins are full of tokens but
    # light in cost, e.g. with the attention cost).
    parked: list[tuple[int, int]] = []
    unconstrained = cap is None and max_count is None
    for i in order if order is not None else order_desc(cost):
        if unconstrained:
            load, b = heap[0]
            heapq.heapreplace(heap, (load + cost[i], b))
        else:
            t = tokens[i]
            while parked and -parked[0][0] >= t:
                b = heapq.heappop(parked)[1]
                heapq.heappush(heap, (load_of[b], b))
            skipped = []
            chosen = None
            while heap:
                entry = heapq.heappop(heap)
                b = entry[1]
                fits_cap = cap is None or tok[b] + t <= cap
                fits_count = max_count is None or cnt[b] + count[i] <= max_count
                if fits_cap and fits_count:
                    chosen = entry
                    break
                if by_tokens:
                    skipped.append(entry)
                    if fits_count:
                        break  # loads are tokens: the least-loaded bin has the most room
                elif not fits_cap:
                    assert cap is not None
                    heapq.heappush(parked, (tok[b] - cap, b))
                else:
                    skipped.append(entry)
            if chosen is None:  # nothing fits: least-loaded bin, the validator will flag it
                chosen = min(skipped + [(load_of[b], b) for _, b in parked])
                if chosen in skipped:
                    skipped.remove(chosen)
                else:
                    parked = [entry for entry in parked if entry[1] != chosen[1]]
                    heapq.heapify(parked)
            load, b = chosen
            load_of[b] = load + cost[i]
            heapq.heappush(heap, (load_of[b], b))
            for entry in skipped:
                heapq.heappush(heap, entry)
        bins[b].append(i)
        tok[b] += tokens[i]
        cnt[b] += count[i]
    return bins


def _lpt_capped(tokens: list[int], cost: list[int], k: int, cap: int, order: list[int]) -> Bins:
    """Capped LPT with a cost apart from the tokens and no count limit: the same bins as the
    general loop of :func:`lpt_lists`, whose usual step (the least-loaded bin has the room)
    is kept to one heap call on plain ints here (rank balancing with a token room runs it
    262,144 times: ints compare faster than tuples)."""
    shift = k.bit_length()  # a heap key is load << shift | bin: by load, ties by bin
    mask = (1 << shift) - 1
    bins: Bins = [[] for _ in range(k)]
    heap = list(range(k))
    tok = [0] * k
    # Bins the current sequence did not fit, keyed (tokens - cap) << shift | bin (the most room
    # first), with their heap keys aside: they wait until a sequence short enough comes.
    parked: list[int] = []
    key_of = [0] * k
    replace, push, pop = heapq.heapreplace, heapq.heappush, heapq.heappop
    for i in order:
        t = tokens[i]
        while parked and -(parked[0] >> shift) >= t:
            push(heap, key_of[pop(parked) & mask])
        if heap:
            b = heap[0] & mask
            if tok[b] + t <= cap:
                replace(heap, heap[0] + (cost[i] << shift))
                bins[b].append(i)
                tok[b] += t
                continue
        while heap and tok[heap[0] & mask] + t > cap:
            key = pop(heap)
            b = key & mask
            key_of[b] = key
            push(parked, ((tok[b] - cap) << shift) | b)
        if heap:
            b = heap[0] & mask
            replace(heap, heap[0] + (cost[i] << shift))
        else:  # nothing fits: the least-loaded bin, the validator will flag it
            b = min(key_of[q & mask] for q in parked) & mask
            parked = [q for q in parked if q & mask != b]
            heapq.heapify(parked)
            push(heap, key_of[b] + (cost[i] << shift))
        bins[b].append(i)
        tok[b] += t
    return bins


def _lpt_rounds(cost: list[int], k: int, order: list[int] | None) -> Bins:
    """LPT by rounds: each round the next k items, heaviest first, go to the k bins lightest
    first (ties by bin index). Within a round this is what LPT does while loads stay ordered;
    it differs from one-by-one LPT only when one item lifts a bin past another of the round."""
    values = np.asarray(cost, dtype=np.int64)
    idx = argsort_desc(values) if order is None else np.asarray(order, dtype=np.int64)
    loads = np.zeros(k, dtype=np.int64)
    labels = np.empty(len(values), dtype=np.int64)
    for lo in range(0, len(idx), k):
        chunk = idx[lo : lo + k]
        lightest = np.argsort(loads, kind="stable")[: len(chunk)]
        labels[chunk] = lightest
        loads[lightest] += values[chunk]
    return bins_from_labels(labels, k)
