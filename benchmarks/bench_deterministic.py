"""Repeatable plans: the online batches planned in separate processes must agree.

    python benchmarks/bench_deterministic.py [--processes 3] [--seeds 5] [--time-limit 0.02]
        [--timing strict|work]

Every batch of bench_cpsat.py's online set (generated and real batches at n = 64..2048, k =
the trainer's first-fit count), with the token cost and with the attention cost, is planned
by ``partition(time_limit=0.02)`` in a repeatable timing (``--timing strict``, which
``deterministic=True`` selects; or ``work``, with its wall-clock safety net) in each of
``--processes`` separate
Python processes. Reported per size: how many batches got the same plan in every process,
how many calls the wall-clock safety net cut (``plan.stopped_by == "safety_net"``; those plans
may differ), and the wall time (p50, max) against the limit + 5 ms. Print ``uptime`` with it:
wall times on a loaded machine say little.

It also reports how much the machine alone moves the wall time: the calls of one batch that got
the same plan, uncut, did the same work (the budget is counted, not timed), so the slowest of
them over the fastest is the machine's noise on identical work (``--repeats R`` plans every
batch R times in each process, for more of them), with the CPU time of the same calls.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence

from common import (
    BATCH_SIZES,
    DEFAULT_DATA_DIR,
    REPO_ROOT,
    generated_instances,
    machine_header,
    percentile,
    real_instances,
    run_at_once,
    table,
    verdict,
)

from seqpart.solver import InfeasibleError, SolverOptions, partition

COSTS = ("tokens", "attention")


def batches(seeds: int, data_dir: str) -> list:
    return generated_instances(BATCH_SIZES, seeds) + real_instances(data_dir, BATCH_SIZES, seeds)


def worker(seeds: int, data_dir: str, time_limit: float, repeats: int, timing: str) -> None:
    """One process: plan every batch, print one JSON line per (batch, cost, repeat)."""
    partition([8, 7, 6, 5, 4, 9, 3, 3, 12, 2], 3, 20, time_limit=0.5)  # imports, first call
    for inst in batches(seeds, data_dir):
        for cost, repeat in ((c, r) for c in COSTS for r in range(repeats)):
            t, cpu = time.perf_counter(), time.process_time()
            try:
                plan = partition(inst.lengths, inst.k, inst.cap, time_limit=time_limit, cost=cost,
                                 options=SolverOptions(timing=timing))
                digest = hashlib.sha1(json.dumps(plan.bins).encode()).hexdigest()
                cut = plan.stopped_by == "safety_net"
            except InfeasibleError as err:
                digest, cut = f"infeasible:{err.proven}", False
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
            print(json.dumps({"name": inst.name, "n": inst.n, "cost": cost, "repeat": repeat,
                              "plan": digest, "cut": cut, "seconds": seconds, "cpu": cpu}),
                  flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=0.02)
    parser.add_argument("--timing", choices=("strict", "work"), default="strict")
    parser.add_argument("--repeats", type=int, default=1,
                        help="plan every batch this many times in each process")
    bundled = REPO_ROOT / "solver" / "data"  # the same files, shipped with the package
    parser.add_argument("--data-dir", default=str(
        DEFAULT_DATA_DIR if DEFAULT_DATA_DIR.is_dir() else bundled))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.seeds, args.data_dir, args.time_limit, args.repeats, args.timing)
        return 0
    print(machine_header(sys.argv))
    runs = []
    command = [sys.executable, __file__, "--worker", "--seeds", str(args.seeds),
               "--time-limit", str(args.time_limit), "--timing", args.timing,
               "--data-dir", args.data_dir, "--repeats", str(args.repeats)]
    # Strict timing reads no clock, so the processes run at once (the harder case: they load
    # the machine for each other); with the safety net they run one after the other.
    if args.timing == "strict":
        stdouts = run_at_once(command, args.processes)
    else:
        stdouts = []
        for _ in range(args.processes):
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"worker failed:\n{out.stderr}")
            stdouts.append(out.stdout)
    for stdout in stdouts:
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        # One "run" per (process, repeat): every run plans every batch once.
        runs.extend([r for r in lines if r["repeat"] == rep] for rep in range(args.repeats))
    limit = args.time_limit + 0.005
    rows = []
    all_same = True
    for n in sorted({r["n"] for r in runs[0]}):
        for cost in COSTS:
            keys = [(r["name"], r["cost"]) for r in runs[0] if r["n"] == n and r["cost"] == cost]
            by_run = [{(r["name"], r["cost"]): r for r in run} for run in runs]
            same = sum(len({run[key]["plan"] for run in by_run}) == 1 for key in keys)
            cut_keys = [key for key in keys if any(run[key]["cut"] for run in by_run)]
            differ_uncut = [key for key in keys if key not in cut_keys
                            and len({run[key]["plan"] for run in by_run}) > 1]
            all_same &= not differ_uncut
            secs = [run[key]["seconds"] for run in by_run for key in keys]
            rows.append([
                str(n), cost, str(len(keys)), f"{same}/{len(keys)}", str(len(cut_keys)),
                str(len(differ_uncut)), f"{percentile(secs, 50) * 1000:.1f}",
                f"{max(secs) * 1000:.1f}", str(sum(s > limit for s in secs)),
            ])
    print(f"time_limit={args.time_limit}s, {args.processes} processes x {args.repeats} "
          f"calls per batch, timing={args.timing}")
    print(table(["n", "cost", "batches", "same plan", "cut by wall", "differ (not cut)",
                 "wall p50 ms", "wall max ms", f"calls > {limit * 1000:.0f} ms"], rows))
    keys_all = [(r["name"], r["cost"]) for r in runs[0]]
    by_run = [{(r["name"], r["cost"]): r for r in run} for run in runs]
    differ = [key for key in keys_all if len({run[key]["plan"] for run in by_run}) > 1]
    secs = [run[key]["seconds"] for run in by_run for key in keys_all]
    over = sum(s > limit for s in secs)
    slow = sorted(((r["seconds"], r["name"], r["cost"], r["cut"]) for run in runs for r in run
                   if r["seconds"] > limit), reverse=True)
    for seconds, name, cost, cut in slow[:10]:
        print(f"  over {limit * 1000:.0f} ms: {name} ({cost}) {seconds * 1000:.1f} ms"
              + (" (cut by the safety net)" if cut else ""))
    print_noise(runs, limit)
    print(f"{verdict(not differ)}  repeatable: the same plan in all {args.processes} processes "
          f"({len(runs)} calls) for every batch: {len(keys_all) - len(differ)} of "
          f"{len(keys_all)}")
    timed = args.timing == "work"  # strict timing promises the plan, not the wall time
    print(f"{verdict(over == 0) if timed else 'INFO'}  time limit: every call within "
          f"{limit * 1000:.0f} ms: {over} of {len(secs)} over, max {max(secs) * 1000:.1f} ms "
          + ("(meaningful on an idle machine only)" if timed else
             f"(strict timing reads no clock; {args.processes} processes ran at once)"))
    print(f"{verdict(all_same)}  every batch the safety net did not cut got the same plan in "
          f"all {args.processes} processes")
    return 0 if all_same and not differ and (over == 0 or not timed) else 1


def print_noise(runs: list[list[dict]], limit: float) -> None:
    """The machine's noise on identical work: per batch whose calls all got the same plan,
    uncut, the slowest call over the fastest (wall and CPU time)."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        for r in run:
            by_key.setdefault((r["name"], r["cost"]), []).append(r)
    rows = []
    for n in sorted({r["n"] for r in runs[0]}):
        walls, cpus, crossing = [], [], 0
        for calls in by_key.values():
            if calls[0]["n"] != n or any(c["cut"] for c in calls):
                continue
            if len({c["plan"] for c in calls}) > 1:
                continue
            secs = [c["seconds"] for c in calls]
            walls.append(max(secs) / min(secs))
            cpus.append(max(c["cpu"] for c in calls) / max(min(c["cpu"] for c in calls), 1e-9))
            crossing += min(secs) <= limit - 0.005 and max(secs) > limit
        if walls:
            rows.append([str(n), str(len(walls)), f"{percentile(walls, 50):.2f}",
                         f"{percentile(walls, 90):.2f}", f"{max(walls):.2f}",
                         f"{percentile(cpus, 50):.2f}", f"{max(cpus):.2f}", str(crossing)])
    print("\nThe machine's noise on identical work (batches whose calls all did the same "
          "work: same plan, none cut): slowest call / fastest call")
    print(table(["n", "batches", "wall p50", "wall p90", "wall max", "cpu p50", "cpu max",
                 f"fastest <= {(limit - 0.005) * 1000:.0f} ms, slowest > "
                 f"{limit * 1000:.0f} ms"], rows))


if __name__ == "__main__":
    raise SystemExit(main())
