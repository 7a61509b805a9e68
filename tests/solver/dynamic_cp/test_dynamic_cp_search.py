"""plan_cp_step's search: the wide construction, perturbation rounds, the dag placement, and
which budget ends a call in each timing."""

from __future__ import annotations

import random
import time

import pytest

from seqpart.solver import SolverOptions, plan_cp_step
from seqpart.solver.dynamic_cp import find_cp_violations, make_cp_instance, schedule_time
from seqpart.solver.dynamic_cp._placement import place_for_dag
from seqpart.solver.dynamic_cp._search import (
    Counter,
    barrier_time,
    construct,
    from_steps,
    local_search,
    perturb_search,
    to_steps,
    wide_degrees,
)

BENCH = {"cost": (24576, 1), "overhead": 512 * 24576, "cp_comm": 6144}


def _one_long(seed: int) -> list[int]:
    """One sequence four GPUs long among many short ones (the long-CoT shape)."""
    rng = random.Random(seed)
    return [4 * 1024] + [int(rng.lognormvariate(5.0, 0.6)) + 16 for _ in range(120)]


def _same_groups(a, b) -> bool:
    key = lambda steps: sorted((len(r), tuple(sorted(ids))) for step in steps for r, ids in step)  # noqa: E731
    return key(a) == key(b)


def test_wide_degrees_keep_a_long_sequence_within_a_step_share() -> None:
    lengths = _one_long(0)
    inst = make_cp_instance(lengths, 8, 1024, **BENCH)
    degree = wide_degrees(inst, 2)
    area = sum(inst.scale * inst.work(i) for i in range(len(lengths)))
    target = area // (8 * 2) + inst.scale * inst.overhead
    c = degree(0)
    assert c > inst.min_degree(lengths[0]) and lengths[0] <= c * inst.m
    fitting = [d for d in inst.degrees
               if lengths[0] <= d * inst.m and inst.scaled_time(d, inst.work(0), lengths[0]) <= target]
    assert c == (min(fitting) if fitting else min(
        (d for d in inst.degrees if lengths[0] <= d * inst.m),
        key=lambda d: inst.scaled_time(d, inst.work(0), lengths[0])))
    assert all(degree(i) == 1 for i in range(1, len(lengths)))  # short ones stay alone
    state = construct(inst, sorted(range(len(lengths)), key=lambda i: -lengths[i]),
                      Counter(10**9), degree)
    assert state is not None and not find_cp_violations(inst, to_steps(state))
    assert any(len(r) == c and 0 in ids for step in to_steps(state) for r, ids in step)


def test_the_wide_start_beats_smallest_degrees_on_one_long_sequence() -> None:
    # Memory-bound steps: the long sequence at its smallest degree (4) makes its step slow
    # while the short ones cannot take more than a GPU's tokens each; at degree 8 it is not.
    rng = random.Random(0)
    lengths = [4 * 2048] + [min(2048, int(rng.lognormvariate(5.5, 0.5)) + 16) for _ in range(100)]
    det = SolverOptions(deterministic=True)
    plan = plan_cp_step(lengths, 8, 2048, time_limit=0.2, options=det, **BENCH)
    inst = make_cp_instance(lengths, 8, 2048, **BENCH)
    order = sorted(range(len(lengths)), key=lambda i: -inst.work(i))
    narrow = construct(inst, order, Counter(10**9))
    local_search(inst, narrow, Counter(10**9))
    assert plan.step_time < schedule_time(inst, to_steps(narrow))
    assert max(plan.degrees_used) > inst.min_degree(lengths[0])


def test_perturbation_rounds_never_lose_the_local_optimum() -> None:
    rng = random.Random(3)
    lengths = [min(8192, int(rng.lognormvariate(6.5, 1.0)) + 16) for _ in range(80)]
    inst = make_cp_instance(lengths, 4, 2048, **BENCH)
    state = construct(inst, sorted(range(80), key=lambda i: -lengths[i]), Counter(10**9))
    local_search(inst, state, Counter(10**9))
    before = barrier_time(state)
    best, rounds = perturb_search(inst, from_steps(inst, to_steps(state)), Counter(20_000),
                                  random.Random(0))
    assert rounds > 0 and barrier_time(best) <= before
    assert not find_cp_violations(inst, to_steps(best))


def test_dag_placement_moves_light_groups_after_a_long_one() -> None:
    # Step 0: a long sequence on ranks 0-1, two short ones on 2 and 3. Step 1: two heavy and
    # two light single-GPU groups, the heavy ones first on ranks 0-1 as written.
    lengths = [2000, 100, 100, 1000, 1000, 50, 50]
    inst = make_cp_instance(lengths, 4, 1024, sync="dag", **BENCH)
    steps = [[((0, 1), (0,)), ((2,), (1,)), ((3,), (2,))],
             [((0,), (3,)), ((1,), (4,)), ((2,), (5,)), ((3,), (6,))]]
    placed = place_for_dag(inst, steps)
    assert not find_cp_violations(inst, placed) and _same_groups(placed, steps)
    assert schedule_time(inst, placed, "dag") < schedule_time(inst, steps, "dag")
    assert schedule_time(inst, placed, "barrier") == schedule_time(inst, steps, "barrier")


@pytest.mark.parametrize("seed", range(4))
def test_dag_placement_is_never_slower(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [int(rng.lognormvariate(6.5, 1.0)) + 16 for _ in range(40)]
    inst = make_cp_instance(lengths, 8, 2048, sync="dag", **BENCH)
    state = construct(inst, sorted(range(40), key=lambda i: -lengths[i]), Counter(10**9))
    steps = to_steps(state)
    placed = place_for_dag(inst, steps)
    assert not find_cp_violations(inst, placed) and _same_groups(placed, steps)
    assert schedule_time(inst, placed, "dag") <= schedule_time(inst, steps, "dag")


def test_clock_timing_is_ended_by_the_clock_and_the_repeatable_mode_by_its_work() -> None:
    rng = random.Random(7)
    lengths = [min(16 * 2048, int(rng.lognormvariate(7.0, 1.1)) + 16) for _ in range(256)]
    clock = plan_cp_step(lengths, 16, 2048, time_limit=0.05, **BENCH)
    assert clock.stopped_by in ("clock", "complete", "proof")  # never a work count
    det = plan_cp_step(lengths, 16, 2048, time_limit=0.05,
                       options=SolverOptions(deterministic=True), **BENCH)
    assert det.stopped_by in ("work", "complete", "proof")


@pytest.mark.parametrize("sync", ["barrier", "dag"])
def test_the_exact_model_proves_the_brute_force_optimum_on_tiny_instances(sync: str) -> None:
    from _brute_cp import optimum

    rng = random.Random(11)
    for _ in range(5):
        n = rng.choice([2, 4])
        lengths = [rng.randint(1, 4 * n) for _ in range(rng.randint(n, 5))]
        model = {"cost": (rng.randint(0, 2), 1), "cp_comm": rng.randint(0, 2),
                 "overhead": rng.randint(0, 3)}
        best = optimum(lengths, n, 4, **model)[sync]
        for options in (None, SolverOptions(deterministic=True)):
            plan = plan_cp_step(lengths, n, 4, sync=sync, time_limit=2.0, options=options, **model)
            assert plan.status == "optimal" and plan.stopped_by == "proof", (lengths, n, model)
            assert plan.step_time == plan.lower_bound == best, (lengths, n, model)


def test_the_exact_model_improves_its_hint_and_its_bound_holds() -> None:
    from seqpart.solver.dynamic_cp._cpsat_model import exact_fits, solve_exact
    from seqpart.solver.dynamic_cp._search import Counter as Work

    lengths = [5000, 3000, 2500, 2000, 900, 800, 700, 600, 500, 400]
    inst = make_cp_instance(lengths, 4, 2048, **BENCH)
    hint = to_steps(construct(inst, sorted(range(10), key=lambda i: -lengths[i]), Work(10**9)))
    horizon = int(schedule_time(inst, hint) * inst.scale)
    assert exact_fits(inst, len(lengths))
    got = solve_exact(inst, hint, horizon, len(lengths), 1, 0.3, SolverOptions(), wall=10**9,
                      deadline=None)
    assert got.steps is not None and not find_cp_violations(inst, got.steps)
    assert got.time == schedule_time(inst, got.steps) * inst.scale <= horizon
    assert got.bound <= got.time



def test_strict_timing_reads_no_clock_and_work_timing_has_a_safety_net(monkeypatch) -> None:
    """A clock that jumps an hour ahead: the repeatable plan does not change, the "work" timing's
    safety net stops the search and says so."""
    from seqpart.solver.dynamic_cp import _planner

    rng = random.Random(5)
    lengths = [min(8 * 2048, int(rng.lognormvariate(7.0, 1.0)) + 16) for _ in range(96)]
    strict = SolverOptions(deterministic=True)
    before = plan_cp_step(lengths, 8, 2048, time_limit=0.2, options=strict, **BENCH)

    class Late:
        @staticmethod
        def perf_counter() -> float:
            return time.perf_counter() + (3600.0 if calls.append(1) or len(calls) > 1 else 0.0)

    calls: list[int] = []
    monkeypatch.setattr(_planner, "time", Late)
    after = plan_cp_step(lengths, 8, 2048, time_limit=0.2, options=strict, **BENCH)
    assert after.steps == before.steps and after.stopped_by != "safety_net"
    calls.clear()
    cut = plan_cp_step(lengths, 8, 2048, time_limit=0.2, options=SolverOptions(timing="work"),
                       **BENCH)
    assert cut.stopped_by == "safety_net" and not find_cp_violations(
        make_cp_instance(lengths, 8, 2048, **BENCH), cut.steps)
