"""seqpart.solver: micro-batch and rank plans for variable-length sequences, under a token cap.

The front door: everything a trainer or a study calls is importable from here.

Plans for one batch
    :func:`partition`
        ``partition(lengths, k, cap)``: exactly ``k`` non-empty micro-batches (or the smallest
        count, ``k=None``), none over ``cap``, the largest load minimised. Returns a
        :class:`Plan` that has passed :func:`check_plan`, or raises :class:`InfeasibleError`.
    :class:`Plan`, :func:`check_plan`, :func:`find_violations`, :class:`Violations`
        The result type (status, bound and gap included) and the one validator.
    :class:`Cost`
        What is balanced: tokens, attention-weighted tokens ``a*l + b*l^2`` (plus a cost per
        sequence), or FLOPs from a model's sizes (``Cost.from_model``, ``Cost.from_hf_config``).
    :class:`SolverOptions`, :data:`ENGINES`
        Timing mode (repeatable work budget or the clock), CP-SAT settings, engines.

Plans for a training step (data-parallel ranks, pipeline stages)
    :func:`plan_step`
        The count per rank, the micro-batches and the ranks together, for the smallest step
        time; returns a :class:`StepPlan` that has passed :func:`check_schedule`.
    :func:`plan_global`, :func:`order_for_pipeline`
        The cheap two-level proxy, and the order of a rank's micro-batches under pp > 1.
    :func:`step_time`, :func:`rank_times`, :func:`step_lower_bound`
        Score any schedule (a trainer's own included) under the same model, and bound it. With
        pp > 1 a rank's time is the exact makespan of its pipeline schedule in the order given.
    :class:`MicroBatchCost`
        What a micro-batch pays beyond its sequences: a fixed overhead and a convex function of
        its token total (a calibrated per-token cost that rises or falls with its size); pass
        it as ``overhead=``.
    :class:`PipelineModel`, :func:`order_schedule`, :func:`formula_step_time`
        Which pipeline schedule is modelled (Megatron-LM's 1F1B, interleaved when vpp > 1, or
        GPipe; the forward/backward split, p2p latency); the best order of each rank's
        micro-batches; the closed formula's figure, for comparison only.

Dynamic context parallelism (each micro-batch's CP degree chosen with its sequences)
    :func:`plan_cp_step`, :class:`CPStepPlan`
        The degrees, packing, step count and order of one step over ``n_gpus`` DP x CP ranks,
        under the "barrier" or "dag" sync model, with a lower bound and its gap.
    :func:`cp_step_time`, :func:`check_cp_schedule`
        Score any dynamic-CP schedule (Megatron-LM's included) exactly, and the one validator.
        Baselines and the model's parts: :mod:`seqpart.solver.dynamic_cp`.

Across ranks (``torch.distributed``; torch is imported lazily)
    :func:`partition_across_ranks`
        Every rank splits its own sequences into the count all ranks agree on.
    :func:`plan_step_across_ranks`, :func:`plan_global_across_ranks`
        The step planned once from every rank's lengths; each rank takes its share.

Measured costs (torch and scipy are imported lazily)
    :func:`load_cost_profile`, :class:`CostProfile`
        A step cost calibrated on real hardware (``seqpart calibrate``): ``profile.cost`` and
        ``profile.overhead`` go into ``plan_step``/``partition``; ``profile.unit_seconds`` turns
        the model's times into seconds. Calibration and measured replay live in
        :mod:`seqpart.solver.measure`.

Errors (all in :mod:`seqpart.solver.errors`)
    :class:`InfeasibleError` (no plan: ``.proven`` says whether none exists),
    :class:`InvalidPlanError` (a plan broke a hard constraint), :class:`DistributedPlanError`
    (raised alike on every rank), :class:`TrainerInputError` (bad input to a drop-in; also an
    ``AssertionError``), :class:`UsageError` (the command line's bad arguments),
    :class:`MeasureError` (a timed model run failed; names the micro-batch).

Elsewhere
    :mod:`seqpart.solver.dropins`: drop-in replacements with verl's, slime's, OpenRLHF's and
    AReaL's signatures, and ``patch()``. :mod:`seqpart.heuristics`: the raw heuristics and
    bounds, one per module. :mod:`seqpart.solver.study`: the offline studies behind the CLI.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ loads them
    from ._partition import partition
    from .batch_cost import MicroBatchCost
    from .distributed import (
        partition_across_ranks,
        plan_global_across_ranks,
        plan_step_across_ranks,
    )
    from .dynamic_cp import CPStepPlan, check_cp_schedule, cp_step_time, plan_cp_step
    from .errors import (
        DistributedPlanError,
        InfeasibleError,
        InvalidPlanError,
        MeasureError,
        TrainerInputError,
        UsageError,
    )
    from .measure.profile import CostProfile, load_cost_profile
    from .options import ENGINES, SolverOptions
    from .plan import Plan, Violations, check_plan, find_violations
    from .problem import Cost
    from .step import (
        PipelineModel,
        StepPlan,
        check_schedule,
        formula_step_time,
        order_for_pipeline,
        order_schedule,
        plan_global,
        plan_step,
        rank_times,
        step_lower_bound,
        step_time,
    )

#: Where each name of the front door lives. Each loads on first use (PEP 562), so that a
#: worker, the command line or one module imported alone loads only what it uses (with every
#: name loaded up front, ``import seqpart.solver.errors`` alone took 0.57 s).
#: No module of this package is named like one of these names (``partition`` lives in the
#: private ``_partition``), so importing a module never binds it here over a function.
_HOME: dict[str, str] = {
    "check_plan": "seqpart.solver.plan",
    "check_cp_schedule": "seqpart.solver.dynamic_cp",
    "check_schedule": "seqpart.solver.step",
    "Cost": "seqpart.solver.problem",
    "cp_step_time": "seqpart.solver.dynamic_cp",
    "CPStepPlan": "seqpart.solver.dynamic_cp",
    "CostProfile": "seqpart.solver.measure.profile",
    "DistributedPlanError": "seqpart.solver.errors",
    "ENGINES": "seqpart.solver.options",
    "find_violations": "seqpart.solver.plan",
    "formula_step_time": "seqpart.solver.step",
    "InfeasibleError": "seqpart.solver.errors",
    "InvalidPlanError": "seqpart.solver.errors",
    "load_cost_profile": "seqpart.solver.measure.profile",
    "MeasureError": "seqpart.solver.errors",
    "MicroBatchCost": "seqpart.solver.batch_cost",
    "order_for_pipeline": "seqpart.solver.step",
    "order_schedule": "seqpart.solver.step",
    "partition": "seqpart.solver._partition",
    "partition_across_ranks": "seqpart.solver.distributed",
    "PipelineModel": "seqpart.solver.step",
    "Plan": "seqpart.solver.plan",
    "plan_global": "seqpart.solver.step",
    "plan_global_across_ranks": "seqpart.solver.distributed",
    "plan_cp_step": "seqpart.solver.dynamic_cp",
    "plan_step": "seqpart.solver.step",
    "plan_step_across_ranks": "seqpart.solver.distributed",
    "rank_times": "seqpart.solver.step",
    "SolverOptions": "seqpart.solver.options",
    "step_lower_bound": "seqpart.solver.step",
    "step_time": "seqpart.solver.step",
    "StepPlan": "seqpart.solver.step",
    "TrainerInputError": "seqpart.solver.errors",
    "UsageError": "seqpart.solver.errors",
    "Violations": "seqpart.solver.plan",
}

__all__ = [
    "ENGINES",
    "Cost",
    "CPStepPlan",
    "CostProfile",
    "DistributedPlanError",
    "InfeasibleError",
    "InvalidPlanError",
    "MeasureError",
    "MicroBatchCost",
    "PipelineModel",
    "Plan",
    "SolverOptions",
    "StepPlan",
    "TrainerInputError",
    "UsageError",
    "Violations",
    "check_cp_schedule",
    "check_plan",
    "check_schedule",
    "cp_step_time",
    "find_violations",
    "formula_step_time",
    "load_cost_profile",
    "order_for_pipeline",
    "order_schedule",
    "partition",
    "partition_across_ranks",
    "plan_global",
    "plan_cp_step",
    "plan_global_across_ranks",
    "plan_step",
    "plan_step_across_ranks",
    "rank_times",
    "step_lower_bound",
    "step_time",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a subpackage or module
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its names are in "
                             "__all__ (see its docstring)")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
