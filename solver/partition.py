"""``partition``: the one entry point. Bounds first, then heuristics, then CP-SAT if time remains.

The contract, whatever the engine: exactly k non-empty micro-batches, none over the cap, every
sequence in exactly one, checked by :func:`check_plan` before it is returned; or an
:class:`InfeasibleError` that says whether no plan exists or none was found in time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqpart.heuristics import load_lower_bound, min_bins_lower_bound
from seqpart.heuristics._common import order_desc
from seqpart.heuristics.bounds import load_lower_bound_packing
from seqpart.heuristics.capped_balance import capped_balance_lists
from seqpart.heuristics.first_fit import first_fit_lists
from seqpart.heuristics.karmarkar_karp import karmarkar_karp_lists
from seqpart.heuristics.local_search import improve_lists
from seqpart.heuristics.lpt import lpt_lists
from seqpart.heuristics.resplit import resplit_pairs  # issue 11
from seqpart.heuristics.resplit import work_for as resplit_work  # issue 11

from .cpsat import solve_items
from .options import ENGINES, BestPlan, SolverOptions
from .plan import InfeasibleError, InvalidPlanError, Plan, check_plan
from .problem import Cost, Items, Problem, make_items, make_problem
from .prove import dive_items, prove_items  # issue 11: LP bound, dive and exact search


def _valid(
    bins: Sequence[Sequence[int]], k: int, items: Items, cap: int | None, max_count: int | None
) -> bool:
    """Fast item-level check (the full validator runs once on the final plan)."""
    if len(bins) != k or sum(len(b) for b in bins) != len(items):
        return False
    for b in bins:
        if not b:
            return False
        if cap is not None and sum(items.tokens[i] for i in b) > cap:
            return False
        if max_count is not None and sum(items.counts[i] for i in b) != max_count:
            return False
    return True


def _max_load(bins: Sequence[Sequence[int]], items: Items) -> int:
    return max(sum(items.costs[i] for i in b) for b in bins)


def _violation(bins: Sequence[Sequence[int]], items: Items, cap: int | None) -> tuple[int, int]:
    """(empty bins, tokens over the cap): how far a split is from valid."""
    over = 0 if cap is None else sum(max(0, sum(items.tokens[i] for i in b) - cap) for b in bins)
    return sum(1 for b in bins if not b), over


def _excess(bins: Sequence[Sequence[int]], items: Items, lb: int) -> int:
    """Total load above the lower bound: the work local search has left to do."""
    return sum(max(0, sum(items.costs[i] for i in b) - lb) for b in bins)


#: Measured on 2 cores at n=2048, seconds per item: Karmarkar-Karp 2-9 ms (slowest at small
#: k), the capped balancer's packings 1.3-6 ms.
_KK_SECONDS_PER_ITEM = 4.5e-6
_CAPPED_BALANCE_SECONDS_PER_ITEM = 3e-6


def _heuristic_plan(
    items: Items,
    k: int,
    cap: int | None,
    max_count: int | None,
    lb: int,
    deadline: float | None,
    time_limit: float,
    start: list[list[int]] | None = None,
) -> BestPlan:
    """Constructions and local search, in the order that pays off soonest.

    1. Capped LPT (cheapest), then local search from it. When loads are tokens the search also
       starts from an LPT that breaks the cap, and usually repairs it.
    2. When that left no valid plan, the capped balancer's packings (the fallback that always
       exists; time is kept back for it in step 1), and local search from them. Steps 1 and 2
       are the local_search heuristic's own path, so partition is never behind it when the
       budget holds that path.
    3. Karmarkar-Karp, when no plan is proven optimal and its estimated cost fits the budget
       (a choice from the sizes and ``time_limit``; with a deadline, also from the time left).
    4. Local search from the remaining starts, least load above the bound first, then from the
       capped balancer's packings if they have not run yet, while time remains.
    Without a deadline (deterministic mode) every step runs to completion.
    """
    n = len(items)
    by_tokens = items.costs == items.tokens

    def searchable(bins: list[list[int]], is_valid: bool) -> bool:
        # A start that only breaks the cap is searched from when loads are tokens: the search
        # lowers the heaviest (most over-cap) bin first and gets under the cap when it can.
        return is_valid or (by_tokens and _valid(bins, k, items, None, max_count))

    def out_of_time(margin: float = 0.0) -> bool:
        return deadline is not None and time.perf_counter() > deadline - margin

    best = BestPlan(None, 0, lb, "", [])
    hints: list[list[list[int]]] = []  # invalid splits: the least violating is a CP-SAT hint

    def offer(method: str, bins: list[list[int]]) -> bool:
        """Keep ``bins`` if it is the best valid plan so far; say whether it is valid."""
        if not _valid(bins, k, items, cap, max_count):
            hints.append(bins)
            return False
        load = _max_load(bins, items)
        if best.bins is None or load < best.max_load:
            best.bins, best.max_load, best.method = bins, load, method
        return True

    def proven() -> bool:
        return best.bins is not None and best.max_load <= best.lower_bound

    def polish(
        method: str, bins: list[list[int]], repair_by: float | None = None
    ) -> tuple[list[list[int]], bool]:
        polished = improve_lists(
            items.tokens, items.costs, items.counts, bins, cap, max_count, deadline,
            best.lower_bound, repair_deadline=repair_by,
        )
        return polished, offer(method + "+local_search", polished)

    # Sorted like the capped balancer's output, so local search from it retraces the
    # local_search heuristic's steps exactly (its tie-breaks follow the order within a bin).
    lpt = [sorted(b) for b in lpt_lists(items.tokens, items.costs, items.counts, k, cap,
                                        max_count)]
    lpt_valid = offer("lpt", lpt)
    starts: list[tuple[str, list[list[int]]]] = []  # still to search from
    if start is not None:
        offer("first_fit_decreasing", start)
        starts.append(("first_fit_decreasing", start))
    tightened = False

    def tighten_bound() -> None:
        # Many items over half the load cannot share a micro-batch: a bin-packing bound sees
        # it. Searched up to the best load, so it waits for the first valid plan; once is enough.
        nonlocal tightened
        if not tightened and best.bins is not None and best.max_load > lb:
            tightened = True
            best.lower_bound = load_lower_bound_packing(items.costs, k, lb, best.max_load)

    tighten_bound()

    # Karmarkar-Karp (issue 11): first, decided by its estimated work alone. After local search
    # it was often left out for lack of time, and then `partition` could end above KK's valid
    # plan (grouped n=2048 batches, real batches under 4k-8k caps). Measured with
    # bench_cpsat.py's online part under load: first-always gave fewer calls worse than a
    # heuristic than first-only-under-a-loose-cap (12 vs 20 of 112).
    kk_seconds = _KK_SECONDS_PER_ITEM * n
    kk_done = False

    def karmarkar_karp() -> None:
        nonlocal kk_done
        kk_done = True
        kk = karmarkar_karp_lists(items.costs, items.counts, k, max_count)
        if searchable(kk, offer("karmarkar_karp", kk)):
            starts.append(("karmarkar_karp", kk))
        tighten_bound()

    if not proven() and kk_seconds < 0.75 * time_limit:
        karmarkar_karp()

    # Issue 11: a subset-sum dive at the bound (a plan there is optimal at once).
    if not proven() and not out_of_time():
        dived = dive_items(items, k, cap, max_count, best.lower_bound,
                           best.max_load if best.bins is not None else None, time_limit,
                           deadline=deadline)
        if dived is not None:
            offer("dive", dived)

    # 1. Local search from LPT. When LPT breaks the cap, time is kept back for the capped
    # balancer in case the search cannot repair it.
    if not proven() and searchable(lpt, lpt_valid):
        repair_by = None
        if deadline is not None and not lpt_valid:
            repair_by = deadline - _CAPPED_BALANCE_SECONDS_PER_ITEM * n
        polished, repaired = polish("lpt", lpt, repair_by)
        if repair_by is not None and not repaired and time.perf_counter() > repair_by:
            starts.append(("lpt", polished))  # cut short: resume it later if time allows
        tighten_bound()

    # 2. The capped balancer's packings, at once when no valid plan is known yet: they are the
    # fallback that always exists. Otherwise only as one more start, after the others.
    def capped_balance() -> tuple[list[list[int]], bool]:
        # It begins with this same LPT; only its packings are new here.
        cb = capped_balance_lists(
            items.tokens, items.costs, items.counts, k, cap, max_count, deadline
        )
        return cb, offer("capped_balance", cb)

    need_cb = not lpt_valid and not proven()
    if need_cb and best.bins is None:
        need_cb = False
        cb, cb_valid = capped_balance()
        if cb_valid:  # and search from it at once: the rest of local_search's own path
            polish("capped_balance", cb)
            tighten_bound()

    # 3. Karmarkar-Karp, if it did not run first.
    if (not kk_done and not proven() and kk_seconds < 0.75 * time_limit
            and not out_of_time(kk_seconds)):
        karmarkar_karp()

    tighten_bound()

    # 4. The other starts, the least load above the bound first (the least work left).
    starts.sort(key=lambda row: _excess(row[1], items, best.lower_bound))
    for method, bins in starts:
        if proven() or out_of_time():
            break
        polish(method, bins)
    if need_cb and not proven() and not out_of_time(_CAPPED_BALANCE_SECONDS_PER_ITEM * n):
        cb, cb_valid = capped_balance()
        if cb_valid:
            polish("capped_balance", cb)

    # Issue 11: optimal re-splits of the heaviest micro-batch with a partner (few per bin).
    if best.bins is not None and not proven() and not out_of_time():
        offer(best.method + "+resplit", resplit_pairs(
            items.tokens, items.costs, items.counts, best.bins, cap, max_count,
            lower_bound=best.lower_bound, max_work=resplit_work(time_limit), deadline=deadline,
        ))

    if best.bins is None and hints:
        # The least-violating split: a start for CP-SAT.
        best.hint = min(hints, key=lambda bins: _violation(bins, items, cap))
    if out_of_time():
        best.notes.append("heuristics stopped by the time limit")
    return best


def _fixed_k(
    items: Items,
    k: int,
    problem: Problem,
    deadline: float | None,
    time_limit: float,
    engine: str,
    options: SolverOptions,
    start: list[list[int]] | None = None,
) -> BestPlan:
    cap = problem.cap
    n_items = len(items)
    if k > n_items:
        raise InfeasibleError(
            f"k={k} micro-batches but only {n_items} placeable units (groups count as one, "
            "over-cap sequences use their own micro-batches): lower k or split groups",
            proven=True,
        )
    max_count = sum(items.counts) // k if problem.equal_size else None
    lb = load_lower_bound(items.costs, k, counts=items.counts, max_count=max_count)
    if cap is not None:
        need = min_bins_lower_bound(items.tokens, cap)
        if need > k:
            raise InfeasibleError(
                f"the token sums need at least {need} micro-batches under cap={cap} "
                f"(bin-packing bound), but k={k}: use k >= {need} or k=None",
                proven=True,
            )
        if problem.cost == Cost() and lb > cap:
            raise InfeasibleError(
                f"some micro-batch must hold at least {lb} tokens with k={k}, over cap={cap}: "
                "raise k or the cap",
                proven=True,
            )
    best = _heuristic_plan(items, k, cap, max_count, lb, deadline, time_limit, start)
    if engine != "heuristics" and (best.bins is None or best.max_load > best.lower_bound):
        best = prove_items(items, k, cap, max_count, best, deadline, time_limit)  # issue 11
    if engine != "heuristics" and (best.bins is None or best.max_load > best.lower_bound):
        best = solve_items(
            items, k, cap, max_count, best, deadline, time_limit, options, engine == "cp-sat"
        )
    return best


def _search_k(
    items: Items,
    problem: Problem,
    deadline: float | None,
    time_limit: float,
    engine: str,
    options: SolverOptions,
) -> tuple[int, BestPlan, int, str]:
    """Smallest k with a valid plan: bounds give the floor, first-fit decreasing the ceiling."""
    cap = problem.cap
    n_items = len(items)
    if cap is None:
        return 1, _fixed_k(items, 1, problem, deadline, time_limit, engine, options), 1, "optimal"
    floor = max(1, min_bins_lower_bound(items.tokens, cap))
    ffd = first_fit_lists(items.tokens, items.counts, None, cap, None, order_desc(items.tokens))
    ceiling = len(ffd)
    last_error: InfeasibleError | None = None
    for k in range(floor, n_items + 1):
        if problem.equal_size and sum(items.counts) % k:
            floor += k == floor  # no equal split at this count: as good as proven
            continue
        at_ceiling = k == ceiling and not problem.equal_size
        if k > ceiling and not problem.equal_size:
            break
        out_of_time = deadline is not None and time.perf_counter() > deadline
        if out_of_time and not at_ceiling and not problem.equal_size:
            continue  # out of time: straight to the count first-fit decreasing achieves
        try:
            # Below the FFD count a heuristic miss is not proof: CP-SAT decides when it can.
            best = _fixed_k(
                items, k, problem, deadline, time_limit, engine, options,
                start=ffd if at_ceiling else None,
            )
        except InfeasibleError as err:
            # Only a run of proofs from the floor up moves it: a count merely not found in
            # time stays a candidate for the minimum.
            if err.proven and k == floor:
                floor = k + 1
            last_error = err
            continue
        if best.bins is not None:
            return k, best, floor, "optimal" if k <= floor else "upper_bound"
    if last_error is not None and floor > n_items:
        raise last_error
    raise InfeasibleError(
        f"no micro-batch count from {floor} to {n_items} gave a plan with these constraints"
        + (f" (last: {last_error})" if last_error else ""),
        proven=floor > n_items,
    )


def partition(
    lengths: Any,
    k: int | None = None,
    cap: int | None = None,
    *,
    time_limit: float = 0.1,
    cost: str | Cost | tuple[int, int] = "tokens",
    equal_size: bool = False,
    groups: Sequence[Sequence[int]] | None = None,
    oversize: str = "error",
    engine: str = "auto",
    options: SolverOptions | None = None,
) -> Plan:
    """Split ``lengths`` into exactly ``k`` non-empty micro-batches, each at most ``cap`` tokens,
    minimising the largest load.

    Args:
        lengths: token count per sequence (list, numpy array or torch tensor of ints > 0).
        k: number of micro-batches; None for the smallest count a plan exists for.
        cap: max tokens per micro-batch (``max_tokens_per_gpu * cp_size``); None for no cap.
        time_limit: wall-clock budget in seconds for the whole call.
        cost: what to balance: "tokens", "attention" (24576*l + l^2) or ``Cost(a, b)``. The cap
            always applies to tokens.
        equal_size: every micro-batch gets the same number of sequences (n divisible by k).
        groups: lists of indices that must share a micro-batch.
        oversize: "error" (default) rejects a sequence over the cap; "alone" gives each such
            sequence a micro-batch of its own (listed in ``Plan.oversize``).
        engine: "auto" (heuristics, then CP-SAT while unproven), "heuristics" (no model), or
            "cp-sat" (build the model even when it looks too large for the budget).
        options: CP-SAT pass-through settings (workers, seed, log, deterministic).

    Raises:
        ValueError / TypeError: bad input, naming the argument and the fix.
        InfeasibleError: no plan; ``.proven`` tells "none exists" from "none found in time".
    """
    t0 = time.perf_counter()
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not (
        time_limit > 0
    ):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: choose one of {', '.join(ENGINES)}")
    options = options or SolverOptions()
    problem = make_problem(
        lengths, k, cap, cost=cost, equal_size=equal_size, groups=groups, oversize=oversize
    )
    # The engines stop early enough to leave time for checking and assembling the plan
    # (measured: 0.6 ms at n=2048) and for the last local-search step to end.
    finish_reserve = 0.001 + 0.5e-6 * len(problem.tokens)
    deadline = None if options.deterministic else t0 + float(time_limit) - finish_reserve
    items = make_items(problem)
    n_over = len(problem.oversize)
    k_status, k_floor = "given", None
    if problem.k is not None:
        k_items = problem.k - n_over
        if k_items < (1 if len(items) else 0):
            raise InfeasibleError(
                f"{n_over} sequences are over the cap and each needs its own micro-batch, "
                f"leaving {k_items} for the other {len(items)} units with k={problem.k}: "
                f"use k >= {n_over + (1 if len(items) else 0)}",
                proven=True,
            )
        best = (
            _fixed_k(items, k_items, problem, deadline, time_limit, engine, options)
            if len(items)
            else BestPlan([], 0, 0, "oversize_only", [])
        )
    elif len(items):
        k_items, best, floor, k_status = _search_k(
            items, problem, deadline, float(time_limit), engine, options
        )
        k_floor = floor + n_over
    else:
        k_items, best, k_floor, k_status = 0, BestPlan([], 0, 0, "oversize_only", []), n_over, "optimal"
    if best.bins is None:
        raise InfeasibleError(
            f"no plan with k={k_items + n_over} under cap={problem.cap} was found in "
            f"{time_limit}s, and none is proven impossible: raise time_limit or k"
            + (f" ({'; '.join(best.notes)})" if best.notes else ""),
            proven=False,
        )
    return _finish(problem, items, best, k_items + n_over, k_status, k_floor, t0)


def _finish(
    problem: Problem,
    items: Items,
    best: BestPlan,
    k: int,
    k_status: str,
    k_floor: int | None,
    t0: float,
) -> Plan:
    assert best.bins is not None
    bins = items.expand(best.bins) + [[i] for i in problem.oversize]
    bins.sort(key=lambda b: b[0])
    try:
        check_plan(
            bins, problem.tokens, k, problem.cap, oversize=problem.oversize,
            groups=problem.groups, equal_size=problem.equal_size,
        )
    except InvalidPlanError as err:  # a bug in an engine, never the caller's fault
        raise RuntimeError(f"seqpart produced an invalid plan (please report): {err}") from err
    bin_of = np.repeat(np.arange(len(bins)), [len(b) for b in bins])
    order = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=problem.n)
    loads = np.zeros(len(bins), dtype=np.int64)
    tokens = np.zeros(len(bins), dtype=np.int64)
    np.add.at(loads, bin_of, problem.costs[order])
    np.add.at(tokens, bin_of, problem.tokens[order])
    loads, tokens = loads.tolist(), tokens.tolist()
    over_costs = [int(problem.costs[i]) for i in problem.oversize]
    lower = max([best.lower_bound, *over_costs])
    max_load = max(loads)
    return Plan(
        bins=bins,
        loads=loads,
        tokens=tokens,
        max_load=max_load,
        lower_bound=lower,
        status="optimal" if max_load <= lower else "feasible",
        method=best.method,
        seconds=time.perf_counter() - t0,
        k=k,
        cap=problem.cap,
        cost=problem.cost,
        k_status=k_status,
        k_lower_bound=k_floor if k_floor is not None else None,
        oversize=list(problem.oversize),
        notes=list(best.notes),
    )
