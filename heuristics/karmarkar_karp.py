"""k-way Karmarkar-Karp (largest differencing method), as balancing trainers use it.

Each sequence starts as a k-tuple of subset sums (its cost, 0, ..., 0). The two tuples with the
largest spread are merged by pairing the heaviest subset of one with the lightest of the other,
until one tuple is left. It balances well but ignores the cap entirely: that is the failure mode
seqpart exists to fix, and why this module is kept as the baseline.

Subsets are kept as a merge tree (node ids), not as index lists, so a merge costs O(k log k)
however many sequences the subsets already hold; the tree is flattened once at the end.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from ._common import Bins, order_desc, prepare


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
    n = len(cost)
    order = order_desc(cost)
    equal = max_count is not None and all(c == 1 for c in count) and n == k * max_count
    # A state is (sums, nodes), sums sorted descending; node -1 is an empty subset.
    states: list[tuple[list[int], list[int]]] = []
    if equal:
        for start in range(0, n, k):
            run = order[start : start + k]
            states.append(([cost[i] for i in run], list(run)))
    else:
        pad = [0] * (k - 1)
        neg = [-1] * (k - 1)
        states = [([cost[i], *pad], [i, *neg]) for i in order]
    left: list[int] = []  # internal node id n + j has children left[j], right[j]
    right: list[int] = []
    heap = [(-(s[0] - s[-1]), idx) for idx, (s, _) in enumerate(states)]
    heapq.heapify(heap)
    tick = len(states)
    while len(heap) > 1:
        _, ia = heapq.heappop(heap)
        _, ib = heapq.heappop(heap)
        sa, na = states[ia]
        sb, nb = states[ib]
        sums = [sa[j] + sb[k - 1 - j] for j in range(k)]
        nodes = []
        for j in range(k):
            x, y = na[j], nb[k - 1 - j]
            if x < 0:
                nodes.append(y)
            elif y < 0:
                nodes.append(x)
            else:
                left.append(x)
                right.append(y)
                nodes.append(n + len(left) - 1)
        perm = sorted(range(k), key=sums.__getitem__, reverse=True)
        states.append(([sums[j] for j in perm], [nodes[j] for j in perm]))
        states[ia] = states[ib] = ([], [])  # free memory early
        s = states[tick][0]
        heapq.heappush(heap, (-(s[0] - s[-1]), tick))
        tick += 1
    _, nodes = states[heap[0][1]]
    bins: Bins = []
    for root in nodes:
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
