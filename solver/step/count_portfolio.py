"""plan_step with pp > 1: every promising count planned on its own, scored by the exact makespan.

Why: the search of :mod:`~seqpart.solver.step.phases` ranks counts and moves with the closed
formula ``sum + (pp-1)*max/vpp``, which at pp > 1 is neither the makespan nor a bound on it; it
builds few counts and, once its candidates' exact makespans are known, stops. A count the formula
ranks low is often the fastest by the exact makespan (the bubble depends on the lightest
micro-batches that start and end each rank, the interleaved schedule's rounds on ``m mod pp``).

How (:func:`plan_by_count`):

1. the whole search runs first on a fixed part of the limit (``BASE_SHARE``, at most
   ``BASE_SECONDS``): the trainers' and given schedules, seqpart's constructions, the exact
   choice; its plan is the incumbent;
2. then each count in turn, best formula bound first (weighed by what the schedule makes of the
   count), gets its own search, restricted to that count, of ``QUANTUM_SECONDS_PER_SEQUENCE * n``
   seconds: its constructions, the formula's local search, the exact makespan's choice of order
   and its moves between ranks. A count whose exact lower bound cannot beat the incumbent is
   skipped;
3. with time left, the counts whose search the budget cut get a search four times as long, the
   best half first, round after round.

The quanta and the order of the counts depend only on the input, never on the limit, so in the
repeatable mode a longer limit runs the same searches and more: its plan is never slower. Small
and mid-sized batches only: a count's search must fit twice in the time the first part leaves
(at n = 262,144 one count's search would take seconds), else the whole search runs alone as
before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ..errors import InfeasibleError
from ..options import SolverOptions
from ..plan import stop_reason
from ..tuning import BASE_SHARE, QUANTUM_SECONDS_PER_SEQUENCE
from .bound import exact_scaled_bounds
from .budget import assembly_reserve, exact_reserve
from .makespan import OPS_PER_SECOND, count_penalty
from .model import StepInstance, StepPlan
from .phases import StepSearch
from .pipeline import PipelineModel, scale
from .search import CANDIDATES_PER_SECOND
from .starts import Row

__all__ = ["plan_by_count"]

#: The first part's most seconds (its share of the limit is ``BASE_SHARE``, in the tuning table:
#: every limit from ``BASE_SECONDS / BASE_SHARE`` on runs the same first part).
BASE_SECONDS = 0.4
#: The shortest search of one count.
QUANTUM_FLOOR_SECONDS = 0.005
#: Each round after the first gives a count this many times the time of the last.
ROUND_GROWTH = 4


@dataclasses.dataclass
class _Count:
    """One count's best plan so far and whether a longer search may still improve it."""

    m: int
    plan: StepPlan | None = None
    open: bool = True  # its last search was cut by the work or the clock


def _split(inst: StepInstance, seconds: float) -> tuple[float, float] | None:
    """(the first part's seconds, one count's quantum), or None where the count search does
    not apply (pp == 1, or a count's search would not fit twice in what the first part leaves)."""
    if inst.pp == 1:
        return None
    base = min(BASE_SHARE * seconds, BASE_SECONDS)
    quantum = max(QUANTUM_FLOOR_SECONDS, QUANTUM_SECONDS_PER_SEQUENCE * inst.n)
    if 2 * quantum > seconds - base:
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
    if best.optimal:
        return best
    counts, formula_bounds, exact_bounds = _ordered_counts(inst, model, first.bounds)
    seeds = _seeds(first)
    # Kept back: the last plan's return (each count's search assembles and checks its own).
    end = t0 + seconds - assembly_reserve(inst)
    left = seconds - base_seconds
    runs, tried, cut = 0, 0, False
    pool = [_Count(m) for m in counts]
    size = quantum
    while pool:
        for entry in pool:
            if Fraction(exact_bounds[entry.m], scale(inst.vpp, model)) >= best.step_time:
                entry.open = False  # no schedule at this count beats the incumbent
                continue
            if size > left + 1e-12 or (not options.deterministic
                                       and time.perf_counter() + size > end):
                cut = True
                break
            began = time.perf_counter()
            # Its instance asks for multiples of the count: the trainers' schedulers round
            # their counts up to it, and give starts at this count (its bound is not kept).
            search = StepSearch(dataclasses.replace(inst, multiple_of=entry.m), size, began,
                                options, engine, trainer_starts, model,
                                count=(entry.m, formula_bounds))
            for row in seeds.get(entry.m, ()):
                search.add(row.method, row.m, row.mb_of)
            try:
                plan: StepPlan | None = search.run(())
            except InfeasibleError:  # none found at this count in its time
                plan = None
            # Charged its time, or the work it counted where that was more (a count's
            # constructions and exact evaluation run whatever its share): deterministic.
            left -= max(size, _counted_seconds(search))
            runs += 1
            tried += entry.plan is None
            entry.open = plan is not None and plan.stopped_by in ("work", "clock")
            if plan is not None and _better(plan, entry.plan):
                entry.plan = plan
            if plan is not None and _better(plan, best):
                best = plan
        if cut:
            break
        pool = sorted((e for e in pool if e.open and e.plan is not None),
                      key=lambda e: (Fraction(e.plan.step_time), e.m))  # type: ignore[union-attr]
        pool = pool[: max(1, len(pool) // 2)] if pool else []
        size *= ROUND_GROWTH
    return _finish(base, best, t0, runs, tried, len(counts), cut, options)


def _counted_seconds(search: StepSearch) -> float:
    """The work a search counted (candidates and exact makespan operations), in seconds at the
    rates that turn a limit into work."""
    return search.spent / CANDIDATES_PER_SECOND + search.exact_spent / OPS_PER_SECOND


def _seeds(first: StepSearch) -> dict[int, list[Row]]:
    """What the first part found at each count, for that count's own search to start from:
    the trainers' and given schedules (a count's constructions are built again there) and the
    best result of the first part's searches."""
    seeds: dict[int, list[Row]] = {}
    for row in first.pool:
        if row.method.startswith(("start ", "trainer:")):
            seeds.setdefault(row.m, []).append(row)
    for row in sorted(first.finals, key=lambda row: (row.objective, row.arrival)):
        if not any(seed.method == row.method for seed in seeds.get(row.m, ())):
            seeds.setdefault(row.m, []).append(row)
    return seeds


def _ordered_counts(inst: StepInstance, model: PipelineModel, formula: dict[int, int],
                    ) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """The counts the schedule can run, best formula bound first (weighed by what the schedule
    makes of each count: :func:`~seqpart.solver.step.makespan.count_penalty`), the formula's
    bounds and each count's exact lower bound."""
    exact = exact_scaled_bounds(inst, model)
    # Whether the schedule runs a count (compiling it: O(pp*vpp*m)) is checked by the count's
    # own search, for the counts visited only.
    runnable = [m for m in formula if m in exact]
    runnable.sort(key=lambda m: (formula[m] * count_penalty(inst, model, m), m))
    return runnable, formula, exact


def _finish(base: StepPlan, best: StepPlan, t0: float, runs: int, tried: int, counts: int,
            cut: bool, options: SolverOptions) -> StepPlan:
    """The best plan with the whole call's figures: its time, its bound and status, why it
    stopped, the trainers not run to their end, and a note on the count search."""
    note = (f"count search: {tried} of {counts} counts planned on their own ({runs} searches)"
            + ("; stopped by the limit" if cut else ""))
    # The first part's bound covers every count (a count's own search bounds its count's
    # multiples only).
    bound = min(Fraction(base.lower_bound), Fraction(best.step_time))
    bound_out = bound.numerator if bound.denominator == 1 else bound
    optimal = bound == best.step_time
    clock = best.stopped_by == "clock" or (cut and not options.deterministic)
    why = stop_reason(optimal, interrupted="interrupt" in (base.stopped_by, best.stopped_by),
                      clock=clock, work=cut or best.stopped_by == "work")
    return dataclasses.replace(
        best, seconds=time.perf_counter() - t0, notes=[*best.notes, note], stopped_by=why,
        multiple_of=base.multiple_of,
        lower_bound=bound_out, status="optimal" if optimal else "feasible",
        bound_source=base.bound_source, trainers_not_run=base.trainers_not_run)
