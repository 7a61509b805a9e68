"""The dynamic-CP study (``seqpart cp-study``): :func:`~seqpart.solver.dynamic_cp.plan_cp_step`
against Megatron-LM's greedy, ``dp_balanced`` and seqpart's fixed-CP plans, over batches.

* :mod:`.methods`: each method run on one instance and scored the same way (shared with
  ``benchmarks/bench_dynamic_cp.py``), and the benchmark's default cost.
* :mod:`.study`: the grid, the tasks and their runner on :mod:`seqpart.solver.study.runner`.
* :mod:`.report`: the summary per sync model, the table and the CSV; :mod:`.plots`: the figures.
* :mod:`.cli`: the subcommand's flags.
"""

from __future__ import annotations

from .methods import (
    BASELINES,
    CP_METHODS,
    DEFAULT_CP_MODEL,
    FIXED_SHARE,
    MethodRun,
    best_dp_balanced,
    best_fixed_cp,
    run_cp_method,
    score,
)
from .study import CPStudyConfig, CPStudyOutcome, run_cp_study

__all__ = [
    "BASELINES",
    "CP_METHODS",
    "DEFAULT_CP_MODEL",
    "FIXED_SHARE",
    "CPStudyConfig",
    "CPStudyOutcome",
    "MethodRun",
    "best_dp_balanced",
    "best_fixed_cp",
    "run_cp_method",
    "run_cp_study",
    "score",
]
