"""The proof phase between the heuristics and CP-SAT: LP bound, subset-sum dive, exact search.

All three are for the long-CoT regime (a few long sequences per micro-batch), where CP-SAT's
own bound barely moves and its search rarely closes the gap. The LP bound (``lp_bound``) proves
plans optimal and batches infeasible; the dive and the exact search (``exact``) start at that
bound and usually find a plan there, which is then optimal. Whatever stays open goes to CP-SAT
with the raised bound as its objective's lower bound.

Work budgets scale with the call's ``time_limit`` (the same limit gives the same work, whatever the
machine's speed); the deadline is only a safety net. The shares of the limit are first choices
checked on the bench and long-CoT batches (docs/long-sequences.md), not
tuned.
"""

from __future__ import annotations

from ..errors import InfeasibleError
from ..options import BestPlan, Budget, Subproblem
from ..problem import Items
from ..tuning import (
    DIVE_PROOF_SHARE,
    DIVE_WORDS_PER_SECOND,
    EXACT_NODES_PER_SECOND,
    FAST_EXACT_NODES_PER_SECOND,
    FAST_LP_WORK_PER_SECOND,
    FLUID_SECONDS_PER_VARIABLE,
    FLUID_SHARE,
    LOAD_SEARCH_SHARE,
    LP_SHARE,
    LP_WORK_PER_SECOND,
)
from ..tuning import PROVE_EXACT_SHARE as EXACT_SHARE
from .branch_bound import (
    CLOCK_EVERY,
    DIVE_POOL,
    DIVE_WORDS_PER_ITEM_LEFT,
    DIVE_WORDS_PER_POOL_ITEM,
    dive,
    minimise_max_load,
)
from .load_search import NOTE as NOTE_LOADS
from .load_search import affordable as loads_affordable
from .load_search import applies as loads_apply
from .load_search import search_loads
from .lp_bound import (
    fluid_load_bound,
    iteration_work,
    lp_infeasible,
    lp_load_bound,
)

#: Below this many items per micro-batch on average the phase runs; above it counting bounds
#: and local search already close the gap, and bin completion's branching explodes.
MAX_ITEMS_PER_BIN = 8
#: The dive before local search runs up to this many items per micro-batch on average.
DIVE_MAX_ITEMS_PER_BIN = 16
#: The LP runs only when its budget holds this many column-generation iterations (fewer
#: rarely move the bound).
LP_MIN_ITERATIONS = 20
#: The phase is skipped with less than this left before the deadline (seconds).
MIN_SECONDS_LEFT = 0.002
#: Notes naming the bound that proved a plan (``Plan.notes``), for studies.
NOTE_LP = "bound: gilmore-gomory LP"
NOTE_EXACT = "bound: exact search"
NOTE_FLUID = "bound: fluid LP (heaviest sequences whole, the others split)"


def dive_items(
    items: Items, k: int, cap: int | None, max_count: int | None, lower: int,
    upper: int | None, budget: Budget, seconds: float, attempts: int = 1,
    skip_first: bool = False, few_per_bin_only: bool = True,
) -> list[list[int]] | None:
    """The first plan the subset-sum dive finds at loads from ``lower`` up (below ``upper``).

    Only for cost = tokens without equal sizes (the dive's bitsets run over tokens). Tries
    ``lower``, then ``lower`` + 1, 2, 4, ... (``attempts`` loads in all): a plan at the bound
    is proven optimal at once. ``skip_first``: ``lower`` was tried already (by the heuristics).
    ``seconds`` is its allowance, turned into counted work (the same allowance gives the same
    decisions on every machine); it is skipped when one attempt's estimated work is over it, so
    it costs nothing where it cannot finish, and with ``few_per_bin_only`` (before local search)
    unless micro-batches hold at most ``DIVE_MAX_ITEMS_PER_BIN`` items on average: with more,
    local search is close already and needs the time. ``budget``, the call's, is charged the
    estimated seconds of each attempt made, told when the clock (not the work) ended an attempt
    (the result may then differ from run to run, :meth:`Budget.mark_cut`) and when the
    allowance left the dive out or ended its attempts (:meth:`Budget.mark_ran_out`); its wall
    deadline is a safety net only.
    """
    if max_count is not None or items.tokens != items.costs:
        return None
    n = len(items)
    if few_per_bin_only and n > DIVE_MAX_ITEMS_PER_BIN * k:
        return None
    limit = min(cap, upper or cap) if cap is not None else (upper or sum(items.tokens))
    words = int(DIVE_WORDS_PER_SECOND * max(seconds, 0.0))
    # One bitset pass per bin over its pool of candidates, and the list of items left
    # rebuilt per bin (see exact.dive).
    estimate = k * (
        min(n, DIVE_POOL) * (limit // 64 + 1 + DIVE_WORDS_PER_POOL_ITEM)
        + DIVE_WORDS_PER_ITEM_LEFT * n // 2
    )
    if estimate > words:
        budget.mark_ran_out()
        return None
    # The allowance on the clock too, as a safety net (a loaded machine shifts words slower);
    # without a deadline ("strict" timing) no clock decides anything.
    work = budget.allowance(words, seconds)
    step = 1 if skip_first else 0
    z = lower + step
    for _ in range(attempts):
        if (upper is not None and z >= upper) or work.left() <= 0:
            if work.left() <= 0:
                budget.mark_ran_out()
            break
        before = work.used
        bins = dive(items.tokens, k, z, cap, work)
        # The work it did: a dive that fails early costs little.
        budget.charge((work.used - before) / DIVE_WORDS_PER_SECOND)
        if bins is not None:
            return bins
        if work.past_deadline():
            budget.mark_cut()
            break
        step = 1 if step == 0 else step * 2
        z = lower + step
    return None


def prove_items(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """Raise ``best.lower_bound`` with the LP, then search exactly from it; may raise
    :class:`InfeasibleError` (proven) when k micro-batches cannot hold the batch.

    The phases in order, each stopping the proof once the plan meets its bound: the fluid LP,
    the Gilmore-Gomory LP, the subset-sum dive, then (few sequences per micro-batch) the load
    search or else the exact search. Each gets its share of the call's ``time_limit`` (at most what
    ``budget`` has left) as counted work, and is charged the work it did; the budget's wall
    deadline is a safety net only.
    """
    if not budget.fits(MIN_SECONDS_LEFT):
        return best
    items, k, cap, max_count = sub.items, sub.k, sub.cap, sub.max_count
    time_limit = budget.time_limit

    def allowance(share: float) -> float:
        return max(0.0, min(share * time_limit, budget.left()))

    _fluid(items, k, cap, best, budget, allowance(FLUID_SHARE))
    if _proven(best):
        return best
    # Where the load search will run, its waste-limited LP bisects the loads with a stronger
    # relaxation than the plain one, so the plain LP is left out and its share goes to the
    # load search (the plain LP's test at the plan's load alone took 127 ms of a 1 s call on
    # adversarial/16, unconverged, where the load search then proved the optimum in 0.4 s).
    loads_next = _loads_will_run(items, k, max_count, best, budget,
                                 allowance(LP_SHARE + LOAD_SEARCH_SHARE))
    left_before_lp = budget.left()
    if not loads_next:
        _lp_bound(items, k, cap, best, budget, allowance(LP_SHARE))
    if _proven(best):
        return best
    _dive(items, k, cap, max_count, best, budget, allowance(DIVE_PROOF_SHARE))
    if _proven(best) or len(items) > MAX_ITEMS_PER_BIN * k:
        return best
    # The load search's share, and what the LP's left (the LP and the dive spent the rest).
    spent = (left_before_lp - budget.left()) / time_limit
    load_seconds = allowance(LOAD_SEARCH_SHARE + max(0.0, LP_SHARE - spent))
    best, searched = _load_search(items, k, max_count, best, budget, load_seconds)
    if searched or _proven(best):
        return best  # the load search's branch and price covers the exact search's ground
    _exact(items, k, cap, max_count, best, budget, allowance(EXACT_SHARE))
    return best


def _proven(best: BestPlan) -> bool:
    """A plan that meets the proven lower bound: optimal, nothing left to prove."""
    return best.bins is not None and best.max_load <= best.lower_bound


def _note_cut(budget: Budget) -> None:
    """The wall clock ended the last step (see :meth:`Budget.mark_cut`)."""
    if budget.seconds_left() <= 0:
        budget.mark_cut()


def _lp_bound(items: Items, k: int, cap: int | None, best: BestPlan, budget: Budget,
              seconds: float) -> None:
    """The Gilmore-Gomory LP: with no plan it may prove the batch infeasible (raises
    :class:`InfeasibleError`), with one it raises ``best.lower_bound``. Skipped with many
    items per micro-batch (there it is the counting bound) and when ``seconds`` do not pay
    for ``LP_MIN_ITERATIONS`` iterations."""
    tokens = items.tokens
    lp_budget = _lp_budget(budget, seconds)
    lp_cap = cap if cap is not None else (best.max_load if best.bins is not None else sum(tokens))
    if len(items) > MAX_ITEMS_PER_BIN * k:
        return
    if LP_MIN_ITERATIONS * iteration_work(tokens, lp_cap) > lp_budget.limit:
        budget.mark_ran_out()  # too few iterations in its share to move the bound
        return
    if best.bins is None and cap is not None:
        infeasible = lp_infeasible(tokens, k, cap, lp_budget)
        budget.charge(lp_budget.used / LP_WORK_PER_SECOND)
        _note_cut(budget)
        if infeasible:
            raise InfeasibleError(
                f"the LP relaxation (Gilmore-Gomory) needs more than k={k} micro-batches of "
                f"{cap} tokens for these lengths: raise k or the cap",
                proven=True,
            )
    elif best.bins is not None and best.max_load > best.lower_bound:
        bound = lp_load_bound(tokens, items.costs, k, cap, best.lower_bound, best.max_load,
                              lp_budget)
        budget.charge(lp_budget.used / LP_WORK_PER_SECOND)
        _note_cut(budget)
        if lp_budget.left() <= 0:
            budget.mark_ran_out()
        if best.raise_bound(bound, "lp"):
            best.notes.append(NOTE_LP)


def _dive(items: Items, k: int, cap: int | None, max_count: int | None, best: BestPlan,
          budget: Budget, seconds: float) -> None:
    """The subset-sum dive from the bound up (8 loads at most): a better plan it finds
    replaces ``best``'s."""
    dived = dive_items(items, k, cap, max_count, best.lower_bound,
                       best.max_load if best.bins is not None else None,
                       budget, seconds, attempts=8, few_per_bin_only=False)
    _note_cut(budget)
    if dived is not None:
        load = max(sum(items.costs[i] for i in b) for b in dived)
        if best.bins is None or load < best.max_load:
            best.bins, best.max_load, best.method = dived, load, "dive"


def _exact(items: Items, k: int, cap: int | None, max_count: int | None, best: BestPlan,
           budget: Budget, seconds: float) -> None:
    """The exact search between the bound and the plan: a better plan, a raised bound, or
    (exhausted with no plan) a proof that none exists, raised as :class:`InfeasibleError`."""
    search = exact_budget(budget, seconds)
    result = minimise_max_load(
        items.tokens, items.costs, items.counts, k, best.lower_bound,
        best.max_load if best.bins is not None else None, cap, max_count, search,
    )
    budget.charge(search.used / EXACT_NODES_PER_SECOND)
    _note_cut(budget)
    if result.bins is not None and (best.bins is None or result.max_load < best.max_load):
        best.bins, best.max_load, best.method = result.bins, result.max_load, "exact"
    if not result.complete:  # its nodes (or the clock) ran out before the proof
        budget.mark_ran_out()
    if best.raise_bound(result.lower_bound, "exact"):
        best.notes.append(NOTE_EXACT)
    if best.bins is None and result.complete:
        raise InfeasibleError(
            f"the exact search proved that no split into k={k} micro-batches meets the cap"
            + (" and equal sizes" if max_count is not None else "")
            + ": raise k or the cap",
            proven=True,
        )


def _allowance(budget: Budget, seconds: float, rate: int, fast_rate: int, every: int = 1
               ) -> Budget:
    """Work for ``seconds`` of the call's budget: counted at the measured ``rate`` (the same
    limit, the same work on every machine; the call's deadline a safety net), or in clock
    timing capped at ``fast_rate``, the fastest measured, and stopped by the clock ``seconds``
    from now (or at the call's deadline)."""
    units = int((fast_rate if budget.by_clock else rate) * seconds)
    return budget.allowance(units, seconds, every=every, own_clock=False)


def _lp_budget(budget: Budget, seconds: float) -> Budget:
    return _allowance(budget, seconds, LP_WORK_PER_SECOND, FAST_LP_WORK_PER_SECOND)


def exact_budget(budget: Budget, seconds: float) -> Budget:
    """Search nodes for ``seconds`` of the call's budget (see :func:`_allowance`); with the
    clock deciding, it is read every 64 nodes. Also the group re-split's pools (``resplit``)."""
    return _allowance(budget, seconds, EXACT_NODES_PER_SECOND, FAST_EXACT_NODES_PER_SECOND,
                      64 if budget.by_clock else CLOCK_EVERY)


def _loads_fit(items: Items, k: int, max_count: int | None, best: BestPlan) -> bool:
    """Whether the load search fits the batch: it needs a plan (its loads stay below it, so
    under the cap), still unproven, and token costs without equal sizes, few per bin."""
    if best.bins is None or _proven(best):
        return False
    return loads_apply(len(items), k, items.tokens == items.costs, max_count)


def _loads_will_run(items: Items, k: int, max_count: int | None, best: BestPlan,
                    budget: Budget, seconds: float) -> bool:
    """Whether the load search fits the batch and ``seconds`` pay for its root LP."""
    if not _loads_fit(items, k, max_count, best):
        return False
    return loads_affordable(items.tokens, best.max_load - 1, seconds, budget)


def _load_search(
    items: Items, k: int, max_count: int | None, best: BestPlan, budget: Budget, seconds: float
) -> tuple[BestPlan, bool]:
    """The load search (``load_search``) between the bound and the best plan, when it fits the
    batch (:func:`_loads_fit`). Also whether it ran (its allowance paid for the root LP)."""
    if seconds <= 0 or not _loads_fit(items, k, max_count, best):
        return best, False
    found = search_loads(items.tokens, k, best.lower_bound, best.max_load, seconds, budget)
    if found.cut:
        budget.mark_cut()
    if found.bins is not None and found.max_load is not None and found.max_load < best.max_load:
        best.bins, best.max_load, best.method = found.bins, found.max_load, "load_search"
    if best.raise_bound(found.lower_bound, "load_search"):
        best.notes.append(NOTE_LOADS)
    if found.searched and not _proven(best):  # loads left undecided in its allowance
        budget.mark_ran_out()
    return best, found.searched


def _fluid(
    items: Items, k: int, cap: int | None, best: BestPlan, budget: Budget, seconds: float
) -> None:
    """Raise ``best.lower_bound`` with the fluid LP (lp_bound.fluid_load_bound) when the cost is
    not the token count and a cap binds it: with cost = tokens or no cap it adds nothing to the
    counting bounds. Each LP runs only when its estimated cost fits ``seconds``."""
    if cap is None or items.costs == items.tokens or best.bins is None:
        return
    if best.max_load <= best.lower_bound:
        return
    most = int(seconds / FLUID_SECONDS_PER_VARIABLE)
    if 2 * len(items) > most:  # at least one heavy bin and the rest: 2 columns per item
        budget.mark_ran_out()
        return
    columns = Budget(most, budget.deadline)  # GLOP's own limit: the call's safety net
    bound = fluid_load_bound(items.tokens, items.costs, k, cap, best.lower_bound,
                             best.max_load, columns)
    used = columns.used
    budget.charge(used * FLUID_SECONDS_PER_VARIABLE)
    if budget.seconds_left() <= 0:
        budget.mark_cut()
    if used >= most:
        budget.mark_ran_out()
    if best.raise_bound(bound, "fluid_lp"):
        best.notes.append(NOTE_FLUID)
