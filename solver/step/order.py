"""The order of a rank's micro-batches in a pipeline: which one runs first matters under pp > 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqpart.solver.plan import Plan


def order_for_pipeline(plan_or_loads: Plan | Sequence[int]) -> list[int]:
    """An execution order of micro-batches for pipeline parallelism: lightest at both ends,
    heaviest in the middle.

    Why: during pipeline warm-up and cool-down only some stages are busy, so a heavy micro-batch
    there stretches the exposed bubble; in the steady middle its time overlaps other stages'.

    Returns positions into ``plan.bins`` (or ``loads``): run ``plan.bins[order[0]]`` first. Ties
    keep the lower position first, so the order is deterministic on every rank.
    """
    loads = list(plan_or_loads.loads if isinstance(plan_or_loads, Plan) else plan_or_loads)
    ascending = sorted(range(len(loads)), key=lambda b: (loads[b], b))
    # Alternate the ascending sequence between the front half and the back half (reversed),
    # so loads rise towards the middle from both ends.
    front = ascending[0::2]
    back = ascending[1::2]
    return front + back[::-1]
