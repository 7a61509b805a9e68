"""Proofs and online budgets: CP-SAT offline (proofs in 10 s) and online (20 ms budgets).

    python benchmarks/bench_cpsat.py [--quick] [--time-limit 10] [--jobs 1] [--out FILE]

Offline: ``partition(lengths, k, cap, time_limit=T, engine=...)`` on every bench instance, and
the naive CP-SAT model (baselines.naive_cpsat) with the same T, in the same run. Proven means
status "optimal" (for k=None also k_status "optimal") or InfeasibleError with proven=True.
Online: ``partition(time_limit=0.02)`` on generated and real batches at n in {64, 256, 1024,
2048}: wall time against the limit + 5 ms, and max load against the best valid heuristic plan
(the target: heuristics that ran within the same 20 ms; all of them as INFO).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from baselines import naive_cpsat, naive_cpsat_min_k
from common import (
    BATCH_SIZES,
    DEFAULT_DATA_DIR,
    Instance,
    add_instances_argument,
    bucket_of,
    fmt_ms,
    generated_instances,
    load_instances,
    machine_header,
    median,
    percentile,
    real_instances,
    table,
    timed,
    verdict,
    write_json,
)

from seqpart.heuristics import HEURISTICS
from seqpart.solver import InfeasibleError, find_violations, partition

ONLINE_LIMIT = 0.02
ONLINE_SLACK = 0.005


def warm_up() -> None:
    lengths = [8, 7, 6, 5, 4, 9, 3, 3, 12, 2]
    partition(lengths, 3, 20, time_limit=0.5, engine="cp-sat")
    partition(lengths, None, 20, time_limit=0.5)
    naive_cpsat(lengths, 3, 20, 0.5)
    for fn in HEURISTICS.values():
        fn(lengths, 3, 20)


# --- offline ---------------------------------------------------------------------------------


def offline_seqpart(inst: Instance, time_limit: float, engine: str) -> dict[str, Any]:
    plan, seconds, err = timed(
        lambda: partition(inst.lengths, inst.k, inst.cap, time_limit=time_limit, engine=engine)
    )
    rec: dict[str, Any] = {"seconds": seconds, "error": None}
    if err is not None:
        rec["error"] = f"{type(err).__name__}: {err}"
        if isinstance(err, InfeasibleError):
            rec.update(outcome="infeasible" if err.proven else "no plan", proven=err.proven)
        else:
            rec.update(outcome="crash", proven=False)
        return rec
    v = find_violations(plan.bins, inst.lengths, plan.k, inst.cap)
    proven = plan.status == "optimal" and (inst.k is not None or plan.k_status == "optimal")
    rec.update(
        outcome="optimal" if proven else "feasible", proven=proven, status=plan.status,
        k=plan.k, k_status=plan.k_status, k_lower_bound=plan.k_lower_bound,
        max_load=plan.max_load, lower_bound=plan.lower_bound, method=plan.method,
        notes=plan.notes, valid=v.ok, violations=v.messages,
    )
    return rec


def offline_naive(inst: Instance, time_limit: float) -> dict[str, Any]:
    if inst.k is None:
        assert inst.cap is not None
        res, seconds, err = timed(lambda: naive_cpsat_min_k(inst.lengths, inst.cap, time_limit))
    else:
        res, seconds, err = timed(lambda: naive_cpsat(inst.lengths, inst.k, inst.cap, time_limit))
    if err is not None:
        return {"seconds": seconds, "error": f"{type(err).__name__}: {err}", "proven": False,
                "outcome": "crash"}
    outcome = {"OPTIMAL": "optimal", "INFEASIBLE": "infeasible"}.get(res.status, "unproven")
    valid = None
    if res.bins is not None:
        valid = find_violations(res.bins, inst.lengths, res.k, inst.cap).ok
    return {
        "seconds": seconds, "error": None, "status": res.status, "outcome": outcome,
        "proven": res.proven, "k": res.k, "max_load": res.max_load, "valid": valid,
        "build_seconds": res.build_seconds, "variables": res.variables, "log": res.log,
    }


def offline_task(inst: Instance, time_limit: float, engine: str) -> dict[str, Any]:
    return {
        "instance": inst.name, "n": inst.n, "k_given": inst.k, "cap": inst.cap,
        "seqpart": offline_seqpart(inst, time_limit, engine),
        "naive": offline_naive(inst, time_limit),
    }


def conflicts(rec: dict[str, Any]) -> list[str]:
    """Disagreements between two proofs, or a proof and a plan: one of them is wrong."""
    s, nv = rec["seqpart"], rec["naive"]
    out = []
    if s["outcome"] == "infeasible" and nv.get("max_load") is not None:
        out.append("seqpart proved infeasible but the naive model found a plan")
    if nv["outcome"] == "infeasible" and s.get("max_load") is not None:
        out.append("naive proved infeasible but seqpart returned a plan")
    if s["outcome"] == "optimal" and nv["outcome"] == "optimal":
        if rec["k_given"] is None and s["k"] != nv["k"]:
            out.append(f"smallest k differs: seqpart {s['k']}, naive {nv['k']}")
        elif s["k"] == nv["k"] and s["max_load"] != nv["max_load"]:
            out.append(f"optimal max load differs: seqpart {s['max_load']}, naive {nv['max_load']}")
    if s["outcome"] == "optimal" and nv.get("max_load") is not None and s["k"] == nv["k"] \
            and nv["max_load"] < s["max_load"]:
        out.append(f"naive found {nv['max_load']} below seqpart's 'optimal' {s['max_load']}")
    if s.get("valid") is False:
        out.append(f"seqpart plan invalid: {s['violations']}")
    if s["outcome"] == "crash":
        out.append(f"seqpart crashed: {s['error']}")
    return out


def run_offline(instances: list[Instance], args: argparse.Namespace) -> list[dict[str, Any]]:
    print(f"\n== Offline: {len(instances)} bench instances, time_limit={args.time_limit}s, "
          f"engine={args.engine}, naive model same budget, jobs={args.jobs}", flush=True)
    results: list[dict[str, Any]] = []

    def show(rec: dict[str, Any]) -> None:
        s, nv = rec["seqpart"], rec["naive"]
        k = rec["k_given"] if rec["k_given"] is not None else f"None->{s.get('k', '?')}"
        print(f"  [{len(results):3d}/{len(instances)}] {rec['instance']:<52} n={rec['n']:<5} "
              f"k={k!s:<9} seqpart {s['outcome']:<10} {s['seconds']:6.2f}s | naive "
              f"{nv['outcome']:<10} {nv['seconds']:6.2f}s", flush=True)

    if args.jobs <= 1:
        for inst in instances:
            results.append(offline_task(inst, args.time_limit, args.engine))
            show(results[-1])
    else:
        with ProcessPoolExecutor(max_workers=args.jobs, initializer=warm_up) as pool:
            futures = [pool.submit(offline_task, inst, args.time_limit, args.engine)
                       for inst in instances]
            for fut in as_completed(futures):
                results.append(fut.result())
                show(results[-1])
    order = {inst.name: i for i, inst in enumerate(instances)}
    results.sort(key=lambda r: order[r["instance"]])
    return results


def offline_summary(results: list[dict[str, Any]], time_limit: float) -> list[str]:
    print("\nOffline summary (proven = optimal with proof, or proven infeasible; for k=None also "
          "the smallest k proven)")
    rows = []
    groups = {
        "all": results,
        "real data": [r for r in results if not r["instance"].startswith("adversarial/")],
        "adversarial": [r for r in results if r["instance"].startswith("adversarial/")],
        "k given": [r for r in results if r["k_given"] is not None],
        "k=None": [r for r in results if r["k_given"] is None],
    }
    for model in ("seqpart", "naive"):
        for gname, rs in groups.items():
            if not rs:
                continue
            outs = [r[model]["outcome"] for r in rs]
            ts = [r[model]["seconds"] for r in rs]
            rows.append([
                f"{model} / {gname}", str(len(rs)),
                f"{100 * sum(r[model]['proven'] for r in rs) / len(rs):.1f}%",
                str(outs.count("optimal")), str(outs.count("infeasible")),
                str(outs.count("feasible") + outs.count("unproven")),
                str(outs.count("no plan")), str(outs.count("crash")),
                fmt_ms(median(ts)), fmt_ms(percentile(ts, 95)), fmt_ms(max(ts)),
                f"{sum(ts):.0f}",
            ])
    print(table(["model / instances", "count", "proven", "optimal", "infeasible",
                 "unproven plan", "no plan", "crash", "median ms", "p95 ms", "max ms",
                 "total s"], rows))

    print("\nProven share by n bucket (seqpart | naive)")
    bucket_rows = []
    for label in dict.fromkeys(bucket_of(r["n"]) for r in sorted(results, key=lambda r: r["n"])):
        rs = [r for r in results if bucket_of(r["n"]) == label]
        sp = sum(r["seqpart"]["proven"] for r in rs)
        nv = sum(r["naive"]["proven"] for r in rs)
        bucket_rows.append([label, str(len(rs)), f"{sp} ({100 * sp / len(rs):.0f}%)",
                            f"{nv} ({100 * nv / len(rs):.0f}%)",
                            fmt_ms(median([r["seqpart"]["seconds"] for r in rs])),
                            fmt_ms(median([r["naive"]["seconds"] for r in rs]))])
    print(table(["n", "count", "seqpart proven", "naive proven", "seqpart median ms",
                 "naive median ms"], bucket_rows))

    knone = [r["seqpart"] for r in results if r["k_given"] is None]
    statuses = [s.get("k_status", s["outcome"]) for s in knone]
    print(f"\nk=None instances ({len(knone)}): seqpart k_status "
          + ", ".join(f"{x}={statuses.count(x)}" for x in sorted(set(statuses))))
    unproven = [r for r in results if not r["seqpart"]["proven"]]
    print(f"seqpart unproven instances ({len(unproven)}):")
    for r in unproven:
        s = r["seqpart"]
        detail = (s["error"] or "")[:140] if s.get("max_load") is None else (
            f"max_load={s['max_load']} bound={s['lower_bound']} k={s['k']} "
            f"k_status={s['k_status']} method={s['method']} notes={'; '.join(s['notes'])[:160]}")
        print(f"  {r['instance']} n={r['n']} k={r['k_given']}: {s['outcome']} "
              f"{s['seconds']:.2f}s {detail}")

    lines = []
    n_all = len(results)
    proven = sum(r["seqpart"]["proven"] for r in results)
    naive = sum(r["naive"]["proven"] for r in results)
    lines.append(
        f"{verdict(proven >= 0.9 * n_all)}  offline: proven optimal or proven infeasible on >= 90% "
        f"within {time_limit:g} s: seqpart {proven}/{n_all} = {100 * proven / n_all:.1f}% "
        f"(naive model, same run and budget: {naive}/{n_all} = {100 * naive / n_all:.1f}%)"
    )
    bad = [(r["instance"], c) for r in results for c in conflicts(r)]
    lines.append(
        f"{verdict(not bad)}  offline: no invalid plan, crash, or disagreement with the naive "
        f"model's proofs: {len(bad)} found"
        + "".join(f"\n      {i}: {c}" for i, c in bad)
    )
    over = [r for r in results if r["seqpart"]["seconds"] > time_limit + 0.5]
    lines.append(
        f"{verdict(not over)}  offline: every call within time_limit + 0.5 s: "
        f"max {max(r['seqpart']['seconds'] for r in results):.2f} s"
        + "".join(f"\n      {r['instance']}: {r['seqpart']['seconds']:.2f} s" for r in over)
    )
    return lines


# --- online ----------------------------------------------------------------------------------


def online_one(inst: Instance, repeats: int) -> dict[str, Any]:
    assert inst.k is not None
    heur: dict[str, int | None] = {}
    heur_seconds: dict[str, float] = {}
    for name, fn in HEURISTICS.items():
        bins, seconds, _ = timed(lambda fn=fn: fn(inst.lengths, inst.k, inst.cap))
        heur_seconds[name] = seconds
        ok = find_violations(bins, inst.lengths, inst.k, inst.cap).ok
        heur[name] = max(sum(inst.lengths[i] for i in b) for b in bins) if ok else None
    valid = {n: v for n, v in heur.items() if v is not None}
    best_name = min(valid, key=valid.__getitem__) if valid else None
    # The heuristics that ran within the same budget: the fair comparison for an online call.
    in_budget = {n: v for n, v in valid.items() if heur_seconds[n] <= ONLINE_LIMIT}
    best_in_budget = min(in_budget, key=in_budget.__getitem__) if in_budget else None
    calls = []
    for _ in range(repeats):
        plan, seconds, err = timed(
            lambda: partition(inst.lengths, inst.k, inst.cap, time_limit=ONLINE_LIMIT))
        call: dict[str, Any] = {"seconds": seconds, "error": None}
        if err is not None:
            call["error"] = f"{type(err).__name__}: {err}"
        else:
            v = find_violations(plan.bins, inst.lengths, inst.k, inst.cap)
            call.update(max_load=plan.max_load, status=plan.status, method=plan.method,
                        notes=plan.notes, valid=v.ok, violations=v.messages)
        calls.append(call)
    return {
        "instance": inst.name, "source": inst.source, "n": inst.n, "k": inst.k, "cap": inst.cap,
        "heuristics": heur, "heuristic_seconds": heur_seconds, "best_heuristic": best_name,
        "best_heuristic_load": valid.get(best_name) if best_name else None,
        "best_in_budget": best_in_budget,
        "best_in_budget_load": in_budget.get(best_in_budget) if best_in_budget else None,
        "calls": calls,
    }


def run_online(instances: list[Instance], repeats: int) -> list[dict[str, Any]]:
    print(f"\n== Online: partition(time_limit={ONLINE_LIMIT}) on {len(instances)} batches x "
          f"{repeats} calls (k = trainer first-fit count)", flush=True)
    out = []
    for i, inst in enumerate(instances):
        out.append(online_one(inst, repeats))
        if (i + 1) % 20 == 0 or i + 1 == len(instances):
            print(f"  ... {i + 1}/{len(instances)}", flush=True)
    return out


def online_summary(results: list[dict[str, Any]]) -> list[str]:
    limit = ONLINE_LIMIT + ONLINE_SLACK
    rows = []
    for n in sorted({r["n"] for r in results}):
        for src in ("generated", "real", "all"):
            rs = [r for r in results if r["n"] == n and (src == "all" or r["source"] == src)]
            if not rs:
                continue
            ts = [c["seconds"] for r in rs for c in r["calls"]]
            over = [t - ONLINE_LIMIT for t in ts]
            worse = sum(1 for r in rs for c in r["calls"] if _worse(r, c, "best_in_budget_load"))
            rows.append([
                f"n={n} {src}", str(len(rs)), str(len(ts)),
                f"{min(r['k'] for r in rs)}..{max(r['k'] for r in rs)}",
                fmt_ms(median(ts)), fmt_ms(percentile(ts, 99)), fmt_ms(max(ts)),
                f"{1000 * percentile(over, 99):+.1f}", f"{1000 * max(over):+.1f}",
                str(sum(t > limit for t in ts)), str(worse),
                str(sum(1 for r in rs for c in r["calls"] if c["error"])),
            ])
    print("\nOnline summary (overrun = wall time of the call - 20 ms)")
    print(table(["batches", "count", "calls", "k", "median ms", "p99 ms", "max ms",
                 "p99 overrun ms", "max overrun ms", "calls > 25 ms",
                 "worse than heur. in budget", "raised"], rows))
    slow = sorted((c["seconds"], r["instance"], r["k"], c.get("method", c["error"]))
                  for r in results for c in r["calls"] if c["seconds"] > limit)
    if slow:
        print(f"calls over {limit * 1000:.0f} ms ({len(slow)}), slowest first:")
        for t, name, k, how in sorted(slow, reverse=True)[:15]:
            print(f"  {name} k={k}: {t * 1000:.1f} ms ({how})")
    ts = [c["seconds"] for r in results for c in r["calls"]]
    lines = [
        f"{verdict(max(ts) <= limit)}  online: every call within {ONLINE_LIMIT * 1000:.0f} ms + "
        f"{ONLINE_SLACK * 1000:.0f} ms at n <= 2048: max {fmt_ms(max(ts))} ms, "
        f"p99 {fmt_ms(percentile(ts, 99))} ms, {sum(t > limit for t in ts)} of {len(ts)} calls "
        "over"
    ]
    worse = [(r["instance"], c.get("max_load"), r["best_in_budget"], r["best_in_budget_load"])
             for r in results for c in r["calls"] if _worse(r, c, "best_in_budget_load")]
    lines.append(
        f"{verdict(not worse)}  online: plans never worse than the best valid plan of a heuristic "
        f"that ran within the same {ONLINE_LIMIT * 1000:.0f} ms ({', '.join(HEURISTICS)}): "
        f"{len(worse)} of {len(ts)} calls worse"
        + "".join(f"\n      {i}: partition {a} > {h} {b}" for i, a, h, b in worse[:20])
    )
    unbounded = [(r["instance"], c.get("max_load"), r["best_heuristic"], r["best_heuristic_load"],
                  r["heuristic_seconds"][r["best_heuristic"]])
                 for r in results for c in r["calls"] if _worse(r, c, "best_heuristic_load")]
    lines.append(
        f"INFO  against every heuristic run to completion, however long it took: {len(unbounded)} "
        f"of {len(ts)} calls worse"
        + "".join(f"\n      {i}: partition {a} > {h} {b} (which took {1000 * t:.0f} ms)"
                  for i, a, h, b, t in unbounded[:12])
    )
    # How the count depends on how long the heuristic may have run: a repeatable budget stops
    # before the clock would on a fast phase of the machine (docs/determinism.md).
    within = []
    for ms in (15, 12, 8):
        count = 0
        for r in results:
            fast = [v for name, v in r["heuristics"].items()
                    if v is not None and r["heuristic_seconds"][name] <= ms / 1000]
            count += sum(1 for c in r["calls"] if fast and (c["error"] or c["max_load"] > min(fast)))
        within.append(f"{count} within {ms} ms")
    lines.append("INFO  against the heuristics that ran within less: calls worse, "
                 + ", ".join(within))
    errs = [(r["instance"], c["error"]) for r in results for c in r["calls"] if c["error"]]
    invalid = [(r["instance"], c["violations"]) for r in results for c in r["calls"]
               if c.get("valid") is False]
    lines.append(
        f"{verdict(not errs and not invalid)}  online: a valid plan from every call: "
        f"{len(errs)} raised, {len(invalid)} invalid"
        + "".join(f"\n      {i}: {e[:160]}" for i, e in (errs + invalid)[:20])
    )
    return lines


def _worse(rec: dict[str, Any], call: dict[str, Any], key: str) -> bool:
    best = rec[key]
    if call["error"]:
        return best is not None
    return best is not None and call["max_load"] > best


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_instances_argument(parser)
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                        help="real length files for the online part (default ../shared/data)")
    parser.add_argument("--time-limit", type=float, default=10.0,
                        help="offline seconds per instance and model (default 10)")
    parser.add_argument("--engine", default="auto", choices=("auto", "cp-sat"),
                        help="partition engine offline (default auto)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="offline instances in parallel processes (default 1: each CP-SAT "
                        "solve uses 2 workers, so more jobs than cores/2 skews the timings)")
    parser.add_argument("--repeats", type=int, default=3, help="online calls per batch")
    parser.add_argument("--seeds", type=int, default=None,
                        help="online batches per (shape or file, n) (default 5, --quick 1)")
    parser.add_argument("--skip-offline", action="store_true")
    parser.add_argument("--skip-online", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: every 8th bench instance at 2 s, 1 seed online")
    parser.add_argument("--out", default=None, help="write every raw result to this JSON file")
    args = parser.parse_args(argv)
    if args.quick and "--time-limit" not in " ".join(argv):
        args.time_limit = 2.0
    print(machine_header(["benchmarks/bench_cpsat.py", *argv]))
    warm_up()

    lines: list[str] = []
    offline: list[dict[str, Any]] = []
    online: list[dict[str, Any]] = []
    if not args.skip_offline:
        instances = load_instances(args.instances)
        if args.quick:
            instances = instances[::8]
        offline = run_offline(instances, args)
        lines += offline_summary(offline, args.time_limit)
    if not args.skip_online:
        seeds = args.seeds or (1 if args.quick else 5)
        batches = generated_instances(BATCH_SIZES, seeds) + real_instances(
            args.data_dir, BATCH_SIZES, seeds)
        online = run_online(batches, args.repeats)
        lines += online_summary(online)

    print("\nTargets: proofs offline, time limit and plan quality online")
    for line in lines:
        print(line)
    if args.out:
        write_json(args.out, {"argv": argv, "offline": offline, "online": online,
                              "targets": lines})
        print(f"\nraw results: {args.out}")
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    raise SystemExit(main())
