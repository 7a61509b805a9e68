"""k-way Karmarkar-Karp (largest differencing method), as balancing trainers use it.

Each sequence starts as a k-tuple of subset sums (its cost, 0, ..., 0). The two tuples with the
largest spread are merged by pairing the heaviest subset of one with the lightest of the other,
until one tuple is left. It balances well but ignores the cap entirely: that is the failure mode
seqpart exists to fix, and why this module is kept as the baseline.

Subsets are kept as a merge tree (node ids), not as index lists, so a merge costs O(k log k)
however many sequences the subsets already hold; the tree is flattened once at the end. States
store only their non-empty subsets, so the many early merges of lone sequences are cheap.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, overload

import numpy as np

from .inputs import Bins, order_desc, prepare

__all__ = ["karmarkar_karp"]


def karmarkar_karp(
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> Bins:
    """Largest differencing into exactly ``k`` bins; ``cap`` is accepted and ignored.

    With ``max_count`` and unit counts dividing evenly (equal sizes), the start tuples are runs
    of k consecutive sequences in cost order, so every bin ends with exactly n/k sequences.
    """
    _tokens, cost, count, k, _cap = prepare(lengths, k, cap, costs, counts)
    return karmarkar_karp_lists(cost, count, k, max_count)


@overload
def karmarkar_karp_lists(
    cost: list[int], count: list[int], k: int, max_count: int | None, deadline: None = None
) -> Bins: ...


@overload
def karmarkar_karp_lists(
    cost: list[int], count: list[int], k: int, max_count: int | None, deadline: float
) -> Bins | None: ...


def karmarkar_karp_lists(
    cost: list[int], count: list[int], k: int, max_count: int | None,
    deadline: float | None = None,
) -> Bins | None:
    """Largest differencing on validated lists (see :func:`karmarkar_karp`).

    ``deadline`` (a ``time.perf_counter()`` value): give up and return None once it has
    passed (checked every 64 merges). Without one the result is always a plan; a caller's
    safety net needs it because a merge-by-merge run cannot be stopped halfway otherwise
    (several ms at n=2048, up to twice that when the machine is slow)."""
    n = len(cost)
    order = order_desc(cost)
    equal = max_count is not None and all(c == 1 for c in count) and n == k * max_count
    if equal and k >= _NUMPY_EQUAL_MIN_BINS and sum(cost) < 2**62:
        return _equal_count_numpy(cost, order, k)
    # A state keeps only its non-empty subsets, sums ascending, the k - m empty ones implied
    # in front: a lone sequence costs one entry, not k, and two sparse states merge by a sorted
    # union (each heavy subset pairs with an empty one of the other).
    states = _initial_states(cost, order, k, equal)
    left: list[int] = []  # internal node id n + j has children left[j], right[j]
    right: list[int] = []
    # A hot loop (n merges): join and spread are written inline, and a popped state's lists
    # are reused in place, since nothing else refers to them. The heap is keyed (-spread, id).
    # Lone sequences are already in key order (cost descending, ids ascending, and every
    # merged state's id is larger), so they wait in that list and only merged states enter
    # the heap: the same pops in the same order, with half the heap operations.
    if equal or k == 1:
        heap = [(-(s[-1] - (s[0] if len(s) == k else 0)), i) for i, (s, _) in enumerate(states)]
        lone_key: list[int] = []
    else:
        heap = []
        lone_key = [-cost[i] for i in order]  # lone state i: key (lone_key[i], i)
    heapq.heapify(heap)
    pop, push, insort_at = heapq.heappop, heapq.heappush, bisect.bisect_right
    tick = len(states)
    next_lone, lone_end = 0, len(lone_key)
    while len(heap) + lone_end - next_lone > 1:
        if deadline is not None and not tick & 63 and time.perf_counter() > deadline:
            return None
        if next_lone < lone_end and (not heap or lone_key[next_lone] <= heap[0][0]):
            ia = next_lone
            next_lone += 1
        else:
            ia = pop(heap)[1]
        if next_lone < lone_end and (not heap or lone_key[next_lone] <= heap[0][0]):
            ib = next_lone
            next_lone += 1
        else:
            ib = pop(heap)[1]
        sa, na = states[ia]
        sb, nb = states[ib]
        states[ia] = states[ib] = _EMPTY  # free memory early
        if len(sa) == 1 and len(sb) > 1:
            sa, na, sb, nb = sb, nb, sa, na
        if len(sb) == 1:  # a lone subset: one bisection into a, no re-sort
            sums, nodes = sa, na
            value, node = sb[0], nb[0]
            if len(sums) == k:  # a is full: the lone subset joins a's lightest
                value += sums.pop(0)
                other = nodes.pop(0)
                if other >= 0:
                    left.append(other)
                    right.append(node)
                    node = n + len(left) - 1
            at = insort_at(sums, value)
            sums.insert(at, value)
            nodes.insert(at, node)
        else:
            if len(sa) + len(sb) <= k:
                paired = sorted(zip(sa + sb, na + nb, strict=True), key=_first)
            else:
                fa = [0] * (k - len(sa)) + sa  # expand the implied empty subsets
                ga = [-1] * (k - len(na)) + na
                fb = sb[::-1] + [0] * (k - len(sb))  # b reversed: heaviest first
                gb = nb[::-1] + [-1] * (k - len(nb))
                paired = []
                for x, y, u, v in zip(fa, fb, ga, gb, strict=True):
                    if u < 0:
                        u = v
                    elif v >= 0:
                        left.append(u)
                        right.append(v)
                        u = n + len(left) - 1
                    paired.append((x + y, u))
                paired.sort(key=_first)
            sums = [p[0] for p in paired]
            nodes = [p[1] for p in paired]
        states.append((sums, nodes))
        push(heap, (-(sums[-1] - (sums[0] if len(sums) == k else 0)), tick))
        tick += 1
    _, nodes = states[heap[0][1] if heap else next_lone]
    return _bins_from_tree([-1] * (k - len(nodes)) + nodes, left, right, n)



#: The equal-count form runs in numpy from this many bins on: each merge is then a few array
#: operations on k-wide states, not a Python loop over k pairs (the same result; 0.23 s ->
#: 0.02 s at n = 262,144 into 2,048 bins).
_NUMPY_EQUAL_MIN_BINS = 64


def _equal_count_numpy(cost: list[int], order: list[int], k: int) -> Bins:
    """The equal-count form of :func:`karmarkar_karp_lists` (every state full: k subsets of
    one run of k sequences each), with the same merges in the same order and the same ties:
    subset j of the state with the largest spread pairs with subset k-1-j of the next, new
    node ids in that order, sums re-sorted stably. The merge tree is flattened by pointer
    jumping. Exact while every sum stays below 2**62 (the caller checks)."""
    n = len(cost)
    runs = n // k
    c = np.asarray(cost, dtype=np.int64)
    first_nodes = np.asarray(order, dtype=np.int64).reshape(runs, k)[:, ::-1]  # ascending cost
    states: list[tuple[np.ndarray, np.ndarray]] = [(c[row], row) for row in first_nodes]
    heap = [(-int(s[-1] - s[0]), i) for i, (s, _) in enumerate(states)]
    heapq.heapify(heap)
    parent = np.arange(n + (runs - 1) * k, dtype=np.int64)  # internal node n + j
    fresh = n
    while len(heap) > 1:
        sa, na = states[heapq.heappop(heap)[1]]
        sb, nb = states[heapq.heappop(heap)[1]]
        nodes = np.arange(fresh, fresh + k, dtype=np.int64)
        parent[na] = nodes
        parent[nb[::-1]] = nodes
        fresh += k
        sums = sa + sb[::-1]
        perm = np.argsort(sums, kind="stable")
        states.append((sums[perm], nodes[perm]))
        heapq.heappush(heap, (-int(sums[perm[-1]] - sums[perm[0]]), len(states) - 1))
    roots = states[heap[0][1]][1]
    while True:  # every node's root, by pointer jumping (log2 of the tree's depth rounds)
        up = parent[parent]
        if np.array_equal(up, parent):
            break
        parent = up
    slot = np.empty(len(parent), dtype=np.int64)
    slot[roots[::-1]] = np.arange(k)  # heaviest root first, as the list form gives
    members = np.argsort(slot[parent[:n]], kind="stable")  # each bin's sequences ascending
    return members.reshape(k, runs).tolist()


def _initial_states(
    cost: list[int], order: list[int], k: int, equal: bool
) -> list[tuple[list[int], list[int]]]:
    """One state per sequence, or with equal sizes one per run of k (each a full partition)."""
    if not equal:
        return [([cost[i]], [i]) for i in order]
    states = []
    for start in range(0, len(order), k):
        run = order[start : start + k][::-1]
        states.append(([cost[i] for i in run], list(run)))
    return states


def _bins_from_tree(roots: list[int], left: list[int], right: list[int], n: int) -> Bins:
    """The sequences under each root of the merge tree (ids < n are sequences), heaviest root
    last in ``roots``, so bins come heaviest first."""
    bins: Bins = []
    for root in reversed(roots):
        members: list[int] = []
        stack = [root] if root >= 0 else []
        while stack:
            node = stack.pop()
            if node < n:
                members.append(node)
            else:
                stack.append(left[node - n])
                stack.append(right[node - n])
        members.sort()
        bins.append(members)
    return bins


_EMPTY: tuple[list[int], list[int]] = ([], [])
_first = itemgetter(0)  # sort pairs by sum only, stable on ties
