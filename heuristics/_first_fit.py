"""First-fit in arrival order: what trainers use today to count micro-batches.

With ``k=None`` it opens a new micro-batch whenever a sequence fits in none of the open ones, so
``len(first_fit(lengths, None, cap))`` is the count a trainer's
``get_minimum_num_micro_batch_size`` reports. With a fixed ``k`` it packs into k bins, leaving the
tail empty when k is larger than needed: the seed issue's crash.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from .inputs import Bins, prepare

__all__ = ["first_fit"]


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
    if cap is not None and (max_count is None or max(count, default=1) == 1):
        return first_fit_tree(np.asarray(tokens, dtype=np.int64), k, cap, order, max_count)
    if cap is None and max_count is not None and max(count, default=1) == 1:
        # No cap: the total is one (every bin has room for any sequence), only counts bind.
        return first_fit_tree(np.asarray(tokens, dtype=np.int64), k, max(sum(tokens), 1),
                              order, max_count)
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


def first_fit_tree(
    tokens: np.ndarray,
    k: int | None,
    cap: int,
    order: Sequence[int] | np.ndarray,
    max_count: int | None = None,
) -> Bins:
    """First fit in O(n log m): a max-tree over the bins' room finds the leftmost bin a
    sequence fits in, and a run of equal lengths in ``order`` is placed together (a bin with
    room r takes r // t copies of length t, as one-by-one first fit would; sorted orders are
    mostly such runs). ``k=None``: bins not yet opened sit to the right with room ``cap``, so
    the leftmost fit opens one exactly when no open bin has room. Fixed k: a sequence that
    fits nowhere goes to the bin with the most room (the validator flags it).
    ``max_count``: at most that many sequences (one sample each) per bin; a bin that holds
    them leaves the tree (its room there becomes -1)."""
    idx = np.asarray(order, dtype=np.int64)
    n = len(idx)
    # First fit leaves at most one bin half empty or less, so it never opens more than
    # 2 * S / cap + 1 bins (plus one per sequence over the cap). Not with a sample limit.
    over = int((tokens[idx] > cap).sum()) if n else 0
    bound = 2 * (-(-int(tokens[idx].sum()) // cap)) + 1 + over if n else 1
    if max_count is not None:
        bound = n
    slots = max(1, min(n, bound) if k is None else k)
    size = 1
    while size < slots:
        size *= 2
    tree = [-1] * (2 * size)  # max room in each subtree; -1: no bin there
    for leaf in range(size, size + slots):
        tree[leaf] = cap
    for node in range(size - 1, 0, -1):
        tree[node] = max(tree[2 * node], tree[2 * node + 1])
    if n == 0:
        return [[] for _ in range(k or 0)]
    ordered = tokens[idx]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.concatenate((starts[1:], [n])).tolist()
    ids = idx.tolist()
    bins: Bins = [[] for _ in range(k or 0)]
    # With a sample limit, full bins sit at -1 in the tree: their room is kept here.
    real = [cap] * slots if max_count is not None else None
    # The bins by room, most first (ties: lowest index), for a sequence that fits nowhere:
    # built at the first such sequence, then given every change (stale entries skipped).
    most: list[tuple[int, int]] | None = None
    for t, lo, hi in zip(ordered[starts].tolist(), starts.tolist(), ends, strict=True):
        pos = lo
        while pos < hi:
            if tree[1] >= t:
                node = 1
                while node < size:  # descend to the leftmost leaf with room >= t
                    node += node if tree[node + node] >= t else node + 1
                take = min(tree[node] // t, hi - pos) if t > 0 else hi - pos
            else:  # fits nowhere (fixed k, or a sequence over the cap): the most room
                rooms = real if real is not None else tree
                at = 0 if real is not None else size
                if most is None:
                    most = [(-rooms[at + b], b) for b in range(slots)]
                    heapq.heapify(most)
                while -most[0][0] != rooms[at + most[0][1]]:
                    heapq.heappop(most)
                node = size + most[0][1]
                take = 1
            b = node - size
            while len(bins) <= b:
                bins.append([])
            if real is not None:
                take = min(take, max(max_count - len(bins[b]), 1))
            bins[b].extend(ids[pos : pos + take])
            pos += take
            if real is None:
                room = tree[node] - take * t
                if most is not None:
                    heapq.heappush(most, (-room, b))
            else:
                real[b] -= take * t
                room = real[b] if len(bins[b]) < max_count else -1
                if most is not None:
                    heapq.heappush(most, (-real[b], b))
            tree[node] = room
            # Up to the first ancestor whose maximum does not change (rooms only shrink).
            while node > 1:
                sibling = tree[node ^ 1]
                if sibling > room:
                    room = sibling
                node >>= 1
                if tree[node] == room:
                    break
                tree[node] = room
    return bins
