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
2. ``starts_at_counts``: seqpart's constructions at several counts, best bound first (with
   pp > 1 at cluster scale, best estimate on shared ranks first), up to ``BUILD_SHARE`` of the
   budget; then ``counts_on_shared_ranks``: at cluster scale with pp > 1, one construction's
   cheap split at more counts;
3. ``capped_balancer_when_no_start``: when every construction broke the cap;
4. ``search_and_build``: local search from the best start not searched yet (half of what is
   left each time), one more count while the budget allows;
5. ``cp_sat_on_tiny_instances``: half of the time, decided up front, when every count's model is
   small;
6. with pp > 1, ``choose_by_exact_makespan`` (:mod:`.exact_choice`):
   ``EXACT_SHARE`` of the time evaluates the best
   candidates exactly and searches their orders; the trainers' and given schedules each get
   the order search :func:`~seqpart.solver.step.makespan.order_schedule` gives them, in full.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from ...errors import InfeasibleError
from ...plan import stop_reason
from ..budget import (
    BUILD_SHARE,
    CLOCK_ROUNDS,
    COUNTS_BEFORE_CLOCK,
    FIRST_BUILD_SECONDS_PER_SEQUENCE,
    FIRST_BUILD_SECONDS_PER_SEQUENCE_PP,
    SPLIT_SECONDS_PER_SEQUENCE,
    SPLIT_WORK_PER_SEQUENCE,
)
from ..makespan import assemble, count_penalty
from ..model import StepPlan
from ..model import exact as exact_time
from ..search import CANDIDATES_PER_SECOND, improve_schedule
from ..starts import CONSTRUCTIONS, Row, micro_first, rank_first
from ..tiny_cpsat import solve_step_exactly
from .exact_choice import choose_by_exact_makespan
from .state import StepState
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
        self.order_given_starts()
        self.starts_at_counts()
        self.counts_on_shared_ranks()
        self.capped_balancer_when_no_start()
        self.search_and_build()
        finish_trainer_starts(self)
        self.use_the_clock()
        self.take_the_best_unsearched_start()
        proven = self.cp_sat_on_tiny_instances()
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

    def search_next(self, share: int) -> None:
        """Local search from the best start not searched yet."""
        open_ = [row for row in self.pool if row.arrival not in self.searched]
        if not open_:
            return
        obj, arrival, method, m, mb_of = min(open_, key=lambda row: (row.objective, row.arrival))
        self.searched.add(arrival)
        inst = self.inst
        result = improve_schedule(
            mb_of, inst.tokens.tolist(), inst.costs, inst.dp_size, m, inst.cap, inst.overhead,
            inst.pp, inst.vpp, bound=self.bounds[m], work_budget=share, deadline=self.deadline,
            size=inst.size,
        )
        self.spent += result.work
        self.clock_cut |= result.stopped_by == "clock"
        self.work_short |= result.stopped_by == "work budget"
        if result.objective > obj:  # never: the search only takes improving changes
            raise RuntimeError("step local search made a schedule worse (please report)")
        searched = result.steps and not method.endswith("+local_search")
        name = method + ("+local_search" if searched else "")
        self.finals.append(Row(result.objective, arrival, name, m, result.mb_of))
        best = self.best
        if best.objective is None or result.objective < best.objective:
            best.objective, best.m, best.mb_of, best.method = result.objective, m, result.mb_of, name
            self.best_cut_by_budget = result.stopped_by == "work budget"

    def count_fits(self) -> bool:
        """Whether the clock leaves a count the time it needs before it is begun: a whole
        count's constructions, or only the first's while none of seqpart's has given a start
        yet (with pp > 1, the cheapest's, before the exact makespan's deadline)."""
        if self.constructed:
            return not self.out_of_clock(max(self.nominal_build, self.count_wall))
        if self.inst.pp == 1:
            return not self.out_of_clock(FIRST_BUILD_SECONDS_PER_SEQUENCE * self.inst.n)
        # With shared ranks, rank_first's are made already: only its split is left to run.
        first = SPLIT_SECONDS_PER_SEQUENCE if self.shared_ranks else FIRST_BUILD_SECONDS_PER_SEQUENCE_PP
        return self.final_deadline is None or (
            time.perf_counter() + first * self.inst.n <= self.final_deadline)

    def build_next(self) -> None:
        m = self.pending.pop(0)
        if not self.usable(m):
            return
        self.tried += 1
        began_count = time.perf_counter()
        longest = 0.0  # this count's longest construction so far
        # Until one of seqpart's constructions gave a start, they may run into the exact phase's
        # share (with pp > 1; see count_fits): a construction that checks its time sees that.
        until = self.deadline if self.constructed else self.final_deadline
        for make in CONSTRUCTIONS:
            # Once a construction gave a valid start, the next only while twice the longest so
            # far fits the clock (the given and trainers' starts do not count: ours are usually
            # far better; the constructions' costs differ by about 2x at most).
            if self.constructed and self.out_of_clock(2 * longest):
                break
            began = time.perf_counter()
            for method, mb_of in make(self.inst, m, self.seconds, self.bounds[m], until):
                self.add(method, m, mb_of)
            longest = max(longest, time.perf_counter() - began)
            self.spent += self.build // len(CONSTRUCTIONS)
        self.count_wall = max(self.count_wall, time.perf_counter() - began_count)

    def drop_hopeless(self) -> None:
        # Both sides weighed by what the schedule makes of the count (1 when pp == 1).
        inst, model, bounds, pending = self.inst, self.model, self.bounds, self.pending
        rows = [(row.objective, row.m) for row in self.pool]
        if self.best.objective is not None:
            rows.append((self.best.objective, self.best.m))
        if not rows:
            return
        top = min(obj * count_penalty(inst, model, m) for obj, m in rows)
        while pending and bounds[pending[0]] * count_penalty(inst, model, pending[0]) >= top:
            pending.pop(0)

    def order_given_starts(self) -> None:
        order_given_starts(self)  # the exact phase calls it too, on the latecomers

    def starts_at_counts(self) -> None:
        """Starts at several counts before any search: with pp > 1 the bounds of neighbouring
        counts are close, and the constructions' own step times separate them better. Until a
        construction gave a valid start the clock is not looked at for the first
        ``COUNTS_BEFORE_CLOCK`` counts (ours are usually far better than the given and the
        trainers' starts; a plan beats an error), unless a start is at hand and a count's
        nominal build takes more than twice the whole time (n=262,144 in 1 s)."""
        forced = not self.pool or self.nominal_build <= 2 * self.seconds
        while self.pending and (
            (forced and not self.constructed and self.tried < COUNTS_BEFORE_CLOCK)
            or self.count_fits()
        ):
            self.drop_hopeless()
            if not self.pending or (self.constructed
                                    and self.spent + self.build > BUILD_SHARE * self.budget):
                break
            if (self.constructed and self.deadline is not None
                    and time.perf_counter() - self.t0 > BUILD_SHARE * self.seconds):
                self.clock_cut = True  # a slow machine: leave the rest of the time to the search
                break
            self.build_next()

    def counts_on_shared_ranks(self) -> None:
        """pp > 1 at cluster scale (``shared_ranks``), once a construction gave a start:
        rank_first's split of its shared ranks at the next counts, in their order, while one
        more split (the longest so far, at least ``SPLIT_SECONDS_PER_SEQUENCE`` a sequence)
        ends within the first half of the exact makespan's share (the other half evaluates
        and orders the candidates; repeatable: ``SPLIT_WORK_PER_SEQUENCE`` within the work
        budget). The exact makespan then weighs the best start of each count:
        the formula that ranks the pool is neither exact nor a bound at pp > 1, and on
        long-tail batches it prefers the smallest count."""
        if not self.shared_ranks or not self.constructed:
            return
        inst = self.inst
        longest = SPLIT_SECONDS_PER_SEQUENCE * inst.n
        while self.pending:
            self.fit_final_deadline()
            if self.final_deadline is None:
                if self.spent + SPLIT_WORK_PER_SEQUENCE * inst.n > self.budget:
                    break
            elif time.perf_counter() + longest > self._half_of_the_exact_share():
                self.clock_cut = True
                break
            m = self.pending.pop(0)
            if not self.usable(m):
                continue
            began = time.perf_counter()
            self.tried += 1
            for method, mb_of in rank_first(inst, m, self.seconds, shared_only=True):
                self.add(method, m, mb_of)
            self.spent += SPLIT_WORK_PER_SEQUENCE * inst.n
            longest = max(longest, time.perf_counter() - began)

    def _half_of_the_exact_share(self) -> float:
        assert self.deadline is not None and self.final_deadline is not None
        return self.deadline + max(0.0, self.final_deadline - self.deadline) / 2

    def capped_balancer_when_no_start(self) -> None:
        """No start yet (every construction broke the cap): the capped balancer, count by
        count, from the smallest; it always finds a split when one is easy to find."""
        for j, m in enumerate(m for m in sorted(self.bounds) if self.usable(m)):
            if self.pool or (j and self.out_of_clock()):
                break
            for method, mb_of in micro_first(self.inst, m, self.seconds, repair=True):
                self.add(method, m, mb_of)

    def search_and_build(self) -> None:
        """Search the best start, then build one more count, while the budget lasts."""
        while True:
            progressed = False
            if len(self.searched) < len(self.pool) and self.spent < self.budget and not self.out_of_clock():
                self.search_next(max(0, (self.budget - self.spent) // 2))
                progressed = True
            self.drop_hopeless()
            if self.pending and self.spent + self.build <= self.budget:
                if not self.count_fits():
                    self.clock_cut = True  # the budget allowed another count, the clock did not
                else:
                    self.build_next()
                    progressed = True
            if not progressed:
                break
        self.clock_cut |= self.out_of_clock() and self.spent < self.budget
        if self.pending or len(self.searched) < len(self.pool):  # counts or starts left over
            if self.out_of_clock():
                self.clock_short = True
            else:
                self.work_short = True

    def use_the_clock(self) -> None:
        """Default (clock) timing: the time the work budget leaves goes to the same phases
        again, with a budget the size of that time: the search goes on from the best plan where
        the budget cut it, and more counts are built (repeatable mode: nothing)."""
        rounds, capped = 0, False
        while self.deadline is not None:
            if rounds == CLOCK_ROUNDS:
                capped = True
                break
            left = self.deadline - time.perf_counter()
            if left < 0.002:
                self.clock_short |= self.work_short  # work was left, and no time for it
                break
            before = (len(self.searched), self.tried, self.best.objective)
            self.work_short = False  # the clock's time left pays for more
            self.budget = self.spent + int(left * CANDIDATES_PER_SECOND)
            if self.best_cut_by_budget and self.best.mb_of is not None:
                self.best_cut_by_budget = False  # go on from where the budget stopped it
                self.add(self.best.method, self.best.m, self.best.mb_of)
            self.search_and_build()
            finish_trainer_starts(self, note=False)
            rounds += 1
            if (len(self.searched), self.tried, self.best.objective) == before:
                break
        if rounds:
            if not capped:  # each round's work budget was the clock's time left
                self.clock_short |= self.work_short
                self.work_short = False
            self.notes.append(f"the clock's time left after the work budget: {rounds} more "
                              "rounds of search and counts")

    def take_the_best_unsearched_start(self) -> None:
        """The best start may never have been searched (budget spent): it still counts."""
        best, inst = self.best, self.inst
        for obj, arrival, method, m, mb_of in self.pool:
            if arrival not in self.searched and (best.objective is None or obj < best.objective):
                best.objective, best.m, best.mb_of, best.method = obj, m, mb_of, method
        if best.mb_of is None:
            raise InfeasibleError(
                f"no schedule of {inst.dp_size} ranks with an equal count of non-empty "
                f"micro-batches under cap={inst.cap} that the pipeline schedule can run was found "
                f"in {self.seconds}s, and none is proven impossible: raise time_limit or the cap, "
                "or use fewer ranks (with vpp > 1, Megatron-LM's interleaving needs at least pp "
                "micro-batches per rank)",
                proven=False,
            )
        self.notes.append(
            f"counts built: {self.tried} of {len(self.bounds)} feasible (best bound first); starts "
            f"searched: {len(self.searched)} of {len(self.pool)}; work {self.spent} of {self.budget}"
        )

    def cp_sat_on_tiny_instances(self) -> dict[int, int]:
        """CP-SAT improves and proves, count by count (the formula's optimum: with pp > 1 a
        candidate for the exact choice, and its bounds bound the formula only). Returns each
        count's proven bound."""
        proven = dict(self.bounds)
        best, inst = self.best, self.inst
        self.clock_short |= self.use_exact and self.out_of_clock()
        if self.use_exact and not self.out_of_clock():
            exact = solve_step_exactly(inst, self.bounds, best.objective, self.deadline,
                                       self.seconds / 2, self.options)
            if exact is not None:
                self.interrupted |= exact.interrupted
                self.clock_short |= exact.clock_cut
                self.work_short |= exact.unsolved > 0
                if inst.pp == 1:
                    proven = exact.bounds
                    if min(proven.values()) > min(self.bounds.values()):
                        self.bound_source = "cpsat"
                self.notes += exact.notes
                if exact.mb_of is not None and exact.objective is not None and self.usable(exact.m):
                    self.finals.append(Row(exact.objective, len(self.pool), "cp-sat", exact.m,
                                           exact.mb_of))
                    if best.objective is None or exact.objective < best.objective:
                        best.objective, best.m, best.mb_of, best.method = (
                            exact.objective, exact.m, exact.mb_of, "cp-sat")
        return proven

    def closing_notes(self) -> None:
        if self.clock_cut:
            self.notes.append(
                "stopped by the clock, not the work budget: the plan may differ between runs")
        if self.unusable:
            self.notes.append(f"counts the {self.model.resolved(self.inst.vpp)} schedule cannot "
                              f"run, skipped: {sorted(self.unusable)}")
