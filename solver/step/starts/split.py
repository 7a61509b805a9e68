"""A rank's sequences into its ``m`` micro-batches: the split every construction of
:mod:`~seqpart.solver.step.starts.constructions` ends with, and the checks of a start (``mb_of``:
the micro-batch of every sequence, micro-batch ``b`` on rank ``b // m``; valid when every
micro-batch is non-empty and under the cap).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....heuristics.kernels import capped_balance_lists, karmarkar_karp_lists, lpt_lists
from ..model import StepInstance

#: From this many ranks on, the ranks are split into micro-batches together (one numpy round per
#: position) rather than by one LPT per rank.
_VECTOR_SPLIT_RANKS = 32
#: Ranks whose LPT split breaks the cap are re-split by the capped balancer (slow) up to this
#: many; beyond, the construction gives up at this count.
_MAX_REPAIRED_RANKS = 4
#: A repaired rank that still cannot split sheds at most this many sequences, each to one of
#: this many ranks with the most token room.
_MAX_SHED = 8
_SHED_RECEIVERS = 3
#: Karmarkar-Karp splits a rank only up to this many items x micro-batches (~2 ms loaded).
_KK_SPLIT_WORK = 5_000
#: Past this many items x bins a split balances tokens, not cost (see split_into).
_LPT_SPLIT_WORK = 50_000


def valid_start(mb_of: np.ndarray, inst: StepInstance, k: int) -> bool:
    """Every micro-batch non-empty and under the cap (an over-cap sequence only alone)."""
    if len(mb_of) != inst.n or mb_of.min() < 0 or mb_of.max() >= k:
        return False
    cnt = np.bincount(mb_of, minlength=k)
    if (cnt == 0).any():
        return False
    if inst.cap is None:
        return True
    tok = np.bincount(mb_of, weights=inst.tokens, minlength=k)  # exact: tokens < 2**53 summed
    over = tok > inst.cap
    return bool(not over.any() or (cnt[over] == 1).all())


def from_bins(bins: Sequence[Sequence[int]], by_rank: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """mb_of from micro-batches (local lists) dealt to ranks (lists of micro-batch positions)."""
    mb_of = np.full(n, -1, dtype=np.int64)
    b = 0
    for rank in by_rank:
        for pos in rank:
            mb_of[list(bins[pos])] = b
            b += 1
    return mb_of


def split_into(
    tokens: list[int], costs: list[int], k: int, cap: int | None, *, balanced: bool,
    repair: bool, force: bool = False,
) -> list[list[int]] | None:
    """Positions ``0..len(tokens)-1`` into ``k`` non-empty bins under the cap, every over-cap
    item alone in a bin of its own: Karmarkar-Karp when ``balanced`` and it respects the cap,
    else capped LPT, else (when ``repair``, and for a large split only when ``force``) the
    capped balancer, slow on large tight splits. None when none works."""
    over = [] if cap is None else [i for i, t in enumerate(tokens) if t > cap]
    rest = [i for i, t in enumerate(tokens) if cap is None or t <= cap]
    k_rest = k - len(over)
    if k_rest < (1 if rest else 0) or len(rest) < k_rest:
        return None
    if not rest:
        return [[i] for i in over]
    rt, rc, ones = [tokens[i] for i in rest], [costs[i] for i in rest], [1] * len(rest)

    def fits(bins: list[list[int]]) -> bool:
        return all(bins) and (cap is None or all(sum(rt[i] for i in b) <= cap for b in bins))

    # Karmarkar-Karp costs about items x bins; past that, LPT balances nearly as well.
    kk = balanced and len(rest) * k_rest <= _KK_SPLIT_WORK
    local = karmarkar_karp_lists(rc, ones, k_rest, None) if kk else None
    big = len(rest) * k_rest > _LPT_SPLIT_WORK
    if local is None or not fits(local):
        # LPT on cost looks past full bins for room, items x bins when the cap is tight; LPT on
        # tokens needs only the least-loaded bin (it has the most room), so large splits use it.
        local = lpt_lists(rt, rt if big else rc, ones, k_rest, cap, None)
    if not fits(local):
        if not repair or (big and not force):
            return None
        local = capped_balance_lists(rt, rc, ones, k_rest, cap, None).bins
        if not fits(local):
            return None
    return [[rest[i] for i in b] for b in local] + [[i] for i in over]


def split_ranks(
    inst: StepInstance, ranks: list[list[int]], m: int, *, balanced: bool = False
) -> np.ndarray | None:
    """Each rank's sequences into its ``m`` micro-batches by capped LPT, all ranks at once
    (one numpy round per position, costliest first). The ranks LPT cannot fit under the cap go,
    at pp = 1 without a size term, to best fit decreasing on tokens, then (at most
    :data:`_MAX_REPAIRED_RANKS` of them) to the capped balancer, shedding sequences to other
    ranks when even that fails (:func:`_repair_ranks`; ``ranks`` is then updated). None when a
    rank still has an empty or over-cap micro-batch."""
    dp, n = inst.dp_size, inst.n
    if any(len(members) < m for members in ranks):
        return None
    if dp < _VECTOR_SPLIT_RANKS:  # few long ranks: one LPT per rank is cheaper than numpy rounds
        mb_of = np.full(n, -1, dtype=np.int64)
        failed_ranks = []
        for r, members in enumerate(ranks):
            rt = [int(inst.tokens[i]) for i in members]
            rc = [inst.costs[i] for i in members]
            local = split_into(rt, rc, m, inst.cap, balanced=balanced, repair=False)
            if local is None:
                failed_ranks.append(r)
                if len(failed_ranks) > _MAX_REPAIRED_RANKS:
                    return None
            else:
                _write_split(mb_of, members, local, r * m)
        if not _repair_ranks(inst, ranks, failed_ranks, m, mb_of):
            return None
        return mb_of if valid_start(mb_of, inst, dp * m) else None
    mb_of = np.full(n, -1, dtype=np.int64)
    failed = _split_by_rounds(inst, ranks, list(range(dp)), m, mb_of, tightest=False)
    if failed and inst.pp == 1 and inst.size is None:
        # At pp = 1 without a size term only the rank totals count, not how a rank splits: ranks
        # filled near their m caps, where LPT on cost breaks the cap, go to best fit on tokens.
        failed = _split_by_rounds(inst, ranks, failed, m, mb_of, tightest=True)
    if len(failed) > _MAX_REPAIRED_RANKS:  # the rank split is far off: leave it to the others
        return None
    if not _repair_ranks(inst, ranks, failed, m, mb_of):
        return None
    return mb_of if valid_start(mb_of, inst, dp * m) else None


def _split_by_rounds(
    inst: StepInstance, ranks: list[list[int]], which: list[int], m: int, mb_of: np.ndarray,
    *, tightest: bool,
) -> list[int]:
    """The ranks ``which`` split into ``mb_of`` together, one numpy round per position: capped
    LPT (costliest first, to the lightest micro-batch that has room) or, when ``tightest``,
    best fit decreasing (longest first, to the fullest micro-batch that has room). Returns the
    ranks where a sequence found no room or a micro-batch stayed empty (their entries in
    ``mb_of`` are then partial or to be redone)."""
    total = sum(inst.costs)
    cost_arr = np.asarray(inst.costs, dtype=np.int64 if total < 2**62 else object)
    tok_arr = inst.tokens
    key = tok_arr.astype(np.float64) if tightest else cost_arr.astype(np.float64)
    dp = len(which)
    width = max(len(ranks[r]) for r in which)
    idx = np.full((dp, width), -1, dtype=np.int64)
    for row, r in enumerate(which):
        mem = np.asarray(ranks[r], dtype=np.int64)
        order = np.lexsort((mem, -key[mem]))  # largest first, ties by index
        idx[row, : len(mem)] = mem[order]
    load = np.zeros((dp, m), dtype=cost_arr.dtype)
    tok = np.zeros((dp, m), dtype=np.int64)
    cnt = np.zeros((dp, m), dtype=np.int64)
    cap = np.iinfo(np.int64).max if inst.cap is None else inst.cap
    failed = np.zeros(dp, dtype=bool)
    rows = np.arange(dp)
    first_mb = np.asarray(which, dtype=np.int64) * m
    big = total + 1
    for col in range(width):
        items = idx[:, col]
        active = items >= 0
        safe = np.where(active, items, 0)
        fits = tok + tok_arr[safe][:, None] <= cap
        fits[:, :] |= ~active[:, None]
        none_fit = ~fits.any(axis=1)
        # An over-cap sequence (oversize="alone") may open an empty micro-batch of its own.
        alone = none_fit & (tok == 0).any(axis=1) & (tok_arr[safe] > cap)
        if tightest:  # the fullest that fits; an empty one only when none with tokens does
            score = np.where(fits, np.where(tok > 0, -tok, 0), 1)
            score = np.where(alone[:, None] & (tok == 0), 0, score)
        else:
            score = np.where(fits | (alone[:, None] & (tok == 0)), load, big)
        b = np.argmin(score, axis=1)
        failed |= active & none_fit & ~alone
        put = active & ~failed
        load[rows[put], b[put]] += cost_arr[items[put]]
        tok[rows[put], b[put]] += tok_arr[items[put]]
        mb_of[items[put]] = first_mb[put] + b[put]
        cnt[rows[put], b[put]] += 1
    failed |= (cnt == 0).any(axis=1)
    return np.asarray(which, dtype=np.int64)[failed].tolist()


def _write_split(mb_of: np.ndarray, members: list[int], local: list[list[int]], first: int) -> None:
    for j, bin_ in enumerate(local):
        mb_of[[members[i] for i in bin_]] = first + j


def _resplit(inst: StepInstance, members: list[int], m: int) -> list[list[int]] | None:
    return split_into([int(inst.tokens[i]) for i in members], [inst.costs[i] for i in members],
                      m, inst.cap, balanced=False, repair=True)


def _repair_ranks(
    inst: StepInstance, ranks: list[list[int]], failed: list[int], m: int, mb_of: np.ndarray
) -> bool:
    """Each rank whose split failed, re-split by the capped balancer into ``mb_of``. One whose
    tokens still do not go into ``m`` micro-batches under the cap (a rank filled to its last
    token) hands its shortest sequences, one at a time, to the ranks with the most token room,
    each re-split, until it splits: a few re-splits instead of balancing every rank again.
    ``ranks`` is updated. False when a rank cannot be repaired so."""
    if not failed:
        return True
    tokens = inst.tokens
    held = None  # token total per rank, once a rank must shed
    receives = ~np.isin(np.arange(len(ranks)), failed)  # the failed ranks take no sequence
    for r in failed:
        local = _resplit(inst, ranks[r], m)
        shed = 0
        while local is None:
            if inst.cap is None or shed == _MAX_SHED:
                return False
            if held is None:
                held = np.array([int(tokens[rank].sum()) if rank else 0 for rank in ranks])
            movable = [i for i in ranks[r] if tokens[i] <= inst.cap]
            if len(ranks[r]) <= m or not movable:
                return False
            i = min(movable, key=lambda j: (int(tokens[j]), j))
            room = np.where(receives, m * inst.cap - held, -1)
            for q in np.argsort(-room, kind="stable")[:_SHED_RECEIVERS].tolist():
                local_q = _resplit(inst, ranks[q] + [i], m) if room[q] >= tokens[i] else None
                if local_q is not None:
                    ranks[q] = ranks[q] + [i]
                    _write_split(mb_of, ranks[q], local_q, q * m)
                    break
            else:
                return False
            ranks[r] = [j for j in ranks[r] if j != i]
            held[r] -= int(tokens[i])
            held[q] += int(tokens[i])
            shed += 1
            local = _resplit(inst, ranks[r], m)
        _write_split(mb_of, ranks[r], local, r * m)
    return True


