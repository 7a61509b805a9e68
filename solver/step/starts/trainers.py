"""The trainers' own schedules as starts for step planning, cheap enough to run at every size.

:mod:`seqpart.heuristics.trainer_baselines` re-implements each trainer's scheduler as the trainer
runs it; there, slime's and prime-rl's capped first-fit scans every open micro-batch with numpy
for every sequence and re-sums every micro-batch for every split, and verl's retry re-partitions
every rank for every count it tries. At n=65,536 that is seconds a trainer.

Here the same schedules are computed faster, with the same result (``tests/solver/step/test_step.py`` checks
them against the originals on every count they produce):

- first-fit by a max-tree over the open micro-batches' room (O(log k) per sequence), computed
  once for ``slime_rr`` and ``slime_kk``; the heaviest micro-batch to split from a heap;
- verl's sequences to ranks are computed once (:class:`VerlRetry` carries them from the first
  count to the retry, and a retry the budget cut resumes from it); a count below a rank's
  bin-packing lower bound is skipped (its Karmarkar-Karp split cannot fit then), and a count
  stops at the first rank that breaks the cap (the trainer splits every rank, then looks),
  the ranks likeliest to break tried first (the one that broke last, then the highest bound,
  then the most tokens): which count passes does not depend on that order, only the cost;
- prime-rl's swap refinement (shared with the baseline: ``refine_by_swaps`` scores only the
  pairs that can lower its key) runs under a work budget and resumes on the same path
  (:class:`PrimeRefinement`); cut short, the partly refined schedule is still a valid start.

:func:`run_trainer_starts` runs them all first, cheapest first, each set-up when its estimate
fits the budget (deterministic; the clock only a safety net), the open-ended parts (prime-rl's
refinement, verl's retry) within a share of it; :func:`finish_open_ended` resumes those with
what the search leaves. Their schedules are checked by :func:`as_start`.

Only the micro-batch *sets* matter for a start (the model's rank time ignores their order), so
the trainers' orderings within a rank are not reproduced.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ....heuristics.bounds import min_bins_lower_bound
from ....heuristics.kernels import karmarkar_karp_lists, order_desc
from ....heuristics.trainer_baselines import megatron_schedule, refine_by_swaps
from ..model import StepInstance
from ..search import CANDIDATES_PER_SECOND
from .ranks import kk_ranks

Schedule = list[list[list[int]]]
#: ``hopeless(m, onwards)``: no valid schedule with count m (or any count from m on) can beat
#: the incumbent.
Hopeless = Callable[[int, bool], bool]


def first_fit(tokens: list[int], cap: int | None, order: list[int]) -> list[list[int]]:
    """First-fit in ``order``: each sequence to the first micro-batch with room, else a new
    one (a sequence over the cap alone: its room goes negative). A max-tree over the rooms
    finds the first with room in O(log k), k the micro-batches: first-fit opens fewer than
    ``2 * tokens / cap + 1`` (any two of them hold more than the cap together)."""
    if cap is None:
        return [list(order)]
    need = 2 * (sum(tokens[i] for i in order) // cap) + 2
    size = 1
    while size < need:
        size *= 2
    tree = [-1] * (2 * size)  # leaves: room of micro-batch b (-1: not open)
    bins: list[list[int]] = []
    for i in order:
        t = tokens[i]
        if tree[1] >= t:
            node = 1
            while node < size:  # the leftmost leaf with room >= t
                node += node
                if tree[node] < t:
                    node += 1
            b = node - size
        else:
            b = len(bins)
            bins.append([])
            node = b + size
            tree[node] = cap
        bins[b].append(i)
        tree[node] -= t
        node >>= 1
        while node:  # up to the first ancestor whose max does not change (nor then any above)
            left, right = tree[2 * node], tree[2 * node + 1]
            top = left if left > right else right
            if tree[node] == top:
                break
            tree[node] = top
            node >>= 1
    return bins


def split_heaviest(bins: list[list[int]], target: int, weight: list[int]) -> None:
    """Grow ``bins`` to ``target``: split the heaviest micro-batch of several sequences (ties:
    the later one) in two by LPT on ``weight`` (ties by position); the first half keeps its
    place, the second goes last. Stops when every micro-batch is one sequence."""
    heap = [(-sum(weight[i] for i in b), -at) for at, b in enumerate(bins) if len(b) > 1]
    heapq.heapify(heap)
    while len(bins) < target and heap:
        _, neg_at = heapq.heappop(heap)
        at = -neg_at
        halves: tuple[list[int], list[int]] = ([], [])
        sums = [0, 0]
        for i in sorted(bins[at], key=lambda i: -weight[i]):
            h = 0 if sums[0] <= sums[1] else 1
            halves[h].append(i)
            sums[h] += weight[i]
        bins[at] = halves[0]
        bins.append(halves[1])
        for pos, half, total in ((at, halves[0], sums[0]), (len(bins) - 1, halves[1], sums[1])):
            if len(half) > 1:
                heapq.heappush(heap, (-total, -pos))


def _round_up(k: int, multiple: int) -> int:
    return max(-(-k // multiple) * multiple, multiple)


def _equal_count(weights: list[int], k: int, pad: int) -> list[list[int]]:
    """Equal-count Karmarkar-Karp of ``weights`` into k groups, padded with ``pad`` weights to a
    multiple of k; the padding is dropped from the groups."""
    n = len(weights)
    padded = list(weights) + [pad] * (-n % k)
    groups = karmarkar_karp_lists(padded, [1] * len(padded), k, len(padded) // k)
    return [[b for b in g if b < n] for g in groups]


def _deal(bins: list[list[int]], by_rank: list[list[int]]) -> Schedule:
    return [[bins[b] for b in rank] for rank in by_rank]


def slime(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int
) -> list[tuple[str, Schedule]]:
    """slime's first-fit in arrival order, split to a multiple of ``dp * multiple_of``, dealt by
    strided round robin (``slime_rr``) and by equal-count Karmarkar-Karp on cost
    (``slime_kk``)."""
    bins = first_fit(tokens, cap, list(range(len(tokens))))
    split_heaviest(bins, _round_up(len(bins), dp * multiple_of), tokens)
    rr = [list(range(r, len(bins), dp)) for r in range(dp)]
    kk = _equal_count([sum(costs[i] for i in b) for b in bins], dp, 0)
    return [("slime_rr", _deal(bins, rr)), ("slime_kk", _deal(bins, kk))]


def prime_rl(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int,
    hopeless: Hopeless,
) -> PrimeRefinement | None:
    """prime-rl's first-fit decreasing, split by cost to a multiple of ``dp * multiple_of``,
    equal-count Karmarkar-Karp: its refinement's starting point. None when it cannot be valid
    (too few sequences to split to the multiple: prime-rl pads) or cannot beat the incumbent at
    its count."""
    bins = first_fit(tokens, cap, order_desc(tokens))
    split_heaviest(bins, _round_up(len(bins), dp * multiple_of), costs)
    k = len(bins)
    if k % (dp * multiple_of) or hopeless(k // dp, False):
        return None
    weights = [sum(costs[i] for i in b) for b in bins]
    return PrimeRefinement(bins, weights, karmarkar_karp_lists(weights, [1] * k, dp, k // dp))


@dataclass
class PrimeRefinement:
    """prime-rl's swap refinement where it stands: resumed, it goes on along the same path (each
    swap depends on the groups only), so a refinement cut by the budget ends where prime-rl's
    own does when given more."""

    bins: list[list[int]]
    weights: list[int]
    groups: list[list[int]]

    def refine(self, work_budget: int, deadline: float | None) -> tuple[Schedule, int, str]:
        self.groups, work, how = refine_by_swaps(self.weights, self.groups, work_budget, deadline)
        return _deal(self.bins, [sorted(g) for g in self.groups]), work, how


@dataclass
class VerlRetry:
    """verl's retry where it stands: the sequences of each rank (computed once, by the cheap
    phase), the count to try next, the ranks in the order to split them (the one that broke the
    cap last first, then the most tokens first: the likeliest to break, so a count that fails
    costs one split, not ``dp``), and the splits at ``k`` done so far (so a retry cut by the
    work budget resumes where it stopped)."""

    ranks: list[list[int]]
    k: int
    order: list[int]
    rows: dict[int, list[list[int]]] = field(default_factory=dict)
    bumped: bool = False  # k raised to the ranks' bin-packing bound


def _verl_ranks(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int,
    ranks: list[list[int]] | None = None,
) -> tuple[list[list[int]], int]:
    """verl's sequences to ranks (equal-count Karmarkar-Karp on cost, unless given: the same
    ranks rank_first splits, :func:`~seqpart.solver.step.starts.ranks.kk_ranks`) and its first
    count, the all-reduced MAX of ``min(sequences, ceil(tokens / cap))`` rounded up to
    ``multiple_of``."""
    if ranks is None:
        ranks = _equal_count(costs, dp, 0)
    k0 = max(min(len(r), 1 if cap is None else -(-sum(tokens[i] for i in r) // cap)) for r in ranks)
    return ranks, _round_up(k0, multiple_of)


def _verl_split(members: list[int], costs: list[int], k: int) -> list[list[int]]:
    bins = karmarkar_karp_lists([costs[i] for i in members], [1] * len(members), k, None)
    return [[members[j] for j in b] for b in bins if b]


def _breaks_cap(rank_bins: list[list[int]], tokens: list[int], cap: int | None) -> bool:
    return cap is not None and any(len(b) > 1 and sum(tokens[i] for i in b) > cap for b in rank_bins)


def _verl_count(
    state: VerlRetry, tokens: list[int], costs: list[int], cap: int | None, work_budget: int,
    deadline: float | None,
) -> tuple[Schedule | None, int, str]:
    """Split the ranks at ``state.k`` in ``state.order`` until one breaks the cap. Returns
    (schedule when none broke, work, "done" / "broke" / "work budget" / "clock"); a cut leaves
    the splits made so far in ``state.rows``. Which count passes does not depend on the order
    (every rank must), only how many splits a failing count costs."""
    work = 0
    for r in state.order:
        if r in state.rows:
            continue
        need = _kk_work(len(state.ranks[r]), state.k)
        if work + need > work_budget:
            return None, work, "work budget"
        if _late(deadline, _CLOCK_MARGIN * need):
            return None, work, "clock"
        work += need
        state.rows[r] = _verl_split(state.ranks[r], costs, state.k)
        if _breaks_cap(state.rows[r], tokens, cap):
            state.order.remove(r)
            state.order.insert(0, r)
            state.rows = {}
            return None, work, "broke"
    return [state.rows[r] for r in range(len(state.ranks))], work, "done"


def verl(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int,
    ranks: list[list[int]] | None = None,
) -> tuple[list[tuple[str, Schedule]], VerlRetry | None, int]:
    """verl's schedule: each rank split by Karmarkar-Karp on cost into the first count. Returns
    ([("verl", s), ("verl_retry", s)], None, work) when no micro-batch of several sequences
    breaks the cap (the retry then ends there too), else ([], the retry's state, work): the
    retry must go on (verl's own schedule breaks the cap: no start). The count stops at the
    first rank that breaks the cap."""
    ranks, k0 = _verl_ranks(tokens, costs, dp, cap, multiple_of, ranks)
    heavy = sorted(range(dp), key=lambda r: (-sum(tokens[i] for i in ranks[r]), r))
    state = VerlRetry(ranks, k0, heavy)
    first, work, how = _verl_count(state, tokens, costs, cap, 10**18, None)
    if first is not None:
        return [("verl", first), ("verl_retry", first)], None, work
    state.k += multiple_of
    return [], state, work


def verl_retry(
    tokens: list[int], costs: list[int], cap: int | None, multiple_of: int, state: VerlRetry,
    work_budget: int, hopeless: Hopeless, deadline: float | None,
) -> tuple[Schedule | None, int, str]:
    """verl's retry past a first count that broke the cap, from ``state`` (left by
    :func:`verl`, or by a retry the budget cut): the next count (``+ multiple_of``) while a
    micro-batch of several sequences of any rank breaks the cap, up to the smallest rank's
    sequence count. Counts below a rank's bin-packing bound are skipped (no split of that rank
    into fewer respects the cap, Karmarkar-Karp's neither), a count stops at the first rank
    that breaks the cap, and the retry stops once no count from there on can beat the
    incumbent (``hopeless``). Returns (schedule or None, work, how it ended)."""
    ranks = state.ranks
    if not state.bumped:
        state.bumped = True
        need = []
        for members in ranks:
            over = [tokens[i] for i in members if cap is not None and tokens[i] > cap]
            rest = [tokens[i] for i in members if cap is None or tokens[i] <= cap]
            need.append(len(over) + (min_bins_lower_bound(rest, cap) if rest and cap else 0))
        if max(need) > state.k:
            state.k += -(-(max(need) - state.k) // multiple_of) * multiple_of
        # The ranks whose bound is closest to the count are the likeliest to break it: first.
        at = {r: j for j, r in enumerate(state.order)}
        state.order.sort(key=lambda r: (-need[r], at[r]))
    ceiling = min(len(r) for r in ranks)
    work = 0
    while True:
        if state.k > ceiling:
            return None, work, "invalid"  # the retry ends with a schedule over the cap
        if hopeless(state.k, True):
            return None, work, "hopeless"
        sched, more, how = _verl_count(state, tokens, costs, cap, work_budget - work, deadline)
        work += more
        if how != "broke":
            return sched, work, how
        state.k += multiple_of


#: Cost model in the step search's work units (candidate evaluations, ~67 ns each at
#: ``CANDIDATES_PER_SECOND``), measured on the loaded 2-core machine: first-fit per sequence,
#: Karmarkar-Karp per item per doubling of its item and bin counts (its heap and its merges),
#: per form, and pairs scored by prime-rl's refinement per unit (numpy, ~20-50 ns a pair).
#: First-fit (its max-tree stops at the first unchanged ancestor) and the split: 3.4 us a
#: sequence at n=65,536 under a load of 2.4, ~8 us at 4.5.
FIT_WORK = 60
#: The equal-count form (ranks of sequences, of micro-batches): 0.3-0.7 us per item per
#: doubling at n <= 4096 under load 2.5; 0.045 s at n=65,536, dp=1024 and 0.41 s at
#: n=262,144, dp=2048 under load 1.6 (0.1 and 0.2 us).
KK_EQUAL_WORK = 3
#: verl's per-rank split (free counts, 2**k-wide merges), plus a fixed cost per call. Measured
#: on an idle machine: 1.0-4.0 units per item per doubling from 128 to 4096 items a rank into
#: 2-64 bins, ~300-450 units a call at 8 items (4-7 units under a load of 2). So the estimate
#: is 1.0-4.0x the idle time, never below it. Charged at the loaded end (8 units a doubling),
#: verl's retry at n=262,144, dp=1,024 (1,024 splits of 256 items, 0.67 s) outgrew its share
#: of a 5 s budget and was cut.
KK_SPLIT_WORK = 4
KK_CALL_WORK = 500
REFINE_PAIRS = 2
#: The clock's view of a split: ``KK_SPLIT_WORK`` is about the idle cost, and one split of
#: 2048 items took up to 5.2x this estimate at load ~4.6; the safety net allows for that.
_CLOCK_MARGIN = 6


def _kk_work(items: int, bins: int, equal: bool = False) -> int:
    """Karmarkar-Karp's estimated work: a heap over the items, merges of ``bins``-wide states;
    the equal-count form merges ``items / bins`` blocks."""
    if equal:
        return KK_EQUAL_WORK * items * (items // max(bins, 1)).bit_length()
    return KK_CALL_WORK + KK_SPLIT_WORK * items * (items.bit_length() + bins.bit_length())


@dataclass
class OpenEnded:
    """The trainers' open-ended parts not run to their end yet (prime-rl's refinement, verl's
    retry), how each was last stopped ("work budget" or "clock"), and the trainers whose
    set-up the clock left out (``skipped``)."""

    prime: PrimeRefinement | None = None
    retry: VerlRetry | None = None
    stopped: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def not_run(self) -> list[str]:
        """The trainers' schedulers (``TRAINER_SCHEDULERS`` names) not run to their end."""
        return sorted({*self.skipped, *self.stopped})

    def notes(self) -> list[str]:
        out = []
        if "prime_rl" in self.stopped:
            out.append(f"trainer start prime_rl: its swap refinement was stopped by the "
                       f"{self.stopped['prime_rl']}; started from the partly refined schedule")
        if "verl_retry" in self.stopped and self.retry is not None:
            out.append(f"trainer start verl_retry: its retry was stopped by the "
                       f"{self.stopped['verl_retry']} (at count {self.retry.k})")
        return out


def run_trainer_starts(
    inst: StepInstance, work_budget: int | None, deadline: float | None, hopeless: Hopeless,
    take: Callable[[str, Schedule], None], open_share: int | None = None,
) -> tuple[list[str], int, OpenEnded]:
    """Every trainer's schedule, handed to ``take(name, schedule)`` (raw: the caller validates)
    as soon as it is made, so that ``hopeless`` sees it: Megatron-LM's (always), verl's first
    count, slime's two, prime-rl's set-up, then the open-ended parts (:func:`finish_open_ended`)
    with at most ``open_share`` of the work (None: all that is left of ``work_budget``; None:
    no limit). The set-ups are cheap (O(n log n)) and bounded: each runs unless the clock
    says it would end past ``deadline`` (their estimated work is charged, so with the clock
    dropped they always run and the plan stays the same on every machine); one whose count
    cannot beat what ``take`` was given (``hopeless``) is not built. Returns (notes naming the
    trainers not run, work, the open-ended parts left: resume them with
    :func:`finish_open_ended`)."""
    tokens, costs = inst.tokens.tolist(), inst.costs
    n, dp, cap, mo = inst.n, inst.dp_size, inst.cap, inst.multiple_of
    left = 10**18 if work_budget is None else work_budget
    take("trainer:megatron", megatron_schedule(tokens, dp, cap, mo))
    spent, state, skipped = n, OpenEnded(), []

    def fits(names: list[str], work: int) -> bool:
        late = _late(deadline, work)
        skipped.extend(names if late else [])
        return not late

    equal = _kk_work(n, dp, True)
    if fits(["verl", "verl_retry"], equal + dp * _kk_work(-(-n // dp), -(-_k_estimate(inst) // dp))):
        found, state.retry, work = verl(tokens, costs, dp, cap, mo, kk_ranks(inst, equal=True))
        spent += equal + work
        for name, sched in found:
            take(f"trainer:{name}", sched)
    fit = _fit_work(inst)
    if fits(["slime_rr", "slime_kk"], fit):
        for name, sched in slime(tokens, costs, dp, cap, mo):
            take(f"trainer:{name}", sched)
        spent += fit
    if fits(["prime_rl"], fit):
        state.prime = prime_rl(tokens, costs, dp, cap, mo, hopeless)
        spent += fit
    share = left - spent if open_share is None else min(left - spent, open_share)
    spent += finish_open_ended(inst, state, max(0, share), deadline, hopeless, take)
    state.skipped = skipped
    notes = [f"trainer starts not run (no time left on the clock): {', '.join(skipped)}"]
    return notes if skipped else [], spent, state


def finish_open_ended(
    inst: StepInstance, state: OpenEnded, work_budget: int, deadline: float | None,
    hopeless: Hopeless, take: Callable[[str, Schedule], None],
) -> int:
    """prime-rl's refinement, then verl's retry, from where ``state`` left them, within
    ``work_budget``; each schedule (a cut refinement's too: still a valid start) goes to
    ``take``. Each is dropped once it cannot beat the incumbent (``hopeless``). Returns the
    work."""
    spent = 0
    if state.prime is not None:
        m = len(state.prime.groups[0])
        if hopeless(m, False):
            state.prime, _ = None, state.stopped.pop("prime_rl", None)
        else:
            sched, work, how = state.prime.refine(work_budget * REFINE_PAIRS, deadline)
            spent += work // REFINE_PAIRS
            done = how == "done"
            take("trainer:prime_rl" + ("" if done else " (refinement cut short)"), sched)
            if done:
                state.prime, _ = None, state.stopped.pop("prime_rl", None)
            else:
                state.stopped["prime_rl"] = how
    if state.retry is not None:
        tokens, costs = inst.tokens.tolist(), inst.costs
        sched, work, how = verl_retry(tokens, costs, inst.cap, inst.multiple_of, state.retry,
                                      work_budget - spent, hopeless, deadline)
        spent += work
        if sched is not None:
            take("trainer:verl_retry", sched)
        if how in ("work budget", "clock"):
            state.stopped["verl_retry"] = how
        else:
            state.retry, _ = None, state.stopped.pop("verl_retry", None)
    return spent


def _late(deadline: float | None, work: int) -> bool:
    """The clock (a safety net) says ``work`` would end past ``deadline``."""
    return deadline is not None and time.perf_counter() + work / CANDIDATES_PER_SECOND > deadline


def _k_estimate(inst: StepInstance) -> int:
    return max(1, -(-int(inst.tokens.sum()) // inst.cap) if inst.cap is not None else 1)


def _fit_work(inst: StepInstance) -> int:
    return FIT_WORK * inst.n + _kk_work(_k_estimate(inst), inst.dp_size, True)


def as_start(sched: Schedule, inst: StepInstance) -> tuple[int, np.ndarray] | None:
    """(m, mb_of) of a trainer's schedule when it keeps the contract, else None: the rules of
    :func:`~seqpart.solver.step.model.find_schedule_violations` (``dp_size`` ranks of ``m``
    micro-batches, ``m`` a multiple of ``multiple_of``, none empty, every index once, none over
    the cap but an over-cap sequence alone), vectorised for the lists of ints the trainers here
    make (that validator walks every nested list: ~0.4 s a schedule at n=262,144). The plan
    itself is still checked by the validator."""
    n = inst.n
    if len(sched) != inst.dp_size or not sched[0] or len(sched[0]) % inst.multiple_of:
        return None
    m = len(sched[0])
    if any(len(rank) != m for rank in sched):
        return None
    flat = [mb for rank in sched for mb in rank]
    sizes = np.fromiter((len(mb) for mb in flat), dtype=np.int64, count=len(flat))
    if sizes.min() == 0 or int(sizes.sum()) != n:
        return None
    idx = np.fromiter(itertools.chain.from_iterable(flat), dtype=np.int64, count=n)
    if idx.min() < 0 or idx.max() >= n:
        return None
    mb_of = np.full(n, -1, dtype=np.int64)
    mb_of[idx] = np.repeat(np.arange(len(flat), dtype=np.int64), sizes)
    if (mb_of < 0).any():  # an index twice, so another never
        return None
    if inst.cap is not None:
        loads = np.add.reduceat(np.asarray(inst.tokens, dtype=np.int64)[idx],
                                np.cumsum(sizes) - sizes)
        if ((loads > inst.cap) & (sizes > 1)).any():
            return None
    return m, mb_of


def trainer_starts(inst: StepInstance) -> list[tuple[str, Schedule]]:
    """Every trainer's schedule that can be valid, each run to the end (for tests and studies:
    the same schedules as ``seqpart.heuristics.trainer_baselines``, order within a rank aside)."""
    out: list[tuple[str, Schedule]] = []
    run_trainer_starts(inst, None, None, lambda m, onwards: False,
                       lambda name, sched: out.append((name, sched)))
    return [(name, sched) for name, sched in out if not name.endswith("cut short)")]
