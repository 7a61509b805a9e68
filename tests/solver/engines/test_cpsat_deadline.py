"""CP-SAT in "clock" timing ends at the caller's deadline; the repeatable timing never looks at it.

No test here asserts a time: the bounds are loose (a stop that works returns in milliseconds, one
that does not in tens of seconds); ``benchmarks/bench_budget_use.py`` measures the overruns.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from typing import Any

import pytest
from ortools.sat.python import cp_model

from seqpart.solver import SolverOptions, check_plan, partition
from seqpart.solver.engines import cpsat as cpsat_module
from seqpart.solver.engines.interrupt import guard_solve, stop_at_deadline
from seqpart.solver.options import Budget

#: CP-SAT's own limit in the stop tests: far beyond the loose bound, so only the watchdog stops them.
LONG = 60.0
#: A stopped solve returns within milliseconds; this bound only tells "stopped" from "ran on".
LOOSE = 20.0


def _hard_number_partition() -> cp_model.CpModel:
    """Two-way partition of 40 random 48-bit numbers: no perfect split is likely to exist and
    proving the best one takes CP-SAT far longer than a minute."""
    rng = random.Random(7)
    sizes = [rng.randrange(2**47, 2**48) for _ in range(40)]
    model = cp_model.CpModel()
    side = [model.new_bool_var(f"x{i}") for i in range(len(sizes))]
    first = cp_model.LinearExpr.weighted_sum(side, sizes)
    top = model.new_int_var(sum(sizes) // 2, sum(sizes), "top")
    model.add(first <= top)
    model.add(sum(sizes) - first <= top)
    model.minimize(top)
    return model


def _solver(workers: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = LONG
    return solver


@pytest.mark.parametrize("workers", [1, 2])
def test_the_deadline_watchdog_stops_a_solve_its_own_limit_would_let_run(workers: int) -> None:
    solver = _solver(workers)
    t0 = time.perf_counter()
    with stop_at_deadline(solver, t0 + 0.05) as watch:
        status = solver.solve(_hard_number_partition())
    assert time.perf_counter() - t0 < LOOSE
    assert watch.timed_out and not watch.stopped
    assert status in (cp_model.FEASIBLE, cp_model.UNKNOWN)


def test_a_deadline_already_past_still_stops_the_solve() -> None:
    """The watchdog fires before CP-SAT has set its search up (a stop then is lost): it repeats
    until the solve returns."""
    solver = _solver(1)
    t0 = time.perf_counter()
    with stop_at_deadline(solver, t0 - 1.0) as watch:
        solver.solve(_hard_number_partition())
    assert time.perf_counter() - t0 < LOOSE and watch.timed_out


def test_one_watchdog_serves_solves_in_several_threads() -> None:
    """The watchdog thread is shared: each solve is stopped at its own deadline."""
    watches, lock = [], threading.Lock()

    def solve(delay: float) -> None:
        solver = _solver(1)
        with stop_at_deadline(solver, time.perf_counter() + delay) as watch:
            solver.solve(_hard_number_partition())
        with lock:
            watches.append(watch)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=solve, args=(d,)) for d in (0.03, 0.08)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LOOSE)
    assert time.perf_counter() - t0 < LOOSE
    assert len(watches) == 2 and all(w.timed_out for w in watches)


def test_no_deadline_no_stop_and_a_solve_in_time_is_not_marked() -> None:
    model = cp_model.CpModel()
    v = model.new_int_var(0, 10, "v")
    model.maximize(v)
    solver = _solver(1)
    with guard_solve(solver, 0.1, None) as watch:
        assert solver.solve(model) == cp_model.OPTIMAL
    assert not watch.timed_out
    with guard_solve(solver, 0.1, time.perf_counter() + LONG) as watch:
        assert solver.solve(model) == cp_model.OPTIMAL
    assert not watch.timed_out  # the job ended with the block, unfired


def _hard_batch() -> list[int]:
    """24 sequences in 8 micro-batches under the attention cost: CP-SAT improves on the
    heuristics but does not prove the plan within 0.1 s."""
    return [1000 + (i * 7919 * 31) % 29000 for i in range(24)]


def _spy_on_the_solve(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record what each CP-SAT solve of partition was given: its deadline and parameters."""
    seen: list[dict[str, Any]] = []
    real = cpsat_module.guard_solve

    def spy(solver: cp_model.CpSolver, seconds: float, deadline: float | None = None) -> Any:
        params = solver.parameters
        seen.append({"deadline": deadline, "batch": params.feasibility_jump_batch_dtime,
                     "det": params.max_deterministic_time, "workers": params.num_workers,
                     "interleave": params.interleave_search})
        return real(solver, seconds, deadline)

    monkeypatch.setattr(cpsat_module, "guard_solve", spy)
    return seen


def test_a_clock_call_stops_cp_sat_at_its_deadline_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spy_on_the_solve(monkeypatch)
    lengths = _hard_batch()
    plan = partition(lengths, 8, None, time_limit=0.1, cost="attention")
    check_plan(plan.bins, lengths, 8, None)
    assert seen and all(s["deadline"] is not None for s in seen)
    assert all(s["batch"] == cpsat_module.CLOCK_LS_BATCH_DTIME for s in seen)
    solve_notes = [n for n in plan.notes if n.startswith("cp-sat") and " ms" in n]
    assert solve_notes, plan.notes
    if plan.status != "optimal":  # an unproven plan: the clock ended CP-SAT, and the note says
        assert all("stopped by the clock" in n for n in solve_notes), plan.notes


@pytest.mark.parametrize("by_clock", [True, False])
@pytest.mark.parametrize("workers", [1, 2])
def test_two_workers_run_interleaved_in_both_timings(by_clock: bool, workers: int) -> None:
    """Two workers interleave their subsolvers (the clock's portfolio answered 14-16 ms late at
    1 s on one attention batch); one worker is left as CP-SAT runs it."""
    params = cp_model.CpSolver().parameters
    params.num_workers = workers
    budget = Budget(limit=1.0, deadline=time.perf_counter() + 1.0, by_clock=by_clock,
                    on_clock=by_clock)
    cpsat_module._set_limits(params, budget, 0.9, 100)
    assert params.interleave_search == (workers > 1)


def test_the_callers_parameters_win_over_the_interleaving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spy_on_the_solve(monkeypatch)
    lengths = _hard_batch()
    partition(lengths, 8, None, time_limit=0.1, cost="attention")
    assert seen and all(s["interleave"] == (s["workers"] > 1) for s in seen)
    seen.clear()
    partition(lengths, 8, None, time_limit=0.1, cost="attention",
              options=SolverOptions(cp_sat_parameters={"interleave_search": False}))
    assert seen and not any(s["interleave"] for s in seen)


def test_the_repeatable_timing_has_no_watchdog_and_repeats_its_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spy_on_the_solve(monkeypatch)
    lengths = _hard_batch()
    options = SolverOptions(deterministic=True)
    plans = [partition(lengths, 8, None, time_limit=0.1, cost="attention", options=options)
             for _ in range(2)]
    assert seen and all(s["deadline"] is None for s in seen)
    default_batch = cp_model.CpSolver().parameters.feasibility_jump_batch_dtime
    assert all(s["batch"] == default_batch and s["det"] < LONG for s in seen)
    assert plans[0].bins == plans[1].bins and plans[0].max_load == plans[1].max_load
    assert not any("stopped by the clock" in n for n in plans[0].notes)


def test_a_call_leaves_no_garbage_for_the_collector_it_paused() -> None:
    """partition pauses the cyclic collector; reference cycles made during the call (the exact
    search's recursive closures did) were collected all at once when it resumed, past the
    limit. The bounds, the exact search, the LP and CP-SAT all run on this batch."""
    lengths = _hard_batch()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        plan = partition(lengths, 8, None, time_limit=0.1, cost="attention")
        left = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert any("exact search" in n for n in plan.notes) and any("cp-sat" in n for n in plan.notes)
    assert left == 0
