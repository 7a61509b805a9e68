"""Planning a whole training step across data-parallel (and pipeline) ranks, in one process.

:func:`plan_step` chooses the count per rank, the micro-batches and the ranks together for the
smallest step time under the model of :mod:`seqpart.solver.step.model` (re-exported here:
:func:`step_time`, :func:`rank_times`, :func:`step_lower_bound`, :func:`check_schedule`,
:class:`StepPlan`). Its parts: starts in :mod:`~seqpart.solver.step.starts`, local search in
:mod:`~seqpart.solver.step.search`, CP-SAT in :mod:`~seqpart.solver.step.cpsat`.

:func:`plan_global` (:mod:`~seqpart.solver.step.global_plan`) and :func:`order_for_pipeline`
(:mod:`~seqpart.solver.step.order`) are its cheaper neighbours. The collective forms live in
:mod:`seqpart.solver.distributed.planners`, which only moves data between ranks and calls these.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.solver.errors import InfeasibleError
from seqpart.solver.options import SolverOptions, as_options, pauses_gc
from seqpart.solver.problem import Cost
from seqpart.solver.step.bound import exact_scaled_bounds, scaled_bounds
from seqpart.solver.step.cpsat import exact_fits, solve_step_exactly
from seqpart.solver.step.exact import OPS_PER_SECOND, assemble, choose_exact, count_penalty
from seqpart.solver.step.global_plan import positive_seconds
from seqpart.solver.step.model import StepPlan, make_instance
from seqpart.solver.step.model import exact as exact_time
from seqpart.solver.step.pipeline import DEFAULT_MODEL, PipelineModel, scale, schedule_error
from seqpart.solver.step.search import CANDIDATES_PER_SECOND, improve_schedule, schedule_objective
from seqpart.solver.step.starts import CONSTRUCTIONS, from_schedule, micro_first
from seqpart.solver.step.trainer_starts import VerlRetry, cheap_trainer_starts, costly_trainer_starts

__all__ = ["plan_step"]


# ----------------------------------------------------------------------------- plan_step


#: The two constructions at one count, in candidate evaluations per sequence (measured 10-20 us
#: per sequence for both at n=4096, dp=64 under loads of 3-5).
_BUILD_WORK_PER_SEQUENCE = 400
#: Share of the work budget spent on starts at several counts before the first search.
_BUILD_SHARE = 0.4
#: Share of the work budget the trainers' schedules may take (the cheap ones first).
_TRAINER_SHARE = 0.4
#: Counts built whatever the clock says while no valid start exists yet.
_COUNTS_BEFORE_CLOCK = 3
#: With pp > 1, the share of the time for the exact makespan: evaluating the best schedules
#: and the trainers' exactly, and the order search on the slowest rank.
_EXACT_SHARE = 0.25
#: ...and the unsearched starts evaluated exactly besides the searched ones, the trainers' and
#: the given ones (best proxy first).
_EXTRA_CANDIDATES = 4


@dataclass
class _Best:
    objective: int | None = None  # vpp x step time
    m: int = 0
    mb_of: np.ndarray | None = None
    method: str = ""


@pauses_gc
def plan_step(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int | None = None,
    cost: str | Cost | tuple[int, int] = "tokens",
    overhead: int = 0,
    time_limit: float = 1.0,
    oversize: str = "error",
    starts: Sequence[Any] = (),
    trainer_starts: bool | None = None,
    engine: str = "auto",
    options: SolverOptions | None = None,
    pipeline: PipelineModel | None = None,
) -> StepPlan:
    """Plan a whole training step: the count ``m`` per rank, the micro-batches, the ranks and
    (with ``pp > 1``) each rank's order together, minimising the step time of the model in
    :mod:`seqpart.solver.step.model`: with ``pp > 1``, the exact makespan of the pipeline
    schedule ``pipeline`` (default Megatron-LM's 1F1B, interleaved when ``vpp > 1``).

    How: the search ranks moves with the closed formula ``sum + (pp-1)*max/vpp`` (exact at
    pp = 1, a fast proxy otherwise). Every feasible ``m`` gets the formula's lower bound (see
    :func:`~seqpart.solver.step.bound.scaled_bounds`); counts are tried best bound first
    (with pp > 1 weighed by what the schedule makes of equal micro-batches at that count),
    and only while that is below the best found; starts at several counts are built before
    any search. At each count the
    constructions of :mod:`~seqpart.solver.step.starts` run: ranks first by a greedy on the
    estimated rank time (``pp > 1``), ranks first by Karmarkar-Karp on cost (each rank then split
    into ``m`` under the cap, by Karmarkar-Karp when it fits the cap and ``pp > 1``), ranks
    packed for a target step time found by bisection (``pp > 1``: long sequences together on
    few ranks, so the other ranks' bubbles stay short), and micro-batches first
    (capped LPT on cost, then dealt to ranks ``m`` each by equal-count
    Karmarkar-Karp, the shape of :func:`plan_global`). They join a pool with the valid
    schedules in ``starts`` and the trainers' own schedules; the best unsearched start of the
    pool is improved by local search (:mod:`seqpart.solver.step.search`), and one more count is
    built after each search while the budget lasts. On tiny instances (every count's model
    under ``step_cpsat.MAX_BOOLS`` booleans in all) CP-SAT then solves the formula exactly,
    with half the budget, which proves the plan optimal at pp = 1 (``engine="heuristics"``
    skips it). With ``pp > 1``, a quarter of the budget then goes to the exact makespan
    (:mod:`seqpart.solver.step.exact`): every search's result, every trainer's and given
    schedule and the best unsearched starts are evaluated exactly with each rank lightest at
    both ends (or in its own order, when faster), the most promising get a local search of
    the order of their slowest rank on the exact makespan, and the fastest is returned, in
    that order. ``step_time`` is that schedule's exact makespan; ``formula_step_time`` the
    formula's figure for it. With ``pp == 1`` the order does not matter; ranks are listed
    lightest micro-batch first and last.

    Budget: ``time_limit`` becomes a deterministic work budget (candidate evaluations of the
    local search; CP-SAT's deterministic time), so the same input gives the same plan; the clock
    is only a safety net, and ``notes`` say when it cut the search (the plan may then differ
    between runs). ``options.deterministic=True`` drops the clock too.

    Args:
        lengths: token count per sequence of the whole step (all ranks' samples).
        dp_size: data-parallel ranks.
        cap: max tokens per micro-batch; None for no cap.
        pp, vpp: pipeline stages and virtual stages (model chunks) per device.
        multiple_of: ``m`` is a multiple of this. None (default): ``pp`` when ``vpp > 1``, else 1,
            because Megatron-LM's interleaved schedule (vpp > 1) needs the number of
            micro-batches per rank to be a multiple of the pipeline size; pass 1 (or your
            trainer's group size) to plan without that rule.
        cost: "tokens", "attention", ``Cost(a, b)`` or ``(a, b)``: a sequence costs a*l + b*l^2.
        overhead: fixed time of each micro-batch, in the cost's units (an int >= 0).
        time_limit: seconds for the whole call.
        oversize: "error" (reject a sequence over the cap) or "alone" (its own micro-batch).
        starts: schedules (``[rank][micro-batch] = indices``) to start from, e.g. your trainer's;
            invalid ones are skipped (noted). The plan is never worse than a valid start.
        trainer_starts: also start from the trainers' schedulers
            (``seqpart.heuristics.trainer_baselines``, computed by
            :mod:`~seqpart.solver.step.trainer_starts`: the same schedules, faster). None
            (default): within 40% of the work budget, cheapest first: Megatron-LM's, slime's
            two and verl's before the constructions; prime-rl's (its swap refinement cut by the
            budget) and verl's retry once the first count is built, skipped when their count
            cannot beat the incumbent (per-count bound), and again with the search's leftover
            when the budget cut them (verl's retry resumes where it stopped). The plan is never
            behind a valid trainer schedule that ran to its end (``notes`` say which did not).
            Whether one runs to its end depends on the work budget only (deterministic; the
            clock can cut more on a loaded machine, and ``notes`` then say so). Measured with
            the clock dropped (``options.deterministic=True``) on bench_step's 64 batches
            (cost (24576, 1), overhead 24576 * 512): at time_limit=0.5 every trainer runs to
            its end on every batch with n <= 1024; at n=4096 one was cut on 5 of 16 batches
            (prime-rl's refinement, up to 5e8 pairs, on 4; verl's retry at dp <= 4, up to
            ~0.4 s, on 2), at time_limit=1.0 on 5, at 2.0 on 3 (prime-rl's refinement only).
            There the guarantee does not hold, though bench_step's plans were behind none.
            At time_limit=0.1, n=4096, dp=64 only Megatron-LM's runs. True: all, run to the
            end whatever the budget.
            To be sure never to be behind your trainer, pass its schedule in ``starts``.
        engine: "auto" (heuristics, then CP-SAT on tiny instances) or "heuristics".
        options: CP-SAT settings (seed, log, extra parameters; deterministic drops the clock).
        pipeline: the schedule each rank runs under pp > 1, its forward:backward shares and
            p2p latency (:class:`~seqpart.solver.step.pipeline.PipelineModel`); None:
            Megatron-LM's 1F1B (interleaved when vpp > 1), 1:2, no latency. Another:
            ``PipelineModel(schedule="gpipe")``, ``PipelineModel(forward=1, backward=1)``, ...

    Returns:
        A :class:`StepPlan` that has passed :func:`check_schedule`.

    Raises:
        ValueError / TypeError: bad arguments, naming the fix.
        InfeasibleError: no count per rank can work (too few sequences for ``dp_size * m``
            non-empty micro-batches under the cap), or none was found in the budget.
    """
    t0 = time.perf_counter()
    seconds = positive_seconds(time_limit)
    if engine not in ("auto", "heuristics"):
        raise ValueError(f"engine={engine!r}: use 'auto' or 'heuristics'")
    if trainer_starts not in (None, True, False):
        raise TypeError(f"trainer_starts must be None, True or False, got {trainer_starts!r}")
    options = as_options(options)
    if multiple_of is None:  # the rule above; bad pp/vpp values are named by make_instance
        try:
            interleaved, stages = operator.index(vpp) > 1, operator.index(pp)
        except TypeError:
            interleaved, stages = False, 1
        multiple_of = stages if interleaved and stages >= 1 else 1
    inst = make_instance(
        lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
        multiple_of=multiple_of, oversize=oversize,
    )
    if isinstance(starts, (str, bytes)) or not isinstance(starts, Sequence):
        raise TypeError("starts must be a list of schedules ([rank][micro-batch] = indices)")
    # Kept back from the clock for checking and assembling the plan.
    reserve = 0.008 + 5e-6 * inst.n
    if inst.pp > 1:  # the exact makespans of the plan and of its candidates' cheap orders
        reserve += 8 * inst.n * inst.pp * inst.vpp / OPS_PER_SECOND
    deadline = None if options.deterministic else t0 + seconds - reserve
    # With pp > 1 the exact makespan's share of the time comes last: the rest must end before.
    final_deadline = deadline
    if deadline is not None and inst.pp > 1:
        deadline = t0 + (seconds - reserve) * (1 - _EXACT_SHARE)
    budget = max(20_000, int(seconds * CANDIDATES_PER_SECOND))
    notes: list[str] = []
    bounds = scaled_bounds(inst)  # of the formula: the search's proxy (exact at pp = 1)
    model = pipeline or DEFAULT_MODEL
    if not isinstance(model, PipelineModel):
        raise TypeError(f"pipeline must be a PipelineModel or None, got {type(model).__name__}")
    exact_work = 0
    unusable: list[int] = []  # counts the pipeline schedule cannot run, met so far

    @functools.cache
    def usable(m: int) -> bool:
        """Checked lazily (compiling a count's schedule is O(pp*vpp*m)): only the counts met."""
        ok = inst.pp == 1 or schedule_error(inst.pp, inst.vpp, m, model) is None
        if not ok:
            unusable.append(m)
        return ok

    if inst.pp > 1:
        group = model.group or inst.pp
        if model.resolved(inst.vpp) == "interleaved" and max(bounds) < group:
            raise InfeasibleError(
                f"interleaving needs at least {group} micro-batches per rank (Megatron-LM's "
                f"group per chunk), but {inst.n} sequences over {inst.dp_size} ranks give at most "
                f"{max(bounds)}: use fewer ranks, vpp=1, or add samples",
                proven=True,
            )
        exact_work = int(_EXACT_SHARE * budget / CANDIDATES_PER_SECOND * OPS_PER_SECOND)
        budget -= int(_EXACT_SHARE * budget)
    # Tiny instances (every count's model small): half the time is CP-SAT's, decided up front
    # so that the split does not depend on the clock.
    use_exact = engine == "auto" and exact_fits(inst, list(bounds))
    if use_exact:
        budget //= 2
    costs = np.asarray(inst.costs, dtype=object)

    def out_of_clock(margin: float = 0.0) -> bool:
        return deadline is not None and time.perf_counter() > deadline - margin

    # The pool of valid starts: (objective, arrival, method, m, mb_of); searched best first.
    pool: list[tuple[int, int, str, int, np.ndarray]] = []
    constructed: list[str] = []  # valid starts of our own constructions (not given, not trainers')

    def add(method: str, m: int, mb_of: np.ndarray) -> None:
        if not usable(m):
            return
        if not method.startswith(("start ", "trainer:")):
            constructed.append(method)
        obj = schedule_objective(mb_of, costs, inst.dp_size * m, m, inst.overhead, inst.pp,
                                 inst.vpp)
        pool.append((obj, len(pool), method, m, mb_of))

    given = [(f"start {j}", sched) for j, sched in enumerate(starts)]
    spent = 0
    # The trainers' schedules: the cheap ones now, the open-ended ones (verl's retry, prime-rl's
    # refinement) once the search is done, with the share kept back for them.
    trainer_share = None if trainer_starts else int(_TRAINER_SHARE * budget)
    retry: VerlRetry | None = None
    if trainer_starts is not False:
        trainers, trainer_notes, spent, retry = cheap_trainer_starts(inst, trainer_share)
        given += trainers
        notes += trainer_notes
    kept_back = 0 if trainer_share is None else max(0, trainer_share - spent)
    skipped = []
    for method, sched in given:
        found = from_schedule(sched, inst)
        if found is None or found[0] not in bounds:
            skipped.append(method)
        else:
            add(method, *found)
    if skipped:
        notes.append(f"starts that break the contract, skipped: {', '.join(skipped)}")

    best = _Best()
    clock_cut = False
    searched: set[int] = set()
    finals: list[tuple[int, int, str, int, np.ndarray]] = []  # every search's result

    def search_next(share: int) -> None:
        """Local search from the best start not searched yet."""
        nonlocal spent, clock_cut
        open_ = [row for row in pool if row[1] not in searched]
        if not open_:
            return
        obj, arrival, method, m, mb_of = min(open_, key=lambda row: (row[0], row[1]))
        searched.add(arrival)
        result = improve_schedule(
            mb_of, inst.tokens.tolist(), inst.costs, inst.dp_size, m, inst.cap, inst.overhead,
            inst.pp, inst.vpp, bound=bounds[m], work_budget=share, deadline=deadline,
        )
        spent += result.work
        clock_cut |= result.stopped_by == "clock"
        if result.objective > obj:  # never: the search only takes improving changes
            raise RuntimeError("step local search made a schedule worse (please report)")
        name = method + ("+local_search" if result.steps else "")
        finals.append((result.objective, arrival, name, m, result.mb_of))
        if best.objective is None or result.objective < best.objective:
            best.objective, best.m, best.mb_of, best.method = result.objective, m, result.mb_of, name

    def incumbent() -> int | None:
        values = [row[0] for row in pool] + ([best.objective] if best.objective is not None else [])
        return min(values) if values else None

    build = _BUILD_WORK_PER_SEQUENCE * inst.n
    # A count's constructions take about this long; on a loaded machine (or at small dp, where
    # each rank's split is long) the last count's wall time says more: the larger guards the
    # clock (a safety net only: it decides nothing on an unloaded machine).
    nominal_build = build / CANDIDATES_PER_SECOND
    walls = {"count": nominal_build, "make": nominal_build / 2}

    def build_seconds() -> float:
        return max(nominal_build, walls["count"])
    pending = sorted(bounds, key=lambda m: (bounds[m] * count_penalty(inst, model, m), m))
    tried = 0

    def build_next() -> None:
        nonlocal spent, tried
        m = pending.pop(0)
        if not usable(m):
            return
        tried += 1
        began_count = time.perf_counter()
        for make in CONSTRUCTIONS:
            # Once a construction gave a valid start, the next only while the clock allows (the
            # given and trainers' starts do not count: ours are usually far better).
            if constructed and out_of_clock(max(nominal_build / 2, walls["make"])):
                break
            began = time.perf_counter()
            for method, mb_of in make(inst, m, seconds, bounds[m], deadline):
                add(method, m, mb_of)
            walls["make"] = max(walls["make"], time.perf_counter() - began)
            spent += build // len(CONSTRUCTIONS)
        walls["count"] = max(walls["count"], time.perf_counter() - began_count)

    def drop_hopeless() -> None:
        # Both sides weighed by what the schedule makes of the count (1 when pp == 1).
        rows = [(row[0], row[3]) for row in pool] + (
            [(best.objective, best.m)] if best.objective is not None else [])
        if not rows:
            return
        top = min(obj * count_penalty(inst, model, m) for obj, m in rows)
        while pending and bounds[pending[0]] * count_penalty(inst, model, pending[0]) >= top:
            pending.pop(0)

    # The trainers' open-ended schedules (verl's retry, prime-rl's refinement) with the share
    # kept back for them, once the first count is built (its starts are the incumbent that
    # rules out the trainers that cannot beat it) and before the search and the other counts:
    # those are what the clock may cut.

    def hopeless(m: int, onwards: bool) -> bool:
        """No valid schedule with count m (or any count from m on) beats the incumbent. With
        pp > 1 the formula's bounds do not bound the exact makespan: never."""
        top = incumbent()
        if top is None or inst.pp > 1:
            return False
        if onwards:
            return all(v >= top for q, v in bounds.items() if q >= m)
        return m not in bounds or bounds[m] >= top

    def costly(share: int | None, run_prime_rl: bool = True) -> tuple[int, bool]:
        nonlocal spent, costly_done, retry, prime_cut
        costly_done = True
        found, more, work, cut = costly_trainer_starts(inst, share, hopeless, deadline, retry,
                                                       run_prime_rl)
        spent += work
        notes.extend(more)
        # A retry cut short resumes on the next call (its state kept); one that ended does not.
        if not any(note.startswith("trainer start verl_retry") for note in more):
            retry = None
        prime_cut = any(note.startswith("trainer start prime_rl") for note in more)
        for method, sched in found:
            start = from_schedule(sched, inst)
            if start is not None and start[0] in bounds:
                add(method, *start)
        return work, cut

    costly_cut, costly_work, costly_done, prime_cut = False, 0, False, False
    # 1. Starts at several counts before any search: with pp > 1 the bounds of neighbouring
    # counts are close, and the constructions' own step times separate them better.
    # Until a construction gave a valid start the clock is not looked at for the first
    # _COUNTS_BEFORE_CLOCK counts: a plan beats an error.
    while pending and (
        (not constructed and tried < _COUNTS_BEFORE_CLOCK) or not out_of_clock(build_seconds())
    ):
        drop_hopeless()
        if not pending or (constructed and spent + build > _BUILD_SHARE * budget):
            break
        if constructed and deadline is not None and time.perf_counter() - t0 > _BUILD_SHARE * seconds:
            clock_cut = True  # a slow machine: leave the rest of the time to the search
            break
        build_next()
        if trainer_starts is not False and not costly_done and constructed:
            costly_work, costly_cut = costly(None if trainer_share is None else kept_back)
    # No start yet (every construction broke the cap): the capped balancer, count by count,
    # from the smallest; it always finds a split when one is easy to find.
    for j, m in enumerate(m for m in sorted(bounds) if usable(m)):
        if pool or (j and out_of_clock()):
            break
        for method, mb_of in micro_first(inst, m, seconds, repair=True):
            add(method, m, mb_of)
    if trainer_starts is not False and not costly_done:
        costly_work, costly_cut = costly(None if trainer_share is None else kept_back)
    # 3. Search the best start, then build one more count, while the budget lasts.
    while True:
        progressed = False
        if len(searched) < len(pool) and spent < budget and not out_of_clock():
            search_next(max(0, (budget - spent) // 2))
            progressed = True
        drop_hopeless()
        if pending and spent + build <= budget:
            if out_of_clock(build_seconds()):
                clock_cut = True  # the budget allowed another count, the clock did not
            else:
                build_next()
                progressed = True
        if not progressed and costly_cut and budget - spent > 0 and not out_of_clock():
            # The search left some of the budget: the trainers' open-ended schedules again with
            # all of it (against the better incumbent): verl's retry resumes where it stopped,
            # prime-rl (which starts over) only when more is left than it had. Then search on.
            costly_work, costly_cut = costly(budget - spent,
                                             prime_cut and budget - spent > costly_work)
            costly_cut = False
            progressed = True
        if not progressed:
            break
    clock_cut |= out_of_clock() and spent < budget
    # The best start may never have been searched (budget spent): it still counts.
    for obj, arrival, method, m, mb_of in pool:
        if arrival not in searched and (best.objective is None or obj < best.objective):
            best.objective, best.m, best.mb_of, best.method = obj, m, mb_of, method
    if best.mb_of is None:
        raise InfeasibleError(
            f"no schedule of {dp_size} ranks with an equal count of non-empty micro-batches under "
            f"cap={inst.cap} that the pipeline schedule can run was found in {seconds}s, and "
            "none is proven impossible: raise time_limit or the cap, or use fewer ranks (with "
            "vpp > 1, Megatron-LM's interleaving needs at least pp micro-batches per rank)",
            proven=False,
        )
    notes.append(
        f"counts built: {tried} of {len(bounds)} feasible (best bound first); starts searched: "
        f"{len(searched)} of {len(pool)}; work {spent} of {budget}"
    )

    # CP-SAT on tiny instances: improves and proves, count by count (the formula's optimum:
    # with pp > 1 a candidate for the exact choice, and its bounds bound the formula only).
    proven = dict(bounds)
    if use_exact and not out_of_clock():
        exact = solve_step_exactly(inst, bounds, best.objective, deadline, seconds / 2, options)
        if exact is not None:
            if inst.pp == 1:
                proven = exact.bounds
            notes += exact.notes
            if exact.mb_of is not None and exact.objective is not None and usable(exact.m):
                finals.append((exact.objective, len(pool), "cp-sat", exact.m, exact.mb_of))
                if exact.objective < best.objective:
                    best.objective, best.m, best.mb_of, best.method = (
                        exact.objective, exact.m, exact.mb_of, "cp-sat"
                    )
    if clock_cut:
        notes.append("stopped by the clock, not the work budget: the plan may differ between runs")
    if unusable:
        notes.append(f"counts the {model.resolved(inst.vpp)} schedule cannot run, skipped: "
                     f"{sorted(unusable)}")
    if inst.pp == 1:
        return assemble(inst, model, best.m, best.mb_of, best.method, None,
                        exact_time(best.objective, inst.vpp),
                        exact_time(min(proven.values()), inst.vpp), notes, t0)
    # pp > 1: the exact makespan decides between the searches' results, the trainers' and the
    # given schedules and the best unsearched starts, each rank ordered for it.
    given_rows = [row for row in pool if row[2].startswith(("start ", "trainer:"))]
    given_ids = {row[1] for row in given_rows}
    rest = sorted((row for row in pool if row[1] not in searched and row[1] not in given_ids),
                  key=lambda row: (row[0], row[1]))
    # The best unsearched starts, and the best start of every count built: the formula ranks
    # counts differently from the schedule (interleaving at a count that is not a multiple of
    # pp runs slower than the formula says).
    per_count = {row[3]: row for row in reversed(rest)}
    top = {row[1] for row in rest[:_EXTRA_CANDIDATES]}
    others = rest[:_EXTRA_CANDIDATES] + [row for row in per_count.values() if row[1] not in top]
    cands = sorted(finals + given_rows + others, key=lambda row: (row[0], row[1]))
    choice = choose_exact(inst, [(row[3], row[4]) for row in cands], model, exact_work,
                          final_deadline, first=[row[1] in given_ids for row in cands])
    if choice.clock_cut:
        notes.append("the exact makespan's order search was stopped by the clock, not the work "
                      "budget: the plan may differ between runs")
    _, _, method, m, mb_of = cands[choice.index]
    notes.append(f"exact makespan: {len(cands)} schedules evaluated, {choice.evaluated} "
                 f"order-searched; work {choice.work} of {exact_work}")
    sc = scale(inst.vpp, model)
    return assemble(inst, model, m, mb_of, method, choice.ordered.orders,
                    exact_time(choice.ordered.step, sc),
                    exact_time(min(exact_scaled_bounds(inst, model).values()), sc), notes, t0)
