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

Supported: any cost. The pricing knapsack has two capacities, tokens (the cap) and cost (z);
with cost = tokens they are one. Equal sizes and non-emptiness are left out of the relaxation,
so the bound stays valid for them, only weaker. Work is counted (LP solves and knapsack nodes),
so the answer does not depend on the clock unless the deadline (a safety net) cuts it short.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp

#: Duals are scaled to integers with this factor (2**20: ~1e-6 relative resolution).
_SCALE = 1 << 20


@dataclass
class LPBudget:
    """Work limits for one bound computation (counted, so the result is repeatable).

    Work units: one per pricing-table cell (the numpy knapsack), ``NODE_WORK`` per branch-and-
    bound node and ``SOLVE_WORK`` per LP solve, so that a unit costs about the same time on
    either path (measured: ~4 ns).
    """

    work: int = 2_000_000_000
    #: Branch-and-bound nodes per exact pricing call; over it, the pricing gives up.
    knapsack_nodes: int = 200_000
    #: Safety net only: perf_counter() value to stop at, or None.
    deadline: float | None = None
    used: int = 0

    def spent(self) -> bool:
        if self.used >= self.work:
            return True
        return self.deadline is not None and time.perf_counter() > self.deadline


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
    w: list[int], types: _Types, cap_t: int, cap_c: int, budget: LPBudget
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
    node_limit = max(1, min(budget.knapsack_nodes, (budget.work - budget.used) // NODE_WORK))
    finished = dfs(0, cap_t, cap_c, 0)
    dfs = None  # type: ignore[assignment]  # a recursive closure: break its cycle (see exact.pack)
    budget.used += NODE_WORK * nodes
    if not finished:
        return None
    out = [0] * len(w)
    for pos, i in enumerate(idx):
        out[i] = best_x[pos]
    return best, out


#: Largest (chunks x capacity) table the numpy pricing keeps for reading the pattern back.
_DP_CELLS = 40_000_000


def _knapsack_dp(
    w: list[int], types: _Types, cap: int, budget: LPBudget
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
    budget.used += len(chunks) * (cap + 1)
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


def _refutes(types: _Types, k: int, cap_t: int, cap_c: int, budget: LPBudget) -> bool:
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
    while not budget.spent():
        budget.used += SOLVE_WORK
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


def lp_infeasible(tokens: list[int], k: int, cap: int, budget: LPBudget | None = None) -> bool:
    """True if no k micro-batches of at most ``cap`` tokens can hold these items (LP proof)."""
    budget = budget or LPBudget()
    types = _Types.of(tokens, tokens)
    return _refutes(types, k, cap, cap, budget)


def lp_load_bound(
    tokens: list[int],
    costs: list[int],
    k: int,
    cap: int | None,
    lo: int,
    hi: int,
    budget: LPBudget | None = None,
) -> int:
    """The smallest z in [lo, hi] the LP does not refute; ``hi`` if it refutes everything below.

    ``lo`` must be a valid lower bound already; the result is one too (refuting z refutes every
    smaller z, so the binary search keeps the invariant). With ``hi`` the best plan's load, a
    result of ``hi`` proves that plan optimal.
    """
    budget = budget or LPBudget()
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
    while lo < hi and not budget.spent():
        mid = (lo + hi) // 2
        if refuted(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def knapsack_pass(
    dp: np.ndarray, chunks: list[tuple[int, int, int]], w: Any, cap: int
) -> list[np.ndarray]:
    """One bounded-knapsack pass over the capacity table ``dp`` (updated in place): each chunk
    (item type i, copies, size) may be taken once at weight ``w[i] * copies``. Returns, per
    chunk, where taking it improved the table (to walk the choice back)."""
    taken: list[np.ndarray] = []
    for i, copies, size in chunks:
        cand = dp[: cap + 1 - size] + w[i] * copies
        better = cand > dp[size:]
        dp[size:] = np.where(better, cand, dp[size:])
        taken.append(better)
    return taken


# --------------------------------------------------------------------------- the fluid bound
# Why: under a tight cap with a cost other than tokens (attention), the micro-batches holding
# the heaviest sequences must stay below the cap in tokens to stay under a load z, and they
# can only be filled with what the batch has: few short sequences. The Gilmore-Gomory LP sees
# this but prices too slowly at hundreds of lengths; this LP keeps the heaviest items whole,
# one per micro-batch, and lets every other item split across micro-batches ("fluid"). It is
# one small LP per threshold, and its bound is exact: any non-negative multipliers of its rows
# give one in integers (weak duality), GLOP's duals only choose them.

#: Measured: building and solving the fluid LP with GLOP, per variable (items x heavy bins),
#: on a 2-core machine (20-30 ms at 500 items and 6 heavy bins).
FLUID_SECONDS_PER_VARIABLE = 10e-6


def heavy_clique(tokens: list[int], costs: list[int], cap: int, t: int) -> list[int]:
    """Items no two of which fit one micro-batch under ``cap`` tokens and a load of ``t``
    (greedy, heaviest first): each needs a micro-batch of its own in any plan with loads <= t.

    An item joins when it conflicts with all members through their least cost or their least
    tokens (a sufficient test, linear time); leaving an item out keeps the clique a clique."""
    heavy: list[int] = []
    least_cost = least_tokens = 0
    for i in sorted(range(len(tokens)), key=lambda i: (-costs[i], -tokens[i], i)):
        if not heavy or costs[i] + least_cost > t or tokens[i] + least_tokens > cap:
            least_cost = costs[i] if not heavy else min(least_cost, costs[i])
            least_tokens = tokens[i] if not heavy else min(least_tokens, tokens[i])
            heavy.append(i)
    return heavy


def fluid_variables(n: int, k: int, heavy: int) -> int:
    """The fluid LP's variables (for its cost estimate): each light item in each bin class."""
    return (n - heavy) * (heavy + (1 if k > heavy else 0)) + 1


def _fluid_bound(
    tokens: list[int], costs: list[int], k: int, cap: int, heavy: list[int],
    deadline: float | None,
) -> int | None:
    """A lower bound on any load z of a plan whose ``heavy`` items sit in micro-batches of
    their own: the fluid LP's least z, made exact. None when GLOP fails.

    The rows: each heavy bin i holds at most cap - l_i tokens and z - c_i cost of light items;
    the other k - h bins together at most (k - h) * cap and (k - h) * z; each light type is
    spread over the bins. Multipliers A_j, B_j >= 0 of bin j's token and cost rows give
    z * sum(B_j m_j) >= sum_f d_f min_j(A_j l_f + B_j c_f) - sum_j A_j Cap_j + sum_j B_j C_j.
    """
    is_heavy = set(heavy)
    count: dict[tuple[int, int], int] = {}
    for i, (t, c) in enumerate(zip(tokens, costs, strict=True)):
        if i not in is_heavy:
            count[(t, c)] = count.get((t, c), 0) + 1
    light = sorted(count)
    h = len(heavy)
    # Bin classes: (token room, cost offset C, bins m): cost row is sum c x <= m z - C.
    classes = [(cap - tokens[i], costs[i], 1) for i in heavy]
    if k > h:
        classes.append(((k - h) * cap, 0, k - h))
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with ortools
        return None
    if deadline is not None:
        solver.SetTimeLimit(max(1, int(1000 * (deadline - time.perf_counter()))))
    # Floats only steer: rows scaled to about 1 so GLOP's tolerances mean the same in each.
    sc = float(max(costs))
    z = solver.NumVar(0.0, solver.infinity(), "z")
    tok_rows = [solver.Constraint(-solver.infinity(), room / cap) for room, _, _ in classes]
    cost_rows = []
    for _, offset, m in classes:
        row = solver.Constraint(-solver.infinity(), -offset / sc)
        row.SetCoefficient(z, -float(m))
        cost_rows.append(row)
    for (t, c), d in zip(light, (count[x] for x in light), strict=True):
        spread = solver.Constraint(float(d), float(d))
        for j in range(len(classes)):
            var = solver.NumVar(0.0, solver.infinity(), "")
            spread.SetCoefficient(var, 1.0)
            tok_rows[j].SetCoefficient(var, t / cap)
            cost_rows[j].SetCoefficient(var, c / sc)
    solver.Objective().SetCoefficient(z, 1.0 / sc)
    solver.Objective().SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    # Back to unscaled multipliers, then to integers: any non-negative ones are valid.
    alpha = [abs(r.dual_value()) / cap for r in tok_rows]
    beta = [abs(r.dual_value()) / sc for r in cost_rows]
    top = max(alpha + beta)
    if top <= 0:
        return None
    a = [int(v / top * _SCALE**2) for v in alpha]
    b = [int(v / top * _SCALE**2) for v in beta]
    den = sum(bj * m for bj, (_, _, m) in zip(b, classes, strict=True))
    if den <= 0:
        return None
    num = sum(d * min(aj * t + bj * c for aj, bj in zip(a, b, strict=True))
              for (t, c), d in count.items())
    num -= sum(aj * room for aj, (room, _, _) in zip(a, classes, strict=True))
    num += sum(bj * offset for bj, (_, offset, _) in zip(b, classes, strict=True))
    return -(-num // den)


def fluid_load_bound(
    tokens: list[int], costs: list[int], k: int, cap: int, lo: int, hi: int,
    max_variables: int = 1_000_000, deadline: float | None = None,
) -> tuple[int, int]:
    """A lower bound on the largest load (at least ``lo``, at most ``hi``, the best plan's
    load) from the fluid LP, and the LP variables it built (the work: at most
    ``max_variables`` over all its LPs; ``deadline`` is a safety net for GLOP only).

    The heavy items depend on a threshold t: they need micro-batches of their own only in
    plans with loads <= t, so each LP proves min(its z, t + 1). t = hi - 1 first (proves the
    plan optimal when its z reaches hi), then, from the top, the thresholds where one more
    item becomes heavy (2 c_i - 1): more heavy items give a larger z.
    """
    n = len(tokens)
    best, used = lo, 0
    cands = sorted({2 * c - 1 for c in costs if lo <= 2 * c - 1 < hi - 1}, reverse=True)
    for t in [hi - 1, *cands]:
        if best > t:  # min(z, t + 1) cannot beat the bound any more
            break
        heavy = heavy_clique(tokens, costs, cap, t)
        if len(heavy) > k:
            return max(best, min(t + 1, hi)), used
        size = fluid_variables(n, k, len(heavy))
        if not heavy or len(heavy) == n or used + size > max_variables:
            break
        used += size
        z = _fluid_bound(tokens, costs, k, cap, heavy, deadline)
        if z is None:
            break
        best = max(best, min(z, t + 1, hi))
    return best, used
