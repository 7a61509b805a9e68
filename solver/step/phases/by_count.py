"""plan_step with pp > 1: every promising count planned on its own, scored by the exact makespan.

Why: the search of :mod:`.run` ranks counts and moves with the closed
formula ``sum + (pp-1)*max/vpp``, which at pp > 1 is neither the makespan nor a bound on it; it
builds few counts and, once its candidates' exact makespans are known, stops. A count the formula
ranks low is often the fastest by the exact makespan (the bubble depends on the lightest
micro-batches that start and end each rank, the interleaved schedule's rounds on ``m mod pp``).

How (:func:`plan_by_count`):

1. the whole search runs first on a fixed part of the limit (``BASE_SHARE``, at most
   ``COUNT_BASE_SECONDS`` or one count's first search, whichever is longer: at n = 16,384 the
   trainers' schedulers need more than 0.2 s): the trainers' and given schedules, seqpart's
   constructions, the exact choice; its plan is the incumbent;
2. then the counts, one search at a time, each restricted to its count: its constructions
   (the trainers' schedulers among them, rounded to the count), the formula's local search, and
   ``COUNT_EXACT_SHARE`` of its time for the exact makespan's choice of order and its moves of
   sequences between and within ranks (``COUNT_REFINE_SHARE`` of that time is kept from the
   order search for those moves). The most promising count goes next: one not searched
   yet is as promising as the fastest plan beside it (so the search walks from the first
   part's count towards faster ones), one searched as its own plan (less a little per search
   made, ``COUNT_EXPLORE_PER_LEVEL``, and more per longer search that did not improve it,
   ``COUNT_EXPLORE_PER_MISS``), and is searched again twice as long
   (``COUNT_ROUND_GROWTH``) while its last search was cut; the first search of a count takes
   ``QUANTUM_SECONDS_PER_SEQUENCE * n`` seconds. A count's searches order each trainer's or
   given schedule once (its later searches meet the same ones: their time goes to the search),
   and start from the count's best plan so far as well (so a longer search refines it).
   A count whose exact lower bound cannot beat the incumbent is skipped.

The quanta and the order of the counts depend only on the input, never on the limit, so in the
repeatable mode a longer limit runs the same searches and more: its plan is never slower. The
price: there the count search ends at the first search that does not fit in what is left, and
may leave part of the limit unused (shortening that search to fit would not keep the promise: a
search cut shorter can end faster than the same search given more time). Small
and mid-sized batches only: ``COUNT_MIN_QUANTA`` first searches of a count must fit in the time the
first part leaves (at n = 262,144 one would take seconds), else the whole search runs alone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ...errors import InfeasibleError
from ...options import SolverOptions
from ...plan import stop_reason
from ...tuning import (
    BASE_SHARE,
    COUNT_BASE_SECONDS,
    COUNT_EXACT_SHARE,
    COUNT_EXPLORE_PER_LEVEL,
    COUNT_EXPLORE_PER_MISS,
    COUNT_MIN_QUANTA,
    COUNT_QUANTUM_FLOOR_SECONDS,
    COUNT_ROUND_GROWTH,
    QUANTUM_SECONDS_PER_SEQUENCE,
)
from ..bound import instance_exact_bounds
from ..budget import assembly_reserve, exact_reserve
from ..makespan import Ordered, count_penalty
from ..model import StepInstance, StepPlan
from ..pipeline import PipelineModel, scale
from ..starts import Row, from_schedule
from .run import StepSearch
from .state import is_given

__all__ = ["plan_by_count"]

#: The priority a count loses per search made, exact (the table's figure is a decimal).
EXPLORE_PER_LEVEL = Fraction(str(COUNT_EXPLORE_PER_LEVEL))
EXPLORE_PER_MISS = Fraction(str(COUNT_EXPLORE_PER_MISS))


@dataclasses.dataclass
class _Count:
    """One count's best plan so far and whether a longer search may still improve it."""

    m: int
    plan: StepPlan | None = None
    open: bool = True  # not searched yet, or its last search was cut by the work or the clock
    level: int = 0  # its next search is COUNT_ROUND_GROWTH**level quanta long
    misses: int = 0  # its searches from the third on that did not improve its plan


class _Counts:
    """The count search's state: the best plan, the time left, what each count's search is
    given (its instance asks for multiples of the count, so that the trainers' schedulers round
    their counts up to it and give starts at this count), and whether the limit cut it."""

    def __init__(self, inst: StepInstance, model: PipelineModel, options: SolverOptions,
                 engine: str, trainer_starts: bool | None, formula_bounds: dict[int, int],
                 seeds: dict[int, list[Row]], best: StepPlan, left: float, end: float,
                 quantum: float) -> None:
        self.inst, self.model, self.options, self.engine = inst, model, options, engine
        self.trainer_starts, self.formula_bounds, self.seeds = trainer_starts, formula_bounds, seeds
        self.best, self.left, self.end = best, left, end
        self.quantum = quantum
        self.runs, self.cut, self.interrupted = 0, False, False
        # Each count's given and trainers' schedules, ordered once for all its searches.
        self.orders: dict[int, dict[tuple[int, bytes], Ordered]] = {}

    def promise(self, entry: _Count, beside: list[int], entries: dict[int, _Count],
                ) -> tuple[int, Fraction]:
        """How promising a count's next search is: (0, its plan's step time) once searched;
        before, (0, the fastest plan beside it), or (1, 0) with none planned there yet."""
        if entry.plan is not None:  # a longer search must promise more than a first one
            return 0, Fraction(entry.plan.step_time) * (1 + EXPLORE_PER_LEVEL * entry.level
                                                        + EXPLORE_PER_MISS * entry.misses)
        times = [Fraction(entries[m].plan.step_time) for m in beside  # type: ignore[union-attr]
                 if entries[m].plan is not None]
        return (0, min(times)) if times else (1, Fraction(0))

    def plan(self, entry: _Count, size: float) -> None:
        """Search ``entry``'s count for ``size`` seconds, unless the limit has run out."""
        # Repeatable: the work counted so far; else the clock alone (its time is the caller's:
        # a search that does not fit is shortened to the time left, down to one quantum).
        if self.options.deterministic:
            fits = size <= self.left + 1e-12
        else:
            size = min(size, self.end - time.perf_counter())
            fits = size >= self.quantum
        if not fits:
            self.cut = True
            return
        inst, m = self.inst, entry.m
        search = StepSearch(dataclasses.replace(inst, multiple_of=m), size, time.perf_counter(),
                            self.options, self.engine, self.trainer_starts, self.model,
                            count=(m, self.formula_bounds), exact_share=COUNT_EXACT_SHARE,
                            order_cache=self.orders.setdefault(m, {}))
        for row in self.seeds.get(m, ()):
            search.add(row.method, row.m, row.mb_of)
        if entry.plan is not None:  # a longer search goes on from the count's best plan
            _continue_from(search, entry.plan)
        try:
            plan: StepPlan | None = search.run(())
        except InfeasibleError:  # none found at this count in its time
            plan = None
        # Charged its time, or the work it counted where that was more (a count's
        # constructions and exact evaluation run whatever its share): deterministic.
        self.left -= max(size, search.counted_seconds())
        self.runs += 1
        entry.level += 1
        if plan is not None and plan.stopped_by == "interrupt":
            self.cut = self.interrupted = True  # Ctrl-C: no more searches
        entry.open = plan is not None and plan.stopped_by in ("work", "clock")
        # A longer search that did not improve the count's plan: its search has settled (the
        # second search is not counted: the first is mostly the constructions, and is often
        # matched by the next).
        if entry.level >= 3 and (plan is None or not _better(plan, entry.plan)):
            entry.misses += 1
        if plan is not None and _better(plan, entry.plan):
            entry.plan = plan
        if plan is not None and _better(plan, self.best):
            self.best = plan


def _continue_from(search: StepSearch, plan: StepPlan) -> None:
    """``plan`` (the count's best so far) as a start of the count's next search, so that a longer
    search refines it rather than only starting over. Named for what made it (its searches'
    suffixes are added again by the phases that apply); a trainer's or given schedule is named
    apart, as the pool weighs those only in their own and seqpart's order."""
    got = from_schedule(plan.ranks, search.inst)
    if got is None:  # never: the plan passed the validator
        return
    method = plan.method.replace("+local_search", "").replace("+exact_moves", "")
    if is_given(method):
        method = "continued " + method
    search.add(method, *got)


def _split(inst: StepInstance, seconds: float) -> tuple[float, float] | None:
    """(the first part's seconds, one count's quantum), or None where the count search does
    not apply (pp == 1, or fewer than ``COUNT_MIN_QUANTA`` first searches fit in what the first part
    leaves: the whole search alone then does better; see the tuning table)."""
    if inst.pp == 1:
        return None
    quantum = max(COUNT_QUANTUM_FLOOR_SECONDS, QUANTUM_SECONDS_PER_SEQUENCE * inst.n)
    base = min(BASE_SHARE * seconds, max(COUNT_BASE_SECONDS, quantum))
    if COUNT_MIN_QUANTA * quantum > seconds - base:
        return None
    return base, quantum


def _better(plan: StepPlan, than: StepPlan | None) -> bool:
    return than is None or Fraction(plan.step_time) < Fraction(than.step_time)


def plan_by_count(
    inst: StepInstance,
    seconds: float,
    t0: float,
    options: SolverOptions,
    engine: str,
    trainer_starts: bool | None,
    model: PipelineModel,
    starts: Sequence[Any],
) -> StepPlan:
    """plan_step's search, then (pp > 1, where it fits) the search of each count on its own:
    the fastest plan of all by the exact makespan. See the module's docstring."""
    split = _split(inst, seconds)
    if split is None:
        return StepSearch(inst, seconds, t0, options, engine, trainer_starts, model).run(starts)
    base_seconds, quantum = split
    # The trainers' and given schedules' order searches may take from the counts' time (so
    # that the plan is never behind one of them in seqpart's order, as without the counts).
    reserve = assembly_reserve(inst) + exact_reserve(inst, inst.n)
    first = StepSearch(inst, base_seconds, t0, options, engine, trainer_starts, model,
                       order_deadline=None if options.deterministic else t0 + seconds - reserve)
    base = best = first.run(starts)
    if best.optimal or best.stopped_by == "interrupt":  # proven, or Ctrl-C: nothing more to do
        return best
    formula_bounds = first.bounds
    counts, exact_bounds = _ordered_counts(inst, model, formula_bounds)
    search = _Counts(inst, model, options, engine, trainer_starts, formula_bounds, _seeds(first),
                     best, seconds - base_seconds,
                     # Kept back: the last plan's return (each count's search checks its own).
                     t0 + seconds - assembly_reserve(inst), quantum)
    sc = scale(inst.vpp, model)
    # One search at a time, the most promising first: a count not searched yet is as promising
    # as the fastest plan beside it, one searched as its own plan (searched again twice as
    # long, while the last search was cut); ties go to the shorter search, then to the formula's
    # order, the first part's count first. The order depends on the plans found, never on the
    # limit: a longer limit runs the same searches, and more.
    entries = {m: _Count(m) for m in counts}
    ladder = sorted(counts)
    rank = {m: j for j, m in enumerate(counts)} | {base.m: -1}
    beside = {m: [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]
              for i, m in enumerate(ladder)}
    while not search.cut:
        tasks = [(search.promise(entries[m], beside[m], entries), entries[m].level, rank[m], m)
                 for m in counts if entries[m].open
                 and Fraction(exact_bounds[m], sc) < search.best.step_time]
        if not tasks:
            break
        *_, level, _, m = min(tasks)
        search.plan(entries[m], quantum * COUNT_ROUND_GROWTH**level)
    tried = sum(entry.plan is not None for entry in entries.values())
    return _finish(base, search.best, t0, search.runs, tried, len(counts), search.cut, options,
                   search.interrupted)


def _seeds(first: StepSearch) -> dict[int, list[Row]]:
    """What the first part's searches found at each count, for that count's own search to
    start from (a count's constructions are built again there). Not the trainers' and given
    schedules nor the searches from them: the count's own search makes the trainers' at its
    count, and the first part already weighed them; so a count's searches are the same whatever
    multiple the caller asked for (bench_step_pp's 0.01% miss on sft/n128/dp8/pp2/vpp2: the same
    search without them, from the run forced to multiple_of = 1, found the faster plan)."""
    seeds: dict[int, list[Row]] = {}
    for row in sorted(first.finals, key=lambda row: (row.objective, row.arrival)):
        if not is_given(row.method) and \
                not any(seed.method == row.method for seed in seeds.get(row.m, ())):
            seeds.setdefault(row.m, []).append(row)
    return seeds


def _ordered_counts(inst: StepInstance, model: PipelineModel, formula: dict[int, int],
                    ) -> tuple[list[int], dict[int, int]]:
    """The counts the schedule can run, best formula bound first (weighed by what the schedule
    makes of each count: :func:`~seqpart.solver.step.makespan.count_penalty`), and each
    count's exact lower bound."""
    exact = instance_exact_bounds(inst, model)
    # Whether the schedule runs a count (compiling it: O(pp*vpp*m)) is checked by the count's
    # own search, for the counts visited only.
    runnable = [m for m in formula if m in exact]
    runnable.sort(key=lambda m: (formula[m] * count_penalty(inst, model, m), m))
    return runnable, exact


def _finish(base: StepPlan, best: StepPlan, t0: float, runs: int, tried: int, counts: int,
            cut: bool, options: SolverOptions, interrupted: bool) -> StepPlan:
    """The best plan with the whole call's figures: its time, its bound and status, why it
    stopped, the trainers not run to their end, and a note on the count search."""
    note = (f"count search: {tried} of {counts} counts planned on their own ({runs} searches)"
            + ("; stopped by the limit" if cut else ""))
    # The first part's bound covers every count (a count's own search bounds its count's
    # multiples only).
    bound = min(base.lower_bound, best.step_time)  # exact, each an int or a Fraction
    optimal = bound == best.step_time
    # What stopped the count search (a count's own search cut short is searched again, longer,
    # unless the limit ended it first).
    why = stop_reason(optimal, interrupted=interrupted, clock=cut and not options.deterministic,
                      work=cut and options.deterministic)
    return dataclasses.replace(
        best, seconds=time.perf_counter() - t0, notes=[*best.notes, note], stopped_by=why,
        multiple_of=base.multiple_of,
        lower_bound=bound, status="optimal" if optimal else "feasible",
        bound_source=base.bound_source, trainers_not_run=base.trainers_not_run)
