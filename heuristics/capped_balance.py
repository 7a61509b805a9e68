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
from collections.abc import Sequence
from typing import Any

from ._common import Bins, order_desc, prepare
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
) -> Bins:
    """See :func:`capped_balance`; inputs already validated."""
    by_cost = order_desc(cost)
    by_tokens = order_desc(tokens)
    candidates = [lpt_lists(tokens, cost, count, k, cap, max_count, by_cost)]
    if cap is not None:
        if by_tokens != by_cost:
            candidates.append(lpt_lists(tokens, cost, count, k, cap, max_count, by_tokens))
        candidates.append(first_fit_lists(tokens, count, k, cap, max_count, by_tokens))
        candidates.append(_best_fit(tokens, count, k, cap, max_count))
    best: Bins | None = None
    best_score: tuple[int, int, int] | None = None
    for bins in candidates:
        bins = fill_empty(bins, cost, count, max_count)
        score = _score(bins, tokens, cost, count, cap, max_count)
        if best_score is None or score < best_score:
            best, best_score = bins, score
        if score[0] == 0 and score[1] == 0 and bins is candidates[0]:
            break  # LPT by cost is valid: the constructions after it only pack tighter
    assert best is not None
    return [sorted(b) for b in best]
