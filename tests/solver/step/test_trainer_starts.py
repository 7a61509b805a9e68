"""plan_step against the trainers' own schedules, under the exact pipeline makespan: never
slower than a valid trainer schedule, in its own order or in the order seqpart finds for it,
unless ``notes`` name that trainer as not run to its end (a budget too short for it)."""

from __future__ import annotations

import re

import numpy as np

from seqpart.heuristics.trainer_baselines import TRAINER_SCHEDULERS
from seqpart.solver import InfeasibleError, SolverOptions
from seqpart.solver.step import order_schedule, plan_step, step_time
from seqpart.solver.step.model import find_schedule_violations
from seqpart.solver.step.pipeline import schedule_error

COST, OVERHEAD = (24576, 1), 24576 * 512


def _named(notes: list[str], name: str) -> bool:
    return any(re.search(rf"\b{name}\b", note) for note in notes)


def _trainer_times(lengths: list[int], dp: int, cap: int, pp: int, vpp: int, multiple_of: int
                   ) -> dict[str, int]:
    """Each valid trainer schedule's best exact step: its own order or seqpart's order for it."""
    costs = [COST[0] * x + COST[1] * x * x for x in lengths]
    kw = {"cost": COST, "overhead": OVERHEAD, "pp": pp, "vpp": vpp}
    out = {}
    for name, fn in TRAINER_SCHEDULERS.items():
        sched = fn(lengths, dp, cap, costs=costs, multiple_of=multiple_of)
        m = len(sched[0])
        if find_schedule_violations(sched, lengths, dp, m, cap, multiple_of) or (
                pp > 1 and schedule_error(pp, vpp, m) is not None):
            continue
        out[name] = min(step_time(sched, lengths, **kw), order_schedule(sched, lengths, **kw)[1])
    return out


def test_plan_step_is_never_slower_than_a_trainer_schedule_in_either_order() -> None:
    rng = np.random.default_rng(8)
    checked = 0
    for trial in range(18):
        pp = (1, 2, 4)[trial % 3]
        vpp = 1 if pp == 1 else (1, 2)[trial // 3 % 2]
        multiple_of = pp if vpp > 1 else 1
        dp = int(rng.integers(1, 4))
        n = int(rng.integers(12 * dp, 40 * dp))
        lengths = rng.integers(20, 3000, n).tolist()
        cap = int(rng.choice([3000, 6000, 12000]))
        # Tiny limits (the clock left on) alternate with a deterministic work budget.
        tiny = trial % 2 == 1
        try:
            plan = plan_step(lengths, dp, cap, pp=pp, vpp=vpp, cost=COST, overhead=OVERHEAD,
                             time_limit=0.002 if tiny else 0.02,
                             options=SolverOptions(deterministic=not tiny))
        except InfeasibleError:
            continue  # interleaving needs more micro-batches than these ranks can get
        for name, best in _trainer_times(lengths, dp, cap, pp, vpp, multiple_of).items():
            assert plan.step_time <= best or (tiny and _named(plan.notes, name)), (
                trial, name, plan.step_time, best, plan.notes)
            checked += 1
    assert checked > 30
