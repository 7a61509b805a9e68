"""Shared test helpers: a brute-force optimum for small instances."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


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
