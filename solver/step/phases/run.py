"""plan_step's search, as a pipeline of named phases over one state (:mod:`.state`).

The phases, in the order :meth:`StepSearch.run` lists them, each with its share of the budget
(work counted in candidate evaluations; the clock, unless ``deterministic``, as a guard; the
shares and the measured times in :mod:`~seqpart.solver.step.budget`):

1. ``given_and_trainer_starts`` (:mod:`.trainer_starts`): the caller's
   schedules and every trainer's, each run to its end, cheapest first, before anything else
   (so that a short budget goes to them first: the plan is never behind a trainer that ran to
   its end, and ``trainers_not_run`` names any that did not); with pp > 1, ``order_given_starts`` then
   gives each of them its order search, in full, so that the clock of the phases below sees
   its time;
2. ``starts_at_counts`` (:mod:`.starts`): seqpart's constructions at several counts, best bound first (with
   pp > 1 at cluster scale, best estimate on shared ranks first), up to ``BUILD_SHARE`` of the
   budget; then ``counts_on_shared_ranks``: at cluster scale with pp > 1, one construction's
   cheap split at more counts;
3. ``capped_balancer_when_no_start``: when every construction broke the cap;
4. ``search_and_build`` (:mod:`.formula_search`): local search from the best start not
   searched yet (half of what is left each time), one more count while the budget allows;
5. ``cp_sat_on_tiny_instances`` (:mod:`.tiny_exact`): half of the time, decided up front, when
   every count's model is small (before it, ``use_the_clock`` and ``take_the_best_unsearched_start``, in
   :mod:`.formula_search`);
6. with pp > 1, ``choose_by_exact_makespan`` (:mod:`.exact_choice`):
   ``EXACT_SHARE`` of the time evaluates the best
   candidates exactly and searches their orders; the trainers' and given schedules each get
   the order search :func:`~seqpart.solver.step.makespan.order_schedule` gives them, in full.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...plan import stop_reason
from ..makespan import assemble
from ..model import StepPlan
from ..model import exact as exact_time
from .exact_choice import choose_by_exact_makespan
from .formula_search import search_and_build, take_the_best_unsearched_start, use_the_clock
from .starts import capped_balancer_when_no_start, counts_on_shared_ranks, starts_at_counts
from .state import StepState
from .tiny_exact import cp_sat_on_tiny_instances
from .trainer_starts import (
    finish_trainer_starts,
    given_and_trainer_starts,
    order_given_starts,
    trainers_not_run,
)


class StepSearch(StepState):
    """plan_step's search: its phases, in :meth:`run`'s order, over its state
    (:class:`~.state.StepState`, whose fields it is made with)."""

    def run(self, starts: Sequence[Any]) -> StepPlan:
        given_and_trainer_starts(self, starts)
        order_given_starts(self)
        starts_at_counts(self)
        counts_on_shared_ranks(self)
        capped_balancer_when_no_start(self)
        search_and_build(self)
        finish_trainer_starts(self)
        use_the_clock(self)
        take_the_best_unsearched_start(self)
        proven = cp_sat_on_tiny_instances(self)
        self.closing_notes()
        if self.inst.pp == 1:
            best, inst = self.best, self.inst
            return self.finish(assemble(inst, self.model, best.m, best.mb_of, best.method, None,
                                        exact_time(best.objective, inst.vpp),
                                        exact_time(min(proven.values()), inst.vpp), self.notes,
                                        self.t0))
        self.fit_final_deadline()
        return self.finish(choose_by_exact_makespan(self))

    def finish(self, plan: StepPlan) -> StepPlan:
        """The plan with what is known of how its search ended: why (``stopped_by``), which
        bound it met, and the trainers whose schedules may not have run to their end."""
        stops = set(self.open_ended.stopped.values())
        clock = self.clock_short or self.clock_cut or bool(self.open_ended.skipped or self.late)
        why = stop_reason(plan.optimal, interrupted=self.interrupted, clock=clock or "clock" in stops,
                          work=self.work_short or "work budget" in stops)
        return dataclasses.replace(plan, stopped_by=why, bound_source=self.bound_source,
                                   trainers_not_run=trainers_not_run(self))

    def closing_notes(self) -> None:
        if self.clock_cut:
            self.notes.append(
                "stopped by the clock, not the work budget: the plan may differ between runs")
        if self.unusable:
            self.notes.append(f"counts the {self.model.resolved(self.inst.vpp)} schedule cannot "
                              f"run, skipped: {sorted(self.unusable)}")
