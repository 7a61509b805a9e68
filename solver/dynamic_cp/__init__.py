"""Dynamic context parallelism: each micro-batch's CP degree chosen with its sequences.

* :func:`plan_cp_step` (:mod:`._planner`): the planner; returns a :class:`CPStepPlan`.
* :func:`cp_step_time`, :func:`check_cp_schedule`, :func:`find_cp_violations`,
  :func:`default_degrees`, :func:`sample_id_groups`, :func:`steps_from_groups` (:mod:`._model`):
  the model (domain, group-step cost, the "barrier" and "dag" sync models) and the validator.
* :func:`cp_lower_bound`, :func:`min_steps` (:mod:`._bound`): a bound below every schedule.
* Baselines: :func:`megatron_dynamic_cp_schedule` (:mod:`._greedy`, Megatron-LM's greedy),
  :func:`dp_balanced_schedule` and :func:`fixed_cp_schedule` (:mod:`._fixed`, fixed CP).
"""

from __future__ import annotations

from ._bound import cp_lower_bound, min_steps
from ._fixed import dp_balanced_schedule, fixed_cp_schedule, fixed_degrees
from ._greedy import GreedyError, megatron_dynamic_cp_schedule
from ._model import (
    SYNCS,
    CPInstance,
    CPStepPlan,
    Steps,
    check_cp_schedule,
    cp_step_time,
    default_degrees,
    find_cp_violations,
    make_cp_instance,
    sample_id_groups,
    schedule_time,
    steps_from_groups,
)
from ._planner import plan_cp_step

__all__ = [
    "SYNCS",
    "CPInstance",
    "CPStepPlan",
    "GreedyError",
    "Steps",
    "check_cp_schedule",
    "cp_lower_bound",
    "cp_step_time",
    "default_degrees",
    "dp_balanced_schedule",
    "find_cp_violations",
    "fixed_cp_schedule",
    "fixed_degrees",
    "make_cp_instance",
    "megatron_dynamic_cp_schedule",
    "min_steps",
    "plan_cp_step",
    "sample_id_groups",
    "schedule_time",
    "steps_from_groups",
]
