"""The capped balancer: exactly k non-empty micro-batches under the cap, as even as it can.

Balancing heuristics ignore the cap; packing heuristics ignore balance and leave bins empty. This
one tries several constructions (LPT by cost and by tokens, first-fit and best-fit decreasing into
k bins), refills any empty bin from the fullest multi-sequence bin (always possible when n >= k,
and never breaks the cap, since a lone sequence fits), and keeps the valid plan with the lowest
maximum load. When no construction respects the cap it returns the least-violating one; the
validator says why, and CP-SAT may still find a plan.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ._best_fit import (
    best_fit_lists,
)
from ._first_fit import first_fit_lists
from ._lpt import lpt_lists
from .inputs import Bins, apply_move_or_swap, order_desc, prepare

__all__ = ["capped_balance"]


class RepairResult(NamedTuple):
    """What :func:`repair_lists` and :func:`capped_balance_lists` return: the bins and what the
    repair of an over-cap construction cost."""

    #: The bins (sorted by :func:`capped_balance_lists`; in place order by :func:`repair_lists`).
    bins: Bins
    #: Repair steps made (0 when a construction was already under the cap).
    steps: int
    #: Whether the deadline stopped the repair before it got every bin under the cap.
    cut: bool


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
    return capped_balance_lists(tokens, cost, count, k, cap, max_count).bins


def fill_empty(
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


def capped_balance_lists(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    k: int,
    cap: int | None,
    max_count: int | None,
    deadline: float | None = None,
    lpt_bins: Bins | None = None,
    repair_steps: int = 10_000,
) -> RepairResult:
    """See :func:`capped_balance`; inputs already validated.

    Constructions run in order, balance first, and the first valid one wins; the later ones
    only pack tighter. Once ``deadline`` (a ``time.perf_counter()`` value) has passed, no new
    construction starts unless none so far is valid. When none is, the least-violating one goes
    through :func:`repair_lists` (at most ``repair_steps`` steps), whose steps the result says.
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
        return lpt_lists(tokens, cost, count, k, cap, max_count, order(tokens))

    # ``lpt_bins``: the caller's LPT by cost, the first construction, when it has it already.
    constructions: list[Callable[[], Bins | None]] = [
        (lambda: lpt_bins) if lpt_bins is not None
        else (lambda: lpt_lists(tokens, cost, count, k, cap, max_count, order(cost)))
    ]
    if cap is not None:
        constructions.append(lpt_by_tokens)
        # Best fit first: O(n log n) and at least as tight as first fit, which scans every
        # bin per sequence and only runs when best fit left the plan invalid.
        constructions.append(lambda: best_fit_lists(tokens, count, k, cap, max_count))
        constructions.append(
            lambda: first_fit_lists(tokens, count, k, cap, max_count, order(tokens))
        )
    best: Bins | None = None
    best_score: tuple[int, int, int] | None = None
    for build in constructions:
        built = build()
        if built is None:
            continue
        bins = fill_empty(built, cost, count, max_count)
        score = _score(bins, tokens, cost, count, cap, max_count)
        if best_score is None or score < best_score:
            best, best_score = bins, score
        if best_score[0] == 0 and best_score[1] == 0:
            break
    assert best is not None and best_score is not None
    repaired = RepairResult(best, 0, False)
    if best_score[0] > 0 and cap is not None:
        repaired = repair_lists(tokens, count, best, cap, max_count, deadline, repair_steps)
    return repaired._replace(bins=[sorted(b) for b in repaired.bins])


#: Up to this many items, repair scores swaps with every item; above, only with the items of
#: the _ROOMY_BINS bins with the most room (memory stays O(n), not O(64 n)).
_ALL_PARTNERS_UP_TO = 20_000
_ROOMY_BINS = 256


def repair_step_seconds(n: int) -> float:
    """Estimated CPU seconds of one repair step over n items (64 heavy items against every
    partner, or the roomy bins' items above _ALL_PARTNERS_UP_TO): for a step budget."""
    return 5e-5 + 2e-7 * min(n, _ALL_PARTNERS_UP_TO)


def repair_lists(
    tokens: list[int],
    count: list[int],
    bins: Bins,
    cap: int,
    max_count: int | None,
    deadline: float | None = None,
    max_steps: int = 10_000,
) -> RepairResult:
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

    steps, cut = 0, False
    for steps in range(max_steps):  # noqa: B007 (reported below)
        if deadline is not None and time.perf_counter() > deadline:
            cut = True
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
    return RepairResult(members, steps, cut)
