"""The optimum step: exact for a tiny instance, by exhaustive search (for benchmarks and checks),
and over continuous splits of a rank's load, as an LP whose dual certifies a lower bound (used
by :mod:`~seqpart.solver.step.bound`).

Why: the step bound (:mod:`~seqpart.solver.step.bound`) and ``plan_step`` are only judged
against each other at scale; on a tiny instance (about n <= 9 sequences, dp <= 3) the true
optimum under the exact pipeline makespan can be found, and both measured against it.

:func:`optimal_step` tries every runnable count ``m`` per rank (``inst.feasible_ms()`` whose
schedule runs, :func:`~.pipeline.schedule_error`), every split of the sequences into ``dp*m``
non-empty micro-batches under the cap (over-cap sequences alone), every assignment of the
micro-batches to ranks, and every order on each rank, under ``model``'s schedule. Symmetries
removed: micro-batches are unordered blocks (restricted growth labels), ranks are unordered (the
first rank holds the first block left), a rank's best order depends only on the multiset of its
micro-batch times (memoised). Pruned: a rank whose :func:`~.pipeline.scaled_lower_bound` is not
below the best step found is skipped, and so is every grouping it is in. Times are exact ints,
the step is kept multiplied by :func:`~.pipeline.scale`.

:func:`lp_certificate` is the least makespan of one rank's schedule over every order and every
real-valued split of its load into ``m`` micro-batch times: a convex problem (the makespan is
the longest path, a max of linear functions of the times), solved as an LP; its dual, a flow
over the schedule's paths made exact in integers, proves the bound whatever the solver's
precision.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from ortools.linear_solver import pywraplp

from .model import StepInstance
from .pipeline import (
    DEFAULT_MODEL,
    PipelineModel,
    device_orders,
    scaled_lower_bound,
    scaled_makespans,
    schedule_error,
)

__all__ = [
    "LP_BUDGET",
    "LP_OPERATIONS",
    "OptimumResult",
    "check_result",
    "lp_certificate",
    "optimal_at_count",
    "optimal_step",
    "runnable_counts",
]

#: (scaled step, m, micro-batch of each sequence, each rank's order of positions)
OptimumResult = tuple[int, int, list[int], list[list[int]]]


class _OutOfWork(Exception):
    """The work limit ran out (the search then answers None)."""


class _Search:
    """The state of one search: the instance's exact micro-batch times, the memo of each
    multiset's best order, and the work spent (orders evaluated x operations each, plus one
    per split and grouping visited)."""

    def __init__(self, inst: StepInstance, model: PipelineModel, work_limit: int) -> None:
        self.inst, self.model, self.limit = inst, model, work_limit
        self.work = 0
        self.memo: dict[tuple[int, ...], tuple[int, tuple[int, ...]]] = {}
        self.alone = set(inst.oversize)

    def spend(self, amount: int) -> None:
        self.work += amount
        if self.work > self.limit:
            raise _OutOfWork

    def time_of(self, block: list[int]) -> int:
        """A micro-batch's exact time: overhead + its costs (+ the size term of its tokens)."""
        inst = self.inst
        t = inst.overhead + sum(inst.costs[i] for i in block)
        if inst.size is not None:
            t += inst.size.size(int(sum(int(inst.tokens[i]) for i in block)))
        return t

    def best_order(self, times: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """The least scaled makespan of these times (sorted) over every distinct order, and
        that order (positions into ``times``)."""
        hit = self.memo.get(times)
        if hit is not None:
            return hit
        inst, m = self.inst, len(times)
        perms = sorted(set(itertools.permutations(range(m), m)))
        rows: dict[tuple[int, ...], tuple[int, ...]] = {}
        for p in perms:  # distinct rows only (equal times give equal makespans)
            rows.setdefault(tuple(times[i] for i in p), p)
        keys = list(rows)
        self.spend(len(keys) * 2 * inst.pp * inst.vpp * m)
        values = scaled_makespans(keys, inst.pp, inst.vpp, self.model)
        best = min(range(len(keys)), key=lambda i: (values[i], i))
        out = (values[best], rows[keys[best]])
        self.memo[times] = out
        return out


def _splits(search: _Search, k: int) -> Iterator[list[list[int]]]:
    """Every split of the sequences into exactly ``k`` non-empty micro-batches under the cap
    (an over-cap sequence alone), each once (blocks labelled in order of first use)."""
    inst = search.inst
    n, cap, alone = inst.n, inst.cap, search.alone
    tokens = [int(x) for x in inst.tokens]
    blocks: list[list[int]] = []
    load: list[int] = []

    def fits(b: int, i: int) -> bool:
        if i in alone or (blocks[b] and blocks[b][0] in alone):
            return False
        return cap is None or load[b] + tokens[i] <= cap

    def rec(i: int) -> Iterator[list[list[int]]]:
        if i == n:
            if len(blocks) == k:
                search.spend(1)
                yield [list(b) for b in blocks]
            return
        if n - i < k - len(blocks):
            return
        for b in range(len(blocks)):
            if fits(b, i):
                blocks[b].append(i)
                load[b] += tokens[i]
                yield from rec(i + 1)
                blocks[b].pop()
                load[b] -= tokens[i]
        if len(blocks) < k:
            blocks.append([i])
            load.append(tokens[i])
            yield from rec(i + 1)
            blocks.pop()
            load.pop()

    yield from rec(0)


def _groupings(k: int, m: int) -> Iterator[list[tuple[int, ...]]]:
    """Every split of blocks ``0..k-1`` into unordered groups of ``m`` (each group holds the
    smallest block left)."""
    def rec(left: tuple[int, ...]) -> Iterator[list[tuple[int, ...]]]:
        if not left:
            yield []
            return
        first, rest = left[0], left[1:]
        for others in itertools.combinations(rest, m - 1):
            group = (first, *others)
            remaining = tuple(b for b in rest if b not in others)
            for tail in rec(remaining):
                yield [group, *tail]

    yield from rec(tuple(range(k)))


def _best_at_count(search: _Search, m: int, incumbent: int | None) -> OptimumResult | None:
    """The best step at count ``m`` below ``incumbent`` (None: none below it, or none)."""
    inst = search.inst
    pp, vpp, dp = inst.pp, inst.vpp, inst.dp_size
    k = dp * m
    groupings = list(_groupings(k, m))
    best: OptimumResult | None = None
    bound_memo: dict[tuple[int, ...], int] = {}
    for blocks in _splits(search, k):
        times = [search.time_of(b) for b in blocks]
        for grouping in groupings:
            search.spend(1)
            keys = [tuple(sorted(times[b] for b in g)) for g in grouping]
            lows = []
            for key in keys:
                if key not in bound_memo:
                    bound_memo[key] = scaled_lower_bound(key, pp, vpp, search.model)
                lows.append(bound_memo[key])
            if incumbent is not None and max(lows) >= incumbent:
                continue
            step, orders = 0, []
            for r in sorted(range(dp), key=lambda r: -lows[r]):
                value, order = search.best_order(keys[r])
                step = max(step, value)
                if incumbent is not None and step >= incumbent:
                    break
                orders.append((r, order))
            else:
                incumbent = step
                best = _result(step, m, blocks, grouping, times, dict(orders), inst.n)
    return best


def _result(step: int, m: int, blocks: list[list[int]], grouping: list[tuple[int, ...]],
            times: list[int], sorted_orders: dict[int, tuple[int, ...]], n: int) -> OptimumResult:
    """The result in ``Ordered``'s terms: micro-batch ``r*m + j`` is the ``j``-th block of
    group ``r``; its order maps the sorted-times order back to positions."""
    mb_of = [0] * n
    orders = []
    for r, group in enumerate(grouping):
        for j, b in enumerate(group):
            for i in blocks[b]:
                mb_of[i] = r * m + j
        by_time = sorted(range(m), key=lambda j: (times[group[j]], j))  # sorted key positions
        orders.append([by_time[p] for p in sorted_orders[r]])
    return step, m, mb_of, orders


def runnable_counts(inst: StepInstance, model: PipelineModel = DEFAULT_MODEL) -> list[int]:
    """The counts per rank a step can use: feasible for the cap and ``multiple_of``, with a
    micro-batch for every ``dp*m``, and run by the schedule."""
    return [m for m in inst.feasible_ms() if m * inst.dp_size <= inst.n
            and (inst.pp == 1 or schedule_error(inst.pp, inst.vpp, m, model) is None)]


def optimal_at_count(inst: StepInstance, model: PipelineModel, m: int,
                     work_limit: int = 10**9) -> OptimumResult | None:
    """The optimal step (scaled) with exactly ``m`` micro-batches per rank, or None when the
    work limit ran out or no split exists (``m`` must be runnable: :func:`runnable_counts`)."""
    search = _Search(inst, model, work_limit)
    try:
        return _best_at_count(search, m, None)
    except _OutOfWork:
        return None


def optimal_step(inst: StepInstance, model: PipelineModel = DEFAULT_MODEL,
                 work_limit: int = 10**9) -> OptimumResult | None:
    """The optimal step over every runnable count: ``(scaled_step, m, mb_of, orders)``, the
    step times :func:`~.pipeline.scale`, ``mb_of[i]`` sequence i's micro-batch (micro-batch
    ``b`` on rank ``b // m``), ``orders[r]`` the positions of rank r's micro-batches in
    execution order; None when ``work_limit`` (orders evaluated x operations each, plus one per
    split and grouping visited) ran out first."""
    search = _Search(inst, model, work_limit)
    best: OptimumResult | None = None
    try:
        for m in runnable_counts(inst, model):
            found = _best_at_count(search, m, None if best is None else best[0])
            if found is not None:
                best = found
    except _OutOfWork:
        return None
    return best


def check_result(inst: StepInstance, model: PipelineModel, result: OptimumResult) -> int:
    """Re-evaluate a result from scratch (each rank's times in its order): its scaled step."""
    _, m, mb_of, orders = result
    blocks: list[list[int]] = [[] for _ in range(inst.dp_size * m)]
    for i, b in enumerate(mb_of):
        blocks[b].append(i)
    search = _Search(inst, model, 1 << 62)
    rows = [[search.time_of(blocks[r * m + j]) for j in order] for r, order in enumerate(orders)]
    return max(scaled_makespans(rows, inst.pp, inst.vpp, model))


# ----------------------------------------------------------------------------- continuous splits


#: Pipeline LPs (:func:`lp_certificate`): the most operations (``2*pp*vpp*m``) one count's is
#: built with, and in all per call (counts taken least bound first until one is over either;
#: results are cached). About 10-30 ms an LP of 512 operations on the 2-core machine.
LP_OPERATIONS, LP_BUDGET = 512, 1024


def _schedule_graph(pp: int, vpp: int, m: int, model: PipelineModel) -> tuple[
        list[tuple[int, int]], list[tuple[int, int, bool]], list[int], list[int]]:
    """The schedule's graph: per operation (micro-batch, share F or B); edges (from, to, crosses
    devices) for the device order and the inputs; the operations with no predecessor; each
    device's last. Node ids follow the devices' orders."""
    orders = device_orders(pp, vpp, m, model)
    ids: dict[tuple[int, int, int], int] = {}
    nodes: list[tuple[int, int]] = []
    for d, ops in enumerate(orders):
        for k, j, c in ops:
            ids[(k, j, c * pp + d)] = len(nodes)
            nodes.append((j, model.backward if k else model.forward))
    edges, has_pred, last = [], [False] * len(nodes), []
    nv = pp * vpp
    for d, ops in enumerate(orders):
        before = -1
        for k, j, c in ops:
            v = c * pp + d
            i = ids[(k, j, v)]
            if before >= 0:
                edges.append((before, i, False))
                has_pred[i] = True
            need = (0, j, v - 1) if not k and v > 0 else (0, j, v) if k and v == nv - 1 else \
                (1, j, v + 1) if k else None
            if need is not None:
                edges.append((ids[need], i, need[2] % pp != d))
                has_pred[i] = True
            before = i
        last.append(before)
    return nodes, edges, [i for i, x in enumerate(has_pred) if not x], last


@lru_cache(maxsize=4096)
def lp_certificate(pp: int, vpp: int, m: int, model: PipelineModel) -> tuple[int, int, int]:
    """``(C, L, S)`` such that the scaled makespan of ``m`` micro-batches of times summing to
    ``T`` under ``model``'s schedule, in any order, is at least ``(C*T + L*lat)/S`` (``lat`` the
    scaled p2p latency); ``(0, 0, 1)`` when the schedule cannot run ``m``.

    Proof: the makespan is the longest path of the schedule's graph (an operation of
    micro-batch ``j`` weighs ``F*t_j`` or ``B*t_j``, an edge across devices ``lat``), so it is at
    least any average of paths: with a flow of value ``S`` from the operations without a
    predecessor to the devices' last ones, ``S*makespan >= sum_j C_j*t_j + lat*L`` (``C_j``
    the flow through micro-batch j's operations times their weight, ``L`` the flow on edges
    across devices), and ``sum_j C_j t_j >= min_j C_j * T``. The flow is the dual of the LP
    ``min makespan`` over the times ``t >= 0`` summing to 1 (GLOP, floats), rounded to ints and
    pushed along the graph in topological order so that it is conserved exactly: the
    certificate is exact whatever the solver's precision. Its value is the continuous
    relaxation over splits, far above :func:`capped_load_bound` (the schedule's steady state
    ties neighbouring micro-batches, which one device alone does not see)."""
    if schedule_error(pp, vpp, m, model) is not None:
        return 0, 0, 1
    nodes, edges, sources, last = _schedule_graph(pp, vpp, m, model)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    t = [solver.NumVar(0, 1, "") for _ in range(m)]
    end = [solver.NumVar(0, inf, "") for _ in nodes]
    z = solver.NumVar(0, inf, "")

    def row(terms: list[tuple[Any, float]]) -> Any:  # sum of terms >= 0
        ct = solver.Constraint(0, inf)
        for var, coef in terms:
            ct.SetCoefficient(var, coef)
        return ct

    rows = [row([(end[b], 1), (end[a], -1), (t[nodes[b][0]], -nodes[b][1])])
            for a, b, _ in edges]
    src = [row([(end[i], 1), (t[nodes[i][0]], -nodes[i][1])]) for i in sources]
    sink = [row([(z, 1), (end[i], -1)]) for i in last]
    total_row = solver.Constraint(1, 1)
    for var in t:
        total_row.SetCoefficient(var, 1)
    objective = solver.Objective()
    objective.SetCoefficient(z, 1)
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return 0, 0, 1
    unit = 1 << 30
    outgoing: list[list[tuple[int, float]]] = [[] for _ in nodes]  # (edge index or -1: sink)
    indeg = [0] * len(nodes)
    for e, ((a, b, _), row) in enumerate(zip(edges, rows, strict=True)):
        outgoing[a].append((e, max(0.0, abs(row.dual_value()))))
        indeg[b] += 1
    for i, row in zip(last, sink, strict=True):
        outgoing[i].append((-1, max(0.0, abs(row.dual_value())) + 1e-12))
    inflow = [0] * len(nodes)
    for i, row in zip(sources, src, strict=True):
        inflow[i] = round(max(0.0, abs(row.dual_value())) * unit)
    flows = [0] * len(edges)
    ready, costs, total, seen = list(sources), [0] * m, 0, 0
    while ready:
        i = ready.pop()
        seen += 1
        j, w = nodes[i]
        costs[j] += w * inflow[i]
        out = outgoing[i]
        weight = sum(x for _, x in out)
        if weight <= 0:  # no flow in the LP: any edge out keeps the flow a flow
            out, weight = [(e, 1.0) for e, _ in out], float(len(out))
        left = inflow[i]
        for k, (e, x) in enumerate(out):  # split the inflow in the LP's proportions, exactly
            share = left if k == len(out) - 1 else min(left, int(inflow[i] * (x / weight)))
            left -= share
            if e < 0:
                total += share
                continue
            flows[e] = share
            b = edges[e][1]
            inflow[b] += share
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    if total <= 0 or seen != len(nodes):  # every node passed its flow on, or no certificate
        return 0, 0, 1
    return min(costs), sum(f for f, (_, _, x) in zip(flows, edges, strict=True) if x), total
