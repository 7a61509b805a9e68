"""Step planning: the micro-batch count, the rank assignment and the order, against the step time.

* :mod:`~seqpart.solver.step.planner`: :func:`plan_step`, the orchestrator.
* :mod:`~seqpart.solver.step.global_plan`: :func:`plan_global`, the cheap two-level proxy.
* :mod:`~seqpart.solver.step.makespan`: the exact makespan's choice and orders, with
  :func:`order_for_pipeline` (a rank's micro-batch order under pp > 1) and :func:`order_schedule`;
  :mod:`~seqpart.solver.step.phases.exact_choice`: plan_step's last phase at pp > 1 (the choice by
  exact makespan, then the assignment searched on it).
* :mod:`~seqpart.solver.step.model`: the step-time model, the schedule validator and :class:`StepPlan`.
* :mod:`~seqpart.solver.step.pipeline`: the exact makespan of a rank's pipeline schedule
  (:class:`PipelineModel`: Megatron-LM's 1F1B / interleaved 1F1B, GPipe), its bound, order search.
* :mod:`~seqpart.solver.step.bound`: :func:`step_lower_bound`, below every valid schedule's step time.
* :mod:`~seqpart.solver.step.starts`, :mod:`~seqpart.solver.step.starts.trainers`: starting
  schedules (seqpart's constructions, and the trainers' schedules, from the baselines' functions).
* :mod:`~seqpart.solver.step.search`, :mod:`~seqpart.solver.step.tiny_cpsat`: local search on the step
  time, and the exact CP-SAT model for small cases.
"""

from __future__ import annotations

from .bound import step_lower_bound
from .global_plan import plan_global, round_up
from .makespan import order_for_pipeline, order_schedule
from .model import (
    StepPlan,
    check_schedule,
    formula_step_time,
    rank_times,
    step_time,
)
from .pipeline import PipelineModel
from .planner import plan_step

__all__ = [
    "PipelineModel",
    "StepPlan",
    "check_schedule",
    "formula_step_time",
    "order_for_pipeline",
    "order_schedule",
    "plan_global",
    "plan_step",
    "rank_times",
    "round_up",
    "step_lower_bound",
    "step_time",
]
