"""The smallest count of bins under a cap: LP bound, LP-guided dive, exact repacking.

Why: first fit decreasing and the counting bounds often leave a gap of one bin or more when
bins hold a few items each (long sequences under a cap of a few of them), and local search at
a fixed count rarely closes it. The Gilmore-Gomory LP closes it from both sides: its round-up
is the optimum on nearly all such instances (a proof once a packing meets it), and its primal
says which bin contents (patterns) an optimal packing uses.

The search, at a target count k (the best lower bound first):

* every bin of a k-bin packing wastes at most ``k * cap - total``; the LP is restricted to
  patterns within that waste, and the waste left shrinks as bins are fixed, so the LP refutes
  a wrong partial packing early (on instances with exactly full bins, at once);
* a depth-first dive fixes the patterns the LP uses (all those at value >= 1 together, else
  one at a time, largest value first), re-solving the LP on what is left (warm: the pattern
  pool stays), and backtracks with a limited number of discrepancies (second choices);
* the last few items are packed exactly (bin completion, :func:`exact.pack`).

Everything is counted work (LP cells and solves, exact-search nodes), so a given allowance
gives the same answer on any machine; the deadline is a safety net.

With ``partition``'s options: the count is a question about tokens under the cap, so the
search runs on token sums whatever the cost (``partition`` then balances the cost at the count
found); a group is one unit with its token sum; sequences over the cap (``oversize="alone"``)
are set apart before. ``equal_size`` is not searched: every micro-batch must then hold the
same number of sequences, which the patterns do not model, so the fixed-count loop decides
as before.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...heuristics import first_fit_decreasing
from ..options import Budget
from ..tuning import COUNT_MANY_PER_BIN_SHARE, COUNT_SHARE, WORK_PER_SECOND
from .branch_bound import CLOCK_EVERY, FOUND, pack
from .branch_bound import INFEASIBLE as PACK_INFEASIBLE
from .count_lp import (
    BB_TYPICAL_WORK,
    DP_CELLS,
    INFEASIBLE,
    SOLVE_WORK,
    Pattern,
    PatternLP,
)

#: Items left at which the dive hands over to the exact bin completion.
FINISH_AT = 45
#: After a hand-over ran out of nodes, the next waits for this many items fewer.
FINISH_STEP = 10
#: Exact-search nodes per hand-over, and a node's cost in work units (~5 us measured).
NODE_WORK = 800
FINISH_NODES = 2_000
#: Work units of a dive node's own Python (state, candidates), besides its LP and search.
NODE_OVERHEAD_WORK = 20_000
#: Second choices tried per node of the dive (the first is the LP's own).
BRANCHING = 3
#: The dive fixes every column at value >= 1 at once when there are more than this many.
BATCH_FROM = 1
#: LP tolerance: a column at value >= 1 - EPS counts as used once.
EPS = 1e-6


class _Stop(Exception):
    """The work allowance ran out inside the dive."""


@dataclass
class CountResult:
    """What the search established: a packing (bins of item indices) and a proven bound."""

    bins: list[list[int]] | None
    lower_bound: int
    lp_bound: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _State:
    demand: list[int]
    waste: int
    fixed: list[Pattern] = field(default_factory=list)


class _Dive:
    """One target count: the depth-first LP dive over a shared pattern pool."""

    def __init__(self, lp: PatternLP, sizes: list[int], demand: list[int], cap: int,
                 target: int, work: Budget, rng: random.Random | None) -> None:
        self.lp, self.sizes, self.cap, self.target = lp, sizes, cap, target
        self.work, self.rng = work, rng
        total = sum(s * d for s, d in zip(sizes, demand, strict=True))
        self.state = _State(list(demand), target * cap - total)
        self.refuted = False  # the LP proved that no packing into ``target`` bins exists
        # The first dead end's fixed bins and the demand left: first fit decreasing on that
        # demand completes a packing near the target when the dive finds none.
        self.partial: tuple[list[Pattern], list[int]] | None = None
        self.finish_below = FINISH_AT

    def run(self, discrepancies: int) -> list[Pattern] | None:
        try:
            return self.state.fixed if self._node(discrepancies) else None
        except (_Stop, RecursionError):  # out of work, or a dive deeper than Python allows
            return None

    def _apply(self, pattern: Pattern, copies: int) -> int:
        """Fix up to ``copies`` bins of ``pattern`` (clipped to the demand); how many."""
        st, done = self.state, 0
        for _ in range(copies):
            clipped = tuple((i, min(q, st.demand[i])) for i, q in pattern if st.demand[i] > 0)
            if not clipped:
                break
            for i, q in clipped:
                st.demand[i] -= q
            st.waste -= self.cap - sum(self.sizes[i] * q for i, q in clipped)
            st.fixed.append(clipped)
            done += 1
        return done

    def _undo(self, count: int) -> None:
        st = self.state
        for _ in range(count):
            clipped = st.fixed.pop()
            for i, q in clipped:
                st.demand[i] += q
            st.waste += self.cap - sum(self.sizes[i] * q for i, q in clipped)

    def _finish(self, k_left: int) -> str:
        """Exact bin completion on the few items left: found, infeasible or unknown."""
        st = self.state
        rest = [s for s, d in zip(self.sizes, st.demand, strict=True) for _ in range(d)]
        types = [i for i, d in enumerate(st.demand) for _ in range(d)]
        if len(rest) < k_left:  # fewer items than bins: the count is beaten, not missed
            k_left = len(rest)
        nodes = min(FINISH_NODES, max(0, self.work.left() // NODE_WORK))
        budget = Budget(nodes, self.work.deadline, every=CLOCK_EVERY)
        status, bins = pack(rest, rest, [1] * len(rest), k_left, self.cap, self.cap, None, budget)
        self.work.charge(budget.used * NODE_WORK)
        if status == FOUND and bins is not None:
            for b in bins:
                st.fixed.append(tuple(sorted(Counter(types[j] for j in b).items())))
            return FOUND
        return PACK_INFEASIBLE if status == PACK_INFEASIBLE else "unknown"

    def _candidates(self, columns: list[tuple[Pattern, float]]) -> list[tuple[Pattern, int]]:
        """What to fix next, best first: one column at a time, largest LP value first (a few
        near-equal ones shuffled when randomised)."""
        # Patterns holding the largest item left first (types are numbered largest first):
        # the large items have the fewest ways to be completed, so they are settled early.
        first = min(i for i, d in enumerate(self.state.demand) if d > 0)
        noise = (lambda: 0.8 + 0.4 * self.rng.random()) if self.rng is not None else lambda: 1.0
        cols = sorted(columns, key=lambda c: (c[0][0][0] != first, -c[1] * noise()))
        return [(p, max(1, int(x + EPS))) for p, x in cols[: BRANCHING + 1]]

    def _node(self, discrepancies: int) -> bool:
        st = self.state
        self.work.charge(NODE_OVERHEAD_WORK)
        if self.work.out():
            raise _Stop
        left = sum(st.demand)
        k_left = self.target - len(st.fixed)
        if left == 0:
            return True
        if k_left <= 0 or st.waste < 0:
            self.refuted = self.refuted or not st.fixed  # the total alone needs more bins
            return False
        if left <= min(FINISH_AT, self.finish_below):
            status = self._finish(k_left)
            if status != "unknown":
                # An exhausted search with nothing fixed refutes the target itself.
                self.refuted = self.refuted or (status != FOUND and not st.fixed)
                return status == FOUND
            # Out of nodes: the next hand-over waits until a few more bins are fixed.
            self.finish_below = left - FINISH_STEP
        self.lp.set_waste(st.waste)
        result = self.lp.solve(st.demand, self.work)
        if self.partial is None and st.fixed:
            self.partial = (list(st.fixed), list(st.demand))
        if result.bound == INFEASIBLE or result.bound > k_left:
            # At the root (nothing fixed) the exact Farley bound refutes the target itself.
            self.refuted = self.refuted or not st.fixed
            return False
        if result.converged and result.value > k_left + EPS:
            return False
        if not result.columns:
            return False
        cands = self._candidates(result.columns)
        whole = [(p, int(x + EPS)) for p, x in result.columns if x >= 1 - EPS]
        if len(whole) > BATCH_FROM:  # every column at value >= 1 at once: one re-solve for many bins
            cands.insert(0, (tuple(whole), -1))
        for j, (cand, copies) in enumerate(cands):
            if j > 0 and discrepancies <= 0:
                break
            if copies == -1:  # the batch
                count = sum(self._apply(p, q) for p, q in cand)  # type: ignore[misc]
            else:
                count = self._apply(cand, 1 if j else copies)
            if count and self._node(discrepancies - (1 if j else 0)):
                return True
            self._undo(count)
            if self.work.out():
                raise _Stop
        return False


def _complete(partial: tuple[list[Pattern], list[int]], sizes: list[int],
              cap: int) -> list[Pattern]:
    """The dive's bins so far and first fit decreasing on the items left."""
    fixed, demand = partial
    rest = [i for i, d in enumerate(demand) for _ in range(d)]  # largest first
    bins = first_fit_decreasing([sizes[i] for i in rest], None, cap)
    return fixed + [tuple(sorted(Counter(rest[j] for j in b).items())) for b in bins]


def item_types(tokens: Sequence[int]) -> tuple[list[int], list[int], dict[int, list[int]]]:
    """Distinct sizes (largest first), their multiplicities, and the items of each size."""
    where: dict[int, list[int]] = {}
    for i, t in enumerate(tokens):
        where.setdefault(t, []).append(i)
    sizes = sorted(where, reverse=True)
    return sizes, [len(where[s]) for s in sizes], where


def patterns_to_bins(patterns: list[Pattern], sizes: list[int],
             where: dict[int, list[int]]) -> list[list[int]]:
    pools = {s: list(where[s]) for s in sizes}
    return [[pools[sizes[i]].pop() for i, q in p for _ in range(q)] for p in patterns]


#: Items the greedy fills choose from per bin (the largest left, then a spread of the rest).
FILL_POOL = 48
#: Greedy packings whose bins start the pool (the first in order, the others randomised).
SEEDS = 4


def _fill(sizes: list[int], avail: list[int], room: int, rng: random.Random | None,
          ) -> list[int]:
    """Types of a subset of ``avail`` (type ids, sizes descending) with the largest sum up to
    ``room``: a subset-sum over Python ints as bitsets, read back keeping large items."""
    pool = avail
    if len(pool) > FILL_POOL:
        half = FILL_POOL // 2
        rest = pool[half:]
        spread = rng.sample(rest, half) if rng is not None else rest[:: len(rest) // half][:half]
        pool = pool[:half] + sorted(spread, key=lambda t: -sizes[t])
    mask = (1 << (room + 1)) - 1
    reach, history = 1, []
    for t in pool:
        history.append(reach)
        reach = (reach | (reach << sizes[t])) & mask
    c = reach.bit_length() - 1
    chosen = []
    for pos in range(len(pool) - 1, -1, -1):
        if c == 0:
            break
        if not (history[pos] >> c) & 1:
            chosen.append(pool[pos])
            c -= sizes[pool[pos]]
    return chosen


#: Work units per bitset shift of the greedy fills, per 64-bit word and fixed (Python).
FILL_WORK_PER_WORD = 1
FILL_WORK_PER_SHIFT = 150
FILL_WORK_PER_ITEM_LEFT = 5


def _fill_work(n_left: int, room: int) -> int:
    """Work units of one greedy fill (measured ~220 million a second, like the LP's)."""
    return (min(n_left, FILL_POOL) * (FILL_WORK_PER_WORD * (room // 64 + 1) + FILL_WORK_PER_SHIFT)
            + FILL_WORK_PER_ITEM_LEFT * n_left)


def seed_patterns(sizes: list[int], demand: list[int], cap: int, waste: int,
                  rng: random.Random | None, work: Budget) -> list[Pattern]:
    """Bins of a greedy packing (each bin: the largest item left and the fullest fill of the
    rest) that waste at most ``waste``: a start for the LP's pool, which otherwise begins
    from single-size bins that the waste limit switches off, and needs hundreds of
    column-generation rounds to find full bins one at a time."""
    left = [t for t, d in enumerate(demand) for _ in range(d)]  # type ids, largest first
    out: list[Pattern] = []
    while left:
        first, others = left[0], left[1:]
        room = cap - sizes[first]
        work.charge(_fill_work(len(others), room))
        if work.out():  # a start only: cut short, the pool just begins smaller
            break
        chosen = _fill(sizes, others, room, rng)
        bin_types = [first, *chosen]
        if cap - sum(sizes[t] for t in bin_types) <= waste:
            out.append(tuple(sorted(Counter(bin_types).items())))
        for t in chosen:
            others.remove(t)
        left = others
    return out


def search_count(
    tokens: Sequence[int],
    cap: int,
    lower: int,
    upper_bins: list[list[int]],
    work: Budget,
    seed: int = 0,
    pool: list[Pattern] | None = None,
) -> CountResult:
    """Fewer bins than ``upper_bins`` (a valid packing, e.g. first fit decreasing's), within
    ``work``; ``lower`` is a proven bound on the count. Returns the best packing found (never
    more bins than ``upper_bins``) and the best proven bound (the LP's when it is higher).
    ``pool``: patterns (over the distinct sizes, largest first) from a search of the same
    items at another cap; those that fit start the LP, and the LP's columns are left in it
    for the next search (a warm start: most of a root LP's work is finding its columns)."""
    best = [list(b) for b in upper_bins]
    result = CountResult(best, lower)
    if len(best) <= lower:
        return result
    sizes, demand, where = item_types(tokens)
    lp = PatternLP(sizes, cap)
    index = {s: i for i, s in enumerate(sizes)}
    for b in best:  # the packing's own bins start the pool: the LP starts near its optimum
        lp.add(tuple(sorted(Counter(index[tokens[j]] for j in b).items())))
    for pattern in pool or ():
        if sum(sizes[i] * q for i, q in pattern) <= cap:
            lp.add(pattern)
    total = sum(s * d for s, d in zip(sizes, demand, strict=True))
    for r in [None] + [random.Random(seed + j) for j in range(SEEDS - 1)]:
        for pattern in seed_patterns(sizes, demand, cap, result.lower_bound * cap - total, r,
                                     work):
            lp.add(pattern)
    rng: random.Random | None = None
    attempt = 0
    while result.lower_bound < len(best) and not work.out():
        target = result.lower_bound
        # The second attempt (and every third after it) aims one bin above the bound while
        # that still beats the packing: it secures a count near the bound early, and where
        # the LP round-up is not the optimum the bound alone would take all the work.
        goal = target + 1 if attempt % 3 == 1 and target + 1 < len(best) else target
        dive = _Dive(lp, sizes, demand, cap, goal, work, rng)
        found = dive.run(min(attempt, 3))
        if dive.refuted and goal == target:
            # No packing into this many bins: the bound moves up one (at the next count
            # the waste allowance is larger, so the refutation says nothing there).
            result.lower_bound = result.lp_bound = goal + 1
            continue
        if found is None and dive.partial is not None:
            found = _complete(dive.partial, sizes, cap)
        if found is not None:
            bins = patterns_to_bins(found, sizes, where)
            if len(bins) < len(best):
                best = result.bins = bins
        attempt += 1
        rng = random.Random(seed + attempt)
    if pool is not None:
        pool[:] = [pattern for pattern, _ in lp.columns]
    return result


#: Above this many sequences per micro-batch (on average, at the lower bound), or when the
#: pricing needs the branch and bound (large caps), the search gets the smaller share: there
#: local search at a fixed count, which runs after it, often finds the count (Scholl's
#: classes with 5-9 items per bin, and his hard set), and the LP dive seldom does.
COUNT_FEW_PER_BIN = 4
#: Below this time limit (seconds) the search gets the smaller share too: the LP rarely
#: converges in a few milliseconds, where the fixed-k attempts' local search at the floor
#: found more counts on Falkenauer's u120 and u250 at 20 ms.
COUNT_SMALL_LIMIT = 0.1
#: The search runs only when its allowance holds this many column-generation iterations at
#: the root (fewer rarely reach the LP optimum, so they would prove and steer nothing).
MIN_ITERATIONS = 10
NOTE_COUNT_LP = "count: proven by the gilmore-gomory LP bound"
NOTE_COUNT_SEARCH = "count: lp-guided dive"


def count_allowance(tokens: Sequence[int], cap: int, seconds: float,
                    table_only: bool = False) -> int:
    """Work units for ``seconds``, or 0 when that cannot pay for the root LP (the search is
    then skipped). ``table_only``: 0 also when the pricing would need the branch and bound
    (large token caps with many distinct lengths), whose LP seldom converges in a short
    budget."""
    sizes = set(tokens)
    lp_cells = len(sizes) * 2 * (cap // math.gcd(cap, *sizes) + 1)
    if table_only and lp_cells > DP_CELLS:
        return 0
    pricing = lp_cells if lp_cells <= DP_CELLS else BB_TYPICAL_WORK
    bins = -(-sum(tokens) // cap)
    seeds = SEEDS * bins * _fill_work(len(tokens) // 2, cap // 2)  # the pool's start
    work = int(WORK_PER_SECOND * max(seconds, 0.0))
    if seeds + MIN_ITERATIONS * (pricing + SOLVE_WORK) > work:
        return 0
    return work


def count_share(tokens: Sequence[int], cap: int, lower: int, budget: Budget) -> float:
    """The share of the call's time limit (``budget.time_limit``) the search gets (see
    :data:`COUNT_FEW_PER_BIN` and :data:`COUNT_SMALL_LIMIT`)."""
    sizes = set(tokens)
    table = len(sizes) * (cap // math.gcd(cap, *sizes) + 1)
    few = len(tokens) <= COUNT_FEW_PER_BIN * max(lower, 1)
    large = budget.time_limit >= COUNT_SMALL_LIMIT
    return COUNT_SHARE if few and large and table <= DP_CELLS else COUNT_MANY_PER_BIN_SHARE


def count_items(
    tokens: Sequence[int], cap: int, lower: int, bins: list[list[int]], budget: Budget,
    seconds: float,
) -> CountResult | None:
    """:func:`search_count` within ``seconds`` of the call's ``budget`` as counted work (the
    clock a safety net), charged to it; None when the allowance is too small."""
    work_limit = count_allowance(tokens, cap, seconds)
    if work_limit == 0:
        return None
    work = budget.allowance(work_limit, seconds)
    result = search_count(tokens, cap, lower, bins, work)
    budget.charge(work.used / WORK_PER_SECOND)
    if len(result.bins or ()) < len(bins):
        result.notes.append(NOTE_COUNT_SEARCH)
    if result.lp_bound is not None and result.lp_bound == result.lower_bound:
        result.notes.append(NOTE_COUNT_LP)
    return result
