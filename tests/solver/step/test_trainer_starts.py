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


def test_the_starts_are_the_baselines_schedules() -> None:
    """plan_step's trainer starts and the baselines are one implementation: on generated batches
    (equal lengths, sequences over the cap, ``multiple_of``, FLOPs costs, no cap) each trainer's
    start, run to its end at once or resumed under small budgets, is the baseline's schedule
    itself, micro-batch for micro-batch (verl's: up to verl's order within a rank, which a start
    does not need). A trainer with no start is one whose baseline breaks the contract."""
    from seqpart.heuristics.trainer_baselines import verl_order
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.starts import from_schedule
    from seqpart.solver.step.starts.trainers import (
        finish_open_ended,
        run_trainer_starts,
        trainer_starts,
    )

    never = lambda m, onwards: False  # noqa: E731
    rng = np.random.default_rng(13)
    seen: set[str] = set()
    steps: dict[str, list] = {}  # the last schedule of each trainer ("prime_rl (cut short)" too)
    keep = lambda name, s: steps.__setitem__(name.split(":")[1].split(" ")[0], s)  # noqa: E731
    for trial in range(16):
        n, dp = int(rng.integers(8, 160)), int(rng.integers(1, 6))
        cap = None if trial % 8 == 0 else int(rng.choice([900, 1500, 4000]))
        lengths = rng.integers(1, 1500, n).tolist() if trial % 3 else \
            rng.choice([300, 500, 800], n).tolist()  # ties everywhere
        if cap is not None and trial % 4 == 1:
            lengths[0] = cap + 7  # over the cap: alone
        multiple_of = 1 + trial % 3
        cost = "tokens" if trial % 2 else (24576, 1)
        inst = make_instance(lengths, dp, cap, cost=cost, oversize="alone", multiple_of=multiple_of)
        got = {name.split(":")[1]: s for name, s in trainer_starts(inst)}
        # Resumed in small steps, the open-ended parts end on the same schedules.
        steps.clear()
        _, _, left = run_trainer_starts(inst, None, None, never, keep, open_share=0)
        while left.prime is not None or left.retry is not None:
            finish_open_ended(inst, left, 3000, None, never, keep)
        assert steps == got, trial
        for name, fn in TRAINER_SCHEDULERS.items():
            ref = fn(lengths, dp, cap, costs=inst.costs, multiple_of=multiple_of)
            if name not in got:
                assert from_schedule(ref, inst) is None, (trial, name)
                continue
            mine = [verl_order(rank, inst.costs) for rank in got[name]] if name.startswith(
                "verl") else got[name]
            assert mine == ref, (trial, name)
            seen.add(name)
    assert seen == set(TRAINER_SCHEDULERS)
