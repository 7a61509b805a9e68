"""The order search on the exact makespan: moves and swaps of one rank's micro-batches."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence

from ._schedule import DEFAULT_MODEL, PipelineModel, scaled_lower_bound, scaled_makespans

#: The order search's default work (operations evaluated; a few ms on the 2-core machine).
#: Enough for small counts to reach a local optimum; large counts gain < 0.3% from 100x more.
ORDER_WORK = 500_000
#: Candidate orders scored per vectorised pass of the order search, and at most this many
#: operations a pass (a few ms).
_BATCH = 256
_BATCH_OPS = 200_000


def _candidates(order: list[int]) -> Iterator[list[int]]:
    """Every move of one micro-batch to another position, then every swap of two: a move to
    either end or to the middle is the usual fix of a 1F1B order's warm-up or cool-down."""
    m = len(order)
    for a in range(m):
        rest = order[:a] + order[a + 1 :]
        for b in range(m):
            if b != a and b != a + 1:  # a+1 duplicates a swap of neighbours
                yield rest[:b] + [order[a]] + rest[b:]
    for a, b in itertools.combinations(range(m), 2):
        c = order.copy()
        c[a], c[b] = c[b], c[a]
        yield c


def improve_order(
    times: Sequence[int],
    pp: int,
    vpp: int = 1,
    model: PipelineModel = DEFAULT_MODEL,
    *,
    starts: Sequence[Sequence[int]] = (),
    work_budget: int = ORDER_WORK,
    deadline: float | None = None,
) -> tuple[list[int], int, int]:
    """Local search on the exact makespan over orders of ``times``: moves and swaps, scored
    ``_BATCH`` at a time in one vectorised pass, taking the best of the first batch that
    improves; stops at a local optimum, at the lower bound, when ``work_budget`` (operations
    evaluated: deterministic) is spent, or past ``deadline`` (perf_counter seconds: a safety
    net).

    Starts from each order in ``starts`` (positions into ``times``; default: as given) and keeps
    the best. Returns (order, scaled makespan, work spent)."""
    m = len(times)
    starts = [list(s) for s in starts] or [list(range(m))]
    for s in starts:
        if sorted(s) != list(range(m)):
            raise ValueError(f"each start must be a permutation of range({m}), got {s}")
    if m == 0:
        return [], 0, 0
    t = [int(x) for x in times]
    ops = 2 * pp * vpp * m
    evals = scaled_makespans([[t[i] for i in s] for s in starts], pp, vpp, model)
    work = ops * len(starts)
    best_i = min(range(len(starts)), key=lambda i: (evals[i], i))
    order, value = starts[best_i], evals[best_i]
    floor = scaled_lower_bound(t, pp, vpp, model)
    improved = m > 1 and pp > 1
    while improved and value > floor:
        improved = False
        cands = _candidates(order)
        size = max(16, min(_BATCH, _BATCH_OPS // ops))  # a pass stays short for the clock
        last_pass = 0.0  # seconds: a pass starts only if one as long as the last ends in time
        while work + ops * size <= work_budget:
            began = time.perf_counter()
            if deadline is not None and began + last_pass > deadline:
                break
            batch = list(itertools.islice(cands, size))
            if not batch:
                break
            work += ops * len(batch)
            vals = scaled_makespans([[t[i] for i in c] for c in batch], pp, vpp, model)
            last_pass = time.perf_counter() - began
            i = min(range(len(batch)), key=lambda i: (vals[i], i))
            if vals[i] < value:
                order, value, improved = batch[i], vals[i], True
                break
    return order, value, work
