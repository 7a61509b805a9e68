"""plan_step's budget in one place: each phase's share of the work and of the clock, the
measured wall times per sequence that decide whether a piece of work is begun, and the time
kept back at the end (:mod:`~seqpart.solver.step.phases` runs the phases). Every figure was
measured on the 2-core machine the benchmarks run on; the wall times decide only what the clock
allows, never what a repeatable plan is.
"""

from __future__ import annotations

from .makespan import OPS_PER_SECOND
from .model import StepInstance

#: The two constructions at one count, in candidate evaluations per sequence (measured 10-20 us
#: per sequence for both at n=4096, dp=64 under loads of 3-5).
BUILD_WORK_PER_SEQUENCE = 400
#: Share of the work budget spent on starts at several counts before the first search.
BUILD_SHARE = 0.4
#: Share of the work budget the trainers' open-ended parts may take before the search: their set-ups
#: are cheap; the open-ended parts (prime-rl's refinement, verl's retry) stop there and resume
#: with what the search leaves.
TRAINER_SHARE = 0.25
#: The wall time of one count's constructions per sequence (measured on an idle machine:
#: 2.9 us at n=65,536, dp=1,024, 3.8 us at n=262,144): the trainers' starts leave it on the clock.
OWN_BUILD_SECONDS_PER_SEQUENCE = 4e-6
#: The wall time of the first construction that usually gives a valid start (the room-keeping
#: balance at pp = 1: 1.9 us per sequence at n=262,144 on an idle machine), per sequence: until
#: one of seqpart's constructions gave a start, a count is begun when this much time is left
#: (its later constructions each check the clock).
FIRST_BUILD_SECONDS_PER_SEQUENCE = 2.2e-6
#: With pp > 1, until one of seqpart's constructions gave a start, a count is begun when this
#: much time per sequence is left before the exact makespan's own deadline: enough for
#: Karmarkar-Karp on the ranks (1.1-1.6 us at n=65,536-262,144 on an idle machine), the
#: cheapest; the bubble-aware one first checks its own time. A plan of seqpart's own is worth
#: part of the exact phase's share (which then still scores the candidates' cheap orders).
FIRST_BUILD_SECONDS_PER_SEQUENCE_PP = 1.8e-6
#: The most of the limit the count bounds' rank-maxima refinement may take (pp > 1): it orders
#: the counts well (left out at n=65,536, dp=1,024 in 1 s, the chat batch's plan at pp = 4 was
#: 0.998x the best trainer instead of 0.961x), but at n=262,144 it takes 0.42-0.47 s.
RANK_MAXIMA_SHARE = 0.25
#: Counts built whatever the clock says while no valid start exists yet.
COUNTS_BEFORE_CLOCK = 3
#: With pp > 1, the share of the time for the exact makespan: evaluating the best schedules
#: and the trainers' exactly, and the order search on the slowest rank (the trainers' and
#: given schedules' searches run in full, even past it).
EXACT_SHARE = 0.25
#: rank_first's split of its shared ranks into one more count, with the start's scoring: wall
#: time per sequence (measured 0.3-0.45 us at n = 262,144, dp = 1,024-2,048, pp = 4 on an idle
#: machine) and work (candidate evaluations) in repeatable mode.
SPLIT_SECONDS_PER_SEQUENCE = 0.5e-6
SPLIT_WORK_PER_SEQUENCE = 8
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
