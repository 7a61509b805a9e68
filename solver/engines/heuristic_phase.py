"""partition's heuristic phase: constructions, local search, the dive and the re-split, in the
order that pays off soonest, under the call's work budget.

It returns the best valid plan it found (or the least-violating split, as a start for CP-SAT);
:func:`seqpart.solver.partition` decides what runs after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
from seqpart.solver.engines.budget_costs import (
    CAPPED_BALANCE_SECONDS_PER_ITEM,
    CAPPED_BALANCE_UP_TO,
    FFD_SECONDS_PER_ITEM,
    KK_FIRST_ITEMS_PER_BIN,
    KK_SHARE,
    PACK_SECONDS_PER_ITEM,
    SEARCH_SETUP_SECONDS_PER_ITEM,
    fallback_cost_seconds,
    karmarkar_karp_seconds,
    lpt_seconds,
    packing_bound_seconds,
    packing_bound_steps,
)
from seqpart.solver.engines.prove import DIVE_SHARE, dive_items
from seqpart.solver.engines.resplit import SUBSETS_PER_SECOND, resplit_pairs
from seqpart.solver.engines.resplit import work_for as resplit_work
from seqpart.solver.options import BestPlan, Budget
from seqpart.solver.problem import Items


def measure_bins(
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


def valid_bins(
    bins: Sequence[Sequence[int]], k: int, items: Items, cap: int | None, max_count: int | None
) -> bool:
    return measure_bins(bins, k, items, cap, max_count) is not None


def violation(bins: Sequence[Sequence[int]], items: Items, cap: int | None) -> tuple[int, int]:
    """(empty bins, tokens over the cap): how far a split is from valid."""
    empty = sum(1 for b in bins if not b)
    if cap is None:
        return empty, 0
    tok = items.bin_sums(bins, items.token_array)
    return empty, int(np.maximum(tok - cap, 0).sum())


def excess(bins: Sequence[Sequence[int]], items: Items, lb: int) -> int:
    """Total load above the lower bound: the work local search has left to do."""
    loads = items.bin_sums(bins, items.cost_array)
    return int(sum(max(0, int(x) - lb) for x in loads))


def pack_fallback(items: Items, k: int, cap: int | None, max_count: int | None) -> list[list[int]]:
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


def heuristic_plan(
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
        return is_valid or (by_tokens and valid_bins(bins, k, items, None, max_count))

    def out_of_time(margin: float = 0.0) -> bool:
        return not budget.fits(margin)


    best = BestPlan(None, 0, lb, "", [])
    hints: list[list[list[int]]] = []  # invalid splits: the least violating is a CP-SAT hint

    def offer(method: str, bins: list[list[int]]) -> bool:
        """Keep ``bins`` if it is the best valid plan so far; say whether it is valid."""
        load = measure_bins(bins, k, items, cap, max_count)
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
                or excess(kk, items, best.lower_bound) < excess(lpt, items, best.lower_bound)
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
        packed = pack_fallback(items, k, cap, max_count)
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
        starts.sort(key=lambda row: excess(row[1], items, best.lower_bound))
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
        best.hint = min(hints, key=lambda bins: violation(bins, items, cap))
    if budget.left() <= 0:
        best.notes.append(
            "heuristics stopped: the clock reached the time limit" if budget.by_clock else
            f"heuristics stopped: their work budget ran out ({budget.spent:.3g}s of estimated "
            f"work for time_limit={time_limit:g}s; work is counted, not the clock, so a call can "
            "end before time_limit and the same input gives the same plan)")
    return best
