"""The trainers' own step schedulers, re-implemented from their published behaviour.

These are the baselines that step planning is measured against, and starting points for it.
Each one is written here from a reading of what the trainer does (no code is taken from them):

- ``slime_rr`` / ``slime_kk`` (slime ``build_dp_schedule``, dynamic batch size): first-fit in
  arrival order under the cap, then split the heaviest micro-batch (by tokens) in two until the
  count is a multiple of ``dp_size * multiple_of``, then deal micro-batches to ranks by strided
  round robin (``slime_rr``) or by equal-count Karmarkar-Karp on micro-batch cost (``slime_kk``,
  slime's ``balance_data``).
- ``prime_rl`` (prime-rl ``prepare_batch``): first-fit decreasing under the cap, split the
  heaviest micro-batch (by cost) until the count is a multiple of ``dp_size``, deal them by
  equal-count Karmarkar-Karp on cost, then refine by the best pairwise swap of micro-batches
  between ranks until no swap lowers (max rank cost, spread).
- ``verl`` (verl ``_balance_batch`` + ``rearrange_micro_batches``): split the sequences over ranks
  by equal-count Karmarkar-Karp on cost; each rank asks for ``ceil(tokens / cap)`` micro-batches,
  the ranks agree on the MAX (an all-reduce), and each rank splits its own sequences into that
  many by Karmarkar-Karp on cost, ignoring the cap. ``verl_retry`` adds the later cap-respecting
  retry: while any micro-batch of any rank is over the cap, every rank tries one more.
- ``megatron`` (Megatron-LM ``DpBalancedScheduler``): next-fit in arrival order under the cap,
  then peel the last sequence off the last multi-sequence micro-batches into micro-batches of
  their own until the count is a multiple of ``dp_size * multiple_of``; rank r gets micro-batches
  r, r + dp, r + 2 dp, ...

Every function has the signature ``fn(lengths, dp_size, cap, *, costs=None, multiple_of=1)`` and
returns ``schedule[rank][micro_batch] = [global indices]``. ``costs`` is the per-sequence cost the
trainer balances (its FLOPs estimate; default: the token count). The cap is always on tokens.

The output is *raw*, as the trainer would run it: a micro-batch may be over the cap, and when a
trainer cannot reach equal counts (too few sequences to split, or an all-reduced count above
what a rank can fill) the rank simply gets fewer micro-batches (where the trainer would crash,
hang or pad with a dummy). Those are what the study counts; score schedules with
:func:`seqpart.solver.step.step_time` and check them with the validator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._karmarkar_karp import karmarkar_karp_lists
from .inputs import as_lengths, as_positive_int, order_desc

__all__ = [
    "TRAINER_SCHEDULERS",
    "get_trainer_scheduler",
    "megatron",
    "prime_rl",
    "refine_by_swaps",
    "slime_kk",
    "slime_rr",
    "verl",
    "verl_retry",
]

Schedule = list[list[list[int]]]
TrainerScheduler = Callable[..., Schedule]


# --- shared pieces -------------------------------------------------------------------------


def _prepare(
    lengths: Any, dp_size: Any, cap: Any, costs: Any, multiple_of: Any
) -> tuple[list[int], list[int], int, int | None, int]:
    """Validate the common arguments; plain Python ints so every sum is exact."""
    tokens = as_lengths(lengths)
    n = len(tokens)
    dp_size = as_positive_int(dp_size, "dp_size")
    cap = as_positive_int(cap, "cap", allow_none=True)
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    cost = tokens if costs is None else as_lengths(costs, "costs")
    if len(cost) != n:
        raise ValueError(f"costs has {len(cost)} entries but lengths has {n}: pass one per sequence")
    if n < dp_size:
        raise ValueError(
            f"{n} sequences cannot give each of dp_size={dp_size} ranks a micro-batch: "
            f"use dp_size <= {n} or add samples"
        )
    return tokens.tolist(), cost.tolist(), dp_size, cap, multiple_of


def _first_fit_open(tokens: list[int], cap: int | None, order: Any) -> list[list[int]]:
    """First-fit opening micro-batches as needed (``first_fit(lengths, None, cap)``, same
    result), with a vectorised scan of the open ones: trainers run it over thousands of
    sequences and hundreds of micro-batches."""
    if cap is None:
        return [list(order)]
    bins: list[list[int]] = []
    room = np.zeros(len(tokens), dtype=np.int64)  # never more bins than sequences
    for i in order:
        t = tokens[i]
        fits = np.flatnonzero(room[: len(bins)] >= t) if bins else ()
        if len(fits):
            b = int(fits[0])
        else:
            b = len(bins)
            bins.append([])
            room[b] = cap  # a sequence over the cap goes alone: its room goes negative
        bins[b].append(i)
        room[b] -= t
    return bins


def _round_up(k: int, multiple: int) -> int:
    return max(-(-k // multiple) * multiple, multiple)


def _split_heaviest(bins: list[list[int]], target: int, weight: list[int]) -> None:
    """Grow ``bins`` in place to ``target`` micro-batches: split the heaviest multi-sequence
    micro-batch (ties: the later one) in two by LPT on ``weight``; the first half keeps its
    place, the second is appended. Stops early when every micro-batch is a single sequence.

    Both halves are subsets of the split micro-batch, so splitting never creates a new cap
    violation; that is why slime and prime-rl grow the count this way.
    """
    while len(bins) < target:
        best, best_at = -1, -1
        for at, members in enumerate(bins):
            if len(members) > 1:
                w = sum(weight[i] for i in members)
                if w >= best:
                    best, best_at = w, at
        if best_at < 0:
            return
        halves: tuple[list[int], list[int]] = ([], [])
        sums = [0, 0]
        for i in sorted(bins[best_at], key=lambda i: -weight[i]):  # stable: ties keep bin order
            h = 0 if sums[0] <= sums[1] else 1
            halves[h].append(i)
            sums[h] += weight[i]
        bins[best_at] = halves[0]
        bins.append(halves[1])


def _equal_count_kk(weights: list[int], k: int) -> list[list[int]]:
    """Equal-count Karmarkar-Karp: ``len(weights)`` (a multiple of k) items into k groups of
    the same size, balancing group sums; groups hold item positions, ascending."""
    n = len(weights)
    return karmarkar_karp_lists(list(weights), [1] * n, k, n // k)


def _deal_equal_count(weights: list[int], dp_size: int, pad_weight: int) -> list[list[int]]:
    """Equal-count KK of micro-batches over ranks. When the count is not a multiple of dp_size
    (the split ran out of sequences) the trainer pads with dummy micro-batches of
    ``pad_weight``; they take part in the balancing and are dropped from the result, so those
    ranks come out with fewer micro-batches."""
    k = len(weights)
    padded = list(weights) + [pad_weight] * (-k % dp_size)
    return [[b for b in group if b < k] for group in _equal_count_kk(padded, dp_size)]


def _schedule(bins: list[list[int]], by_rank: list[list[int]]) -> Schedule:
    return [[list(bins[b]) for b in ranks] for ranks in by_rank]


# --- slime ---------------------------------------------------------------------------------


def _slime_pack(tokens: list[int], dp_size: int, cap: int | None, multiple_of: int) -> list[list[int]]:
    """First-fit in arrival order (a sequence over the cap alone), then split to the multiple."""
    bins = _first_fit_open(tokens, cap, range(len(tokens)))
    _split_heaviest(bins, _round_up(len(bins), dp_size * multiple_of), tokens)
    return bins


def slime_rr(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """slime's dynamic schedule, ranks by strided round robin (``balance_data`` off).

    Micro-batch b goes to rank ``b % dp_size``; ``costs`` play no part.
    """
    tokens, _cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    bins = _slime_pack(tokens, dp_size, cap, multiple_of)
    by_rank = [list(range(r, len(bins), dp_size)) for r in range(dp_size)]
    return _schedule(bins, by_rank)


def slime_kk(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """slime's dynamic schedule, ranks by equal-count Karmarkar-Karp on micro-batch cost
    (``balance_data`` on; slime's cost is its forward-FLOPs estimate, here ``costs``).

    Each rank runs its micro-batches in micro-batch order.
    """
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    bins = _slime_pack(tokens, dp_size, cap, multiple_of)
    weights = [sum(cost[i] for i in b) for b in bins]
    return _schedule(bins, _deal_equal_count(weights, dp_size, 0))


# --- prime-rl ------------------------------------------------------------------------------


def prime_rl(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """prime-rl's schedule: FFD, split the heaviest by cost, equal-count KK, swap refinement.

    prime-rl itself rounds the count up to a multiple of the number of ranks only; here it is
    rounded to ``dp_size * multiple_of`` so the schedule can be compared under ``multiple_of``.
    When the split runs out of sequences prime-rl pads with copies of the first micro-batch
    (zero loss); they are balanced with that weight and dropped here.
    """
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    bins = _first_fit_open(tokens, cap, order_desc(tokens))
    _split_heaviest(bins, _round_up(len(bins), dp_size * multiple_of), cost)
    weights = [sum(cost[i] for i in b) for b in bins]
    k = len(weights)
    padded = weights + [weights[0]] * (-k % dp_size)
    groups = refine_by_swaps(padded, _equal_count_kk(padded, dp_size))[0]
    return _schedule(bins, [sorted(b for b in g if b < k) for g in groups])


#: A swap step's fixed cost (its numpy calls, ~50-100 us), counted as this many pairs scored.
_STEP_PAIRS = 2000


def refine_by_swaps(
    weights: list[int], groups: list[list[int]], work_budget: int | None = None,
    deadline: float | None = None,
) -> tuple[list[list[int]], int, str]:
    """prime-rl's refinement: while some swap of two items of different groups lowers
    (largest group sum, largest - smallest), take the best, ties to the smallest
    (group, group, position, position) with the lower group first. Stops when ``work_budget``
    pairs have been scored (None: no limit) or at ``deadline``. Returns (groups, work,
    "done" / "work budget" / "clock").

    Only the pairs that lower that key are scored, which finds the same swap as scoring all
    of them: with ``d = w_x - w_y`` (x in group c, y in group b), a swap lowers the key iff c
    is the one group at the maximum and ``0 < d < top - S_b``, or c is the one group at the
    minimum and ``0 < -d < S_b - bottom``. With the items sorted by weight, each x's partners
    are a window of that order (``_pairs``), so a step costs the pairs near the balance, not
    all pairs."""
    k = len(groups)
    if k < 2:
        return [list(g) for g in groups], 0, "done"
    dtype: Any = np.int64 if sum(weights) < 2**62 else object
    w = np.asarray(weights, dtype=dtype)
    by_weight = np.argsort(w, kind="stable")
    sorted_w = w[by_weight]
    slot_item = np.asarray([i for g in groups for i in g], dtype=np.int64)
    slot_group = np.asarray([r for r, g in enumerate(groups) for _ in g], dtype=np.int64)
    slot_pos = np.asarray([p for g in groups for p in range(len(g))], dtype=np.int64)
    item_slot = np.empty(len(weights), dtype=np.int64)
    item_slot[slot_item] = np.arange(len(slot_item))
    first = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64).tolist()
    sums = np.asarray([sum(weights[i] for i in g) for g in groups], dtype=dtype)
    work = 0
    while True:
        if work_budget is not None and work >= work_budget:
            return _groups(slot_item, first, k), work, "work budget"
        if deadline is not None and time.perf_counter() > deadline:
            return _groups(slot_item, first, k), work, "clock"
        found, scored = _best_swap(sums, w, sorted_w, by_weight, slot_item, slot_group, slot_pos,
                                   item_slot, first)
        work += scored + _STEP_PAIRS
        if found is None:
            return _groups(slot_item, first, k), work, "done"
        x, y = found
        moved = w[slot_item[x]] - w[slot_item[y]]
        sums[slot_group[x]] -= moved
        sums[slot_group[y]] += moved
        slot_item[x], slot_item[y] = slot_item[y], slot_item[x]
        item_slot[slot_item[x]], item_slot[slot_item[y]] = x, y


def _best_swap(
    sums: np.ndarray, w: np.ndarray, sorted_w: np.ndarray, by_weight: np.ndarray,
    slot_item: np.ndarray, slot_group: np.ndarray, slot_pos: np.ndarray, item_slot: np.ndarray,
    first: list[int],
) -> tuple[tuple[int, int] | None, int]:
    """The swap (slot x, slot y) :func:`refine_by_swaps` takes next, or None; and the pairs
    scored."""
    by_sum = np.argsort(sums, kind="stable").tolist()
    ranked = [sums[r] for r in by_sum]  # ascending (numpy scalars or exact ints)
    top, bottom = ranked[-1], ranked[0]
    current = (top, top - bottom)
    scored = 0
    best: tuple[Any, tuple[int, int, int, int], int, int] | None = None
    for c, at_top in ((by_sum[-1], True), (by_sum[0], False)):
        unique = ranked[-2] != top if at_top else ranked[1] != bottom
        if not unique or first[c] == first[c + 1]:
            continue
        mine = slot_item[first[c] : first[c + 1]]
        # The widest window over every partner group; each pair is then held to its own group.
        reach = top - bottom
        xs, ys = _pairs(w[mine], sorted_w, reach, at_top)
        scored += len(xs) + len(mine)
        if not len(xs):
            continue
        y_slot = item_slot[by_weight[ys]]
        grp = slot_group[y_slot]
        d = w[mine[xs]] - sorted_w[ys]
        room = (top - sums[grp]) if at_top else (sums[grp] - bottom)
        ok = (grp != c) & ((d < room) if at_top else (-d < room))
        if not ok.any():
            continue
        xs, y_slot, grp, d = xs[ok], y_slot[ok], grp[ok], d[ok]
        # The max and min of the group sums other than c and the partner's group b.
        others = by_sum[:-1] if at_top else by_sum[1:]
        hi1, hi2 = others[-1], others[-2] if len(others) > 1 else -1
        lo1, lo2 = others[0], others[1] if len(others) > 1 else -1
        rest_hi = _either(grp == hi1, sums[hi2] if hi2 >= 0 else 0, sums[hi1], sums.dtype)
        rest_lo = _either(grp == lo1, sums[lo2] if lo2 >= 0 else sums.sum(), sums[lo1], sums.dtype)
        new_c, new_b = sums[c] - d, sums[grp] + d
        hi = np.maximum(np.maximum(new_c, new_b), rest_hi)
        lo = np.minimum(np.minimum(new_c, new_b), rest_lo)
        key_hi = hi.min()
        at = np.flatnonzero(hi == key_hi)
        spread = (hi - lo)[at]
        key = (key_hi, spread.min())
        if key >= current or (best is not None and key > best[0]):
            continue
        tied = at[spread == spread.min()]
        b, r, pb = grp[tied], xs[tied], slot_pos[y_slot[tied]]
        low = b < c  # the lower group comes first in the tie order
        j = np.lexsort((np.where(low, r, pb), np.where(low, pb, r), np.maximum(b, c),
                        np.minimum(b, c)))[0]
        order = (min(c, int(b[j])), max(c, int(b[j])), *((int(pb[j]), int(r[j])) if low[j]
                                                         else (int(r[j]), int(pb[j]))))
        if best is None or (key, order) < best[:2]:
            best = (key, order, first[c] + int(r[j]), int(y_slot[tied[j]]))
    return (None if best is None else (best[2], best[3])), scored


def _either(mask: np.ndarray, yes: Any, no: Any, dtype: Any) -> np.ndarray:
    """``np.where`` for two scalars that keeps ``dtype`` (object: exact Python ints)."""
    out = np.full(len(mask), no, dtype=dtype)
    out[mask] = yes
    return out


def _pairs(mine_w: np.ndarray, sorted_w: np.ndarray, reach: Any, at_top: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    """(index into mine, position in the weight order) of every item whose weight is within
    ``(w - reach, w)`` (``at_top``) or ``(w, w + reach)`` of one of mine."""
    if at_top:
        lo = np.searchsorted(sorted_w, mine_w - reach, side="right")
        hi = np.searchsorted(sorted_w, mine_w, side="left")
    else:
        lo = np.searchsorted(sorted_w, mine_w, side="right")
        hi = np.searchsorted(sorted_w, mine_w + reach, side="left")
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    xs = np.repeat(np.arange(len(mine_w)), counts)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return xs, (np.arange(total) + starts).astype(np.int64)


def _groups(slot_item: np.ndarray, first: list[int], k: int) -> list[list[int]]:
    return [slot_item[first[r] : first[r + 1]].tolist() for r in range(k)]


# --- verl ----------------------------------------------------------------------------------


def _verl_split_ranks(cost: list[int], dp_size: int) -> list[list[int]]:
    """verl ``_balance_batch``: equal-count KK of the sequences over ranks on their cost
    (verl's workload estimate). A batch that does not divide evenly is padded with zero-cost
    placeholders, dropped afterwards (ranks then differ by one sequence)."""
    n = len(cost)
    padded = list(cost) + [0] * (-n % dp_size)
    return [[i for i in g if i < n] for g in _equal_count_kk(padded, dp_size)]


def _verl_rank_micro_batches(members: list[int], cost: list[int], k: int) -> list[list[int]]:
    """One rank's ``rearrange_micro_batches``: KK on cost into k micro-batches (the cap is not
    looked at), heaviest first, then reordered so the light ones sit at both ends (verl's
    choice, to shorten the pipeline warm-up and cool-down)."""
    sub = [cost[i] for i in members]
    bins = karmarkar_karp_lists(sub, [1] * len(sub), k, None)
    micro = [sorted(members[j] for j in b) for b in bins if b]  # k > sequences: fewer, raw
    loads = [sum(cost[i] for i in b) for b in micro]
    order = sorted(range(len(micro)), key=lambda b: (loads[b], micro[b][0]), reverse=True)
    order = order[::2][::-1] + order[1::2]
    return [micro[b] for b in order]


def _verl_count(tokens: list[int], ranks: list[list[int]], cap: int | None, multiple_of: int) -> int:
    """Each rank's ``min(sequences, ceil(tokens / cap))``, the all-reduce MAX, rounded up to
    ``multiple_of`` (verl's ``num_batches_divided_by``)."""
    local = [
        min(len(r), 1 if cap is None else -(-sum(tokens[i] for i in r) // cap)) for r in ranks
    ]
    return _round_up(max(local), multiple_of)


def verl(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """verl's schedule: sequences to ranks by equal-count KK, then per rank KK into the
    all-reduced MAX of ``ceil(tokens / cap)`` micro-batches. The cap is never checked, so a
    micro-batch may exceed it; a rank with fewer sequences than the agreed count gets fewer
    micro-batches (verl asserts there)."""
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    ranks = _verl_split_ranks(cost, dp_size)
    k = _verl_count(tokens, ranks, cap, multiple_of)
    return [_verl_rank_micro_batches(r, cost, k) for r in ranks]


def verl_retry(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """verl with its cap-respecting retry: while a micro-batch of any rank holds more than
    ``cap`` tokens (a lone sequence over the cap excepted), every rank re-partitions with the
    next count (``+ multiple_of``, the decision all-reduced so the counts stay equal), up to the
    smallest rank's sequence count. Whatever the last try gives is returned, raw."""
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    ranks = _verl_split_ranks(cost, dp_size)
    k = _verl_count(tokens, ranks, cap, multiple_of)
    ceiling = min(len(r) for r in ranks)
    while True:
        schedule = [_verl_rank_micro_batches(r, cost, k) for r in ranks]
        over = cap is not None and any(
            len(b) > 1 and sum(tokens[i] for i in b) > cap for rank in schedule for b in rank
        )
        if not over or k + multiple_of > ceiling:
            return schedule
        k += multiple_of


# --- Megatron-LM ---------------------------------------------------------------------------


def megatron(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """Megatron-LM's ``DpBalancedScheduler``: next-fit in arrival order under the cap, then,
    walking back from the last micro-batch, move the last sequence of each multi-sequence one
    into a new micro-batch of its own until the count is a multiple of ``dp_size *
    multiple_of``; micro-batch b goes to rank ``b % dp_size``. ``costs`` play no part."""
    tokens, _cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    return megatron_schedule(tokens, dp_size, cap, multiple_of)


def megatron_schedule(tokens: list[int], dp_size: int, cap: int | None, multiple_of: int) -> Schedule:
    """:func:`megatron` on checked inputs (plain ints): also the step planner's start."""
    bins: list[list[int]] = []
    room = 0
    for i, t in enumerate(tokens):
        if bins and (cap is None or t <= room):
            bins[-1].append(i)
            room -= t
        else:
            bins.append([i])
            room = (cap - t) if cap is not None else 0
    align = dp_size * multiple_of
    missing = -len(bins) % align
    at = len(bins) - 1
    while missing > 0 and at > 0:  # Megatron asserts when it runs out; raw: stop short
        if len(bins[at]) > 1:
            bins.append([bins[at].pop()])
            missing -= 1
        else:
            at -= 1
    return [[bins[b] for b in range(r, len(bins), dp_size)] for r in range(dp_size)]


TRAINER_SCHEDULERS: dict[str, TrainerScheduler] = {
    "slime_rr": slime_rr,
    "slime_kk": slime_kk,
    "prime_rl": prime_rl,
    "verl": verl,
    "verl_retry": verl_retry,
    "megatron": megatron,
}


def get_trainer_scheduler(name: str) -> TrainerScheduler:
    """The trainer scheduler registered under ``name`` (see ``TRAINER_SCHEDULERS``)."""
    try:
        return TRAINER_SCHEDULERS[name]
    except KeyError:
        raise ValueError(
            f"unknown trainer scheduler {name!r}: choose one of {', '.join(sorted(TRAINER_SCHEDULERS))}"
        ) from None
