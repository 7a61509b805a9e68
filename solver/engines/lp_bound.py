"""The Gilmore-Gomory bound: the LP relaxation of bin packing, by column generation.

A plan with max load z packs the items into k micro-batches whose token sums are at most the
cap and whose loads are at most z. Relax "pack" to its LP over packing patterns (which multiset
of items one micro-batch holds): if even the LP needs more than k micro-batches, no plan reaches
z. That LP bound is almost always within one bin of the integer optimum, so it proves optimal
(and infeasible) what counting bounds cannot when each micro-batch holds a few long sequences.

Soundness does not rest on the LP solver's floating point. Any non-negative item weights w
give the bound ``sum(d_i * w_i) / V(w)`` micro-batches (Farley), with ``V(w)`` the largest
weight one pattern can hold. The LP's duals are rounded down to integers and ``V`` is found by
an exact integer branch and bound, so every refutation is exact integer arithmetic; GLOP only
steers the search toward good weights.

Any cost: the pricing knapsack has two capacities, tokens (cap) and cost (z), one when cost =
tokens. Equal sizes and non-emptiness are relaxed away (still valid, only weaker). Work is
counted against a step's part of the call's :class:`~seqpart.solver.options.Budget`, so the
answer does not depend on the clock unless its deadline (a safety net) cuts it.
Below it, the fluid bound: a second LP, for non-token costs under a tight cap."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from ortools.linear_solver import pywraplp

from ..options import Budget
from ..tuning import KNAPSACK_NODES_PER_SECOND
from .count_lp import knapsack_pass

#: Duals are scaled to integers with this factor (2**20: ~1e-6 relative resolution).
_SCALE = 1 << 20


#: Work units of one bound computation when the caller gives no allowance. Units: one per
#: pricing-table cell (the numpy knapsack), ``NODE_WORK`` per branch-and-bound node and
#: ``SOLVE_WORK`` per LP solve, so that a unit costs about the same time on either path
#: (measured: ~4 ns).
DEFAULT_WORK = 2_000_000_000
#: Branch-and-bound nodes per exact pricing call; over it, the pricing gives up.
KNAPSACK_NODES = 200_000
NODE_WORK = 1_000
SOLVE_WORK = 200_000


@dataclass
class _Types:
    """Distinct (tokens, cost) item types with their multiplicities, largest first."""

    tokens: list[int]
    costs: list[int]
    mult: list[int]
    #: Column pool over all capacities tried: sparse patterns, ((type, copies), ...).
    patterns: list[tuple[tuple[int, int], ...]] = field(default_factory=list)

    @classmethod
    def of(cls, tokens: list[int], costs: list[int]) -> _Types:
        count: dict[tuple[int, int], int] = {}
        for t, c in zip(tokens, costs, strict=True):
            count[(t, c)] = count.get((t, c), 0) + 1
        keys = sorted(count, reverse=True)
        return cls([t for t, _ in keys], [c for _, c in keys], [count[x] for x in keys])


def _knapsack(
    w: list[int], types: _Types, cap_t: int, cap_c: int, budget: Budget
) -> tuple[int, list[int]] | None:
    """Exact max of sum(w_i x_i) with sum(tokens_i x_i) <= cap_t, sum(cost_i x_i) <= cap_c,
    0 <= x_i <= mult_i integer. None when the node limit is hit (no exact answer)."""
    idx = [
        i for i in range(len(w))
        if w[i] > 0 and types.tokens[i] <= cap_t and types.costs[i] <= cap_c
    ]
    if not idx:
        return 0, [0] * len(w)
    # Densest first by tokens; the bound uses the best remaining density in each dimension.
    idx.sort(key=lambda i: (-w[i] / types.tokens[i], i))
    tok = [types.tokens[i] for i in idx]
    cst = [types.costs[i] for i in idx]
    wt = [w[i] for i in idx]
    mul = [types.mult[i] for i in idx]
    m = len(idx)
    # Suffix maxima of w/cost and of w, suffix minima of the sizes, and prefix sums in density
    # order for Dantzig's bound (the fractional knapsack on tokens).
    dens_c = [0.0] * (m + 1)
    max_w = [0] * (m + 1)
    min_t = [cap_t + 1] * (m + 1)
    min_c = [cap_c + 1] * (m + 1)
    for j in range(m - 1, -1, -1):
        dens_c[j] = max(dens_c[j + 1], wt[j] / cst[j])
        max_w[j] = max(max_w[j + 1], wt[j])
        min_t[j] = min(min_t[j + 1], tok[j])
        min_c[j] = min(min_c[j + 1], cst[j])
    pre_t = [0] * (m + 1)
    pre_w = [0] * (m + 1)
    for j in range(m):
        pre_t[j + 1] = pre_t[j] + tok[j] * mul[j]
        pre_w[j + 1] = pre_w[j] + wt[j] * mul[j]
    # Greedy start: a good incumbent prunes most of the tree.
    rt, rc, val = cap_t, cap_c, 0
    gx = [0] * m
    for j in range(m):
        q = min(mul[j], rt // tok[j], rc // cst[j])
        if q > 0:
            gx[j] = q
            rt -= q * tok[j]
            rc -= q * cst[j]
            val += q * wt[j]
    best, best_x = val, gx
    x = [0] * m
    nodes = 0
    # Float bounds are padded so rounding can only keep a branch, never drop the optimum.
    pad = 1 + 1e-9

    def upper(j: int, rt: int, rc: int) -> float:
        """An upper bound on the weight items j.. can add within (rt, rc)."""
        count = min(rt // min_t[j], rc // min_c[j]) * max_w[j]  # few items fit: strong
        target = pre_t[j] + rt
        p = bisect_right(pre_t, target, j) - 1  # types j..p-1 fit whole
        dantzig = float(pre_w[p] - pre_w[j])
        if p < m:
            dantzig += (target - pre_t[p]) * wt[p] / tok[p]
        return min(count, dantzig * pad, rc * dens_c[j] * pad)

    def dfs(j: int, rt: int, rc: int, val: int) -> bool:
        nonlocal best, best_x, nodes
        nodes += 1
        if nodes > node_limit:
            return False
        if val > best:
            best, best_x = val, x[:]
        if j >= m or rt < min_t[j] or rc < min_c[j]:
            return True
        if val + upper(j, rt, rc) < best + 1:
            return True  # integer values: a better pattern gains at least 1
        q = min(mul[j], rt // tok[j], rc // cst[j])
        for take in range(q, -1, -1):
            x[j] = take
            if not dfs(j + 1, rt - take * tok[j], rc - take * cst[j], val + take * wt[j]):
                x[j] = 0
                return False
        x[j] = 0
        return True

    # Never more nodes than the work budget has left (a pricing call is not interrupted).
    node_limit = max(1, min(KNAPSACK_NODES, budget.left() // NODE_WORK))
    if budget.by_clock and budget.deadline is not None:
        node_limit = max(1, min(node_limit, int(budget.seconds_left() * KNAPSACK_NODES_PER_SECOND)))
    finished = dfs(0, cap_t, cap_c, 0)
    dfs = None  # type: ignore[assignment]  # a recursive closure: break its cycle (see exact.pack)
    budget.charge(NODE_WORK * nodes)
    if not finished:
        return None
    out = [0] * len(w)
    for pos, i in enumerate(idx):
        out[i] = best_x[pos]
    return best, out


#: Largest (chunks x capacity) table the numpy pricing keeps for reading the pattern back.
_DP_CELLS = 40_000_000


def _knapsack_dp(
    w: list[int], types: _Types, cap: int, budget: Budget
) -> tuple[int, list[int]] | None:
    """The one-capacity (cost = tokens) pricing as a numpy dynamic programme over tokens.

    Exact in int64 (weights are below 2**21 per item, a pattern holds at most ``cap`` items).
    Multiplicities are split into binary chunks (1, 2, 4, ..): 0/1 items. Much faster than the
    branch and bound when duals make many patterns near-optimal, as they do near the LP optimum.
    None when the table would be too large; the caller falls back to the branch and bound.
    """
    chunks: list[tuple[int, int, int]] = []  # (type, copies, tokens)
    for i, (t, d) in enumerate(zip(types.tokens, types.mult, strict=True)):
        if w[i] <= 0 or t > cap:
            continue
        q = min(d, cap // t)
        step = 1
        while q > 0:
            take = min(step, q)
            chunks.append((i, take, take * t))
            q -= take
            step *= 2
    if len(chunks) * (cap + 1) > _DP_CELLS:
        return None
    budget.charge(len(chunks) * (cap + 1))
    dp = np.zeros(cap + 1, dtype=np.int64)
    taken = knapsack_pass(dp, chunks, w, cap)
    out = [0] * len(w)
    c = cap
    for (i, copies, size), better in zip(reversed(chunks), reversed(taken), strict=True):
        if c >= size and better[c - size]:
            out[i] += copies
            c -= size
    return int(dp[cap]), out


Pattern = tuple[tuple[int, int], ...]


def _fits(pattern: Pattern, types: _Types, cap_t: int, cap_c: int) -> bool:
    st = sum(q * types.tokens[i] for i, q in pattern)
    sc = sum(q * types.costs[i] for i, q in pattern)
    return st <= cap_t and sc <= cap_c


def _refutes(types: _Types, k: int, cap_t: int, cap_c: int, budget: Budget) -> bool:
    """True if the LP proves that k bins (tokens <= cap_t, cost <= cap_c) cannot hold every item.

    False means "not refuted" (the LP fits in k bins, or the budget ran out).
    """
    n = len(types.mult)
    if any(t > cap_t or c > cap_c for t, c in zip(types.tokens, types.costs, strict=True)):
        return True
    demand = types.mult
    # One capacity when cost = tokens and both limits are equal (or the cost limit is slack).
    one_capacity = types.tokens == types.costs and cap_t <= cap_c
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with ortools
        return False
    rows = [solver.Constraint(float(demand[i]), solver.infinity()) for i in range(n)]
    objective = solver.Objective()
    objective.SetMinimization()
    seen: set[Pattern] = set()

    def add(pattern: Pattern) -> None:
        if pattern in seen:
            return
        seen.add(pattern)
        var = solver.NumVar(0.0, solver.infinity(), "")
        objective.SetCoefficient(var, 1.0)
        for i, q in pattern:
            rows[i].SetCoefficient(var, float(q))

    for i in range(n):  # singletons: always feasible, so the LP is too
        add(((i, min(demand[i], cap_t // types.tokens[i], cap_c // types.costs[i])),))
    for pattern in types.patterns:
        if _fits(pattern, types, cap_t, cap_c):
            add(pattern)
    while not budget.out():
        budget.charge(SOLVE_WORK)
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            return False
        w = [max(0, int(row.dual_value() * _SCALE)) for row in rows]
        priced = _knapsack_dp(w, types, cap_t, budget) if one_capacity else None
        if priced is None:
            priced = _knapsack(w, types, cap_t, cap_c, budget)
        if priced is None:
            return False
        value, pattern = priced
        if value <= 0:
            return False
        # Farley: the bins needed are at least sum(d*w) / V, exactly in integers.
        need = sum(d * x for d, x in zip(demand, w, strict=True))
        if need > k * value:
            return True
        if value <= _SCALE:  # no column prices out: the LP optimum fits in k bins
            return False
        key = tuple((i, q) for i, q in enumerate(pattern) if q)
        if key in seen:  # rounding stalled the generation
            return False
        types.patterns.append(key)
        add(key)
    return False


def iteration_work(tokens: list[int], cap: int) -> int:
    """Work units of one column-generation iteration (LP solve and numpy pricing), about."""
    return SOLVE_WORK + len(set(tokens)) * (cap + 1)


def lp_infeasible(tokens: list[int], k: int, cap: int, budget: Budget | None = None) -> bool:
    """True if no k micro-batches of at most ``cap`` tokens can hold these items (LP proof)."""
    budget = budget or Budget(DEFAULT_WORK)
    types = _Types.of(tokens, tokens)
    return _refutes(types, k, cap, cap, budget)


def lp_load_bound(
    tokens: list[int],
    costs: list[int],
    k: int,
    cap: int | None,
    lo: int,
    hi: int,
    budget: Budget | None = None,
) -> int:
    """The smallest z in [lo, hi] the LP does not refute; ``hi`` if it refutes everything below.

    ``lo`` must be a valid lower bound already; the result is one too (refuting z refutes every
    smaller z). With ``hi`` the best plan's load, a result of ``hi`` proves that plan optimal."""
    budget = budget or Budget(DEFAULT_WORK)
    types = _Types.of(tokens, costs)
    cap_t = cap if cap is not None else sum(tokens)
    same = tokens == costs

    def refuted(z: int) -> bool:
        return _refutes(types, k, min(cap_t, z) if same else cap_t, z, budget)

    if lo >= hi:
        return max(lo, hi) if lo > hi else hi
    # Try hi - 1 first: proving the plan optimal is the common win, and one LP decides it.
    if refuted(hi - 1):
        return hi
    hi -= 1  # hi - 1 is not refuted: the answer is at most hi - 1
    while lo < hi and not budget.out():
        mid = (lo + hi) // 2
        if refuted(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- the fluid bound
# Why: under a tight cap with a non-token cost (attention), micro-batches holding the heaviest
# sequences must leave tokens out to stay under a load z, and only the batch's few short ones
# can fill them. The Gilmore-Gomory LP sees it but prices too slowly at hundreds of lengths;
# this LP keeps the heaviest items whole, one per micro-batch, and splits the others ("fluid").
# Exact: any multipliers >= 0 of its rows bound z in integers; GLOP's duals only choose them.

#: The columns each LP counts for besides its own (setting GLOP up: 1-1.5 ms), each charged
#: ``FLUID_SECONDS_PER_VARIABLE`` (seqpart.solver.tuning).
FLUID_LP_WORK = 150


def heavy_clique(tokens: list[int], costs: list[int], cap: int, t: int) -> list[int]:
    """Items no two of which fit one micro-batch under ``cap`` tokens and a load of ``t``
    (greedy, heaviest first), so each needs its own in any plan with loads <= t. An item joins
    when it conflicts with all members through their least cost or least tokens (linear)."""
    heavy: list[int] = []
    least_cost: float = float("inf")
    least_tokens: float = float("inf")
    for i in sorted(range(len(tokens)), key=lambda i: (-costs[i], -tokens[i], i)):
        if costs[i] + least_cost > t or tokens[i] + least_tokens > cap:
            least_cost, least_tokens = min(least_cost, costs[i]), min(least_tokens, tokens[i])
            heavy.append(i)
    return heavy


class _FluidLP:
    """The fluid LP for one set of heavy items; a heavy bin's columns (how much of each light
    type it holds) start with the cheapest fillers per token and are priced in as needed."""

    def __init__(self, tokens: list[int], costs: list[int], k: int, cap: int,
                 heavy: list[int]) -> None:
        is_heavy = set(heavy)
        count = Counter(tc for i, tc in enumerate(zip(tokens, costs, strict=True)) if i not in is_heavy)
        # Light types, the cheapest per token first (the fillers heavy bins take first).
        self.light = sorted(count, key=lambda x: (x[1] / x[0], x))
        self.mult = [count[x] for x in self.light]
        self.tok, self.cst = np.hsplit(np.asarray(self.light, dtype=np.int64).reshape(-1, 2), 2)
        # Bin classes (token room, cost offset C, bins m), cost row sum c x <= m z - C: heavy
        # bins (equal heavy items pooled: the LP treats them alike), then all the others.
        same = Counter((tokens[i], costs[i]) for i in heavy)
        self.classes = [(m * (cap - t), m * c, m) for (t, c), m in sorted(same.items())]
        h, rest = len(self.classes), k - len(heavy)
        self.h, self.classes = h, self.classes + ([(rest * cap, 0, rest)] if rest > 0 else [])
        self.cap, self.sc, self.columns = cap, float(max(costs)), 0
        # The start: every type in the pool, heavy bins the cheapest up to their room.
        room, acc, self.first = sum(r for r, _, _ in self.classes[:h]), 0, 0
        while self.first < len(self.light) and (acc <= room or rest == 0):
            acc += self.light[self.first][0] * self.mult[self.first]
            self.first += 1
        self.start = len(self.light) * (rest > 0) + h * self.first

    def solve(self, work: Budget, most: int) -> tuple[list[float], list[float]] | None:
        """GLOP's (token, cost) row multipliers at the LP optimum, unscaled and >= 0; None when
        GLOP fails or the columns would pass ``most``."""
        solver = pywraplp.Solver.CreateSolver("GLOP")
        if solver is None:  # pragma: no cover - GLOP ships with ortools
            return None
        if work.deadline is not None:  # a safety net only
            solver.SetTimeLimit(max(1, int(1000 * work.seconds_left())))
        cap, sc, inf, classes = self.cap, self.sc, solver.infinity(), self.classes
        z = solver.NumVar(0.0, inf, "z")  # rows scaled to about 1: GLOP's tolerances apply alike
        tok_rows = [solver.Constraint(-inf, room / cap) for room, _, _ in classes]
        cost_rows = [solver.Constraint(-inf, -offset / sc) for _, offset, _ in classes]
        for row, (_, _, m) in zip(cost_rows, classes, strict=True):
            row.SetCoefficient(z, -float(m))
        spread = [solver.Constraint(float(d), float(d)) for d in self.mult]
        have: set[tuple[int, int]] = set()

        def add(f: int, j: int) -> None:
            var = solver.NumVar(0.0, inf, "")
            spread[f].SetCoefficient(var, 1.0)
            tok_rows[j].SetCoefficient(var, self.light[f][0] / cap)
            cost_rows[j].SetCoefficient(var, self.light[f][1] / sc)
            have.add((f, j))

        for f in range(len(self.light)):
            for j in range(len(classes)) if f < self.first else range(self.h, len(classes)):
                add(f, j)
        solver.Objective().SetCoefficient(z, 1.0)
        tok, cst = self.tok / cap, self.cst / sc
        missing = [(-1, -1)]
        while missing and len(have) <= most:
            if solver.Solve() != pywraplp.Solver.OPTIMAL:
                if len(have) == len(self.light) * len(classes):
                    return None
                missing = [(f, j) for f in range(len(self.light)) for j in range(len(classes))]
            else:  # the columns with a negative reduced cost (none: optimal over all)
                u = np.asarray([r.dual_value() for r in spread])[:, None]
                yt = np.asarray([r.dual_value() for r in tok_rows])[None, :]
                yc = np.asarray([r.dual_value() for r in cost_rows])[None, :]
                missing = [(int(f), int(j)) for f, j in np.argwhere(u + tok * yt + cst * yc > 1e-9)]
            missing = [x for x in missing if x not in have]
            for f, j in missing:
                add(f, j)
        self.columns = len(have)
        if missing:
            return None
        return ([abs(r.dual_value()) / cap for r in tok_rows],
                [abs(r.dual_value()) / sc for r in cost_rows])

    def bound(self, alpha: list[float], beta: list[float]) -> int | None:
        """The least z these multipliers allow, exactly: z * sum(B_j m_j) >= sum_f d_f
        min_j(A_j l_f + B_j c_f) - sum_j A_j Cap_j + sum_j B_j C_j, for integers A, B >= 0."""
        top = max(alpha + beta) or 1.0  # all zero: den is 0 below
        scale = (1 << 61) // (self.cap + int(self.sc))  # products below 2**61: int64 is exact
        a = [int(v / top * scale) for v in alpha]
        b = [int(v / top * scale) for v in beta]
        den = sum(bj * m for bj, (_, _, m) in zip(b, self.classes, strict=True))
        if den <= 0:
            return None
        least = (self.tok * np.asarray(a, dtype=np.int64)
                 + self.cst * np.asarray(b, dtype=np.int64)).min(1)
        num = sum(d * x for d, x in zip(self.mult, least.tolist(), strict=True)) + sum(
            bj * offset - aj * room for aj, bj, (room, offset, _) in zip(a, b, self.classes, strict=True))
        return -(-num // den)


def fluid_load_bound(
    tokens: list[int], costs: list[int], k: int, cap: int, lo: int, hi: int,
    work: Budget | None = None,
) -> int:
    """A lower bound on the largest load in [lo, hi] (hi: the best plan's load) from the fluid
    LP, charging ``work`` its columns (an LP starts only when its first columns fit what is
    left of it, a million by default; its deadline is a safety net for GLOP only; costs near
    2**60 are left to the other bounds).

    Heavy items need micro-batches of their own in plans with loads <= t, so each LP proves
    min(its z, t + 1): t = hi - 1 first (a z of hi proves the plan optimal), then, from the top,
    the t where one more item becomes heavy (2 c_i - 1): more heavy items, a larger z.
    """
    work = work if work is not None else Budget(1_000_000)
    best = lo
    if cap + max(costs, default=0) >= 1 << 60:  # the exact certificate is int64
        return best
    cands = sorted({2 * c - 1 for c in costs if lo <= 2 * c - 1 < hi - 1}, reverse=True)
    for t in [hi - 1, *cands]:
        if best > t:  # min(z, t + 1) cannot beat the bound any more
            break
        heavy = heavy_clique(tokens, costs, cap, t)
        work.charge(len(tokens) // 16)  # the clique and the classes, in columns
        if len(heavy) > k:
            return max(best, min(t + 1, hi))
        if len(heavy) == len(tokens):
            break
        lp = _FluidLP(tokens, costs, k, cap, heavy)
        if work.over(FLUID_LP_WORK + lp.start):
            break
        duals = lp.solve(work, work.left() - FLUID_LP_WORK)
        work.charge(FLUID_LP_WORK + lp.columns)
        z = None if duals is None else lp.bound(*duals)
        if z is None:
            break
        best = max(best, min(z, t + 1, hi))
    return best
