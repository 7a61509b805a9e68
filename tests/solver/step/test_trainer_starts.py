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


def test_as_start_agrees_with_the_validator() -> None:
    """The trainers' starts are checked by a vectorised copy of the validator's rules: it takes
    and rejects the same schedules as ``from_schedule`` (the validator), oversize included."""
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.starts import from_schedule
    from seqpart.solver.step.starts.trainers import as_start, trainer_starts

    rng = np.random.default_rng(2)
    seen = {True: 0, False: 0}
    for trial in range(40):
        n, dp = int(rng.integers(6, 60)), int(rng.integers(1, 4))
        lengths = rng.integers(1, 900, n).tolist()
        lengths[0] = 1500 if trial % 3 == 0 else lengths[0]  # over the cap: alone
        inst = make_instance(lengths, dp, 1000, oversize="alone", multiple_of=1 + trial % 2)
        for _, sched in trainer_starts(inst):
            variants = [sched, [list(rank) for rank in sched][:-1] or [[]]]
            broken = [[list(mb) for mb in rank] for rank in sched]
            if len(broken[0]) > 1 or dp > 1:
                moved = broken[0].pop()  # unequal counts, or a merged (maybe over-cap) batch
                broken[-1][-1] = broken[-1][-1] + moved
            twice = [[list(mb) for mb in rank] for rank in sched]
            twice[0][0] = twice[0][0] + [twice[-1][-1][0]]
            variants += [broken, twice]
            for v in variants:
                want, got = from_schedule(v, inst), as_start(v, inst)
                assert (want is None) == (got is None), trial
                if want is not None:
                    assert want[0] == got[0] and (want[1] == got[1]).all()
                seen[want is None] += 1
    assert seen[True] > 20 and seen[False] > 20
