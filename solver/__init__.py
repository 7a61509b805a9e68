"""seqpart.solver: optimal capped micro-batch plans.

``partition(lengths, k, cap)`` returns a :class:`Plan` that has passed :func:`check_plan`, or
raises :class:`InfeasibleError`. See the README for the problem and the guarantees.
"""

from __future__ import annotations

from .partition import ENGINES, SolverOptions, partition
from .plan import (
    InfeasibleError,
    InvalidPlanError,
    Plan,
    Violations,
    check_plan,
    find_violations,
)
from .problem import Cost
from .step import (
    StepPlan,
    check_schedule,
    plan_step,
    rank_times,
    step_lower_bound,
    step_time,
)

__all__ = [
    "ENGINES",
    "Cost",
    "InfeasibleError",
    "InvalidPlanError",
    "Plan",
    "SolverOptions",
    "StepPlan",
    "Violations",
    "check_plan",
    "check_schedule",
    "find_violations",
    "partition",
    "plan_step",
    "rank_times",
    "step_lower_bound",
    "step_time",
]
