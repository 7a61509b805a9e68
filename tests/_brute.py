"""Shared test helpers: brute-force optima for small instances."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from seqpart.solver.step.pipeline import makespan, schedule_error


def brute_force_min_max(
    lengths: Sequence[int],
    k: int,
    cap: int | None,
    costs: Sequence[int] | None = None,
    equal_size: bool = False,
    groups: Sequence[Sequence[int]] = (),
) -> int | None:
    """The optimal max load over all assignments to exactly k non-empty bins (None: infeasible).

    Enumerates k**n assignments with bin labels in first-use order, so keep n <= 8.
    """
    n = len(lengths)
    cost = list(costs) if costs is not None else list(lengths)
    best: int | None = None
    for assign in itertools.product(range(k), repeat=n):
        # canonical labelling: bin b first appears before bin b+1 (removes symmetric copies)
        seen = -1
        canonical = True
        for b in assign:
            if b > seen + 1:
                canonical = False
                break
            seen = max(seen, b)
        if not canonical or seen != k - 1:
            continue
        if any(len({assign[i] for i in g}) > 1 for g in groups):
            continue
        tok = [0] * k
        load = [0] * k
        size = [0] * k
        for i, b in enumerate(assign):
            tok[b] += lengths[i]
            load[b] += cost[i]
            size[b] += 1
        if cap is not None and max(tok) > cap:
            continue
        if equal_size and len(set(size)) > 1:
            continue
        top = max(load)
        if best is None or top < best:
            best = top
    return best


def _best_rank(times: tuple[int, ...], pp: int, vpp: int, memo: dict) -> Fraction | None:
    """The fastest order of one rank's micro-batches under Megatron's schedule (exact, every
    order tried; None when the schedule cannot run this count)."""
    key = (tuple(sorted(times)), pp, vpp)
    if key not in memo:
        if pp > 1 and schedule_error(pp, vpp, len(times)) is not None:
            memo[key] = None
        else:
            memo[key] = min(Fraction(makespan(list(p), pp, vpp))
                            for p in set(itertools.permutations(times)))
    return memo[key]


def brute_force_step(
    lengths: list[int],
    dp: int,
    cap: int | None,
    *,
    cost: tuple[int, ...] = (1, 0),
    overhead: int = 0,
    size: Any = None,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int = 1,
) -> Fraction | None:
    """The optimal step time over every valid schedule, every count and every order within each
    rank, under the exact makespan of Megatron's schedule (None: infeasible).

    Enumerates every assignment of sequences to ``dp*m`` labelled micro-batches: keep n <= 6.
    ``cost`` is ``(a, b)`` or ``(a, b, per_sequence)``; ``size`` a MicroBatchCost's size term,
    added to each micro-batch's time from its token total.
    """
    n = len(lengths)
    per = cost[2] if len(cost) > 2 else 0
    c = [cost[0] * x + cost[1] * x * x + per for x in lengths]
    best: Fraction | None = None
    memo: dict = {}
    for m in range(multiple_of, n // dp + 1, multiple_of):
        k = dp * m
        for assign in itertools.product(range(k), repeat=n):
            tok = [0] * k
            t = [overhead] * k
            used = [0] * k
            for i, b in enumerate(assign):
                tok[b] += lengths[i]
                t[b] += c[i]
                used[b] += 1
            if 0 in used or (cap is not None and max(tok) > cap):
                continue
            if size is not None:
                t = [x + size.size(y) for x, y in zip(t, tok, strict=True)]
            ranks = [_best_rank(tuple(t[r * m : (r + 1) * m]), pp, vpp, memo) for r in range(dp)]
            if None in ranks:
                break  # the schedule cannot run this count
            step = max(x for x in ranks if x is not None)
            if best is None or step < best:
                best = step
    return best
