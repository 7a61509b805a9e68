"""The packing steps the trainers' schedulers share: first-fit opening micro-batches as needed,
the split of the heaviest micro-batch up to a count, equal-count Karmarkar-Karp dealing, and
slime's schedule built from them.

Pure functions on checked input (plain lists of Python ints, so every sum is exact); the
baselines and the step planner's trainer starts both call these, so each trainer's schedule is
computed one way. They run at every size the planner sees (n = 262,144 in a step), hence the
max-tree first-fit and the heap of micro-batches to split.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from .._first_fit import first_fit_tree
from .._karmarkar_karp import karmarkar_karp_lists

Schedule = list[list[list[int]]]


def open_first_fit(tokens: list[int], cap: int | None, order: Sequence[int]) -> list[list[int]]:
    """First-fit in ``order``, opening micro-batches as needed (a sequence over the cap goes
    alone): ``first_fit(lengths, None, cap)``'s bins, by its O(log k) max-tree."""
    if cap is None:
        return [list(order)]
    return first_fit_tree(np.asarray(tokens, dtype=np.int64), None, cap, order)


def round_up(k: int, multiple: int) -> int:
    """``k`` rounded up to a multiple of ``multiple``, at least one multiple."""
    return max(-(-k // multiple) * multiple, multiple)


def split_heaviest(bins: list[list[int]], target: int, weight: list[int]) -> None:
    """Grow ``bins`` in place to ``target`` micro-batches: split the heaviest micro-batch of
    several sequences (ties: the later one) in two by LPT on ``weight`` (ties by position); the
    first half keeps its place, the second is appended. Stops early when every micro-batch is a
    single sequence.

    Both halves are subsets of the split micro-batch, so splitting never creates a new cap
    violation; that is why slime and prime-rl grow the count this way. A heap of (weight,
    position) finds the next one in O(log k)."""
    heap = [(-sum(weight[i] for i in b), -at) for at, b in enumerate(bins) if len(b) > 1]
    heapq.heapify(heap)
    while len(bins) < target and heap:
        _, neg_at = heapq.heappop(heap)
        at = -neg_at
        halves: tuple[list[int], list[int]] = ([], [])
        sums = [0, 0]
        for i in sorted(bins[at], key=lambda i: -weight[i]):  # stable: ties keep bin order
            h = 0 if sums[0] <= sums[1] else 1
            halves[h].append(i)
            sums[h] += weight[i]
        bins[at] = halves[0]
        bins.append(halves[1])
        for pos, half, total in ((at, halves[0], sums[0]), (len(bins) - 1, halves[1], sums[1])):
            if len(half) > 1:
                heapq.heappush(heap, (-total, -pos))


def equal_count(weights: list[int], k: int, pad: int) -> list[list[int]]:
    """Equal-count Karmarkar-Karp of ``weights`` into k groups of the same size, balancing
    group sums; groups hold item positions. When the count does not divide, the trainer pads
    with placeholders of weight ``pad``: they take part in the balancing and are dropped here,
    so some groups come out one item short."""
    n = len(weights)
    padded = list(weights) + [pad] * (-n % k)
    groups = karmarkar_karp_lists(padded, [1] * len(padded), k, len(padded) // k)
    return [[b for b in g if b < n] for g in groups]


def deal(bins: list[list[int]], by_rank: list[list[int]]) -> Schedule:
    """``schedule[rank][j] = bins[by_rank[rank][j]]`` (the bins themselves, not copies)."""
    return [[bins[b] for b in rank] for rank in by_rank]


def slime_bins(tokens: list[int], dp: int, cap: int | None, multiple_of: int) -> list[list[int]]:
    """slime's micro-batches: first-fit in arrival order under the cap, then the heaviest (by
    tokens) split until the count is a multiple of ``dp * multiple_of``."""
    bins = open_first_fit(tokens, cap, range(len(tokens)))
    split_heaviest(bins, round_up(len(bins), dp * multiple_of), tokens)
    return bins


def slime_rr_ranks(k: int, dp: int) -> list[list[int]]:
    """slime without ``balance_data``: micro-batch b to rank ``b % dp`` (strided round robin)."""
    return [list(range(r, k, dp)) for r in range(dp)]


def slime_kk_ranks(bins: list[list[int]], costs: list[int], dp: int) -> list[list[int]]:
    """slime's ``balance_data``: equal-count Karmarkar-Karp of the micro-batches on their cost
    (padded with zero-cost placeholders when the split ran out of sequences)."""
    return equal_count([sum(costs[i] for i in b) for b in bins], dp, 0)
