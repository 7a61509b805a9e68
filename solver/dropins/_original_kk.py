"""The trainers' own Karmarkar-Karp, reproduced plan for plan, as the drop-in's safety net.

Why: the drop-in promises a plan never heavier than the one the trainer computed before. The
originals (verl, slime, OpenRLHF and AReaL share one algorithm) break ties in their own way, and
now and then that lands a few tokens lighter than local search from seqpart's own starts. Running
the same algorithm, with the same orderings, and keeping the lighter of the two plans makes the
promise hold by construction.

The algorithm (largest differencing): every item starts as a state of k subsets, items in
ascending (value, index) order (``equal_size``: k consecutive items per state); a heap pops the
two states with the largest spread (ties: the larger heaviest subset), merges the first's
subsets heaviest-first with the second's lightest-first, and pushes the result back. Subsets
order by (sum, item count, items); heaviest first within a state. Written here for speed
(cached keys, list extends, key-based sorts); the heap sees the same comparisons as the
originals' ``__lt__``, so it pops in the same order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class _Subset:
    __slots__ = ("items", "total")

    def __init__(self) -> None:
        self.total = 0
        self.items: list[tuple[int, int]] = []  # (index, value), in arrival order

    def key(self) -> tuple[int, int, list[tuple[int, int]]]:
        return (self.total, len(self.items), self.items)


class _State:
    __slots__ = ("spread", "subsets", "top")

    def __init__(self, subsets: list[_Subset]) -> None:
        subsets.sort(key=_Subset.key, reverse=True)
        self.subsets = subsets
        self.spread = subsets[0].total - subsets[-1].total
        self.top = subsets[0].key()

    def __lt__(self, other: _State) -> bool:
        # Popped first: the larger spread; on a tie, the larger heaviest subset.
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.top > other.top


def _state(items: Sequence[tuple[int, int]], k: int) -> _State:
    subsets = [_Subset() for _ in range(k)]
    for s, (idx, val) in zip(subsets, items, strict=False):
        s.items.append((idx, val))
        s.total += val
    return _State(subsets)


def original_karmarkar_karp(values: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
    """The originals' plan: k lists of indices, heaviest first, in their order (unsorted).
    ``equal_size`` needs ``len(values) % k == 0`` (checked by the caller)."""
    ordered = sorted((int(v), i) for i, v in enumerate(values))
    heap: list[_State] = []
    if equal_size:
        for start in range(0, len(ordered), k):
            heapq.heappush(heap, _state([(i, v) for v, i in ordered[start:start + k]], k))
    else:
        for v, i in ordered:
            heapq.heappush(heap, _state([(i, v)], k))
    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        for mine, theirs in zip(first.subsets, reversed(second.subsets), strict=True):
            mine.items.extend(theirs.items)
            mine.total += theirs.total
        heapq.heappush(heap, _State(first.subsets))
    return [[i for i, _ in s.items] for s in heap[0].subsets]
