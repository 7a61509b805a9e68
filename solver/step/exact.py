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
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from seqpart.solver.batch_cost import MicroBatchCost
from seqpart.solver.errors import InvalidPlanError
from seqpart.solver.step.model import (
    StepInstance,
    StepPlan,
    _micro_batch_times,
    check_schedule,
    rank_times,
    scaled_rank_time,
    step_time,
)
from seqpart.solver.step.model import exact as unscale
from seqpart.solver.step.pipeline import (
    DEFAULT_MODEL,
    ORDER_WORK,
    PipelineModel,
    improve_order,
    light_ends_order,
    scale,
    scaled_lower_bound,
    scaled_makespans,
    schedule_error,
)

__all__ = [
    "OPS_PER_SECOND",
    "ExactChoice",
    "assemble",
    "choose_exact",
    "count_penalty",
    "order_schedule",
    "order_ranks",
    "rank_time_rows",
]

#: Operations of the exact evaluation per second (one op: one micro-batch's forward or backward
#: on one chunk, for one rank or candidate order). Measured 40-170 million on the 2-core machine
#: under a load of 2-3 (vectorised over 256 orders); a conservative figure turns a time budget
#: into a deterministic work budget.
OPS_PER_SECOND = 50_000_000


@functools.lru_cache(maxsize=4096)
def _extra_rounds(pp: int, vpp: int, residue: int, model: PipelineModel) -> Fraction | None:
    """How many micro-batch times the schedule takes beyond ``m + (pp-1)/vpp`` for equal
    micro-batches at a count ``pp + residue`` (None: it cannot run that count)."""
    m = pp + residue
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


@dataclass
class ExactChoice:
    """The chosen candidate (index into the list given), its orders and scaled makespans."""

    index: int
    ordered: Ordered
    work: int
    evaluated: int
    clock_cut: bool = False


def choose_exact(
    inst: StepInstance,
    candidates: Sequence[tuple[int, np.ndarray]],
    model: PipelineModel,
    work_budget: int,
    deadline: float | None = None,
    first: Sequence[bool] = (),
) -> ExactChoice:
    """The candidate schedule ((m, mb_of), best proxy first) with the smallest exact step.

    Every candidate gets the cheap orders of :func:`order_ranks` (always, whatever the budget:
    the trainers' schedules are among them). Then the best, those marked in ``first`` (the
    trainers' and given schedules), and the rest, each group best first, get the order search
    with ``ORDER_WORK`` while the budget lasts, when their order-free lower bound can still
    beat the best found; what is left goes to the best one's search. The search follows the same path
    whatever its budget, so a candidate searched here ends at least as fast as
    :func:`order_schedule` makes it with the default budget."""
    pp, vpp = inst.pp, inst.vpp
    rows = [rank_time_rows(inst, mb_of, m) for m, mb_of in candidates]
    cheap = [order_ranks(r, pp, vpp, model) for r in rows]
    work = sum(c.work for c in cheap)
    best_i = min(range(len(candidates)), key=lambda i: (cheap[i].step, i))
    best = cheap[best_i]
    searched: set[int] = set()
    cut = False
    marked = set(i for i, f in enumerate(first) if f)
    for i in sorted(range(len(candidates)),
                    key=lambda i: (i != best_i, i not in marked, cheap[i].step, i)):
        if work_budget - work < ORDER_WORK:
            break
        if deadline is not None and time.perf_counter() > deadline:
            cut = True
            break
        floor = max(scaled_lower_bound(r, pp, vpp, model) for r in rows[i])
        if floor >= best.step:
            continue  # no order of this schedule can beat the best
        ordered = order_ranks(rows[i], pp, vpp, model, work_budget=ORDER_WORK, deadline=deadline)
        work += ordered.work
        cut |= ordered.clock_cut
        searched.add(i)
        if ordered.step < best.step or (ordered.step == best.step and i == best_i):
            best_i, best = i, ordered
    left = work_budget - work
    if best_i in searched and left > ORDER_WORK and not cut:
        # The same search again, further along its path: never slower.
        ordered = order_ranks(rows[best_i], pp, vpp, model, work_budget=ORDER_WORK + left,
                              deadline=deadline)
        work += ordered.work
        cut |= ordered.clock_cut
        best = ordered if ordered.step <= best.step else best
    return ExactChoice(best_i, best, work, len(searched), cut)


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
    by_mb = np.argsort(mb_of, kind="stable")  # sequences ascending within each micro-batch
    cuts = np.cumsum(np.bincount(mb_of, minlength=k))[:-1]
    members = [part.tolist() for part in np.split(by_mb, cuts)]
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


# ----------------------------------------------------------------------------- assignment

#: Sequences of the slowest rank tried per step (spread over its cost order), and the ranks
#: (least loaded first) whose micro-batches receive them.
_REFINE_SOURCES = 32
_REFINE_RANKS = 8
#: Operations scored per step at most (a few ms here), so that the clock is read often.
_REFINE_STEP_OPS = 200_000


@dataclass
class Refined:
    """The assignment after :func:`refine_assignment` (orders kept), its scaled makespans."""

    mb_of: np.ndarray
    values: list[int]
    moves: int
    work: int
    clock_cut: bool = False

    @property
    def step(self) -> int:
        return max(self.values)


class _Assignment:
    """A schedule's micro-batch times (exact ints), token totals, counts and rank orders."""

    def __init__(self, inst: StepInstance, m: int, mb_of: np.ndarray,
                 orders: Sequence[Sequence[int]]) -> None:
        self.inst, self.m = inst, m
        self.where = np.asarray(mb_of, dtype=np.int64).copy()
        self.times = [t for row in rank_time_rows(inst, self.where, m) for t in row]
        k = inst.dp_size * m
        self.tokens = np.zeros(k, dtype=np.int64)
        np.add.at(self.tokens, self.where, inst.tokens.astype(np.int64))
        self.count = np.bincount(self.where, minlength=k)
        # slot[b]: micro-batch b's position in its rank's execution order.
        self.slot = [0] * k
        self.orders = [list(o) for o in orders]
        for r, order in enumerate(self.orders):
            for j, pos in enumerate(order):
                self.slot[r * m + pos] = j

    def row(self, r: int) -> list[int]:
        return [self.times[r * self.m + pos] for pos in self.orders[r]]

    def change(self, b: int, i: int, sign: int) -> int:
        """How much micro-batch ``b``'s time changes when sequence ``i`` leaves (-1) or joins (+1)."""
        inst = self.inst
        delta = sign * inst.costs[i]
        if inst.size is not None:
            total = int(self.tokens[b])
            delta += inst.size.size(total + sign * int(inst.tokens[i])) - inst.size.size(total)
        return delta

    def fits(self, b: int, i: int) -> bool:
        return self.inst.cap is None or int(self.tokens[b] + self.inst.tokens[i]) <= self.inst.cap

    def move(self, i: int, dst: int) -> None:
        src = int(self.where[i])
        self.times[src] += self.change(src, i, -1)
        self.times[dst] += self.change(dst, i, +1)
        length = int(self.inst.tokens[i])
        self.tokens[src] -= length
        self.tokens[dst] += length
        self.count[src] -= 1
        self.count[dst] += 1
        self.where[i] = dst


def _sources(state: _Assignment, r: int) -> list[int]:
    """Sequences of rank ``r`` that can leave their micro-batch, spread over their cost order."""
    m, costs = state.m, state.inst.costs
    mine = [i for i in np.flatnonzero(state.where // m == r).tolist()
            if state.count[state.where[i]] > 1]
    mine.sort(key=lambda i: (-costs[i], i))
    if len(mine) > _REFINE_SOURCES:
        picks = np.linspace(0, len(mine) - 1, _REFINE_SOURCES).round().astype(int).tolist()
        mine = [mine[p] for p in dict.fromkeys(picks)]
    return mine


def _best_move(state: _Assignment, r: int, values: list[int], model: PipelineModel,
               ) -> tuple[tuple[int, int] | None, int]:
    """The move of a sequence of the slowest rank ``r`` to a micro-batch of a less loaded rank
    that lowers the larger of the two ranks' exact makespans the most (None: none lowers it
    below ``values[r]``), and the work spent. Each rank keeps its order."""
    inst, m = state.inst, state.m
    pp, vpp, target = inst.pp, inst.vpp, values[r]
    ops = 2 * pp * vpp * m
    row_r = state.row(r)
    sources = _sources(state, r)
    if not sources:
        return None, 0
    leaving = []
    for i in sources:
        b = int(state.where[i])
        new = row_r.copy()
        new[state.slot[b]] += state.change(b, i, -1)
        leaving.append(new)
    after_r = scaled_makespans(leaving, pp, vpp, model)
    work = ops * len(leaving)
    ranks = sorted((q for q in range(inst.dp_size) if q != r), key=lambda q: (values[q], q))
    room = max(m, _REFINE_STEP_OPS // ops)  # rows scored this step; the largest relief first
    pairs, rows = [], []
    for value_r, i in sorted(zip(after_r, sources, strict=True)):
        if value_r >= target or len(rows) >= room:
            break
        for q in ranks[:_REFINE_RANKS]:
            row_q = state.row(q)
            for pos in range(m):
                dst = q * m + pos
                if state.fits(dst, i):
                    new = row_q.copy()
                    new[state.slot[dst]] += state.change(dst, i, +1)
                    pairs.append((i, dst, value_r))
                    rows.append(new)
    if not rows:
        return None, work
    after_q = scaled_makespans(rows, pp, vpp, model)
    work += ops * len(rows)
    best = min(range(len(rows)), key=lambda j: (max(pairs[j][2], after_q[j]), j))
    if max(pairs[best][2], after_q[best]) >= target:
        return None, work
    return (pairs[best][0], pairs[best][1]), work


def refine_assignment(
    inst: StepInstance,
    model: PipelineModel,
    m: int,
    mb_of: np.ndarray,
    orders: Sequence[Sequence[int]],
    work_budget: int,
    deadline: float | None = None,
) -> Refined:
    """Local search on the assignment, scored by the exact makespan (the search before it
    scores moves with the closed formula, which at pp > 1 is neither exact nor a bound).

    Each step moves one sequence of the slowest rank to a micro-batch of one of the least loaded
    ranks, every rank keeping its order, when both ranks then end strictly below the slowest
    rank's old makespan (so the sorted makespans fall and the search ends). Stops at a local
    optimum, when ``work_budget`` (operations evaluated: deterministic) is spent or past
    ``deadline`` (a safety net). Keeps every micro-batch non-empty and under the cap."""
    state = _Assignment(inst, m, mb_of, orders)
    values = scaled_makespans([state.row(r) for r in range(inst.dp_size)], inst.pp, inst.vpp,
                              model)
    work, moves, cut = 0, 0, False
    # A step scores at most _REFINE_STEP_OPS (plus its sources): started only if it can end in time.
    step_seconds = 2 * _REFINE_STEP_OPS / OPS_PER_SECOND
    while inst.pp > 1 and work < work_budget:
        if deadline is not None and time.perf_counter() + step_seconds > deadline:
            cut = True
            break
        r = max(range(inst.dp_size), key=lambda q: (values[q], -q))
        move, spent = _best_move(state, r, values, model)
        work += spent
        if move is None:
            break
        i, dst = move
        q = dst // m
        state.move(i, dst)
        moves += 1
        values[r], values[q] = scaled_makespans([state.row(r), state.row(q)], inst.pp, inst.vpp,
                                                model)
    return Refined(state.where, values, moves, work, cut)
