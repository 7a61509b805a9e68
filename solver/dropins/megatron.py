"""Megatron-LM's dynamic-CP scheduler (and verl's use of it), planned by seqpart.

Megatron-LM (dev) picks each micro-batch's CP degree in ``DefaultDynamicCPScheduler``
(``megatron/core/datasets/data_schedule.py``): ``get_groups_and_subsamples(sample_id_seqlens)``
takes ``[(sample id, padded length), ...]`` for the global batch and returns
``sample_id_groups[step][rank]``, the ids each DPxCP rank runs in each step; ranks with the same
list form one CP group, and ``wrap_data_iterator`` packs and reroutes from that. verl's
``DynamicCPScheduler.schedule`` (``verl/utils/dynamic_cp_scheduler.py``) builds that scheduler
through ``get_megatron_dynamic_cp_scheduler_cls()`` and checks the same contract.

* :class:`DefaultDynamicCPScheduler`: the same constructor and ``get_groups_and_subsamples``,
  planned by :func:`~seqpart.solver.dynamic_cp.plan_cp_step` in deterministic mode (every rank
  computes the same schedule): aligned groups with process groups only, every rank busy in every
  step, every sample once. The scheduler's own cost is ``l^2/c``; seqpart's defaults charge
  ``Cost.attention()`` (linear and quadratic work); ``cost``, ``cp_comm`` and ``overhead`` say
  more when known.
* :func:`dynamic_cp_groups`: the method alone, for ``patch("megatron")`` to put on Megatron's
  own class (its ``run`` and the rest stay Megatron's).
* :func:`get_megatron_dynamic_cp_scheduler_cls`: verl's factory, returning seqpart's class, for
  ``patch("verl")``.
"""

from __future__ import annotations

from typing import Any

from ..dynamic_cp import default_degrees, plan_cp_step
from ..errors import TrainerInputError
from ..options import SolverOptions
from ._values import as_count

__all__ = ["DefaultDynamicCPScheduler", "dynamic_cp_groups", "get_megatron_dynamic_cp_scheduler_cls"]

#: Seconds of one schedule (work-counted: no clock decides, so every rank gets the same plan).
TIME_LIMIT = 0.2
OPTIONS = SolverOptions(deterministic=True, workers=1)


def _groups(sample_id_seqlens: Any, n: int, m: int, min_cp: int, vpp_group: Any,
            model: dict[str, Any]) -> list[list[list[int]]]:
    try:
        pairs = [(int(sid), int(length)) for sid, length in sample_id_seqlens]
    except (TypeError, ValueError):
        raise TrainerInputError("sample_id_seqlens must be (sample id, length) pairs") from None
    if not pairs:
        raise TrainerInputError("sample_id_seqlens is empty: there is nothing to schedule")
    if vpp_group is not None:
        raise TrainerInputError(
            "microbatch_group_size_per_vp_stage: seqpart's dynamic-CP schedule does not align the "
            "step count to virtual pipeline groups yet; pass None (no VPP) or use Megatron's own")
    degrees = [c for c in default_degrees(n) if c >= min_cp]
    if min_cp not in default_degrees(n):
        raise TrainerInputError(f"min_cp_size={min_cp} is not a group size for DPxCP size {n}: "
                                f"use one of {list(default_degrees(n))}")
    lengths = [length for _, length in pairs]
    try:
        plan = plan_cp_step(lengths, n, m, degrees=degrees, time_limit=model.get("time_limit", TIME_LIMIT),
                            options=OPTIONS, **{k: v for k, v in model.items() if k != "time_limit"})
    except ValueError as err:
        raise TrainerInputError(str(err)) from None
    ids = [sid for sid, _ in pairs]
    return [[[ids[i] for i in rank] for rank in step] for step in plan.sample_id_groups]


class DefaultDynamicCPScheduler:
    """Megatron-LM's ``DefaultDynamicCPScheduler(max_seqlen_per_dp_cp_rank, cp_size, dp_size,
    microbatch_group_size_per_vp_stage, pipeline_model_parallel_size=1, *, min_cp_size=1)``,
    scheduling with seqpart. ``cost``, ``cp_comm``, ``overhead`` and ``time_limit`` are
    :func:`~seqpart.solver.dynamic_cp.plan_cp_step`'s."""

    def __init__(self, max_seqlen_per_dp_cp_rank: Any, cp_size: Any, dp_size: Any,
                 microbatch_group_size_per_vp_stage: Any = None, pipeline_model_parallel_size: Any = 1,
                 *, min_cp_size: Any = 1, cost: Any = "attention", cp_comm: Any = 0,
                 overhead: Any = 0, time_limit: float = TIME_LIMIT) -> None:
        self.max_seqlen_per_dp_cp_rank = as_count(max_seqlen_per_dp_cp_rank, "max_seqlen_per_dp_cp_rank")
        self.cp_size = as_count(cp_size, "cp_size")
        self.dp_size = as_count(dp_size, "dp_size")
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.pipeline_model_parallel_size = as_count(pipeline_model_parallel_size,
                                                     "pipeline_model_parallel_size")
        self.total_dcp_gpus = self.dp_size * self.cp_size
        self.min_cp_size = as_count(min_cp_size, "min_cp_size")
        if self.min_cp_size not in default_degrees(self.total_dcp_gpus):
            raise TrainerInputError(
                f"min_cp_size={self.min_cp_size} is not a valid group size for DPxCP size "
                f"{self.total_dcp_gpus}; expected one of {list(default_degrees(self.total_dcp_gpus))}")
        self.is_dynamic_cp = True
        self.max_seq_len_all_ranks = self.max_seqlen_per_dp_cp_rank * self.cp_size
        self.model = {"cost": cost, "cp_comm": cp_comm, "overhead": overhead, "time_limit": time_limit}

    def get_groups_and_subsamples(self, sample_id_seqlens: Any) -> list[list[list[int]]]:
        """``sample_id_groups[step][rank]``: the sample ids each DPxCP rank runs in each step."""
        return _groups(sample_id_seqlens, self.total_dcp_gpus, self.max_seqlen_per_dp_cp_rank,
                       self.min_cp_size, self.microbatch_group_size_per_vp_stage, self.model)


def dynamic_cp_groups(self: Any, sample_id_seqlens: Any) -> list[list[list[int]]]:
    """``get_groups_and_subsamples`` for Megatron-LM's own scheduler object (its attributes
    ``max_seqlen_per_dp_cp_rank``, ``cp_size``, ``dp_size``, ``min_cp_size``,
    ``microbatch_group_size_per_vp_stage``), planned by seqpart."""
    n = int(self.dp_size) * int(self.cp_size)
    return _groups(sample_id_seqlens, n, int(self.max_seqlen_per_dp_cp_rank),
                   int(getattr(self, "min_cp_size", 1)),
                   getattr(self, "microbatch_group_size_per_vp_stage", None), {})


def get_megatron_dynamic_cp_scheduler_cls() -> type:
    """verl's factory (``verl.utils.dynamic_cp_scheduler``): seqpart's scheduler class, which
    needs no Megatron-Core build."""
    return DefaultDynamicCPScheduler
