"""The order of a rank's micro-batches in a pipeline: which one runs first matters under pp > 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqpart.heuristics.inputs import as_positive_int
from seqpart.solver.plan import Plan
from seqpart.solver.step.pipeline import (
    DEFAULT_MODEL,
    ORDER_WORK,
    PipelineModel,
    improve_order,
    light_ends_order,
    schedule_error,
)


def order_for_pipeline(
    plan_or_loads: Plan | Sequence[int],
    *,
    pp: int | None = None,
    vpp: int = 1,
    pipeline: PipelineModel | None = None,
    work_budget: int = ORDER_WORK,
) -> list[int]:
    """An execution order of micro-batches for pipeline parallelism.

    Without ``pp``: lightest at both ends, heaviest in the middle. Why: during pipeline warm-up
    and cool-down only some stages are busy, so a heavy micro-batch there stretches the exposed
    bubble; in the steady middle its time overlaps other stages'.

    With ``pp`` (and ``vpp``, ``pipeline``: the schedule, default Megatron-LM's): that order,
    or the given one when it is faster, then improved by local search (moves and swaps) on the
    exact makespan of the schedule (:func:`~seqpart.solver.step.pipeline.improve_order`) within
    ``work_budget`` operations, deterministic. ``loads`` are then the micro-batch times.

    Returns positions into ``plan.bins`` (or ``loads``): run ``plan.bins[order[0]]`` first. Ties
    keep the lower position first, so the order is deterministic on every rank.
    """
    loads = list(plan_or_loads.loads if isinstance(plan_or_loads, Plan) else plan_or_loads)
    light = light_ends_order(loads)
    if pp is None or not loads:
        return light
    pp, vpp = as_positive_int(pp, "pp"), as_positive_int(vpp, "vpp")
    model = pipeline or DEFAULT_MODEL
    why = schedule_error(pp, vpp, len(loads), model)
    if why is not None:
        raise ValueError(f"{len(loads)} micro-batches: {why}")
    order, _, _ = improve_order([int(x) for x in loads], pp, vpp, model,
                                starts=[light, list(range(len(loads)))], work_budget=work_budget)
    return order
