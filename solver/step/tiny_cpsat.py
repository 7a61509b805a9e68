"""CP-SAT for tiny step-planning instances: each count per rank solved exactly, to improve and to
prove.

The model for one count ``m`` (``K = dp*m`` micro-batches, micro-batch ``b`` on rank ``b // m``),
in the step model's units multiplied by ``vpp``:

    x[i, b] in {0, 1}                       sequence i runs in micro-batch b
    sum_b x[i, b] == 1                       every sequence exactly once
    sum_i x[i, b] >= 1                       no micro-batch empty
    sum_i l_i * x[i, b] <= cap               memory
    t[b] == overhead + sum_i c_i * x[i, b]   micro-batch time
    top[r] >= t[b]  for b on rank r          the rank's heaviest micro-batch
    vpp * sum_{b on r} t[b] + (pp-1) * top[r] <= z
    minimise z,  bound(m) <= z <= incumbent - 1

Symmetry: ranks are interchangeable and so are a rank's micro-batches, so ranks are ordered by
their sum and micro-batches within a rank by time. An infeasible model proves that no schedule
with this ``m`` beats the incumbent: the incumbent is then a lower bound for ``m``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from ..engines.interrupt import guard_solve
from ..options import SolverOptions, new_cp_solver
from .model import StepInstance

#: Largest total model (booleans summed over the counts still to decide) tried: beyond it the
#: build alone eats an online budget and proofs rarely finish.
MAX_BOOLS = 800
#: Kept back from the clock for building a model and starting CP-SAT (loaded 2-core machine).
_BUILD_MARGIN = 0.005


@dataclass
class ExactResult:
    bounds: dict[int, int]  # per count: a lower bound on vpp x step time, raised where solved
    objective: int | None = None
    m: int = 0
    mb_of: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    unsolved: int = 0  # counts left open (their limit, or the clock, ended the search)
    clock_cut: bool = False  # the clock, not the deterministic limit, stopped a count
    interrupted: bool = False  # a Ctrl-C stopped a solve


def exact_fits(inst: StepInstance, counts: list[int]) -> bool:
    """Whether CP-SAT is tried at all: every count's model together stays small, and every
    linear expression stays far inside CP-SAT's int64 (it refuses larger domains). Not with a
    size term: this model's micro-batch time is linear in its sequences (the local search and
    the exact evaluation handle the size term)."""
    worst = (inst.vpp + inst.pp) * (sum(inst.costs) + (inst.n + 1) * inst.overhead)
    return (
        inst.size is None
        and not inst.oversize
        and sum(inst.n * inst.dp_size * m for m in counts) <= MAX_BOOLS
        and worst * max(counts, default=1) < 2**60
    )


def solve_step_exactly(
    inst: StepInstance,
    bounds: dict[int, int],
    incumbent: int,
    deadline: float | None,
    seconds: float,
    options: SolverOptions,
) -> ExactResult | None:
    """Solve every count whose bound is below ``incumbent`` within ``seconds`` of CP-SAT's
    deterministic time, split evenly; the wall clock (``deadline``) is only a safety net.
    None when the instance is too big or has over-cap sequences (the model does not place
    them)."""
    todo = sorted((m for m in bounds if bounds[m] < incumbent), key=lambda m: (bounds[m], m))
    if not todo or not exact_fits(inst, todo):
        return None
    out = ExactResult(bounds=dict(bounds))
    best = incumbent
    unsolved = 0
    clock_cut = interrupted = False
    share = seconds / len(todo)
    for idx, m in enumerate(todo):
        if bounds[m] >= best:
            out.bounds[m] = max(out.bounds[m], best)
            continue
        wall = share
        if deadline is not None:
            # Model build and start-up run outside CP-SAT's own limit.
            build = _BUILD_MARGIN + 4e-6 * inst.n * inst.dp_size * m
            wall = min(wall, deadline - time.perf_counter() - build)
            if wall <= 0.002:
                unsolved += len(todo) - idx
                clock_cut = True
                break
        status, value, bound, mb_of, used, stopped = _solve_m(
            inst, m, bounds[m], best, share, wall, options,
            deadline if options.mode == "clock" else None)
        interrupted |= stopped
        clock_cut |= wall < share and used >= 0.9 * wall and status not in (
            cp_model.OPTIMAL, cp_model.INFEASIBLE)
        if status == cp_model.OPTIMAL:
            assert mb_of is not None
            best = value
            out.objective, out.m, out.mb_of = value, m, mb_of
            out.bounds[m] = value
        elif status == cp_model.INFEASIBLE:
            out.bounds[m] = max(out.bounds[m], best)
        else:
            unsolved += 1
            out.bounds[m] = max(out.bounds[m], min(bound, best))
            if status == cp_model.FEASIBLE and mb_of is not None and value < best:
                best = value
                out.objective, out.m, out.mb_of = value, m, mb_of
    out.unsolved, out.clock_cut, out.interrupted = unsolved, clock_cut, interrupted
    out.notes.append(f"cp-sat: {len(todo) - unsolved} of {len(todo)} counts solved exactly")
    if clock_cut:
        out.notes.append("cp-sat stopped by the clock, not its deterministic limit")
    if interrupted:  # the caller's SIGINT handler did not raise: the schedule is what we have
        out.notes.append("cp-sat stopped by a Ctrl-C: this schedule may differ from another run's")
    return out


def _solve_m(
    inst: StepInstance, m: int, lower: int, incumbent: int, seconds: float, wall: float,
    options: SolverOptions, stop_by: float | None = None,
) -> tuple[int, int, int, np.ndarray | None, float, bool]:
    """CP-SAT at count ``m``: (status, objective, bound, micro-batch of each sequence, wall
    seconds, whether a Ctrl-C stopped it). ``stop_by`` ("clock" timing): stopped there."""
    n, dp, k = inst.n, inst.dp_size, inst.dp_size * m
    tokens = inst.tokens.tolist()
    c, o, pp, vpp = inst.costs, inst.overhead, inst.pp, inst.vpp
    t_max = o + sum(c)
    model = cp_model.CpModel()
    x = {(i, b): model.new_bool_var(f"x{i}_{b}") for i in range(n) for b in range(k)}
    for i in range(n):
        model.add_exactly_one(x[i, b] for b in range(k))
    t = []
    for b in range(k):
        model.add(sum(x[i, b] for i in range(n)) >= 1)
        if inst.cap is not None:
            model.add(sum(tokens[i] * x[i, b] for i in range(n)) <= inst.cap)
        tb = model.new_int_var(o, t_max, f"t{b}")
        model.add(tb == o + sum(c[i] * x[i, b] for i in range(n)))
        t.append(tb)
    z = model.new_int_var(lower, incumbent - 1, "z")
    sums = []
    for r in range(dp):
        mine = t[r * m : (r + 1) * m]
        top = model.new_int_var(o, t_max, f"top{r}")
        model.add_max_equality(top, mine)
        total = sum(mine)
        model.add(vpp * total + (pp - 1) * top <= z)
        sums.append(total)
        for a, b in zip(mine[:-1], mine[1:], strict=True):  # micro-batches of a rank: heaviest first
            model.add(a >= b)
    for a, b in zip(sums[:-1], sums[1:], strict=True):  # ranks: largest sum first
        model.add(a >= b)
    model.minimize(z)
    # One worker with a deterministic limit: repeatable.
    solver = new_cp_solver(workers=1, seed=options.seed, log=options.log)
    solver.parameters.max_deterministic_time = seconds
    solver.parameters.max_time_in_seconds = max(wall, 0.001)  # the clock as a safety net
    for name, value in options.cp_sat_parameters.items():
        setattr(solver.parameters, name, value)
    t0 = time.perf_counter()
    with guard_solve(solver, wall, stop_by) as watch:  # Ctrl-C, and the clock's deadline
        status = solver.solve(model)
    used = time.perf_counter() - t0
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        mb_of = np.array(
            [next(b for b in range(k) if solver.boolean_value(x[i, b])) for i in range(n)],
            dtype=np.int64,
        )
        return (status, int(solver.objective_value), int(solver.best_objective_bound), mb_of,
                used, watch.stopped)
    return status, incumbent, lower, None, used, watch.stopped
