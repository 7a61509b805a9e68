"""Planning a whole training step across data-parallel (and pipeline) ranks, in one process.

:func:`plan_step` chooses the count per rank, the micro-batches and the ranks together for the
smallest step time under the model of :mod:`seqpart.solver.step.model` (re-exported here:
:func:`step_time`, :func:`rank_times`, :func:`step_lower_bound`, :func:`check_schedule`,
:class:`StepPlan`). Its parts: starts in :mod:`~seqpart.solver.step.starts`, local search in
:mod:`~seqpart.solver.step.search`, CP-SAT in :mod:`~seqpart.solver.step.tiny_cpsat`.

:func:`plan_global` (:mod:`~seqpart.solver.step.global_plan`) and :func:`order_for_pipeline`
(:mod:`~seqpart.solver.step.makespan`) are its cheaper neighbours. The collective forms live in
:mod:`seqpart.solver.distributed.planners`, which only moves data between ranks and calls these.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..batch_cost import MicroBatchCost
from ..options import SolverOptions, as_options, pauses_gc
from ..problem import Cost
from .global_plan import positive_seconds
from .model import StepPlan, default_multiple_of, make_instance
from .phases import plan_by_count
from .pipeline import PipelineModel

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
    overhead: int | MicroBatchCost = 0,
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

    How (the phases and their shares of the budget: :mod:`seqpart.solver.step.phases`): the
    search ranks moves with the closed formula ``sum + (pp-1)*max/vpp`` (exact at pp = 1, a fast
    proxy otherwise); counts are tried best bound first while their bound can beat the best
    found; at each count the constructions of :mod:`~seqpart.solver.step.starts` join the
    given and the trainers' schedules in a pool, whose best unsearched start is improved by
    local search (:mod:`~seqpart.solver.step.search`); CP-SAT solves tiny instances exactly
    (proving the plan optimal at pp = 1); with ``pp > 1`` a quarter of the budget then goes to
    the exact makespan (:mod:`~seqpart.solver.step.makespan`), which picks the fastest candidate
    and the order of its ranks. With ``pp > 1``, where it fits (small and mid-sized batches),
    that whole search gets 40% of the limit (at most 0.4 s) and the rest goes to the count
    search of :mod:`~seqpart.solver.step.phases.by_count`: each count, best bound first, is
    searched on its own and scored by the exact makespan, the most promising again for longer.
    ``step_time`` is the chosen schedule's exact makespan, ``formula_step_time`` the formula's
    figure for it.

    Budget: ``time_limit`` is a work budget (candidate evaluations; CP-SAT's deterministic
    time) and, unless ``options.deterministic``, also a deadline on the clock; ``stopped_by``
    says what ended the search ("clock": the plan may then differ between runs).
    With ``deterministic=True`` the same input gives the same plan, and with ``pp > 1`` a
    limit of 1 s or more never gives a slower plan than a shorter one of 1 s or more.

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
            (``seqpart.heuristics.trainer_baselines``: the same functions, run by
            :mod:`~seqpart.solver.step.starts.trainers` within the budget). None
            (default): all of them first, cheapest first, each run to its end while the budget
            and the clock allow (prime-rl's swap refinement and verl's retry take at most a
            quarter of the budget before the search and resume with what it leaves;
            ``trainers_not_run`` names any trainer not run to its end). With ``pp > 1`` each
            gets the order search of :func:`~seqpart.solver.step.order_schedule` before the
            exact choice. The plan is never behind a valid trainer schedule that ran to its
            end, in its own order or in seqpart's. True: all, run to the end whatever the
            budget. To be sure never to be behind your trainer, pass its schedule in
            ``starts``.
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
    _check_choices(engine, trainer_starts)
    options = as_options(options)
    if multiple_of is None:
        multiple_of = default_multiple_of(pp, vpp)
    inst = make_instance(lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
                         multiple_of=multiple_of, oversize=oversize, pipeline=pipeline)
    if isinstance(starts, (str, bytes)) or not isinstance(starts, Sequence):
        raise TypeError("starts must be a list of schedules ([rank][micro-batch] = indices)")
    return plan_by_count(inst, seconds, t0, options, engine, trainer_starts, inst.pipeline, starts)


def _check_choices(engine: str, trainer_starts: bool | None) -> None:
    """``engine`` and ``trainer_starts`` are one of their documented values."""
    if engine not in ("auto", "heuristics"):
        raise ValueError(f"engine={engine!r}: use 'auto' or 'heuristics'")
    if trainer_starts not in (None, True, False):
        raise TypeError(f"trainer_starts must be None, True or False, got {trainer_starts!r}")
