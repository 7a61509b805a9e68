"""The load search on hard few-per-bin batches: proofs and loads at 1, 10 and 60 s.

    python benchmarks/bench_load_search.py [--limits 1 10 60] [--names adversarial/16 ...]
        [--timing clock|work|strict] [--few-per-bin] [--instances PATH] [--out results.json]

For each batch and time limit, ``partition`` runs twice in the same process: as shipped, and
with the load search left out (the engines before it: the plain LP bound, the exact search and
CP-SAT). Printed: the max load, the proven lower bound, the status and the wall time of each.
``--few-per-bin`` takes every bench batch with at most 6 sequences per micro-batch on average (n <= 200).
Targets: adversarial/16 and adversarial/23 proven optimal within 60 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from common import DEFAULT_INSTANCES, load_instances, machine_header, table, verdict, write_json

from seqpart.solver import InfeasibleError, SolverOptions, partition
from seqpart.solver.engines import prove

TARGETS = ("adversarial/16", "adversarial/23")


def run(lengths: list[int], k: int | None, cap: int | None, limit: float, timing: str,
        load_search: bool) -> dict[str, Any]:
    saved = prove.loads_apply
    if not load_search:  # the batch is outside the load search's reach: the engines before it
        prove.loads_apply = lambda *args: False
    t0 = time.perf_counter()
    try:
        plan = partition(lengths, k, cap, time_limit=limit, options=SolverOptions(timing=timing))
    except InfeasibleError as err:
        return {"error": str(err)[:80], "seconds": time.perf_counter() - t0}
    finally:
        prove.loads_apply = saved
    return {"max_load": max(plan.tokens), "lower_bound": plan.lower_bound, "status": plan.status,
            "method": plan.method, "seconds": time.perf_counter() - t0}


def show(r: dict[str, Any]) -> list[str]:
    if "error" in r:
        return ["error", "", r["error"][:30], f"{r['seconds']:.2f}"]
    return [str(r["max_load"]), str(r["lower_bound"]), r["status"], f"{r['seconds']:.2f}"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[1.0, 10.0, 60.0])
    ap.add_argument("--names", nargs="+", default=list(TARGETS))
    ap.add_argument("--few-per-bin", action="store_true")
    ap.add_argument("--timing", default="clock", choices=["clock", "work", "strict"])
    ap.add_argument("--instances", default=str(DEFAULT_INSTANCES))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    print(machine_header(["benchmarks/bench_load_search.py", *argv]), flush=True)
    insts = load_instances(args.instances)
    if args.few_per_bin:
        chosen = [i for i in insts if i.k and len(i.lengths) <= min(200, 6 * i.k)]
    else:
        by_name = {i.name: i for i in insts}
        chosen = [by_name[n] for n in args.names]
    rows, results = [], []
    for inst in chosen:
        for limit in args.limits:
            new = run(inst.lengths, inst.k, inst.cap, limit, args.timing, True)
            old = run(inst.lengths, inst.k, inst.cap, limit, args.timing, False)
            results.append({"name": inst.name, "limit": limit, "load_search": new, "without": old})
            rows.append([inst.name, f"{limit:g}", *show(new), *show(old)])
            print(f"  {inst.name} @ {limit:g}s: {show(new)} (without: {show(old)})", flush=True)
    print(table(["batch", "limit s", "max", "bound", "status", "wall s",
                 "max w/o", "bound w/o", "status w/o", "wall s w/o"], rows))
    target = [r for r in results if r["name"] in TARGETS and r["limit"] <= 60]
    ok = True
    if target:
        ok = all(r["load_search"].get("status") == "optimal"
                 for r in target if r["limit"] == max(t["limit"] for t in target))
        print(f"{verdict(ok)}  {', '.join(TARGETS)} proven optimal at the largest limit <= 60 s")
    if args.out:
        write_json(args.out, {"results": results})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
