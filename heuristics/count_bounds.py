"""A stronger lower bound on the number of micro-batches: Fekete-Schepers dual feasible functions.

Why: under tight caps (1-1.5x the longest sequence) Martello-Toth L2
(:func:`seqpart.heuristics.bounds.min_bins_l2`) often sits one or two micro-batches under
best-fit decreasing, and the count was then left unproven. L2 only knows that two items over
half the cap never share a bin; the functions here also use that a bin holds at most ``k``
items over ``cap/(k+1)``. On long-tail RL batches with a cap of 1.5x the longest sequence
(many sequences just under two thirds of the cap) this proves best-fit decreasing's count.

A dual feasible function f maps sizes to sizes such that whatever fits in a bin still fits
after mapping, so ``ceil(sum f(x) / cap)`` bounds the number of bins. The family used
(Fekete & Schepers 2001), composed:

* ``U_eps(x)``: ``cap`` if ``x > cap - eps``, ``0`` if ``x < eps``, else ``x`` (``eps <= cap/2``);
* ``u_k(x)``: ``x`` if ``(k+1) x / cap`` is an integer, else ``floor((k+1) x / cap) * cap / k``.

All thresholds ``eps`` (0 and every distinct size up to ``cap/2``) are tried at once with prefix
sums, for ``k = 1 .. max_k``: O((n + thresholds) log n) per k, exact integer arithmetic (the
values are scaled by k so nothing is fractional). Pure: arrays in, an int out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import as_lengths, as_positive_int

__all__ = ["min_bins_fekete_schepers"]

#: Largest k tried by default. k = 2 (thirds of the cap) is the one that closed the gaps left by
#: L2 on long-tail RL batches; k = 1 is L2-like; each further k costs a few vectorised passes.
MAX_K = 2


def min_bins_fekete_schepers(lengths: Any, cap: int, max_k: int = MAX_K) -> int:
    """max over k in 1..max_k and every threshold eps of ceil(sum u_k(U_eps(x)) / cap), and L1.

    ``lengths``: positive ints, at least one, each at most ``cap`` (an item over the cap has no
    place in any bin: count those apart).
    """
    t = np.sort(as_lengths(lengths, "lengths"))
    cap = as_positive_int(cap, "cap")
    max_k = as_positive_int(max_k, "max_k")
    if int(t[-1]) > cap:
        raise ValueError(f"lengths must be at most cap={cap}: count longer ones apart")
    if t.size * (max_k + 1) * cap >= 2**62:
        # Products below would overflow int64: fall back to the plain L1 bound, exactly.
        return -(-sum(int(x) for x in t) // cap)
    eps = np.unique(np.concatenate(([0], t[2 * t <= cap])))
    n = t.size
    lo = np.searchsorted(t, eps, side="left")  # first item >= eps
    hi = np.searchsorted(t, cap - eps, side="right")  # first item > cap - eps
    n_full = n - hi  # items over cap - eps count as a whole bin each
    best = -(-int(t.sum()) // cap)  # the identity is in the family too: L1
    for k in range(1, max_k + 1):
        # u_k scaled by k: k*x where (k+1)x is a multiple of cap, else floor((k+1)x/cap)*cap.
        scaled = (k + 1) * t
        g = np.where(scaled % cap == 0, k * t, (scaled // cap) * cap)
        prefix = np.concatenate(([0], np.cumsum(g)))
        middle = prefix[np.maximum(hi, lo)] - prefix[lo]  # items in [eps, cap - eps]
        total = middle + n_full * (k * cap)
        best = max(best, int((-(-total // (k * cap))).max()))
    return best
