"""What deterministic mode costs: wall time and gap, normal vs deterministic, same process.

    python benchmarks/bench_deterministic.py [--time-limit 0.02] [--instances PATH]

Deterministic mode runs the heuristics to completion and gives CP-SAT a deterministic-time
limit, so its plans match across processes and machines; the price is wall time beyond the
limit. This prints both modes per size bucket, and checks that repeated runs agree.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import DEFAULT_INSTANCES, load_instances

from seqpart.solver import InfeasibleError, SolverOptions, partition

BUCKETS = ((1, 255), (256, 1023), (1024, 10**9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default=str(DEFAULT_INSTANCES))
    parser.add_argument("--time-limit", type=float, default=0.02)
    args = parser.parse_args()
    deterministic = SolverOptions(deterministic=True)
    partition([3, 2, 1], 2, 4)  # warm-up: imports and first call
    rows = []
    for inst in load_instances(args.instances):
        try:
            t = time.perf_counter()
            normal = partition(inst.lengths, inst.k, inst.cap, time_limit=args.time_limit)
            t_normal = time.perf_counter() - t
            t = time.perf_counter()
            det = partition(inst.lengths, inst.k, inst.cap, time_limit=args.time_limit,
                            options=deterministic)
            t_det = time.perf_counter() - t
            again = partition(inst.lengths, inst.k, inst.cap, time_limit=args.time_limit,
                              options=deterministic)
        except InfeasibleError:
            continue
        rows.append((inst.n, t_normal, t_det, normal.gap, det.gap, det.bins == again.bins))
    print(f"time_limit={args.time_limit}s, {len(rows)} feasible instances from {args.instances}")
    print(f"{'n':>12} {'count':>5} {'wall p50 normal':>16} {'det':>8} {'wall max normal':>16} "
          f"{'det':>8} {'mean gap normal':>16} {'det':>8} {'repeatable':>10}")
    for lo, hi in BUCKETS:
        r = [x for x in rows if lo <= x[0] <= hi]
        if not r:
            continue
        print(
            f"{f'{lo}-{hi}' if hi < 10**9 else f'{lo}+':>12} {len(r):5d} "
            f"{statistics.median(x[1] for x in r) * 1e3:14.1f}ms "
            f"{statistics.median(x[2] for x in r) * 1e3:6.1f}ms "
            f"{max(x[1] for x in r) * 1e3:14.1f}ms {max(x[2] for x in r) * 1e3:6.1f}ms "
            f"{statistics.mean(x[3] for x in r):16.4%} {statistics.mean(x[4] for x in r):8.4%} "
            f"{all(x[5] for x in r)!s:>10}"
        )


if __name__ == "__main__":
    main()
