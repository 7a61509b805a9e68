"""Measured step costs: calibrate the step model on real hardware, and replay real schedules.

* :func:`calibrate` times forward+backward passes of a designed set of micro-batches (the
  reference decoder, a transformers model from a config, or any ``run(lengths)`` callable) and
  fits ``overhead + a*sum(l) + b*sum(l^2)`` by non-negative least squares, reporting the error on
  held-out micro-batches; the result is a :class:`CostProfile`.
* :func:`refit_in_steps` refits a profile for the step's context from micro-batches timed inside
  steps (a trainer's own records, or :func:`calibrate_in_steps`' runs on gloo ranks): the term set
  and one common factor come from the steps, the coefficients from the design.
* :func:`load_cost_profile` reads a saved profile; ``profile.cost`` and ``profile.overhead`` go
  straight into ``plan_step``/``partition``.
* :mod:`seqpart.solver.measure.compare` replays one step of plan_step's and the trainers'
  schedules on real processes in a gloo group and times them. At pp > 1 the step is each rank's
  measured micro-batch times through the modelled pipeline schedule
  (:mod:`~seqpart.solver.measure.pipeline_replay`), not a real pipeline run.
* :mod:`seqpart.solver.measure.cp` measures context-parallel micro-batches on real processes:
  exact all-gather-KV CP attention against one process, the dynamic-CP step model's fit
  (``cp_comm`` with its noise), and two CP schedules replayed (``cp_timing_report``).

torch, transformers, scipy and matplotlib are imported only by the functions that need them.
(``calibrate`` is imported here, not wrapped: a wrapper of the same name as its module is
replaced by the module as soon as anything imports ``seqpart.solver.measure.calibrate``.)
"""

from __future__ import annotations

from ..errors import MeasureError
from .allocator import keep_freed_memory
from .calibrate import calibrate, calibrate_in_steps
from .design import Design, make_design
from .fit import refit_in_steps
from .profile import SCHEMA_VERSION, CostProfile, load_cost_profile, profile_from_json

__all__ = [
    "SCHEMA_VERSION",
    "CostProfile",
    "Design",
    "MeasureError",
    "calibrate",
    "calibrate_in_steps",
    "keep_freed_memory",
    "load_cost_profile",
    "make_design",
    "profile_from_json",
    "refit_in_steps",
]
