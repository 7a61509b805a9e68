"""Local search's state and steps: the item arrays by bin, the work counter, and one batched or
single improving step (see local_search's docstring for why a step is cheap and why batched).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import Bins, apply_move_or_swap

#: Upper limit on (heavy item, partner) pairs scored at once in a full scan: ~1 ms of numpy.
_MAX_PAIRS = 60_000


_NO = np.iinfo(np.int64).max  # "not allowed" in score matrices


#: Above this many (heavy item, partner) pairs in range, the nearest-partner search is used
#: instead of scoring every pair (measured: 3000 beats 10000 and 60000 on the bundled data).
_RANGE_PAIRS = 3000


#: Partners are first looked for in this many of the lightest bins; the rest are searched only
#: when those offer no improvement.
_LIGHT_BINS = 16


#: Heavy bins improved together in one batched step (batching needs k >= 3 * this; measured:
#: 16 heavy against 16 light bins beat 8, 24, 32 and 48 of each).
_BATCH = 16


#: Work units (see _State.work): a fixed charge per step for the numpy calls it makes, and
#: one per item for building the state. WORK_SECONDS converts work to CPU seconds on the
#: reference machine (2 cores, ortools 9.15, numpy 2.4); measured with
#: ``python benchmarks/bench_scale.py --calibrate``.
_STEP_WORK = 25_000


#: Charged per item on every step: the passes over all items a step makes beyond the ones
#: counted where they happen (gathers, masks, list conversions). Without it a step at n=2048
#: cost ~740 us against ~500 us charged, and the wall clock, not the budget, ended the search.
_STEP_WORK_PER_ITEM = 22


#: Building the state, grouping items by type and returning sorted lists: ~0.7 us per item
#: (measured at n=1024-2048; at 40 a search that converged at once cost 2x its charge).
_SETUP_WORK_PER_ITEM = 90


#: Per item of the heaviest bins in a batched step (see _batched_step).
_HEAVY_ITEM_WORK = 29


#: Measured inside ``partition`` on bench_cpsat's online batches (n=64..2048, tokens and
#: attention cost; ``benchmarks/bench_budget.py``, idle): with the per-step charges above, a
#: search's real time over its work at 8 ns was 0.66-0.82 summed over the calls, 1.1-1.5 at
#: the 90th percentile of single calls (1.25x slower inside partition than alone on the same
#: start: caches). 6.5 ns fitted more steps but let the safety net cut 5 of 70 calls at
#: n=1024-2048 on real batches, so the charge stays near the p90.
WORK_SECONDS = 8e-9


Step = tuple[int, int, int, int]  # (new max of the two bins, item a, target bin, item b or -1)


#: Scored swaps, one per entry of five arrays: (item a, a's bin, item b, b's bin, score).
Found = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class _State:
    """Per-item values and per-bin totals, kept in step as items move.

    Items n..n+k-1 are the zero-cost "nothing" items, one per bin, that make a move a swap.
    """

    n: int  # real items
    cst: np.ndarray  # per item: cost (the load being balanced)
    tok: np.ndarray  # per item: tokens (what the cap limits)
    cnt_item: np.ndarray  # per item: samples it stands for
    where: np.ndarray  # per item: its bin
    size: np.ndarray  # per bin: items
    load: np.ndarray  # per bin: cost
    tload: np.ndarray  # per bin: tokens
    cnt: np.ndarray  # per bin: samples
    cap_v: int  # the cap, or "no limit"
    cnt_v: int  # the per-bin sample count, or "no limit"
    span: int  # > every cost: keys are (bin * span + cost) * len(cst) + item
    by_tokens: bool  # cost == tokens for every item
    keyable: bool  # the keys fit in int64 (else only pairs in range and full scans are used)
    keys: np.ndarray | None = None  # sorted keys, rebuilt lazily after a change
    #: Work done so far, in elements processed by the vectorised operations plus a fixed
    #: charge per step: a deterministic stand-in for time (see WORK_SECONDS).
    work: int = 0

    @property
    def totals(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """(per-bin total, per-item value) pairs, as apply_move_or_swap keeps them."""
        return (self.load, self.cst), (self.tload, self.tok), (self.cnt, self.cnt_item)

    def sorted_keys(self) -> np.ndarray:
        if self.keys is None:
            m = len(self.cst)
            self.keys = np.sort((self.where * self.span + self.cst) * m + np.arange(m))
            self.work += 8 * m  # a sort of m keys
        return self.keys

    def candidates(self, heavy: np.ndarray, bins: np.ndarray) -> Found:
        """For every heavy item a and bin j in ``bins`` (none of them a's own), the two items
        of j nearest the ideal partner cost. Returns (a, a's bin, b, j, score) of the
        improving, allowed ones (none when the keys would overflow: the caller falls back)."""
        if not self.keyable:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty, empty
        m = len(self.cst)
        keys = self.sorted_keys()
        h_of = self.where[heavy]
        top = self.load[h_of]  # (H,)
        c_heavy = self.cst[heavy]
        load_j = self.load[bins][:, None]  # (J, 1)
        want = (top - load_j) // 2  # (J, H): the cost difference that evens the two out
        if self.by_tokens:  # and no more than j's room under the cap
            want = np.minimum(want, np.maximum(self.cap_v - self.tload[bins], 0)[:, None])
        # Clipped at 0 so the search stays inside bin j's block of keys.
        ideal = (bins * self.span)[:, None] + np.maximum(c_heavy - want, 0)
        pos = np.searchsorted(keys, ideal * m)
        pos = np.stack((pos - 1, pos))  # (2, J, H): the partners either side of the ideal
        np.clip(pos, 0, m - 1, out=pos)
        b = keys[pos] % m
        self.work += 4 * b.size
        in_bin = self.where[b] == bins[:, None]  # the neighbour may sit in the next bin
        _, _, c = np.nonzero(in_bin)
        return self.score_pairs(heavy[c], b[in_bin])

    def pairs_in_range(self, heavy: np.ndarray, bins: np.ndarray) -> Found | None:
        """Every improving, allowed swap of a heavy item with an item (or the "nothing" item)
        of one of ``bins``, as :meth:`candidates` returns them; None when there would be more
        than _RANGE_PAIRS pairs to look at (the nearest-partner search is cheaper then).

        Why it is cheap: an improving swap needs 0 < cost(a) - cost(b) < the largest gap, so
        two binary searches per partner over the sorted heavy costs give every such pair, and
        when loads are nearly even those are few."""
        self.work += len(self.where) + len(heavy)
        is_bin = np.zeros(len(self.load), dtype=bool)
        is_bin[bins] = True
        partners = np.flatnonzero(is_bin[self.where])
        by_cost = heavy[np.argsort(self.cst[heavy], kind="stable")]
        c_heavy = self.cst[by_cost]
        c_part = self.cst[partners]
        widest = int(self.load[self.where[heavy]].max() - self.load[bins].min())
        lo = np.searchsorted(c_heavy, c_part, side="right")
        hi = np.searchsorted(c_heavy, c_part + widest, side="left")
        per = np.maximum(hi - lo, 0)
        total = int(per.sum())
        if total > _RANGE_PAIRS:
            return None
        b = np.repeat(partners, per)
        # Index of each pair's heavy item: lo of its partner plus its rank within the run.
        a = by_cost[np.repeat(lo - np.cumsum(per) + per, per) + np.arange(total)]
        return self.score_pairs(a, b)

    def score_pairs(self, a: np.ndarray, b: np.ndarray) -> Found:
        """Of the swaps of a[i] with b[i] (b in another bin, or its "nothing" item), the ones
        that lower a's bin without raising b's to it, within cap, sample count and non-empty,
        with their score: the larger of the two new loads."""
        self.work += 4 * len(a)
        h, j = self.where[a], self.where[b]
        top = self.load[h]
        delta = self.cst[a] - self.cst[b]
        new_j = self.load[j] + delta
        ok = (delta > 0) & (new_j < top) & (j != h) & self.allowed(a, h, b, j)
        score = np.maximum(new_j, top - delta)
        return a[ok], h[ok], b[ok], j[ok], score[ok]

    def allowed(self, a: np.ndarray, h: np.ndarray, b: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Cap, sample-count and non-empty tests for swapping a (in h) with b (in j)."""
        dt = self.tok[a] - self.tok[b]
        # A bin may end over the cap only if it was over it before and loses tokens.
        ok = (self.tload[j] + dt <= np.maximum(self.cap_v, self.tload[j])) & (
            self.tload[h] - dt <= np.maximum(self.cap_v, self.tload[h])
        )
        if self.cnt_v != _NO:
            dc = self.cnt_item[a] - self.cnt_item[b]
            ok &= (self.cnt[j] + dc <= self.cnt_v) & (self.cnt[h] - dc <= self.cnt_v)
        return ok & ((b < self.n) | (self.size[h] > 1))  # a move must leave h an item


def _fits(
    bins: Bins, tokens: list[int], count: list[int], cap: int | None, max_count: int | None
) -> bool:
    """No empty bin, none over the cap or the sample count."""
    return all(
        b
        and (cap is None or sum(tokens[i] for i in b) <= cap)
        and (max_count is None or sum(count[i] for i in b) <= max_count)
        for b in bins
    )


def _make_state(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    members: Bins,
    cap: int | None,
    max_count: int | None,
) -> _State:
    n, k = len(tokens), len(members)
    zeros = [0] * k
    cst = np.asarray(cost + zeros, dtype=np.int64)
    tok = np.asarray(tokens + zeros, dtype=np.int64)
    cnt_item = np.asarray(count + zeros, dtype=np.int64)
    where = np.empty(n + k, dtype=np.int64)
    for b, items in enumerate(members):
        where[items] = b
    where[n:] = np.arange(k)
    size = np.asarray([len(m) for m in members], dtype=np.int64)

    def per_bin(values: np.ndarray) -> np.ndarray:
        if int(values.sum()) < 2**53:  # bincount adds in float64: exact below 2**53
            return np.bincount(where, weights=values, minlength=k).astype(np.int64)
        totals = np.zeros(k, dtype=np.int64)
        np.add.at(totals, where, values)
        return totals

    span = int(cst.max()) + 1
    return _State(
        n, cst, tok, cnt_item, where, size, per_bin(cst), per_bin(tok), per_bin(cnt_item),
        _NO if cap is None else cap, _NO if max_count is None else max_count, span,
        bool(np.array_equal(cst, tok)), keyable=(k + 1) * span * (n + k) < 2**62,
    )


def _apply(s: _State, members: Bins, a: int, h: int, j: int, b: int) -> None:
    """Swap a (in h) with b (in j); b may be j's "nothing" item, which makes it a move."""
    move = b >= s.n
    apply_move_or_swap(members, s.where, s.totals, a, h, j, -1 if move else b)
    if move:  # j's "nothing" item stays in j
        s.size[h] -= 1
        s.size[j] += 1
    s.keys = None


def _batched_step(s: _State, members: Bins) -> bool:
    """Improve the heaviest bins against the lightest ones at once; False when the heaviest
    bin gained nothing (the caller then searches every bin for it)."""
    k = len(s.load)
    by_load = np.argsort(s.load, kind="stable")
    heavy_bins = by_load[: -_BATCH - 1 : -1]  # heaviest first
    light_bins = by_load[:_LIGHT_BINS]
    rank = np.empty(k, dtype=np.int64)
    rank[by_load] = np.arange(k)[::-1]  # 0 for the heaviest bin
    heavy = np.flatnonzero(rank[s.where[: s.n]] < _BATCH)
    start = s.work
    s.work += 4 * s.n + 2 * k  # four passes over the items above
    found = s.pairs_in_range(heavy, light_bins)
    a, h, b, j, score = found if found is not None else s.candidates(heavy, light_bins)
    # Fitted on bench_cpsat's online batches (803 batched steps, CPU time): a batched step
    # costs ~2.5x its counted element work plus ~0.23 us per heavy item, beyond the fixed
    # charge per step; without this, searches with many items per bin ran 1.5-1.9x their
    # budget and the safety net cut them.
    s.work += (s.work - start) * 3 // 2 + _HEAVY_ITEM_WORK * len(heavy)
    if not len(a):
        return False
    # Heavier bins choose first, each its best change; a light bin takes one change. Only
    # the best candidate per (heavy bin, light bin) can be chosen, so the loop sees few.
    order = np.lexsort((score, rank[h] * k + j))
    pair = (rank[h] * k + j)[order]
    order = order[np.flatnonzero(np.diff(pair, prepend=-1))]
    order = order[np.argsort(rank[h[order]], kind="stable")]
    picked_heavy: set[int] = set()
    used_light: set[int] = set()
    for hi, ji, ai, bi in zip(h[order].tolist(), j[order].tolist(), a[order].tolist(),
                              b[order].tolist(), strict=True):
        if hi in picked_heavy or ji in used_light:
            continue
        picked_heavy.add(hi)
        used_light.add(ji)
        _apply(s, members, ai, hi, ji, bi)
    return int(heavy_bins[0]) in picked_heavy


def _single_step(
    s: _State, heavy: np.ndarray, h: int, lightest_last: bool
) -> tuple[Step | None, bool]:
    """Best change for bin h, searching groups of ever heavier bins (most improving partners
    sit in the lightest) and stopping at the first group that offers one. Also says whether
    "no change" is certain: every group had all its pairs in range scored.

    ``lightest_last``: a batched step has just found nothing for h among the lightest bins,
    so they are tried last (items that step moved into them may still help)."""
    by_load = np.argsort(s.load, kind="stable")
    by_load = by_load[by_load != h]
    edges = [0, _LIGHT_BINS, _LIGHT_BINS + 64, len(by_load)]
    groups = [by_load[lo:hi] for lo, hi in zip(edges, edges[1:], strict=False) if lo < len(by_load)]
    if lightest_last:
        groups = groups[1:] + groups[:1]
    certain = True
    for bins in groups:
        found = s.pairs_in_range(heavy, bins)
        certain &= found is not None
        best = _best_of(found if found is not None else s.candidates(heavy, bins))
        if best is not None:
            return best, True
    return None, certain


def _best_of(found: Found) -> Step | None:
    """The lowest-scoring of the scored swaps, or None when there are none."""
    a, _, b, j, score = found
    if not len(a):
        return None
    pick = int(np.argmin(score))
    return int(score[pick]), int(a[pick]), int(j[pick]), int(b[pick])


def _scan_step(
    s: _State, heavy: np.ndarray, h: int, top: int, step: int, type_id: np.ndarray
) -> Step | None:
    """Moves and swaps against every other item, in windows of heavy types so a step stays
    cheap: the fallback when the nearest-partner search could have missed a change."""
    k, n = len(s.load), s.n
    if len(heavy) > 16:  # big bins: one partner per (type, bin) keeps the matrix small
        _, keep = np.unique(type_id * k + s.where[:n], return_index=True)
        partners = np.sort(keep)
    else:
        partners = np.arange(n)
    partners = partners[s.where[partners] != h]
    partners = np.concatenate((partners, np.arange(n, n + k)))  # the "nothing" items: moves
    width = max(1, _MAX_PAIRS // len(partners))
    # Start where the last step left off; the first window with an improving change ends it.
    start = (step * width) % len(heavy)
    rolled = np.roll(heavy, -start)
    for offset in range(0, len(heavy), width):
        window = rolled[offset : offset + width]
        # The cheap test (the change must lower the max) runs on the whole matrix, the cap and
        # count tests only on its survivors.
        delta = s.cst[window][:, None] - s.cst[partners][None, :]
        s.work += 4 * delta.size
        ra, rc = np.nonzero((delta > 0) & (s.load[s.where[partners]][None, :] + delta < top))
        best = _best_of(s.score_pairs(window[ra], partners[rc]))
        if best is not None:
            return best
    return None
