"""prime-rl's schedule (``prepare_batch``): first-fit decreasing under the cap, the heaviest
micro-batch (by cost) split until the count is a multiple of the ranks, equal-count
Karmarkar-Karp of the micro-batches over the ranks, then its swap refinement.

The refinement is open-ended (one swap at a time until none lowers the key), so it runs under an
optional work budget and deadline and resumes on the same path (:class:`PrimeRefinement`): the
step planner starts from it within its budget, the baseline runs it to the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inputs import order_desc
from ._packing import Schedule, deal, equal_count, open_first_fit, round_up, split_heaviest


def prime_rl_bins(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int
) -> list[list[int]]:
    """prime-rl's micro-batches: first-fit decreasing, then the heaviest by cost split until the
    count is a multiple of ``dp * multiple_of`` (fewer when it runs out of sequences)."""
    bins = open_first_fit(tokens, cap, order_desc(tokens))
    split_heaviest(bins, round_up(len(bins), dp * multiple_of), costs)
    return bins


@dataclass
class PrimeRefinement:
    """prime-rl's swap refinement where it stands: resumed, it goes on along the same path (each
    swap depends on the groups only), so a refinement cut by its budget ends where prime-rl's
    own does when given more. ``weights`` may end in padding (items past ``len(bins)``): the
    copies of the first micro-batch prime-rl pads with when the split runs out of sequences,
    balanced with the rest and dropped from the schedule."""

    bins: list[list[int]]
    weights: list[int]
    groups: list[list[int]]

    @classmethod
    def deal(cls, bins: list[list[int]], costs: list[int], dp: int) -> PrimeRefinement:
        """The refinement's start: equal-count Karmarkar-Karp of the micro-batches' cost over
        ``dp`` ranks, padded as prime-rl pads."""
        weights = [sum(costs[i] for i in b) for b in bins]
        padded = weights + [weights[0]] * (-len(weights) % dp)
        return cls(bins, padded, equal_count(padded, dp, 0))

    def refine(self, work_budget: int | None = None, deadline: float | None = None
               ) -> tuple[Schedule, int, str]:
        """Refine from here (see :func:`refine_by_swaps`, whose work unit is a pair scored);
        returns (the schedule, each rank's micro-batches in order, the work, how it ended)."""
        self.groups, work, how = refine_by_swaps(self.weights, self.groups, work_budget, deadline)
        k = len(self.bins)
        return deal(self.bins, [sorted(b for b in g if b < k) for g in self.groups]), work, how


#: A swap step's fixed cost (its numpy calls, ~50-100 us), counted as this many pairs scored.
_STEP_PAIRS = 2000


def refine_by_swaps(
    weights: list[int], groups: list[list[int]], work_budget: int | None = None,
    deadline: float | None = None,
) -> tuple[list[list[int]], int, str]:
    """prime-rl's refinement: while some swap of two items of different groups lowers
    (largest group sum, largest - smallest), take the best, ties to the smallest
    (group, group, position, position) with the lower group first. Stops when ``work_budget``
    pairs have been scored (None: no limit) or at ``deadline``. Returns (groups, work,
    "done" / "work budget" / "clock").

    Only the pairs that lower that key are scored, which finds the same swap as scoring all
    of them: with ``d = w_x - w_y`` (x in group c, y in group b), a swap lowers the key iff c
    is the one group at the maximum and ``0 < d < top - S_b``, or c is the one group at the
    minimum and ``0 < -d < S_b - bottom``. With the items sorted by weight, each x's partners
    are a window of that order (``_pairs``), so a step costs the pairs near the balance, not
    all pairs."""
    k = len(groups)
    if k < 2:
        return [list(g) for g in groups], 0, "done"
    dtype: Any = np.int64 if sum(weights) < 2**62 else object
    w = np.asarray(weights, dtype=dtype)
    by_weight = np.argsort(w, kind="stable")
    sorted_w = w[by_weight]
    slot_item = np.asarray([i for g in groups for i in g], dtype=np.int64)
    slot_group = np.asarray([r for r, g in enumerate(groups) for _ in g], dtype=np.int64)
    slot_pos = np.asarray([p for g in groups for p in range(len(g))], dtype=np.int64)
    item_slot = np.empty(len(weights), dtype=np.int64)
    item_slot[slot_item] = np.arange(len(slot_item))
    first = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64).tolist()
    sums = np.asarray([sum(weights[i] for i in g) for g in groups], dtype=dtype)
    work = 0
    while True:
        if work_budget is not None and work >= work_budget:
            return _groups(slot_item, first, k), work, "work budget"
        if deadline is not None and time.perf_counter() > deadline:
            return _groups(slot_item, first, k), work, "clock"
        found, scored = _best_swap(sums, w, sorted_w, by_weight, slot_item, slot_group, slot_pos,
                                   item_slot, first)
        work += scored + _STEP_PAIRS
        if found is None:
            return _groups(slot_item, first, k), work, "done"
        x, y = found
        moved = w[slot_item[x]] - w[slot_item[y]]
        sums[slot_group[x]] -= moved
        sums[slot_group[y]] += moved
        slot_item[x], slot_item[y] = slot_item[y], slot_item[x]
        item_slot[slot_item[x]], item_slot[slot_item[y]] = x, y


def _best_swap(
    sums: np.ndarray, w: np.ndarray, sorted_w: np.ndarray, by_weight: np.ndarray,
    slot_item: np.ndarray, slot_group: np.ndarray, slot_pos: np.ndarray, item_slot: np.ndarray,
    first: list[int],
) -> tuple[tuple[int, int] | None, int]:
    """The swap (slot x, slot y) :func:`refine_by_swaps` takes next, or None; and the pairs
    scored."""
    by_sum = np.argsort(sums, kind="stable").tolist()
    ranked = [sums[r] for r in by_sum]  # ascending (numpy scalars or exact ints)
    top, bottom = ranked[-1], ranked[0]
    current = (top, top - bottom)
    scored = 0
    best: tuple[Any, tuple[int, int, int, int], int, int] | None = None
    for c, at_top in ((by_sum[-1], True), (by_sum[0], False)):
        unique = ranked[-2] != top if at_top else ranked[1] != bottom
        if not unique or first[c] == first[c + 1]:
            continue
        mine = slot_item[first[c] : first[c + 1]]
        # The widest window over every partner group; each pair is then held to its own group.
        reach = top - bottom
        xs, ys = _pairs(w[mine], sorted_w, reach, at_top)
        scored += len(xs) + len(mine)
        if not len(xs):
            continue
        y_slot = item_slot[by_weight[ys]]
        grp = slot_group[y_slot]
        d = w[mine[xs]] - sorted_w[ys]
        room = (top - sums[grp]) if at_top else (sums[grp] - bottom)
        ok = (grp != c) & ((d < room) if at_top else (-d < room))
        if not ok.any():
            continue
        xs, y_slot, grp, d = xs[ok], y_slot[ok], grp[ok], d[ok]
        # The max and min of the group sums other than c and the partner's group b.
        others = by_sum[:-1] if at_top else by_sum[1:]
        hi1, hi2 = others[-1], others[-2] if len(others) > 1 else -1
        lo1, lo2 = others[0], others[1] if len(others) > 1 else -1
        rest_hi = _either(grp == hi1, sums[hi2] if hi2 >= 0 else 0, sums[hi1], sums.dtype)
        rest_lo = _either(grp == lo1, sums[lo2] if lo2 >= 0 else sums.sum(), sums[lo1], sums.dtype)
        new_c, new_b = sums[c] - d, sums[grp] + d
        hi = np.maximum(np.maximum(new_c, new_b), rest_hi)
        lo = np.minimum(np.minimum(new_c, new_b), rest_lo)
        key_hi = hi.min()
        at = np.flatnonzero(hi == key_hi)
        spread = (hi - lo)[at]
        key = (key_hi, spread.min())
        if key >= current or (best is not None and key > best[0]):
            continue
        tied = at[spread == spread.min()]
        b, r, pb = grp[tied], xs[tied], slot_pos[y_slot[tied]]
        low = b < c  # the lower group comes first in the tie order
        j = np.lexsort((np.where(low, r, pb), np.where(low, pb, r), np.maximum(b, c),
                        np.minimum(b, c)))[0]
        order = (min(c, int(b[j])), max(c, int(b[j])), *((int(pb[j]), int(r[j])) if low[j]
                                                         else (int(r[j]), int(pb[j]))))
        if best is None or (key, order) < best[:2]:
            best = (key, order, first[c] + int(r[j]), int(y_slot[tied[j]]))
    return (None if best is None else (best[2], best[3])), scored


def _either(mask: np.ndarray, yes: Any, no: Any, dtype: Any) -> np.ndarray:
    """``np.where`` for two scalars that keeps ``dtype`` (object: exact Python ints)."""
    out = np.full(len(mask), no, dtype=dtype)
    out[mask] = yes
    return out


def _pairs(mine_w: np.ndarray, sorted_w: np.ndarray, reach: Any, at_top: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    """(index into mine, position in the weight order) of every item whose weight is within
    ``(w - reach, w)`` (``at_top``) or ``(w, w + reach)`` of one of mine."""
    if at_top:
        lo = np.searchsorted(sorted_w, mine_w - reach, side="right")
        hi = np.searchsorted(sorted_w, mine_w, side="left")
    else:
        lo = np.searchsorted(sorted_w, mine_w, side="right")
        hi = np.searchsorted(sorted_w, mine_w + reach, side="left")
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    xs = np.repeat(np.arange(len(mine_w)), counts)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return xs, (np.arange(total) + starts).astype(np.int64)


def _groups(slot_item: np.ndarray, first: list[int], k: int) -> list[list[int]]:
    return [slot_item[first[r] : first[r + 1]].tolist() for r in range(k)]
