"""An exact search for few long sequences per micro-batch: bin completion under a load z.

Decision: can the items go into k micro-batches, each with load (cost) at most z, tokens at most
the cap and, with equal sizes, exactly the given sample count? Bins are filled one at a time;
each takes the largest item left and a completion of it (a subset of the other items). The
slack a plan may leave in total is fixed: ``k*z - total cost``. Every completion spends some of
it, so near the lower bound only nearly full completions are allowed and the search is narrow;
that is where the LP bound (``lp_bound``) puts z. Completions are tried fullest first, equal
items are never tried in two orders, and failed sets of remaining items are remembered.

``minimise_max_load`` runs the decision at the lower bound first (usually a plan is there), then
bisects between the bounds. Work is counted in search nodes against an
:class:`~seqpart.solver.options.Budget`, so results do not depend on the clock; its deadline
is only a safety net. An exhausted search is a proof: z is infeasible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..options import Budget

FOUND, INFEASIBLE, UNKNOWN = "found", "infeasible", "unknown"
#: Above this many items left, completions come lazily, pruned by subset-sum bitsets.
_LAZY_ABOVE = 24


#: Search nodes of a whole ``minimise_max_load`` or ``pack`` call given no allowance.
DEFAULT_NODES = 2_000_000
#: Failed remaining sets kept (memory bound).
MEMO_LIMIT = 200_000
#: Nodes between readings of the clock as a safety net (a node is cheap; where the clock is
#: the limit, clock timing, the caller's allowance reads it more often).
CLOCK_EVERY = 1024


def default_allowance() -> Budget:
    """The nodes of a call given no allowance: no clock."""
    return Budget(DEFAULT_NODES, every=CLOCK_EVERY)


class _OutOfBudget(Exception):
    pass


def pack(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    k: int,
    z: int,
    cap: int | None = None,
    max_count: int | None = None,
    budget: Budget | None = None,
) -> tuple[str, list[list[int]] | None]:
    """Decide whether k micro-batches of load <= z (tokens <= cap) hold every item.

    Returns (FOUND, bins) with exactly k non-empty bins, (INFEASIBLE, None) when the search
    was exhaustive, or (UNKNOWN, None) when the budget ran out.
    """
    budget = budget or default_allowance()
    n = len(tokens)
    cap_t = cap if cap is not None else sum(tokens)
    if n < k or any(c > z for c in costs) or any(t > cap_t for t in tokens):
        return INFEASIBLE, None
    slack = k * z - sum(costs)
    if slack < 0:
        return INFEASIBLE, None
    if max_count is not None and sum(counts) != k * max_count:
        return INFEASIBLE, None
    # Largest first; equal items (same tokens, cost, count) get the same type id.
    order = sorted(range(n), key=lambda i: (-costs[i], -tokens[i], -counts[i], i))
    cst = [costs[i] for i in order]
    tok = [tokens[i] for i in order]
    cnt = [counts[i] for i in order]
    kind = [0] * n
    for p in range(1, n):
        same = (cst[p], tok[p], cnt[p]) == (cst[p - 1], tok[p - 1], cnt[p - 1])
        kind[p] = kind[p - 1] if same else kind[p - 1] + 1
    failed: set[tuple[tuple[int, ...], int]] = set()
    bins: list[list[int]] = []

    one_dim = max_count is None and cst == tok  # cost = tokens: subset sums as bitsets

    completions = _subset_enumerator(cst, tok, cnt, kind, one_dim, budget)

    def solve(rest: list[int], bins_left: int, slack_left: int) -> bool:
        if not rest:
            return True
        if bins_left == 0:
            return False
        key = (tuple(kind[p] for p in rest), bins_left)
        if key in failed:
            return False
        first, others = rest[0], rest[1:]
        need_n = None if max_count is None else max_count - cnt[first]
        if need_n is not None and need_n < 0:
            return False
        room_c, room_t = z - cst[first], cap_t - tok[first]
        need_c = max(0, z - slack_left - cst[first])
        for fill, extra in completions(others, room_c, room_t, need_c, need_n):
            used = set(extra)
            bins.append([first, *extra])
            if solve([p for p in others if p not in used], bins_left - 1,
                     slack_left - (z - cst[first] - fill)):
                return True
            bins.pop()
        if len(failed) < MEMO_LIMIT:
            failed.add(key)
        return False

    try:
        ok = solve(list(range(n)), k, slack)
    except _OutOfBudget:
        return UNKNOWN, None
    except RecursionError:  # pragma: no cover - k beyond the interpreter's depth
        return UNKNOWN, None
    finally:
        # A recursive closure refers to itself: a reference cycle that only the cyclic
        # collector frees, and partition pauses it, so a long search's closures (measured: 10^5
        # objects after 1 s) were collected all at once at the call's end, 20-40 ms past its
        # limit. Rebinding the name breaks the cycle: reference counting frees it now.
        solve = None  # type: ignore[assignment]
    if not ok:
        return INFEASIBLE, None
    out = [[order[p] for p in b] for b in bins]
    # Fewer than k bins used: give an item of a multi-item bin to each empty one (loads and
    # tokens only fall; with equal sizes every bin is full, so this never happens there).
    while len(out) < k:
        donor = max(range(len(out)), key=lambda j: (len(out[j]), -j))
        out.append([out[donor].pop()])
    return FOUND, [sorted(b) for b in out]


def _subset_enumerator(
    cst: list[int], tok: list[int], cnt: list[int], kind: list[int], one_dim: bool,
    budget: Budget,
) -> Callable[[list[int], int, int, int, int | None], Iterator[tuple[int, list[int]]]]:
    """The subsets :func:`pack` tries for one bin, over items in its sorted order (``cst``,
    ``tok``, ``cnt`` per position, ``kind`` equal-item ids). A closure, so the search's hot loop
    reads these lists as local cells rather than attributes."""

    def completions(rest: list[int], room_c: int, room_t: int, need_c: int,
                    need_n: int | None) -> Iterator[tuple[int, list[int]]]:
        """Subsets of ``rest`` (positions, largest first) with cost in [need_c, room_c], tokens
        <= room_t and, if set, count exactly need_n, each with its cost. Few items: all of
        them, fullest first. Many: lazily in search order, and with cost = tokens only along
        branches whose reachable sums (bitsets per suffix) still meet the window."""
        m = len(rest)
        suffix = [0] * (m + 1)
        for j in range(m - 1, -1, -1):
            suffix[j] = suffix[j + 1] + cst[rest[j]]
        reach: list[int] | None = None
        if one_dim and m > _LAZY_ABOVE:
            room = min(room_c, room_t)
            # Bitset work, in node-sized units, checked before it is done: at n=1024 it alone
            # was ten times the nodes left, and ran 10 ms past a 20 ms call.
            work = m * (room // 4096 + 1)
            if work > budget.left() or budget.past_deadline():
                raise _OutOfBudget
            mask = (1 << (room + 1)) - 1
            reach = [1] * (m + 1)
            for j in range(m - 1, -1, -1):
                reach[j] = (reach[j + 1] | (reach[j + 1] << cst[rest[j]])) & mask
            budget.charge(work)
        chosen: list[int] = []

        def walk(j: int, c: int, t: int, nn: int) -> Iterator[tuple[int, list[int]]]:
            budget.charge(1)
            if budget.out():
                raise _OutOfBudget
            if c >= need_c and (need_n is None or nn == need_n):
                yield c, chosen[:]
            if need_n is not None and nn >= need_n:
                return
            last_kind = -1
            for q in range(j, m):
                p = rest[q]
                if c + suffix[q] < need_c:
                    return  # even everything left cannot fill the bin enough
                if kind[p] == last_kind:
                    continue  # an equal item was just tried at this position
                c2 = c + cst[p]
                if c2 <= room_c and t + tok[p] <= room_t:
                    if reach is not None:
                        lo = max(0, need_c - c2)
                        hi = min(room_c - c2, room_t - t - tok[p])
                        if hi < lo or not (reach[q + 1] >> lo) & ((1 << (hi - lo + 1)) - 1):
                            continue  # no subset of what follows lands in the window
                    last_kind = kind[p]
                    chosen.append(p)
                    yield from walk(q + 1, c2, t + tok[p], nn + cnt[p])
                    chosen.pop()

        try:
            if reach is not None:
                yield from walk(0, 0, 0, 0)
            else:
                yield from sorted(walk(0, 0, 0, 0), key=lambda row: -row[0])
        finally:
            walk = None  # type: ignore[assignment]  # see pack: breaks the reference cycle

    return completions


#: Items the dive's subset-sum looks at per bin before it looks at all of them.
DIVE_POOL = 24
#: The dive's work is counted in bitset words shifted, plus these stand-ins (in words) for
#: the Python around the shifts: per pool item (its big-int operations and read-back) and per
#: item left when a bin is closed (the list rebuilt). Measured: without them a dive at
#: n=2048 took ~5 ms where ~1 ms was charged; at 200 and 24 a dive over short bitsets (cap 536)
#: was charged 2.8x its time and stopped before the plan it finds in 3 ms.
DIVE_WORDS_PER_POOL_ITEM = 60
DIVE_WORDS_PER_ITEM_LEFT = 12


def _best_fill(tokens: Sequence[int], pool: list[int], room: int) -> tuple[int, list[int]]:
    """The largest subset sum of ``pool`` (largest first) up to ``room``, and one subset."""
    mask = (1 << (room + 1)) - 1
    reach = 1
    history = []
    for i in pool:  # largest first, so the read-back below keeps large items
        history.append(reach)
        reach = (reach | (reach << tokens[i])) & mask
    fill = reach.bit_length() - 1
    chosen = []
    c = fill
    for pos in range(len(pool) - 1, -1, -1):
        if c == 0:
            break
        if not (history[pos] >> c) & 1:  # not reachable without this item: take it
            chosen.append(pool[pos])
            c -= tokens[pool[pos]]
    return fill, chosen


def dive(
    tokens: Sequence[int],
    k: int,
    z: int,
    cap: int | None = None,
    work: Budget | None = None,
) -> list[list[int]] | None:
    """A plan with max load <= z found without backtracking, or None (not a proof).

    For cost = tokens without equal sizes: bins are filled one at a time, each with the largest
    item left plus the subset of the others that fills it most (a subset-sum over Python big
    ints as bitsets), as long as the total slack ``k*z - total`` allows. When z is the counting
    bound, plans at it usually exist among many items per bin, and this finds one where bin
    completion's enumeration would be too wide. ``work`` is charged the bitset words shifted
    (plus the stand-ins above) and stops the dive when they are over it; its deadline is a
    safety net read once per bin. The caller reads the work done from it.
    """
    return _dive(tokens, k, z, cap, work if work is not None else Budget(10**9))


def _dive(
    tokens: Sequence[int],
    k: int,
    z: int,
    cap: int | None,
    work: Budget,
) -> list[list[int]] | None:
    """The body of :func:`dive`, charging ``work`` as it goes."""
    n = len(tokens)
    limit = min(z, cap) if cap is not None else z
    if n < k or max(tokens) > limit:
        return None
    slack = k * limit - sum(tokens)  # every load is at most limit
    if slack < 0:
        return None
    rest = sorted(range(n), key=lambda i: (-tokens[i], i))
    bins: list[list[int]] = []
    while rest and len(bins) < k:
        if work.past_deadline():
            return None  # the safety net: work budgets decide when the clock does not bind
        first, others = rest[0], rest[1:]
        room = limit - tokens[first]
        need = max(0, limit - slack - tokens[first])
        # Many items: the subset-sum runs over the largest ones first (the hard ones to place;
        # the small ones are kept to fill the last bins), over all of them only if needed.
        pools = [others]
        for size in (4 * DIVE_POOL, DIVE_POOL):  # the largest, and an even spread of the rest
            if len(others) > 2 * size:
                half = size // 2
                spread = others[half :: max(1, (len(others) - half) // half)][:half]
                pools.insert(0, others[:half] + spread)
        for pool in pools:
            work.charge(len(pool) * (room // 64 + 1 + DIVE_WORDS_PER_POOL_ITEM))
            if work.left() < 0:
                return None
            fill, chosen = _best_fill(tokens, pool, room)
            if fill >= need:
                break
        if fill < need:
            return None
        taken = set(chosen)
        bins.append([first, *chosen])
        slack -= limit - tokens[first] - fill
        rest = [i for i in others if i not in taken]
        work.charge(DIVE_WORDS_PER_ITEM_LEFT * len(others))
    if rest:
        return None
    while len(bins) < k:  # fewer bins used: split multi-item bins (loads only fall)
        donor = max(range(len(bins)), key=lambda j: (len(bins[j]), -j))
        bins.append([bins[donor].pop()])
    return [sorted(b) for b in bins]


@dataclass
class ExactResult:
    """What ``minimise_max_load`` established: the best plan it found and a proven bound."""

    bins: list[list[int]] | None
    max_load: int | None
    lower_bound: int
    complete: bool  # the bound meets the plan (or infeasibility was proven): a proof


def minimise_max_load(
    tokens: Sequence[int],
    costs: Sequence[int],
    counts: Sequence[int],
    k: int,
    lower: int,
    upper: int | None,
    cap: int | None = None,
    max_count: int | None = None,
    budget: Budget | None = None,
) -> ExactResult:
    """Smallest max load in [lower, upper - 1] with a plan, by decisions at z.

    ``lower`` must be a proven lower bound; ``upper`` the best known plan's load (None: no plan
    known, the search then goes up to the total cost). The result's lower bound stays proven.
    """
    budget = budget or default_allowance()
    hi = upper - 1 if upper is not None else sum(costs)
    lo = lower
    best: list[list[int]] | None = None
    best_load: int | None = None

    def load_of(bins: list[list[int]]) -> int:
        return max(sum(costs[i] for i in b) for b in bins)

    first = True
    while lo <= hi and not budget.out():
        z = lo if first else (lo + hi) // 2  # a plan usually sits at the bound: try it first
        first = False
        status, bins = pack(tokens, costs, counts, k, z, cap, max_count, budget)
        if status == FOUND:
            assert bins is not None
            best, best_load = bins, load_of(bins)
            hi = best_load - 1
        elif status == INFEASIBLE:
            lo = z + 1
        else:
            break
    proven_upper = best_load if best_load is not None else upper
    # Without any plan, complete means every z up to the total cost was refuted: no plan at all.
    complete = lo > hi if proven_upper is None else lo >= proven_upper
    return ExactResult(best, best_load, lo, complete)
