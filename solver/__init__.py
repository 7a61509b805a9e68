"""seqpart.solver: optimal capped micro-batch plans.

``partition(lengths, k, cap)`` returns a :class:`Plan` that has passed :func:`check_plan`, or
raises :class:`InfeasibleError`. See the README for the problem and the guarantees.
"""

from __future__ import annotations

from seqpart.solver.errors import InfeasibleError, InvalidPlanError
from seqpart.solver.partition import ENGINES, SolverOptions, partition
from seqpart.solver.plan import Plan, Violations, check_plan, find_violations
from seqpart.solver.problem import Cost
from seqpart.solver.step import StepPlan, check_schedule, plan_step, rank_times, step_lower_bound, step_time

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
