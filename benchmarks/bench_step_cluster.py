"""Step planning at cluster scale: ``plan_step`` against the trainers' schedules.

    python benchmarks/bench_step_cluster.py [--sizes 65536,262144] [--dps 1024,2048]
        [--pps 1,4] [--limits 1,5] [--datasets NAME,...] [--reference] [--out results.json]

Batches: seeded draws of n lengths from bundled real length files
(``seqpart.solver.study.datasets``; default the long-tail reasoning file and the chat file), the
cap the smallest of 4096..65536 that holds the longest sequence, cost ``(24576, 1)``, overhead
24576 * 512, vpp 1. For every batch, dp and pp: each trainer's schedule (as plan_step's starts
run them, ``seqpart.solver.step.starts.trainers``; ``--reference`` calls
``seqpart.heuristics.TRAINER_SCHEDULERS``, the same functions, directly) scored with
``step_time`` in its own order and in ``order_schedule``'s, and ``plan_step`` at each time
limit: its wall time against the limit, its step time over the best valid trainer's, its gap to
``step_lower_bound``, and the trainers it did not run to their end (``plan.trainers_not_run``).
Targets: within time_limit + 5%, and never behind a valid trainer schedule in either order;
and behind only trainers that ``plan.trainers_not_run`` names.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from common import machine_header, table, verdict, write_json

from seqpart.heuristics import TRAINER_SCHEDULERS
from seqpart.solver.step import order_schedule, plan_step, step_lower_bound, step_time
from seqpart.solver.step.model import find_schedule_violations, make_instance
from seqpart.solver.step.starts.trainers import trainer_starts
from seqpart.solver.study import datasets as ds

COST = (24576, 1)
OVERHEAD = 24576 * 512
CAPS = (4096, 8192, 16384, 32768, 65536)
DATASETS = ("reasoning_short_cot_sky_t1_short_qwen25_32k", "sft_chat_alpaca_eval_4models")
#: plan_step may overrun its limit by this share.
SLACK = 0.05


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def trainer_schedules(lengths: list[int], dp: int, cap: int, reference: bool
                      ) -> tuple[dict[str, Any], float]:
    """name -> schedule, and the seconds they took together."""
    t0 = time.perf_counter()
    if reference:
        costs = [COST[0] * x + COST[1] * x * x for x in lengths]
        out = {name: fn(lengths, dp, cap, costs=costs) for name, fn in TRAINER_SCHEDULERS.items()}
    else:
        inst = make_instance(lengths, dp, cap, cost=COST, overhead=OVERHEAD)
        out = {name.split(":")[1]: s for name, s in trainer_starts(inst)}
    return out, time.perf_counter() - t0


def trainer_times(scheds: dict[str, Any], lengths: list[int], dp: int, cap: int, pp: int
                  ) -> dict[str, tuple[Fraction, Fraction]]:
    """Each valid schedule's exact step in its own order and in seqpart's."""
    kw = {"cost": COST, "overhead": OVERHEAD, "pp": pp}
    out = {}
    for name, sched in scheds.items():
        if find_schedule_violations(sched, lengths, dp, len(sched[0]), cap):
            continue
        out[name] = (Fraction(step_time(sched, lengths, **kw)),
                     Fraction(order_schedule(sched, lengths, **kw)[1]))
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for name in args.datasets.split(","):
        pool = ds.load_dataset(name).lengths
        for n in ints(args.sizes):
            for dp in ints(args.dps):
                lengths = ds.sample_batch(pool, n, np.random.default_rng([7, n, dp]))
                cap = next(c for c in CAPS if c >= max(lengths))
                scheds, secs = trainer_schedules(lengths, dp, cap, args.reference)
                for pp in ints(args.pps):
                    times = trainer_times(scheds, lengths, dp, cap, pp)
                    lb = Fraction(step_lower_bound(lengths, dp, cap, cost=COST, overhead=OVERHEAD,
                                                   pp=pp))
                    for limit in [float(x) for x in args.limits.split(",")]:
                        t0 = time.perf_counter()
                        plan = plan_step(lengths, dp, cap, pp=pp, cost=COST, overhead=OVERHEAD,
                                         time_limit=limit)
                        wall = time.perf_counter() - t0
                        out.append({
                            "case": f"{name[:9]}/n{n}/dp{dp}/pp{pp}", "limit": limit, "wall": wall,
                            "step": Fraction(plan.step_time), "lb": lb, "m": plan.m,
                            "trainers": times, "trainer_seconds": secs,
                            "not_run": plan.trainers_not_run, "method": plan.method,
                        })
                        print(f"\r{len(out)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def report(results: list[dict[str, Any]]) -> int:
    rows, late, behind, unnoted = [], [], [], []
    for r in results:
        own = min((t[0] for t in r["trainers"].values()), default=None)
        best = min((min(t) for t in r["trainers"].values()), default=None)
        worst = [n for n, t in r["trainers"].items() if r["step"] > min(t)]
        if r["wall"] > r["limit"] * (1 + SLACK):
            late.append(f"{r['case']}@{r['limit']}s")
        if worst:
            behind.append(f"{r['case']}@{r['limit']}s ({', '.join(worst)})")
        unnoted += [f"{r['case']}@{r['limit']}s {n}" for n in worst if n not in r["not_run"]]
        rows.append([r["case"], f"{r['limit']:g}", f"{r['wall']:.2f}", f"{r['trainer_seconds']:.1f}",
                     f"{float(r['step'] / own):.4f}" if own else "-",
                     f"{float(r['step'] / best):.4f}" if best else "-",
                     f"{float(r['step'] / r['lb']) - 1:.2%}", str(r["m"]),
                     ",".join(r["not_run"]) or "-", r["method"][:28]])
    print(table(["batch", "limit s", "wall s", "trainers s", "vs best trainer (own order)",
                 "vs best trainer (either order)", "gap to bound", "m", "trainers not run",
                 "method"], rows))
    checks = [
        (f"plan_step within time_limit + {SLACK:.0%} ({len(late)} over: {', '.join(late[:4])})",
         not late),
        (f"never behind a valid trainer schedule in either order ({len(behind)} behind: "
         f"{'; '.join(behind[:4])})", not behind),
        (f"behind only trainers the plan names as not run to their end ({len(unnoted)} not "
         f"named: {'; '.join(unnoted[:4])})", not unnoted),
    ]
    print()
    for text, ok in checks:
        print(f"{verdict(ok)}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="65536,262144")
    ap.add_argument("--dps", default="1024,2048")
    ap.add_argument("--pps", default="1,4")
    ap.add_argument("--limits", default="1,5")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--reference", action="store_true",
                    help="score trainer_baselines' schedulers called directly")
    ap.add_argument("--out", help="write every raw result as JSON")
    args = ap.parse_args(argv)
    print(machine_header(sys.argv))
    results = run(args)
    code = report(results)
    if args.out:
        write_json(args.out, {"results": [{**r, "trainers": {k: [str(x) for x in v] for k, v in
                                                             r["trainers"].items()}}
                                          for r in results]})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
