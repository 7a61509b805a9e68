"""plan_step's budget in one place: each phase's share of the work and of the clock, the
measured wall times per sequence that decide whether a piece of work is begun, and the time
kept back at the end (:mod:`~seqpart.solver.step.phases` runs the phases). The shares and the
measured figures live in :mod:`~seqpart.solver.tuning` (measured on the 2-core machine the
benchmarks run on); the wall times decide only what the clock allows, never what a repeatable
plan is.
"""

from __future__ import annotations

from ..tuning import (
    BUILD_SHARE,
    BUILD_WORK_PER_SEQUENCE,
    FIRST_BUILD_SECONDS_PER_SEQUENCE,
    FIRST_BUILD_SECONDS_PER_SEQUENCE_PP,
    OPS_PER_SECOND,
    OWN_BUILD_SECONDS_PER_SEQUENCE,
    RANK_MAXIMA_SHARE,
    SPLIT_SECONDS_PER_SEQUENCE,
    SPLIT_WORK_PER_SEQUENCE,
    TRAINER_SHARE,
)
from ..tuning import STEP_EXACT_SHARE as EXACT_SHARE
from .model import StepInstance

# The phases (phases/run.py, phases/trainer_starts.py) take their shares and per-sequence figures from here.
__all__ = [
    "BUILD_SHARE",
    "BUILD_WORK_PER_SEQUENCE",
    "CLOCK_ROUNDS",
    "COUNTS_BEFORE_CLOCK",
    "EXACT_SHARE",
    "FIRST_BUILD_SECONDS_PER_SEQUENCE",
    "FIRST_BUILD_SECONDS_PER_SEQUENCE_PP",
    "OWN_BUILD_SECONDS_PER_SEQUENCE",
    "RANK_MAXIMA_SHARE",
    "SPLIT_SECONDS_PER_SEQUENCE",
    "SPLIT_WORK_PER_SEQUENCE",
    "TRAINER_SHARE",
    "assembly_reserve",
    "exact_reserve",
]

#: Counts built whatever the clock says while no valid start exists yet.
COUNTS_BEFORE_CLOCK = 3
#: Default timing: at most this many more rounds of search and counts in the time left.
CLOCK_ROUNDS = 8


def assembly_reserve(inst: StepInstance) -> float:
    """Seconds kept back from the clock for checking and assembling the plan and for freeing
    the search's state on return (together 0.08-0.15 s at n = 262,144 on an idle machine, the
    more micro-batches the longer: about 1.5-2.5x that is kept)."""
    return 0.008 + 0.8e-6 * inst.n


def exact_reserve(inst: StepInstance, micro_batches: int) -> float:
    """With pp > 1, seconds kept back for the exact makespans of the plan and of its
    candidates' cheap orders, which are linear in the micro-batches (at most n)."""
    return 0.0 if inst.pp == 1 else 8 * micro_batches * inst.pp * inst.vpp / OPS_PER_SECOND
