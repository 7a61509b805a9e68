"""The step-time model, the schedule validator and the result type (the bound: bound.py).

The model (docs/step-planning.md states it the same way):

* a micro-batch's time is ``t = overhead + sum over its sequences of (a*l + b*l^2 + c)``, with
  ``(a, b, c)`` the :class:`~seqpart.solver.problem.Cost` and ``overhead`` in the same units;
  ``overhead`` may be a :class:`~seqpart.solver.batch_cost.MicroBatchCost`, which adds a
  convex function of the micro-batch's token total (a calibrated per-token cost that changes
  with the micro-batch's size);
* with ``pp = 1`` a rank runs its micro-batches back to back: its time is their sum;
* with ``pp > 1`` its time is the exact makespan of the pipeline schedule it runs (Megatron-LM's
  1F1B, interleaved when ``vpp > 1``, by default), in its order: :mod:`~.pipeline`;
* the step time is the max over ranks.

The closed formula ``sum_j t_j + (pp - 1) * max_j t_j / vpp`` (:func:`formula_step_time`,
:func:`scaled_rank_time`, kept multiplied by ``vpp``: an integer) is the local search's fast
proxy. Arithmetic is exact: costs are Python ints, times ints or :class:`fractions.Fraction`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ...heuristics.bounds import min_bins_lower_bound
from ...heuristics.inputs import as_lengths, as_positive_int
from ..batch_cost import MicroBatchCost, split_overhead
from ..errors import InfeasibleError, InvalidPlanError
from ..plan import StepBoundSource, StopReason, check_nesting, find_violations, log_line
from ..problem import Cost
from .pipeline import (
    DEFAULT_MODEL,
    PipelineModel,
    count_error,
    pipeline_sizes,
    scale,
    scaled_makespans,
    schedule_error,
)

__all__ = [
    "StepPlan",
    "check_schedule",
    "find_schedule_violations",
    "formula_step_time",
    "rank_times",
    "step_time",
]

Schedule = Sequence[Sequence[Sequence[int]]]


def as_pipeline(pp: Any, vpp: Any) -> tuple[int, int]:
    """``pp`` and ``vpp`` checked before any work: ints >= 1 of at most
    :data:`~.pipeline.MAX_VIRTUAL_STAGES` virtual stages."""
    return pipeline_sizes(as_positive_int(pp, "pp"), as_positive_int(vpp, "vpp"))



def default_multiple_of(pp: Any, vpp: Any) -> int:
    """The count per rank's multiple when the caller names none: ``pp`` when ``vpp > 1``
    (Megatron-LM's interleaved schedule needs it), else 1. Bad values give 1 here and are named
    by the checks that follow (:func:`as_pipeline`)."""
    try:
        interleaved, stages = operator.index(vpp) > 1, operator.index(pp)
    except TypeError:
        return 1
    return stages if interleaved and stages >= 1 else 1

def exact(scaled: int, vpp: int) -> int | Fraction:
    """A time kept multiplied by ``vpp``, back in the cost's units: an int when it divides."""
    q, r = divmod(scaled, vpp)
    return q if r == 0 else Fraction(scaled, vpp)


def scaled_rank_time(mb_times: Sequence[int], pp: int, vpp: int) -> int:
    """``vpp * (sum + (pp-1) * max / vpp)``: the rank's time times ``vpp``, an exact int."""
    if not mb_times:
        return 0
    return vpp * sum(mb_times) + (pp - 1) * max(mb_times)


def _bad_index(schedule: Schedule, n: int) -> str:
    """The message for the first entry of ``schedule`` that is not an index into the lengths."""
    for r, rank in enumerate(schedule):
        for j, mb in enumerate(rank):
            for i in mb:
                if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not (
                    0 <= i < n
                ):
                    return (f"schedule[{r}][{j}] holds {i!r}, not an index in range(0, {n}): "
                            "pass indices into lengths")
    return "schedule holds an entry that is not an index: pass indices into lengths"


def _sums_by_run(values: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Sums of consecutive runs of ``values`` of the given sizes (a run may be empty): prefix
    sums differenced, exact in the values' dtype (int64 only when the total fits)."""
    prefix = np.concatenate((np.zeros(1, dtype=values.dtype), np.cumsum(values)))
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    return prefix[ends] - prefix[ends - np.asarray(sizes, dtype=np.int64)]


def _micro_batch_times(
    schedule: Schedule, lengths: Any, cost: Any, overhead: Any
) -> list[list[int]]:
    """Every micro-batch's time, rank by rank (exact Python ints). The indices are checked and
    summed in numpy (one pass at any size); the entry-by-entry walk only names a bad one."""
    tokens = as_lengths(lengths)
    n = len(tokens)
    cost = Cost.parse(cost)
    over, size = split_overhead(overhead)
    check_nesting(schedule, "schedule", 2)
    sizes = [len(mb) for rank in schedule for mb in rank]
    flat = [i for rank in schedule for mb in rank for i in mb]
    index = np.asarray(flat) if flat else np.zeros(0, dtype=np.int64)
    kinds = set(map(type, flat))
    if (index.dtype.kind not in "iu" or bool in kinds or np.bool_ in kinds
            or (len(index) and (index.min() < 0 or index.max() >= n))):
        raise ValueError(_bad_index(schedule, n))
    costs = cost.exact(tokens)  # int64 when every sum fits, else exact Python ints
    # Sums stay below 2**62 in int64 only over at most n entries (a bad schedule may repeat one).
    totals = _sums_by_run(costs[index] if len(index) <= n else costs[index].astype(object), sizes)
    flat_times = [over + int(t) for t in totals.tolist()]
    if size is not None:
        mb_tokens = _sums_by_run(tokens[index].astype(np.int64), sizes)
        flat_times = [t + size.size(x) for t, x in zip(flat_times, mb_tokens.tolist(), strict=True)]
    out, start = [], 0
    for rank in schedule:
        out.append(flat_times[start : start + len(rank)])
        start += len(rank)
    return out


def rank_times(
    schedule: Schedule,
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int | MicroBatchCost = 0,
    pp: int = 1,
    vpp: int = 1,
    pipeline: PipelineModel | None = None,
) -> list[int | Fraction]:
    """Each rank's time: with ``pp == 1`` the sum of its micro-batch times; else the exact
    makespan of the pipeline schedule ``pipeline`` (default: Megatron-LM's 1F1B, interleaved
    when ``vpp > 1``, forward:backward 1:2, no p2p latency; see
    :mod:`seqpart.solver.step.pipeline`) running its micro-batches in the order listed.

    Scores any schedule, valid or not (a trainer's may break the cap): only the indices are
    checked. A rank with no micro-batch takes 0; an empty micro-batch takes ``overhead``.
    Raises ValueError when the pipeline schedule cannot run a rank's count (Megatron's
    interleaved schedule needs at least ``pp`` micro-batches, and deadlocks on some others).
    """
    pp, vpp = as_pipeline(pp, vpp)
    model = pipeline or DEFAULT_MODEL
    times = _micro_batch_times(schedule, lengths, cost, overhead)
    if pp == 1:
        return [sum(t) for t in times]
    out: list[int | Fraction] = [0] * len(times)
    by_count: dict[int, list[int]] = {}
    for r, t in enumerate(times):
        if t:
            by_count.setdefault(len(t), []).append(r)
    sc = scale(vpp, model)
    for m, ranks in by_count.items():
        why = schedule_error(pp, vpp, m, model)
        if why is not None:
            raise ValueError(f"rank {ranks[0]} has {m} micro-batches: {why}")
        # Ranks with the same count share the schedule's graph: one vectorised pass.
        for r, value in zip(ranks, scaled_makespans([times[r] for r in ranks], pp, vpp, model),
                            strict=True):
            out[r] = exact(value, sc)
    return out


def step_time(
    schedule: Schedule,
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int | MicroBatchCost = 0,
    pp: int = 1,
    vpp: int = 1,
    pipeline: PipelineModel | None = None,
) -> int | Fraction:
    """The step time of ``schedule`` (list over ranks of lists of micro-batches of indices into
    ``lengths``, each rank's in execution order): the max over ranks of :func:`rank_times`.
    Exact: an int, or a Fraction."""
    times = rank_times(schedule, lengths, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
                       pipeline=pipeline)
    if not times:
        raise ValueError("schedule has no ranks: pass one list of micro-batches per rank")
    return max(times)


def formula_step_time(
    schedule: Schedule,
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int | MicroBatchCost = 0,
    pp: int = 1,
    vpp: int = 1,
) -> int | Fraction:
    """The closed formula's step time, ``max over ranks of sum_j t_j + (pp-1)*max_j t_j/vpp``:
    the search's fast proxy, reported next to the exact :func:`step_time` for comparison. Equal
    to it at ``pp == 1``; with ``pp > 1`` it is neither exact nor a bound (it ignores the order,
    and at ``vpp > 1`` a long micro-batch's whole path through every virtual stage)."""
    pp, vpp = as_pipeline(pp, vpp)
    times = _micro_batch_times(schedule, lengths, cost, overhead)
    if not times:
        raise ValueError("schedule has no ranks: pass one list of micro-batches per rank")
    return max(exact(scaled_rank_time(t, pp, vpp), vpp) for t in times)


# ----------------------------------------------------------------------------- lower bound


@dataclass(frozen=True)
class StepInstance:
    """A validated step-planning instance (shared by the bound and the planner)."""

    tokens: np.ndarray
    costs: list[int]  # a*l + b*l^2 + c, Python ints
    dp_size: int
    cap: int | None
    cost: Cost
    overhead: int  # the fixed part of every micro-batch's cost
    pp: int
    vpp: int
    multiple_of: int
    oversize: tuple[int, ...]  # over-cap sequences, each alone (oversize="alone")
    k_min: int  # proven floor on the total micro-batch count (bin-packing bound)
    size: MicroBatchCost | None = None  # the size term, None when size costs nothing
    pipeline: PipelineModel = DEFAULT_MODEL  # the schedule each rank runs under pp > 1
    # What one plan's phases compute once from this instance alone and share (e.g. the
    # Karmarkar-Karp ranks: rank_first at every count and verl's schedule), by name.
    shared: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def micro_batch_cost(self) -> int | MicroBatchCost:
        """The ``overhead`` argument that reproduces this instance's micro-batch cost."""
        return self.overhead if self.size is None else self.size

    def feasible_ms(self) -> list[int]:
        """Candidate counts per rank: multiples of ``multiple_of`` from the count floor up to
        ``n / dp_size`` (each micro-batch needs a sequence) that the pipeline schedule accepts
        (:func:`~.pipeline.count_error`: Megatron-LM's interleaved rule)."""
        lo = -(-max(self.k_min, 1) // self.dp_size)
        lo = -(-lo // self.multiple_of) * self.multiple_of
        hi = self.n // self.dp_size
        return [m for m in range(lo, hi + 1, self.multiple_of)
                if count_error(self.pp, self.vpp, m, self.pipeline) is None]


def make_instance(
    lengths: Any,
    dp_size: Any,
    cap: Any,
    *,
    cost: Any = "tokens",
    overhead: Any = 0,
    pp: Any = 1,
    vpp: Any = 1,
    multiple_of: Any = 1,
    oversize: str = "error",
    pipeline: PipelineModel | None = None,
) -> StepInstance:
    """Validate every argument (the same messages as ``partition`` for what it shares) and
    raise :class:`InfeasibleError` when no count per rank can work."""
    from ..problem import make_problem  # the shared validation of lengths, cap, cost, oversize

    problem = make_problem(lengths, None, cap, cost=cost, oversize=oversize)
    dp_size = as_positive_int(dp_size, "dp_size")
    pp, vpp = as_pipeline(pp, vpp)
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    model = DEFAULT_MODEL if pipeline is None else pipeline
    if not isinstance(model, PipelineModel):
        raise TypeError(f"pipeline must be a PipelineModel or None, got {type(model).__name__}")
    model.resolved(vpp)  # a schedule that cannot run vpp chunks is named here
    over, size = split_overhead(overhead)
    tokens = problem.tokens
    n = len(tokens)
    k_min = len(problem.oversize)
    if problem.cap is not None:
        rest = np.delete(tokens, list(problem.oversize))
        if len(rest):
            k_min += min_bins_lower_bound(rest, problem.cap)
    else:
        k_min = 1
    costs = problem.costs.tolist()  # Cost.exact's values, as Python ints
    inst = StepInstance(
        tokens=tokens,
        costs=costs,
        dp_size=dp_size,
        cap=problem.cap,
        cost=problem.cost,
        overhead=over,
        pp=pp,
        vpp=vpp,
        multiple_of=multiple_of,
        oversize=problem.oversize,
        k_min=k_min,
        size=size,
        pipeline=model,
    )
    if not inst.feasible_ms():
        m_need = -(-max(k_min, 1) // dp_size)
        m_need = -(-m_need // multiple_of) * multiple_of
        why = count_error(pp, vpp, m_need, model) if m_need * dp_size <= n else None
        if why is not None:
            raise InfeasibleError(
                f"no count per rank from {m_need} (the cap's floor, a multiple of multiple_of="
                f"{multiple_of}) to {n // dp_size} ({n} sequences over {dp_size} ranks) can run: "
                f"{why}", proven=True)
        raise InfeasibleError(
            f"{n} sequences cannot fill {dp_size} ranks x {m_need} non-empty micro-batches "
            f"(the cap needs at least {k_min} micro-batches in all, and m must be a multiple of "
            f"{multiple_of}): need at least {dp_size * m_need} sequences; use fewer ranks, a "
            "smaller multiple_of, a larger cap, or add samples",
            proven=True,
        )
    return inst


# ----------------------------------------------------------------------------- validator


def find_schedule_violations(
    schedule: Schedule,
    lengths: Any,
    dp_size: int,
    m: int,
    cap: int | None,
    multiple_of: int = 1,
    *,
    oversize: str = "error",
) -> list[str]:
    """Every broken rule of a step schedule, as messages (empty: valid). The micro-batch rules
    (every index once, none empty, none over the cap except an over-cap sequence alone when
    ``oversize="alone"``) are :func:`~seqpart.solver.plan.find_violations` on the flattened
    micro-batches; the rank rules (``dp_size`` ranks, ``m`` each, ``m`` a multiple of
    ``multiple_of``) are checked here."""
    tokens = as_lengths(lengths)
    dp_size = as_positive_int(dp_size, "dp_size")
    m = as_positive_int(m, "m")
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    cap = as_positive_int(cap, "cap", allow_none=True)
    if oversize not in ("error", "alone"):
        raise ValueError(f"oversize={oversize!r}: use 'error' or 'alone'")
    check_nesting(schedule, "schedule", 2)
    msgs = []
    if len(schedule) != dp_size:
        msgs.append(f"{len(schedule)} ranks, expected dp_size={dp_size}")
    counts = [len(rank) for rank in schedule]
    if any(c != m for c in counts):
        bad = next(r for r, c in enumerate(counts) if c != m)
        msgs.append(f"rank {bad} has {counts[bad]} micro-batches, expected m={m} on every rank")
    if m % multiple_of:
        msgs.append(f"m={m} is not a multiple of multiple_of={multiple_of}")
    alone = ()
    if oversize == "alone" and cap is not None:
        alone = tuple(int(i) for i in np.flatnonzero(tokens > cap))
    flat = [mb for rank in schedule for mb in rank]
    found = find_violations(flat, tokens, len(flat), cap, oversize=alone)
    return msgs + found.messages


def check_schedule(
    schedule: Schedule,
    lengths: Any,
    dp_size: int,
    m: int,
    cap: int | None,
    multiple_of: int = 1,
    *,
    oversize: str = "error",
) -> None:
    """Raise :class:`InvalidPlanError` unless ``schedule`` is a valid step schedule (see
    :func:`find_schedule_violations`)."""
    msgs = find_schedule_violations(
        schedule, lengths, dp_size, m, cap, multiple_of, oversize=oversize
    )
    if msgs:
        raise InvalidPlanError(msgs)


# ----------------------------------------------------------------------------- result


def _num(x: int | Fraction) -> int | float:
    return x if isinstance(x, int) else float(x)


@dataclass(frozen=True)
class StepPlan:
    """A checked step schedule and what is known about it (like scipy.optimize's result).

    ``ranks[r]`` lists rank r's micro-batches in execution order, each a list of global sequence
    indices. ``step_time`` and ``rank_times`` are the model's (exact: int or Fraction): with
    ``pp > 1`` the exact makespan of ``pipeline``'s schedule in that order, and
    ``formula_step_time`` the closed formula's figure for the same schedule, for comparison;
    ``lower_bound`` bounds every valid schedule's step time (see :func:`step_lower_bound`, raised
    by CP-SAT proofs when they ran); ``status`` is "optimal" when ``step_time`` meets it, else
    "feasible". ``stopped_by`` says why the search ended (:data:`~seqpart.solver.plan.StopReason`),
    ``bound_source`` which bound gave ``lower_bound`` ("step_bound" or "cpsat"), and
    ``trainers_not_run`` the trainers' schedulers not run to their end; ``notes`` are for people.
    """

    ranks: list[list[list[int]]]
    m: int
    step_time: int | Fraction
    rank_times: list[int | Fraction]
    lower_bound: int | Fraction
    status: str
    method: str
    seconds: float
    dp_size: int
    cap: int | None
    cost: Cost
    overhead: int | MicroBatchCost
    pp: int
    vpp: int
    multiple_of: int = 1
    oversize: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pipeline: PipelineModel = DEFAULT_MODEL
    formula_step_time: int | Fraction | None = None
    stopped_by: StopReason = "complete"
    bound_source: StepBoundSource = "step_bound"
    trainers_not_run: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """(step_time - lower_bound) / lower_bound."""
        return float((Fraction(self.step_time) - self.lower_bound) / self.lower_bound)

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    @property
    def micro_batches(self) -> list[list[int]]:
        """Every micro-batch, rank by rank."""
        return [mb for rank in self.ranks for mb in rank]

    def summary(self) -> str:
        """One line for logs."""
        return log_line(f"dp={self.dp_size} pp={self.pp} vpp={self.vpp} m={self.m} "
                        f"step_time={_num(self.step_time)} bound={_num(self.lower_bound)}", self)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields (Fractions become floats)."""
        return {
            "ranks": self.ranks,
            "m": self.m,
            "step_time": _num(self.step_time),
            "rank_times": [_num(t) for t in self.rank_times],
            "lower_bound": _num(self.lower_bound),
            "gap": self.gap,
            "status": self.status,
            "method": self.method,
            "seconds": self.seconds,
            "dp_size": self.dp_size,
            "cap": self.cap,
            "cost": self.cost.as_dict(),
            "overhead": self.overhead if isinstance(self.overhead, int) else self.overhead.as_dict(),
            "pp": self.pp,
            "vpp": self.vpp,
            "multiple_of": self.multiple_of,
            "oversize": self.oversize,
            "notes": self.notes,
            "schedule": self.pipeline.resolved(self.vpp) if self.pp > 1 else "sequential",
            "forward_backward": [self.pipeline.forward, self.pipeline.backward],
            "p2p_latency": self.pipeline.p2p_latency,
            "formula_step_time": None if self.formula_step_time is None
            else _num(self.formula_step_time),
            "stopped_by": self.stopped_by,
            "bound_source": self.bound_source,
            "trainers_not_run": self.trainers_not_run,
        }
