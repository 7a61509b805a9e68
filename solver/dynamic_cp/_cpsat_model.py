"""An exact CP-SAT model of the dynamic-CP schedule, for small instances: optimal, or a bound.

Variables (``s`` a step, ``j`` an aligned block of GPUs of an allowed degree ``c_j``):

* ``use[s]``: step s runs (the steps that run come first);
* ``active[s, j]``: block j is one group of step s;
* ``x[i, s, j]``: sequence i runs in that group.

Constraints: every sequence runs once; in every step that runs, each GPU is in exactly one active
block, and a step that does not run has none; an active group holds a sequence and at most
``c_j * m`` tokens. A group's time on each of its GPUs, times ``inst.scale`` (an int), is linear in
``x``: ``sum_i x[i, s, j] * (w_i * scale / c_j + comm * l_i * (c_j - 1)) + scale * overhead``.

Objective: "barrier" minimises the sum over steps of each step's slowest group; "dag" the
makespan, a group starting when every GPU it covers has ended its group of the previous step.
One worker under a deterministic time limit: the answer repeats (and CP-SAT's interleaved
multi-worker search, which once aborted on an infeasible hint, is never used).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..engines.interrupt import guard_solve
from ..options import SolverOptions, new_cp_solver
from ._model import CPInstance, Steps

__all__ = ["ExactResult", "exact_fits", "solve_exact"]

#: The model is built only up to this many sequence-step-block variables (each sequence may run
#: in any step and block): past it, building alone would take a good share of a small limit.
MOST_VARIABLES = 6_000


@dataclass
class ExactResult:
    """CP-SAT's answer: the best schedule (None when it found none better than the hint's time),
    its time and CP-SAT's bound (both times ``inst.scale``), whether it is proven optimal, and
    whether the wall clock (not the deterministic limit) ended the solve."""

    steps: Steps | None
    time: int | None
    bound: int
    proven: bool
    clock_cut: bool = False


def _blocks(inst: CPInstance) -> list[tuple[int, int]]:
    return [(start, c) for c in inst.degrees for start in range(0, inst.n_gpus - c + 1, c)]


def exact_fits(inst: CPInstance, max_steps: int) -> bool:
    """Whether the model is small enough to build (see MOST_VARIABLES)."""
    return len(inst.lengths) * max_steps * len(_blocks(inst)) <= MOST_VARIABLES


def solve_exact(inst: CPInstance, hint: Steps, horizon: int, max_steps: int, min_steps: int,
                seconds: float, options: SolverOptions, wall: float | None,
                deadline: float | None) -> ExactResult:
    """Solve the model for schedules of at most ``max_steps`` steps and scaled time at most
    ``horizon`` (the hint's), with ``hint`` as CP-SAT's first solution: ``seconds`` of
    deterministic time, ``wall`` (perf_counter) CP-SAT's own clock limit (None: none, for a
    repeatable call), and ``deadline`` the watchdog's stop (clock timing only)."""
    n_seq, blocks = len(inst.lengths), _blocks(inst)
    steps, scale = range(max_steps), inst.scale
    model = cp_model.CpModel()
    use = [model.new_bool_var(f"use{s}") for s in steps]
    active = {(s, j): model.new_bool_var(f"a{s}_{j}") for s in steps for j in range(len(blocks))}
    x = {(i, s, j): model.new_bool_var(f"x{i}_{s}_{j}") for i in range(n_seq) for s in steps
         for j, (_, c) in enumerate(blocks) if inst.lengths[i] <= c * inst.m}
    for s in steps:
        if s < min_steps:
            model.add(use[s] == 1)
        if s + 1 < max_steps:
            model.add(use[s] >= use[s + 1])
    for i in range(n_seq):
        model.add_exactly_one(x[i, s, j] for s in steps for j in range(len(blocks))
                              if (i, s, j) in x)
    group_time = {}
    for s in steps:
        for r in range(inst.n_gpus):
            model.add(sum(active[s, j] for j, (st, c) in enumerate(blocks) if st <= r < st + c)
                      == use[s])
        for j, (_, c) in enumerate(blocks):
            members = [(i, x[i, s, j]) for i in range(n_seq) if (i, s, j) in x]
            for _, v in members:
                model.add_implication(v, active[s, j])
            model.add_bool_or([v for _, v in members]).only_enforce_if(active[s, j])
            model.add(sum(inst.lengths[i] * v for i, v in members) <= c * inst.m)
            # The model's group time is linear in its sequences: each adds its own time alone
            # less the overhead, which the group pays once.
            group_time[s, j] = sum(
                (inst.scaled_time(c, inst.work(i), inst.lengths[i]) - scale * inst.overhead) * v
                for i, v in members) + scale * inst.overhead * active[s, j]
    objective = _objective(inst, model, blocks, group_time, steps, active, horizon)
    _hint(model, hint, blocks, use, active, x, max_steps)
    solver = new_cp_solver(workers=1, seed=options.seed, log=options.log)
    solver.parameters.max_deterministic_time = max(seconds, 0.001)
    if wall is not None:
        solver.parameters.max_time_in_seconds = max(wall - time.perf_counter(), 0.001)
    with guard_solve(solver, seconds, deadline):
        status = solver.solve(model)
    clock_cut = status != cp_model.OPTIMAL and solver.deterministic_time < 0.99 * seconds
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ExactResult(None, None, int(solver.best_objective_bound), False, clock_cut)
    found = [[((tuple(range(st, st + c))), tuple(i for i in range(n_seq) if (i, s, j) in x
                                                 and solver.boolean_value(x[i, s, j])))
              for j, (st, c) in enumerate(blocks) if solver.boolean_value(active[s, j])]
             for s in steps if solver.boolean_value(use[s])]
    return ExactResult(found, int(solver.value(objective)), int(solver.best_objective_bound),
                       status == cp_model.OPTIMAL, clock_cut)


def _objective(inst: CPInstance, model: cp_model.CpModel, blocks: list[tuple[int, int]],
               group_time: dict, steps: range, active: dict, horizon: int) -> cp_model.IntVar:
    """The barrier sum of step maxima, or the dag makespan; minimised, at most ``horizon``."""
    if inst.sync == "barrier":
        tops = [model.new_int_var(0, horizon, f"top{s}") for s in steps]
        for s in steps:
            for j in range(len(blocks)):
                model.add(tops[s] >= group_time[s, j])
        total = model.new_int_var(0, horizon, "total")
        model.add(total == sum(tops))
        model.minimize(total)
        return total
    end = {(s, j): model.new_int_var(0, horizon, f"end{s}_{j}") for s in steps
           for j in range(len(blocks))}
    for s in steps:
        for j, (st, c) in enumerate(blocks):
            start = model.new_int_var(0, horizon, f"start{s}_{j}")
            model.add(end[s, j] == start + group_time[s, j])
            if s == 0:
                continue
            for q, (st2, c2) in enumerate(blocks):
                if st2 < st + c and st < st2 + c2:  # the blocks share a GPU
                    model.add(start >= end[s - 1, q]).only_enforce_if(
                        [active[s, j], active[s - 1, q]])
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, list(end.values()))
    model.minimize(makespan)
    return makespan


def _hint(model: cp_model.CpModel, hint: Steps, blocks: list[tuple[int, int]], use: list,
          active: dict, x: dict, max_steps: int) -> None:
    """The hint as a complete assignment of the decision variables."""
    index = {b: j for j, b in enumerate(blocks)}
    placed = {}
    for s, step in enumerate(hint[:max_steps]):
        for ranks, ids in step:
            j = index[(ranks[0], len(ranks))]
            placed[s, j] = ids
    for s in range(max_steps):
        model.add_hint(use[s], s < len(hint))
    for (s, j), var in active.items():
        model.add_hint(var, (s, j) in placed)
    for (i, s, j), var in x.items():
        model.add_hint(var, i in placed.get((s, j), ()))
