"""The collective-failure protocol every seqpart collective shares.

Each rank does its local work inside ``try``, then every rank exchanges one fixed-size status
row (rank, error code, operation tag, sample count, needed count, cap, multiple_of, message
bytes) in one ``all_gather``, so all ranks see the same facts and raise the same
:class:`DistributedPlanError`. The operation tag makes ranks that called different collectives
fail together at that first exchange instead of mismatching later. Values that do not fit the
int64 row are reported as bad input through the same exchange. Planning lives elsewhere
(:mod:`seqpart.solver.distributed.planners` calls the planners); this module only moves rows and
tensors between ranks.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import DistributedPlanError, InfeasibleError
from ..options import as_seconds

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
_RANK, _CODE, _OP, _N, _K_NEEDED, _CAP, _MULTIPLE, _MIN_K, _ARGS = range(9)
_HEADER = 9
_MESSAGE_BYTES = 384
_INT64_MAX = 2**63 - 1

# Operation tags (a marker in the high bits, so a row from anything else is not taken for ours).
_OP_MARK = 0x5E9 << 20
_OPS = {
    _OP_MARK + 1: "partition_across_ranks",
    _OP_MARK + 2: "plan_global_across_ranks",
    _OP_MARK + 3: "plan_step_across_ranks",
    _OP_MARK + 4: "rearrange_micro_batches (verl drop-in)",
}
_OP_PARTITION, _OP_GLOBAL, _OP_STEP = (_OP_MARK + i for i in (1, 2, 3))
#: The verl drop-in's tag (public: the drop-in lives in another package).
OP_VERL_REARRANGE = _OP_MARK + 4


# --------------------------------------------------------------------------- communication


class _LocalComm:
    """A group of one: used when torch.distributed is absent or not initialised."""

    rank = 0
    global_rank = 0
    size = 1
    input_error: Exception | None = None

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
        self.input_error: Exception | None = None

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
    as_seconds(timeout, "timeout", allow_none=True)


def _check_inputs(comm: _LocalComm | _TorchComm, timeout: Any) -> None:
    """Raise this rank's bad ``group`` or ``timeout``: called inside the caller's reported
    ``try``, so every rank raises the same error after the status exchange."""
    if comm.input_error is not None:
        raise comm.input_error
    _check_timeout(timeout)


def _make_comm(group: Any, op: int, timeout: Any = None) -> _LocalComm | _TorchComm:
    """The group's communicator. A bad ``timeout`` or ``group`` is not raised here (only on this
    rank, it would leave the others waiting): the communicator then uses no timeout or the
    default group, and the caller raises it inside its reported ``try`` (:func:`_check_inputs`)."""
    try:
        _check_timeout(timeout)
    except (TypeError, ValueError):
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
    input_error = None
    if group is not None and not isinstance(group, dist.ProcessGroup):
        input_error = TypeError(
            f"group must be a torch.distributed ProcessGroup (or None for the default group), got "
            f"{type(group).__name__}: pass the data-parallel group"
        )
        group = None  # the default group carries the report, so no rank waits for this one
    comm = _TorchComm(group, op, None if timeout is None else float(timeout))
    comm.input_error = input_error
    return comm


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
    args: int = 0,
) -> list[int]:
    raw = message.encode("utf-8")[:_MESSAGE_BYTES]
    body = list(raw) + [0] * (_MESSAGE_BYTES - len(raw))
    # Every field already fits int64 (the codes map what does not to -1), so building the
    # tensor cannot fail on one rank alone and leave the others in the exchange.
    header = [comm.global_rank, code, comm.op, n, k_needed, cap, multiple_of, min_k, args]
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


def _args_digest(kwargs: dict[str, Any]) -> int:
    """A digest of keyword arguments that every rank must pass alike (cost, pp, k, ...), so a
    rank that passed others is caught in the status exchange instead of silently overruled by
    rank 0. Values whose repr names a memory address count by their type only."""
    parts = []
    for key in sorted(kwargs):
        text = repr(kwargs[key])
        parts.append(f"{key}={type(kwargs[key]).__qualname__ if ' at 0x' in text else text}")
    return zlib.crc32(";".join(parts).encode("utf-8")) + 1  # 0 means "not checked"


#: Why the arguments must match, by default: one plan is made for the whole group.
ONE_PLAN = ("only one plan is made for the whole group, so every rank must pass the same values "
            "(derive them from the shared config, not per rank)")


def _args_mismatch_error(rows: list[list[int]], what: str, why: str = ONE_PLAN
                         ) -> DistributedPlanError | None:
    digests = {r[_ARGS] for r in rows if r[_ARGS]}
    if len(digests) <= 1:
        return None
    first = rows[0][_ARGS]
    other = next(r for r in rows if r[_ARGS] != first)
    return DistributedPlanError(
        f"ranks passed different {what}: rank {rows[0][_RANK]} and rank {other[_RANK]} differ; "
        f"{why}",
        code="mismatched_args",
        rank=None,
        numbers={"ranks": [rows[0][_RANK], other[_RANK]]},
    )


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


def _agreed_count(rows: list[list[int]], size: int) -> tuple[int, str]:
    """The count every rank splits into (the largest need, at least min_k, rounded up to
    multiple_of) and the note that says how it was agreed; raises on every rank alike when a
    rank has fewer sequences than that count."""
    needs = [r[_K_NEEDED] for r in rows]
    top = rows[needs.index(max(needs))]
    mult, floor = rows[0][_MULTIPLE], rows[0][_MIN_K]
    k_agreed = -(-max(max(needs), floor) // mult) * mult  # rounded up to a multiple
    rounding = (f", at least min_k={floor}" if floor > max(needs) else "") + (
        f", rounded up to a multiple of {mult}" if mult > 1 else ""
    )
    short = [r for r in rows if r[_N] < k_agreed]
    if short:
        first = short[0]
        others = f" ({len(short) - 1} other ranks too)" if len(short) > 1 else ""
        raise DistributedPlanError(
            f"rank {first[_RANK]} has {first[_N]} sequences but the {size} ranks agreed on "
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
    note = (f"k={k_agreed} agreed across {size} ranks (max needed {max(needs)} by rank "
            f"{top[_RANK]}{rounding})")
    return k_agreed, note


# --------------------------------------------------------------------------- count agreement


def agree_on_count(
    group: Any,
    op: int,
    timeout: Any,
    local: Callable[[], tuple[int, int]],
    *,
    cap: Any = None,
    multiple_of: Any = 1,
    min_k: Any = 1,
    what: str = "plan its micro-batches",
) -> int:
    """The micro-batch count every rank of ``group`` agrees on, or the same error on every rank.

    ``local()`` returns this rank's ``(sequence count, count it needs)`` or raises; its error
    reaches every rank through the status exchange, so no rank waits for one that failed. The
    agreed count is the largest need, at least ``min_k``, rounded up to ``multiple_of`` (each
    checked to be equal on every rank, as is ``cap``); a rank with fewer sequences than that
    count makes every rank raise ``DistributedPlanError(code="too_few_samples")``. Each
    collective is waited on with ``timeout`` (None: the group's own).
    """
    comm = _make_comm(group, op, timeout)
    n = need = 0
    code, text, local_error = _OK, "", None
    try:
        _check_inputs(comm, timeout)
        for value, name in ((cap, "cap"), (multiple_of, "multiple_of"), (min_k, "min_k")):
            _check_fits(value, name)
        n, need = local()
    except Exception as err:  # must reach the exchange, or the other ranks wait for this one
        local_error, code, text = err, _classify(err), str(err)
    rows = comm.gather_rows(
        _row(comm, code, n, need, _cap_code(cap), _count_code(multiple_of), _count_code(min_k), text)
    )
    _raise_same(
        _call_mismatch_error(rows) or _mismatch_error(rows) or _failure_error(rows, comm.size, what),
        local_error,
    )
    return _agreed_count(rows, comm.size)[0]
