"""Karmarkar-Karp ranks that several starts share, and the count order they suggest.

:func:`~seqpart.solver.step.starts.constructions.rank_first` at every count and verl's schedule
(:mod:`~seqpart.solver.step.starts.trainers`) balance the same ranks: Karmarkar-Karp on cost,
which does not depend on the count. They are computed once per instance (0.22-0.27 s at
n = 262,144 on an idle machine); a count then costs only its split (0.07-0.11 s there).
"""

from __future__ import annotations

import numpy as np

from ....heuristics.kernels import karmarkar_karp_lists
from ...tuning import KK_SECONDS_PER_SEQUENCE_RANK
from ..model import StepInstance


def full_kk_fits(inst: StepInstance, seconds: float) -> bool:
    """Whether full Karmarkar-Karp (O(n dp)) fits a fifth of the budget; else its equal-count
    form (O(n log dp), verl's balance)."""
    return KK_SECONDS_PER_SEQUENCE_RANK * inst.n * inst.dp_size <= 0.2 * seconds


def kk_ranks(inst: StepInstance, equal: bool) -> list[list[int]]:
    """The sequences of each rank by Karmarkar-Karp on cost, in full or (``equal``) in its
    equal-count form, where zero-cost placeholders (dropped after) make the count divide.
    Computed once per instance; each call returns a fresh copy (a split may move sequences
    between ranks)."""
    return [list(r) for r in shared_kk_ranks(inst, equal)]


def shared_kk_ranks(inst: StepInstance, equal: bool) -> list[list[int]]:
    """The shared ranks of :func:`kk_ranks` themselves, for readers that change nothing (no
    copy: 262,144 indices at cluster scale)."""
    key = "kk_ranks_equal" if equal else "kk_ranks"
    ranks = inst.shared.get(key)
    if ranks is None:
        n, dp = inst.n, inst.dp_size
        if equal:
            pad = -n % dp
            padded = karmarkar_karp_lists(inst.costs + [0] * pad, [1] * (n + pad), dp,
                                          (n + pad) // dp)
            ranks = [[i for i in r if i < n] for r in padded]
        else:
            ranks = karmarkar_karp_lists(inst.costs, [1] * n, dp, None)
        inst.shared[key] = ranks
    return ranks


def counts_by_ranks(inst: StepInstance, ranks: list[list[int]], counts: list[int]) -> dict[int, int]:
    """Each count's step time (x vpp) on these ranks when each splits perfectly: the largest,
    over the ranks, of ``vpp*S + (pp-1)*max(h + o, ceil(S/m))``, ``S`` the rank's cost plus
    ``m`` overheads and ``h`` its costliest sequence (no size term).

    Why: the count bounds see the heaviest rank's bubble only. On long-tail batches at
    pp > 1 nearly every rank holds a long sequence whose bubble does not shrink with more
    micro-batches, while each one adds an overhead; these ranks show that (measured on 262,144
    reasoning lengths, dp = 1,024, pp = 4: the bounds put m = 49 first, whose plan was 1.057x
    verl's at m = 6; this order puts 6, 7, 8 first, and m = 7's plan is 0.976x)."""
    costs = inst.costs
    totals = [sum(costs[i] for i in r) for r in ranks]
    heaviest = [max((costs[i] for i in r), default=0) for r in ranks]
    o, vpp, beta = inst.overhead, inst.vpp, inst.pp - 1
    top = (max(totals) + max(counts) * o + max(heaviest) + o) * (vpp + beta)
    dt: object = np.int64 if top < 2**62 else object  # exact either way
    s0 = np.asarray(totals, dtype=dt)
    h = np.asarray(heaviest, dtype=dt) + o
    out = {}
    for m in counts:
        s = s0 + m * o
        out[m] = int((vpp * s + beta * np.maximum(h, -(-s // m))).max())
    return out
