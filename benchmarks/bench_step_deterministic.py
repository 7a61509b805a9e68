"""Repeatable step plans: plan_step with ``deterministic=True`` in separate processes must agree.

    python benchmarks/bench_step_deterministic.py [--processes 3] [--time-limit 0.5] [--quick]

Every batch of ``bench_step.py`` (64 real and generated RL batches, n = 64 to 4096, dp 2 to 64,
pp 1 to 8, vpp 1 to 4, and its four n = 4096 online batches) is planned by ``plan_step`` with
``SolverOptions(deterministic=True)`` in each of ``--processes`` Python processes run at once
(they load the machine for each other, so their clocks differ: a plan that read the clock would
show it). A plan is compared whole: its count, every rank's micro-batches in their order, and
its step time. Reported: how many batches got the same plan in every process, and the wall
times (the repeatable mode counts work, not time, so they are information only).
Target: the same plan in every process for every batch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence

from bench_step import COST, OVERHEAD, cases, fast_cases
from common import machine_header, percentile, run_at_once, table, verdict

from seqpart.solver import SolverOptions
from seqpart.solver.step import plan_step


def worker(time_limit: float, quick: bool) -> None:
    """One process: plan every batch, print one JSON line per batch."""
    plan_step([5, 4, 3, 3, 2, 2], 2, 8, time_limit=0.1)  # imports, first call
    for c in cases(quick) + fast_cases():
        t = time.perf_counter()
        plan = plan_step(c["lengths"], c["dp"], c["cap"], pp=c["pp"], vpp=c["vpp"], cost=COST,
                         overhead=OVERHEAD, time_limit=time_limit,
                         options=SolverOptions(deterministic=True))
        digest = hashlib.sha1(json.dumps([plan.m, plan.ranks, str(plan.step_time)]).encode())
        print(json.dumps({"name": c["name"], "plan": digest.hexdigest(),
                          "seconds": time.perf_counter() - t}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true", help="bench_step's quick set")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.time_limit, args.quick)
        return 0
    print(machine_header(sys.argv))
    command = [sys.executable, __file__, "--worker", "--time-limit", str(args.time_limit)]
    command += ["--quick"] if args.quick else []
    runs = [{r["name"]: r for r in map(json.loads, stdout.splitlines())}
            for stdout in run_at_once(command, args.processes)]
    names = list(runs[0])
    differ = [name for name in names if len({run[name]["plan"] for run in runs}) > 1]
    rows = []
    for group in sorted({name.split("/")[0] for name in names}):
        keys = [name for name in names if name.split("/")[0] == group]
        secs = [run[key]["seconds"] for run in runs for key in keys]
        rows.append([group, str(len(keys)), f"{sum(k not in differ for k in keys)}/{len(keys)}",
                     f"{percentile(secs, 50):.2f}", f"{max(secs):.2f}"])
    print(f"plan_step, deterministic=True, time_limit={args.time_limit}s, {args.processes} "
          "processes at once")
    print(table(["source", "batches", "same plan", "wall p50 s", "wall max s"], rows))
    for name in differ[:10]:
        print(f"  differs: {name}")
    print(f"{verdict(not differ)}  repeatable: the same plan in all {args.processes} processes "
          f"for every batch: {len(names) - len(differ)} of {len(names)}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
