"""Whether partition spends the time limit it is given, and what the time buys.

    python benchmarks/bench_budget_use.py [--limits 0.02,0.1,1] [--instances PATH]
        [--only NAME,...] [--costs tokens,attention] [--repeat R]

Every instance of the public bench set (``../shared/bench/instances.json``), with the token and
the attention cost, is planned at each limit in the default timing (``"clock"``: the best plan
within the limit) and in the repeatable one (``deterministic=True``), one after the other in this
process. Reported per limit: how many calls proved their plan (optimal, or infeasible), and for
the calls that did not, the wall time over the limit (min, median) and the overrun past it
(p99, max); then how the two timings' plans compare where both found one. ``--only`` keeps the
named instances (a name ending in ``/`` keeps its whole set), ``--costs`` the named costs, and
``--repeat`` runs each call R times (more samples of the overrun on a few instances).

Targets, on an idle machine: every unproven default call spends at least 80% of its limit, and
the p99 of the overrun is at most 5 ms; the default plan is never worse than the repeatable one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from common import DEFAULT_INSTANCES, load_instances, machine_header, percentile, table, verdict

from seqpart.solver import InfeasibleError, SolverOptions, partition

COSTS = ("tokens", "attention")


def run(lengths: Any, k: Any, cap: Any, limit: float, cost: str, options: SolverOptions
        ) -> tuple[int | None, bool, float]:
    """(max load or None, proven, wall seconds) of one call."""
    t0 = time.perf_counter()
    try:
        plan = partition(lengths, k, cap, time_limit=limit, cost=cost, options=options)
    except InfeasibleError as err:
        return None, err.proven, time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    proven = plan.status == "optimal" and plan.k_status in ("given", "optimal")
    return plan.max_load, proven, seconds


def _select(instances: list[Any], only: str) -> list[Any]:
    """The instances named in ``only`` (all when empty); ``set/`` names a whole set."""
    names = [x for x in only.split(",") if x]
    if not names:
        return instances
    return [i for i in instances
            if i.name in names or any(n.endswith("/") and i.name.startswith(n) for n in names)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="0.02,0.1,1")
    parser.add_argument("--instances", default=str(DEFAULT_INSTANCES))
    parser.add_argument("--only", default="", help="instance names, comma-separated")
    parser.add_argument("--costs", default=",".join(COSTS))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    limits = [float(x) for x in args.limits.split(",")]
    costs = [c for c in args.costs.split(",") if c]
    if not costs or any(c not in COSTS for c in costs) or args.repeat < 1:
        parser.error(f"--costs takes names from {', '.join(COSTS)}; --repeat at least 1")
    instances = _select(load_instances(args.instances), args.only)
    if not instances:
        parser.error(f"--only {args.only!r} matches no instance")
    print(machine_header(sys.argv))
    print("load average at the start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    partition([8, 7, 6, 5, 4], 2, 15)  # imports and the first call's set-up, untimed
    rows, quality_rows, ok = [], [], True
    for limit in limits:
        fractions, overruns, proven, calls = [], [], 0, 0
        better = worse = same = 0
        for inst in instances * args.repeat:
            for cost in costs:
                load, is_proven, seconds = run(inst.lengths, inst.k, inst.cap, limit, cost,
                                               SolverOptions())
                strict_load, _, _ = run(inst.lengths, inst.k, inst.cap, limit, cost,
                                        SolverOptions(deterministic=True))
                calls += 1
                proven += is_proven
                if not is_proven:
                    fractions.append(seconds / limit)
                    overruns.append(seconds - limit)
                if load is not None and strict_load is not None:
                    better += load < strict_load
                    worse += load > strict_load
                    same += load == strict_load
                elif strict_load is not None:
                    worse += 1  # the repeatable timing found a plan, the default did not
        spent = min(fractions) if fractions else 1.0
        p99 = percentile(overruns, 99) if overruns else 0.0
        ok &= spent >= 0.8 and p99 <= 0.005 and worse == 0
        rows.append([
            f"{limit:g}", str(calls), str(proven), str(len(fractions)),
            f"{spent:.2f}", f"{percentile(fractions, 50):.2f}" if fractions else "-",
            f"{p99 * 1000:.1f}", f"{max(overruns) * 1000:.1f}" if overruns else "-",
        ])
        quality_rows.append([f"{limit:g}", str(better), str(same), str(worse)])
    print("default timing (clock); wall time of the unproven calls over the limit")
    print(table(["limit s", "calls", "proven", "unproven", "min wall/limit", "median",
                 "overrun p99 ms", "overrun max ms"], rows))
    print("\ndefault plan against the repeatable plan (deterministic=True), same limit")
    print(table(["limit s", "better", "same", "worse"], quality_rows))
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"\n{verdict(ok)} unproven calls spend >= 80% of the limit, overrun p99 <= 5 ms, "
          "never worse than the repeatable plan")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
