"""Data-parallel planning: ranks agree on one micro-batch count, or the whole step is planned once.

Every data-parallel (DP) rank must run the same number of micro-batches, or the collectives in
the backward pass deadlock. Two ways to get there:

* :func:`partition_across_ranks` (per-rank agreement): each rank finds the smallest count it
  needs for its own sequences, the group takes the MAX, rounds it **up** to ``multiple_of``, and
  every rank splits into exactly that count with :func:`~seqpart.solver.partition`, so no rank
  gets an empty or over-cap micro-batch (the seed issue's ``torch.cat([])`` crash).
* :func:`plan_global` / :func:`plan_global_across_ranks` (global plan): assign sequences to ranks
  and micro-batches together, so no rank is padded out with micro-batches it does not need.

Failure is collective. Each rank does its local work inside ``try``, then every rank exchanges a
small status row (rank, error code, operation tag, sample count, needed count, cap, multiple_of,
message bytes) in one ``all_gather``, so all ranks see the same facts and raise the same
:class:`DistributedPlanError`; no rank is left waiting in a collective. Every collective here
opens with that same fixed-size exchange, so ranks that called different ones (the tag differs)
fail together there (the protocol itself is :mod:`seqpart.solver.distributed.collective`). A rank that
never calls cannot be seen: the others wait for ``timeout``
(each collective is waited on with it) or else the process group's own timeout.

torch is optional: it is imported inside the functions. Without an initialised process group
(and ``group=None``) the functions plan for a group of one, so the same call works in a
single-process run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...heuristics.inputs import as_lengths, as_positive_int
from .._partition import partition
from ..errors import DistributedPlanError
from ..plan import Plan
from ..problem import check_groups
from ..step import order_for_pipeline, plan_global
from .collective import (
    _K_NEEDED,
    _N,
    _OK,
    _OP_GLOBAL,
    _OP_PARTITION,
    _OP_STEP,
    _OPS,
    _OVER_CAP,
    _PLAN_FAILED,
    _agreed_count,
    _args_digest,
    _args_mismatch_error,
    _call_mismatch_error,
    _cap_code,
    _check_fits,
    _check_inputs,
    _classify,
    _count_code,
    _failure_error,
    _make_comm,
    _mismatch_error,
    _raise_same,
    _row,
)

__all__ = [
    "DistributedPlanError",
    "GlobalPlan",
    "order_for_pipeline",
    "partition_across_ranks",
    "plan_global",
    "plan_global_across_ranks",
    "plan_step_across_ranks",
    "StepSchedule",
]


#: Arguments that index a rank's own sequences: each rank passes its own, so they are not
#: compared across ranks (the collective planners offset them into the global indices).
PER_RANK_ARGUMENTS = frozenset({"groups"})


def _shared(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments that must match on every rank."""
    return {key: value for key, value in kwargs.items() if key not in PER_RANK_ARGUMENTS}


def _group_ids(groups: Any, n: int) -> np.ndarray:
    """This rank's groups, checked, as one id per local sequence (0: in no group)."""
    ids = np.zeros(n, dtype=np.int64)
    for g, members in enumerate(check_groups(groups, n, set())):
        ids[list(members)] = g + 1
    return ids


def _global_groups(ids: list[np.ndarray], offsets: list[int]) -> list[list[int]]:
    """Every rank's groups in the global indices (rank r's sequence j is ``offsets[r] + j``)."""
    out: list[list[int]] = []
    for rank_ids, offset in zip(ids, offsets, strict=True):
        by_id: dict[int, list[int]] = {}
        for j in np.flatnonzero(rank_ids).tolist():
            by_id.setdefault(int(rank_ids[j]), []).append(offset + j)
        out.extend(by_id[g] for g in sorted(by_id))
    return out


class _GatheredIndices:
    """The global indices of a batch gathered from every rank, where rank r's local sequence j
    is global index ``offsets[r] + j``: :class:`GlobalPlan` and :class:`StepSchedule` (frozen
    dataclasses that hold the fields) map them back with the one :meth:`owner`."""

    offsets: list[int]
    lengths: list[int]

    def owner(self, index: int) -> tuple[int, int]:
        """(group rank that holds global sequence ``index`` now, its local index there)."""
        n = len(self.lengths)
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int (a global sequence index), got {index!r} "
                            f"({type(index).__name__})")
        index = int(index)
        if not 0 <= index < n:
            raise IndexError(f"sequence {index} is outside range(0, {n})")
        r = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return r, index - self.offsets[r]


@dataclass(frozen=True)
class GlobalPlan(_GatheredIndices):
    """The global plan as every rank receives it from :func:`plan_global_across_ranks`.

    ``plans[r]`` is rank r's plan (group-rank order); its bins hold indices into ``lengths``, the
    concatenation of every rank's local lengths in group-rank order. Rank r's local sequence j
    is global index ``offsets[r] + j``; :meth:`owner` maps back. Moving each sequence to the rank
    that trains it is the caller's job (the plan only says where it goes).
    """

    plans: list[Plan]
    offsets: list[int]
    lengths: list[int]
    rank: int

    @property
    def my_plan(self) -> Plan:
        """This rank's plan."""
        return self.plans[self.rank]


# --------------------------------------------------------------------------- per-rank agreement


def partition_across_ranks(
    local_lengths: Any,
    cap: int | None,
    *,
    group: Any = None,
    multiple_of: int = 1,
    min_k: int = 1,
    time_limit: float = 0.1,
    timeout: float | None = None,
    **partition_kwargs: Any,
) -> Plan:
    """Split this rank's sequences into the micro-batch count all ranks of ``group`` agree on.

    Every rank computes the smallest count it can find for its own lengths
    (``partition(local_lengths, k=None, cap)``), the group takes the MAX and rounds it **up** to a
    multiple of ``multiple_of`` (virtual pipeline stages need a multiple of
    ``microbatch_group_size_per_vp_stage``; rounding down breaks the cap), and every rank splits
    into exactly that count: no empty micro-batch, none over the cap.

    Must be called by every rank of the group (it runs two small ``all_gather`` collectives on
    the group's device: CPU for gloo, the current CUDA device for NCCL). Without an initialised
    process group and with ``group=None`` it plans for a group of one.

    Args:
        local_lengths: this rank's token count per sequence (list, numpy array or tensor).
        cap: max tokens per micro-batch (``max_tokens_per_gpu * cp_size``); must be the same on
            every rank. None means no cap (then the count is ``multiple_of``).
        group: the data-parallel process group (None: the default group).
        multiple_of: the agreed count is rounded up to a multiple of this; same on every rank.
        min_k: the agreed count is at least this (e.g. the pipeline depth, so every stage has
            work); same on every rank.
        time_limit: seconds for each of the (at most two) local ``partition`` calls.
        timeout: seconds each collective waits for the other ranks before this rank raises
            ``DistributedPlanError(code="timeout")``; None: the process group's own timeout
            (``init_process_group(timeout=...)``; NCCL may abort the process then).
        **partition_kwargs: passed to :func:`~seqpart.solver.partition` (cost, oversize,
            equal_size, groups, engine, options); ``k`` is chosen here. ``groups`` indexes this
            rank's own ``local_lengths`` and may differ between ranks; every other argument
            (``cap``, ``multiple_of``, ``min_k``, cost, oversize, equal_size, engine, options)
            must match on every rank ("mismatched_args" otherwise).

    Returns:
        This rank's :class:`Plan` (indices into ``local_lengths``); ``k`` is the agreed count,
        ``k_status`` is "given", and ``notes`` record how the count was agreed.

    Raises:
        DistributedPlanError: on every rank, with the same message, when any rank fails: bad or
            over-cap input, no local plan, ranks passing different ``cap``/``multiple_of``, a rank
            with fewer sequences than the agreed count, or no plan at the agreed count.
        ValueError: ``group`` given without an initialised process group (raised before any
            collective, so on every rank alike).
    """
    comm = _make_comm(group, _OP_PARTITION, timeout)
    cap_code, mult_code, min_k_code = _cap_code(cap), _count_code(multiple_of), _count_code(min_k)
    local = _smallest_local_plan(comm, local_lengths, cap, multiple_of, min_k, time_limit, timeout,
                                 partition_kwargs)
    args = _args_digest(_shared(partition_kwargs))
    rows = comm.gather_rows(_row(comm, local.code, local.n, local.k_needed, cap_code, mult_code,
                                 min_k_code, local.text, args))
    agree_error = (
        _call_mismatch_error(rows)
        or _mismatch_error(rows)
        or _args_mismatch_error(
            rows, "partition arguments (cost, oversize, equal_size, engine, options, ...)",
            "each rank plans its own sequences at the agreed count, but these arguments shape "
            "every rank's plan alike: derive them from the shared config (groups, which index a "
            "rank's own sequences, may differ)")
        or _failure_error(rows, comm.size, "find its smallest micro-batch count")
    )
    _raise_same(agree_error, local.error)
    # Every rank now holds the same rows, so the same count and the same verdict.
    k_agreed, note = _agreed_count(rows, comm.size)

    plan: Plan | None = None
    local_error, code, text = None, _OK, ""
    try:
        assert local.plan is not None and local.tokens is not None
        plan = local.plan
        if plan.k != k_agreed:
            plan = partition(local.tokens, k_agreed, cap, time_limit=time_limit, **partition_kwargs)
        plan = dataclasses.replace(
            plan, k_status="given", k_lower_bound=None,
            notes=[*plan.notes, f"{note}; this rank alone needed {local.plan.k}"],
        )
    except Exception as err:  # reported collectively, as above
        local_error, code, text = err, _PLAN_FAILED, str(err)
    rows = comm.gather_rows(_row(comm, code, local.n, k_agreed, cap_code, mult_code, min_k_code, text,
                                 args))
    _raise_same(
        _failure_error(rows, comm.size, f"split into the agreed k={k_agreed} micro-batches"),
        local_error,
    )
    assert plan is not None
    return plan


@dataclass
class _LocalOutcome:
    """One rank's first step, success or failure, as the status exchange reports it."""

    tokens: np.ndarray | None = None
    plan: Plan | None = None
    error: Exception | None = None
    code: int = _OK
    n: int = 0
    k_needed: int = 0
    text: str = ""


def _smallest_local_plan(
    comm: Any, local_lengths: Any, cap: Any, multiple_of: Any, min_k: Any, time_limit: float,
    timeout: Any, partition_kwargs: dict[str, Any],
) -> _LocalOutcome:
    """This rank's checks and its smallest count; any failure is caught, since it must reach the
    status exchange or the other ranks would wait for this one."""
    out = _LocalOutcome()
    try:
        _check_inputs(comm, timeout)
        out.tokens = tokens = as_lengths(local_lengths, "local_lengths")
        out.n = len(tokens)
        for value, name in ((cap, "cap"), (multiple_of, "multiple_of"), (min_k, "min_k")):
            _check_fits(value, name)
        cap_value = as_positive_int(cap, "cap", allow_none=True)
        as_positive_int(multiple_of, "multiple_of")
        as_positive_int(min_k, "min_k")
        if "k" in partition_kwargs:
            raise TypeError("partition_across_ranks chooses k itself: drop the k= argument")
        if cap_value is not None and partition_kwargs.get("oversize", "error") == "error":
            too_long = np.flatnonzero(tokens > cap_value)
            if too_long.size:
                i = int(too_long[0])
                out.code = _OVER_CAP
                more = f" (and {too_long.size - 1} more)" if too_long.size > 1 else ""
                raise ValueError(
                    f"sequence {i} has {int(tokens[i])} tokens, over cap={cap_value}{more}: raise "
                    "the cap, truncate or drop it, or pass oversize='alone' to give each such "
                    "sequence a micro-batch of its own"
                )
        out.plan = partition(tokens, None, cap_value, time_limit=time_limit, **partition_kwargs)
        out.k_needed = out.plan.k
    except Exception as err:  # any failure must reach the collective, or peers hang
        out.error = err
        out.code = out.code if out.code != _OK else _classify(err)
        out.text = str(err)
    return out


def _plan_once_across_ranks(
    op: int,
    local_lengths: Any,
    cap: Any,
    group: Any,
    multiple_of: Any,
    timeout: Any,
    planner: Any,
    kwargs: dict[str, Any],
) -> tuple[Any, list[int], np.ndarray, int]:
    """Gather every rank's lengths, run ``planner(lengths, dp_size, per_rank)`` once on group rank 0 and
    hand its result to every rank: ``(result, offsets, lengths, group rank)``.

    Three bounded collectives: the shared status exchange (which also carries the sizes and
    catches mismatched calls and arguments), the padded lengths, and rank 0's result (or its
    error) as one broadcast, so every rank returns the identical result or raises the identical
    error.
    """
    comm = _make_comm(group, op, timeout)
    name = _OPS[op]
    cap_code, mult_code = _cap_code(cap), _count_code(multiple_of)
    tokens = np.zeros(0, dtype=np.int64)
    # plan_global takes per-rank groups (offset below); plan_step takes none, so all must match.
    per_rank = op == _OP_GLOBAL
    ids: np.ndarray | None = None
    local_error: Exception | None = None
    code, text = _OK, ""
    try:
        _check_inputs(comm, timeout)
        for value, arg in ((cap, "cap"), (multiple_of, "multiple_of")):
            _check_fits(value, arg)
        tokens = as_lengths(local_lengths, "local_lengths")
        as_positive_int(cap, "cap", allow_none=True)
        as_positive_int(multiple_of, "multiple_of", allow_none=op == _OP_STEP)
        if per_rank and kwargs.get("groups") is not None:
            ids = _group_ids(kwargs["groups"], len(tokens))
    except Exception as err:  # reported collectively
        local_error, code, text = err, _classify(err), str(err)
    # The row's count field carries how many groups this rank has (its count is not needed).
    n_groups = 0 if ids is None else int(ids.max(initial=0))
    rows = comm.gather_rows(_row(comm, code, len(tokens), n_groups, cap_code, mult_code, 1, text,
                                 _args_digest(_shared(kwargs) if per_rank else kwargs)))
    _raise_same(
        _call_mismatch_error(rows)
        or _mismatch_error(rows)
        or _args_mismatch_error(rows, "planner arguments (cost, pp, vpp, overhead, ...)")
        or _failure_error(rows, comm.size, "share its lengths"),
        local_error,
    )

    sizes = [r[_N] for r in rows]
    lengths = np.concatenate(comm.gather_lengths(tokens, sizes))
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(int).tolist()
    per_rank_kwargs: dict[str, Any] = {}
    if any(r[_K_NEEDED] for r in rows):  # some rank has groups: every rank sends its ids
        local_ids = ids if ids is not None else np.zeros(len(tokens), dtype=np.int64)
        per_rank_kwargs["groups"] = _global_groups(comm.gather_lengths(local_ids, sizes), offsets)

    payload: tuple[str, Any] | None = None
    local_error = None
    if comm.rank == 0:
        try:
            payload = ("ok", planner(lengths, comm.size, per_rank_kwargs))
        except Exception as err:  # every rank must still reach the broadcast
            local_error = err
            payload = ("error", f"{type(err).__name__}: {err}")
    payload = comm.broadcast(payload)
    assert payload is not None
    if payload[0] == "error":
        raise DistributedPlanError(
            f"{name}: the plan for {comm.size} ranks ({len(lengths)} sequences, cap={cap}) "
            f"failed on rank 0: {payload[1]}",
            code="global_failed",
            rank=None,
            numbers={"n_total": len(lengths), "cap": cap, "dp_size": comm.size},
        ) from local_error
    return payload[1], offsets, lengths, comm.rank


def plan_global_across_ranks(
    local_lengths: Any,
    cap: int | None,
    *,
    group: Any = None,
    multiple_of: int = 1,
    time_limit: float = 0.5,
    timeout: float | None = None,
    **partition_kwargs: Any,
) -> GlobalPlan:
    """Gather every rank's lengths, plan the step once on group rank 0, give all ranks that plan.

    The variable-length lists travel as one ``all_gather`` of status rows (which carries the
    sizes) and one ``all_gather`` of the lengths padded to the longest rank; rank 0 runs
    :func:`plan_global` with ``dp_size`` = the group size and broadcasts the result, so every
    rank holds the identical :class:`GlobalPlan` (or raises the identical error). Only rank 0's
    ``time_limit`` is used; ``cap``, ``multiple_of`` and ``partition_kwargs`` must match on every
    rank (checked in the status exchange: "mismatched_args" otherwise), except ``groups``: each
    rank's groups index its own ``local_lengths``, and are offset into the global indices
    (rank r's sequence j is ``offsets[r] + j``) before the plan. ``timeout`` bounds each
    collective as in :func:`partition_across_ranks`.

    Raises:
        DistributedPlanError: on every rank, with the same message: a rank's input is invalid,
            the ranks disagree on ``cap``/``multiple_of`` or called different seqpart
            collectives, or the global plan failed.
    """

    def planner(lengths: np.ndarray, dp_size: int, per_rank: dict[str, Any]) -> list[Plan]:
        return plan_global(lengths, dp_size, cap, multiple_of=multiple_of, time_limit=time_limit,
                           **{**_shared(partition_kwargs), **per_rank})

    plans, offsets, lengths, rank = _plan_once_across_ranks(
        _OP_GLOBAL, local_lengths, cap, group, multiple_of, timeout, planner, partition_kwargs
    )
    return GlobalPlan(plans=plans, offsets=offsets, lengths=lengths.tolist(), rank=rank)


@dataclass(frozen=True)
class StepSchedule(_GatheredIndices):
    """The step schedule as every rank receives it from :func:`plan_step_across_ranks`.

    ``schedule`` is what the step planner returned for the whole step (identical on every
    rank); indices in it are into ``lengths``, the concatenation of every rank's local lengths
    in group-rank order (rank r's local sequence j is global index ``offsets[r] + j``).
    """

    schedule: Any
    offsets: list[int]
    lengths: list[int]
    rank: int


def plan_step_across_ranks(
    local_lengths: Any,
    cap: int | None,
    *,
    group: Any = None,
    multiple_of: int | None = None,
    time_limit: float = 0.5,
    timeout: float | None = None,
    **step_kwargs: Any,
) -> StepSchedule:
    """Gather every rank's lengths, plan the whole step once on group rank 0, give every rank
    the identical schedule (or the identical error), with the same collective-failure guarantees
    as :func:`partition_across_ranks` (bad input, mismatched arguments or calls, ``timeout``).

    The planner is :func:`seqpart.solver.step.plan_step`; ``multiple_of=None`` takes its rule
    (a multiple of ``pp`` when ``vpp > 1``, else 1). Only rank 0's
    ``time_limit`` is used; ``step_kwargs`` (cost, pp, vpp, overhead, ...) must match on every
    rank (checked in the status exchange: "mismatched_args" otherwise).
    """
    from ..step import plan_step

    def planner(lengths: np.ndarray, dp_size: int, per_rank: dict[str, Any]) -> Any:
        return plan_step(lengths, dp_size, cap, multiple_of=multiple_of, time_limit=time_limit,
                         **step_kwargs)

    schedule, offsets, lengths, rank = _plan_once_across_ranks(
        _OP_STEP, local_lengths, cap, group, multiple_of, timeout, planner, step_kwargs
    )
    return StepSchedule(schedule=schedule, offsets=offsets, lengths=lengths.tolist(), rank=rank)
