"""The capped balancer: exactly k non-empty micro-batches under the cap, as even as it can.

Balancing heuristics ignore the cap; packing heuristics ignore balance and leave bins empty. This
one tries several constructions (LPT by cost and by tokens, first-fit and best-fit decreasing into
k bins), refills any empty bin from the fullest multi-sequence bin (always possible when n >= k,
and never breaks the cap, since a lone sequence fits), and keeps the valid plan with the lowest
maximum load. When no construction respects the cap it returns the least-violating one; the
validator says why, and CP-SAT may still find a plan.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from seqpart.heuristics._common import Bins, apply_move_or_swap, argsort_desc, order_desc, prepare
from seqpart.heuristics.first_fit import _first_fit_lists
from seqpart.heuristics.lpt import _lpt_lists

__all__ = ["capped_balance"]


def capped_balance(
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    costs: Any | None = None,
    counts: Sequence[int] | None = None,
    max_count: int | None = None,
) -> Bins:
    """Exactly ``k`` non-empty bins, under ``cap`` whenever one of its constructions finds it."""
    tokens, cost, count, k, cap = prepare(lengths, k, cap, costs, counts)
    return _capped_balance_lists(tokens, cost, count, k, cap, max_count)


#: Up to this many bins best fit keeps residuals in one flat sorted list; above, in chunks
#: of _CHUNK_LOAD to 2 * _CHUNK_LOAD keys.
_FLAT_KEYS_UP_TO = 4096
_CHUNK_LOAD = 256


def _best_fit_lists(
    tokens: Sequence[int],
    count: Sequence[int],
    k: int | None,
    cap: int | None,
    max_count: int | None = None,
) -> Bins:
    """Best-fit decreasing: each sequence, longest first, into the fullest bin it fits.

    ``k=None`` opens bins as needed (the count search's ceiling); with ``k`` the k bins exist
    from the start, empty ones being the least full, and a sequence that fits nowhere goes to
    the bin with the most room (the validator flags it). O(n log n): runs of equal length are
    placed together (a bin with room r takes r // t copies of length t at once, exactly as
    one-by-one best fit would), over a sorted index of bin residuals.
    """
    if max_count is not None:
        return _best_fit_counted(list(tokens), list(count), k, cap, max_count)
    return _best_fit_with_room(np.asarray(tokens, dtype=np.int64), k, cap)[0]


def _best_fit_with_room(arr: np.ndarray, k: int | None, cap: int | None) -> tuple[Bins, list[int]]:
    """:func:`_best_fit_lists` without a sample limit, also returning each bin's room left
    (cap minus its tokens; negative for a bin a sequence that fitted nowhere went to)."""
    n = len(arr)
    if n == 0:
        return [[] for _ in range(k or 0)], [cap or 0] * (k or 0)
    limit = cap if cap is not None else int(arr.sum())
    order = argsort_desc(arr)  # longest first, ties by index
    ordered = arr[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.concatenate((starts[1:], [n]))
    smallest = int(ordered[-1])
    ids = order.tolist()
    span = n + (k or 0) + 1  # keys are residual * span + bin: residual order, ties by bin
    bins: Bins = [[] for _ in range(k or 0)]
    room: list[int] = [limit] * (k or 0)
    # The open bins' keys, sorted: few bins, one list (``keys``); many, chunks of at most
    # 2 * load (``chunks``, so an insert or pop moves O(load) pointers, not O(k)). The
    # operations are written out in the loops below: they run once per (run of equal lengths,
    # bin) pair, ~10^5 times at n=10^6, and method calls were half their cost.
    few = (k or -(-int(arr.sum()) // limit)) <= _FLAT_KEYS_UP_TO
    keys = [limit * span + b for b in range(k or 0)]
    load = _CHUNK_LOAD
    chunks = [] if few else [keys[i : i + load] for i in range(0, len(keys), load)]
    maxes = [c[-1] for c in chunks]
    overflow: list[int] = []
    bisect_left, insort = bisect.bisect_left, bisect.insort
    for t, lo, hi in zip(ordered[starts].tolist(), starts.tolist(), ends.tolist(), strict=True):
        pos = lo
        need = t * span
        if few and hi - lo == 1:  # a length seen once (most, in a spread-out batch)
            at = bisect_left(keys, need)
            if at < len(keys):
                key = keys.pop(at)
                b, r = key % span, key // span - t
            elif k is None and t <= limit:
                b, r = len(bins), limit - t
                bins.append([])
                room.append(limit)
            else:
                overflow.append(ids[lo])
                continue
            bins[b].append(ids[lo])
            room[b] = r
            if r >= smallest:
                insort(keys, r * span + b)
            continue
        while few and pos < hi:  # one sorted list: the same steps, fewer of them
            at = bisect_left(keys, need)
            if at < len(keys):
                b = keys.pop(at) % span
            elif k is None and t <= limit:
                b = len(bins)
                bins.append([])
                room.append(limit)
            else:
                overflow.extend(ids[pos:hi])
                break
            r = room[b]
            take = r // t
            if take > hi - pos:
                take = hi - pos
            bins[b].extend(ids[pos : pos + take])
            pos += take
            r -= take * t
            room[b] = r
            if r >= smallest:
                insort(keys, r * span + b)
        while pos < hi:
            c = bisect_left(maxes, need)
            if c < len(maxes):  # pop the smallest key >= need: the fullest bin with room
                chunk = chunks[c]
                at = bisect_left(chunk, need)
                b = chunk.pop(at) % span
                if not chunk:
                    del chunks[c], maxes[c]
                elif at == len(chunk):
                    maxes[c] = chunk[-1]
            elif k is None and t <= limit:
                b = len(bins)
                bins.append([])
                room.append(limit)
            else:  # fits nowhere: placed at the end, where there is most room
                overflow.extend(ids[pos:hi])
                break
            r = room[b]
            take = r // t
            if take > hi - pos:
                take = hi - pos
            bins[b].extend(ids[pos : pos + take])
            pos += take
            r -= take * t
            room[b] = r
            if r >= smallest:  # still open: insert its new key
                key = r * span + b
                if not maxes:
                    chunks.append([key])
                    maxes.append(key)
                    continue
                c = bisect_left(maxes, key)
                if c == len(maxes):
                    c -= 1
                    maxes[c] = key
                chunk = chunks[c]
                insort(chunk, key)
                if len(chunk) > 2 * load:
                    half = chunk[load:]
                    del chunk[load:]
                    maxes[c] = chunk[-1]
                    chunks.insert(c + 1, half)
                    maxes.insert(c + 1, half[-1])
    if overflow and k is None:  # sequences over the cap: alone in bins of their own
        bins.extend([i] for i in overflow)
        room.extend(limit - int(arr[i]) for i in overflow)
    elif overflow:
        heap = [(-r, b) for b, r in enumerate(room)]
        heapq.heapify(heap)
        for i in overflow:
            r, b = heapq.heappop(heap)
            bins[b].append(i)
            room[b] -= int(arr[i])
            heapq.heappush(heap, (-room[b], b))
    return bins, room


def _best_fit_counted(
    tokens: list[int], count: list[int], k: int | None, cap: int | None, max_count: int
) -> Bins:
    """Best-fit decreasing with a per-bin sample limit, one sequence at a time (k bins).

    A bin that can take no more samples leaves the index of open bins: with one sample per
    sequence a step is then one binary search (scanning past full bins cost O(k) a step,
    0.8 s at n=20,000 and k=2,000). A sequence that fits nowhere goes to the bin with the
    fewest tokens, full or not (the validator flags it)."""
    k = k if k is not None else len(tokens)
    bins: Bins = [[] for _ in range(k)]
    tok = [0] * k
    cnt = [0] * k
    by_fill = list(range(k))  # open bins by key tokens * k + bin, ascending
    full: list[int] = []  # bins no sequence fits by count any more, the same way
    fewest = min(count, default=1)
    limit = cap if cap is not None else sum(tokens)
    bisect_right, insort = bisect.bisect_right, bisect.insort
    order = order_desc(tokens)
    if fewest == max(count, default=1) == 1:
        return _best_fit_counted_runs(tokens, order, bins, tok, cnt, by_fill, limit, max_count)
    for i in order:
        t, c = tokens[i], count[i]
        pos = bisect_right(by_fill, (limit - t) * k + k - 1) - 1  # the fullest that fits
        while pos >= 0 and cnt[by_fill[pos] % k] + c > max_count:
            pos -= 1
        if pos >= 0:
            b = by_fill.pop(pos) % k
        elif full and (not by_fill or full[0] < by_fill[0]):  # nothing fits: fewest tokens
            b = full.pop(0) % k
        else:
            b = by_fill.pop(0) % k
        bins[b].append(i)
        tok[b] += t
        cnt[b] += c
        insort(full if cnt[b] + fewest > max_count else by_fill, tok[b] * k + b)
    return bins


def _best_fit_counted_runs(
    tokens: list[int],
    order: list[int],
    bins: Bins,
    tok: list[int],
    cnt: list[int],
    by_fill: list[int],
    limit: int,
    max_count: int,
) -> Bins:
    """:func:`_best_fit_counted` with one sample per sequence, a run of equal lengths at a
    time: the bin a copy goes to stays the fullest that fits (it only got fuller), so it takes
    copies until its room, its count or the run ends, exactly as one at a time."""
    k = len(bins)
    full: list[int] = []
    bisect_right, insort = bisect.bisect_right, bisect.insort
    n = len(order)
    lo = 0
    while lo < n:
        t = tokens[order[lo]]
        hi = lo + 1
        while hi < n and tokens[order[hi]] == t:
            hi += 1
        pos = lo
        while pos < hi:
            at = bisect_right(by_fill, (limit - t) * k + k - 1) - 1  # the fullest that fits
            if at >= 0:
                b = by_fill.pop(at) % k
                take = min((limit - tok[b]) // t, max_count - cnt[b], hi - pos)
            else:  # nothing fits: the bin with the fewest tokens, full or not
                fewest = full if full and (not by_fill or full[0] < by_fill[0]) else by_fill
                b = fewest.pop(0) % k
                take = 1
            bins[b].extend(order[pos : pos + take])
            pos += take
            tok[b] += take * t
            cnt[b] += take
            insort(full if cnt[b] >= max_count else by_fill, tok[b] * k + b)
        lo = hi
    return bins


def _fill_empty(
    bins: Bins,
    cost: list[int],
    count: list[int],
    max_count: int | None,
    loads: list[int] | None = None,
) -> Bins:
    """Move the lightest sequence of the heaviest multi-sequence bin into each empty bin.

    A heap of the multi-sequence bins by load keeps it O(k log k) plus the donors' sizes.
    ``loads``: the bins' cost loads when the caller already has them."""
    empty = [b for b, items in enumerate(bins) if not items]
    if not empty:
        return bins
    bins = list(bins)  # shallow: only the bins that change are copied below
    if loads is None:
        loads = _per_bin(bins, cost)
    heap = [(-loads[b], b) for b, items in enumerate(bins) if len(items) > 1]
    heapq.heapify(heap)
    for e in empty:
        if not heap:
            break
        neg_load, d = heap[0]
        i = min(bins[d], key=lambda i: (cost[i], i))
        if max_count is not None and count[i] > max_count:
            continue
        heapq.heappop(heap)
        bins[d] = [x for x in bins[d] if x != i]
        bins[e] = [i]
        if len(bins[d]) > 1:
            heapq.heappush(heap, (neg_load + cost[i], d))
    return bins


def _score(
    bins: Bins, tokens: list[int], cost: list[int], count: list[int], cap: int | None,
    max_count: int | None,
) -> tuple[int, int, int]:
    """(tokens over the cap + samples over max_count, empty bins, max cost load): lower is better."""
    tok = _per_bin(bins, tokens)
    over = sum(max(0, t - cap) for t in tok) if cap is not None else 0
    if max_count is not None:
        over += sum(max(0, c - max_count) for c in _per_bin(bins, count))
    empty = sum(1 for items in bins if not items)
    return over, empty, max(tok if cost is tokens else _per_bin(bins, cost))


def _per_bin(bins: Bins, values: list[int]) -> list[int]:
    """Per-bin sums; int64 cumulative sums when they fit (the heuristics' inputs do)."""
    sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
    flat = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64, count=int(sizes.sum()))
    prefix = np.concatenate(([0], np.cumsum(np.asarray(values, dtype=np.int64)[flat])))
    ends = np.cumsum(sizes)
    return (prefix[ends] - prefix[ends - sizes]).tolist()


def _capped_balance_lists(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    k: int,
    cap: int | None,
    max_count: int | None,
    deadline: float | None = None,
    lpt_bins: Bins | None = None,
    repair_steps: int = 10_000,
    report: dict[str, int] | None = None,
) -> Bins:
    """See :func:`capped_balance`; inputs already validated.

    Constructions run in order, balance first, and the first valid one wins; the later ones
    only pack tighter. Once ``deadline`` (a ``time.perf_counter()`` value) has passed, no new
    construction starts unless none so far is valid. When none is, the least-violating one goes
    through :func:`_repair_lists`.
    """
    orders: dict[int, list[int]] = {}  # sorted once, when a construction first needs it

    def order(values: list[int]) -> list[int]:
        if id(values) not in orders:
            orders[id(values)] = order_desc(values)
        return orders[id(values)]

    def lpt_by_tokens() -> Bins | None:
        # The same as LPT by cost when both orders agree (costs that are the tokens).
        if cost is tokens or order(tokens) == order(cost):
            return None
        return _lpt_lists(tokens, cost, count, k, cap, max_count, order(tokens))

    # ``lpt_bins``: the caller's LPT by cost, the first construction, when it has it already.
    constructions: list[Callable[[], Bins | None]] = [
        (lambda: lpt_bins) if lpt_bins is not None
        else (lambda: _lpt_lists(tokens, cost, count, k, cap, max_count, order(cost)))
    ]
    if cap is not None:
        constructions.append(lpt_by_tokens)
        # Best fit first: O(n log n) and at least as tight as first fit, which scans every
        # bin per sequence and only runs when best fit left the plan invalid.
        constructions.append(lambda: _best_fit_lists(tokens, count, k, cap, max_count))
        constructions.append(
            lambda: _first_fit_lists(tokens, count, k, cap, max_count, order(tokens))
        )
    best: Bins | None = None
    best_score: tuple[int, int, int] | None = None
    for build in constructions:
        built = build()
        if built is None:
            continue
        bins = _fill_empty(built, cost, count, max_count)
        score = _score(bins, tokens, cost, count, cap, max_count)
        if best_score is None or score < best_score:
            best, best_score = bins, score
        if best_score[0] == 0 and best_score[1] == 0:
            break
    assert best is not None and best_score is not None
    if best_score[0] > 0 and cap is not None:
        best = _repair_lists(tokens, count, best, cap, max_count, deadline, repair_steps, report)
    return [sorted(b) for b in best]


#: Up to this many items, repair scores swaps with every item; above, only with the items of
#: the _ROOMY_BINS bins with the most room (memory stays O(n), not O(64 n)).
_ALL_PARTNERS_UP_TO = 20_000
_ROOMY_BINS = 256


def _repair_step_seconds(n: int) -> float:
    """Estimated CPU seconds of one repair step over n items (64 heavy items against every
    partner, or the roomy bins' items above _ALL_PARTNERS_UP_TO): for a step budget."""
    return 5e-5 + 2e-7 * min(n, _ALL_PARTNERS_UP_TO)


def _repair_lists(
    tokens: list[int],
    count: list[int],
    bins: Bins,
    cap: int,
    max_count: int | None,
    deadline: float | None = None,
    max_steps: int = 10_000,
    report: dict[str, int] | None = None,
) -> Bins:
    """Moves and swaps out of the most over-cap bin that lower the total tokens over the cap.

    Tight instances (few long sequences per micro-batch) defeat every greedy construction by a
    few hundred tokens; this closes many of them. Bins stay non-empty and within ``max_count``.
    """
    k = len(bins)
    n = len(tokens)
    tok = np.asarray(tokens, dtype=np.int64)
    cnt_item = np.asarray(count, dtype=np.int64)
    members = [list(b) for b in bins]
    where = np.empty(n, dtype=np.int64)
    for b, items in enumerate(members):
        where[items] = b
    tload = np.bincount(where, weights=tok, minlength=k).astype(np.int64)
    cnt = np.bincount(where, weights=cnt_item, minlength=k).astype(np.int64)
    cnt_v = np.iinfo(np.int64).max if max_count is None else max_count

    def excess(t: np.ndarray) -> np.ndarray:
        return np.maximum(t - cap, 0)

    steps = 0
    for steps in range(max_steps):  # noqa: B007 (reported below)
        if deadline is not None and time.perf_counter() > deadline:
            if report is not None:
                report["deadline"] = 1
            break
        o = int(np.argmax(tload))
        if tload[o] <= cap:
            break
        heavy = np.asarray(members[o], dtype=np.int64)
        heavy = heavy[np.argsort(-tok[heavy], kind="stable")[:64]]
        base_o = excess(tload[o])
        best = (0, -1, -1, -1)  # (change in total excess, a, target bin, b or -1)
        if len(members[o]) > 1:  # moves
            new_j = tload[None, :] + tok[heavy][:, None]
            change = excess(tload[o] - tok[heavy])[:, None] - base_o + excess(new_j) - excess(tload)
            ok = cnt[None, :] + cnt_item[heavy][:, None] <= cnt_v
            ok[:, o] = False
            change = np.where(ok, change, np.iinfo(np.int64).max)
            flat = int(np.argmin(change))
            if change.flat[flat] < best[0]:
                a, j = divmod(flat, k)
                best = (int(change.flat[flat]), int(heavy[a]), j, -1)
        # Swaps: a in o for a shorter b elsewhere. In a large batch only the items of the
        # bins with most room are partners, so the (heavy x partner) matrices stay small.
        partners = np.arange(n)
        if n > _ALL_PARTNERS_UP_TO:
            roomy = np.argsort(tload, kind="stable")[:_ROOMY_BINS]
            partners = np.flatnonzero(np.isin(where, roomy))
        d = tok[heavy][:, None] - tok[partners][None, :]
        jb = where[partners][None, :]
        change = (
            excess(tload[o] - d) - base_o + excess(tload[jb] + d) - excess(tload[jb])
        )
        dc = cnt_item[heavy][:, None] - cnt_item[partners][None, :]
        ok = (d > 0) & (jb != o) & (cnt[jb] + dc <= cnt_v) & (cnt[o] - dc <= cnt_v)
        change = np.where(ok, change, np.iinfo(np.int64).max)
        flat = int(np.argmin(change))
        if change.flat[flat] < best[0]:
            a, b = divmod(flat, len(partners))
            b = int(partners[b])
            best = (int(change.flat[flat]), int(heavy[a]), int(where[b]), b)
        _, a, j, b = best
        if a < 0:
            break
        apply_move_or_swap(members, where, ((tload, tok), (cnt, cnt_item)), a, o, j, b)
    if report is not None:
        report["repair_steps"] = steps
    return members
