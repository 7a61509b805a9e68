"""partition's heuristic phase: constructions, local search, the dive and the re-split, in the
order that pays off soonest, under the call's work budget.

It returns the best valid plan it found (or the least-violating split, as a start for CP-SAT);
:func:`seqpart.solver.partition` decides what runs after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...heuristics.bounds import packing_bound
from ...heuristics.kernels import (
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
from ..options import BestPlan, Budget, Subproblem
from ..problem import Items, measure_bins
from ..tuning import (
    CAPPED_BALANCE_SECONDS_PER_ITEM,
    EXCHANGE_SHARE,
    EXCHANGES_PER_SECOND,
    FFD_SECONDS_PER_ITEM,
    HEURISTIC_DIVE_SHARE,
    KK_SHARE,
    PACK_SECONDS_PER_ITEM,
    SEARCH_SETUP_SECONDS_PER_ITEM,
    SUBSETS_PER_SECOND,
)
from .budget_costs import (
    CAPPED_BALANCE_UP_TO,
    KK_FIRST_ITEMS_PER_BIN,
    fallback_cost_seconds,
    karmarkar_karp_seconds,
    lpt_seconds,
    packing_bound_seconds,
    packing_bound_steps,
)
from .prove import dive_items
from .resplit import (
    exchange_items,
    improve_by_groups,
    resplit_pairs,
)
from .resplit import work_for as resplit_work


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


def heuristic_plan(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """Constructions and local search, in the order that pays off soonest (the phases of
    :meth:`_HeuristicPhase.run`), from the subproblem's bound. Every optional step runs only
    when its measured per-item cost fits the budget left, and is charged that cost (local
    search: the work it did), so the call stays near its limit at any n and, outside "clock"
    timing, takes the same steps on every machine. Starts from ``sub.start``, else from the
    incumbent's plan when it has one. Returns the best valid plan, or with none the
    least-violating split as a hint."""
    start, method = sub.start, sub.start_method
    if start is None and best.bins is not None:
        start, method = best.bins, best.method
    phase = _HeuristicPhase(sub, budget)
    return phase.run(start, method)


class _HeuristicPhase:
    """The heuristic phase's state: the best plan so far, the starts still to search from, and
    the steps (bound, constructions, searches) that each phase combines."""

    def __init__(self, sub: Subproblem, budget: Budget) -> None:
        self.sub = sub
        items, k = sub.items, sub.k
        self.items, self.k, self.cap, self.max_count = items, k, sub.cap, sub.max_count
        lb = sub.lower_bound
        self.lb, self.budget, self.time_limit = lb, budget, budget.time_limit
        self.n = n = len(items)
        self.by_tokens = items.costs is items.tokens or items.costs == items.tokens
        self.fallback_seconds = fallback_cost_seconds(n, self.by_tokens)
        self.kk_seconds = karmarkar_karp_seconds(n, k)
        self.kk_planned = self.kk_seconds < KK_SHARE * self.time_limit
        self.best = sub.unplanned()
        self.hints: list[list[list[int]]] = []  # invalid splits: the least violating is a hint
        self.starts: list[tuple[str, list[list[int]]]] = []  # still to search from
        self.kk_done = False
        self.tightened = False
        self.lpt_bins: list[list[int]] | None = None
        self.lpt_valid = False
        self.need_fallback = False

    def run(self, start: list[list[int]] | None, start_method: str) -> BestPlan:
        """The phases, in order; each runs only while no plan is proven and budget is left."""
        if start is not None:
            self.offer(start_method, start)
            self.starts.append((start_method, start))
        self.tighten_bound()
        self.dive()  # 0. a subset-sum dive at the bound: optimal at once when it lands
        if self.cap is None:
            self.karmarkar_karp()  # without a cap KK is always valid: first, and a start
        self.lpt_then_search()  # 1. LPT (and KK when many share a micro-batch), searched
        self.fallback_when_nothing_valid()  # 2. the packing that always exists, searched
        if not self.kk_done:
            self.karmarkar_karp()  # 3. KK with what the searches left
        self.tighten_bound()
        self.search_other_starts()  # 4. the other starts, least excess first; the fallback
        self.resplit()  # 5. optimal re-splits of the heaviest micro-batch with a partner
        self.resplit_groups()  # 5b. and with two or three, by exact packing (few per bin)
        self.exchange()  # 6. one-for-two exchanges (non-token costs under a cap)
        best = self.best
        if best.bins is None and self.hints:
            # The least-violating split: a start for CP-SAT.
            best.hint = min(self.hints, key=lambda bins: violation(bins, self.items, self.cap))
        if self.budget.left() <= 0:  # which budget ran out: a call can end before time_limit
            best.notes.append(
                "heuristics stopped: the clock reached the time limit" if self.budget.by_clock else
                f"heuristics stopped: their work budget ran out ({self.budget.used:.3g}s of "
                f"estimated work for time_limit={self.time_limit:g}s; work is counted, not the "
                "clock, so a call can end before time_limit and the same input gives the same plan)")
        return best

    # ----------------------------------------------------------------- shared steps

    def searchable(self, bins: list[list[int]], is_valid: bool) -> bool:
        # A start that only breaks the cap is searched from when loads are tokens: the search
        # lowers the heaviest (most over-cap) bin first and gets under the cap when it can.
        return is_valid or (self.by_tokens and valid_bins(bins, self.k, self.items, None,
                                                          self.max_count))

    def out_of_time(self, margin: float = 0.0) -> bool:
        return not self.budget.fits(margin)

    def offer(self, method: str, bins: list[list[int]]) -> bool:
        """Keep ``bins`` if it is the best valid plan so far; say whether it is valid."""
        load = measure_bins(bins, self.k, self.items, self.cap, self.max_count)
        if load is None:
            self.hints.append(bins)
            return False
        best = self.best
        if best.bins is None or load < best.max_load:
            best.bins, best.max_load, best.method = bins, load, method
        return True

    def proven(self) -> bool:
        return self.best.bins is not None and self.best.max_load <= self.best.lower_bound

    def polish(
        self, method: str, bins: list[list[int]], keep_back: float | None = None,
        until_repaired: bool = False,
    ) -> tuple[list[list[int]], bool, str]:
        """Local search from ``bins``; ``keep_back``: seconds of budget to leave for the
        fallback when the start breaks the cap and the search cannot repair it in time;
        ``until_repaired``: stop once such a start is under the cap ("repaired"; it can be
        resumed). Returns the result, whether it is valid, and why the search stopped."""
        items, budget = self.items, self.budget
        if self.out_of_time(SEARCH_SETUP_SECONDS_PER_ITEM * self.n):
            return bins, False, "budget"
        by_clock = budget.by_clock
        spendable = budget.left()
        work = None if by_clock else max(spendable, 0.0) / WORK_SECONDS
        repair_work = repair_by = None
        if keep_back is not None:
            if not by_clock:
                repair_work = max(spendable - keep_back, 0.0) / WORK_SECONDS
            # On the wall clock too (the safety net): the fallback must still fit after it.
            if budget.deadline is not None:
                repair_by = budget.deadline - keep_back
        searched = improve_lists(
            items.tokens, items.costs, items.counts, bins, self.cap, self.max_count,
            budget.deadline, None if items.shift else self.best.lower_bound,
            repair_deadline=repair_by, repair_work=None if repair_work is None else int(repair_work),
            max_work=None if work is None else int(work), until_repaired=until_repaired,
        )
        polished, stopped = searched.bins, searched.stopped
        budget.charge(searched.work * WORK_SECONDS)
        if stopped == "deadline":
            budget.mark_cut()
        elif stopped in ("steps", "repair"):  # its work allowance ended it
            budget.mark_ran_out()
        return polished, self.offer(method + "+local_search", polished), stopped

    def tighten_bound(self) -> None:
        # Many items over half the load cannot share a micro-batch: a bin-packing bound sees
        # it. Searched up to the best load, so it waits for the first valid plan; once is enough.
        best, budget, n = self.best, self.budget, self.n
        if self.items.shift:  # the packing bound works in int64: exact costs beyond it skip it
            return
        if self.tightened or best.bins is None or best.max_load <= self.lb:
            return
        # A binary search over [lb, best load]: as many steps as the budget pays for (a
        # stopped search still gives a valid bound), charged for the steps it made.
        steps = min(2 + (best.max_load - self.lb).bit_length(),
                    packing_bound_steps(n, budget.left()))
        if steps < 2 + (best.max_load - self.lb).bit_length():
            budget.mark_ran_out()  # a shorter search than the bound's full one
        if steps >= 2 and budget.fits(packing_bound_seconds(n, steps)):
            self.tightened = True
            found = packing_bound(self.items.cost_array, self.k, self.lb, best.max_load, steps)
            best.raise_bound(found.bound, "packing")
            budget.charge(packing_bound_seconds(n, found.steps))

    def karmarkar_karp(self) -> list[list[int]] | None:
        """KK's plan when it ran and is valid (it is then also a start in ``starts``)."""
        self.kk_done = True
        budget, items = self.budget, self.items
        if not self.kk_planned and not self.proven():
            budget.mark_ran_out()  # too dear for this time limit
        if self.kk_planned and not self.proven() and budget.fits(self.kk_seconds):
            budget.charge(self.kk_seconds)
            kk = karmarkar_karp_lists(items.costs, items.counts, self.k, self.max_count,
                                      budget.deadline)
            if kk is None:  # the safety net stopped it (a slow or loaded machine)
                budget.mark_cut()
                return None
            kk_valid = self.offer("karmarkar_karp", kk)
            if self.searchable(kk, kk_valid):
                self.starts.append(("karmarkar_karp", kk))
            self.tighten_bound()
            return kk if kk_valid else None
        return None

    def balanced(self, lpt_in: list[list[int]] | None) -> list[list[int]]:
        """The capped balancer, its repair steps paid from the budget (at least a few: no
        valid plan is known when it runs), and charged for the steps it took."""
        budget, items = self.budget, self.items
        step = repair_step_seconds(self.n)
        steps = max(16, min(int(max(budget.left(), 0.0) / step), 10_000))
        cb = capped_balance_lists(
            items.tokens, items.costs, items.counts, self.k, self.cap, self.max_count,
            budget.deadline, lpt_in, steps,
        )
        budget.charge(cb.steps * step)
        if cb.cut:
            budget.mark_cut()
        return cb.bins

    def fallback(self) -> tuple[str, list[list[int]], bool]:
        """The packing that always exists from the best-fit count up: the capped balancer after
        LPT up to CAPPED_BALANCE_UP_TO items; otherwise best fit decreasing into k bins, then
        first fit decreasing, then the capped balancer."""
        budget, items, n, cap = self.budget, self.items, self.n, self.cap
        if n <= CAPPED_BALANCE_UP_TO and self.lpt_bins is not None:
            # It begins with the same LPT, passed in; only its packings are new here.
            budget.charge(self.fallback_seconds)
            cb = self.balanced(self.lpt_bins)
            return "capped_balance", cb, self.offer("capped_balance", cb)
        # Without LPT's start (no time for it), the cheapest packing first.
        budget.charge(PACK_SECONDS_PER_ITEM * n)
        packed = pack_fallback(items, self.k, cap, self.max_count)
        if self.offer("best_fit_decreasing", packed):
            return "best_fit_decreasing", packed, True
        if cap is not None and self.max_count is None:  # first fit, valid from its own count up
            budget.charge(FFD_SECONDS_PER_ITEM * n)
            ff = first_fit_tree(items.token_array, self.k, cap, argsort_desc(items.token_array))
            ff = fill_empty(ff, items.costs, items.counts, None)
            if self.offer("first_fit_decreasing", ff):
                return "first_fit_decreasing", ff, True
        if self.best.bins is None and (
            n <= CAPPED_BALANCE_UP_TO or not self.out_of_time(CAPPED_BALANCE_SECONDS_PER_ITEM * n)
        ):
            # Fewer bins than best fit needs: the capped balancer's repair may still get there.
            budget.charge(CAPPED_BALANCE_SECONDS_PER_ITEM * n)
            cb = self.balanced(None)
            return "capped_balance", cb, self.offer("capped_balance", cb)
        return "best_fit_decreasing", packed, False

    # ----------------------------------------------------------------- phases

    def dive(self) -> None:
        """A subset-sum dive at the bound (few sequences per micro-batch): a plan there is
        optimal at once. Its work is charged as estimated."""
        best, budget = self.best, self.budget
        if self.proven() or self.out_of_time():
            return
        dived = dive_items(self.items, self.k, self.cap, self.max_count, best.lower_bound,
                           best.max_load if best.bins is not None else None,
                           budget, min(HEURISTIC_DIVE_SHARE * self.time_limit, budget.left()))
        if dived is not None:
            self.offer("dive", dived)

    def lpt_then_search(self) -> None:
        """Capped LPT (the cheapest construction), then local search from it, when LPT and the
        fallback both fit the budget. When loads are tokens the search also starts from an LPT
        that breaks the cap, with time kept back for the fallback in case it cannot repair it.
        Up to CAPPED_BALANCE_UP_TO items this and the fallback are the local_search heuristic's
        own path, so partition is never behind it when the budget holds that path."""
        items, budget, n, k = self.items, self.budget, self.n, self.k
        lpt_cost = lpt_seconds(n, k, self.by_tokens)
        if not self.proven() and lpt_cost + self.fallback_seconds > self.time_limit:
            budget.mark_ran_out()  # too dear for this time limit
        if (self.proven() or lpt_cost + self.fallback_seconds > self.time_limit
                or self.out_of_time(lpt_cost)):
            return
        budget.charge(lpt_cost)
        # Sorted like the capped balancer's output, so local search from it retraces the
        # local_search heuristic's steps exactly (its tie-breaks follow the order within a bin).
        lpt = [sorted(b) for b in lpt_lists(items.tokens, items.costs, items.counts, k, self.cap,
                                            self.max_count)]
        self.lpt_bins = lpt
        self.lpt_valid = lpt_valid = self.offer("lpt", lpt)
        self.tighten_bound()
        first_method, first, first_valid = self.kk_before_search(lpt, lpt_valid)
        # LPT broke the cap and KK did not run yet: the search stops once it has repaired
        # LPT, KK runs, and the search resumes from the better plan; only when KK is likely
        # to fit after the repair (otherwise the search's set-up is paid twice for nothing).
        kk_waits = (not first_valid and self.kk_planned and not self.kk_done
                    and n >= KK_FIRST_ITEMS_PER_BIN * k and budget.left() >= 2 * self.kk_seconds)
        if self.proven() or not self.searchable(first, first_valid):
            return
        polished, repaired, stopped = self.polish(
            first_method, first, None if first_valid else self.fallback_seconds,
            until_repaired=kk_waits,
        )
        if stopped in ("repair", "deadline", "repaired") and (not repaired or stopped == "repaired"):
            self.starts.append((first_method, polished))  # cut short: resume it later
        if stopped == "repaired":
            self.karmarkar_karp()
        self.tighten_bound()

    def kk_before_search(
        self, lpt: list[list[int]], lpt_valid: bool
    ) -> tuple[str, list[list[int]], bool]:
        """Which plan the first search starts from: LPT's, or KK's when many sequences share a
        micro-batch. On long-tail batches KK often reaches the bound outright, where local
        search from LPT needed more than 20 ms (n=2048); with few per micro-batch KK is poor
        (0.5-1% above local search) and its time is better spent searching. After a valid LPT,
        KK's time cannot cost the fallback; after an LPT that broke the cap, KK runs first only
        if the fallback still fits after it (its plan is often valid there, and saves the
        repair). The fallback after LPT starts from LPT's plan: 1.3 us/item measured, against
        the 2 charged for it in general, hence three quarters of its charge kept back here."""
        many_per_bin = self.n >= KK_FIRST_ITEMS_PER_BIN * self.k
        if self.kk_done or not many_per_bin or not (
            lpt_valid or self.budget.left() >= self.kk_seconds + 0.75 * self.fallback_seconds
        ):
            return "lpt", lpt, lpt_valid
        kk = self.karmarkar_karp()
        lb = self.best.lower_bound
        if kk is not None and not self.proven() and (
            not lpt_valid or excess(kk, self.items, lb) < excess(lpt, self.items, lb)
        ):
            self.starts.remove(("karmarkar_karp", kk))
            if self.searchable(lpt, lpt_valid):
                self.starts.append(("lpt", lpt))
            return "karmarkar_karp", kk, True
        return "lpt", lpt, lpt_valid

    def fallback_when_nothing_valid(self) -> None:
        """The fallback at once when no valid plan is known yet (it always exists from the
        best-fit count up), then a search from it; otherwise it waits as one more start."""
        self.need_fallback = not self.lpt_valid and not self.proven()
        if not self.need_fallback or self.best.bins is not None:
            return
        self.need_fallback = False
        method, packed, packed_valid = self.fallback()
        self.tighten_bound()
        if packed_valid and not self.proven():
            self.polish(method, packed)
            self.tighten_bound()

    def search_other_starts(self) -> None:
        """Local search from the remaining starts, the least load above the bound first (the
        least work left), then from the fallback if it has not run yet, while time remains."""
        starts = self.starts
        if len(starts) > 1 and not self.out_of_time():  # its key is a pass over the items
            starts.sort(key=lambda row: excess(row[1], self.items, self.best.lower_bound))
        for method, bins in starts:
            if self.proven() or self.out_of_time():
                break
            self.polish(method, bins)
        if self.need_fallback and not self.proven() and not self.out_of_time(self.fallback_seconds):
            method, packed, packed_valid = self.fallback()
            if packed_valid:
                self.polish(method, packed)

    def resplit(self) -> None:
        """Optimal re-splits of the heaviest micro-batch with a partner (few per micro-batch),
        charged the subsets it scored."""
        best, budget, items = self.best, self.budget, self.items
        if best.bins is None or self.proven() or self.out_of_time() or items.shift:
            return
        work = Budget(
            min(resplit_work(self.time_limit), resplit_work(max(budget.left(), 0.0))),
            budget.deadline)
        self.offer(best.method + "+resplit", resplit_pairs(
            items.tokens, items.costs, items.counts, best.bins, self.cap, self.max_count,
            lower_bound=best.lower_bound, work=work,
        ))
        budget.charge(work.used / SUBSETS_PER_SECOND)
        if work.cut:
            budget.mark_cut()
        if work.ran_out:
            budget.mark_ran_out()

    def resplit_groups(self) -> None:
        if not self.proven() and not self.out_of_time():
            self.best = improve_by_groups(self.sub, self.best, self.budget)

    def exchange(self) -> None:
        """Exchanges of one sequence for two between the heaviest micro-batch and another, when
        the cost is not tokens and a cap binds (local search swaps one for one only), charged
        the candidates it scored; at most ``EXCHANGE_SHARE`` of the time limit."""
        best, budget, items = self.best, self.budget, self.items
        if (best.bins is None or self.proven() or self.out_of_time() or items.shift
                or self.by_tokens or self.cap is None or self.max_count is not None):
            return
        seconds = min(EXCHANGE_SHARE * self.time_limit, max(budget.left(), 0.0))
        work = Budget(int(EXCHANGES_PER_SECOND * seconds), budget.deadline)
        self.offer(best.method + "+exchange", exchange_items(
            items.tokens, items.costs, best.bins, self.cap, lower_bound=best.lower_bound,
            work=work,
        ))
        budget.charge(work.used / EXCHANGES_PER_SECOND)
        if work.cut:
            budget.mark_cut()
        if work.ran_out:
            budget.mark_ran_out()
