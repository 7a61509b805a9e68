"""Re-split pairs of micro-batches optimally, groups of three or four by exact packing (see
the groups section below), and exchange one item for two between them: the moves local search
lacks (few items per bin; non-token costs under a tight cap).

When each micro-batch holds 2-6 long sequences, moving or swapping one sequence at a time
rarely lowers the heaviest micro-batch: the fix needs two or three sequences to change sides at
once. Here the heaviest micro-batch and one partner are pooled (at most ``max_union`` items)
and split again in the best way over every subset: the one whose larger load is smallest, with
both sides non-empty, under the cap and with the sample count kept when it is fixed. A change
is kept only when both new loads are below the heaviest's old load, so the loads sorted in
descending order fall lexicographically and the search terminates.

The work is counted in subsets scored (``max_work``), so the result does not depend on the
clock; ``deadline`` is only a safety net.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..options import BestPlan, Budget, Subproblem
from ..problem import measure_bins
from ..tuning import EXACT_NODES_PER_SECOND, EXCHANGES_PER_SECOND, GROUP_SHARE, SUBSETS_PER_SECOND
from .branch_bound import CLOCK_EVERY, FOUND, pack
from .prove import MAX_ITEMS_PER_BIN, exact_budget

#: Largest pooled pair split exhaustively (2**(m-1) subsets: 32768 at 16).
MAX_UNION = 16
#: Default work budget, in subsets scored (~40 ms of numpy at most).
MAX_WORK = 4_000_000
_INT64_SAFE = 1 << 62
#: Work charged per pair tried and per bin per round, in subsets, beyond the subsets scored:
#: a pair's numpy calls cost ~60 us however small its union, and each round sorts the bins
#: (measured: without these, resplit at n=2048 took 14 ms where 3 ms were charged).
PAIR_WORK = 256
ROUND_WORK_PER_BIN = 2


def work_for(seconds: float, share: float = 0.25) -> int:
    """The work (subsets) for a ``share`` of ``seconds`` (the call's limit, or what is left of
    it): the same limit gives the
    same work on every machine; at least one 13-sequence pair."""
    return max((1 << 12) + PAIR_WORK, int(SUBSETS_PER_SECOND * share * seconds))


def _subset_sums(values: Sequence[int], dtype: type | str) -> np.ndarray:
    """Sums of every subset of ``values[1:]`` with ``values[0]`` always in (symmetry fixed)."""
    sums = np.array([values[0]], dtype=dtype)
    for v in values[1:]:
        sums = np.concatenate((sums, sums + v))
    return sums


def best_split(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    cap: int | None,
    count: int | None,
) -> tuple[int, list[int]] | None:
    """The best split of these items into two non-empty parts: (larger load, mask of part A).

    Part A always holds item 0. ``count``: each part must hold exactly this many samples.
    None when no split satisfies the cap and counts.
    """
    m = len(tokens)
    if m < 2:
        return None
    t_all, c_all = sum(tokens), sum(costs)
    dtype: type | str = np.int64 if max(t_all, c_all) < _INT64_SAFE else object
    tok = _subset_sums(tokens, dtype)
    cst = _subset_sums(costs, dtype)
    ok = np.ones(len(tok), dtype=bool)
    ok[-1] = False  # every item in A: B would be empty
    if cap is not None:
        ok &= (tok <= cap) & (t_all - tok <= cap)
    if count is not None:
        cnt = _subset_sums(counts, np.int64)
        ok &= (cnt == count) & (sum(counts) - cnt == count)
    if not ok.any():
        return None
    score = np.maximum(cst, c_all - cst)
    cand = np.flatnonzero(ok)
    best = int(cand[int(np.argmin(score[cand]))])
    # Mask bit j-1 of ``best`` says whether item j (j >= 1) is in part A.
    mask = [True] + [bool((best >> (j - 1)) & 1) for j in range(1, m)]
    return int(score[best]), mask


def resplit_pairs(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    bins: Sequence[Sequence[int]],
    cap: int | None = None,
    max_count: int | None = None,
    *,
    lower_bound: int = 0,
    max_union: int = MAX_UNION,
    work: Budget | None = None,
) -> list[list[int]]:
    """Improve ``bins`` (item indices) by optimal re-splits of the heaviest bin with a partner.

    Partners are tried lightest first; the first one that lowers the heaviest bin is taken,
    then the new heaviest bin is tried. It stops at ``lower_bound``, when no partner helps, or
    when ``work`` (subsets scored; ``MAX_WORK`` by default) runs out. Bins over the cap are
    left alone (they need a repair, not a balance). Returns new lists; the input is not
    changed. ``work`` is charged the subsets scored, for a caller that charges a budget; its
    ``cut`` says the deadline stopped it (the result may then differ from run to run), its
    ``ran_out`` that its units did.
    """
    out = [list(b) for b in bins]
    _resplit(tokens, costs, counts, out, cap, max_count, lower_bound, max_union,
             work if work is not None else Budget(MAX_WORK))
    return out


def _resplit(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    out: list[list[int]],
    cap: int | None,
    max_count: int | None,
    lower_bound: int,
    max_union: int,
    work: Budget,
) -> None:
    """The loop of :func:`resplit_pairs`, in place on ``out``, charging ``work``."""
    k = len(out)
    if k < 2:
        return
    load = [sum(costs[i] for i in b) for b in out]
    work.charge(sum(map(len, out)))  # the loads above, and sorting the bins: about a subset per item
    while True:
        work.charge(ROUND_WORK_PER_BIN * k)
        heavy = min(range(k), key=lambda j: (-load[j], j))
        if load[heavy] <= lower_bound:
            break
        if cap is not None and sum(tokens[i] for i in out[heavy]) > cap:
            break
        improved = False
        for part in sorted(range(k), key=lambda j: (load[j], j)):
            if load[part] >= load[heavy]:
                break  # the pooled load is at least twice the heaviest's: no split gains
            union = out[heavy] + out[part]
            if len(union) > max_union:
                continue
            if work.clock_out():
                return
            pair_work = PAIR_WORK + (1 << (len(union) - 1))
            if work.over(pair_work):
                return
            work.charge(pair_work)
            found = best_split(
                [tokens[i] for i in union], [costs[i] for i in union],
                [counts[i] for i in union], cap, max_count,
            )
            if found is None or found[0] >= load[heavy]:
                continue
            mask = found[1]
            out[heavy] = sorted(i for i, keep in zip(union, mask, strict=True) if keep)
            out[part] = sorted(i for i, keep in zip(union, mask, strict=True) if not keep)
            load[heavy] = sum(costs[i] for i in out[heavy])
            load[part] = sum(costs[i] for i in out[part])
            improved = True
            break
        if not improved:
            break  # only the heaviest bin sets the max: once no partner lowers it, stop


# --------------------------------------------------------------------------- exchanges
# Why: with a cost other than tokens under a tight cap (attention), the heaviest micro-batches
# hold the longest sequences and must be filled with short ones while every other micro-batch
# stays full to the token. Local search moves one sequence or swaps one for one; the fix is
# usually one sequence for two shorter ones of about the same tokens (or two for one), which
# lowers the sum of squares at the same token count. On a 500-sequence attention batch at its
# smallest count this took the heaviest load from 1.0% above the fluid LP bound to 0.3%.

#: Work charged per step beyond its candidates (numpy calls; the items' and pairs' arrays
#: gathered: per item), and per bin (and per pair) listed when a bin changes.
EXCHANGE_STEP_WORK = 20_000
EXCHANGE_ITEM_WORK = 4
EXCHANGE_BIN_WORK = 600
EXCHANGE_PAIR_WORK = 4
#: Most candidates one step may score (its arrays: ~10 of 8 bytes each per candidate). With
#: more items per micro-batch local search has moves enough.
EXCHANGE_MAX_STEP = 3_000_000


def _pairs_in(items: list[int], j: int) -> np.ndarray:
    """Every pair of items of bin ``j``: rows (first, second, j)."""
    a, c = np.triu_indices(len(items), 1)
    arr = np.asarray(items, dtype=np.int64)
    return np.stack([arr[a], arr[c], np.full(len(a), j, dtype=np.int64)])


def _best_exchange(
    tok: np.ndarray, cst: np.ndarray, members: list[list[int]], bin_of: np.ndarray,
    pairs: list[np.ndarray], load: np.ndarray, used: np.ndarray, h: int, cap: int,
) -> tuple[int, list[int], list[int], int, int] | None:
    """The exchange between bin ``h`` and another bin that minimises the larger of their new
    loads, both below h's load: one or two items of h for none, one or two of the other bin
    (not two for two). ``pairs[j]``: bin j's pairs (:func:`_pairs_in`). Returns (score, out
    of h, into h, other bin, candidates scored)."""
    top = int(load[h])
    own = np.asarray(members[h], dtype=np.int64)
    others = np.flatnonzero(bin_of != h)
    bins = np.flatnonzero(np.arange(len(members)) != h)
    pooled = np.concatenate([pairs[j] for j in bins.tolist()], axis=1)
    in_pairs = pooled[:2]
    # The sets bin h may receive: nothing (from each bin), one item, or two from one bin.
    nothing = np.zeros(len(bins), dtype=np.int64)
    ins = [(nothing, nothing, bins, None),
           (tok[others], cst[others], bin_of[others], others[None, :]),
           (tok[in_pairs].sum(0), cst[in_pairs].sum(0), pooled[2], in_pairs)]
    oa, ob = np.triu_indices(len(own), 1)
    outs = [(own[None, :], 1)] + ([(np.stack([own[oa], own[ob]]), 2)] if len(oa) else [])
    best: tuple[int, list[int], list[int], int] | None = None
    scored = 0
    for out_items, n_out in outs:
        ot, oc = tok[out_items].sum(0)[:, None], cst[out_items].sum(0)[:, None]
        for n_in, (it, ic, ib, in_items) in enumerate(ins):
            if n_out == 2 and n_in == 2 or len(ib) == 0 or len(members[h]) - n_out + n_in < 1:
                continue
            scored += len(ot) * len(ib)
            new_h = top - oc + ic[None, :]
            new_j = load[ib][None, :] + oc - ic[None, :]
            ok = (new_h < top) & (new_j < top)
            ok &= (used[h] - ot + it[None, :] <= cap) & (used[ib][None, :] + ot - it[None, :] <= cap)
            if not ok.any():
                continue
            score = np.where(ok, np.maximum(new_h, new_j), top)
            r, c = divmod(int(np.argmin(score)), score.shape[1])
            if best is None or int(score[r, c]) < best[0]:
                taken = [] if in_items is None else in_items[:, c].tolist()
                best = (int(score[r, c]), out_items[:, r].tolist(), taken, int(ib[c]))
    return None if best is None else (*best, scored)


def exchange_items(
    tokens: Sequence[int], costs: Sequence[int], bins: Sequence[Sequence[int]], cap: int, *,
    lower_bound: int = 0, work: Budget | None = None,
) -> list[list[int]]:
    """Improve ``bins`` by exchanges between the heaviest bin and any other (one item for two,
    two for one, one for one, or a move), the best one each step, until none lowers the
    heaviest load, the load reaches ``lower_bound`` or ``work`` (candidates scored;
    ``MAX_WORK`` by default) runs out.

    Each change puts both bins below the heaviest's old load, so the search terminates. No bin
    is emptied, none goes over the cap. Costs summing to 2**61 or more are left alone (the
    scores are int64). ``work`` as in :func:`resplit_pairs` (in candidates scored).
    """
    work = work if work is not None else Budget(MAX_WORK)
    out = [list(b) for b in bins]
    n, k = len(tokens), len(out)
    setup = n + EXCHANGE_BIN_WORK * k + EXCHANGE_PAIR_WORK * sum(len(b) ** 2 // 2 for b in out)
    late = work.clock_out(setup / EXCHANGES_PER_SECOND)
    if k < 2 or setup > work.left() or late or sum(costs) >= _INT64_SAFE // 2:
        if k >= 2:
            work.over(setup)
        return out
    tok = np.asarray(tokens, dtype=np.int64)
    cst = np.asarray(costs, dtype=np.int64)
    load = np.asarray([int(cst[b].sum()) for b in out], dtype=np.int64)
    used = np.asarray([int(tok[b].sum()) for b in out], dtype=np.int64)
    bin_of = np.zeros(n, dtype=np.int64)
    for j, b in enumerate(out):
        bin_of[b] = j
    pairs = [_pairs_in(b, j) for j, b in enumerate(out)]
    work.charge(setup)
    while True:
        if work.left() <= 0:
            work.ran_out = True
            break
        h = int(np.argmax(load))
        if load[h] <= lower_bound or used[h] > cap:
            break
        # A step scores about (own items)^2/2 x (other items) candidates: skip it when over
        # the work left, or (the safety net) when its estimate runs past the deadline.
        m = len(out[h])
        step = EXCHANGE_STEP_WORK + EXCHANGE_ITEM_WORK * n + (m * m // 2 + m) * n
        if work.over(step) or step > EXCHANGE_MAX_STEP:
            break
        if work.clock_out(step / EXCHANGES_PER_SECOND):
            break
        found = _best_exchange(tok, cst, out, bin_of, pairs, load, used, h, cap)
        work.charge(EXCHANGE_STEP_WORK + EXCHANGE_ITEM_WORK * n + (found[4] if found else m * n))
        if found is None:
            break
        _, leave, enter, j, _ = found
        for i in leave:
            out[h].remove(i)
            out[j].append(i)
        for i in enter:
            out[j].remove(i)
            out[h].append(i)
        bin_of[leave], bin_of[enter] = j, h
        for b in (h, j):
            load[b] = int(cst[out[b]].sum())
            used[b] = int(tok[out[b]].sum())
            pairs[b] = _pairs_in(out[b], b)
            work.charge(EXCHANGE_BIN_WORK + EXCHANGE_PAIR_WORK * pairs[b].shape[1])
    return out


# --------------------------------------------------------------------------- groups
# Re-split the heaviest micro-batch with two or three partners at once, by exact packing.
#
# With about three long sequences per micro-batch, a plan can be stuck where no move, swap or
# pairwise re-split lowers the heaviest micro-batch, yet pooling it with two or three others and
# packing the pool again at one unit below its load does (on the public bench's adversarial
# batches of 24-48 sequences, 0.23-0.35% above the optimum at 20 ms, this reaches 0.01-0.05% in
# 3-8 ms at n = 24-32). The pool's packing is the exact search's decision
# (:func:`~seqpart.solver.engines.branch_bound.pack`, at most :data:`NODES_PER_GROUP` nodes a group): a
# pool of 8-16 sequences in 3-4 micro-batches is decided in a few hundred nodes, where scoring
# every split of it is 3**12 assignments.
#
# A change is kept only when every new micro-batch of the pool is below the heaviest's old load,
# so the loads sorted in descending order fall lexicographically and the loop ends. The work is
# counted in search nodes (plus :data:`GROUP_NODES` a group), so the result does not depend on
# the clock unless the deadline of the caller's allowance cuts it.

#: Search nodes one pool's decision may take; a pool not decided within them is skipped.
NODES_PER_GROUP = 500
#: Nodes charged per pool beyond its search (gathering it and the call: ~12 us measured).
GROUP_NODES = 10
#: Largest pool packed (sequences).
MAX_POOL = 20
#: Partners pooled with the heaviest micro-batch, fewest first, from this many of the lightest
#: micro-batches (every one at k <= 13; at k = 500 a round over all pairs would spend the whole
#: share on pools that cannot help).
PARTNERS = (2, 3)
PARTNER_POOL = 12


def resplit_groups(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    bins: Sequence[Sequence[int]],
    cap: int | None,
    max_count: int | None,
    *,
    lower_bound: int,
    work: Budget,
) -> list[list[int]]:
    """Lower the heaviest micro-batch by packing it again with 2, then 3 partners (of the
    ``PARTNER_POOL`` lightest, lightest first; the first pool that packs at one below its load
    is taken, then the new heaviest is tried). Stops at ``lower_bound``, when no pool helps, or
    when ``work`` (search nodes) is spent; it is charged the nodes used, its ``cut`` says the
    deadline stopped it, its ``ran_out`` that its nodes did. Returns new lists; ``bins`` is
    not changed."""
    out = [list(b) for b in bins]
    k = len(out)
    load = [sum(costs[i] for i in b) for b in out]
    while k > 2:
        heavy = min(range(k), key=lambda j: (-load[j], j))
        if load[heavy] <= lower_bound:
            break
        if cap is not None and sum(tokens[i] for i in out[heavy]) > cap:
            break  # over the cap: a repair, not a balance
        others = sorted((j for j in range(k) if j != heavy),
                        key=lambda j: (load[j], j))[:PARTNER_POOL]
        improved = False
        for width in PARTNERS:
            for group in itertools.combinations(others, min(width, k - 1)):
                pool = out[heavy] + [i for j in group for i in out[j]]
                if len(pool) > MAX_POOL:
                    continue
                if work.clock_out() or work.over(GROUP_NODES + NODES_PER_GROUP):
                    return out
                search = Budget(NODES_PER_GROUP, every=CLOCK_EVERY)
                status, split = pack([tokens[i] for i in pool], [costs[i] for i in pool],
                                     [counts[i] for i in pool], len(group) + 1,
                                     load[heavy] - 1, cap, max_count, search)
                work.charge(GROUP_NODES + search.used)
                if status != FOUND or split is None:
                    continue
                for j, part in zip((heavy, *group), split, strict=True):
                    out[j] = sorted(pool[p] for p in part)
                    load[j] = sum(costs[i] for i in out[j])
                improved = True
                break
            if improved or width >= k - 1:
                break
        if not improved:
            break
    return out


def improve_by_groups(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """``best`` improved by :func:`resplit_groups` when micro-batches hold few sequences (at
    most the proof phase's ``MAX_ITEMS_PER_BIN`` on average), within ``GROUP_SHARE`` of the
    call's ``time_limit``; charged its search nodes."""
    items, k, cap, max_count = sub.items, sub.k, sub.cap, sub.max_count
    if (best.bins is None or best.max_load <= best.lower_bound or items.shift
            or len(items) > MAX_ITEMS_PER_BIN * k or not budget.fits(0.0)):
        return best
    # The exact search's node rates: in clock timing the clock decides, small pools each
    # checked against it before they start.
    search = exact_budget(budget, min(GROUP_SHARE * budget.time_limit, max(budget.left(), 0.0)))
    found = resplit_groups(items.tokens, items.costs, items.counts, best.bins, cap, max_count,
                           lower_bound=best.lower_bound, work=search)
    budget.charge(search.used / EXACT_NODES_PER_SECOND)
    if search.cut and search.deadline == budget.deadline:
        budget.mark_cut()
    elif search.cut or search.ran_out:  # its share of the budget (work, or the clock) ended it
        budget.mark_ran_out()
    load = measure_bins(found, k, items, cap, max_count)
    if load is not None and load < best.max_load:
        best.bins, best.max_load, best.method = found, load, best.method + "+groups"
    return best
