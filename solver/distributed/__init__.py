"""Planning across data-parallel ranks (torch.distributed; torch is imported lazily).

* :mod:`~seqpart.solver.distributed.planners`: :func:`partition_across_ranks` (ranks agree on one
  count, each fills exactly that many), :func:`plan_global_across_ranks` and
  :func:`plan_step_across_ranks` (the step planned once, each rank takes its share).
* :mod:`~seqpart.solver.distributed.collective`: the collective-failure protocol: every rank
  raises the same :class:`~seqpart.solver.errors.DistributedPlanError`, none waits forever.
"""

from __future__ import annotations

from ..errors import DistributedPlanError
from .planners import (
    GlobalPlan,
    StepSchedule,
    partition_across_ranks,
    plan_global_across_ranks,
    plan_step_across_ranks,
)

__all__ = [
    "DistributedPlanError",
    "GlobalPlan",
    "StepSchedule",
    "partition_across_ranks",
    "plan_global_across_ranks",
    "plan_step_across_ranks",
]
