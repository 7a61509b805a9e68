"""How well ``partition``'s work budget tracks the clock: each step's real cost against its charge.

    python benchmarks/bench_budget.py [--seeds 5] [--time-limit 0.02] [--clock cpu|wall]

Plans every batch of bench_cpsat.py's online set (generated and real batches, n = 64..2048, k =
the trainer's first-fit count), token and attention cost, with default options, and times each
step of the heuristic phase (Karmarkar-Karp, LPT, local search, the fallback, the packing bound,
the dive, the re-split, the exchanges, the proof phase, CP-SAT) against what the budget was
charged for it. Per n it prints the summed real/charged milliseconds and the 90th percentile of
the per-call ratio (> 1: the step costs more than its estimate, which pushes the wall clock past
the budget and lets the safety net cut), then per n the calls the safety net cut and the wall
time.

This is the calibration tool for ``solver/budget_costs.py`` and the work units of the engines.
``--clock cpu`` (default) times steps in CPU time, which other load on the machine skews less;
run it on an idle machine either way and print ``uptime`` with the figures.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from common import (
    BATCH_SIZES,
    DEFAULT_DATA_DIR,
    generated_instances,
    machine_header,
    real_instances,
    table,
)

options_module = importlib.import_module("seqpart.solver.options")
partition_module = importlib.import_module("seqpart.solver._partition")
phase_module = importlib.import_module("seqpart.solver.engines.heuristic_phase")

#: partition's step functions (as _partition.py names them) -> the step they are.
STEPS = {
    "karmarkar_karp_lists": "kk", "lpt_lists": "lpt", "improve_lists": "local search",
    "capped_balance_lists": "fallback", "pack_fallback": "fallback", "first_fit_tree": "fallback",
    "resplit_pairs": "resplit", "load_lower_bound_packing": "packing bound",
    "dive_items": "dive", "prove_items": "proof phase", "solve_items": "cp-sat",
    "exchange_items": "exchange",
}
#: The function that called Budget.charge -> the step it charged.
CHARGE_SITES = {
    "tighten_bound": "packing bound", "karmarkar_karp": "kk", "polish": "local search",
    "resplit": "resplit", "exchange": "exchange",
    "dive_items": "dive", "fallback": "fallback", "balanced": "fallback",
    "prove_items": "proof phase", "_fluid": "proof phase", "solve_items": "cp-sat",
}


class Recorder:
    """Wraps partition's step functions and the charges to its call's Budget, one call at a
    time (a step's own part of the budget, counted in its work units, is left alone: the step
    charges the call's budget what it used)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.actual: dict[str, float] = defaultdict(float)
        self.charged: dict[str, float] = defaultdict(float)
        self.budget: Any = None
        self._depth = 0

    def reset(self) -> None:
        self.actual.clear()
        self.charged.clear()

    def install(self) -> None:
        for module in (partition_module, phase_module):
            for name, step in STEPS.items():
                if hasattr(module, name):
                    setattr(module, name, self._timed(getattr(module, name), step))
        budget_cls = options_module.Budget
        new_budget, charge = partition_module._new_budget, budget_cls.charge
        recorder = self

        def recording_new_budget(*args: Any, **kwargs: Any) -> Any:
            recorder.budget = new_budget(*args, **kwargs)
            return recorder.budget

        def recording_charge(budget: Any, seconds: float) -> None:
            if budget is not recorder.budget:  # a step's own part, in its work units
                charge(budget, seconds)
                return
            frame = sys._getframe(1)
            site = frame.f_code.co_name
            if site == "lpt_then_search":  # LPT is charged inline
                step = "lpt"
            elif site == "dive_items" and frame.f_back and frame.f_back.f_code.co_name == (
                "prove_items"
            ):
                step = "proof phase"
            else:
                step = CHARGE_SITES.get(site, "fixed")
            recorder.charged[step] += seconds
            charge(budget, seconds)

        partition_module._new_budget = recording_new_budget
        budget_cls.charge = recording_charge

    def _timed(self, fn: Callable[..., Any], step: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            start = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:  # a step inside another is the outer one's cost
                    self.actual[step] += self.clock() - start
        return timed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=0.02)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    args = parser.parse_args(argv)
    print(machine_header(["benchmarks/bench_budget.py", *(argv or sys.argv[1:])]))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    recorder = Recorder(clock)
    recorder.install()
    partition = partition_module.partition
    partition([8, 7, 6, 5, 4, 9, 3, 3, 12, 2], 3, 20, time_limit=0.5)  # imports, first call
    batches = generated_instances(BATCH_SIZES, args.seeds) + real_instances(
        args.data_dir, BATCH_SIZES, args.seeds)
    rows: list[dict[str, Any]] = []
    for inst in batches:
        for cost in ("tokens", "attention"):
            recorder.reset()
            start, wall_start = clock(), time.perf_counter()
            cut = False
            try:
                plan = partition(inst.lengths, inst.k, inst.cap, time_limit=args.time_limit,
                                 cost=cost)
                cut = plan.stopped_by == "safety_net"
            except Exception:  # an infeasible batch: its steps still count
                pass
            spent, wall = clock() - start, time.perf_counter() - wall_start
            actual = dict(recorder.actual)
            actual["fixed"] = spent - sum(actual.values())
            rows.append({"n": inst.n, "actual": actual, "charged": dict(recorder.charged),
                         "cut": cut, "wall": wall, "budget_spent": recorder.budget.used})
    sizes = sorted({r["n"] for r in rows})
    steps = sorted({s for r in rows for s in (*r["actual"], *r["charged"])})
    body = []
    for step in steps:
        line = [step]
        for n in sizes:
            rs = [r for r in rows if r["n"] == n and r["charged"].get(step, 0) > 0]
            real = sum(r["actual"].get(step, 0.0) for r in rows if r["n"] == n)
            charged = sum(r["charged"].get(step, 0.0) for r in rows if r["n"] == n)
            ratios = [r["actual"].get(step, 0.0) / r["charged"][step] for r in rs]
            p90 = f"{np.quantile(ratios, 0.9):.2f}" if ratios else "-"
            line.append(f"{real * 1e3:.1f} / {charged * 1e3:.1f} ({p90})")
        body.append(line)
    print(f"\nreal / charged ms summed over the calls ({args.clock} time), and the p90 of the "
          "per-call ratio real/charged; 'fixed' is everything else in the call (input checks, "
          "bounds, plan assembly), charged per item and kept back as the finish reserve")
    print(table(["step", *(f"n={n}" for n in sizes)], body))
    summary = []
    for n in sizes:
        rs = [r for r in rows if r["n"] == n]
        walls = np.array([r["wall"] for r in rs]) * 1e3
        summary.append([str(n), str(len(rs)), str(sum(r["cut"] for r in rs)),
                        f"{np.median(walls):.1f}", f"{walls.max():.1f}"])
    print()
    print(table(["n", "calls", "cut by the safety net", "wall p50 ms", "wall max ms"], summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
