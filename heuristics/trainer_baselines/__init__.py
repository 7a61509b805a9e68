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

The algorithms live in this package's private modules, one implementation each, which the step
planner's trainer starts (:mod:`seqpart.solver.step.starts.trainers`) call too: ``_packing``
(first-fit by the heuristics' max-tree, the heaviest split from a heap, equal-count dealing,
slime's micro-batches), ``_prime_rl`` (prime-rl's micro-batches and its resumable swap
refinement) and ``_verl`` (verl's ranks, split and order, and its retry, which skips the counts
below a rank's bin-packing bound and stops a count at the first rank that breaks the cap).
Their list-level entry points are re-exported here, the one import site for the solver.

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

from ..inputs import as_lengths, as_positive_int
from ._packing import (
    Schedule,
    deal,
    slime_bins,
    slime_kk_ranks,
    slime_rr_ranks,
)
from ._prime_rl import PrimeRefinement, prime_rl_bins, refine_by_swaps
from ._verl import (
    VerlRetry,
    split_work,
    verl_first_count,
    verl_order,
    verl_ranks,
    verl_retry_schedule,
    verl_split,
)

__all__ = [
    "TRAINER_SCHEDULERS",
    "PrimeRefinement",
    "VerlRetry",
    "deal",
    "get_trainer_scheduler",
    "megatron",
    "megatron_schedule",
    "prime_rl",
    "prime_rl_bins",
    "refine_by_swaps",
    "slime_bins",
    "slime_kk",
    "slime_kk_ranks",
    "slime_rr",
    "slime_rr_ranks",
    "split_work",
    "verl",
    "verl_order",
    "verl_retry",
]

TrainerScheduler = Callable[..., Schedule]


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


# --- slime ---------------------------------------------------------------------------------


def slime_rr(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """slime's dynamic schedule, ranks by strided round robin (``balance_data`` off).

    Micro-batch b goes to rank ``b % dp_size``; ``costs`` play no part.
    """
    tokens, _cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    bins = slime_bins(tokens, dp_size, cap, multiple_of)
    return deal(bins, slime_rr_ranks(len(bins), dp_size))


def slime_kk(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """slime's dynamic schedule, ranks by equal-count Karmarkar-Karp on micro-batch cost
    (``balance_data`` on; slime's cost is its forward-FLOPs estimate, here ``costs``).

    Each rank runs its micro-batches in micro-batch order.
    """
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    bins = slime_bins(tokens, dp_size, cap, multiple_of)
    return deal(bins, slime_kk_ranks(bins, cost, dp_size))


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
    bins = prime_rl_bins(tokens, cost, dp_size, cap, multiple_of)
    return PrimeRefinement.deal(bins, cost, dp_size).refine()[0]


# --- verl ----------------------------------------------------------------------------------


def verl(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """verl's schedule: sequences to ranks by equal-count KK, then per rank KK into the
    all-reduced MAX of ``ceil(tokens / cap)`` micro-batches, in verl's order. The cap is never
    checked, so a micro-batch may exceed it; a rank with fewer sequences than the agreed count
    gets fewer micro-batches (verl asserts there)."""
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    ranks = verl_ranks(cost, dp_size)
    k = verl_first_count(tokens, ranks, cap, multiple_of)
    return [verl_order(verl_split(r, cost, k), cost) for r in ranks]


def verl_retry(
    lengths: Any, dp_size: int, cap: int | None, *, costs: Any | None = None, multiple_of: int = 1
) -> Schedule:
    """verl with its cap-respecting retry: while a micro-batch of any rank holds more than
    ``cap`` tokens (a lone sequence over the cap excepted), every rank re-partitions with the
    next count (``+ multiple_of``, the decision all-reduced so the counts stay equal), up to the
    smallest rank's sequence count. Whatever the last try gives is returned, raw, in verl's
    order."""
    tokens, cost, dp_size, cap, multiple_of = _prepare(lengths, dp_size, cap, costs, multiple_of)
    schedule = verl_retry_schedule(tokens, cost, dp_size, cap, multiple_of)
    return [verl_order(rank, cost) for rank in schedule]


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
