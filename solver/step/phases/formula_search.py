"""plan_step's search phase on the closed formula, over its state (:class:`~.state.StepState`):
local search from the best start not searched yet and one more count while the budget lasts
(``search_and_build``); with the clock, the time the work budget leaves (``use_the_clock``); and
the best start when none was searched (``take_the_best_unsearched_start``)."""

from __future__ import annotations

import time

from ...errors import InfeasibleError
from ..budget import CLOCK_ROUNDS
from ..search import CANDIDATES_PER_SECOND, improve_schedule
from ..starts import Row
from .starts import build_next, count_fits, drop_hopeless
from .state import StepState
from .trainer_starts import finish_trainer_starts

__all__ = ["search_and_build", "search_next", "take_the_best_unsearched_start", "use_the_clock"]


def search_next(state: StepState, share: int) -> None:
    """Local search from the best start not searched yet."""
    open_ = [row for row in state.pool if row.arrival not in state.searched]
    if not open_:
        return
    obj, arrival, method, m, mb_of = min(open_, key=lambda row: (row.objective, row.arrival))
    state.searched.add(arrival)
    inst = state.inst
    result = improve_schedule(
        mb_of, inst.tokens.tolist(), inst.costs, inst.dp_size, m, inst.cap, inst.overhead,
        inst.pp, inst.vpp, bound=state.bounds[m], work_budget=share, deadline=state.deadline,
        size=inst.size,
    )
    state.spent += result.work
    state.clock_cut |= result.stopped_by == "clock"
    state.work_short |= result.stopped_by == "work budget"
    if result.objective > obj:  # never: the search only takes improving changes
        raise RuntimeError("step local search made a schedule worse (please report)")
    searched = result.steps and not method.endswith("+local_search")
    name = method + ("+local_search" if searched else "")
    state.finals.append(Row(result.objective, arrival, name, m, result.mb_of))
    best = state.best
    if best.objective is None or result.objective < best.objective:
        best.objective, best.m, best.mb_of, best.method = result.objective, m, result.mb_of, name
        state.best_cut_by_budget = result.stopped_by == "work budget"


def search_and_build(state: StepState) -> None:
    """Search the best start, then build one more count, while the budget lasts."""
    while True:
        progressed = False
        if len(state.searched) < len(state.pool) and state.spent < state.budget and not state.out_of_clock():
            search_next(state, max(0, (state.budget - state.spent) // 2))
            progressed = True
        drop_hopeless(state)
        if state.pending and state.spent + state.build <= state.budget:
            if not count_fits(state):
                state.clock_cut = True  # the budget allowed another count, the clock did not
            else:
                build_next(state)
                progressed = True
        if not progressed:
            break
    state.clock_cut |= state.out_of_clock() and state.spent < state.budget
    if state.pending or len(state.searched) < len(state.pool):  # counts or starts left over
        if state.out_of_clock():
            state.clock_short = True
        else:
            state.work_short = True


def use_the_clock(state: StepState) -> None:
    """Default (clock) timing: the time the work budget leaves goes to the same phases
    again, with a budget the size of that time: the search goes on from the best plan where
    the budget cut it, and more counts are built (repeatable mode: nothing)."""
    rounds, capped = 0, False
    while state.deadline is not None:
        if rounds == CLOCK_ROUNDS:
            capped = True
            break
        left = state.deadline - time.perf_counter()
        if left < 0.002:
            state.clock_short |= state.work_short  # work was left, and no time for it
            break
        before = (len(state.searched), state.tried, state.best.objective)
        state.work_short = False  # the clock's time left pays for more
        state.budget = state.spent + int(left * CANDIDATES_PER_SECOND)
        if state.best_cut_by_budget and state.best.mb_of is not None:
            state.best_cut_by_budget = False  # go on from where the budget stopped it
            state.add(state.best.method, state.best.m, state.best.mb_of)
        search_and_build(state)
        finish_trainer_starts(state, note=False)
        rounds += 1
        if (len(state.searched), state.tried, state.best.objective) == before:
            break
    if rounds:
        if not capped:  # each round's work budget was the clock's time left
            state.clock_short |= state.work_short
            state.work_short = False
        state.notes.append(f"the clock's time left after the work budget: {rounds} more "
                          "rounds of search and counts")


def take_the_best_unsearched_start(state: StepState) -> None:
    """The best start may never have been searched (budget spent): it still counts."""
    best, inst = state.best, state.inst
    for obj, arrival, method, m, mb_of in state.pool:
        if arrival not in state.searched and (best.objective is None or obj < best.objective):
            best.objective, best.m, best.mb_of, best.method = obj, m, mb_of, method
    if best.mb_of is None:
        raise InfeasibleError(
            f"no schedule of {inst.dp_size} ranks with an equal count of non-empty "
            f"micro-batches under cap={inst.cap} that the pipeline schedule can run was found "
            f"in {state.seconds}s, and none is proven impossible: raise time_limit or the cap, "
            "or use fewer ranks (with vpp > 1, Megatron-LM's interleaving needs at least pp "
            "micro-batches per rank)",
            proven=False,
        )
    state.notes.append(
        f"counts built: {state.tried} of {len(state.bounds)} feasible (best bound first); starts "
        f"searched: {len(state.searched)} of {len(state.pool)}; work {state.spent} of {state.budget}"
    )
