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
from seqpart.heuristics.bounds import load_lower_bound_packing
from seqpart.heuristics.kernels import (
    WORK_SECONDS,
    argsort_desc,
    best_fit_lists,
    best_fit_with_room,
    capped_balance_lists,
    fill_empty,
    first_fit_tree,
    improve_lists,
    karmarkar_karp_lists,
    lpt_lists,
    repair_step_seconds,
)
from seqpart.solver.assemble import finish_plan
from seqpart.solver.engines.budget_costs import (
    CAPPED_BALANCE_SECONDS_PER_ITEM,
    CAPPED_BALANCE_UP_TO,
    FFD_SECONDS_PER_ITEM,
    FIXED_SECONDS_PER_ITEM,
    KK_FIRST_ITEMS_PER_BIN,
    KK_SHARE,
    LPT_SECONDS_PER_ITEM,
    PACK_SECONDS_PER_ITEM,
    SAFETY_NET_SLACK,
    SEARCH_SETUP_SECONDS_PER_ITEM,
    fallback_cost_seconds,
    karmarkar_karp_seconds,
    lpt_seconds,
    packing_bound_seconds,
    packing_bound_steps,
)
from seqpart.solver.engines.cpsat import solve_items
from seqpart.solver.engines.prove import DIVE_SHARE, dive_items, prove_items
from seqpart.solver.engines.resplit import SUBSETS_PER_SECOND, resplit_pairs
from seqpart.solver.engines.resplit import work_for as resplit_work
from seqpart.solver.errors import InfeasibleError
from seqpart.solver.options import ENGINES, BestPlan, Budget, SolverOptions, pauses_gc
from seqpart.solver.plan import Plan
from seqpart.solver.problem import Cost, Items, Problem, make_items, make_problem


def _measure(
    bins: Sequence[Sequence[int]], k: int, items: Items, cap: int | None, max_count: int | None
) -> int | None:
    """The exact largest load when ``bins`` is valid, else None: a fast item-level check (the
    full validator runs once on the final plan), the bins flattened once."""
    if len(bins) != k or sum(map(len, bins)) != len(items) or not all(bins):
        return None
    arrays = [items.cost_array]
    if cap is not None:
        arrays.append(items.token_array)
    if max_count is not None:
        arrays.append(items.count_array)
    sums = items.bin_sums(bins, *arrays)
    sums = sums if isinstance(sums, tuple) else (sums,)
    if cap is not None and int(sums[1].max()) > cap:
        return None
    if max_count is not None and bool((sums[-1] != max_count).any()):
        return None
    return int(sums[0].max())


def _valid(
    bins: Sequence[Sequence[int]], k: int, items: Items, cap: int | None, max_count: int | None
) -> bool:
    return _measure(bins, k, items, cap, max_count) is not None


def _violation(bins: Sequence[Sequence[int]], items: Items, cap: int | None) -> tuple[int, int]:
    """(empty bins, tokens over the cap): how far a split is from valid."""
    empty = sum(1 for b in bins if not b)
    if cap is None:
        return empty, 0
    tok = items.bin_sums(bins, items.token_array)
    return empty, int(np.maximum(tok - cap, 0).sum())


def _excess(bins: Sequence[Sequence[int]], items: Items, lb: int) -> int:
    """Total load above the lower bound: the work local search has left to do."""
    loads = items.bin_sums(bins, items.cost_array)
    return int(sum(max(0, int(x) - lb) for x in loads))


def _pack(items: Items, k: int, cap: int | None, max_count: int | None) -> list[list[int]]:
    """Best fit decreasing into k bins, empty bins refilled: valid whenever best fit needs at
    most k bins, which makes it the cheap fallback for large batches."""
    if max_count is not None:
        bins = best_fit_lists(items.tokens, items.counts, k, cap, max_count)
        return [sorted(b) for b in fill_empty(bins, items.costs, items.counts, max_count)]
    bins, room = best_fit_with_room(items.token_array, k, cap)
    if all(bins):
        return bins
    loads = None  # when loads are tokens, the room left gives them for free
    if cap is not None and items.costs == items.tokens:
        loads = [cap - r for r in room]
    # Not sorted here: the plan's assembly sorts every bin once (a pass over 10^6 items).
    return fill_empty(bins, items.costs, items.counts, None, loads)


def _heuristic_plan(
    items: Items,
    k: int,
    cap: int | None,
    max_count: int | None,
    lb: int,
    budget: Budget,
    time_limit: float,
    start: list[list[int]] | None = None,
    start_method: str = "best_fit_decreasing",
) -> BestPlan:
    """Constructions and local search, in the order that pays off soonest.

    1. Capped LPT (cheapest), then local search from it. When loads are tokens the search also
       starts from an LPT that breaks the cap, and usually repairs it. Skipped when LPT and the
       fallback together do not fit in ``time_limit`` at this size.
    2. When that left no valid plan, the fallback that always exists for k at least the
       first-fit-decreasing count (time is kept back for it in step 1): the capped balancer
       after LPT up to CAPPED_BALANCE_UP_TO items; otherwise best fit decreasing into k bins,
       then first fit decreasing, then the capped balancer; then local search from it. Up to
       that size steps 1 and 2 are the local_search heuristic's own path, so partition is
       never behind it when the budget holds that path.
    3. Karmarkar-Karp, when no plan is proven optimal and its estimated cost fits the budget
       (a choice from the sizes, ``time_limit`` and the budget left).
    4. Local search from the remaining starts, least load above the bound first, then from the
       fallback if it has not run yet, while time remains.
    Every optional step runs only when its measured per-item cost fits the budget left, and
    is charged that cost (local search: the work it did), so the call stays near its limit at
    any n and, outside "clock" timing, takes the same steps on every machine.
    """
    n = len(items)
    by_tokens = items.costs is items.tokens or items.costs == items.tokens
    fallback_seconds = fallback_cost_seconds(n, by_tokens)

    def searchable(bins: list[list[int]], is_valid: bool) -> bool:
        # A start that only breaks the cap is searched from when loads are tokens: the search
        # lowers the heaviest (most over-cap) bin first and gets under the cap when it can.
        return is_valid or (by_tokens and _valid(bins, k, items, None, max_count))

    def out_of_time(margin: float = 0.0) -> bool:
        return not budget.fits(margin)


    best = BestPlan(None, 0, lb, "", [])
    hints: list[list[list[int]]] = []  # invalid splits: the least violating is a CP-SAT hint

    def offer(method: str, bins: list[list[int]]) -> bool:
        """Keep ``bins`` if it is the best valid plan so far; say whether it is valid."""
        load = _measure(bins, k, items, cap, max_count)
        if load is None:
            hints.append(bins)
            return False
        if best.bins is None or load < best.max_load:
            best.bins, best.max_load, best.method = bins, load, method
        return True

    def proven() -> bool:
        return best.bins is not None and best.max_load <= best.lower_bound

    def polish(
        method: str, bins: list[list[int]], keep_back: float | None = None,
        until_repaired: bool = False,
    ) -> tuple[list[list[int]], bool, str]:
        """Local search from ``bins``; ``keep_back``: seconds of budget to leave for the
        fallback when the start breaks the cap and the search cannot repair it in time;
        ``until_repaired``: stop once such a start is under the cap ("repaired"; it can be
        resumed). Returns the result, whether it is valid, and why the search stopped."""
        if out_of_time(SEARCH_SETUP_SECONDS_PER_ITEM * n):
            return bins, False, "budget"
        report: dict[str, Any] = {}
        by_clock = budget.by_clock
        spendable = budget.left()
        work = None if by_clock else max(spendable, 0.0) / WORK_SECONDS
        repair_work = repair_by = None
        if keep_back is not None:
            if not by_clock:
                repair_work = max(spendable - keep_back, 0.0) / WORK_SECONDS
            # On the wall clock too (the safety net): the fallback must still fit after it.
            if budget.wall_deadline is not None:
                repair_by = budget.wall_deadline - keep_back
        polished = improve_lists(
            items.tokens, items.costs, items.counts, bins, cap, max_count, budget.wall_deadline,
            None if items.shift else best.lower_bound, repair_deadline=repair_by,
            repair_work=None if repair_work is None else int(repair_work),
            report=report, max_work=None if work is None else int(work),
            until_repaired=until_repaired,
        )
        budget.charge(report.get("work", 0) * WORK_SECONDS)
        stopped = report.get("stopped", "converged")
        if stopped == "deadline":
            budget.mark_cut()
        return polished, offer(method + "+local_search", polished), stopped

    kk_seconds = karmarkar_karp_seconds(n, k)
    kk_planned = kk_seconds < KK_SHARE * time_limit
    starts: list[tuple[str, list[list[int]]]] = []  # still to search from
    if start is not None:
        offer(start_method, start)
        starts.append((start_method, start))
    tightened = False

    def tighten_bound() -> None:
        # Many items over half the load cannot share a micro-batch: a bin-packing bound sees
        # it. Searched up to the best load, so it waits for the first valid plan; once is enough.
        nonlocal tightened
        if items.shift:  # the packing bound works in int64: exact costs beyond it skip it
            return
        if tightened or best.bins is None or best.max_load <= lb:
            return
        # A binary search over [lb, best load]: as many steps as the budget pays for (a
        # stopped search still gives a valid bound), charged for the steps it made.
        steps = min(2 + (best.max_load - lb).bit_length(), packing_bound_steps(n, budget.left()))
        if steps >= 2 and budget.fits(packing_bound_seconds(n, steps)):
            tightened = True
            report: dict[str, int] = {}
            best.lower_bound = max(best.lower_bound, load_lower_bound_packing(
                items.cost_array, k, lb, best.max_load, max_steps=steps, report=report
            ))
            budget.charge(packing_bound_seconds(n, report.get("steps", steps)))

    tighten_bound()

    # A subset-sum dive at the bound (few sequences per micro-batch): a plan there is optimal
    # at once. Its work is charged as estimated.
    if not proven() and not out_of_time():
        dived = dive_items(items, k, cap, max_count, best.lower_bound,
                           best.max_load if best.bins is not None else None,
                           min(DIVE_SHARE * time_limit, budget.left()),
                           deadline=budget.wall_deadline, charge=budget.charge,
                           on_cut=budget.mark_cut)
        if dived is not None:
            offer("dive", dived)

    # Without a cap KK's plan is always valid, so it can come first and be a start for local
    # search: on grouped batches (GRPO, n=2048) it is often at the bound, and after the
    # searches it no longer fitted the budget.
    kk_done = False

    def karmarkar_karp() -> list[list[int]] | None:
        """KK's plan when it ran and is valid (it is then also a start in ``starts``)."""
        nonlocal kk_done
        kk_done = True
        if kk_planned and not proven() and budget.fits(kk_seconds):
            budget.charge(kk_seconds)
            kk = karmarkar_karp_lists(items.costs, items.counts, k, max_count,
                                      budget.wall_deadline)
            if kk is None:  # the safety net stopped it (a slow or loaded machine)
                budget.mark_cut()
                return None
            kk_valid = offer("karmarkar_karp", kk)
            if searchable(kk, kk_valid):
                starts.append(("karmarkar_karp", kk))
            tighten_bound()
            return kk if kk_valid else None
        return None

    if cap is None:
        karmarkar_karp()

    # 1. LPT and local search from it, when LPT and the fallback both fit the budget. When
    # LPT breaks the cap, time is kept back for the fallback in case the search cannot
    # repair it.
    lpt_valid = False
    lpt_bins: list[list[int]] | None = None
    lpt_cost = lpt_seconds(n, k, by_tokens)
    if not proven() and lpt_cost + fallback_seconds <= time_limit and not out_of_time(lpt_cost):
        budget.charge(lpt_cost)
        # Sorted like the capped balancer's output, so local search from it retraces the
        # local_search heuristic's steps exactly (its tie-breaks follow the order within a bin).
        lpt = [sorted(b) for b in lpt_lists(items.tokens, items.costs, items.counts, k, cap,
                                            max_count)]
        lpt_bins = lpt
        lpt_valid = offer("lpt", lpt)
        tighten_bound()
        first_method, first, first_valid = "lpt", lpt, lpt_valid
        many_per_bin = n >= KK_FIRST_ITEMS_PER_BIN * k
        # KK before local search when many sequences share a micro-batch: on long-tail batches
        # it often reaches the bound outright, where local search from LPT needed more than
        # 20 ms (n=2048); with few per micro-batch KK is poor (0.5-1% above local search) and
        # its time is better spent searching. After a valid LPT, KK's time cannot cost the
        # fallback; after an LPT that broke the cap, KK runs first only if the fallback still
        # fits after it. Its plan is often valid there (its loads differ by at most one
        # sequence) and saves the repair, which left KK no time at n=2048 under tight caps.
        # (The fallback after LPT starts from LPT's plan: 1.3 us/item measured, against the
        # 2 charged for it in general, hence three quarters of its charge kept back here.)
        if not kk_done and many_per_bin and (
            lpt_valid or budget.left() >= kk_seconds + 0.75 * fallback_seconds
        ):
            kk = karmarkar_karp()
            if kk is not None and not proven() and (
                not lpt_valid
                or _excess(kk, items, best.lower_bound) < _excess(lpt, items, best.lower_bound)
            ):
                starts.remove(("karmarkar_karp", kk))
                if searchable(lpt, lpt_valid):
                    starts.append(("lpt", lpt))
                first_method, first, first_valid = "karmarkar_karp", kk, True
        # LPT broke the cap and KK did not run yet: the search stops once it has repaired
        # LPT, KK runs, and the search resumes from the better plan; only when KK is likely
        # to fit after the repair (otherwise the search's set-up is paid twice for nothing).
        kk_waits = (not first_valid and kk_planned and not kk_done and many_per_bin
                    and budget.left() >= 2 * kk_seconds)
        if not proven() and searchable(first, first_valid):
            polished, repaired, stopped = polish(
                first_method, first, None if first_valid else fallback_seconds,
                until_repaired=kk_waits,
            )
            if stopped in ("repair", "deadline", "repaired") and (
                not repaired or stopped == "repaired"
            ):
                starts.append((first_method, polished))  # cut short: resume it later
            if stopped == "repaired":
                karmarkar_karp()
            tighten_bound()

    # 2. The fallback, at once when no valid plan is known yet: it always exists from the
    # best-fit count up. Otherwise only as one more start, after the others.
    def balanced(lpt_in: list[list[int]] | None) -> list[list[int]]:
        """The capped balancer, its repair steps paid from the budget (at least a few: no
        valid plan is known when it runs), and charged for the steps it took."""
        step = repair_step_seconds(n)
        steps = max(16, min(int(max(budget.left(), 0.0) / step), 10_000))
        report: dict[str, int] = {}
        cb = capped_balance_lists(
            items.tokens, items.costs, items.counts, k, cap, max_count,
            budget.wall_deadline, lpt_in, steps, report,
        )
        budget.charge(report.get("repair_steps", 0) * step)
        if report.get("deadline"):
            budget.mark_cut()
        return cb

    def fallback() -> tuple[str, list[list[int]], bool]:
        if n <= CAPPED_BALANCE_UP_TO and lpt_bins is not None:
            # It begins with the same LPT, passed in; only its packings are new here.
            budget.charge(fallback_seconds)
            cb = balanced(lpt_bins)
            return "capped_balance", cb, offer("capped_balance", cb)
        # Without LPT's start (no time for it), the cheapest packing first.
        budget.charge(PACK_SECONDS_PER_ITEM * n)
        packed = _pack(items, k, cap, max_count)
        if offer("best_fit_decreasing", packed):
            return "best_fit_decreasing", packed, True
        if cap is not None and max_count is None:  # first fit, valid from its own count up
            budget.charge(FFD_SECONDS_PER_ITEM * n)
            ff = first_fit_tree(items.token_array, k, cap, argsort_desc(items.token_array))
            ff = fill_empty(ff, items.costs, items.counts, None)
            if offer("first_fit_decreasing", ff):
                return "first_fit_decreasing", ff, True
        if best.bins is None and (
            n <= CAPPED_BALANCE_UP_TO or not out_of_time(CAPPED_BALANCE_SECONDS_PER_ITEM * n)
        ):
            # Fewer bins than best fit needs: the capped balancer's repair may still get there.
            budget.charge(CAPPED_BALANCE_SECONDS_PER_ITEM * n)
            cb = balanced(None)
            return "capped_balance", cb, offer("capped_balance", cb)
        return "best_fit_decreasing", packed, False

    need_fallback = not lpt_valid and not proven()
    if need_fallback and best.bins is None:
        need_fallback = False
        method, packed, packed_valid = fallback()
        tighten_bound()
        if packed_valid and not proven():  # and search from it at once
            polish(method, packed)
            tighten_bound()

    # 3. Karmarkar-Karp, with what the searches left (its estimate against the budget), unless
    # it ran first (no cap). After them under a cap so that a valid plan comes first: at the
    # exact smallest count under a tight cap, KK first left LPT's repair and the fallback no
    # time at 20 ms (n=1024, k=179: no plan); and with its share kept back, local search from
    # LPT, which usually beats it, was starved.
    if not kk_done:
        karmarkar_karp()

    tighten_bound()

    # 4. The other starts, the least load above the bound first (the least work left).
    if len(starts) > 1 and not out_of_time():  # its key is a pass over the items
        starts.sort(key=lambda row: _excess(row[1], items, best.lower_bound))
    for method, bins in starts:
        if proven() or out_of_time():
            break
        polish(method, bins)
    if need_fallback and not proven() and not out_of_time(fallback_seconds):
        method, packed, packed_valid = fallback()
        if packed_valid:
            polish(method, packed)

    # Optimal re-splits of the heaviest micro-batch with a partner (few per micro-batch),
    # charged the subsets it scored.
    if best.bins is not None and not proven() and not out_of_time() and not items.shift:
        report: dict[str, int] = {}
        offer(best.method + "+resplit", resplit_pairs(
            items.tokens, items.costs, items.counts, best.bins, cap, max_count,
            lower_bound=best.lower_bound, deadline=budget.wall_deadline, report=report,
            max_work=min(resplit_work(time_limit), resplit_work(max(budget.left(), 0.0))),
        ))
        budget.charge(report.get("work", 0) / SUBSETS_PER_SECOND)
        if report.get("deadline"):
            budget.mark_cut()

    if best.bins is None and hints:
        # The least-violating split: a start for CP-SAT.
        best.hint = min(hints, key=lambda bins: _violation(bins, items, cap))
    if budget.left() <= 0:
        best.notes.append("heuristics stopped by the time limit")
    return best


def _load_bound(items: Items, k: int, max_count: int | None) -> int:
    """The load lower bound, exact: int64 on the fast path, Python ints beyond it."""
    if not items.shift:
        counts = None if items.members is None else items.counts  # None: all ones
        return load_lower_bound(items.cost_array, k, counts=counts, max_count=max_count)
    c = sorted(items.exact, reverse=True)  # exact Python ints: the same bound, no wrap
    bound = max(-(-sum(c) // k), c[0])
    if len(c) > k:
        bound = max(bound, c[k - 1] + c[k])
    if max_count is not None and max_count > 1 and all(x == 1 for x in items.counts):
        bound = max(bound, c[0] + sum(c[len(c) - max_count + 1 :]))
    return bound


def _count_bound(items: Items, cap: int) -> int:
    """The bin-packing bound on the count, computed once per call (the count search and
    every fixed k ask for it)."""
    if cap not in items.memo:
        items.memo[cap] = min_bins_lower_bound(items.token_array, cap)
    return items.memo[cap]


def _fixed_k(
    items: Items,
    k: int,
    problem: Problem,
    budget: Budget,
    time_limit: float,
    engine: str,
    options: SolverOptions,
    start: list[list[int]] | None = None,
    start_method: str = "best_fit_decreasing",
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
    lb = _load_bound(items, k, max_count)
    def check_count(need: int) -> None:
        if need > k:
            raise InfeasibleError(
                f"the token sums need at least {need} micro-batches under cap={cap} "
                f"(bin-packing bound), but k={k}: use k >= {need} or k=None",
                proven=True,
            )

    if cap is not None:
        # Large batches: the total first (one sum), the full count bound (a sort, ~0.13
        # us/item) only when the heuristics find no plan, since a plan found proves the
        # count enough by itself.
        if n_items <= CAPPED_BALANCE_UP_TO:
            check_count(_count_bound(items, cap))
        else:
            # An int64 sum is exact: make_problem refuses totals from 2**62 up.
            check_count(items.memo.get(cap, -(-int(items.token_array.sum()) // cap)))
        if problem.cost == Cost() and lb > cap:
            raise InfeasibleError(
                f"some micro-batch must hold at least {lb} tokens with k={k}, over cap={cap}: "
                "raise k or the cap",
                proven=True,
            )
    best = _heuristic_plan(items, k, cap, max_count, lb, budget, time_limit, start, start_method)
    if best.bins is None and cap is not None:
        check_count(_count_bound(items, cap))
    if engine != "heuristics" and (best.bins is None or best.max_load > best.lower_bound):
        if items.shift:  # CP-SAT and the LP take int64 coefficients; scaled ones prove nothing
            best.notes.append("cp-sat skipped: costs beyond int64 (heuristics work exactly)")
        else:
            # The LP bound, the dive and the exact search (few sequences per micro-batch).
            best = prove_items(items, k, cap, max_count, best, budget, time_limit)
            if best.bins is None or best.max_load > best.lower_bound:
                best = solve_items(
                    items, k, cap, max_count, best, budget, time_limit, options,
                    engine == "cp-sat",
                )
    return best


def _search_k(
    items: Items,
    problem: Problem,
    budget: Budget,
    time_limit: float,
    engine: str,
    options: SolverOptions,
) -> tuple[int, BestPlan, int, str]:
    """Smallest k with a valid plan: bounds give the floor, best fit decreasing the ceiling.

    A count below the ceiling is tried only while an attempt's estimated cost fits the time
    left; then the search goes straight to the ceiling, whose best-fit packing is a valid plan
    at once (so the answer never waits for the clock at any n)."""
    cap = problem.cap
    n_items = len(items)
    if cap is None:
        return 1, _fixed_k(items, 1, problem, budget, time_limit, engine, options), 1, "optimal"
    floor = max(1, _count_bound(items, cap))
    budget.charge(PACK_SECONDS_PER_ITEM * n_items)
    bfd = best_fit_with_room(items.token_array, None, cap)[0]
    method = "best_fit_decreasing"
    if budget.fits(FFD_SECONDS_PER_ITEM * n_items):  # the two rarely differ: both if cheap
        budget.charge(FFD_SECONDS_PER_ITEM * n_items)
        ffd = first_fit_tree(items.token_array, None, cap, argsort_desc(items.token_array))
        if len(ffd) < len(bfd):
            bfd, method = ffd, "first_fit_decreasing"
    ceiling = len(bfd)
    attempt_seconds = (LPT_SECONDS_PER_ITEM + SEARCH_SETUP_SECONDS_PER_ITEM) * n_items
    attempt_seconds += fallback_cost_seconds(n_items)
    last_error: InfeasibleError | None = None
    for k in range(floor, n_items + 1):
        if problem.equal_size and sum(items.counts) % k:
            floor += k == floor  # no equal split at this count: as good as proven
            continue
        at_ceiling = k == ceiling and not problem.equal_size
        if k > ceiling and not problem.equal_size:
            break
        out_of_time = not budget.fits(attempt_seconds)
        if out_of_time and not at_ceiling and not problem.equal_size:
            continue  # out of time: straight to the count best fit decreasing achieves
        try:
            # Below the ceiling a heuristic miss is not proof: CP-SAT decides when it can.
            best = _fixed_k(
                items, k, problem, budget, time_limit, engine, options,
                start=bfd if at_ceiling else None, start_method=method,
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


@pauses_gc
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
        time_limit: budget in seconds for the whole call. By default it is spent as estimated
            work, so the same input gives the same plan on any machine; the wall clock is a
            safety net (``plan.notes`` says when it cut). See ``SolverOptions.timing``.
        cost: what to balance: "tokens", "attention" (24576*l + l^2) or ``Cost(a, b)``. The cap
            always applies to tokens.
        equal_size: every micro-batch gets the same number of sequences (n divisible by k).
        groups: lists of indices that must share a micro-batch.
        oversize: "error" (default) rejects a sequence over the cap; "alone" gives each such
            sequence a micro-batch of its own (listed in ``Plan.oversize``).
        engine: "auto" (heuristics, then CP-SAT while unproven), "heuristics" (no model), or
            "cp-sat" (build the model even when it looks too large for the budget).
        options: a ``SolverOptions``: CP-SAT pass-through settings and the timing mode.

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
    if options is None:
        options = SolverOptions()
    elif not isinstance(options, SolverOptions):
        raise TypeError(
            f"options must be a SolverOptions, got {type(options).__name__}: pass "
            "SolverOptions(**your_dict)"
        )
    problem = make_problem(
        lengths, k, cap, cost=cost, equal_size=equal_size, groups=groups, oversize=oversize
    )
    # The engines stop early enough to leave time for checking and assembling the plan
    # (measured: 0.6 ms at n=2048) and for the last local-search step to end.
    finish_reserve = 0.001 + 0.5e-6 * len(problem.tokens)
    mode = options.mode
    budget = Budget(
        limit=float(time_limit) - finish_reserve,
        wall_deadline=None
        if mode == "strict"
        else t0 + float(time_limit) - finish_reserve + SAFETY_NET_SLACK,
        by_clock=mode == "clock",
    )
    # Checking the input, building the items and bounds: charged up front, by size.
    budget.charge(FIXED_SECONDS_PER_ITEM * len(problem.tokens))
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
            _fixed_k(items, k_items, problem, budget, time_limit, engine, options)
            if len(items)
            else BestPlan([], 0, 0, "oversize_only", [])
        )
    elif len(items):
        k_items, best, floor, k_status = _search_k(
            items, problem, budget, float(time_limit), engine, options
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
    if budget.cut:
        best.notes.append(
            "the wall-clock safety net stopped a step before its work budget ran out (a "
            "loaded machine): this plan may differ from another run's"
        )
    return finish_plan(problem, items, best, k_items + n_over, k_status, k_floor, t0)
