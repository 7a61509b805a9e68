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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._common import Bins, apply_move_or_swap, order_desc, prepare
from .first_fit import first_fit_lists
from .lpt import lpt_lists


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
    return capped_balance_lists(tokens, cost, count, k, cap, max_count)


def _best_fit(
    tokens: list[int], count: list[int], k: int, cap: int | None, max_count: int | None
) -> Bins:
    """Best-fit decreasing into k bins: the fullest bin that still fits (tight packings).

    Bins sit in a list sorted by token sum, so the fullest bin with room is one bisection away.
    """
    bins: Bins = [[] for _ in range(k)]
    tok = [0] * k
    cnt = [0] * k
    by_fill = [(0, b) for b in range(k)]  # (tokens, bin), ascending
    limit = cap if cap is not None else sum(tokens)
    for i in order_desc(tokens):
        t = tokens[i]
        pos = bisect.bisect_right(by_fill, (limit - t, k)) - 1
        while pos >= 0 and max_count is not None and cnt[by_fill[pos][1]] + count[i] > max_count:
            pos -= 1
        if pos < 0:  # nothing fits: the emptiest bin, flagged later by the validator
            pos = 0
        _, b = by_fill.pop(pos)
        bins[b].append(i)
        tok[b] += t
        cnt[b] += count[i]
        bisect.insort(by_fill, (tok[b], b))
    return bins


def fill_empty(bins: Bins, cost: list[int], count: list[int], max_count: int | None) -> Bins:
    """Move the lightest sequence of the heaviest multi-sequence bin into each empty bin."""
    bins = [list(b) for b in bins]
    for e in [b for b, items in enumerate(bins) if not items]:
        donors = [b for b, items in enumerate(bins) if len(items) > 1]
        if not donors:
            break
        d = max(donors, key=lambda b: (sum(cost[i] for i in bins[b]), -b))
        i = min(bins[d], key=lambda i: (cost[i], i))
        if max_count is not None and count[i] > max_count:
            continue
        bins[d].remove(i)
        bins[e].append(i)
    return bins


def _score(
    bins: Bins, tokens: list[int], cost: list[int], count: list[int], cap: int | None,
    max_count: int | None,
) -> tuple[int, int, int]:
    """(tokens over the cap + samples over max_count, empty bins, max cost load): lower is better."""
    over = 0
    empty = 0
    top = 0
    for items in bins:
        t = sum(tokens[i] for i in items)
        c = sum(count[i] for i in items)
        over += max(0, t - cap) if cap is not None else 0
        over += max(0, c - max_count) if max_count is not None else 0
        empty += not items
        top = max(top, sum(cost[i] for i in items))
    return over, empty, top


def capped_balance_lists(
    tokens: list[int],
    cost: list[int],
    count: list[int],
    k: int,
    cap: int | None,
    max_count: int | None,
    deadline: float | None = None,
) -> Bins:
    """See :func:`capped_balance`; inputs already validated.

    Constructions run in order, balance first, and the first valid one wins; the later ones
    only pack tighter. Once ``deadline`` (a ``time.perf_counter()`` value) has passed, no new
    construction starts unless none so far is valid. When none is, the least-violating one goes
    through :func:`repair_lists`.
    """
    by_cost = order_desc(cost)
    by_tokens = order_desc(tokens)
    constructions: list[Callable[[], Bins]] = [
        lambda: lpt_lists(tokens, cost, count, k, cap, max_count, by_cost)
    ]
    if cap is not None:
        if by_tokens != by_cost:
            constructions.append(lambda: lpt_lists(tokens, cost, count, k, cap, max_count, by_tokens))
        constructions.append(lambda: first_fit_lists(tokens, count, k, cap, max_count, by_tokens))
        constructions.append(lambda: _best_fit(tokens, count, k, cap, max_count))
    best: Bins | None = None
    best_score: tuple[int, int, int] | None = None
    for build in constructions:
        bins = fill_empty(build(), cost, count, max_count)
        score = _score(bins, tokens, cost, count, cap, max_count)
        if best_score is None or score < best_score:
            best, best_score = bins, score
        if best_score[0] == 0 and best_score[1] == 0:
            break
    assert best is not None and best_score is not None
    if best_score[0] > 0 and cap is not None:
        best = repair_lists(tokens, count, best, cap, max_count, deadline)
    return [sorted(b) for b in best]


def repair_lists(
    tokens: list[int],
    count: list[int],
    bins: Bins,
    cap: int,
    max_count: int | None,
    deadline: float | None = None,
    max_steps: int = 10_000,
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

    for _step in range(max_steps):
        if deadline is not None and time.perf_counter() > deadline:
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
        d = tok[heavy][:, None] - tok[None, :]  # swaps: a in o for a shorter b elsewhere
        jb = where[None, :]
        change = (
            excess(tload[o] - d) - base_o + excess(tload[jb] + d) - excess(tload[jb])
        )
        dc = cnt_item[heavy][:, None] - cnt_item[None, :]
        ok = (d > 0) & (jb != o) & (cnt[jb] + dc <= cnt_v) & (cnt[o] - dc <= cnt_v)
        change = np.where(ok, change, np.iinfo(np.int64).max)
        flat = int(np.argmin(change))
        if change.flat[flat] < best[0]:
            a, b = divmod(flat, n)
            best = (int(change.flat[flat]), int(heavy[a]), int(where[b]), b)
        _, a, j, b = best
        if a < 0:
            break
        apply_move_or_swap(members, where, ((tload, tok), (cnt, cnt_item)), a, o, j, b)
    return members
