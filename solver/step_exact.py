"""The step under the exact pipeline makespan: a lower bound valid for every schedule, and the
choice of a schedule and of each rank's order by exact evaluation.

Why apart from the search: the exact makespan (:mod:`seqpart.solver.step.pipeline`) costs
O(pp*vpp*m) per rank, too much for every move the local search scores. The search therefore
ranks moves with the closed formula ``sum + (pp-1)*max/vpp`` (a fast proxy, neither exact nor a
bound when ``pp > 1``); this module evaluates its best schedules, and the trainers', exactly,
orders each rank's micro-batches for the exact makespan, and keeps the fastest. With ``pp == 1``
a rank runs its micro-batches back to back, so the formula is exact and none of this is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from seqpart.solver.step.model import (
    StepInstance,
    _load_bounds,
    _load_bounds_many,
    make_instance,
    scaled_bounds,
)
from seqpart.solver.step.model import exact as unscale
from seqpart.solver.step.pipeline import (
    DEFAULT_MODEL,
    PipelineModel,
    improve_order,
    light_ends_order,
    scale,
    scaled_lower_bound,
    scaled_makespans,
    schedule_error,
)

__all__ = ["ExactChoice", "choose_exact", "exact_scaled_bounds", "order_ranks", "step_lower_bound"]

#: Operations of the exact evaluation per second (one op: one micro-batch's forward or backward
#: on one chunk, for one rank or candidate order). Measured 170 million on the 2-core machine
#: under a load of 2-3 (vectorised over 256 orders); a conservative figure turns a time budget
#: into a deterministic work budget.
OPS_PER_SECOND = 60_000_000


def usable_counts(inst: StepInstance, counts: Sequence[int], model: PipelineModel) -> list[int]:
    """The counts the schedule can run (Megatron's interleaved schedule needs at least ``pp``
    micro-batches and deadlocks on some counts that are not a multiple of ``pp``)."""
    if inst.pp == 1:
        return list(counts)
    return [m for m in counts if schedule_error(inst.pp, inst.vpp, m, model) is None]


def exact_scaled_bounds(inst: StepInstance, model: PipelineModel = DEFAULT_MODEL) -> dict[int, int]:
    """For each usable count, a lower bound on the step time times :func:`scale` valid for every
    schedule with that count, in every order, under every pipeline schedule.

    With ``pp == 1`` the formula is exact, so its bounds (:func:`scaled_bounds`) carry over.
    Else, per count ``m`` (``o`` the overhead, ``P`` the heaviest rank's cost floor, ``L`` the
    heaviest micro-batch's, ``c_min`` the cheapest sequence), from
    :func:`~seqpart.solver.step.pipeline.scaled_lower_bound` of one rank:

    * the heaviest rank's load ``P + m*o`` plus the bubble ``(pp-1)*(o + c_min)/vpp`` (every
      micro-batch takes at least ``o + c_min``), and the same for the rank holding the heaviest
      micro-batch (``L + m*o`` plus the ``m-1`` cheapest sequences);
    * the heaviest micro-batch's whole path through every virtual stage, ``pp*(L + o)``;

    each with the p2p latencies those terms cross.
    """
    sc = scale(inst.vpp, model)
    if inst.pp == 1:
        return {m: x * sc // inst.vpp for m, x in scaled_bounds(inst).items()}
    c = np.array(sorted(inst.costs, reverse=True), dtype=object)
    prefix = np.concatenate(([0], np.cumsum(c))).astype(object)
    asc = np.concatenate(([0], np.cumsum(c[::-1]))).astype(object)
    o, pp, vpp, dp = inst.overhead, inst.pp, inst.vpp, inst.dp_size
    lat = model.p2p_latency * sc
    bubble = (pp - 1) * ((model.forward + model.backward) * (o + int(c[-1])) + 2 * lat)
    p_rank = _load_bounds(c, prefix, dp)
    ms = usable_counts(inst, inst.feasible_ms(), model)
    out = {}
    for m, heavy in zip(ms, _load_bounds_many(c, prefix, [dp * m for m in ms]), strict=True):
        load = sc * max(p_rank + m * o, heavy + m * o + int(asc[m - 1])) + bubble
        path = pp * sc * (heavy + o) + 2 * (pp * vpp - 1) * lat
        out[m] = max(load, path)
    return out


def step_lower_bound(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    cost: Any = "tokens",
    overhead: int = 0,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int = 1,
    oversize: str = "error",
    pipeline: PipelineModel | None = None,
) -> int | Fraction:
    """A lower bound on the step time of every valid schedule under the pipeline schedule
    ``pipeline`` (default: Megatron-LM's, forward:backward 1:2, no p2p latency): the minimum
    over usable counts of :func:`exact_scaled_bounds`. With ``pp == 1`` it is the bound of the
    sum of micro-batch times (raised by the rank-maxima and bin-packing arguments)."""
    model = pipeline or DEFAULT_MODEL
    inst = make_instance(
        lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
        multiple_of=multiple_of, oversize=oversize,
    )
    bounds = exact_scaled_bounds(inst, model)
    if not bounds:
        raise ValueError(
            f"no feasible count per rank can run the {model.resolved(inst.vpp)} schedule with "
            f"pp={inst.pp}, vpp={inst.vpp}: use multiple_of=pp or fewer ranks"
        )
    return unscale(min(bounds.values()), scale(inst.vpp, model))


# ----------------------------------------------------------------------------- orders


def rank_time_rows(inst: StepInstance, mb_of: np.ndarray, m: int) -> list[list[int]]:
    """Each rank's micro-batch times (``overhead`` plus its sequences' costs), micro-batch
    ``b`` on rank ``b // m`` in index order: exact Python ints."""
    k = inst.dp_size * m
    if sum(inst.costs) + k * inst.overhead < 2**62:
        loads = np.zeros(k, dtype=np.int64)
        np.add.at(loads, mb_of, np.asarray(inst.costs, dtype=np.int64))
        flat = [inst.overhead + x for x in loads.tolist()]
    else:
        flat = [inst.overhead] * k
        for i, b in enumerate(mb_of.tolist()):
            flat[b] += inst.costs[i]
    return [flat[r * m : (r + 1) * m] for r in range(inst.dp_size)]


@dataclass
class Ordered:
    """Each rank's order (positions into its micro-batches) and scaled exact makespan."""

    orders: list[list[int]]
    values: list[int]
    work: int

    @property
    def step(self) -> int:
        return max(self.values)


def order_ranks(
    times: Sequence[Sequence[int]],
    pp: int,
    vpp: int,
    model: PipelineModel = DEFAULT_MODEL,
    *,
    work_budget: int = 0,
    keep_given: bool = True,
) -> Ordered:
    """Orders for every rank: the better of the order given (``keep_given``) and
    :func:`light_ends_order`, evaluated for all ranks in one vectorised pass each; then, while
    ``work_budget`` (operations evaluated) lasts, local search on the exact makespan of the
    slowest rank (only it sets the step), until that rank cannot be improved."""
    rows = [list(r) for r in times]
    m = len(rows[0])
    ops = 2 * pp * vpp * m
    light = [light_ends_order(r) for r in rows]
    vals = scaled_makespans([[r[i] for i in o] for r, o in zip(rows, light, strict=True)], pp, vpp,
                            model)
    orders, work = light, ops * len(rows)
    if keep_given:
        given = scaled_makespans(rows, pp, vpp, model)
        work += ops * len(rows)
        for r, v in enumerate(given):
            if v <= vals[r]:
                orders[r], vals[r] = list(range(m)), v
    tried: set[int] = set()
    while pp > 1 and m > 1 and work < work_budget:
        r = max(range(len(rows)), key=lambda i: (vals[i], -i))
        if r in tried:
            break
        order, value, spent = improve_order(rows[r], pp, vpp, model, starts=[orders[r]],
                                            work_budget=work_budget - work)
        work += spent
        if value < vals[r]:
            orders[r], vals[r] = order, value
        else:
            tried.add(r)  # a local optimum (or out of budget): the step cannot fall below it
    return Ordered(orders, vals, work)


@dataclass
class ExactChoice:
    """The chosen candidate (index into the list given), its orders and scaled makespans."""

    index: int
    ordered: Ordered
    work: int
    evaluated: int


def choose_exact(
    inst: StepInstance,
    candidates: Sequence[tuple[int, np.ndarray]],
    model: PipelineModel,
    work_budget: int,
) -> ExactChoice:
    """The candidate schedule ((m, mb_of), best proxy first) with the smallest exact step.

    Every candidate gets the cheap orders of :func:`order_ranks` (always, whatever the budget:
    the trainers' schedules are among them); then, best first, each whose order-free lower bound
    can still beat the best found gets the order search with half the budget left."""
    pp, vpp = inst.pp, inst.vpp
    rows = [rank_time_rows(inst, mb_of, m) for m, mb_of in candidates]
    cheap = [order_ranks(r, pp, vpp, model) for r in rows]
    work = sum(c.work for c in cheap)
    best_i = min(range(len(candidates)), key=lambda i: (cheap[i].step, i))
    best = cheap[best_i]
    evaluated = 0
    for i in sorted(range(len(candidates)), key=lambda i: (cheap[i].step, i)):
        if work >= work_budget:
            break
        floor = max(scaled_lower_bound(r, pp, vpp, model) for r in rows[i])
        if floor >= best.step:
            continue
        ordered = order_ranks(rows[i], pp, vpp, model, work_budget=(work_budget - work) // 2)
        work += ordered.work
        evaluated += 1
        if ordered.step < best.step or (ordered.step == best.step and i == best_i):
            best_i, best = i, ordered
    return ExactChoice(best_i, best, work, evaluated)
