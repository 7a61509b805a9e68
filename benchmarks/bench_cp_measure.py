"""Context-parallel micro-batches measured on 2 real processes (gloo on CPU, or NCCL on CUDA).

    python benchmarks/bench_cp_measure.py [--quick] [--device cpu|cuda] [--backend gloo|nccl]
        [--json out.json]

What runs (seqpart.solver.measure.cp.cp_timing_report): the reference decoder (hidden 64, 2 layers,
4 heads, FFN 172, vocab 256; fp32, one torch thread per process).
1. Equivalence: 5 micro-batches (one sequence of 1 token, sequences shorter than the zigzag's 4
   chunks, uneven lengths up to 1,000) by a CP group of 2 processes with all-gather-KV attention,
   against the same micro-batches on one process: loss and every parameter gradient.
2. Fit: 10 micro-batches (up to 2,048 tokens; --quick 8 up to 1,024) at degree 1 and 2, 1
   warm-up and 7 paired interleaved rounds (--quick 3); the model
   ``overhead + (a*sum l + b*sum l^2)/c + cp_comm*sum l*(c-1)/c`` by NNLS, and each coefficient's
   interval over the per-round fits.
3. Replay: lengths [2048, 1536, 1536, 512, 512], max_tokens_per_gpu 2048, on 2 GPUs: Megatron-LM's
   greedy schedule against seqpart's (plan_cp_step given the wall clock's fitted cost, or, without
   seqpart.solver.dynamic_cp, two written-out schedules), 9 paired interleaved repeats (--quick 5).

Targets: the outputs match (loss and gradients within 1e-5); the fitted cp_comm is reported with
its interval; the measured ranking of the two schedules (wall clock) equals the predicted one.
Both clocks are printed: wall, and each process's CPU time (on a machine shared with other work it
leaves out waiting for a core and, also, waiting for a peer inside a collective).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any


def _fit_lines(fit: dict[str, Any]) -> list[str]:
    m, noise, units = fit["model"], fit["noise"]["model"], fit["units"]

    def iv(term: str, scale: float) -> str:
        n = noise[term]
        return (f"{m[term] * scale:.3g} (rounds {n['median'] * scale:.3g} "
                f"[{n['low'] * scale:.3g}, {n['high'] * scale:.3g}])")

    level = noise["cp_comm"]["level"]
    coll = fit["collectives"]
    return [
        f"fit on the median times (each round fitted alone: median [interval at {level:.1%}, "
        f"{fit['rounds']} rounds]):",
        f"  overhead {iv('overhead', 1e3)} ms, a {iv('linear', 1e6)} us/token, "
        f"b {iv('quadratic', 1e9)} ns/token^2,",
        f"  cp_comm {iv('cp_comm', 1e6)} us per received KV token",
        f"in units (linear = 24576): quadratic {units['quadratic']}, overhead {units['overhead']}, "
        f"cp_comm {units['cp_comm']}"
        + (f" = {units['cp_comm_over_linear']:.2f} x linear" if units["cp_comm_over_linear"] is not None
           else " (no linear term)"),
        f"collectives alone: {coll['fixed'] * 1e3:.2f} ms per micro-batch + "
        f"{coll['per_token'] * 1e6:.3g} us per received token",
    ]


def _replay_lines(replay: dict[str, Any]) -> list[str]:
    out = [f"lengths {replay['lengths']}, max_tokens_per_gpu {replay['max_tokens_per_gpu']}, "
           f"schedules {replay['schedules_from']}"]
    for name, steps in replay["schedules"].items():
        out.append(f"  {name:>15}: " + " ; ".join(" | ".join(f"{r}:{s}" for r, s in step) for step in steps))
    for clock, c in replay["clocks"].items():
        r = c["ratio"]
        ms = ", ".join(f"{n} {t * 1e3:.0f} ms" for n, t in c["measured_s"].items())
        out.append(f"  {clock:>4} clock: measured {ms}; ratio {r['of']} {r['median']:.3f} "
                   f"[{r['low']:.3f}, {r['high']:.3f}] ({r['level']:.1%}, {c['repeats']} repeats); "
                   f"predicted {c['predicted_ratio']:.3f}; ranking matches: {c['ranking_matches']}")
    if replay.get("planner_predicted_ratio") is not None:
        out.append(f"  planner's cp_step_time ratio (wall fit, integer units): "
                   f"{replay['planner_predicted_ratio']:.3f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller design, halved lengths, fewer repeats")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--json", default=None, help="write the whole report here")
    args = ap.parse_args()
    import torch

    from seqpart.solver.measure.cp import cp_timing_report

    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load before {tuple(round(x, 1) for x in os.getloadavg())}")
    t0 = time.perf_counter()
    rep = cp_timing_report(device=args.device, backend=args.backend, quick=args.quick)
    print(f"device {args.device}, backend {rep['backend']}, {time.perf_counter() - t0:.0f} s, "
          f"load after {tuple(round(x, 1) for x in os.getloadavg())}")
    eq = rep["equivalence"]
    count = len(next(iter(eq["batches"].values())))
    print(f"equivalence ({eq['split']} split, degree {eq['degree']}, {count} micro-batches on each of "
          f"{', '.join(eq['models'])}{'; skipped ' + eq['skipped'] if eq['skipped'] else ''}): "
          f"max |loss diff| {eq['max_loss_abs_diff']:.2e}, max relative gradient diff "
          f"{eq['max_grad_rel_diff']:.2e}")
    for clock, fit in rep["fit"].items():
        print(f"fit ({clock} clock):")
        for line in _fit_lines(fit):
            print("  " + line)
    print("replay:")
    for line in _replay_lines(rep["replay"]):
        print("  " + line)
    cp = rep["fit"]["wall"]["noise"]["model"]["cp_comm"]
    wall = rep["replay"]["clocks"]["wall"]
    targets = [
        ("outputs match (loss, gradients within 1e-5)", eq["match"]),
        ("fitted cp_comm reported with its interval (wall clock)",
         all(isinstance(cp[k], float) for k in ("median", "low", "high")) and cp["low"] <= cp["high"]),
        ("measured ranking equals predicted (wall clock)", wall["ranking_matches"]),
    ]
    for name, ok in targets:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=1)
    return 0 if all(ok for _, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
