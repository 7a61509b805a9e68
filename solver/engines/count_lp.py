"""The bin-packing LP (Gilmore-Gomory) over item types, kept open for re-solves on residuals.

Why a second LP next to :mod:`lp_bound`: that module answers one yes/no question (does the
LP refute k bins?). The count search needs more from the same relaxation: its value as a
proven bound on the count, and its primal solution to steer a dive (fix the patterns the LP
uses, re-solve on what is left). Both come from one column pool that stays warm across the
dive's re-solves, so each re-solve costs a few column-generation iterations.

Soundness is as in :mod:`lp_bound`: the duals are rounded down to integers and the best
pattern value for them is found exactly (a dynamic programme over the capacity), so the
Farley bound ``ceil(sum(d_i w_i) / V(w))`` is exact integer arithmetic. GLOP only steers.
Sizes and the capacity are divided by their greatest common divisor first (a smaller table).
Work is counted (table cells and LP solves) against a step's part of the call's
:class:`~seqpart.solver.options.Budget`, so the result does not depend on the clock unless
its deadline cuts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp

from ..options import Budget

#: Duals are scaled to integers with this factor (~1e-6 relative resolution).
SCALE = 1 << 20
#: Work units of one LP solve (a pricing-table cell is one unit), plus per column in the pool
#: (GLOP's pass over them and the read-back of the primal).
SOLVE_WORK = 150_000
SOLVE_WORK_PER_COLUMN = 450
#: Objective price of one uncovered item (an artificial column): above any count.
BIG = 1 << 20
#: Largest pricing table (chunks x capacity); above it the branch and bound prices.
DP_CELLS = 10_000_000
#: Branch-and-bound nodes per pricing call, and a node's cost in work units, plus per type
#: (measured 1.0-1.7 us a node with 51-411 types, long-tail RL lengths, caps 1.5-4x).
BB_NODES = 20_000
BB_NODE_WORK = 400
BB_NODE_WORK_PER_TYPE = 1
#: A branch-and-bound pricing call's usual cost in work units (few items per bin), for
#: estimates before the search.
BB_TYPICAL_WORK = 200_000

#: A bound meaning "no packing at all" (the waste limit leaves an item no pattern).
INFEASIBLE = 1 << 62
_UNREACHABLE = -(1 << 62)

Pattern = tuple[tuple[int, int], ...]  # ((type, copies), ...)


def knapsack_pass(
    dp: np.ndarray, chunks: list[tuple[int, int, int]], w: Any, cap: int
) -> list[np.ndarray]:
    """One bounded-knapsack pass over the capacity table ``dp`` (updated in place): each chunk
    (item type i, copies, size) may be taken once at weight ``w[i] * copies``. Returns, per
    chunk, where taking it improved the table (to walk the choice back)."""
    taken: list[np.ndarray] = []
    cand = np.empty(cap + 1, dtype=np.int64)  # one buffer, written in place: 2x faster
    for i, copies, size in chunks:
        room = cap + 1 - size
        np.add(dp[:room], w[i] * copies, out=cand[:room])
        taken.append(np.greater(cand[:room], dp[size:]))
        np.maximum(dp[size:], cand[:room], out=dp[size:])
    return taken


@dataclass
class LPResult:
    """One LP solve: its proven bound on the bins, whether it converged, its primal."""

    bound: int
    converged: bool
    value: float
    columns: list[tuple[Pattern, float]] = field(default_factory=list)


class PatternLP:
    """The covering LP ``min sum x_p : sum_p a_ip x_p >= d_i`` with a growing pattern pool.

    ``sizes`` are the distinct item sizes (any order), ``cap`` the bin capacity. The demand
    changes between solves (a dive fixes bins); patterns stay in the pool.
    """

    def __init__(self, sizes: list[int], cap: int) -> None:
        g = math.gcd(cap, *sizes)
        self.sizes = sizes
        self.small = [s // g for s in sizes]
        self.cap = cap // g
        self.solver = pywraplp.Solver.CreateSolver("GLOP")
        inf = self.solver.infinity()
        self.rows = [self.solver.Constraint(0.0, inf) for _ in sizes]
        self.objective = self.solver.Objective()
        self.objective.SetMinimization()
        self.columns: list[tuple[Pattern, pywraplp.Variable]] = []
        self.loads: list[int] = []  # in reduced units, per column
        self.seen: set[Pattern] = set()
        self.g = g
        self.min_load = 0  # reduced units: columns below it are switched off
        # Uncovered demand at a high price: the LP stays feasible when the waste limit leaves
        # some item without a pattern (then it is infeasible at that count: see ``solve``).
        self.artificial = []
        for row in self.rows:
            var = self.solver.NumVar(0.0, inf, "")
            self.objective.SetCoefficient(var, float(BIG))
            row.SetCoefficient(var, 1.0)
            self.artificial.append(var)

    def cells(self, demand: list[int]) -> int:
        """Work units of one pricing call at this demand."""
        chunks = sum(
            min(d, self.cap // s).bit_length() for s, d in zip(self.small, demand, strict=True)
            if d > 0
        )
        return chunks * (self.cap + 1)

    def add(self, pattern: Pattern) -> bool:
        if pattern in self.seen or not pattern:
            return False
        self.seen.add(pattern)
        load = sum(self.small[i] * q for i, q in pattern)
        var = self.solver.NumVar(0.0, self.solver.infinity() if load >= self.min_load else 0.0, "")
        self.loads.append(load)
        self.objective.SetCoefficient(var, 1.0)
        for i, q in pattern:
            self.rows[i].SetCoefficient(var, float(q))
        self.columns.append((pattern, var))
        return True

    def price(self, w: list[int], demand: list[int], work: Budget) -> tuple[int, Pattern, bool]:
        """The best pattern for integer weights ``w`` (copies at most the demand) whose load
        is at least ``min_load`` (value -1 when none is), and whether it is proven best. The
        table over the capacity when it is small; else a branch and bound (large token caps
        with few items per bin), which may stop at its node limit unproven."""
        # The table sums weights in int64: a pattern's value could reach the largest weight
        # times the most items a bin holds. Beyond 2**62 the branch and bound (Python ints).
        most = self.cap // min(self.small)
        if self.cells(demand) > DP_CELLS or max(w, default=0) * most >= 1 << 62:
            return _price_bb(w, demand, self.small, self.cap, self.min_load, work)
        cap = self.cap
        chunks: list[tuple[int, int, int]] = []  # (type, copies, size)
        for i, (s, d) in enumerate(zip(self.small, demand, strict=True)):
            if d <= 0 or s > cap or (w[i] <= 0 and self.min_load == 0):
                continue
            q, step = min(d, cap // s), 1
            while q > 0:
                take = min(step, q)
                chunks.append((i, take, take * s))
                q -= take
                step *= 2
        work.charge(len(chunks) * (cap + 1))
        # Exact loads: dp[c] is the best value of a pattern of load exactly c (or unreachable).
        dp = np.full(cap + 1, _UNREACHABLE, dtype=np.int64)
        dp[0] = 0
        taken = knapsack_pass(dp, chunks, w, cap)
        lo = self.min_load
        c = lo + int(np.argmax(dp[lo:]))
        if dp[c] < 0:
            return -1, (), True
        value = int(dp[c])
        out: dict[int, int] = {}
        for (i, copies, size), better in zip(reversed(chunks), reversed(taken), strict=True):
            if c >= size and better[c - size]:
                out[i] = out.get(i, 0) + copies
                c -= size
        return value, tuple(sorted(out.items())), True

    def set_waste(self, waste: int | None) -> None:
        """Allow only patterns that leave at most ``waste`` (original units) of the capacity
        empty: in a packing into k bins no bin wastes more than ``k * cap - total``."""
        small = self.cap if waste is None else waste // self.g
        min_load = max(0, self.cap - small)
        if min_load == self.min_load:
            return
        self.min_load = min_load
        inf = self.solver.infinity()
        for (_, var), load in zip(self.columns, self.loads, strict=True):
            var.SetUb(inf if load >= min_load else 0.0)

    def solve(self, demand: list[int], work: Budget) -> LPResult:
        """Column generation at ``demand`` until no pattern prices out or the work runs out.

        The bound is the best Farley bound seen (valid whatever the duals, for packings whose
        bins respect the waste limit), at least the counting bound ``ceil(sum d_i s_i / cap)``.
        A bound of ``INFEASIBLE`` means no such packing exists at all.
        """
        for row, d in zip(self.rows, demand, strict=True):
            row.SetLb(float(d))
        total = sum(d * s for d, s in zip(demand, self.small, strict=True))
        bound = -(-total // self.cap)
        if total == 0:
            return LPResult(0, True, 0.0)
        for i, d in enumerate(demand):  # singletons: the LP's start (off when too wasteful)
            if d > 0:
                self.add(((i, min(d, self.cap // self.small[i])),))
        converged, value, uncovered = False, math.inf, math.inf
        cols: list[tuple[Pattern, float]] = []
        while not work.out():
            work.charge(SOLVE_WORK + SOLVE_WORK_PER_COLUMN * len(self.columns))
            if self.solver.Solve() != pywraplp.Solver.OPTIMAL:
                break
            # Read the primal now: adding a column below invalidates the solution.
            value = self.objective.Value()
            uncovered = sum(v.solution_value() for v in self.artificial)
            cols = [
                (p, x) for (p, v), load in zip(self.columns, self.loads, strict=True)
                if load >= self.min_load and (x := v.solution_value()) > 1e-9
            ]
            w = [
                max(0, int(row.dual_value() * SCALE)) if d > 0 else 0
                for row, d in zip(self.rows, demand, strict=True)
            ]
            priced, pattern, exact = self.price(w, demand, work)
            need = sum(d * x for d, x in zip(demand, w, strict=True))
            if not exact:  # a column, maybe, but no proof: the bound needs the true best
                if priced <= SCALE or not self.add(pattern):
                    break
                continue
            if priced <= 0:
                if need > 0:  # some weighted item fits in no allowed pattern
                    return LPResult(INFEASIBLE, True, math.inf)
            else:
                bound = max(bound, -(-need // priced))
            if priced <= SCALE or not self.add(pattern):
                converged = priced <= SCALE
                break
        if converged and uncovered > 0.5:
            value = math.inf
        return LPResult(bound, converged, value, cols)


def _price_bb(w: list[int], demand: list[int], sizes: list[int], cap: int, min_load: int,
              work: Budget) -> tuple[int, Pattern, bool]:
    """Branch and bound for the pricing knapsack: types by value density, Dantzig's bound
    (the fractional knapsack), pruned too when the sizes left cannot reach ``min_load``."""
    idx = [i for i, d in enumerate(demand)
           if d > 0 and sizes[i] <= cap and (w[i] > 0 or min_load > 0)]
    idx.sort(key=lambda i: (-w[i] / sizes[i], -sizes[i]))
    m = len(idx)
    reach = [0] * (m + 1)  # the largest load the types from j on could add
    for j in range(m - 1, -1, -1):
        i = idx[j]
        reach[j] = reach[j + 1] + sizes[i] * min(demand[i], cap // sizes[i])
    best, best_x = -1, [0] * m
    x = [0] * m
    nodes = 0
    # A node's cost grows with the types its bound walks over; never more nodes than the
    # work left pays for (a pricing call is not interrupted).
    node_work = BB_NODE_WORK + BB_NODE_WORK_PER_TYPE * m
    node_limit = max(1, min(BB_NODES, work.left() // node_work))

    def dantzig(j: int, room: int) -> float:
        gain = 0.0
        for t in range(j, m):
            i = idx[t]
            if w[i] <= 0:
                break
            q = min(demand[i], room // sizes[i])
            gain += q * w[i]
            room -= q * sizes[i]
            if q < demand[i] and room > 0:
                return gain + room * w[i] / sizes[i]
        return gain

    def dfs(j: int, load: int, val: int) -> bool:
        nonlocal best, best_x, nodes
        nodes += 1
        if nodes > node_limit:
            return False
        if load >= min_load and val > best:
            best, best_x = val, x[:]
        if j >= m or load + reach[j] < min_load:
            return True
        if val + dantzig(j, cap - load) * (1 + 1e-9) < best + 1:
            return True
        i = idx[j]
        for q in range(min(demand[i], (cap - load) // sizes[i]), -1, -1):
            x[j] = q
            if not dfs(j + 1, load + q * sizes[i], val + q * w[i]):
                x[j] = 0
                return False
        x[j] = 0
        return True

    try:
        finished = dfs(0, 0, 0)
    except RecursionError:  # more sizes than Python's stack allows: no proof this round
        finished = False
    finally:
        dfs = None  # type: ignore[assignment]  # a recursive closure: break its cycle (see exact.pack)
    work.charge(nodes * node_work)
    pattern = tuple(sorted((idx[j], q) for j, q in enumerate(best_x) if q))
    return best, pattern, finished
