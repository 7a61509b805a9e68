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

from collections.abc import Callable
from typing import Any

import numpy as np

from seqpart.heuristics.inputs import as_lengths, as_positive_int, order_desc
from seqpart.heuristics.karmarkar_karp import _karmarkar_karp_lists

__all__ = [
    "TRAINER_SCHEDULERS",
    "get_trainer_scheduler",
    "megatron",
    "prime_rl",
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
    return _karmarkar_karp_lists(list(weights), [1] * n, k, n // k)


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
    groups = _refine_by_swaps(padded, _equal_count_kk(padded, dp_size))
    return _schedule(bins, [sorted(b for b in g if b < k) for g in groups])


def _refine_by_swaps(weights: list[int], groups: list[list[int]]) -> list[list[int]]:
    """Repeat the best swap of two items in different groups while it lowers (max group sum,
    max - min) lexicographically; ties go to the first pair in (group a < group b, position in
    a, position in b) order, as a full scan would find it. Every accepted swap strictly lowers
    that pair, so it terminates.

    Only swaps touching the heaviest or the lightest group are scored, which finds the same
    swap as scoring all pairs: a swap lowers the max only if it involves the one group at the
    max, and keeps the max but lowers the spread only if it raises the one group at the min.
    Swapping i (in a) with j (in b) makes the sums ``S_a - d`` and ``S_b + d``, ``d = w_i - w_j``.
    """
    groups = [list(g) for g in groups]
    k = len(groups)
    if k < 2:
        return groups
    dtype: Any = np.int64 if sum(weights) < 2**62 else object  # never an int64 wrap
    w = np.asarray(weights, dtype=dtype)
    # Swaps keep group sizes, so the (group, position) of every slot is fixed: only the item
    # in a slot and the group sums change.
    items = np.asarray([i for g in groups for i in g], dtype=np.int64)
    label = np.asarray([r for r, g in enumerate(groups) for _ in g], dtype=np.int64)
    pos = np.asarray([p for g in groups for p in range(len(g))], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).tolist()
    sums = [sum(weights[i] for i in g) for g in groups]
    total = sum(sums)
    while True:
        top, bottom = max(sums), min(sums)
        best_key = (top, top - bottom)
        focus = [sums.index(v) for v in (top, bottom) if sums.count(v) == 1]
        s_arr = np.asarray(sums, dtype=dtype)
        desc = sorted(range(k), key=lambda r: -sums[r])[:3]
        asc = sorted(range(k), key=lambda r: sums[r])[:3]
        found: list[tuple[tuple[int, int], tuple[int, int, int, int]]] = []
        for c in dict.fromkeys(focus):
            mine = items[start[c] : start[c + 1]]
            if not len(mine):
                continue
            other = label != c
            if not other.any():
                continue
            lab, ps = label[other], pos[other]
            # The max and min over the groups other than c and b, per b (neutral if none).
            hi_rest = [r for r in desc if r != c]
            lo_rest = [r for r in asc if r != c]
            rest_hi = np.full(k, sums[hi_rest[0]] if hi_rest else 0, dtype=dtype)
            rest_hi[hi_rest[0]] = sums[hi_rest[1]] if len(hi_rest) > 1 else 0
            rest_lo = np.full(k, sums[lo_rest[0]] if lo_rest else total, dtype=dtype)
            rest_lo[lo_rest[0]] = sums[lo_rest[1]] if len(lo_rest) > 1 else total
            d = w[mine][:, None] - w[items[other]][None, :]
            new_c = sums[c] - d
            new_b = s_arr[lab][None, :] + d
            hi = np.maximum(np.maximum(new_c, new_b), rest_hi[lab][None, :])
            lo = np.minimum(np.minimum(new_c, new_b), rest_lo[lab][None, :])
            best_hi = hi.min()
            at = np.flatnonzero(hi.ravel() == best_hi)
            spread = (hi - lo).ravel()[at]
            low = spread.min()
            key = (int(best_hi), int(low))
            if key >= best_key:
                continue
            at = at[spread == low]
            rows, cols = at // len(lab), at % len(lab)
            for r, col in zip(rows.tolist(), cols.tolist(), strict=True):
                b, pb = int(lab[col]), int(ps[col])
                order = (c, b, r, pb) if c < b else (b, c, pb, r)
                found.append((key, order))
        if not found:
            return [items[start[r] : start[r + 1]].tolist() for r in range(k)]
        _, (a, b, i, j) = min(found)
        x, y = start[a] + i, start[b] + j
        moved = weights[int(items[x])] - weights[int(items[y])]
        sums[a] -= moved
        sums[b] += moved
        items[x], items[y] = items[y], items[x]


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
    bins = _karmarkar_karp_lists(sub, [1] * len(sub), k, None)
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
