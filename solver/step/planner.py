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

import operator
import time
from collections.abc import Sequence
from typing import Any

from seqpart.solver.options import SolverOptions, as_options, pauses_gc
from seqpart.solver.problem import Cost
from seqpart.solver.step.global_plan import positive_seconds
from seqpart.solver.step.model import StepPlan, make_instance
from seqpart.solver.step.phases import StepSearch
from seqpart.solver.step.pipeline import DEFAULT_MODEL, PipelineModel

__all__ = ["plan_step"]


# ----------------------------------------------------------------------------- plan_step


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
    model = pipeline or DEFAULT_MODEL
    if not isinstance(model, PipelineModel):
        raise TypeError(f"pipeline must be a PipelineModel or None, got {type(model).__name__}")
    return StepSearch(inst, seconds, t0, options, engine, trainer_starts, model).run(starts)
