"""Non-token costs under a tight cap: the reported gap of attention batches at their smallest count.

    python benchmarks/bench_attention_cap.py [--limits 0.1 1] [--sizes 256 500 2048] [--seeds 3]
        [--timing clock|work|strict] [--out results.json]

Batches: lognormal lengths (median 3000, sigma 1, clipped to 200..32000) under a 65,536-token
cap with the attention cost (24576*l + l^2), at the smallest count (k=None), so the micro-batches
are nearly full in tokens. The first batch is the reference one (n=500, seed 0: k=36, tokens
fill 99.3%). For each batch and time limit ``partition`` runs twice in the same process: as
shipped, and with the fluid LP bound's and the exchanges' shares set to zero (the engines
before them). Printed: max load, proven lower bound, gap and wall time of each.
Target: the reference batch's gap at most 1% at 1 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from common import machine_header, table, verdict, write_json

from seqpart.solver import SolverOptions, partition
from seqpart.solver.engines import heuristic_phase, prove

CAP = 65_536
REFERENCE = (500, 0)


def batch(n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return np.clip(np.exp(rng.normal(np.log(3000), 1.0, n)), 200, 32_000).astype(int).tolist()


def run(lengths: list[int], limit: float, timing: str, on: bool) -> dict[str, Any]:
    saved = prove.FLUID_SHARE, heuristic_phase.EXCHANGE_SHARE
    if not on:
        prove.FLUID_SHARE = heuristic_phase.EXCHANGE_SHARE = 0.0
    t0 = time.perf_counter()
    try:
        plan = partition(lengths, None, CAP, cost="attention", time_limit=limit,
                         options=SolverOptions(timing=timing))
    finally:
        prove.FLUID_SHARE, heuristic_phase.EXCHANGE_SHARE = saved
    return {"k": plan.k, "max_load": plan.max_load, "lower_bound": plan.lower_bound,
            "gap": plan.gap, "method": plan.method, "seconds": time.perf_counter() - t0}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 500, 2048])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--timing", default="clock", choices=["clock", "work", "strict"])
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    print(machine_header(["benchmarks/bench_attention_cap.py", *argv]), flush=True)
    chosen = [REFERENCE] + [(n, s) for n in args.sizes for s in range(1, args.seeds + 1)]
    rows, results = [], []
    for n, seed in chosen:
        lengths = batch(n, seed)
        for limit in args.limits:
            new = run(lengths, limit, args.timing, True)
            old = run(lengths, limit, args.timing, False)
            results.append({"n": n, "seed": seed, "limit": limit, "shipped": new, "without": old})
            rows.append([f"n={n} seed={seed} k={new['k']}", f"{limit:g}", f"{new['gap']:.2%}",
                         f"{new['seconds']:.3f}", f"{old['gap']:.2%}", f"{old['seconds']:.3f}",
                         f"{new['max_load'] / old['max_load']:.4f}",
                         f"{new['lower_bound'] / old['lower_bound']:.4f}"])
            print(f"  {rows[-1]}", flush=True)
    print(table(["batch", "limit s", "gap", "wall s", "gap w/o", "wall s w/o",
                 "max / w/o", "bound / w/o"], rows))
    ref = [r for r in results if (r["n"], r["seed"]) == REFERENCE and r["limit"] == 1.0]
    ok = all(r["shipped"]["gap"] <= 0.01 for r in ref)
    if ref:
        print(f"{verdict(ok)}  reference batch (n=500, seed 0) gap <= 1% at 1 s: "
              f"{ref[0]['shipped']['gap']:.2%} (without the fluid bound and the exchanges: "
              f"{ref[0]['without']['gap']:.2%})")
    for limit in args.limits:
        mine = [r["shipped"]["gap"] for r in results if r["limit"] == limit]
        base = [r["without"]["gap"] for r in results if r["limit"] == limit]
        print(f"INFO  mean gap at {limit:g} s over {len(mine)} batches: {np.mean(mine):.2%} "
              f"(without: {np.mean(base):.2%})")
    if args.out:
        write_json(args.out, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
