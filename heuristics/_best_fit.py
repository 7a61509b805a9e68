"""Best-fit decreasing, the packing the capped balancer and the solver fall back on: each sequence,
longest first, into the fullest bin it fits, runs of equal length placed together.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

import numpy as np

from .inputs import Bins, argsort_desc, order_desc

#: Up to this many bins best fit keeps residuals in one flat sorted list; above, in chunks
#: of _CHUNK_LOAD to 2 * _CHUNK_LOAD keys.
_FLAT_KEYS_UP_TO = 4096


_CHUNK_LOAD = 256


def best_fit_lists(
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
    return best_fit_with_room(np.asarray(tokens, dtype=np.int64), k, cap)[0]


def best_fit_with_room(arr: np.ndarray, k: int | None, cap: int | None) -> tuple[Bins, list[int]]:
    """:func:`best_fit_lists` without a sample limit, also returning each bin's room left
    (cap minus its tokens; negative for a bin a sequence that fitted nowhere went to)."""
    n = len(arr)
    if n == 0:
        return [[] for _ in range(k or 0)], [cap or 0] * (k or 0)
    limit = cap if cap is not None else int(arr.sum())
    order = argsort_desc(arr)  # longest first, ties by index
    ordered = arr[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.concatenate((starts[1:], [n]))
    runs = list(zip(ordered[starts].tolist(), starts.tolist(), ends.tolist(), strict=True))
    bins: Bins = [[] for _ in range(k or 0)]
    room: list[int] = [limit] * (k or 0)
    # The open bins' keys, sorted: few bins, one list; many, chunks of at most 2 * load (so an
    # insert or pop moves O(load) pointers, not O(k)). The operations are written out in the
    # loops: they run once per (run of equal lengths, bin) pair, ~10^5 times at n=10^6, and
    # method calls were half their cost.
    few = (k or -(-int(arr.sum()) // limit)) <= _FLAT_KEYS_UP_TO
    overflow = _fill(runs, order.tolist(), int(ordered[-1]), bins, room, k, limit, few)
    if overflow and k is None:  # sequences over the cap: alone in bins of their own
        bins.extend([i] for i in overflow)
        room.extend(limit - int(arr[i]) for i in overflow)
    elif overflow:  # fits nowhere: placed where there is most room
        heap = [(-r, b) for b, r in enumerate(room)]
        heapq.heapify(heap)
        for i in overflow:
            r, b = heapq.heappop(heap)
            bins[b].append(i)
            room[b] -= int(arr[i])
            heapq.heappush(heap, (-room[b], b))
    return bins, room


def _fill(
    runs: list[tuple[int, int, int]], ids: list[int], smallest: int, bins: Bins, room: list[int],
    k: int | None, limit: int, few: bool,
) -> list[int]:
    """Best fit over runs of equal lengths, longest first. The open bins' keys
    (``room * span + bin``: residual order, ties by bin) are one sorted list when there are few
    bins, else chunks of at most 2 * load with each chunk's largest key in ``maxes``. Returns
    the sequences that fit nowhere."""
    span = len(ids) + (k or 0) + 1
    keys = [limit * span + b for b in range(k or 0)]
    load = _CHUNK_LOAD
    chunks = [] if few else [keys[i : i + load] for i in range(0, len(keys), load)]
    maxes = [c[-1] for c in chunks]
    overflow: list[int] = []
    bisect_left, insort = bisect.bisect_left, bisect.insort
    for t, lo, hi in runs:
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
        while pos < hi:
            if few:  # one sorted list
                at = bisect_left(keys, need)
                b = keys.pop(at) % span if at < len(keys) else -1
            else:  # pop the smallest key >= need: the fullest bin with room
                c = bisect_left(maxes, need)
                b = -1
                if c < len(maxes):
                    chunk = chunks[c]
                    at = bisect_left(chunk, need)
                    b = chunk.pop(at) % span
                    if not chunk:
                        del chunks[c], maxes[c]
                    elif at == len(chunk):
                        maxes[c] = chunk[-1]
            if b < 0:
                if k is None and t <= limit:
                    b = len(bins)
                    bins.append([])
                    room.append(limit)
                else:  # fits nowhere: placed later, where there is most room
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
            if r < smallest:
                continue
            key = r * span + b  # still open: insert its new key
            if few:
                insort(keys, key)
            elif not maxes:
                chunks.append([key])
                maxes.append(key)
            else:
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
    return overflow


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
