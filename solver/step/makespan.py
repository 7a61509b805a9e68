"""The step under the exact pipeline makespan: the choice of a schedule and of each rank's order
by exact evaluation (its lower bound: :mod:`~seqpart.solver.step.bound`).

Why apart from the search: the exact makespan (:mod:`seqpart.solver.step.pipeline`) costs
O(pp*vpp*m) per rank, too much for every move the local search scores. The search therefore
ranks moves with the closed formula ``sum + (pp-1)*max/vpp`` (a fast proxy, neither exact nor a
bound when ``pp > 1``); this module evaluates its best schedules, and the trainers', exactly,
orders each rank's micro-batches for the exact makespan, and keeps the fastest. With ``pp == 1``
a rank runs its micro-batches back to back, so the formula is exact and none of this is needed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..batch_cost import MicroBatchCost
from ..errors import InvalidPlanError
from ..plan import Plan
from ..tuning import OPS_PER_SECOND
from .model import (
    StepInstance,
    StepPlan,
    _micro_batch_times,
    as_pipeline,
    check_schedule,
    rank_times,
    scaled_rank_time,
    step_time,
)
from .model import exact as unscale
from .pipeline import (
    DEFAULT_MODEL,
    ORDER_WORK,
    PipelineModel,
    count_error,
    improve_order,
    scale,
    scaled_lower_bound,
    scaled_makespans,
    schedule_error,
)
from .starts import Row

__all__ = [
    "OPS_PER_SECOND",
    "ExactChoice",
    "assemble",
    "choose_exact",
    "count_penalty",
    "order_for_pipeline",
    "order_given",
    "order_schedule",
    "order_ranks",
    "rank_time_rows",
]


#: The most operations ``_extra_rounds`` simulates for one residue (about 11 ms here, and one
#: residue per count met); past it the weight is left neutral, as its only use is ordering the
#: counts. Every pipeline up to pp=16 x vpp=2 stays under it, pp=1,024 had taken 64 s.
PENALTY_OPERATIONS = 1 << 11


@functools.lru_cache(maxsize=4096)
def _extra_rounds(pp: int, vpp: int, residue: int, model: PipelineModel) -> Fraction | None:
    """How many micro-batch times the schedule takes beyond ``m + (pp-1)/vpp`` for equal
    micro-batches at a count ``pp + residue`` (None: it cannot run that count)."""
    m = pp + residue
    if count_error(pp, vpp, m, model) is not None:
        return None
    if 2 * pp * vpp * m > PENALTY_OPERATIONS:
        return Fraction(0)
    if schedule_error(pp, vpp, m, model) is not None:
        return None
    sc = scale(vpp, model)
    return Fraction(scaled_makespans([[sc] * m], pp, vpp, model)[0], sc * sc) - m - Fraction(
        pp - 1, vpp)


def count_penalty(inst: StepInstance, model: PipelineModel, m: int) -> Fraction:
    """The order in which counts are built weighs the formula's bound by what the schedule makes
    of equal micro-batches at that count: interleaving at a count that is not a multiple of pp
    runs whole rounds longer than the formula says (pp=4, vpp=4: 9.25 micro-batch times at
    m=6, where the formula says 6.75). The extra depends mostly on m mod pp (it is measured at
    one count per residue: a heuristic weight, which only orders and prunes the proxy search)."""
    if inst.pp == 1:
        return Fraction(1)
    extra = _extra_rounds(inst.pp, inst.vpp, m % inst.pp, model)
    if extra is None:
        return Fraction(10**6)  # most likely not runnable: last (usable() decides)
    base = m + Fraction(inst.pp - 1, inst.vpp)
    return (base + max(extra, Fraction(0))) / base


# ----------------------------------------------------------------------------- orders


def rank_time_rows(inst: StepInstance, mb_of: np.ndarray, m: int) -> list[list[int]]:
    """Each rank's micro-batch times (``overhead`` plus its sequences' costs, plus the size
    term of its token total when the instance has one), micro-batch ``b`` on rank ``b // m``
    in index order: exact Python ints."""
    k = inst.dp_size * m
    if sum(inst.costs) + k * inst.overhead < 2**62:
        loads = np.zeros(k, dtype=np.int64)
        np.add.at(loads, mb_of, np.asarray(inst.costs, dtype=np.int64))
        flat = [inst.overhead + x for x in loads.tolist()]
    else:
        flat = [inst.overhead] * k
        for i, b in enumerate(mb_of.tolist()):
            flat[b] += inst.costs[i]
    if inst.size is not None:
        totals = np.zeros(k, dtype=np.int64)
        np.add.at(totals, mb_of, inst.tokens.astype(np.int64))
        flat = [t + inst.size.size(x) for t, x in zip(flat, totals.tolist(), strict=True)]
    return [flat[r * m : (r + 1) * m] for r in range(inst.dp_size)]


def light_ends_order(loads: Sequence[Any]) -> list[int]:
    """Positions of ``loads`` lightest at both ends, heaviest in the middle: the warm-up exposes
    the first micro-batch's forward on every stage and the cool-down the last one's backward,
    while the steady middle overlaps stages. Ties keep the lower position first."""
    ascending = sorted(range(len(loads)), key=lambda b: (loads[b], b))
    return ascending[0::2] + ascending[1::2][::-1]


@dataclass
class Ordered:
    """Each rank's order (positions into its micro-batches) and scaled exact makespan."""

    orders: list[list[int]]
    values: list[int]
    work: int
    clock_cut: bool = False

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
    deadline: float | None = None,
) -> Ordered:
    """Orders for every rank. The search path depends only on each rank's micro-batch times,
    not on the order they come in: :func:`light_ends_order` for every rank (one vectorised
    pass), then, while ``work_budget`` (operations evaluated by the search) lasts, local search
    on the exact makespan of the slowest rank (only it sets the step), until that rank cannot
    be improved. With ``keep_given``, a rank keeps the order given where that is faster."""
    rows = [list(r) for r in times]
    m = len(rows[0])
    ops = 2 * pp * vpp * m
    orders = [light_ends_order(r) for r in rows]
    vals = scaled_makespans([[r[i] for i in o] for r, o in zip(rows, orders, strict=True)], pp,
                            vpp, model)
    work = 0
    tried: set[int] = set()
    cut = False
    while pp > 1 and m > 1 and work < work_budget:
        if deadline is not None and time.perf_counter() > deadline:
            cut = True  # the clock, a safety net only
            break
        r = max(range(len(rows)), key=lambda i: (vals[i], -i))
        if r in tried:
            break
        order, value, spent = improve_order(rows[r], pp, vpp, model, starts=[orders[r]],
                                            work_budget=work_budget - work, deadline=deadline)
        work += spent
        if value < vals[r]:
            orders[r], vals[r] = order, value
        else:
            tried.add(r)  # a local optimum (or out of budget): the step cannot fall below it
    work += ops * len(rows)
    if keep_given:
        given = scaled_makespans(rows, pp, vpp, model)
        work += ops * len(rows)
        for r, v in enumerate(given):
            if v < vals[r]:
                orders[r], vals[r] = list(range(m)), v
    return Ordered(orders, vals, work, cut)


def _cheap_orders(
    inst: StepInstance, candidates: Sequence[tuple[int, np.ndarray]], model: PipelineModel,
    deadline: float | None,
) -> tuple[list[list[list[int]]], list[Ordered], float, bool]:
    """Each candidate's rank rows and cheap orders, in the order given (best proxy first), the
    first always; the others while the clock (a safety net) says one more fits before
    ``deadline``: many candidates of many micro-batches take long (29 of 80 micro-batches at
    pp = vpp = 4 took 0.12 s). Returns (rows, orders, seconds per candidate, whether the
    clock cut the list)."""
    rows: list[list[list[int]]] = []
    cheap: list[Ordered] = []
    began = time.perf_counter()
    for m, mb_of in candidates:
        if cheap and deadline is not None:
            now = time.perf_counter()
            if now + (now - began) / len(cheap) > deadline:
                return rows, cheap, (now - began) / len(cheap), True
        rows.append(rank_time_rows(inst, mb_of, m))
        cheap.append(order_ranks(rows[-1], inst.pp, inst.vpp, model))
    return rows, cheap, (time.perf_counter() - began) / len(cheap), False


@dataclass
class ExactChoice:
    """The chosen candidate (index into the list given), its orders and scaled makespans."""

    index: int
    ordered: Ordered
    work: int
    evaluated: int
    clock_cut: bool = False
    short: bool = False  # the work budget ended the order searches with candidates left
    #: Every candidate's fastest orders found (its cheap ones, or its search's), in the order
    #: given; shorter than the candidates where the clock cut their cheap orders.
    each: list[Ordered] = field(default_factory=list)


def choose_exact(
    inst: StepInstance,
    candidates: Sequence[tuple[int, np.ndarray]],
    model: PipelineModel,
    work_budget: int,
    deadline: float | None = None,
    first: Sequence[bool] = (),
) -> ExactChoice:
    """The candidate schedule ((m, mb_of), best proxy first) with the smallest exact step.

    Every candidate gets the cheap orders of :func:`order_ranks` whatever the budget (the
    first always, the others while the clock allows: :func:`_cheap_orders`). Then the best,
    those marked in ``first`` (the trainers' and given schedules), and the rest, each group
    best first, get the order search with ``ORDER_WORK`` while the budget lasts, when their
    order-free lower bound can still beat the best found; what is left goes to the best one's
    search. The search follows the same path whatever its budget, so a candidate searched here
    ends at least as fast as :func:`order_schedule` makes it with the default budget."""
    pp, vpp = inst.pp, inst.vpp
    # A search starts only if its fixed part (as long as one candidate's cheap orders) ends in time.
    rows, cheap, one, cut = _cheap_orders(inst, candidates, model, deadline)
    work = sum(c.work for c in cheap)
    best_i = min(range(len(cheap)), key=lambda i: (cheap[i].step, i))
    best = cheap[best_i]
    each = list(cheap)
    searched: set[int] = set()
    marked = set(i for i, f in enumerate(first) if f and i < len(cheap))
    short = False
    for i in sorted(range(len(cheap)),
                    key=lambda i: (i != best_i, i not in marked, cheap[i].step, i)):
        if work_budget - work < ORDER_WORK:
            short = True
            break
        if deadline is not None and time.perf_counter() + one > deadline:
            cut = True
            break
        floor = max(scaled_lower_bound(r, pp, vpp, model) for r in rows[i])
        if floor >= best.step:
            continue  # no order of this schedule can beat the best
        ordered = order_ranks(rows[i], pp, vpp, model, work_budget=ORDER_WORK, deadline=deadline)
        work += ordered.work
        cut |= ordered.clock_cut
        searched.add(i)
        if ordered.step < each[i].step:
            each[i] = ordered
        if ordered.step < best.step or (ordered.step == best.step and i == best_i):
            best_i, best = i, ordered
    left = work_budget - work
    if best_i in searched and left > ORDER_WORK and not cut:
        if deadline is not None and time.perf_counter() + one > deadline:
            cut = True
        else:
            # The same search again, further along its path: never slower.
            ordered = order_ranks(rows[best_i], pp, vpp, model, work_budget=ORDER_WORK + left,
                                  deadline=deadline)
            work += ordered.work
            cut |= ordered.clock_cut
            best = ordered if ordered.step <= best.step else best
    each[best_i] = best
    return ExactChoice(best_i, best, work, len(searched), cut, short, each)


def order_given(
    inst: StepInstance,
    model: PipelineModel,
    rows: Sequence[Row],
    final_deadline: float | None,
    cache: dict[tuple[int, bytes], Ordered] | None = None,
) -> tuple[list[tuple[Row, Ordered]], int, list[str]]:
    """The trainers' and given schedules (plan_step's rows), each ordered as
    :func:`order_schedule` orders it (the cheap orders, then ``ORDER_WORK`` of search on the
    slowest rank, the clock not looked at within one), so the plan is never behind one of them
    in that order, nor in its own. The search is skipped where no order can beat one of these
    schedules in its cheap order (the plan is at least that fast), and, noted, where the clock
    says it would end past the deadline (returned by name: the rows' methods).

    ``cache`` (by count and assignment) keeps the orders across calls that meet the same
    schedules again: a schedule in it is not ordered again, nor its work counted; the others are
    ordered as above among themselves, and added to it unless the clock left them in their cheap
    order."""
    if cache is None:
        return _order_rows(inst, model, rows, final_deadline)
    keys = [row.assignment for row in rows]
    new: dict[tuple[int, bytes], Row] = {}
    for key, row in zip(keys, rows, strict=True):
        if key not in cache:
            new.setdefault(key, row)
    fresh, work, late = _order_rows(inst, model, list(new.values()), final_deadline)
    key_of = {row.arrival: key for key, row in new.items()}
    got = {key_of[row.arrival]: ordered for row, ordered in fresh}
    cache.update((key, ordered) for key, ordered in got.items() if new[key].method not in late)
    ordered = [(row, cache[key] if key in cache else got[key])
               for key, row in zip(keys, rows, strict=True)]
    return ordered, work, late


def _order_rows(
    inst: StepInstance, model: PipelineModel, rows: Sequence[Row], final_deadline: float | None
) -> tuple[list[tuple[Row, Ordered]], int, list[str]]:
    """:func:`order_given` without a cache."""
    work, late = 0, []
    times = [rank_time_rows(inst, row.mb_of, row.m) for row in rows]
    cheap = [order_ranks(t, inst.pp, inst.vpp, model) for t in times]
    work += sum(c.work for c in cheap)
    top = min((c.step for c in cheap), default=0)
    out = []
    for row, t, ordered in sorted(zip(rows, times, cheap, strict=True),
                                  key=lambda x: (x[2].step, x[0][1])):
        if max(scaled_lower_bound(r, inst.pp, inst.vpp, model) for r in t) >= top:
            out.append((row, ordered))
            continue
        if (final_deadline is not None and time.perf_counter()
                + ORDER_WORK / OPS_PER_SECOND > final_deadline):
            late.append(row.method)
            out.append((row, ordered))
            continue
        ordered = order_ranks(t, inst.pp, inst.vpp, model, work_budget=ORDER_WORK)
        out.append((row, ordered))
        work += ordered.work
    return out, work, late


def order_schedule(
    schedule: Sequence[Sequence[Sequence[int]]],
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int | MicroBatchCost = 0,
    pp: int = 1,
    vpp: int = 1,
    pipeline: PipelineModel | None = None,
    work_budget: int = ORDER_WORK,
) -> tuple[list[list[list[int]]], int | Fraction]:
    """``schedule`` with each rank's micro-batches in the order seqpart finds for the exact
    makespan, and its step time: what :func:`plan_step` does to every schedule it weighs (the
    better of the given order and lightest-at-both-ends per rank, then the order search on the
    slowest rank within ``work_budget`` operations). For scoring a trainer's schedule in its
    best order. Ranks with different counts are ordered apart."""
    model = pipeline or DEFAULT_MODEL
    times = _micro_batch_times(schedule, lengths, cost, overhead)
    out = [[list(mb) for mb in rank] for rank in schedule]
    if pp == 1:
        return out, step_time(out, lengths, cost=cost, overhead=overhead)
    by_count: dict[int, list[int]] = {}
    for r, t in enumerate(times):
        if t:
            by_count.setdefault(len(t), []).append(r)
    for ranks in by_count.values():
        ordered = order_ranks([times[r] for r in ranks], pp, vpp, model, work_budget=work_budget)
        for r, order in zip(ranks, ordered.orders, strict=True):
            out[r] = [out[r][j] for j in order]
    return out, step_time(out, lengths, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
                          pipeline=model)


def assemble(
    inst: StepInstance,
    model: PipelineModel,
    m: int,
    mb_of: np.ndarray,
    method: str,
    orders: list[list[int]] | None,
    step: int | Fraction,
    bound: int | Fraction,
    notes: list[str],
    t0: float,
) -> StepPlan:
    """The plan: each rank's micro-batches in ``orders`` (None: :func:`light_ends_order`),
    checked by the validator, and its times re-scored by the public
    :func:`~seqpart.solver.step.model.rank_times`, which must give ``step``."""
    k = inst.dp_size * m
    by_mb = np.argsort(mb_of, kind="stable").tolist()  # sequences ascending in each micro-batch
    ends = np.cumsum(np.bincount(mb_of, minlength=k)).tolist()
    members = [by_mb[lo:hi] for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]
    rows = rank_time_rows(inst, mb_of, m)
    ranks = []
    for r in range(inst.dp_size):
        order = light_ends_order(rows[r]) if orders is None else orders[r]
        ranks.append([members[r * m + j] for j in order])
    over = "alone" if inst.oversize else "error"
    try:
        check_schedule(ranks, inst.tokens, inst.dp_size, m, inst.cap, inst.multiple_of,
                       oversize=over)
    except InvalidPlanError as err:
        raise RuntimeError(f"seqpart produced an invalid step schedule (please report): {err}") from err
    kw = {"cost": inst.cost, "overhead": inst.micro_batch_cost, "pp": inst.pp, "vpp": inst.vpp}
    times = rank_times(ranks, inst.tokens, pipeline=model, **kw)
    if max(times) != step:
        raise RuntimeError("step time bookkeeping disagrees with the model (please report)")
    bound = min(bound, step)
    return StepPlan(
        ranks=ranks,
        m=m,
        step_time=step,
        rank_times=times,
        lower_bound=bound,
        status="optimal" if step <= bound else "feasible",
        method=method,
        seconds=time.perf_counter() - t0,
        dp_size=inst.dp_size,
        cap=inst.cap,
        cost=inst.cost,
        overhead=inst.micro_batch_cost,
        pp=inst.pp,
        vpp=inst.vpp,
        multiple_of=inst.multiple_of,
        oversize=list(inst.oversize),
        notes=notes,
        pipeline=model,
        formula_step_time=unscale(max(scaled_rank_time(r, inst.pp, inst.vpp) for r in rows),
                                  inst.vpp),
    )


def order_for_pipeline(
    plan_or_loads: Plan | Sequence[int],
    *,
    pp: int | None = None,
    vpp: int = 1,
    pipeline: PipelineModel | None = None,
    work_budget: int = ORDER_WORK,
) -> list[int]:
    """An execution order of micro-batches for pipeline parallelism.

    Without ``pp``: lightest at both ends, heaviest in the middle. Why: during pipeline warm-up
    and cool-down only some stages are busy, so a heavy micro-batch there stretches the exposed
    bubble; in the steady middle its time overlaps other stages'.

    With ``pp`` (and ``vpp``, ``pipeline``: the schedule, default Megatron-LM's): that order,
    or the given one when it is faster, then improved by local search (moves and swaps) on the
    exact makespan of the schedule (:func:`~seqpart.solver.step.pipeline.improve_order`) within
    ``work_budget`` operations, deterministic. ``loads`` are then the micro-batch times.

    Returns positions into ``plan.bins`` (or ``loads``): run ``plan.bins[order[0]]`` first. Ties
    keep the lower position first, so the order is deterministic on every rank.
    """
    loads = list(plan_or_loads.loads if isinstance(plan_or_loads, Plan) else plan_or_loads)
    light = light_ends_order(loads)
    if pp is None or not loads:
        return light
    pp, vpp = as_pipeline(pp, vpp)
    model = pipeline or DEFAULT_MODEL
    why = schedule_error(pp, vpp, len(loads), model)
    if why is not None:
        raise ValueError(f"{len(loads)} micro-batches: {why}")
    order, _, _ = improve_order([int(x) for x in loads], pp, vpp, model,
                                starts=[light, list(range(len(loads)))], work_budget=work_budget)
    return order
