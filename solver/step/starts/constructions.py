"""Starting schedules for step planning: seqpart's constructions at a given count per rank.
Each returns ``mb_of`` (the micro-batch of every sequence, micro-batch ``b`` on rank ``b // m``)
only when it is valid: non-empty micro-batches under the cap.
"""

from __future__ import annotations

import heapq
import time
from typing import Any, NamedTuple

import numpy as np

from ....heuristics.kernels import karmarkar_karp_lists, lpt_lists, order_desc
from ...tuning import BUBBLE_SECONDS_PER_SEQUENCE as _BUBBLE_SECONDS_PER_SEQUENCE
from ...tuning import MICRO_FIRST_SECONDS_PER_SEQUENCE as _MICRO_FIRST_SECONDS_PER_SEQUENCE
from ...tuning import RANK_PACK_SECONDS_PER_SEQUENCE as _PACK_SECONDS_PER_SEQUENCE
from ..model import StepInstance, find_schedule_violations
from .ranks import full_kk_fits, kk_ranks
from .split import from_bins, split_into, split_ranks


class Row(NamedTuple):
    """A schedule in plan_step's pool; searched best first (``objective``, then ``arrival``)."""

    objective: int  # vpp x the step time by the closed formula (the search's proxy)
    arrival: int  # its place in the pool: an earlier one wins a tie
    method: str  # how it was made: a construction, "start j", "trainer:name", "+local_search"
    m: int  # micro-batches per rank
    mb_of: np.ndarray  # the micro-batch of every sequence (micro-batch b on rank b // m)

    @property
    def assignment(self) -> tuple[int, bytes]:
        """Its count and assignment, as a key: rows that schedule alike share it."""
        return self.m, self.mb_of.tobytes()


def micro_first(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None, *, repair: bool = False,
) -> list[tuple[str, np.ndarray]]:
    """``dp*m`` micro-batches balanced on cost under the cap (capped LPT; with ``repair`` the
    capped balancer when LPT breaks the cap, slow when the cap is tight), then dealt to ranks
    ``m`` each by equal-count Karmarkar-Karp on their costs: the shape of ``plan_global``.
    Empty when its estimated time does not end before ``deadline`` (0.43 s at n = 262,144)."""
    if deadline is not None and time.perf_counter() + _MICRO_FIRST_SECONDS_PER_SEQUENCE * inst.n > deadline:
        return []
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


def rank_first(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None, *, shared_only: bool = False,
) -> list[tuple[str, np.ndarray]]:
    """Rank totals balanced first, then each rank split into ``m`` micro-batches under the cap.

    Ranks: Karmarkar-Karp on cost when its estimated time fits a fifth of the budget, else
    equal-count Karmarkar-Karp (verl's balance, much cheaper); this balances the totals that
    decide at ``pp = 1``. The split: with ``pp > 1`` and few ranks, Karmarkar-Karp within the
    rank when it respects the cap (it balances the micro-batches, which sets the bubble: verl's
    shape), else capped LPT. With ``pp > 1``, when the balance broke some rank's token room,
    also the room-keeping balance of :func:`rank_first_room` (at ``pp = 1`` a construction of
    its own, run first; not with ``shared_only``: then only the split of the ranks
    :func:`~seqpart.solver.step.starts.ranks.kk_ranks` shares between counts, which costs far
    less). Empty when no split can be made."""
    # Equal-count Karmarkar-Karp merges dp-sized blocks, O(n log dp) instead of O(n dp).
    ranks = kk_ranks(inst, equal=not full_kk_fits(inst, seconds))
    mb_of = split_ranks(inst, ranks, m, balanced=inst.pp > 1)
    out = [] if mb_of is None else [("rank_first", mb_of)]
    if inst.pp > 1 and mb_of is None and not shared_only:
        out += _room_balanced(inst, m, deadline)
    return out


def rank_first_room(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None,
) -> list[tuple[str, np.ndarray]]:
    """At ``pp = 1`` under a cap: LPT on cost over the ranks, each rank taking tokens only up
    to a room, then the split of :func:`rank_first` (see :func:`_room_balanced`). Empty with
    ``pp > 1`` (:func:`rank_first` runs it there when its own balance breaks a rank's room),
    without a cap, or when no room splits."""
    return _room_balanced(inst, m, deadline) if inst.pp == 1 else []


def _room_balanced(
    inst: StepInstance, m: int, deadline: float | None = None
) -> list[tuple[str, np.ndarray]]:
    """LPT on cost over the ranks, each rank taking tokens only up to a room: ``m`` caps less
    one median sequence, then a little less (:data:`_ROOM_FILLS`), until every rank splits
    into ``m`` micro-batches under the cap.

    Why: Karmarkar-Karp balances cost and ignores tokens, and its equal-count form also gives
    every rank as many sequences. When the micro-batches must be nearly full, a rank with one
    sequence longer than half the cap needs far more tokens of the others to reach the mean
    cost than one with two, which equal counts cannot give (measured: 3.3% over the mean on
    262,144 reasoning lengths, dp = 1,024, m = 5 at 95% fill, against 0.16% here). A rank
    filled to its last token rarely splits into ``m`` micro-batches; one median sequence of
    slack usually lets it (each try is one LPT and one split, ~0.5 s at n = 262,144)."""
    if inst.cap is None:
        return []
    tokens, ones = inst.tokens.tolist(), [1] * inst.n
    full = m * inst.cap
    slack = int(np.partition(inst.tokens, inst.n // 2)[inst.n // 2])
    smaller = [full * num // den for num, den in _ROOM_FILLS]
    rooms = [full - slack] + [room for room in smaller if room < full - slack]
    began = time.perf_counter()
    for room in rooms:
        ranks = lpt_lists(tokens, inst.costs, ones, inst.dp_size, room, None)
        mb_of = split_ranks(inst, ranks, m, balanced=inst.pp > 1)
        if mb_of is not None:
            return [("rank_first_room", mb_of)]
        now = time.perf_counter()
        if deadline is not None and now + (now - began) > deadline:  # the next try would not fit
            break
        began = now
    return []


#: The smaller rooms :func:`_room_balanced` tries after the first, as shares of ``m`` caps.
_ROOM_FILLS = ((199, 200), (49, 50), (19, 20), (7, 8))


def rank_first_bubble(
    inst: StepInstance, m: int, seconds: float = 0.0, bound: int = 0,
    deadline: float | None = None,
) -> list[tuple[str, np.ndarray]]:
    """With ``pp > 1``: ranks by LPT on the estimated rank time (:func:`ranks_by_step_time`),
    then the same split as :func:`rank_first`. Empty with ``pp = 1``, when the split fails, or
    when its estimated time does not end before ``deadline`` (0.66-0.8 s at n = 262,144: the
    cheaper constructions after it then get that time)."""
    if inst.pp == 1 or (deadline is not None and time.perf_counter()
                        + _BUBBLE_SECONDS_PER_SEQUENCE * inst.n > deadline):
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


#: The packing's bisection steps and the looser targets tried when the split breaks the cap (the
#: measured cost per sequence per step is ``RANK_PACK_SECONDS_PER_SEQUENCE``, in the tuning table).
_PACK_STEPS = 12
_PACK_RETRIES = 2
#: Eighths of a rank's m caps of tokens the packing fills.
_PACK_TOKEN_SLACK = 7

#: The constructions tried at each count, in this order (the cheapest good one first); each is
#: ``fn(inst, m, seconds, bound, deadline) -> [(method, mb_of)]``, ``bound`` the count's step
#: bound, ``deadline`` when a construction that refines (the packing) stops refining.
CONSTRUCTIONS = (rank_first_bubble, rank_first_room, rank_first, rank_first_packed, micro_first)


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

