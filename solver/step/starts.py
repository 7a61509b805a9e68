"""Starting schedules for step planning: constructions at a given count per rank, and the
trainers' own schedules. Each returns ``mb_of`` (the micro-batch of every sequence, micro-batch
``b`` on rank ``b // m``) only when it is valid: non-empty micro-batches under the cap.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqpart.heuristics.kernels import capped_balance_lists, karmarkar_karp_lists, lpt_lists, order_desc
from seqpart.solver.step.model import StepInstance, find_schedule_violations

#: A start in plan_step's pool: (objective, arrival, method, m, mb_of); searched best first.
Row = tuple[int, int, str, int, np.ndarray]

#: From this many ranks on, the ranks are split into micro-batches together (one numpy round per
#: position) rather than by one LPT per rank.
_VECTOR_SPLIT_RANKS = 32
#: Karmarkar-Karp over ranks, measured ~80 ms at n=4096, dp=16 on the loaded 2-core machine.
_KK_SECONDS_PER_SEQUENCE_RANK = 1.5e-6
#: Ranks whose LPT split breaks the cap are re-split by the capped balancer (slow) up to this
#: many; beyond, the construction gives up at this count.
_MAX_REPAIRED_RANKS = 4
#: Karmarkar-Karp splits a rank only up to this many items x micro-batches (~2 ms loaded).
_KK_SPLIT_WORK = 5_000
#: Past this many items x bins a split balances tokens, not cost (see split_into).
_LPT_SPLIT_WORK = 50_000


def valid_start(mb_of: np.ndarray, inst: StepInstance, k: int) -> bool:
    """Every micro-batch non-empty and under the cap (an over-cap sequence only alone)."""
    if len(mb_of) != inst.n or mb_of.min() < 0 or mb_of.max() >= k:
        return False
    cnt = np.bincount(mb_of, minlength=k)
    if (cnt == 0).any():
        return False
    if inst.cap is None:
        return True
    tok = np.bincount(mb_of, weights=inst.tokens, minlength=k)  # exact: tokens < 2**53 summed
    over = tok > inst.cap
    return bool(not over.any() or (cnt[over] == 1).all())


def from_bins(bins: Sequence[Sequence[int]], by_rank: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """mb_of from micro-batches (local lists) dealt to ranks (lists of micro-batch positions)."""
    mb_of = np.full(n, -1, dtype=np.int64)
    b = 0
    for rank in by_rank:
        for pos in rank:
            mb_of[list(bins[pos])] = b
            b += 1
    return mb_of


def split_into(
    tokens: list[int], costs: list[int], k: int, cap: int | None, *, balanced: bool,
    repair: bool, force: bool = False,
) -> list[list[int]] | None:
    """Positions ``0..len(tokens)-1`` into ``k`` non-empty bins under the cap, every over-cap
    item alone in a bin of its own: Karmarkar-Karp when ``balanced`` and it respects the cap,
    else capped LPT, else (when ``repair``, and for a large split only when ``force``) the
    capped balancer, slow on large tight splits. None when none works."""
    over = [] if cap is None else [i for i, t in enumerate(tokens) if t > cap]
    rest = [i for i, t in enumerate(tokens) if cap is None or t <= cap]
    k_rest = k - len(over)
    if k_rest < (1 if rest else 0) or len(rest) < k_rest:
        return None
    if not rest:
        return [[i] for i in over]
    rt, rc, ones = [tokens[i] for i in rest], [costs[i] for i in rest], [1] * len(rest)

    def fits(bins: list[list[int]]) -> bool:
        return all(bins) and (cap is None or all(sum(rt[i] for i in b) <= cap for b in bins))

    # Karmarkar-Karp costs about items x bins; past that, LPT balances nearly as well.
    kk = balanced and len(rest) * k_rest <= _KK_SPLIT_WORK
    local = karmarkar_karp_lists(rc, ones, k_rest, None) if kk else None
    big = len(rest) * k_rest > _LPT_SPLIT_WORK
    if local is None or not fits(local):
        # LPT on cost looks past full bins for room, items x bins when the cap is tight; LPT on
        # tokens needs only the least-loaded bin (it has the most room), so large splits use it.
        local = lpt_lists(rt, rt if big else rc, ones, k_rest, cap, None)
    if not fits(local):
        if not repair or (big and not force):
            return None
        local = capped_balance_lists(rt, rc, ones, k_rest, cap, None)
        if not fits(local):
            return None
    return [[rest[i] for i in b] for b in local] + [[i] for i in over]


def micro_first(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None, *, repair: bool = False,
) -> list[tuple[str, np.ndarray]]:
    """``dp*m`` micro-batches balanced on cost under the cap (capped LPT; with ``repair`` the
    capped balancer when LPT breaks the cap, slow when the cap is tight), then dealt to ranks
    ``m`` each by equal-count Karmarkar-Karp on their costs: the shape of ``plan_global``."""
    k = inst.dp_size * m
    bins = split_into(inst.tokens.tolist(), inst.costs, k, inst.cap, balanced=False, repair=repair,
                      force=repair)
    if bins is None:
        return []
    probe = from_bins(bins, [list(range(k))], inst.n)
    # Their costs, without the overhead every micro-batch pays alike (sums stay below 2**62).
    times = [sum(inst.costs[i] for i in b) for b in bins]
    out = []
    if inst.dp_size == 1:
        return [("micro_first", probe)]
    kk = karmarkar_karp_lists(times, [1] * k, inst.dp_size, m)
    if all(len(r) == m for r in kk):
        out.append(("micro_first", from_bins(bins, kk, inst.n)))
    return out


def ranks_by_step_time(inst: StepInstance, m: int) -> list[list[int]]:
    """Sequences, costliest first, each to the rank with the lowest estimated time
    ``vpp*S + (pp-1)*max(heaviest sequence + o, ceil(S/m))`` (S the rank's cost plus ``m``
    overheads): LPT on the step model's rank time, so a rank holding a long sequence, whose
    bubble is already large, gets fewer others. A heap: O(n log dp)."""
    o, vpp, beta = inst.overhead, inst.vpp, inst.pp - 1
    sums = [m * o] * inst.dp_size
    heaviest = [0] * inst.dp_size
    ranks: list[list[int]] = [[] for _ in range(inst.dp_size)]

    def estimate(r: int) -> int:
        return vpp * sums[r] + beta * max(heaviest[r] + o, -(-sums[r] // m))

    heap = [(estimate(r), r) for r in range(inst.dp_size)]  # one live entry per rank
    heapq.heapify(heap)
    costs = inst.costs
    tokens = inst.tokens.tolist()
    # Token room per rank: m micro-batches of at most cap tokens (over-cap sequences aside).
    room = [m * inst.cap if inst.cap is not None else sum(tokens)] * inst.dp_size
    short = inst.dp_size * m  # sequences still owed to ranks holding fewer than m
    order = order_desc(costs)
    # Fewest tokens among the sequences from each position on: a rank with less room is full.
    least = np.minimum.accumulate(np.asarray([tokens[i] for i in order])[::-1])[::-1].tolist()
    owed: list[tuple[int, int]] | None = None  # the last phase: only short ranks take sequences
    for pos, i in enumerate(order):
        if owed is None and inst.n - pos <= short:
            # Only enough sequences left to give every rank m: from here on the short ranks
            # take them, the lowest estimate first.
            owed = [(estimate(q), q) for q in range(inst.dp_size) if len(ranks[q]) < m]
            heapq.heapify(owed)
        if owed is not None:
            r = heapq.heappop(owed)[1]
        else:
            # The lowest estimate whose token total stays within m caps.
            skipped = []
            while heap and room[heap[0][1]] < tokens[i]:
                entry = heapq.heappop(heap)
                if room[entry[1]] >= least[pos]:  # else full for good: left out of the heap
                    skipped.append(entry)
            if heap:
                r = heapq.heappop(heap)[1]
            else:  # nothing has room: the roomiest rank (the split will then fail the cap)
                r = max(range(inst.dp_size), key=lambda q: (room[q], -q))
                skipped = [entry for entry in skipped if entry[1] != r]
            for entry in skipped:
                heapq.heappush(heap, entry)
        if len(ranks[r]) < m:
            short -= 1
        ranks[r].append(i)
        room[r] -= tokens[i]
        total = sums[r] = sums[r] + costs[i]
        if costs[i] > heaviest[r]:
            heaviest[r] = costs[i]
        entry = (vpp * total + beta * max(heaviest[r] + o, -(-total // m)), r)
        if owed is None:
            heapq.heappush(heap, entry)
        elif len(ranks[r]) < m:
            heapq.heappush(owed, entry)
    return ranks


def split_ranks(
    inst: StepInstance, ranks: list[list[int]], m: int, *, balanced: bool = False
) -> np.ndarray | None:
    """Each rank's sequences into its ``m`` micro-batches by capped LPT, all ranks at once
    (one numpy round per position, costliest first); a rank LPT cannot fit under the cap goes
    to the capped balancer. None when a rank still has an empty or over-cap micro-batch."""
    dp, n = inst.dp_size, inst.n
    if any(len(members) < m for members in ranks):
        return None
    if dp < _VECTOR_SPLIT_RANKS:  # few long ranks: one LPT per rank is cheaper than numpy rounds
        mb_of = np.full(n, -1, dtype=np.int64)
        repaired = 0
        for r, members in enumerate(ranks):
            rt = [int(inst.tokens[i]) for i in members]
            rc = [inst.costs[i] for i in members]
            local = split_into(rt, rc, m, inst.cap, balanced=balanced, repair=False)
            if local is None:
                repaired += 1
                if repaired > _MAX_REPAIRED_RANKS:
                    return None
                local = split_into(rt, rc, m, inst.cap, balanced=False, repair=True)
                if local is None:
                    return None
            for j, b in enumerate(local):
                mb_of[[members[i] for i in b]] = r * m + j
        return mb_of if valid_start(mb_of, inst, dp * m) else None
    cost_arr = np.asarray(inst.costs, dtype=np.int64 if sum(inst.costs) < 2**62 else object)
    tok_arr = inst.tokens
    width = max(len(members) for members in ranks)
    idx = np.full((dp, width), -1, dtype=np.int64)
    for r, members in enumerate(ranks):
        mem = np.asarray(members, dtype=np.int64)
        order = np.lexsort((mem, -cost_arr[mem].astype(np.float64)))  # costliest first
        idx[r, : len(mem)] = mem[order]
    load = np.zeros((dp, m), dtype=cost_arr.dtype)
    tok = np.zeros((dp, m), dtype=np.int64)
    cap = np.iinfo(np.int64).max if inst.cap is None else inst.cap
    mb_of = np.full(n, -1, dtype=np.int64)
    failed = np.zeros(dp, dtype=bool)
    rows = np.arange(dp)
    big = sum(inst.costs) + 1
    for col in range(width):
        items = idx[:, col]
        active = items >= 0
        safe = np.where(active, items, 0)
        fits = tok + tok_arr[safe][:, None] <= cap
        fits[:, :] |= ~active[:, None]
        none_fit = ~fits.any(axis=1)
        # An over-cap sequence (oversize="alone") may open an empty micro-batch of its own.
        alone = none_fit & (tok == 0).any(axis=1) & (tok_arr[safe] > cap)
        score = np.where(fits | (alone[:, None] & (tok == 0)), load, big)
        b = np.argmin(score, axis=1)
        failed |= active & none_fit & ~alone
        put = active & ~failed
        load[rows[put], b[put]] += cost_arr[items[put]]
        tok[rows[put], b[put]] += tok_arr[items[put]]
        mb_of[items[put]] = rows[put] * m + b[put]
    if failed.sum() > _MAX_REPAIRED_RANKS:  # the rank split is far off: leave it to the others
        return None
    for r in np.flatnonzero(failed).tolist():
        members = ranks[r]
        local = split_into([int(tok_arr[i]) for i in members], [inst.costs[i] for i in members],
                           m, inst.cap, balanced=False, repair=True)
        if local is None:
            return None
        for j, bin_ in enumerate(local):
            mb_of[[members[i] for i in bin_]] = r * m + j
    return mb_of if valid_start(mb_of, inst, dp * m) else None


def rank_first(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None,
) -> list[tuple[str, np.ndarray]]:
    """Rank totals balanced first, then each rank split into ``m`` micro-batches under the cap.

    Ranks: Karmarkar-Karp on cost when its estimated time fits a fifth of the budget, else
    equal-count Karmarkar-Karp (verl's balance, much cheaper); this balances the totals that
    decide at ``pp = 1``. The split: with ``pp > 1`` and few ranks, Karmarkar-Karp within the
    rank when it respects the cap (it balances the micro-batches, which sets the bubble: verl's
    shape), else capped LPT. Under a cap, also :func:`rank_first_room` (with ``pp > 1`` only
    when the balance broke some rank's token room). Empty when no split can be made."""
    n, dp = inst.n, inst.dp_size
    ones = [1] * n
    if _KK_SECONDS_PER_SEQUENCE_RANK * n * dp <= 0.2 * seconds:
        ranks = karmarkar_karp_lists(inst.costs, ones, dp, None)
    else:
        # Equal-count Karmarkar-Karp merges dp-sized blocks, O(n log dp) instead of O(n dp);
        # zero-cost placeholders (dropped after) make the count divide.
        pad = -n % dp
        padded = karmarkar_karp_lists(inst.costs + [0] * pad, ones + [1] * pad, dp, (n + pad) // dp)
        ranks = [[i for i in r if i < n] for r in padded]
    mb_of = split_ranks(inst, ranks, m, balanced=inst.pp > 1)
    out = [] if mb_of is None else [("rank_first", mb_of)]
    if inst.cap is not None and (inst.pp == 1 or mb_of is None):
        out += rank_first_room(inst, m, deadline)
    return out


def rank_first_room(
    inst: StepInstance, m: int, deadline: float | None = None
) -> list[tuple[str, np.ndarray]]:
    """Under a cap: LPT on cost over the ranks, each rank taking tokens only up to a room
    (``m`` caps, then a little less, :data:`_ROOM_FILLS`, until every rank splits into ``m``
    micro-batches under the cap), then the split of :func:`rank_first`.

    Why: Karmarkar-Karp balances cost and ignores tokens, and its equal-count form also gives
    every rank as many sequences. When the micro-batches must be nearly full, a rank with one
    sequence longer than half the cap needs far more tokens of the others to reach the mean
    cost than one with two, which equal counts cannot give (measured: 3.3% over the mean on
    262,144 reasoning lengths, dp = 1,024, m = 5 at 95% fill, against 0.16% here). A rank
    filled to its last token rarely splits into ``m`` micro-batches; a little less room does."""
    if inst.cap is None:
        return []
    tokens, ones = inst.tokens.tolist(), [1] * inst.n
    began = time.perf_counter()
    for num, den in _ROOM_FILLS:
        ranks = lpt_lists(tokens, inst.costs, ones, inst.dp_size, m * inst.cap * num // den, None)
        mb_of = split_ranks(inst, ranks, m, balanced=inst.pp > 1)
        if mb_of is not None:
            return [("rank_first_room", mb_of)]
        now = time.perf_counter()
        if deadline is not None and now + (now - began) > deadline:  # the next try would not fit
            break
        began = now
    return []


#: The rooms :func:`rank_first_room` tries, as shares of a rank's ``m`` caps: the first that
#: splits wins (each try is one LPT and one split, ~0.6 s at n = 262,144, dp = 1,024).
_ROOM_FILLS = ((1, 1), (199, 200), (49, 50), (19, 20), (7, 8))


def rank_first_bubble(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None,
) -> list[tuple[str, np.ndarray]]:
    """With ``pp > 1``: ranks by LPT on the estimated rank time (:func:`ranks_by_step_time`),
    then the same split as :func:`rank_first`. Empty with ``pp = 1`` or when the split fails."""
    if inst.pp == 1:
        return []
    mb_of = split_ranks(inst, ranks_by_step_time(inst, m), m, balanced=True)
    return [] if mb_of is None else [("rank_first_bubble", mb_of)]


def _pack_ranks(
    inst: StepInstance, m: int, z: int, order: list[int], least: list[int]
) -> list[list[int]] | None:
    """Sequences (costliest first) into ranks by first fit, each rank's cost capped so that
    its time stays within ``z`` (x vpp) given its costliest sequence ``h``:
    ``min((z - (pp-1)(h + o))/vpp, z*m/(vpp*m + pp-1)) - m*o``, and its tokens within 7/8 of
    ``m`` caps; then every rank short of ``m`` sequences takes the cheapest from the fullest ranks.
    None when the sequences do not fit."""
    o, beta, vpp, dp = inst.overhead, inst.pp - 1, inst.vpp, inst.dp_size
    costs, tokens = inst.costs, inst.tokens.tolist()
    # Token room: m caps less a slack, so that the split under the cap stays easy.
    token_room = m * inst.cap * _PACK_TOKEN_SLACK // 8 if inst.cap is not None else sum(tokens)
    members: list[list[int]] = []
    left: list[int] = []  # cost room per open rank
    room: list[int] = []  # token room per open rank
    first = 0  # ranks before it have no room for any sequence still to come
    for pos, i in enumerate(order):
        c, t = costs[i], tokens[i]
        while first < len(members) and (left[first] < least[pos] or room[first] <= 0):
            first += 1
        for r in range(first, len(members)):
            if left[r] >= c and room[r] >= t:
                members[r].append(i)
                left[r] -= c
                room[r] -= t
                break
        else:
            if len(members) == dp:
                return None
            cap_r = min((z - beta * (c + o)) // vpp, (z * m) // (vpp * m + beta)) - m * o
            if cap_r < c:
                return None
            members.append([i])
            left.append(cap_r - c)
            room.append(token_room - t)
    members += [[] for _ in range(dp - len(members))]
    for r in range(dp):  # every rank needs m sequences: the cheapest of the fullest ranks
        while len(members[r]) < m:
            donor = max(range(dp), key=lambda q: (len(members[q]), -q))
            if len(members[donor]) <= m:
                return None
            members[r].append(members[donor].pop())
    return members


def rank_first_packed(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None,
) -> list[tuple[str, np.ndarray]]:
    """With ``pp > 1``: the ranks packed for a target step time, found by bisection (the
    smallest target whose packing and split succeed). Where :func:`ranks_by_step_time` deals
    the longest sequences one per rank (every rank then pays a long bubble), this packs them
    together on few ranks that take little else, the way the rank-maxima bound of
    :mod:`~seqpart.solver.step.model` says the best case does: far better on long-tail batches.
    Skipped when its estimated time does not fit a fifth of the budget."""
    if inst.pp == 1 or _PACK_SECONDS_PER_SEQUENCE * inst.n * _PACK_STEPS > 0.2 * seconds:
        return []
    order = order_desc(inst.costs)
    least = np.minimum.accumulate(np.asarray([inst.costs[i] for i in order])[::-1])[::-1].tolist()
    lo = max(bound, 1)  # the count's lower bound: no target below it can be met
    hi = 2 * lo
    packed = None
    # Bisection on the packing alone (cheap); the split into micro-batches runs once at the end.
    for _ in range(_PACK_STEPS):
        if lo >= hi or (packed is not None and deadline is not None and time.perf_counter() > deadline):
            break
        mid = (lo + hi) // 2
        ranks = _pack_ranks(inst, m, mid, order, least)
        if ranks is None:
            lo = mid + 1
        else:
            hi, packed = mid, ranks
    best = None
    for _ in range(_PACK_RETRIES):  # a split that breaks the cap: a looser target
        ranks = packed if packed is not None else _pack_ranks(inst, m, hi, order, least)
        best = None if ranks is None else split_ranks(inst, ranks, m, balanced=False)
        if best is not None:
            break
        hi, packed = hi + hi // 16, None
    return [] if best is None else [("rank_first_packed", best)]


#: The packing's bisection steps, the looser targets tried when the split breaks the cap, and
#: the measured cost per sequence per step (first fit, loaded 2-core machine).
_PACK_STEPS = 12
_PACK_RETRIES = 2
#: Eighths of a rank's m caps of tokens the packing fills.
_PACK_TOKEN_SLACK = 7
_PACK_SECONDS_PER_SEQUENCE = 4e-6

#: The constructions tried at each count, in this order (the cheapest good one first); each is
#: ``fn(inst, m, seconds, bound, deadline) -> [(method, mb_of)]``, ``bound`` the count's step
#: bound, ``deadline`` when a construction that refines (the packing) stops refining.
CONSTRUCTIONS = (rank_first_bubble, rank_first, rank_first_packed, micro_first)


def from_schedule(schedule: Any, inst: StepInstance) -> tuple[int, np.ndarray] | None:
    """(m, mb_of) of a schedule that passes the validator, else None."""
    try:
        m = len(schedule[0])
        if m == 0 or find_schedule_violations(
            schedule, inst.tokens, inst.dp_size, m, inst.cap, inst.multiple_of,
            oversize="alone" if inst.oversize else "error",
        ):
            return None
    except (TypeError, ValueError, IndexError, KeyError, AttributeError):
        return None  # not a schedule: skipped, as documented
    flat = [[int(i) for i in mb] for rank in schedule for mb in rank]
    return m, from_bins(flat, [list(range(len(flat)))], inst.n)
