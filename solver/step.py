"""Planning a whole training step across data-parallel ranks, in one process.

:func:`plan_global` assigns sequences to ranks and micro-batches together, so no rank is padded
out with micro-batches it does not need; :func:`order_for_pipeline` orders a rank's micro-batches
for pipeline parallelism. The collective forms live in :mod:`seqpart.solver.distributed`, which
only moves data between ranks and calls these.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.heuristics._common import order_desc
from seqpart.heuristics._inputs import as_lengths, as_positive_int
from seqpart.heuristics.capped_balance import capped_balance_lists
from seqpart.heuristics.karmarkar_karp import karmarkar_karp_lists
from seqpart.heuristics.lpt import lpt_lists

from .options import SolverOptions
from .partition import partition
from .plan import InfeasibleError, InvalidPlanError, Plan, find_violations
from .problem import Cost
from .step_cpsat import solve_step_exactly
from .step_model import (
    StepInstance,
    StepPlan,
    check_schedule,
    find_schedule_violations,
    make_instance,
    rank_times,
    scaled_bounds,
    scaled_rank_time,
    step_lower_bound,
    step_time,
)
from .step_model import exact as exact_time
from .step_search import CANDIDATES_PER_SECOND, improve_schedule, schedule_objective

__all__ = [
    "StepPlan",
    "check_schedule",
    "find_schedule_violations",
    "order_for_pipeline",
    "plan_global",
    "plan_step",
    "rank_times",
    "step_lower_bound",
    "step_time",
]


def round_up(k: int, multiple_of: int) -> int:
    return -(-k // multiple_of) * multiple_of


def plan_global(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    multiple_of: int = 1,
    time_limit: float = 0.5,
    **partition_kwargs: Any,
) -> list[Plan]:
    """Plan a whole step: assign sequences to ``dp_size`` ranks and to micro-batches together.

    Every rank gets the same number ``m`` of micro-batches (the smallest multiple of
    ``multiple_of`` for which ``dp_size * m`` non-empty micro-batches under the cap exist), and:

    1. the ``dp_size * m`` micro-batches are made by ``partition(lengths, k=dp_size*m, cap)``,
       so the largest micro-batch load is minimal (proven when ``status == "optimal"``);
    2. they are dealt to ranks, exactly ``m`` each, by ``partition(loads, k=dp_size,
       equal_size=True)`` on their loads, which balances the per-rank totals in the chosen cost.

    Level 1 comes first: rank balance never costs a heavier micro-batch. Single process; see
    :func:`plan_global_across_ranks` for the collective form.

    Args:
        lengths: token count per sequence of the whole step (all ranks' samples).
        dp_size: number of data-parallel ranks.
        cap: max tokens per micro-batch; None for no cap (then ``m = multiple_of``).
        multiple_of: ``m`` is a multiple of this (virtual pipeline stages).
        time_limit: seconds for the whole call, shared by the count search, the split and the
            rank assignment (each step gets what the earlier ones left, at least 10 ms).
        **partition_kwargs: passed to the micro-batch ``partition`` (cost, oversize, groups,
            equal_size, engine, options).

    Returns:
        ``dp_size`` plans; plan r is rank r's, its bins hold indices into ``lengths``. Per-rank
        fields: ``bins``/``loads``/``tokens``/``max_load`` are that rank's own micro-batches;
        ``k`` is ``m``; ``lower_bound`` is the bound on the largest micro-batch load of the
        *whole step* and ``status`` is "optimal" when the step's largest load meets it, so a
        lightly loaded rank can show ``max_load < lower_bound`` (a negative ``gap``);
        ``k_status`` is "optimal" when ``m`` is the proven smallest (given ``multiple_of``),
        else "upper_bound", with ``k_lower_bound`` the proven floor on ``m``; ``notes`` give
        the step's largest load and the spread of rank totals.

    Raises:
        InfeasibleError: fewer sequences than ``dp_size * m`` (some micro-batch would be
            empty), or no split found / possible under the cap.
        ValueError / TypeError: bad arguments, naming the fix.
    """
    t0 = time.perf_counter()
    deadline = t0 + _positive_seconds(time_limit)
    tokens = as_lengths(lengths)
    n = len(tokens)
    dp_size = as_positive_int(dp_size, "dp_size")
    cap = as_positive_int(cap, "cap", allow_none=True)
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    if "k" in partition_kwargs:
        raise TypeError("plan_global chooses the micro-batch count itself: drop the k= argument")
    if partition_kwargs.get("equal_size"):
        raise ValueError(
            "plan_global does not support equal_size=True (sample counts per micro-batch): "
            "use partition per rank for that"
        )
    if n < dp_size * multiple_of:
        raise InfeasibleError(
            f"{n} sequences cannot fill {dp_size} ranks x {multiple_of} non-empty micro-batches: "
            f"need at least {dp_size * multiple_of} sequences, or fewer ranks or a smaller "
            "multiple_of",
            proven=True,
        )

    def budget(share: float) -> float:
        return max(0.01, (deadline - time.perf_counter()) * share)

    # Smallest total count: the bound gives the floor on m, the search's plan the ceiling.
    search = partition(tokens, None, cap, time_limit=budget(0.4), **partition_kwargs)
    k_floor = search.k_lower_bound or search.k
    m_floor = round_up(-(-k_floor // dp_size), multiple_of)
    m_ceiling = round_up(-(-search.k // dp_size), multiple_of)
    if dp_size * m_floor > n:
        raise InfeasibleError(
            f"the cap needs at least {k_floor} micro-batches, so {dp_size} ranks need "
            f"{m_floor} each ({dp_size * m_floor} in all), but there are only {n} sequences: "
            "raise the cap, use fewer ranks, or add samples",
            proven=True,
        )
    step: Plan | None = None
    m = m_floor
    last: InfeasibleError | None = None
    while m <= m_ceiling and dp_size * m <= n:
        k = dp_size * m
        if search.k == k:
            step = search
            break
        try:
            step = partition(tokens, k, cap, time_limit=budget(0.6), **partition_kwargs)
            break
        except InfeasibleError as err:
            last = err
            m += multiple_of
    if step is None:
        if last is not None:
            raise last
        raise InfeasibleError(
            f"{dp_size} ranks x {m} micro-batches need {dp_size * m} sequences, only {n} given: "
            "raise the cap, use fewer ranks, or add samples",
            proven=True,
        )

    # Deal the micro-batches to ranks, m each, balancing rank totals (equal-size partition).
    if dp_size == 1:
        by_rank = [list(range(len(step.bins)))]
        assign_method = "single rank"
    else:
        assignment = partition(
            step.loads, dp_size, None, time_limit=budget(1.0), equal_size=True,
            engine=partition_kwargs.get("engine", "auto"),
            options=partition_kwargs.get("options"),
        )
        by_rank, assign_method = assignment.bins, assignment.method

    costs = step.cost.of(tokens)
    all_bins = [step.bins[b] for ranks in by_rank for b in ranks]
    found = find_violations(
        all_bins, tokens, dp_size * m, cap, oversize=step.oversize,
        groups=partition_kwargs.get("groups") or (),
    )
    if not found.ok or any(len(r) != m for r in by_rank):
        raise RuntimeError(f"seqpart produced an invalid global plan (please report): {found}")

    totals = [int(sum(step.loads[b] for b in ranks)) for ranks in by_rank]
    status = "optimal" if step.max_load <= step.lower_bound else "feasible"
    seconds = time.perf_counter() - t0
    plans = []
    for r, ranks in enumerate(by_rank):
        bins = sorted((step.bins[b] for b in ranks), key=lambda b: b[0])
        loads = [int(costs[b].sum()) for b in bins]
        mine = {i for b in bins for i in b}
        plans.append(
            Plan(
                bins=bins,
                loads=loads,
                tokens=[int(tokens[b].sum()) for b in bins],
                max_load=max(loads),
                lower_bound=step.lower_bound,
                status=status,
                method=f"plan_global[{step.method}; ranks: {assign_method}]",
                seconds=seconds,
                k=m,
                cap=cap,
                cost=step.cost,
                k_status="optimal" if m == m_floor else "upper_bound",
                k_lower_bound=m_floor,
                oversize=[i for i in step.oversize if i in mine],
                notes=[
                    *step.notes,
                    f"rank {r} of {dp_size}: total load {totals[r]}; step: largest micro-batch "
                    f"load {step.max_load} (bound {step.lower_bound}), rank totals "
                    f"{min(totals)}..{max(totals)}",
                ],
            )
        )
    return plans


def _positive_seconds(time_limit: Any) -> float:
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not (
        time_limit > 0
    ):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    return float(time_limit)


def order_for_pipeline(plan_or_loads: Plan | Sequence[int]) -> list[int]:
    """An execution order of micro-batches for pipeline parallelism: lightest at both ends,
    heaviest in the middle.

    Why: during pipeline warm-up and cool-down only some stages are busy, so a heavy micro-batch
    there stretches the exposed bubble; in the steady middle its time overlaps other stages'.

    Returns positions into ``plan.bins`` (or ``loads``): run ``plan.bins[order[0]]`` first. Ties
    keep the lower position first, so the order is deterministic on every rank.
    """
    loads = list(plan_or_loads.loads if isinstance(plan_or_loads, Plan) else plan_or_loads)
    ascending = sorted(range(len(loads)), key=lambda b: (loads[b], b))
    # Alternate the ascending sequence between the front half and the back half (reversed),
    # so loads rise towards the middle from both ends.
    front = ascending[0::2]
    back = ascending[1::2]
    return front + back[::-1]


# ----------------------------------------------------------------------------- plan_step


#: Ranks scored per sequence by the greedy rank construction (the lowest estimates).
_GREEDY_RANKS = 1
#: The two constructions at one count, in candidate evaluations per sequence (measured 10-20 us
#: per sequence for both at n=4096, dp=64 under loads of 3-5).
_BUILD_WORK_PER_SEQUENCE = 250
#: Share of the work budget spent on starts at several counts before the first search.
_BUILD_SHARE = 0.4
#: From this many ranks on, the ranks are split into micro-batches together (one numpy round per
#: position) rather than by one LPT per rank.
_VECTOR_SPLIT_RANKS = 32
#: Karmarkar-Karp over ranks, measured ~80 ms at n=4096, dp=16 on the loaded 2-core machine.
_KK_SECONDS_PER_SEQUENCE_RANK = 1.5e-6
#: Ranks whose LPT split breaks the cap are re-split by the capped balancer (slow) up to this
#: many; beyond, the construction gives up at this count.
_MAX_REPAIRED_RANKS = 4


@dataclass
class _Best:
    objective: int | None = None  # vpp x step time
    m: int = 0
    mb_of: np.ndarray | None = None
    method: str = ""


def _valid_start(mb_of: np.ndarray, inst: StepInstance, k: int) -> bool:
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


def _from_bins(bins: Sequence[Sequence[int]], by_rank: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """mb_of from micro-batches (local lists) dealt to ranks (lists of micro-batch positions)."""
    mb_of = np.full(n, -1, dtype=np.int64)
    b = 0
    for rank in by_rank:
        for pos in rank:
            mb_of[list(bins[pos])] = b
            b += 1
    return mb_of


def _micro_first(inst: StepInstance, m: int, seconds: float = 0.0) -> list[tuple[str, np.ndarray]]:
    """``dp*m`` micro-batches balanced on cost under the cap (capped LPT, else the capped
    balancer), then dealt to ranks ``m`` each by equal-count Karmarkar-Karp on their times: the
    shape of ``plan_global``, cheap enough for every candidate ``m``."""
    k = inst.dp_size * m
    tokens = inst.tokens.tolist()
    ones = [1] * inst.n
    bins = lpt_lists(tokens, inst.costs, ones, k, inst.cap, None)
    probe = _from_bins(bins, [list(range(k))], inst.n)
    if not _valid_start(probe, inst, k):
        bins = capped_balance_lists(tokens, inst.costs, ones, k, inst.cap, None)
        probe = _from_bins(bins, [list(range(k))], inst.n)
        if not _valid_start(probe, inst, k):
            return []
    times = [inst.overhead + sum(inst.costs[i] for i in b) for b in bins]
    out = []
    if inst.dp_size == 1:
        return [("micro_first", probe)]
    kk = karmarkar_karp_lists(times, [1] * k, inst.dp_size, m)
    if all(len(r) == m for r in kk):
        out.append(("micro_first", _from_bins(bins, kk, inst.n)))
    return out


def _ranks_by_step_time(inst: StepInstance, m: int) -> list[list[int]]:
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
    full: list[int] = []  # ranks taken out of the heap for good
    for pos, i in enumerate(order):
        if inst.n - pos <= short:
            # Only enough sequences left to give every rank m: the short ranks take them.
            r = min((q for q in range(inst.dp_size) if len(ranks[q]) < m), key=lambda q: (estimate(q), q))
            heap = [(v, q) for v, q in heap if q != r]
            heapq.heapify(heap)
        else:
            # The lowest estimate whose token total stays within m caps.
            skipped = []
            while heap and room[heap[0][1]] < tokens[i]:
                entry = heapq.heappop(heap)
                (full if room[entry[1]] < least[pos] else skipped).append(entry)
            if heap:
                r = heapq.heappop(heap)[1]
            else:  # nothing has room: the roomiest rank (the split will then fail the cap)
                r = max(range(inst.dp_size), key=lambda q: (room[q], -q))
                skipped = [entry for entry in skipped + full if entry[1] != r]
                full = [entry for entry in full if entry[1] != r and entry not in skipped]
            for entry in skipped:
                heapq.heappush(heap, entry)
        if len(ranks[r]) < m:
            short -= 1
        ranks[r].append(i)
        room[r] -= tokens[i]
        total = sums[r] = sums[r] + costs[i]
        top = heaviest[r]
        if costs[i] > top:
            top = heaviest[r] = costs[i]
        heapq.heappush(heap, (vpp * total + beta * max(top + o, -(-total // m)), r))
    return ranks


def _split_ranks(inst: StepInstance, ranks: list[list[int]], m: int) -> np.ndarray | None:
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
            local = lpt_lists(rt, rc, [1] * len(members), m, inst.cap, None)
            if not all(local) or (inst.cap is not None and any(
                    sum(rt[i] for i in b) > inst.cap and len(b) > 1 for b in local)):
                repaired += 1
                if repaired > _MAX_REPAIRED_RANKS:
                    return None
                local = capped_balance_lists(rt, rc, [1] * len(members), m, inst.cap, None)
            for j, b in enumerate(local):
                mb_of[[members[i] for i in b]] = r * m + j
        return mb_of if _valid_start(mb_of, inst, dp * m) else None
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
        local = capped_balance_lists(
            [int(tok_arr[i]) for i in members], [inst.costs[i] for i in members],
            [1] * len(members), m, inst.cap, None,
        )
        for j, bin_ in enumerate(local):
            mb_of[[members[i] for i in bin_]] = r * m + j
    return mb_of if _valid_start(mb_of, inst, dp * m) else None


def _rank_first(inst: StepInstance, m: int, seconds: float) -> list[tuple[str, np.ndarray]]:
    """Rank totals first (with ``pp = 1``, where rank totals decide: Karmarkar-Karp on cost when
    its estimated time fits a fifth of the budget, else LPT; with ``pp > 1``, LPT on the
    estimated rank time), then each rank split into ``m`` micro-batches under the cap. A split
    that cannot be made is skipped."""
    if inst.pp == 1:
        ones = [1] * inst.n
        if _KK_SECONDS_PER_SEQUENCE_RANK * inst.n * inst.dp_size <= 0.2 * seconds:
            name, ranks = "rank_first", karmarkar_karp_lists(inst.costs, ones, inst.dp_size, None)
        else:
            room = None if inst.cap is None else m * inst.cap
            name, ranks = "rank_first", lpt_lists(inst.tokens.tolist(), inst.costs, ones,
                                                  inst.dp_size, room, None)
    else:
        name, ranks = "rank_first_bubble", _ranks_by_step_time(inst, m)
    mb_of = _split_ranks(inst, ranks, m)
    return [] if mb_of is None else [(name, mb_of)]


def _from_schedule(schedule: Any, inst: StepInstance) -> tuple[int, np.ndarray] | None:
    """(m, mb_of) of a schedule that passes the validator, else None."""
    try:
        m = len(schedule[0])
        if m == 0 or find_schedule_violations(
            schedule, inst.tokens, inst.dp_size, m, inst.cap, inst.multiple_of,
            oversize="alone" if inst.oversize else "error",
        ):
            return None
    except (TypeError, ValueError, IndexError):
        return None
    flat = [[int(i) for i in mb] for rank in schedule for mb in rank]
    return m, _from_bins(flat, [list(range(len(flat)))], inst.n)


#: Measured (2 cores, loaded): the re-implemented trainer schedulers together take about
#: ``n * (TRAINER_SECONDS_PER_SEQUENCE + TRAINER_SECONDS_PER_SEQUENCE_RANK * dp)`` seconds
#: (~0.1 s at n=1024, dp=8; ~5 s at n=4096, dp=64, where prime-rl's swap refinement dominates):
#: they run as starts only when that estimate fits in a quarter of the budget.
TRAINER_SECONDS_PER_SEQUENCE = 1e-4
TRAINER_SECONDS_PER_SEQUENCE_RANK = 2e-5


def _trainer_schedules(inst: StepInstance) -> tuple[list[tuple[str, Any]], list[str]]:
    """The trainers' own schedules (``seqpart.heuristics.trainer_schedules``), raw."""
    try:
        from seqpart.heuristics.trainer_schedules import TRAINER_SCHEDULERS
    except ImportError:  # pragma: no cover - the module ships with seqpart.heuristics
        return [], ["trainer schedules not available (seqpart.heuristics.trainer_schedules)"]
    out, notes = [], []
    for name, fn in TRAINER_SCHEDULERS.items():
        try:
            out.append((f"trainer:{name}", fn(inst.tokens, inst.dp_size, inst.cap,
                                               costs=inst.costs, multiple_of=inst.multiple_of)))
        except (ValueError, TypeError) as err:  # a trainer that cannot schedule this batch
            notes.append(f"trainer start {name} failed: {err}")
    return out, notes


def plan_step(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int = 1,
    cost: str | Cost | tuple[int, int] = "tokens",
    overhead: int = 0,
    time_limit: float = 1.0,
    oversize: str = "error",
    starts: Sequence[Any] = (),
    trainer_starts: bool | None = None,
    engine: str = "auto",
    options: SolverOptions | None = None,
) -> StepPlan:
    """Plan a whole training step: the count ``m`` per rank, the micro-batches and the ranks
    together, minimising the step time of the model in :mod:`seqpart.solver.step_model`.

    How: every feasible ``m`` gets a lower bound (the per-``m`` terms of
    :func:`step_lower_bound`); counts are tried best bound first, and only while their bound is
    below the best step time found. At each count two starts are built: micro-batches first
    (capped LPT on cost, then dealt to ranks ``m`` each by equal-count Karmarkar-Karp, the shape
    of :func:`plan_global`) and ranks first (Karmarkar-Karp on cost with ``pp = 1``, a greedy on
    the estimated rank time with ``pp > 1``, then each rank split into ``m`` under the cap). They
    join a pool with the valid schedules in ``starts`` and the trainers' own schedules; the best
    unsearched start of the pool is improved by local search on the step objective
    (:mod:`seqpart.solver.step_search`) after each count. On tiny instances CP-SAT then solves
    each count still open exactly, which can prove the plan optimal (``engine="heuristics"``
    skips it). Each rank's micro-batches are finally ordered for 1F1B by
    :func:`order_for_pipeline`: lightest first and last, heaviest in the middle, because the
    warm-up exposes the first micro-batch's forward on every stage and the cool-down the last
    one's backward, while the steady middle overlaps stages. (The model's rank time does not
    depend on the order; the order is for the real pipeline.)

    Budget: ``time_limit`` becomes a deterministic work budget (candidate evaluations of the
    local search; CP-SAT's deterministic time), so the same input gives the same plan; the clock
    is only a safety net, and ``notes`` say when it cut the search (the plan may then differ
    between runs). ``options.deterministic=True`` drops the clock too.

    Args:
        lengths: token count per sequence of the whole step (all ranks' samples).
        dp_size: data-parallel ranks.
        cap: max tokens per micro-batch; None for no cap.
        pp, vpp: pipeline stages and virtual stages per rank (the bubble term).
        multiple_of: ``m`` is a multiple of this (the micro-batch group of virtual stages).
        cost: "tokens", "attention", ``Cost(a, b)`` or ``(a, b)``: a sequence costs a*l + b*l^2.
        overhead: fixed time of each micro-batch, in the cost's units (an int >= 0).
        time_limit: seconds for the whole call.
        oversize: "error" (reject a sequence over the cap) or "alone" (its own micro-batch).
        starts: schedules (``[rank][micro-batch] = indices``) to start from, e.g. your trainer's;
            invalid ones are skipped (noted). The plan is never worse than a valid start.
        trainer_starts: also start from the re-implemented trainers' schedulers
            (``seqpart.heuristics.trainer_schedules``). None (default): only when their
            estimated time (see ``TRAINER_SECONDS_PER_SEQUENCE``) fits in a quarter of
            ``time_limit``; they cannot be interrupted. To be sure never to be behind your
            trainer, pass its schedule in ``starts``.
        engine: "auto" (heuristics, then CP-SAT on tiny instances) or "heuristics".
        options: CP-SAT settings (seed, log, extra parameters; deterministic drops the clock).

    Returns:
        A :class:`StepPlan` that has passed :func:`check_schedule`.

    Raises:
        ValueError / TypeError: bad arguments, naming the fix.
        InfeasibleError: no count per rank can work (too few sequences for ``dp_size * m``
            non-empty micro-batches under the cap), or none was found in the budget.
    """
    t0 = time.perf_counter()
    seconds = _positive_seconds(time_limit)
    if engine not in ("auto", "heuristics"):
        raise ValueError(f"engine={engine!r}: use 'auto' or 'heuristics'")
    if trainer_starts not in (None, True, False):
        raise TypeError(f"trainer_starts must be None, True or False, got {trainer_starts!r}")
    options = options or SolverOptions()
    inst = make_instance(
        lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
        multiple_of=multiple_of, oversize=oversize,
    )
    if isinstance(starts, (str, bytes)) or not isinstance(starts, Sequence):
        raise TypeError("starts must be a list of schedules ([rank][micro-batch] = indices)")
    # Kept back from the clock for checking and assembling the plan.
    reserve = 0.003 + 3e-6 * inst.n
    deadline = None if options.deterministic else t0 + seconds - reserve
    budget = max(20_000, int(seconds * CANDIDATES_PER_SECOND))
    notes: list[str] = []
    bounds = scaled_bounds(inst)
    costs = np.asarray(inst.costs, dtype=object)

    def out_of_clock(margin: float = 0.0) -> bool:
        return deadline is not None and time.perf_counter() > deadline - margin

    # The pool of valid starts: (objective, arrival, method, m, mb_of); searched best first.
    pool: list[tuple[int, int, str, int, np.ndarray]] = []

    def add(method: str, m: int, mb_of: np.ndarray) -> None:
        obj = schedule_objective(mb_of, costs, inst.dp_size * m, m, inst.overhead, inst.pp,
                                 inst.vpp)
        pool.append((obj, len(pool), method, m, mb_of))

    given = [(f"start {j}", sched) for j, sched in enumerate(starts)]
    if trainer_starts or (
        trainer_starts is None
        and inst.n * (TRAINER_SECONDS_PER_SEQUENCE + TRAINER_SECONDS_PER_SEQUENCE_RANK * inst.dp_size)
        <= 0.25 * seconds
    ):
        trainers, trainer_notes = _trainer_schedules(inst)
        given += trainers
        notes += trainer_notes
    skipped = []
    for method, sched in given:
        found = _from_schedule(sched, inst)
        if found is None or found[0] not in bounds:
            skipped.append(method)
        else:
            add(method, *found)
    if skipped:
        notes.append(f"starts that break the contract, skipped: {', '.join(skipped)}")

    best = _Best()
    spent = 0
    clock_cut = False
    searched: set[int] = set()

    def search_next(share: int) -> None:
        """Local search from the best start not searched yet."""
        nonlocal spent, clock_cut
        open_ = [row for row in pool if row[1] not in searched]
        if not open_:
            return
        obj, arrival, method, m, mb_of = min(open_, key=lambda row: (row[0], row[1]))
        searched.add(arrival)
        result = improve_schedule(
            mb_of, inst.tokens.tolist(), inst.costs, inst.dp_size, m, inst.cap, inst.overhead,
            inst.pp, inst.vpp, bound=bounds[m], work_budget=share, deadline=deadline,
        )
        spent += result.work
        clock_cut |= result.stopped_by == "clock"
        if result.objective > obj:  # never: the search only takes improving changes
            raise RuntimeError("step local search made a schedule worse (please report)")
        if best.objective is None or result.objective < best.objective:
            name = method + ("+local_search" if result.steps else "")
            best.objective, best.m, best.mb_of, best.method = result.objective, m, result.mb_of, name

    def incumbent() -> int | None:
        values = [row[0] for row in pool] + ([best.objective] if best.objective is not None else [])
        return min(values) if values else None

    build = _BUILD_WORK_PER_SEQUENCE * inst.n
    build_seconds = build / CANDIDATES_PER_SECOND
    pending = sorted(bounds, key=lambda m: (bounds[m], m))
    tried = 0

    def build_next() -> None:
        nonlocal spent, tried
        m = pending.pop(0)
        tried += 1
        for make in (_rank_first, _micro_first):
            # A second construction only while the clock allows (the first one always runs).
            if make is _micro_first and pool and out_of_clock(build_seconds / 2):
                break
            for method, mb_of in make(inst, m, seconds):
                add(method, m, mb_of)
            spent += build // 2

    def drop_hopeless() -> None:
        top = incumbent()
        while pending and top is not None and bounds[pending[0]] >= top:
            pending.pop(0)

    # 1. Starts at several counts before any search: with pp > 1 the bounds of neighbouring
    # counts are close, and the constructions' own step times separate them better.
    # Until a first valid start exists the clock is not looked at: a plan beats an error.
    while pending and (not pool or not out_of_clock(build_seconds)):
        drop_hopeless()
        if not pending or (pool and spent + build > _BUILD_SHARE * budget):
            break
        build_next()
    # 2. Search the best start, then build one more count, while the budget lasts.
    while True:
        progressed = False
        if len(searched) < len(pool) and spent < budget and not out_of_clock():
            search_next(max(0, (budget - spent) // 2))
            progressed = True
        drop_hopeless()
        if pending and spent + build <= budget and not out_of_clock(build_seconds):
            build_next()
            progressed = True
        if not progressed:
            break
    clock_cut |= out_of_clock() and spent < budget
    # The best start may never have been searched (budget spent): it still counts.
    for obj, arrival, method, m, mb_of in pool:
        if arrival not in searched and (best.objective is None or obj < best.objective):
            best.objective, best.m, best.mb_of, best.method = obj, m, mb_of, method
    if best.mb_of is None:
        raise InfeasibleError(
            f"no schedule of {dp_size} ranks with an equal count of non-empty micro-batches under "
            f"cap={inst.cap} was found in {seconds}s, and none is proven impossible: raise "
            "time_limit or the cap, or use fewer ranks",
            proven=False,
        )
    notes.append(
        f"counts built: {tried} of {len(bounds)} feasible (best bound first); starts searched: "
        f"{len(searched)} of {len(pool)}; work {spent} of {budget}"
    )

    # CP-SAT on tiny instances: improves and proves, count by count.
    proven = dict(bounds)
    if engine == "auto" and not out_of_clock():
        left = seconds - (time.perf_counter() - t0) if deadline is not None else seconds / 2
        exact = solve_step_exactly(inst, bounds, best.objective, deadline, max(0.0, left), options)
        if exact is not None:
            proven = exact.bounds
            notes += exact.notes
            if exact.mb_of is not None and exact.objective is not None and (
                exact.objective < best.objective
            ):
                best.objective, best.m, best.mb_of, best.method = (
                    exact.objective, exact.m, exact.mb_of, "cp-sat"
                )
    if clock_cut:
        notes.append("stopped by the clock, not the work budget: the plan may differ between runs")
    return _assemble(inst, best, min(proven.values()), notes, t0)


def _assemble(inst: StepInstance, best: _Best, scaled_bound: int, notes: list[str], t0: float) -> StepPlan:
    """Micro-batches per rank in 1F1B order, checked, with exact times."""
    assert best.mb_of is not None and best.objective is not None
    m, k = best.m, inst.dp_size * best.m
    members: list[list[int]] = [[] for _ in range(k)]
    for i, b in enumerate(best.mb_of.tolist()):
        members[b].append(i)
    times = [inst.overhead + sum(inst.costs[i] for i in mb) for mb in members]
    ranks = []
    for r in range(inst.dp_size):
        mine = list(range(r * m, (r + 1) * m))
        order = order_for_pipeline([times[b] for b in mine])
        ranks.append([members[mine[j]] for j in order])
    over = "alone" if inst.oversize else "error"
    try:
        check_schedule(ranks, inst.tokens, inst.dp_size, m, inst.cap, inst.multiple_of, oversize=over)
    except InvalidPlanError as err:
        raise RuntimeError(f"seqpart produced an invalid step schedule (please report): {err}") from err
    scaled = [
        scaled_rank_time([times[b] for b in range(r * m, (r + 1) * m)], inst.pp, inst.vpp)
        for r in range(inst.dp_size)
    ]
    if max(scaled) != best.objective:
        raise RuntimeError("step time bookkeeping disagrees with the model (please report)")
    bound = min(scaled_bound, best.objective)
    return StepPlan(
        ranks=ranks,
        m=m,
        step_time=exact_time(best.objective, inst.vpp),
        rank_times=[exact_time(x, inst.vpp) for x in scaled],
        lower_bound=exact_time(bound, inst.vpp),
        status="optimal" if best.objective <= bound else "feasible",
        method=best.method,
        seconds=time.perf_counter() - t0,
        dp_size=inst.dp_size,
        cap=inst.cap,
        cost=inst.cost,
        overhead=inst.overhead,
        pp=inst.pp,
        vpp=inst.vpp,
        multiple_of=inst.multiple_of,
        oversize=list(inst.oversize),
        notes=notes,
    )
