"""Drop-ins with the trainers' own signatures, and one call to put them in place.

* Leaf functions (:mod:`.balance`): :func:`get_seqlen_balanced_partitions` (verl, slime,
  OpenRLHF; AReaL's ``_kk_partition``), :func:`get_minimum_num_micro_batch_size` (slime) and
  :func:`get_capped_seqlen_balanced_partitions` (the capped balancer the trainers lack).
* Step schedulers: :func:`build_dp_schedule` (slime, :mod:`.slime`) and
  :func:`rearrange_micro_batches` (verl, :mod:`.verl`), cap held.
* OpenRLHF's signatures where they differ: :mod:`.openrlhf`.
* Dynamic context parallelism (:mod:`.megatron`): Megatron-LM's
  :class:`DefaultDynamicCPScheduler` (``get_groups_and_subsamples``), which verl's
  ``DynamicCPScheduler.schedule`` also builds, planned by ``plan_cp_step``.
* :func:`patch` / :func:`patch_verl` / :func:`patch_slime` / :func:`patch_openrlhf` /
  :func:`patch_areal` / :func:`patch_megatron` (:mod:`.patch`): rebind the trainer's functions
  in every module that imported them by name, so one call per process is enough;
  :func:`setup_worker` makes that call in every Ray worker process (``worker_process_setup_hook``).

A calibrated cost profile (``seqpart calibrate``) goes in as ``cost_profile=`` (a
``CostProfile`` or its path): the step schedulers and the capped balancer balance its cost
(``build_dp_schedule`` charges its overhead too), and ``patch(trainer, cost_profile=...)`` or
``$SEQPART_COST_PROFILE`` binds it into a patched trainer.

Every drop-in accepts what the original accepts (ints or floats, lists, numpy arrays, tensors,
0-d tensors; integral floats for counts and caps), keeps its output contract, and is repeatable:
no wall clock decides a plan (see :mod:`.balance`).
"""

from __future__ import annotations

from ..errors import TrainerInputError
from .balance import (
    OPTIONS,
    TIME_LIMIT,
    get_capped_seqlen_balanced_partitions,
    get_minimum_num_micro_batch_size,
    get_seqlen_balanced_partitions,
)
from .megatron import DefaultDynamicCPScheduler
from .patch import (
    Patched,
    patch,
    patch_areal,
    patch_megatron,
    patch_openrlhf,
    patch_slime,
    patch_verl,
    setup_worker,
)
from .slime import build_dp_schedule, workload_cost
from .verl import rearrange_micro_batches

__all__ = [
    "OPTIONS",
    "TIME_LIMIT",
    "DefaultDynamicCPScheduler",
    "Patched",
    "TrainerInputError",
    "build_dp_schedule",
    "get_capped_seqlen_balanced_partitions",
    "get_minimum_num_micro_batch_size",
    "get_seqlen_balanced_partitions",
    "patch",
    "patch_areal",
    "patch_megatron",
    "patch_openrlhf",
    "patch_slime",
    "patch_verl",
    "rearrange_micro_batches",
    "setup_worker",
    "workload_cost",
]
