"""Lower bounds: on the largest micro-batch load for a fixed k, and on the number of micro-batches.

They are what lets seqpart call a plan *optimal*: a plan whose max load equals a bound is optimal
with no search at all, and a bound above the cap proves that no plan exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._inputs import as_lengths, as_positive_int


def load_lower_bound(
    costs: Any,
    k: int,
    *,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> int:
    """A lower bound on the largest load over any split into k bins.

    max(ceil(S/k), c_1, and for every t >= 1 the sum of c_{tk-t+1} .. c_{tk+1}): among the
    t*k + 1 largest items some bin holds t + 1 of them, at least the t + 1 smallest of those
    (``c`` sorted descending, 1-based). t = 1 is the familiar c_k + c_{k+1}. With equal sizes
    (every bin exactly ``max_count`` unit items), the bin holding c_1 also holds
    ``max_count - 1`` others, each at least the smallest.
    """
    c = np.sort(as_lengths(costs, "costs"))[::-1]
    k = as_positive_int(k, "k")
    n = len(c)
    bound = max(-(-int(c.sum()) // k), int(c[0]))
    if n > k:
        prefix = np.concatenate(([0], np.cumsum(c)))
        t = np.arange(1, (n - 1) // k + 1)
        hi = t * k + 1  # exclusive end of the top t*k+1 items
        bound = max(bound, int((prefix[hi] - prefix[hi - t - 1]).max()))
    unit = counts is None or all(x == 1 for x in counts)
    if max_count is not None and unit and max_count > 1:
        bound = max(bound, int(c[0] + c[n - max_count + 1 :].sum()))
    return bound


def min_bins_l1(lengths: Any, cap: int) -> int:
    """L1 = ceil(total tokens / cap)."""
    t = as_lengths(lengths)
    return -(-int(t.sum()) // as_positive_int(cap, "cap"))


def min_bins_l2(lengths: Any, cap: int) -> int:
    """Martello-Toth L2: for each alpha in [0, cap/2], items over cap - alpha each need a bin,
    items in (cap/2, cap - alpha] each need a bin, and items in [alpha, cap/2] must fill the room
    the latter leave or open ceil(excess / cap) more.
    """
    t = np.sort(as_lengths(lengths))
    cap = as_positive_int(cap, "cap")
    prefix = np.concatenate(([0], np.cumsum(t)))
    n = len(t)
    alphas = np.unique(np.concatenate(([0], t[2 * t <= cap])))
    # Index boundaries in the ascending array.
    i_alpha = np.searchsorted(t, alphas, side="left")  # first item >= alpha
    i_half = np.searchsorted(t, cap // 2, side="right")  # first item > cap/2
    i_big = np.searchsorted(t, cap - alphas, side="right")  # first item > cap - alpha
    n1 = n - i_big
    n2 = np.maximum(i_big - i_half, 0)
    sum2 = prefix[np.maximum(i_big, i_half)] - prefix[i_half]
    sum3 = prefix[i_half] - prefix[np.minimum(i_alpha, i_half)]
    room = n2 * cap - sum2
    extra = np.maximum(0, -(-(sum3 - room) // cap))
    return int((n1 + n2 + extra).max())


def min_bins_lower_bound(lengths: Any, cap: int) -> int:
    """max(L1, L2): no split into fewer micro-batches respects the cap."""
    return max(min_bins_l1(lengths, cap), min_bins_l2(lengths, cap))
