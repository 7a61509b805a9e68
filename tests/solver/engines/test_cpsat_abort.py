"""No option or timing makes OR-Tools abort the process: the batches that did, run in a subprocess.

ortools 9.15 fails ``CHECK heuristics.fixed_search != nullptr`` (SIGABRT, no Python exception)
when interleaved workers get an infeasible complete hint: the least-violating plan partition
gives CP-SAT when no valid plan is known. ``benchmarks/bench_cpsat_sweep.py`` runs thousands of
such batches; these are the ones it (and a user) found.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ortools.sat.python import cp_model

from seqpart.solver.engines.cpsat import _drop_unsafe_hint
from seqpart.solver.options import BestPlan

#: (lengths, k, cap) of batches that aborted the process with 2 or more workers.
ABORTED = [
    ([3462, 4797, 29879, 14858, 9000, 4683, 1380, 27643, 21240, 13368, 29060, 29431, 26052, 12291,
      12954, 25913, 13238, 6428, 19151, 3924, 6656, 2337, 24691, 11534, 14896, 24543, 20213, 12371,
      1572, 13885, 2490, 19742], 16, 29879),
    ([7630, 30834, 27018, 18043, 13705, 30200, 14739, 11029, 16239, 25046, 19572, 25026, 12611,
      18065, 11414, 5695, 14274, 12656, 28679, 9531, 30972, 31683, 5133, 21123, 23572, 29788, 31805,
      9705, 18688, 14056, 17393, 18592, 20673, 11624, 8599], 21, 31939),
]

CALLS = """
import json, sys
from seqpart.solver import InfeasibleError, SolverOptions, partition
cases = json.loads(sys.argv[1])
for lengths, k, cap, deterministic, workers, limit, params in cases:
    options = SolverOptions(deterministic=deterministic, workers=workers, cp_sat_parameters=params)
    try:
        plan = partition(lengths, k, cap, time_limit=limit, options=options)
        print("plan", max(plan.tokens) <= cap and all(plan.bins), flush=True)
    except InfeasibleError as err:
        print("infeasible", err.proven, flush=True)
"""


def test_the_batches_that_aborted_return_in_every_timing() -> None:
    cases = []
    for lengths, k, cap in ABORTED:
        for deterministic, workers, limit, params in (
            (True, 2, 0.1, {}), (True, 4, 0.2, {}), (False, 3, 0.5, {}),
            (False, 2, 0.2, {"interleave_search": True}),
        ):
            cases.append([lengths, k, cap, deterministic, workers, limit, params])
    proc = subprocess.run([sys.executable, "-c", CALLS, json.dumps(cases)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode} after {proc.stdout!r}: {proc.stderr[-500:]}"
    answers = proc.stdout.splitlines()
    assert len(answers) == len(cases)
    # Each call answers: a plan that keeps the contract, or infeasible (proven or not in time).
    assert set(answers) <= {"plan True", "infeasible True", "infeasible False"}, answers


def _model_with_infeasible_hint() -> cp_model.CpModel:
    model = cp_model.CpModel()
    x = model.new_bool_var("x")
    y = model.new_bool_var("y")
    model.add(x + y == 1)
    model.add_hint(x, 1)
    model.add_hint(y, 1)  # x + y = 2: infeasible
    return model


def test_an_infeasible_hint_is_dropped_for_interleaved_workers_only() -> None:
    no_plan = BestPlan(bins=None, max_load=0, lower_bound=0, method="", notes=[])
    interleaved = cp_model.CpSolver().parameters
    interleaved.num_workers, interleaved.interleave_search = 2, True
    model = _model_with_infeasible_hint()
    assert _drop_unsafe_hint(model, interleaved, no_plan)
    assert not model.proto.has_solution_hint()
    one_worker = cp_model.CpSolver().parameters
    one_worker.num_workers = 1
    model = _model_with_infeasible_hint()
    assert not _drop_unsafe_hint(model, one_worker, no_plan)
    assert model.proto.has_solution_hint()
