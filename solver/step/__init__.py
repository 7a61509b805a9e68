"""Step planning: the micro-batch count, the rank assignment and the order, against the step time.

* :mod:`~seqpart.solver.step.planner`: :func:`plan_step` (the orchestrator), :func:`plan_global`,
  :func:`order_for_pipeline`.
* :mod:`~seqpart.solver.step.model`: the step-time model, its lower bound, the schedule validator
  and :class:`StepPlan`.
* :mod:`~seqpart.solver.step.starts`, :mod:`~seqpart.solver.step.trainer_starts`: starting
  schedules (seqpart's constructions, and the trainers' schedulers as fast starts).
* :mod:`~seqpart.solver.step.search`, :mod:`~seqpart.solver.step.cpsat`: local search on the step
  time, and the exact CP-SAT model for small cases.
"""

from __future__ import annotations

from seqpart.solver.step.model import (
    StepPlan,
    check_schedule,
    rank_times,
    step_lower_bound,
    step_time,
)
from seqpart.solver.step.planner import order_for_pipeline, plan_global, plan_step, round_up

__all__ = [
    "StepPlan",
    "check_schedule",
    "order_for_pipeline",
    "plan_global",
    "plan_step",
    "rank_times",
    "round_up",
    "step_lower_bound",
    "step_time",
]
