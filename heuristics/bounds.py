"""Lower bounds: on the largest micro-batch load for a fixed k, and on the number of micro-batches.

They are what lets seqpart call a plan *optimal*: a plan whose max load equals a bound is optimal
with no search at all, and a bound above the cap proves that no plan exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .inputs import as_lengths, as_positive_int


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


def _least_ratio(num_arr: np.ndarray, den_arr: np.ndarray) -> tuple[int, int]:
    """The least ``num_arr[i] / den_arr[i]`` as an exact fraction (num, den): the float ratio
    shortlists the candidates, exact integer cross-products settle near-ties."""
    ratio = num_arr / den_arr
    near = np.flatnonzero(ratio <= ratio.min() * (1 + 1e-9)).tolist()
    num, den = int(num_arr[near[0]]), int(den_arr[near[0]])
    for i in near:
        if int(num_arr[i]) * den < num * int(den_arr[i]):
            num, den = int(num_arr[i]), int(den_arr[i])
    return num, den


def load_lower_bound_token_room(tokens: Any, costs: Any, k: int, cap: int, lower: int) -> int:
    """A lower bound on the largest load when the cap leaves little room in tokens: at least
    ``lower``, raised while some load below it cannot hold every token.

    Why: with a cost that is not the token count (attention's ``a*l + l*l``) and micro-batches
    nearly full at the smallest count, the load bounds see only costs, while the heaviest items
    cannot sit in a full micro-batch under a low load. For a load ``z``: items of cost above
    ``z/2`` need micro-batches of their own, and the one holding item i takes at most
    ``l_i + (z - c_i) / rho`` tokens, ``rho`` the least cost per token of any item (what else
    it holds costs at least ``rho`` per token). If those micro-batches and ``cap`` tokens in each
    of the others cannot hold all the tokens, no split has loads of at most ``z``. Feasibility
    only grows with ``z``, so a binary search finds the least ``z`` that passes. Exact integers.
    """
    tok_arr, cst_arr = as_lengths(tokens, "tokens"), as_lengths(costs, "costs")
    if len(tok_arr) != len(cst_arr):
        raise ValueError(
            f"costs has {len(cst_arr)} entries but tokens has {len(tok_arr)}: one per sequence")
    k, cap = as_positive_int(k, "k"), as_positive_int(cap, "cap")
    total = int(tok_arr.sum())
    if total > k * cap:
        return lower  # no split fits at all: the count bounds say so, not this one
    # rho = min c/l as an exact fraction num/den, so (z - c) / rho = (z - c) * den // num.
    num, den = _least_ratio(cst_arr, tok_arr)
    # Only the heaviest items can cost over z/2 for any z >= lower: at most k + 1 of them matter.
    top = np.argsort(-cst_arr, kind="stable")[: k + 1].tolist()
    cst = [int(cst_arr[i]) for i in top]
    tok = [int(tok_arr[i]) for i in top]

    def fits(z: int) -> bool:
        room = k * cap
        for count, (c, length) in enumerate(zip(cst, tok, strict=True)):
            if 2 * c <= z:
                break
            if count >= k:
                return False
            room -= cap - min(cap, length + (z - c) * den // num)
        return room >= total

    lo, hi = lower, max(lower, 2 * cst[0])  # at 2 * c_max no item is over half the load
    if fits(lo):
        return lo
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def load_lower_bound_full_pair(tokens: Any, costs: Any, k: int, cap: int, max_extra: int = 16) -> int:
    """A lower bound on the largest load when the cap leaves every micro-batch nearly full: the
    micro-batches that hold several of the heaviest items must also hold the tokens the full
    ones cannot.

    Why: with attention's ``a*l + l*l`` and micro-batches full in tokens, the average load
    ``C/k`` is far below what a micro-batch with two long sequences must carry (its linear part
    is that of a nearly full micro-batch, its quadratic part that of two long sequences).

    With ``rho`` the least cost per token of any item, write each cost as ``c = e + rho*t``
    (``e >= 0``). Take any k + p items. The set B of micro-batches holding two or more of them,
    say q of them (1 <= q <= p), holds at least p + q of those items and at least
    ``S - (k - q)*cap`` tokens (each other micro-batch holds at most ``cap``). So B's total load
    is at least the p + q smallest ``e`` of the chosen items plus ``rho`` times those tokens,
    and its heaviest micro-batch at least a q-th of that. The bound is, over p, the least of
    this over q; the chosen items are those of largest ``e``. Also, for p = 1, the two
    cheapest of the k + 1 costliest items. Exact integers (``rho`` a fraction); 0 when n <= k.
    """
    tok_arr, cst_arr = as_lengths(tokens, "tokens"), as_lengths(costs, "costs")
    if len(tok_arr) != len(cst_arr):
        raise ValueError(
            f"costs has {len(cst_arr)} entries but tokens has {len(tok_arr)}: one per sequence")
    k, cap = as_positive_int(k, "k"), as_positive_int(cap, "cap")
    n, total = len(tok_arr), int(tok_arr.sum())
    if n <= k:
        return 0
    num, den = _least_ratio(cst_arr, np.maximum(tok_arr, 1))  # rho, the least cost per token
    top = np.argsort(-cst_arr, kind="stable")[: k + 1].tolist()
    cheap = sorted(int(cst_arr[i]) for i in top)
    bound = cheap[0] + cheap[1]
    extra = min(n - k, max_extra)
    # Any k + p items will do: the float shortlists those of largest e, then exact ints (e * den)
    # sorted descending; the p + q smallest of the first k + p are positions k - q .. k + p - 1.
    approx = cst_arr - tok_arr * (num / den)
    shortlist = np.argsort(-approx, kind="stable")[: k + extra].tolist()
    excess = sorted((int(cst_arr[i]) * den - int(tok_arr[i]) * num for i in shortlist), reverse=True)
    prefix = [0]
    for x in excess:
        prefix.append(prefix[-1] + x)
    for p in range(1, extra + 1):
        least = min(
            -(-(prefix[k + p] - prefix[k - q] + max(0, total - (k - q) * cap) * num) // (q * den))
            for q in range(1, min(p, k) + 1)
        )
        bound = max(bound, least)
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
    return _l2_sorted(t, np.concatenate(([0], np.cumsum(t))), as_positive_int(cap, "cap"))


def _l2_sorted(t: np.ndarray, prefix: np.ndarray, cap: int) -> int:
    """L2 on ascending ``t`` with its prefix sums (shared by the repeated calls below)."""
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


class PackingBound(NamedTuple):
    """What :func:`packing_bound` returns."""

    #: The bound on the largest load (see :func:`load_lower_bound_packing`).
    bound: int
    #: L2 evaluations made, for a caller that charges a budget.
    steps: int


def load_lower_bound_packing(
    costs: Any, k: int, lo: int, hi: int, max_steps: int | None = None
) -> int:
    """The smallest z in [lo, hi] for which L2 allows k bins of capacity z; hi if none.

    A plan with max load z packs the costs into k bins of capacity z, so L2(costs, z) <= k is
    necessary. It is what the counting bound misses when many items are over half the load:
    two such items never share a micro-batch. Binary search, one L2 per step; ``hi`` is
    typically the best plan's load, so a result of ``hi`` proves that plan optimal.
    ``max_steps`` caps the L2 evaluations (a budget): the search then stops early and returns
    the z below which every load is refuted, still a valid bound. :func:`packing_bound` also
    says how many evaluations it made.
    """
    return packing_bound(costs, k, lo, hi, max_steps).bound


def packing_bound(
    costs: Any, k: int, lo: int, hi: int, max_steps: int | None = None
) -> PackingBound:
    """:func:`load_lower_bound_packing`'s bound and the L2 evaluations it took."""
    c = np.sort(as_lengths(costs, "costs"))
    k = as_positive_int(k, "k")
    prefix = np.concatenate(([0], np.cumsum(c)))
    lo = max(lo, int(c[-1]))
    steps = 0
    if lo >= hi or max_steps == 0:
        return PackingBound(min(lo, hi), 0)
    steps += 1
    if _l2_sorted(c, prefix, lo) <= k:
        hi = lo
    # invariant: every z below lo is refuted by L2; hi passes it (or is the caller's cap)
    while lo < hi and (max_steps is None or steps < max_steps):
        mid = (lo + hi) // 2
        steps += 1
        if _l2_sorted(c, prefix, mid) <= k:
            hi = mid
        else:
            lo = mid + 1
    return PackingBound(lo if lo < hi else hi, steps)


def min_bins_lower_bound(lengths: Any, cap: int) -> int:
    """max(L1, L2): no split into fewer micro-batches respects the cap."""
    return max(min_bins_l1(lengths, cap), min_bins_l2(lengths, cap))


# --------------------------------------------------------------------------- Fekete-Schepers
# A stronger lower bound on the number of micro-batches: Fekete-Schepers dual feasible functions.
#
# Why: under tight caps (1-1.5x the longest sequence) Martello-Toth L2
# (:func:`seqpart.heuristics.bounds.min_bins_l2`) often sits one or two micro-batches under
# best-fit decreasing, and the count was then left unproven. L2 only knows that two items over
# half the cap never share a bin; the functions here also use that a bin holds at most ``k``
# items over ``cap/(k+1)``. On long-tail RL batches with a cap of 1.5x the longest sequence
# (many sequences just under two thirds of the cap) this proves best-fit decreasing's count.
#
# A dual feasible function f maps sizes to sizes such that whatever fits in a bin still fits
# after mapping, so ``ceil(sum f(x) / cap)`` bounds the number of bins. The family used
# (Fekete & Schepers 2001), composed:
#
# * ``U_eps(x)``: ``cap`` if ``x > cap - eps``, ``0`` if ``x < eps``, else ``x`` (``eps <= cap/2``);
# * ``u_k(x)``: ``x`` if ``(k+1) x / cap`` is an integer, else ``floor((k+1) x / cap) * cap / k``.
#
# All thresholds ``eps`` (0 and every distinct size up to ``cap/2``) are tried at once with prefix
# sums, for ``k = 1 .. max_k``: O((n + thresholds) log n) per k, exact integer arithmetic (the
# values are scaled by k so nothing is fractional). Pure: arrays in, an int out.

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
