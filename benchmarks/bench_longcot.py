"""Few long sequences per micro-batch (long chain-of-thought RL).

    python benchmarks/bench_longcot.py [--sizes 16,32,64,128,256,512] [--seeds 5]
        [--long 3] [--verify 0] [--grouped-seeds 4] [--jobs 1] [--out FILE]

Long-CoT batches: lengths lognormal (median 8k tokens, sigma 0.7) clipped to 2k-32k, caps 64k
and 128k, k = the smallest count ``partition(k=None, time_limit=1)`` finds, and that count + 2.
Per batch, in one process:
- ``partition(time_limit=LONG)``: proven = status "optimal" or InfeasibleError(proven=True);
- ``partition(time_limit=0.02)``: the gap to the best bound either run proved, and its max load
  against Karmarkar-Karp's (seqpart's and the trainers') when KK's plan is valid;
- with ``--verify S``: the naive CP-SAT model (baselines.naive_cpsat) for S seconds must never
  beat a load called optimal nor find a plan for a batch called infeasible.
Grouped GRPO batches (n=2048 and 800, 8 or 16 responses per prompt, k in 8/32/128, no cap and
2x the longest): ``partition`` at 20 ms against seqpart's Karmarkar-Karp.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from baselines import naive_cpsat, trainer_karmarkar_karp
from common import fmt_ms, machine_header, median, percentile, table, timed, verdict, write_json

from seqpart.heuristics import karmarkar_karp
from seqpart.solver import InfeasibleError, find_violations, partition
from seqpart.solver.study.datasets import rl_batch

ONLINE = 0.02
CAPS = (65536, 131072)


def longcot_batch(n: int, rng: np.random.Generator) -> list[int]:
    """Long-CoT rollout lengths: lognormal around 8k tokens, clipped to [2048, 32768]."""
    body = np.rint(rng.lognormal(math.log(8000), 0.7, n))
    return [int(x) for x in np.clip(body, 2048, 32768)]


def instances(sizes: Sequence[int], seeds: int) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        for cap in CAPS:
            for s in range(seeds):
                rng = np.random.default_rng([11, n, cap, s])
                out.append({"name": f"longcot/n{n}/cap{cap // 1024}k/s{s}", "n": n, "cap": cap,
                            "lengths": longcot_batch(n, rng)})
    return out


def _valid_max(bins: list[list[int]], lengths: list[int], k: int, cap: int | None) -> int | None:
    if not find_violations(bins, lengths, k, cap).ok:
        return None
    return max(sum(lengths[i] for i in b) for b in bins)


def _run(lengths: list[int], k: int, cap: int | None, limit: float) -> dict[str, Any]:
    plan, seconds, err = timed(lambda: partition(lengths, k, cap, time_limit=limit))
    if err is not None:
        proven = isinstance(err, InfeasibleError) and err.proven
        return {"seconds": seconds, "outcome": "infeasible" if proven else "no plan",
                "proven": proven, "max_load": None, "bound": None,
                "error": f"{type(err).__name__}: {err}"}
    assert find_violations(plan.bins, lengths, plan.k, cap).ok
    return {"seconds": seconds, "outcome": plan.status, "proven": plan.status == "optimal",
            "max_load": plan.max_load, "bound": plan.lower_bound, "method": plan.method,
            "notes": plan.notes}


def longcot_task(inst: dict[str, Any], long: float, verify: float) -> list[dict[str, Any]]:
    lengths, cap = inst["lengths"], inst["cap"]
    try:
        k0 = partition(lengths, None, cap, time_limit=1.0).k
    except InfeasibleError:
        return []
    rows = []
    for k in (k0, k0 + 2):
        if k > len(lengths):
            continue
        rec: dict[str, Any] = {"name": inst["name"], "n": inst["n"], "cap": cap, "k": k,
                               "k0": k0, "long": _run(lengths, k, cap, long),
                               "online": _run(lengths, k, cap, ONLINE)}
        bounds = [r["bound"] for r in (rec["long"], rec["online"]) if r["bound"] is not None]
        rec["best_bound"] = max(bounds) if bounds else None
        rec["kk"] = _valid_max(karmarkar_karp(lengths, k), lengths, k, cap)
        rec["trainer_kk"] = _valid_max(trainer_karmarkar_karp(lengths, k), lengths, k, cap)
        if verify > 0:
            ref = naive_cpsat(lengths, k, cap, verify)
            rec["verify"] = {"status": ref.status, "max_load": ref.max_load}
        rows.append(rec)
    return rows


def grouped_task(seed: int) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng([11, 2048, seed])
    for n, group in ((2048, 8), (800, 8), (2048, 16)):
        lengths = rl_batch(n, rng, group_size=group)
        for k in (8, 32, 128):
            for cap in (None, 2 * max(lengths)):
                kk = _valid_max(karmarkar_karp(lengths, k), lengths, k, cap)
                rec = {"name": f"grouped/n{n}/g{group}/s{seed}", "n": n, "k": k, "cap": cap,
                       "online": _run(lengths, k, cap, ONLINE), "kk": kk}
                rows.append(rec)
    return rows


def wrong_claims(rec: dict[str, Any]) -> list[str]:
    """Disagreements with the long naive CP-SAT run: a better plan than a claimed optimum, or a
    plan for a batch claimed infeasible."""
    ref = rec.get("verify")
    if not ref:
        return []
    out = []
    for key in ("long", "online"):
        run = rec[key]
        if run["outcome"] == "infeasible" and ref["max_load"] is not None:
            out.append(f"{rec['name']} k={rec['k']}: {key} says infeasible, CP-SAT found a plan")
        if run["proven"] and ref["max_load"] is not None and ref["max_load"] < run["max_load"]:
            out.append(f"{rec['name']} k={rec['k']}: {key} optimal {run['max_load']}, "
                       f"CP-SAT found {ref['max_load']}")
        if (run["proven"] and ref["status"] == "OPTIMAL" and ref["max_load"] != run["max_load"]):
            out.append(f"{rec['name']} k={rec['k']}: {key} optimal {run['max_load']}, "
                       f"CP-SAT optimal {ref['max_load']}")
    return out


def summary(rows: list[dict[str, Any]], grouped: list[dict[str, Any]], long: float) -> list[str]:
    lines = []
    table_rows = []
    for label, sel in [("all", rows)] + [
        (f"n={n}", [r for r in rows if r["n"] == n]) for n in sorted({r["n"] for r in rows})
    ]:
        if not sel:
            continue
        proven = sum(r["long"]["proven"] or r["long"]["outcome"] == "infeasible" for r in sel)
        gaps = [(r["online"]["max_load"] - r["best_bound"]) / r["best_bound"]
                for r in sel if r["online"]["max_load"] is not None and r["best_bound"]]
        online_opt = sum(r["online"]["proven"] for r in sel)
        no_plan = sum(r["online"]["max_load"] is None and r["long"]["max_load"] is not None
                      for r in sel)
        t_long = [r["long"]["seconds"] for r in sel]
        t_on = [r["online"]["seconds"] for r in sel]
        table_rows.append([
            label, str(len(sel)), f"{100 * proven / len(sel):.1f}%",
            f"{100 * sum(gaps) / max(len(gaps), 1):.4f}%", f"{100 * max(gaps, default=0):.3f}%",
            f"{100 * online_opt / len(sel):.1f}%", str(no_plan), fmt_ms(median(t_long)),
            fmt_ms(max(t_long)), fmt_ms(median(t_on)), fmt_ms(percentile(t_on, 99)),
        ])
    lines.append(table(
        ["long-CoT", "batches", f"proven@{long:g}s", "gap@20ms mean", "max",
         "optimal@20ms", "no plan@20ms", f"ms@{long:g}s p50", "max", "ms@20ms p50", "p99"],
        table_rows,
    ))
    all_rows = rows + grouped
    kk_cmp = [(r, r["kk"]) for r in all_rows if r["kk"] is not None]
    kk_cmp += [(r, r["trainer_kk"]) for r in rows if r.get("trainer_kk") is not None]
    worse = [(r, v) for r, v in kk_cmp
             if r["online"]["max_load"] is None or r["online"]["max_load"] > v]
    n = len(rows)
    proven = sum(r["long"]["proven"] or r["long"]["outcome"] == "infeasible" for r in rows)
    gaps = [(r["online"]["max_load"] - r["best_bound"]) / r["best_bound"]
            for r in rows if r["online"]["max_load"] is not None and r["best_bound"]]
    mean_gap = sum(gaps) / max(len(gaps), 1)
    bad = [c for r in rows for c in wrong_claims(r)]
    verified = sum("verify" in r for r in rows)
    lines += [
        "",
        f"{verdict(n > 0 and proven >= 0.9 * n)}  long-CoT: {proven} of {n} "
        f"({100 * proven / max(n, 1):.1f}%) proven optimal or infeasible at {long:g} s "
        "(target >= 90%)",
        f"{verdict(mean_gap < 0.0005)}  long-CoT at 20 ms: mean gap to the best bound "
        f"{100 * mean_gap:.4f}% (target < 0.05%)",
        f"{verdict(max(gaps, default=0) < 0.005)}  long-CoT at 20 ms: max gap "
        f"{100 * max(gaps, default=0):.3f}% (target < 0.5%)",
        f"{verdict(not worse)}  at 20 ms never above Karmarkar-Karp where KK's plan is valid: "
        f"{len(worse)} worse of {len(kk_cmp)} comparisons ({len(grouped)} grouped batches "
        "included)",
    ]
    for r, v in worse[:10]:
        lines.append(f"      {r['name']} k={r['k']} cap={r['cap']}: {r['online']['max_load']} vs KK {v}")
    lines.append(
        f"{verdict(not bad)}  no wrong claim against the naive CP-SAT model: {len(bad)} "
        f"disagreements in {verified} batches checked"
        + ("" if verified else " (run with --verify S to check)")
    )
    lines += [f"      {c}" for c in bad[:10]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="16,32,64,128,256,512")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--long", type=float, default=3.0, help="seconds for the proof run")
    p.add_argument("--verify", type=float, default=0.0,
                   help="seconds of naive CP-SAT per batch to check claims (0: off)")
    p.add_argument("--grouped-seeds", type=int, default=4)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    print(machine_header(["benchmarks/bench_longcot.py", *argv]), flush=True)
    insts = instances(sizes, args.seeds)
    partition([8, 7, 6, 5, 4], 2, 15, time_limit=0.5)  # warm-up: imports and CP-SAT start
    rows: list[dict[str, Any]] = []
    grouped: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done in pool.map(longcot_task, insts, [args.long] * len(insts),
                             [args.verify] * len(insts)):
            rows += done
        for done in pool.map(grouped_task, range(args.grouped_seeds)):
            grouped += done
    lines = summary(rows, grouped, args.long)
    print("\n".join(lines))
    if args.out:
        write_json(args.out, {"argv": argv, "longcot": rows, "grouped": grouped})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
