"""Context-parallel micro-batches measured on real processes: is CP exact, what does it cost,
and does a schedule's measured time rank as the dynamic-CP model predicts?

* :func:`cp_timing_report` runs the whole measurement on 2 processes and returns a JSON-able
  dict: the equivalence check of all-gather-KV CP attention against one process, the fit of the
  step model's compute and ``cp_comm`` with their noise, and the replay of Megatron-LM's greedy
  schedule against seqpart's (measured ratio next to the predicted one). CPU/gloo or CUDA/NCCL.
* :class:`~.attention.CPAttention`: all-gather-KV attention over a zigzag split
  (:class:`~.layout.CPLayout`), exact, with an autograd-correct gather.
* :func:`~.replay.replay_cp` replays any two schedules (per step, the groups as
  ``(ranks, sequence ids)``) on real processes; :func:`~.report.measure_fit` times and fits.

torch is imported only by the functions that run the model and in the rank processes.
"""

from __future__ import annotations

from .costfit import MODEL_TERMS, barrier_seconds, fit_with_noise, in_units
from .layout import CPLayout, check_steps, default_degrees
from .replay import CPU_CAP, CPU_LENGTHS, reference_schedules, replay_cp
from .report import cp_timing_report, measure_fit

__all__ = [
    "CPU_CAP",
    "CPU_LENGTHS",
    "MODEL_TERMS",
    "CPLayout",
    "barrier_seconds",
    "check_steps",
    "cp_timing_report",
    "default_degrees",
    "fit_with_noise",
    "in_units",
    "measure_fit",
    "reference_schedules",
    "replay_cp",
]
