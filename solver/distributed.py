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
fail together there. A rank that never calls cannot be seen: the others wait for ``timeout``
(each collective is waited on with it) or else the process group's own timeout.

torch is optional: it is imported inside the functions. Without an initialised process group
(and ``group=None``) the functions plan for a group of one, so the same call works in a
single-process run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.heuristics._inputs import as_lengths, as_positive_int

from .partition import partition
from .plan import InfeasibleError, Plan
from .step import order_for_pipeline, plan_global, round_up

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

# Status codes exchanged between ranks (ints, so they travel in an int64 tensor).
_OK = 0
_BAD_INPUT = 1
_OVER_CAP = 2
_INFEASIBLE = 3
_NOT_FOUND = 4
_PLAN_FAILED = 5
_INTERNAL = 6
_CODE_NAMES: dict[int, str] = {
    _OK: "ok",
    _BAD_INPUT: "bad_input",
    _OVER_CAP: "over_cap",
    _INFEASIBLE: "infeasible",
    _NOT_FOUND: "not_found",
    _PLAN_FAILED: "plan_failed",
    _INTERNAL: "internal",
}

# Row layout: fixed header, then the failing rank's message as UTF-8 bytes (zero padded), so
# every rank can raise the exact same message without a pickled object exchange. Every
# collective here starts with this same fixed-size exchange, and its ``_OP`` field names the
# function: ranks that called different seqpart collectives find out in that first exchange,
# before their collective sequences diverge, and all raise the same error.
_RANK, _CODE, _OP, _N, _K_NEEDED, _CAP, _MULTIPLE, _MIN_K = range(8)
_HEADER = 8
_MESSAGE_BYTES = 384
_INT64_MAX = 2**63 - 1

# Operation tags (a marker in the high bits, so a row from anything else is not taken for ours).
_OP_MARK = 0x5E9 << 20
_OPS = {
    _OP_MARK + 1: "partition_across_ranks",
    _OP_MARK + 2: "plan_global_across_ranks",
    _OP_MARK + 3: "plan_step_across_ranks",
}
_OP_PARTITION, _OP_GLOBAL, _OP_STEP = (_OP_MARK + i for i in (1, 2, 3))


class DistributedPlanError(ValueError):
    """Raised with the same message on every rank of the group when any rank cannot plan.

    ``code`` names the problem: "too_few_samples", "mismatched_args", "mismatched_call" (ranks
    called different seqpart collectives), "over_cap", "infeasible", "not_found" (no plan within
    the time limit), "bad_input", "plan_failed", "global_failed", "timeout" (a rank did not join
    within ``timeout``; raised on the ranks that waited), "comm_failed" or "internal". ``rank``
    is the global rank at fault (None when no single rank is), ``numbers`` the figures quoted
    in the message (sample count, needed and agreed counts, caps).
    """

    def __init__(
        self, message: str, *, code: str, rank: int | None = None, numbers: dict[str, Any] | None = None
    ) -> None:
        self.code = code
        self.rank = rank
        self.numbers = dict(numbers or {})
        super().__init__(message)


@dataclass(frozen=True)
class GlobalPlan:
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

    def owner(self, index: int) -> tuple[int, int]:
        """(group rank that holds global sequence ``index`` now, its local index there)."""
        if not 0 <= index < len(self.lengths):
            raise IndexError(f"sequence {index} is outside range(0, {len(self.lengths)})")
        r = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return r, index - self.offsets[r]


# --------------------------------------------------------------------------- communication


class _LocalComm:
    """A group of one: used when torch.distributed is absent or not initialised."""

    rank = 0
    global_rank = 0
    size = 1

    def __init__(self, op: int) -> None:
        self.op = op

    def gather_rows(self, row: list[int]) -> list[list[int]]:
        return [list(row)]

    def gather_lengths(self, local: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
        return [local]

    def broadcast(self, obj: Any) -> Any:
        return obj


class _TorchComm:
    """The collectives this module needs, on the group's device, each bounded by ``timeout``.

    Every collective is issued with ``async_op=True`` and waited on with the timeout (gloo and
    NCCL both honour ``Work.wait(timeout)``), so a rank that never joins makes the waiting ranks
    raise ``DistributedPlanError(code="timeout")`` instead of blocking until the group's own
    timeout. Without ``timeout`` the group's timeout (``init_process_group(timeout=...)``) holds.
    """

    def __init__(self, group: Any, op: int, timeout: float | None) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self._dist = dist
        self.group = group
        self.op = op
        self.timeout = timeout
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError(
                "this process is not a member of the given group: call the planner only on "
                "the group's ranks"
            )
        self.global_rank = dist.get_rank()
        self.size = dist.get_world_size(group)
        self.device = _group_device(group)

    def _wait(self, work: Any, what: str) -> None:
        from datetime import timedelta

        try:
            if self.timeout is None:
                work.wait()
            else:
                work.wait(timeout=timedelta(seconds=self.timeout))
        except RuntimeError as err:
            text = str(err)
            timed_out = "timed out" in text.lower() or "timeout" in text.lower()
            limit = f"{self.timeout}s" if self.timeout is not None else "the group's timeout"
            raise DistributedPlanError(
                f"rank {self.global_rank} waited {limit} in {_OPS.get(self.op, '?')} ({what}) and "
                f"not every rank of the {self.size} joined: a rank did not call it, called it "
                "late, or died. Every rank must call the same seqpart collective each step. The "
                "process group may now be unusable: destroy and re-create it"
                if timed_out else
                f"rank {self.global_rank}: the collective in {_OPS.get(self.op, '?')} ({what}) "
                f"failed: {text}",
                code="timeout" if timed_out else "comm_failed",
                rank=None,
                numbers={"timeout": self.timeout},
            ) from err

    def gather_rows(self, row: list[int]) -> list[list[int]]:
        torch = self._torch
        mine = torch.tensor(row, dtype=torch.int64, device=self.device)
        out = [torch.empty_like(mine) for _ in range(self.size)]
        self._wait(self._dist.all_gather(out, mine, group=self.group, async_op=True),
                   "status exchange")
        return [t.cpu().tolist() for t in out]

    def gather_lengths(self, local: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
        # all_gather needs equal shapes: pad to the longest rank, trim with the known sizes.
        torch = self._torch
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.int64, device=self.device)
        padded[: len(local)] = torch.as_tensor(local, dtype=torch.int64, device=self.device)
        out = [torch.empty_like(padded) for _ in range(self.size)]
        self._wait(self._dist.all_gather(out, padded, group=self.group, async_op=True),
                   "length exchange")
        return [t[:n].cpu().numpy() for t, n in zip(out, sizes, strict=True)]

    def broadcast(self, obj: Any) -> Any:
        """Group rank 0's ``obj`` on every rank: its pickle's size, then its bytes (two bounded
        broadcasts; ``broadcast_object_list`` cannot take a timeout)."""
        import pickle

        torch, dist = self._torch, self._dist
        src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        data = pickle.dumps(obj) if self.rank == 0 else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        self._wait(dist.broadcast(size, src=src, group=self.group, async_op=True), "plan size")
        if self.rank == 0:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        else:
            buf = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        self._wait(dist.broadcast(buf, src=src, group=self.group, async_op=True), "plan")
        return obj if self.rank == 0 else pickle.loads(buf.cpu().numpy().tobytes())


def _group_device(group: Any) -> Any:
    """Where tensors for this group's collectives must live: NCCL only moves CUDA tensors (on
    the current device), gloo/MPI move CPU tensors; a mixed group ("cpu:gloo,cuda:nccl") takes
    CPU tensors."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    if "xccl" in backend:
        return torch.device("xpu", torch.xpu.current_device())
    return torch.device("cpu")


def _check_timeout(timeout: Any) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")


def _make_comm(group: Any, op: int, timeout: Any = None) -> _LocalComm | _TorchComm:
    """The group's communicator. A bad ``timeout`` is not raised here (only on this rank, it
    would leave the others waiting): the caller checks it inside its reported ``try``."""
    try:
        _check_timeout(timeout)
    except ValueError:
        timeout = None
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None  # type: ignore[assignment]
    if dist is None or not dist.is_available() or not dist.is_initialized():
        if group is not None:
            raise ValueError(
                "group= was given but torch.distributed is not initialised: call "
                "torch.distributed.init_process_group first (or pass group=None)"
            )
        return _LocalComm(op)
    return _TorchComm(group, op, None if timeout is None else float(timeout))


# --------------------------------------------------------------------------- status rows


def _row(
    comm: _LocalComm | _TorchComm,
    code: int,
    n: int,
    k_needed: int,
    cap: int,
    multiple_of: int,
    min_k: int,
    message: str = "",
) -> list[int]:
    raw = message.encode("utf-8")[:_MESSAGE_BYTES]
    body = list(raw) + [0] * (_MESSAGE_BYTES - len(raw))
    # Every field already fits int64 (the codes map what does not to -1), so building the
    # tensor cannot fail on one rank alone and leave the others in the exchange.
    header = [comm.global_rank, code, comm.op, n, k_needed, cap, multiple_of, min_k]
    return [v if -_INT64_MAX <= v <= _INT64_MAX else -1 for v in header] + body


def _message(row: Sequence[int]) -> str:
    raw = bytes(int(b) for b in row[_HEADER:] if b)
    return raw.decode("utf-8", errors="ignore")


def _cap_code(cap: Any) -> int:
    """cap as it travels: the int, 0 for None, -1 for anything invalid."""
    if cap is None:
        return 0
    if isinstance(cap, (bool, np.bool_)) or not isinstance(cap, (int, np.integer)) or cap < 1:
        return -1
    return int(cap) if cap <= _INT64_MAX else -1


def _count_code(value: Any) -> int:
    """multiple_of / min_k as they travel: the int, -1 for anything invalid."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        return -1
    return int(value) if value <= _INT64_MAX else -1


def _check_fits(value: Any, name: str) -> None:
    """Raise on a value the int64 status row cannot carry (so the rank fails collectively)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > _INT64_MAX:
        raise ValueError(
            f"{name}={value} does not fit in int64 (max 2**63-1): pass a smaller {name}, the "
            "same on every rank"
        )


def _call_mismatch_error(rows: list[list[int]]) -> DistributedPlanError | None:
    """Ranks that called different seqpart collectives (or something else entirely)."""
    ops = [r[_OP] for r in rows]
    if len(set(ops)) == 1 and ops[0] in _OPS:
        return None
    by_op: dict[str, list[int]] = {}
    for r in rows:
        by_op.setdefault(_OPS.get(r[_OP], "something else"), []).append(r[_RANK])
    calls = "; ".join(f"ranks {ranks} called {name}" for name, ranks in by_op.items())
    return DistributedPlanError(
        f"the {len(rows)} ranks called different seqpart collectives: {calls}. Every rank of the "
        "group must make the same call in the same order",
        code="mismatched_call",
        rank=None,
        numbers={"calls": {name: ranks for name, ranks in by_op.items()}},
    )


def _mismatch_error(rows: list[list[int]]) -> DistributedPlanError | None:
    """Ranks passing different caps or multiple_of would plan for different limits."""
    for field_name, col in (("cap", _CAP), ("multiple_of", _MULTIPLE), ("min_k", _MIN_K)):
        values = [r[col] for r in rows if r[col] >= 0]
        if values and min(values) != max(values):
            lo = next(r for r in rows if r[col] == min(values))
            hi = next(r for r in rows if r[col] == max(values))
            lo_text, hi_text = (
                "None" if col == _CAP and v == 0 else str(v) for v in (lo[col], hi[col])
            )
            return DistributedPlanError(
                f"ranks disagree on {field_name}: rank {lo[_RANK]} passed "
                f"{lo_text}, rank {hi[_RANK]} passed {hi_text}; every rank must "
                f"pass the same {field_name} (derive it from the shared config, not per rank)",
                code="mismatched_args",
                rank=None,
                numbers={f"{field_name}_min": min(values), f"{field_name}_max": max(values)},
            )
    return None


def _failure_error(rows: list[list[int]], size: int, what: str) -> DistributedPlanError | None:
    """The first failing rank's error (lowest group rank), the same on every rank."""
    failed = [r for r in rows if r[_CODE] != _OK]
    if not failed:
        return None
    first = failed[0]
    others = f" ({len(failed) - 1} other ranks failed too)" if len(failed) > 1 else ""
    cap = "None" if first[_CAP] == 0 else str(first[_CAP])
    count = f"{first[_N]} sequences, " if first[_N] > 0 else ""  # 0: its input was unreadable
    return DistributedPlanError(
        f"rank {first[_RANK]} of {size} could not {what} ({count}cap={cap}): "
        f"{_message(first)}{others}",
        code=_CODE_NAMES.get(first[_CODE], "internal"),
        rank=first[_RANK],
        numbers={"n_local": first[_N], "cap": first[_CAP]},
    )


def _classify(err: Exception) -> int:
    if isinstance(err, InfeasibleError):
        return _INFEASIBLE if err.proven else _NOT_FOUND
    if isinstance(err, (ValueError, TypeError)):
        return _BAD_INPUT
    return _INTERNAL


def _raise_same(err: DistributedPlanError | None, local: Exception | None) -> None:
    """Raise ``err`` on every rank; the rank that failed chains its own exception."""
    if err is not None:
        raise err from local


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
            equal_size, groups, engine, options); ``k`` is chosen here.

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
    tokens: np.ndarray | None = None
    local_plan: Plan | None = None
    local_error: Exception | None = None
    code, n, k_needed, text = _OK, 0, 0, ""
    try:
        _check_timeout(timeout)
        tokens = as_lengths(local_lengths, "local_lengths")
        n = len(tokens)
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
                code = _OVER_CAP
                more = f" (and {too_long.size - 1} more)" if too_long.size > 1 else ""
                raise ValueError(
                    f"sequence {i} has {int(tokens[i])} tokens, over cap={cap_value}{more}: raise "
                    "the cap, truncate or drop it, or pass oversize='alone' to give each such "
                    "sequence a micro-batch of its own"
                )
        local_plan = partition(tokens, None, cap_value, time_limit=time_limit, **partition_kwargs)
        k_needed = local_plan.k
    except Exception as err:  # any failure must reach the collective below, or peers hang
        local_error = err
        code = code if code != _OK else _classify(err)
        text = str(err)
    rows = comm.gather_rows(_row(comm, code, n, k_needed, cap_code, mult_code, min_k_code, text))
    agree_error = (
        _call_mismatch_error(rows)
        or _mismatch_error(rows)
        or _failure_error(rows, comm.size, "find its smallest micro-batch count")
    )
    _raise_same(agree_error, local_error)

    # Every rank now holds the same rows, so the same count and the same verdict.
    needs = [r[_K_NEEDED] for r in rows]
    top = rows[needs.index(max(needs))]
    mult, floor = rows[0][_MULTIPLE], rows[0][_MIN_K]
    k_agreed = round_up(max(max(needs), floor), mult)
    rounding = (f", at least min_k={floor}" if floor > max(needs) else "") + (
        f", rounded up to a multiple of {mult}" if mult > 1 else ""
    )
    short = [r for r in rows if r[_N] < k_agreed]
    if short:
        first = short[0]
        others = f" ({len(short) - 1} other ranks too)" if len(short) > 1 else ""
        raise DistributedPlanError(
            f"rank {first[_RANK]} has {first[_N]} sequences but the {comm.size} ranks agreed on "
            f"k={k_agreed} micro-batches (rank {top[_RANK]} needs {max(needs)} under "
            f"cap={rows[0][_CAP] or None}{rounding}){others}; each micro-batch must be non-empty. "
            f"Fix: give every rank at least {k_agreed} sequences (split the step's samples evenly "
            "across ranks, or plan it with plan_global_across_ranks), or raise the cap so fewer "
            "micro-batches are needed",
            code="too_few_samples",
            rank=first[_RANK],
            numbers={"n_local": first[_N], "k_agreed": k_agreed, "k_needed_max": max(needs),
                     "rank_needing_most": top[_RANK], "cap": rows[0][_CAP]},
        )

    plan: Plan | None = None
    local_error, code, text = None, _OK, ""
    try:
        assert local_plan is not None and tokens is not None
        if local_plan.k == k_agreed:
            plan = local_plan
        else:
            plan = partition(
                tokens, k_agreed, cap, time_limit=time_limit, **partition_kwargs
            )
        own = local_plan.k
        plan = dataclasses.replace(
            plan,
            k_status="given",
            k_lower_bound=None,
            notes=[
                *plan.notes,
                f"k={k_agreed} agreed across {comm.size} ranks (max needed {max(needs)} by rank "
                f"{top[_RANK]}{rounding}); this rank alone needed {own}",
            ],
        )
    except Exception as err:  # reported collectively, as above
        local_error, code, text = err, _PLAN_FAILED, str(err)
    rows = comm.gather_rows(_row(comm, code, n, k_agreed, cap_code, mult_code, min_k_code, text))
    _raise_same(
        _failure_error(rows, comm.size, f"split into the agreed k={k_agreed} micro-batches"),
        local_error,
    )
    assert plan is not None
    return plan


def _plan_once_across_ranks(
    op: int,
    local_lengths: Any,
    cap: Any,
    group: Any,
    multiple_of: Any,
    timeout: Any,
    planner: Any,
) -> tuple[Any, list[int], np.ndarray, int]:
    """Gather every rank's lengths, run ``planner(lengths, dp_size)`` once on group rank 0 and
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
    local_error: Exception | None = None
    code, text = _OK, ""
    try:
        _check_timeout(timeout)
        for value, arg in ((cap, "cap"), (multiple_of, "multiple_of")):
            _check_fits(value, arg)
        tokens = as_lengths(local_lengths, "local_lengths")
        as_positive_int(cap, "cap", allow_none=True)
        as_positive_int(multiple_of, "multiple_of")
    except Exception as err:  # reported collectively
        local_error, code, text = err, _classify(err), str(err)
    rows = comm.gather_rows(_row(comm, code, len(tokens), 0, cap_code, mult_code, 1, text))
    _raise_same(
        _call_mismatch_error(rows)
        or _mismatch_error(rows)
        or _failure_error(rows, comm.size, "share its lengths"),
        local_error,
    )

    sizes = [r[_N] for r in rows]
    lengths = np.concatenate(comm.gather_lengths(tokens, sizes))
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(int).tolist()

    payload: tuple[str, Any] | None = None
    local_error = None
    if comm.rank == 0:
        try:
            payload = ("ok", planner(lengths, comm.size))
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
    ``time_limit`` and ``partition_kwargs`` are used; ``cap`` and ``multiple_of`` must match on
    every rank (checked). ``timeout`` bounds each collective as in :func:`partition_across_ranks`.

    Raises:
        DistributedPlanError: on every rank, with the same message: a rank's input is invalid,
            the ranks disagree on ``cap``/``multiple_of`` or called different seqpart
            collectives, or the global plan failed.
    """

    def planner(lengths: np.ndarray, dp_size: int) -> list[Plan]:
        return plan_global(lengths, dp_size, cap, multiple_of=multiple_of, time_limit=time_limit,
                           **partition_kwargs)

    plans, offsets, lengths, rank = _plan_once_across_ranks(
        _OP_GLOBAL, local_lengths, cap, group, multiple_of, timeout, planner
    )
    return GlobalPlan(plans=plans, offsets=offsets, lengths=lengths.tolist(), rank=rank)


@dataclass(frozen=True)
class StepSchedule:
    """The step schedule as every rank receives it from :func:`plan_step_across_ranks`.

    ``schedule`` is what the step planner returned for the whole step (identical on every
    rank); indices in it are into ``lengths``, the concatenation of every rank's local lengths
    in group-rank order (rank r's local sequence j is global index ``offsets[r] + j``).
    """

    schedule: Any
    offsets: list[int]
    lengths: list[int]
    rank: int

    def owner(self, index: int) -> tuple[int, int]:
        """(group rank that holds global sequence ``index`` now, its local index there)."""
        if not 0 <= index < len(self.lengths):
            raise IndexError(f"sequence {index} is outside range(0, {len(self.lengths)})")
        r = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return r, index - self.offsets[r]


def plan_step_across_ranks(
    local_lengths: Any,
    cap: int | None,
    *,
    group: Any = None,
    multiple_of: int = 1,
    time_limit: float = 0.5,
    timeout: float | None = None,
    **step_kwargs: Any,
) -> StepSchedule:
    """Gather every rank's lengths, plan the whole step once on group rank 0, give every rank
    the identical schedule (or the identical error), with the same collective-failure guarantees
    as :func:`partition_across_ranks` (bad input, mismatched arguments or calls, ``timeout``).

    The planner is :func:`seqpart.solver.step.plan_step` when this seqpart has it, else
    :func:`plan_global` (``schedule`` is then its list of per-rank plans). Only rank 0's
    ``time_limit`` and ``step_kwargs`` are used.
    """
    from . import step as step_module

    plan_step = getattr(step_module, "plan_step", None)

    def planner(lengths: np.ndarray, dp_size: int) -> Any:
        if plan_step is not None:
            return plan_step(lengths, dp_size, cap, multiple_of=multiple_of,
                             time_limit=time_limit, **step_kwargs)
        return plan_global(lengths, dp_size, cap, multiple_of=multiple_of, time_limit=time_limit,
                           **step_kwargs)

    schedule, offsets, lengths, rank = _plan_once_across_ranks(
        _OP_STEP, local_lengths, cap, group, multiple_of, timeout, planner
    )
    return StepSchedule(schedule=schedule, offsets=offsets, lengths=lengths.tolist(), rank=rank)
