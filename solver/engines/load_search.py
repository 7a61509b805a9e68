"""The smallest max load for few long sequences per micro-batch, decided load by load.

Why: with cost = tokens, "every micro-batch at most z" is bin packing with capacity z into k
bins, and the count search (:mod:`count_search`) decides such questions far better than a
search over loads does: its Gilmore-Gomory LP is restricted to bins wasting at most
``k*z - total`` tokens, which refutes loads the plain LP bound (:mod:`lp_bound`) lets
through, and its LP-guided dive finds packings at loads that local search and CP-SAT miss
(the LP's round-up is the optimum on nearly all such batches, so a packing usually exists
right at the bound). Each load z gets one of three answers: a plan with max load <= z
(found), no plan (refuted, so the lower bound moves to z + 1), or unknown (its allowance ran
out). A load is decided by the count search's dive first, then by :class:`Exhaust`, a branch
and price over bin completions that the same LP prunes (exhaustive: it refutes what the dive
only fails to find). Every refutation is an exact integer Farley bound or an exhausted tree.

The loads tried: root LPs alone first, galloping up from the bound while they refute; then a
full decision at the bound, again after every refutation (a plan there is optimal at once);
after an unknown, one load in the middle of what is left above it (a better plan), and a
second unknown ends the search. Refuting z refutes every smaller z (a packing under a smaller
load is one under z), so the bound stays proven whatever the order. One LP column pool is
shared by all loads (a pattern that fits under z fits under any larger load).

Work is counted as in the count search, so a given allowance gives the same answer on every
machine; the deadline is a safety net, except in clock timing, where it is the limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ...heuristics import first_fit_decreasing
from ..options import Budget
from ..tuning import BISECT_SHARE, CLOCK_WORK_PER_SECOND, WORK_PER_SECOND
from ..tuning import LOAD_SEARCH_DIVE_SHARE as DIVE_SHARE
from ..tuning import LOAD_SEARCH_PER_LOAD_SHARE as PER_LOAD_SHARE
from .count_lp import DP_CELLS, SCALE, SOLVE_WORK, Pattern, PatternLP
from .count_search import (
    count_allowance,
    item_types,
    patterns_to_bins,
    search_count,
    seed_patterns,
)

#: The search runs up to this many items per micro-batch on average (above it bins hold many
#: small items: counting bounds and local search already close such gaps) ...
MAX_ITEMS_PER_BIN = 6
#: ... and up to this many items in all (the LP's pool and the dive grow with them).
MAX_ITEMS = 200
#: Column-generation rounds a root LP from scratch is assumed to take: below their cost the
#: search is skipped (measured: ~130 on 48 long sequences at k=12 and 16; 100 keeps batches
#: of 24 at time limits from ~2 s).
ROOT_ITERATIONS = 100
#: The most work the LP dive gets at one load (its share is ``LOAD_SEARCH_DIVE_SHARE``): the dive
#: spends what it is given and seldom finds late.
DIVE_MOST_WORK = 250_000_000
#: In clock timing the work limit is this multiple of the counted estimate (the clock decides).
CLOCK_WORK_FACTOR = 1000
NOTE = "bound: waste-limited LP at the load (load search)"
FOUND, REFUTED, UNKNOWN = "found", "refuted", "unknown"


@dataclass
class LoadResult:
    """What the search established: its best plan (None: none better than ``upper``), the
    proven lower bound, and whether the clock (not the counted work) stopped a decision."""

    bins: list[list[int]] | None
    max_load: int | None
    lower_bound: int
    cut: bool = False
    #: The search ran (its allowance paid for the root LP): its branch and price then covered
    #: what the exact search (``exact``) would try.
    searched: bool = False


def applies(n: int, k: int, one_dim: bool, max_count: int | None) -> bool:
    """Whether the search fits the batch: token costs, no equal sizes, few items per bin."""
    return one_dim and max_count is None and k >= 1 and n <= min(MAX_ITEMS, MAX_ITEMS_PER_BIN * k)


def _exactly_k(bins: list[list[int]], k: int) -> list[list[int]]:
    """Fewer bins than k: move one item of the fullest-by-count bin to each new one (loads
    only fall; the caller has at least k items)."""
    out = [list(b) for b in bins if b]
    while len(out) < k:
        donor = max(range(len(out)), key=lambda j: (len(out[j]), -j))
        out.append([out[donor].pop()])
    return [sorted(b) for b in out]


def decide(
    tokens: Sequence[int], k: int, z: int, work: Budget, pool: list[Pattern] | None = None
) -> tuple[str, list[list[int]] | None]:
    """Can k micro-batches of at most z tokens hold every item? (status, bins when found).
    ``pool``: the LP's patterns shared between loads (see :func:`search_count`)."""
    if len(tokens) < k:
        return REFUTED, None
    if max(tokens) > z or k * z < sum(tokens):
        return REFUTED, None
    start = first_fit_decreasing(list(tokens), None, z)
    if len(start) <= k:
        return FOUND, _exactly_k(start, k)
    # The dive first, on part of the work: it finds plans fast and its root LP refutes
    # most loads below the optimum; the exhaustive search decides what it leaves.
    # Its share of the clock too (in clock timing the clock decides).
    dive = work.child(DIVE_SHARE, DIVE_MOST_WORK)
    try:
        result = search_count(tokens, z, k, start, dive, pool=pool)
    finally:
        work.charge(dive.used)
    if result.bins is not None and len(result.bins) <= k:
        return FOUND, _exactly_k(result.bins, k)
    if result.lower_bound > k:
        return REFUTED, None
    if dive.cut and work.past_deadline():
        work.cut = True
        return UNKNOWN, None
    tree = Exhaust(tokens, k, z, work, pool)
    status = tree.run()
    if pool is not None:
        pool[:] = [pattern for pattern, _ in tree.lp.columns]
    if status == FOUND:
        return FOUND, _exactly_k(tree.bins(tokens), k)
    return status, None


def affordable(tokens: Sequence[int], z: int, seconds: float, budget: Budget | None = None
               ) -> bool:
    """Whether ``seconds`` pay for a root LP at load z from scratch: ``ROOT_ITERATIONS``
    column-generation rounds over the pricing table (the count search's own test asks for
    10, which a waste-limited root LP on long sequences needs ~130 of). Counted at the
    repeatable rate, or in clock timing (``budget``'s) at :data:`CLOCK_WORK_PER_SECOND`."""
    sizes = set(tokens)
    cells = len(sizes) * (z // math.gcd(z, *sizes) + 1)
    if cells > DP_CELLS:
        return False  # the branch-and-bound pricing (huge caps): untried here, left out
    rate = CLOCK_WORK_PER_SECOND if budget is not None and budget.by_clock else WORK_PER_SECOND
    return rate * seconds >= ROOT_ITERATIONS * (cells + SOLVE_WORK)


def _work(budget: Budget, seconds: float) -> Budget:
    """Counted work for ``seconds`` of ``budget`` (clock timing: the clock is the limit, the
    count a ceiling), with the call's deadline as the safety net."""
    limit = int(WORK_PER_SECOND * seconds) * (CLOCK_WORK_FACTOR if budget.by_clock else 1)
    return budget.allowance(limit, seconds)


def _account(work: Budget, out: LoadResult, budget: Budget) -> float:
    """Charge the call's budget the work a step did; its estimated seconds."""
    spent = work.used / WORK_PER_SECOND
    budget.charge(spent)
    out.cut = out.cut or (work.cut and not budget.by_clock)
    return spent


def _root_lp(tokens: Sequence[int], k: int, z: int, work: Budget, pool: list[Pattern]
             ) -> PatternLP | None:
    """The waste-limited LP at load z, started from the pool's patterns that fit and a greedy
    packing's bins, and solved (None: z is refuted before any LP)."""
    sizes, demand, _ = item_types(tokens)
    waste = k * z - sum(tokens)
    if waste < 0 or sizes[0] > z or len(tokens) < k:
        return None
    lp = PatternLP(sizes, z)
    for pattern in pool:
        if sum(sizes[i] * q for i, q in pattern) <= z:
            lp.add(pattern)
    for pattern in seed_patterns(sizes, demand, z, waste, None, work):
        lp.add(pattern)
    lp.set_waste(waste)
    return lp


def lp_bisect(tokens: Sequence[int], k: int, lo: int, hi: int, work: Budget,
              pool: list[Pattern]) -> int:
    """A proven lower bound on the max load in [lo, hi + 1] from the waste-limited root LP:
    galloping up from ``lo`` while it refutes, then bisecting below the first load it does
    not. Loads far above the bound leave much waste, so many patterns and slow LPs that
    refute nothing: the gallop keeps to the small-waste end. A refuted z refutes every
    smaller load, so each refutation is a proof whatever the path. ``pool`` as in
    :func:`decide`."""
    _, demand, _ = item_types(tokens)

    def refuted(z: int) -> bool:
        lp = _root_lp(tokens, k, z, work, pool)
        if lp is None:
            return True
        out = lp.solve(demand, work).bound > k
        pool[:] = [pattern for pattern, _ in lp.columns]
        return out

    step, z = 1, lo
    while z <= hi and not work.out():
        if not refuted(z):
            hi = z - 1
            break
        lo, z, step = z + 1, z + 1 + step, step * 2
    while lo <= hi and not work.out():
        mid = (lo + hi) // 2
        if refuted(mid):
            lo = mid + 1
        else:
            hi = mid - 1
    return lo


def search_loads(
    tokens: Sequence[int],
    k: int,
    lower: int,
    upper: int,
    seconds: float,
    budget: Budget | None = None,
) -> LoadResult:
    """The smallest max load in [lower, upper - 1] with a plan, within ``seconds``.

    ``lower`` must be a proven bound and ``upper`` the load of a known plan (under the cap, so
    every load tried is below the cap). ``seconds`` of the call's ``budget`` are turned into
    counted work, and the budget is charged the estimated seconds of the work done; its wall
    deadline is the safety net, or in clock timing the clock is the limit. Without a budget,
    strict timing (no clock).
    """
    if budget is None:
        budget = Budget(limit=seconds, deadline=None)
    by_clock = budget.by_clock
    out = LoadResult(None, None, lower)
    hi = upper - 1  # the loads still worth a decision
    if lower > hi or not affordable(tokens, hi, seconds, budget):
        return out  # the root LP would not finish: nothing would be decided
    out.searched = True
    end = time.perf_counter() + seconds
    pool: list[Pattern] = []
    # The root LPs first: each refutation moves the bound, at a few LP solves each.
    work = _work(budget, seconds * BISECT_SHARE)
    out.lower_bound = lp_bisect(tokens, k, lower, hi, work, pool)
    spent = _account(work, out, budget)
    # What the search has left: none past the call's deadline; else its own clock, or in
    # counted timing its seconds less the estimates charged.
    left = 0.0 if budget.seconds_left() < 0 else (
        end - time.perf_counter() if by_clock else seconds - spent)
    unknown = out.lower_bound - 1  # the highest load left undecided
    while out.lower_bound <= hi and left > 0:
        lo = max(out.lower_bound, unknown + 1)
        if lo > hi:
            break
        z = lo if unknown < out.lower_bound else (lo + hi) // 2
        slice_ = left * PER_LOAD_SHARE if z < hi or unknown >= out.lower_bound else left
        if not by_clock and count_allowance(tokens, z, slice_) == 0:
            break  # too little left for the root LP: nothing would be decided
        work = _work(budget, slice_)
        status, bins = decide(tokens, k, z, work, pool)
        spent = _account(work, out, budget)
        left = 0.0 if budget.seconds_left() < 0 else (
            end - time.perf_counter() if by_clock else left - spent)
        if status == FOUND and bins is not None:
            load = max(sum(tokens[i] for i in b) for b in bins)
            if load > z:  # pragma: no cover - a packing over its capacity is a bug upstream
                raise AssertionError(f"load search: a packing at capacity {z} has load {load}")
            out.bins, out.max_load, hi = bins, load, load - 1
        elif status == REFUTED:
            out.lower_bound = z + 1
        elif unknown >= out.lower_bound:
            break  # a second load left undecided: the rest goes to the engines after this
        else:
            unknown = z
    return out


#: Work units of one pattern looked at by the exhaustive search's enumeration (~5 us).
ENUM_WORK = 1_000


class _Stop(Exception):
    """The exhaustive search's work ran out."""


class Exhaust:
    """An exhaustive decision at load z: branch and price over bin completions.

    Why: the LP dive tries a few patterns per node and gives up; near the optimum that leaves
    loads undecided that no plan reaches. Here every node solves the waste-limited LP over
    the items left (warm, one pool for the whole tree) and branches on the bin holding the
    largest item left: every pattern holding it that leaves at most the waste left. Two
    exact integer tests prune: the node's Farley bound over the bins left, and the parent's
    duals for each child (a pattern whose weight is too small leaves more weight than the
    other bins can hold, since a child's patterns are a subset of its parent's). Failed
    (items left, bins left) are remembered. An exhausted tree refutes z.
    """

    def __init__(self, tokens: Sequence[int], k: int, z: int, work: Budget,
                 pool: list[Pattern] | None = None) -> None:
        self.sizes, self.demand, _ = item_types(tokens)
        self.k, self.z, self.work = k, z, work
        self.lp = PatternLP(self.sizes, z)
        for pattern in pool or ():
            if sum(self.sizes[i] * q for i, q in pattern) <= z:
                self.lp.add(pattern)
        self.failed: set[tuple[tuple[int, ...], int]] = set()
        self.chosen: list[Pattern] = []

    def run(self) -> str:
        """FOUND (``self.chosen`` holds the bins' patterns), REFUTED or UNKNOWN."""
        waste = self.k * self.z - sum(s * d for s, d in zip(self.sizes, self.demand, strict=True))
        if waste < 0 or self.sizes[0] > self.z:
            return REFUTED
        try:
            return FOUND if self._node(list(self.demand), self.k, waste) else REFUTED
        except (_Stop, RecursionError):
            return UNKNOWN

    def bins(self, tokens: Sequence[int]) -> list[list[int]]:
        """The found patterns as bins of item indices."""
        return patterns_to_bins(self.chosen, self.sizes, item_types(tokens)[2])

    def _threshold(self, demand: list[int], k_left: int) -> int | None:
        """The least weight a child's pattern needs under this node's LP duals (None: no
        proven test); raises nothing, returns a huge value when the node itself is refuted."""
        lp = self.lp
        w = [max(0, int(row.dual_value() * SCALE)) if d > 0 else 0
             for row, d in zip(lp.rows, demand, strict=True)]
        value, _, exact = lp.price(w, demand, self.work)
        if not exact or value <= 0:
            return None
        need = sum(d * x for d, x in zip(demand, w, strict=True))
        self._w = w
        return need - (k_left - 1) * value

    def _node(self, demand: list[int], k_left: int, waste: int) -> bool:
        if not any(demand):
            return True
        if k_left <= 0 or waste < 0:
            return False
        key = (tuple(demand), k_left)
        if key in self.failed:
            return False
        if self.work.out():
            raise _Stop
        self.lp.set_waste(waste)
        result = self.lp.solve(demand, self.work)
        if result.bound > k_left:
            self.failed.add(key)
            return False
        threshold = self._threshold(demand, k_left) if result.converged else None
        w = self._w if threshold is not None else [0] * len(demand)
        children = sorted(self._patterns(demand, waste, w, threshold), key=lambda c: -c[0])
        for _, load, pattern in children:
            for i, q in pattern:
                demand[i] -= q
            self.chosen.append(pattern)
            if self._node(demand, k_left - 1, waste - (self.z - load)):
                return True
            self.chosen.pop()
            for i, q in pattern:
                demand[i] += q
        self.failed.add(key)
        return False

    def _patterns(self, demand: list[int], waste: int, w: list[int],
                  threshold: int | None) -> list[tuple[int, int, Pattern]]:
        """(weight, load, pattern) of every bin holding the largest item left, wasting at most
        ``waste``, with weight at least ``threshold``."""
        sizes, z = self.sizes, self.z
        first = next(i for i, d in enumerate(demand) if d > 0)
        m = len(sizes)
        reach = [0] * (m + 1)  # the most load / weight the types from j on can add
        gain = [0] * (m + 1)
        for j in range(m - 1, first - 1, -1):
            reach[j] = reach[j + 1] + sizes[j] * demand[j]
            gain[j] = gain[j + 1] + w[j] * demand[j]
        low = z - waste
        need = threshold if threshold is not None else -1
        out: list[tuple[int, int, Pattern]] = []
        taken: list[tuple[int, int]] = []
        work = self.work

        seen = [0]

        def walk(j: int, load: int, weight: int) -> None:
            work.charge(ENUM_WORK)
            seen[0] += 1
            # The clock (a safety net, or the limit in clock timing) every 256 patterns.
            if work.left() <= 0 or (seen[0] & 255 == 0 and work.out()):
                raise _Stop
            if load >= low and weight >= need:
                out.append((weight, load, tuple(taken)))
            for t in range(j, m):
                if load + reach[t] < low or weight + gain[t] < need:
                    return
                most = min(demand[t], (z - load) // sizes[t])
                for q in range(1, most + 1):
                    taken.append((t, q))
                    walk(t + 1, load + q * sizes[t], weight + q * w[t])
                    taken.pop()

        most = min(demand[first], z // sizes[first])
        try:
            for q in range(1, most + 1):
                taken.append((first, q))
                walk(first + 1, q * sizes[first], q * w[first])
                taken.pop()
        finally:
            walk = None  # type: ignore[assignment]  # a recursive closure: break its cycle (see exact.pack)
        return out
