"""The exact engine: a CP-SAT model of the micro-batch problem, warm-started by the heuristics.

The model, on items grouped by type (identical token count, cost and sample count):

    y[t, b] in 0..m_t     how many items of type t go to micro-batch b
    sum_b y[t, b] == m_t                  every item placed exactly once
    sum_t y[t, b] >= 1                    no micro-batch empty
    sum_t tokens_t * y[t, b] <= cap       memory
    sum_t count_t * y[t, b] == n / k      equal sizes, when asked
    sum_t cost_t * y[t, b] <= z           z is the largest load
    minimise z,  z in [lower bound, best heuristic load]

Truncated responses all share one length, so counting per type instead of one boolean per
sequence shrinks the model. Symmetry: label micro-batches by their first item in cost order;
then the item at sorted position j sits in a micro-batch <= j, so y[t, b] is fixed to 0 for b past
the last position of type t. The best heuristic plan is a complete hint.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

# Imported with the package, not inside a call: the first import takes ~0.15 s, which would
# otherwise land inside the first caller's time budget.
import numpy as np
from ortools.sat.python import cp_model

from ..errors import InfeasibleError
from ..options import BestPlan, Budget, Subproblem, new_cp_solver
from ..problem import Items
from ..tuning import (
    BUILD_SECONDS_PER_VAR,
    DETERMINISTIC_PER_SECOND,
    FREE_SECONDS_PER_VAR,
    LOAD_SECONDS_PER_VAR,
    STOP_LATENCY_WORKERS_SHARE,
)
from .interrupt import guard_solve

#: Measured on a 2-core machine with ortools 9.15: 2.8 ms (one worker) to 5.3 ms (two) to start
#: a solve (the build per variable is ``BUILD_SECONDS_PER_VAR``, seqpart.solver.tuning).
SOLVE_STARTUP_SECONDS = 0.004
#: Online budgets this short run one worker: a second one costs ~2.5 ms more to start
#: (measured: 2.8 ms vs 5.3 ms for a trivial model), a big share of a 20 ms budget.
SINGLE_WORKER_BELOW_SECONDS = 0.05
#: CP-SAT's deterministic time for a solve: ``DETERMINISTIC_PER_SECOND`` (seqpart.solver.tuning,
#: with its measurements) per wall second once loading and presolve (~10 ms) are done, and at
#: least the minimum.
DETERMINISTIC_STARTUP_SECONDS = 0.01
DETERMINISTIC_MINIMUM = 2e-4
#: "clock" timing: CP-SAT's local search runs in batches of ``feasibility_jump_batch_dtime``
#: deterministic units (default 0.1, measured 70-80 ms of wall time on the bench's models) and
#: looks at the time limit, or a stop, only between batches: those batches were the overruns of
#: up to 70 ms at limits of 0.1-1 s. Batches of this many units take a few milliseconds.
CLOCK_LS_BATCH_DTIME = 0.005
#: "clock" timing: CP-SAT's own limit ends this much before the deadline, for the time it takes
#: to notice the limit, join its threads and answer. Measured past the limit on the bench's
#: models at 0.1 s (load 2.6 on 2 cores): one worker 0.4 ms median, 2.2 ms p99; two workers
#: (the second runs LNS and local search, whose tasks look at the limit between steps) 1.2 ms
#: median, 6.7 ms p99. With two workers it grows with the solve (``STOP_LATENCY_WORKERS_SHARE``
#: of it, at most ``STOP_LATENCY_WORKERS_MAX``; seqpart.solver.tuning has those measurements).
#: What the margin leaves goes to the perturb-and-search rounds after CP-SAT; the
#: deadline's watchdog (``guard_solve``) fires at the same time and stops whatever runs on (at
#: 1 s, solves stopped only at the deadline itself ended 5-15 ms past it). These were measured
#: with CP-SAT's portfolio; the workers now interleave
#: (``_set_limits``), and then no call of 250 at 1 s ended more than 0.2 ms past its deadline.
STOP_LATENCY_SECONDS = 0.001
STOP_LATENCY_WORKERS_SECONDS = 0.005
STOP_LATENCY_WORKERS_MAX = 0.3
#: Kept back for reading the solution (partition's deadline already leaves room to check and
#: assemble the plan).
FINISH_MARGIN_SECONDS = 0.0005


def _types(items: Items) -> tuple[list[tuple[int, int, int]], list[list[int]]]:
    """Distinct (cost, tokens, count) types, heaviest cost first, with their item indices
    (ascending). Vectorised: one lexsort, so it stays cheap at 10^5 items and more."""
    cost, tok, cnt = items.cost_array, items.token_array, items.count_array
    order = np.lexsort((np.arange(len(cost)), -cnt, -tok, -cost))
    c, t, m = cost[order], tok[order], cnt[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (t[1:] != t[:-1]) | (m[1:] != m[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(order)).tolist()
    flat = order.tolist()
    keys = list(zip(c[starts].tolist(), t[starts].tolist(), m[starts].tolist(), strict=True))
    return keys, [flat[lo:hi] for lo, hi in zip(starts.tolist(), ends, strict=True)]


def model_size(items: Items, k: int, members: list[list[int]] | None = None) -> int:
    """Number of y variables the model would create (after symmetry fixing)."""
    if members is None:
        _, members = _types(items)
    pos = 0
    size = 0
    for m in members:
        pos += len(m)
        size += min(k, pos)
    return size


def solve_items(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """Improve or prove ``best`` with CP-SAT (``sub.options``'s settings; ``sub.force_cp_sat``:
    whatever the budget says); on any failure keep ``best`` and say why.

    Outside "clock" timing every choice here is made from the budget's estimates, and the
    solve is limited in CP-SAT's deterministic time (one worker, or interleaved search for
    several, so the search itself is repeatable); the wall clock only backs it up."""
    items, k, cap, max_count = sub.items, sub.k, sub.cap, sub.max_count
    options, force = sub.options, sub.force_cp_sat
    if not force and not budget.fits(FINISH_MARGIN_SECONDS + SOLVE_STARTUP_SECONDS):
        best.notes.append("cp-sat skipped: no time left after the heuristics")
        return best
    types = _types(items)
    size = model_size(items, k, types[1])
    if size > options.max_model_vars and not force:
        best.notes.append(f"cp-sat skipped: {size} variables > max_model_vars")
        return best
    remaining = budget.left() - FINISH_MARGIN_SECONDS
    need = size * (BUILD_SECONDS_PER_VAR + LOAD_SECONDS_PER_VAR + FREE_SECONDS_PER_VAR)
    need += SOLVE_STARTUP_SECONDS
    if not force and not budget.fits(need + FINISH_MARGIN_SECONDS):
        best.notes.append(
            f"cp-sat skipped: {size} variables need ~{need * 1000:.0f} ms, "
            f"{max(remaining, 0) * 1000:.0f} ms left"
        )
        return best
    # What must stay in the budget after the build: loading, starting and freeing the model.
    reserve = size * (LOAD_SECONDS_PER_VAR + FREE_SECONDS_PER_VAR) + SOLVE_STARTUP_SECONDS
    wall = budget.deadline
    try:
        # The build's clock checks are the safety net (the size estimate decided above).
        build_by = None if wall is None else wall - reserve - FINISH_MARGIN_SECONDS
        model, y, z = _build(items, types, k, cap, max_count, best, Budget(size, build_by))
        keys, members = types
    except _OutOfTime as stop:
        budget.mark_cut()  # in clock timing: the budget ran out
        best.notes.append(f"cp-sat skipped: the model build reached the time limit ({stop})")
        return best
    budget.charge(size * BUILD_SECONDS_PER_VAR)
    solver = new_cp_solver(options.workers, options.seed, options.log)
    params = solver.parameters
    left = budget.left() - FINISH_MARGIN_SECONDS
    if not force and not budget.fits(reserve + FINISH_MARGIN_SECONDS):
        _release(model)
        best.notes.append(
            f"cp-sat skipped: {max(left, 0) * 1000:.0f} ms left after the build, too little "
            f"to load {size} variables"
        )
        return best
    # CP-SAT's clock starts after loading; freeing the model comes after it stops.
    solve_seconds = max(left - size * (LOAD_SECONDS_PER_VAR + FREE_SECONDS_PER_VAR), 0.001)
    if left < SINGLE_WORKER_BELOW_SECONDS:
        params.num_workers = 1
    det_limit = _set_limits(params, budget, solve_seconds, size)
    for name, value in options.cp_sat_parameters.items():  # checked in SolverOptions
        setattr(params, name, value)
    if _drop_unsafe_hint(model, params, best):
        best.notes.append("cp-sat: the least-violating plan is not given as a hint to interleaved "
                          "workers (ortools aborts on an infeasible hint there)")
    # Clock timing: the solve must be over by then, whatever CP-SAT's own clock says.
    stop_by = None if wall is None or not budget.by_clock else (
        wall - size * FREE_SECONDS_PER_VAR - FINISH_MARGIN_SECONDS
        - stop_latency(params.num_workers, solve_seconds))
    t_solve = time.perf_counter()
    try:
        # Offline budgets: a Ctrl-C acts at once; clock timing: a stop at the deadline.
        with guard_solve(solver, solve_seconds, stop_by) as watch:
            status = solver.solve(model)
    except Exception as err:  # a solver failure must never cost the caller its plan
        best.notes.append(f"cp-sat failed ({type(err).__name__}: {err}); heuristic plan kept")
        return best
    finally:
        _release(model)
    took = (time.perf_counter() - t_solve) * 1000
    budget.charge(took / 1000 if budget.by_clock else solve_seconds)
    if watch.stopped:  # the caller's SIGINT handler did not raise: this plan is what we have
        budget.interrupted = True
        best.notes.append("cp-sat stopped by a Ctrl-C: this plan may differ from another run's")
    stop_note = ""
    if budget.by_clock and not watch.stopped:  # what ended an unproven solve
        stop_note = (", stopped by the clock at the deadline" if watch.timed_out
                     else ", stopped by the clock (CP-SAT's time limit)")
    return _read_result(solver, status, y, members, keys, k, max_count, best, budget, det_limit,
                        took, stop_note)


def stop_latency(workers: int, solve_seconds: float) -> float:
    """How long before the deadline a clock-timed solve is told to stop (see the constants)."""
    if workers == 1:
        return STOP_LATENCY_SECONDS
    return min(STOP_LATENCY_WORKERS_SECONDS + STOP_LATENCY_WORKERS_SHARE * solve_seconds,
               STOP_LATENCY_WORKERS_MAX)


def _set_limits(
    params: Any, budget: Budget, solve_seconds: float, size: int
) -> float | None:
    """CP-SAT's limits for this solve; the deterministic limit when the call must be repeatable
    (None when the clock rules)."""
    det_limit = None
    if budget.by_clock:
        stop = stop_latency(params.num_workers, solve_seconds)
        params.max_time_in_seconds = max(solve_seconds - stop, 0.001)
        params.feasibility_jump_batch_dtime = CLOCK_LS_BATCH_DTIME
        if params.num_workers > 1:
            # Interleaved, as in the repeatable mode: two workers running CP-SAT's portfolio
            # answered 14-16 ms after a 1 s deadline on one attention batch (n = 2,048, every
            # time), interleaved never; over the bench's 250 calls at 1 s their plans were
            # better on 15 calls and worse on 10, by a few parts in a million.
            params.interleave_search = True
    else:
        # Repeatable: limited in deterministic time, one worker or interleaved workers.
        det_limit = DETERMINISTIC_MINIMUM + DETERMINISTIC_PER_SECOND * max(
            solve_seconds - DETERMINISTIC_STARTUP_SECONDS, 0.0
        )
        params.max_deterministic_time = det_limit
        if params.num_workers > 1:
            params.interleave_search = True
        wall_left = budget.seconds_left() - FINISH_MARGIN_SECONDS - size * (
            LOAD_SECONDS_PER_VAR + FREE_SECONDS_PER_VAR
        )
        if budget.deadline is not None:
            params.max_time_in_seconds = max(wall_left, 0.001)  # the safety net
    return det_limit


def _read_result(
    solver: cp_model.CpSolver, status: Any, y: Any, members: Any, keys: Any, k: int,
    max_count: int | None, best: BestPlan, budget: Budget, det_limit: float | None, took: float,
    stop_note: str = "",
) -> BestPlan:
    """Fold CP-SAT's answer into ``best``: a better plan, a raised bound, a proof, or a note.
    ``stop_note`` ("clock" timing) says what stopped an unproven solve."""
    name = solver.status_name(status)
    if status not in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        stop_note = ""
    if (
        det_limit is not None
        and budget.deadline is not None
        and status != cp_model.OPTIMAL
        and status != cp_model.INFEASIBLE
        and solver.deterministic_time < 0.99 * det_limit
        and solver.wall_time >= 0.95 * solver.parameters.max_time_in_seconds
    ):
        budget.cut = True  # the wall clock, not the deterministic limit, ended the search
    if status == cp_model.INFEASIBLE:
        raise InfeasibleError(
            f"CP-SAT proved no split of these items into k={k} micro-batches meets the cap"
            + (" and equal sizes" if max_count is not None else "")
            + ": raise k or the cap, or relax the side constraints",
            proven=True,
        )
    if status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and not budget.interrupted:
        budget.mark_ran_out()  # its limit (deterministic time, or the clock) ended the search
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        best.notes.append(f"cp-sat returned {name} after {took:.0f} ms{stop_note}; heuristic plan "
                          "kept")
        return best
    value = int(solver.objective_value)
    if best.bins is None or value < best.max_load:
        bins = _extract(solver, y, members, k)
        best.bins, best.max_load, best.method = bins, value, "cp-sat"
    best.raise_bound(int(round(solver.best_objective_bound)), "cpsat")
    if status == cp_model.OPTIMAL:
        best.raise_bound(best.max_load, "cpsat")
    best.notes.append(f"cp-sat {name} in {took:.0f} ms ({len(keys)} types, {k} bins){stop_note}")
    return best



def _release(model: cp_model.CpModel) -> None:
    """Free the model now. ortools' CpModel keeps closures over itself in its ``__dict__``
    (the CamelCase aliases), a reference cycle only the garbage collector frees: a later
    collection, maybe inside some caller's 20 ms budget, then spends 30-60 ms on it."""
    vars(model).clear()


def _load_of(bins: Sequence[Sequence[int]], items: Items) -> int:
    return max(sum(items.costs[i] for i in b) for b in bins)


class _OutOfTime(Exception):
    """The clock ran out while the model was being built."""


def _build(
    items: Items,
    types: tuple[list[tuple[int, int, int]], list[list[int]]],
    k: int,
    cap: int | None,
    max_count: int | None,
    best: BestPlan,
    budget: Budget,
) -> tuple[cp_model.CpModel, list[list[cp_model.IntVar | None]], cp_model.IntVar]:
    """The model of the module docstring. Asks ``budget`` (the build's part) once per row
    and per micro-batch whether its deadline has passed, so a build the size estimate got
    wrong (a loaded machine) stops near it."""

    keys, members = types
    model = cp_model.CpModel()

    def check(done: str) -> None:
        if budget.past_deadline():
            _release(model)
            raise _OutOfTime(done)

    # Variables: y[t][b], and z, the largest load, between the bound and the best plan's load.
    ub = best.max_load if best.bins is not None else sum(items.costs)
    z = model.new_int_var(best.lower_bound, max(ub, best.lower_bound), "z")
    y: list[list[cp_model.IntVar | None]] = []
    pos = 0
    for t in range(len(keys)):
        m = len(members[t])
        pos += m
        row: list[cp_model.IntVar | None] = []
        for b in range(k):
            if b >= pos:  # symmetry: bins are labelled by their first item in cost order
                row.append(None)
            elif m == 1:
                row.append(model.new_bool_var(f"y[{t},{b}]"))
            else:
                row.append(model.new_int_var(0, m, f"y[{t},{b}]"))
        y.append(row)
        if t % 16 == 0:
            check(f"{t} of {len(keys)} variable rows")
    # Every item placed exactly once.
    for t in range(len(keys)):
        model.add(cp_model.LinearExpr.sum([v for v in y[t] if v is not None]) == len(members[t]))
    for b in range(k):
        check(f"{b} of {k} micro-batch constraints")
        col = [(t, y[t][b]) for t in range(len(keys)) if y[t][b] is not None]
        ts = [t for t, _ in col]
        vs = [v for _, v in col]
        # No micro-batch empty.
        model.add(cp_model.LinearExpr.sum(vs) >= 1)
        # Memory cap on tokens.
        if cap is not None:
            model.add(cp_model.LinearExpr.weighted_sum(vs, [keys[t][1] for t in ts]) <= cap)
        # Equal sample counts.
        if max_count is not None:
            model.add(
                cp_model.LinearExpr.weighted_sum(vs, [keys[t][2] for t in ts]) == max_count
            )
        # The balanced load.
        model.add(cp_model.LinearExpr.weighted_sum(vs, [keys[t][0] for t in ts]) <= z)
    # Objective: the largest load.
    model.minimize(z)
    check("objective")
    if best.bins is not None:
        if not _add_hint(model, y, keys, best.bins, items, z, best.max_load):
            model.clear_hints()  # a plan the symmetry fixing cannot express: no hint at all
    elif best.hint is not None and all(best.hint):
        # No valid plan: the least-violating one still guides the search. (Not with
        # repair_hint: ortools 9.15 aborts the process on it with one worker; nor with
        # interleaved workers, which ``solve_items`` checks once the parameters are final.)
        z_hint = min(max(_load_of(best.hint, items), best.lower_bound), sum(items.costs))
        _add_hint(model, y, keys, best.hint, items, z, z_hint)
    check("hint")
    return model, y, z


def _drop_unsafe_hint(model: cp_model.CpModel, params: Any, best: BestPlan) -> bool:
    """Clear the hint where ortools 9.15 would abort the process on it: an infeasible complete
    hint (the least-violating plan, given when no valid plan is known) under interleaved search
    fails ``CHECK heuristics.fixed_search != nullptr`` (SIGABRT, no Python exception; every
    time, at any time limit, with 2 or more workers). One worker, or the portfolio without
    interleaving, takes the same hint safely. True when the hint was dropped."""
    if best.bins is None and params.interleave_search and model.proto.has_solution_hint():
        model.clear_hints()
        return True
    return False


def _add_hint(
    model: object,
    y: list[list[object]],
    keys: Sequence[tuple[int, int, int]],
    bins: Sequence[Sequence[int]],
    items: Items,
    z: object,
    z_value: int,
) -> bool:
    """A complete hint: the heuristic plan, relabelled to satisfy the symmetry fixing. False
    when some item would land on a variable the fixing removed (then the hint is incomplete)."""
    index = {key: t for t, key in enumerate(keys)}
    type_of = [index[(items.costs[i], items.tokens[i], items.counts[i])] for i in range(len(items))]
    # Relabel bins by the heaviest type they hold: the r-th bin then holds a type whose last
    # sorted position is >= r, which is exactly what the symmetry fixing allows.
    order = sorted(range(len(bins)), key=lambda b: (min(type_of[i] for i in bins[b]), b))
    counts = [[0] * len(bins) for _ in keys]
    for new_b, old_b in enumerate(order):
        for i in bins[old_b]:
            counts[type_of[i]][new_b] += 1
    if any(var is None and counts[t][b] for t, row in enumerate(y) for b, var in enumerate(row)):
        return False
    for t, row in enumerate(y):
        for b, var in enumerate(row):
            if var is not None:
                model.add_hint(var, counts[t][b])  # type: ignore[attr-defined]
    model.add_hint(z, z_value)  # type: ignore[attr-defined]
    return True


def _extract(solver: object, y: list[list[object]], members: list[list[int]], k: int) -> list[list[int]]:
    bins: list[list[int]] = [[] for _ in range(k)]
    for t, row in enumerate(y):
        pool = list(members[t])
        for b, var in enumerate(row):
            if var is None:
                continue
            c = int(solver.value(var))  # type: ignore[attr-defined]
            bins[b].extend(pool[:c])
            pool = pool[c:]
    return bins
