"""plan_step's last phase with pp > 1: the exact makespan decides, then refines.

The search ranks schedules by the closed formula, which at pp > 1 is neither exact nor a bound.
This phase weighs the searches' results, the best unsearched starts and the trainers' and given
schedules (each with the order search of :func:`~seqpart.solver.step.makespan.order_schedule`) by
the exact pipeline makespan (:func:`choose_by_exact_makespan`). :func:`refine_assignment` then
spends what is left of the time on moves of sequences between ranks scored by that makespan,
each rank keeping its order, and the plan is assembled.
:class:`~.run.StepSearch` runs it on its state (:class:`~.state.StepState`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...tuning import COUNT_REFINE_SHARE
from ..bound import instance_exact_bounds
from ..budget import exact_reserve
from ..makespan import OPS_PER_SECOND, Ordered, assemble, choose_exact, rank_time_rows
from ..model import StepInstance, StepPlan
from ..model import exact as exact_time
from ..pipeline import PipelineModel, scale, scaled_makespans
from ..starts import Row
from .state import StepState, is_given
from .trainer_starts import order_given_starts

__all__ = ["Refined", "choose_by_exact_makespan", "refine_assignment"]


# ------------------------------------------------------------- the refinement

#: Sequences of the slowest rank tried per step (spread over its cost order), and the ranks
#: (least loaded first) whose micro-batches receive them.
_REFINE_SOURCES = 32
_REFINE_RANKS = 8
#: Operations scored per step at most (a few ms here), so that the clock is read often.
_REFINE_STEP_OPS = 200_000
#: Operations scored at once: a step takes the best move of the first such chunk that helps.
_REFINE_CHUNK_OPS = 20_000


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
    """A move of a sequence of the slowest rank ``r`` to a micro-batch of a less loaded rank
    that lowers the larger of the two ranks' exact makespans below ``values[r]`` (None: none
    does), and the work spent. Each rank keeps its order. The sources are tried largest relief
    first, ``_REFINE_CHUNK_OPS`` at a time: the best move of the first chunk that holds one
    (first improvement: 10x faster per move than the best of all, and as good on the
    benchmark's batches)."""
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
    receiving = [(q, state.row(q)) for q in ranks[:_REFINE_RANKS]]
    room = max(m, _REFINE_STEP_OPS // ops)  # rows scored this step; the largest relief first
    chunk = max(m, _REFINE_CHUNK_OPS // ops)
    scored = 0
    pairs: list[tuple[int, int, int]] = []
    rows: list[list[int]] = []
    for value_r, i in [*sorted(zip(after_r, sources, strict=True)), (target, -1)]:
        # Scored a chunk at a time: the first chunk holding a move that helps gives its best.
        if len(rows) >= chunk or value_r >= target or scored + len(rows) >= room:
            if rows:
                after_q = scaled_makespans(rows, pp, vpp, model)
                work += ops * len(rows)
                scored += len(rows)
                best = min(range(len(rows)), key=lambda j: (max(pairs[j][2], after_q[j]), j))
                if max(pairs[best][2], after_q[best]) < target:
                    return (pairs[best][0], pairs[best][1]), work
                pairs, rows = [], []
            if value_r >= target or scored >= room:
                break
        for q, row_q in receiving:
            for pos in range(m):
                dst = q * m + pos
                if state.fits(dst, i):
                    new = row_q.copy()
                    new[state.slot[dst]] += state.change(dst, i, +1)
                    pairs.append((i, dst, value_r))
                    rows.append(new)
    return None, work


def _best_inner_move(state: _Assignment, r: int, values: list[int], model: PipelineModel,
                     ) -> tuple[tuple[int, int] | None, int]:
    """The move of a sequence of the slowest rank ``r`` to another of its own micro-batches
    that lowers its exact makespan the most (None: none lowers it), and the work spent: the
    split within a rank sets its bubble (its first micro-batch's forward and its last one's
    backward cross every stage), which moves between ranks do not reach."""
    inst, m = state.inst, state.m
    ops = 2 * inst.pp * inst.vpp * m
    row_r = state.row(r)
    room = max(m, _REFINE_STEP_OPS // ops)
    pairs, rows = [], []
    for i in _sources(state, r):
        b = int(state.where[i])
        out = state.change(b, i, -1)
        for pos in range(m):
            dst = r * m + pos
            if dst == b or not state.fits(dst, i):
                continue
            new = row_r.copy()
            new[state.slot[b]] += out
            new[state.slot[dst]] += state.change(dst, i, +1)
            pairs.append((i, dst))
            rows.append(new)
        if len(rows) >= room:
            break
    if not rows:
        return None, 0
    after = scaled_makespans(rows, inst.pp, inst.vpp, model)
    best = min(range(len(rows)), key=lambda j: (after[j], j))
    return (pairs[best] if after[best] < values[r] else None), ops * len(rows)


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
    rank's old makespan, or where none does, to another of the slowest rank's own micro-batches
    when its makespan falls (so the sorted makespans fall and the search ends). Stops at a local
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
            move, spent = _best_inner_move(state, r, values, model)
            work += spent
        if move is None:
            break
        i, dst = move
        q = dst // m
        state.move(i, dst)
        moves += 1
        if q == r:
            values[r] = scaled_makespans([state.row(r)], inst.pp, inst.vpp, model)[0]
        else:
            values[r], values[q] = scaled_makespans([state.row(r), state.row(q)], inst.pp,
                                                    inst.vpp, model)
    return Refined(state.where, values, moves, work, cut)


# ------------------------------------------------------------- the phase

#: The unsearched starts evaluated exactly besides the searched ones, the trainers' and the
#: given ones (best proxy first).
EXTRA_CANDIDATES = 4
#: The runners-up whose assignments the exact makespan's moves refine after the fastest one's,
#: while the work lasts (set by hand).
RUNNERS_UP = 8
#: The searches' results the exact makespan weighs: the best by the formula, and the best of
#: each count (the clock's rounds add many results; each costs an exact evaluation of every rank).
FINAL_CANDIDATES = 8
#: The same in a count's own search, where every result is of the one count (and the proxy
#: ranks them less well than it ranks counts).
COUNT_FINAL_CANDIDATES = 32


def best_of_each_count(rows: list[Row], top: int) -> list[Row]:
    """The ``top`` best rows by the formula, and the best row of every other count."""
    ranked = sorted(rows, key=lambda row: (row.objective, row.arrival))
    kept, counts = ranked[:top], {row.m for row in ranked[:top]}
    for row in ranked[top:]:
        if row.m not in counts:
            kept.append(row)
            counts.add(row.m)
    return kept


def _candidates(search: StepState) -> list[Row]:
    """The searches' best results, the best unsearched starts, and the best start of every
    count built (the formula ranks counts differently from the schedule: interleaving at a
    count that is not a multiple of pp runs slower than the formula says); best proxy first.
    The trainers' and given schedules are weighed apart."""
    given_ids = {row.arrival for row in search.pool if is_given(row.method)}
    rest = sorted((row for row in search.pool
                   if row.arrival not in search.searched and row.arrival not in given_ids),
                  key=lambda row: (row.objective, row.arrival))
    per_count = {row.m: row for row in reversed(rest)}
    top = {row.arrival for row in rest[:EXTRA_CANDIDATES]}
    others = rest[:EXTRA_CANDIDATES] + [row for row in per_count.values() if row.arrival not in top]
    top_finals = COUNT_FINAL_CANDIDATES if search.count is not None else FINAL_CANDIDATES
    return sorted(best_of_each_count(search.finals, top_finals) + others,
                  key=lambda row: (row.objective, row.arrival))


def _fastest(search: StepState, cands: list[Row],
             ) -> tuple[list[tuple[Row, Ordered]], int]:
    """Every candidate and trainer's or given schedule that reached the exact makespan, with
    its orders: the one with the smallest exact step first (a search's result wins ties), the
    rest fastest first; and the work spent."""
    inst = search.inst
    order_given_starts(search)  # those that arrived after the search (the open-ended parts)
    fixed, fixed_work, late = list(search.fixed.values()), search.fixed_work, search.late
    if late:
        search.notes.append("the clock ran out before these schedules' order search (each in its "
                            f"own order or lightest micro-batches first and last): {', '.join(late)}")
    best: tuple[Row, Ordered] | None = None
    reached: list[tuple[Row, Ordered]] = []
    work, searched = fixed_work, 0
    if cands:
        # The trainers' searches may take up to half of the exact share, past it (noted in
        # budget.EXACT_SHARE): the searches' results keep the other half.
        budget = max(search.exact_work - fixed_work, search.exact_work // 2)
        if search.count is not None:
            # A count's own search: the choice spends what it is given on the best one's
            # orders, and its moves between ranks find what more order search misses.
            budget = int(budget * (1 - COUNT_REFINE_SHARE))
        choice = choose_exact(inst, [(row.m, row.mb_of) for row in cands], search.model,
                              budget, search.final_deadline)
        search.clock_short |= choice.clock_cut
        search.work_short |= choice.short
        if choice.clock_cut:
            search.notes.append("the exact makespan's order search was stopped by the clock, "
                                "not the work budget: the plan may differ between runs")
        best = (cands[choice.index], choice.ordered)
        reached = [(cands[i], ordered) for i, ordered in enumerate(choice.each)
                   if i != choice.index]
        work, searched = work + choice.work, choice.evaluated
    for row, ordered in fixed:  # a search's result wins ties
        if best is None or ordered.step < best[1].step:
            if best is not None:
                reached.append(best)
            best = (row, ordered)
        else:
            reached.append((row, ordered))
    if best is None:  # never: the pool held a start, and only the clock leaves one out
        raise RuntimeError("no schedule reached the exact makespan (please report)")
    search.notes.append(f"exact makespan: {len(cands) + len(fixed)} schedules evaluated, "
                        f"{searched} order-searched, and the {len(fixed)} trainers' and given "
                        f"ones ordered apart; work {work} of {search.exact_work}")
    reached.sort(key=lambda pair: pair[1].step)  # stable: ties keep the candidates' order
    return [best, *reached], work


def _runners_up(ranked: list[tuple[Row, Ordered]]) -> list[tuple[Row, Ordered]]:
    """The schedules after the fastest, fastest first, each assignment once."""
    seen = {ranked[0][0].assignment}
    out = []
    for row, ordered in ranked[1:]:
        if row.assignment not in seen:
            seen.add(row.assignment)
            out.append((row, ordered))
    return out[:RUNNERS_UP]


def choose_by_exact_makespan(search: StepState) -> StepPlan:
    """pp > 1: the exact makespan decides between the searches' results, the trainers' and
    the given schedules and the best unsearched starts, each rank ordered for it; what is left
    refines the winner's assignment on the exact makespan itself, then the runners-up's, fastest
    first, while it lasts (the winner's moves often settle early at a local optimum, and a
    count's longer searches would only refine the same winner again)."""
    inst, model = search.inst, search.model
    ranked, work = _fastest(search, _candidates(search))
    winner, winner_orders = ranked[0]
    method, m, mb_of = winner.method, winner.m, winner.mb_of
    orders, step = winner_orders.orders, winner_orders.step
    # The winner's moves may take the clock's time unless the plan must be repeatable; the
    # runners-up's take what the work budget leaves in both modes (with the clock, a search
    # that settles well within its limit then still gives the same plan each run).
    left = max(0, search.exact_work - work)
    spent = 0
    for turn, (row, ordered) in enumerate([ranked[0], *_runners_up(ranked)]):
        if turn and spent >= left:
            break
        budget = left - spent if turn or search.options.deterministic else 10**15
        # Its set-up alone (every rank's makespan) costs about what the assembly does: skipped
        # once the clock has run out, and a runner-up's unless its set-up fits before it does.
        setup = exact_reserve(inst, inst.dp_size * row.m) if turn else 0.0
        if search.out_of_clock_final(setup):
            search.clock_short = True
            break
        refined = refine_assignment(inst, model, row.m, row.mb_of, ordered.orders, budget,
                                    search.final_deadline)
        search.clock_short |= refined.clock_cut
        search.work_short |= refined.work >= budget
        spent += refined.work
        if refined.step < step:
            search.notes.append(
                f"exact makespan: {refined.moves} moves of sequences between ranks lowered the "
                f"step {float(1 - Fraction(refined.step, step)):.3%}"
                + (f" from the runner-up {row.method}" if turn else ""))
            m, mb_of, step, orders = row.m, refined.mb_of, refined.step, ordered.orders
            method = row.method + "+exact_moves"
    search.exact_spent = work + spent
    sc = scale(inst.vpp, model)
    return assemble(inst, model, m, mb_of, method, orders, exact_time(step, sc),
                    exact_time(min(instance_exact_bounds(inst, model).values()), sc),
                    search.notes, search.t0)
