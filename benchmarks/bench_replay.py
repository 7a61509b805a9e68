"""Measured replay: plan_step (with a calibrated cost) against the trainers' schedulers, each
step run for real on dp=2 gloo processes, on real length data.

    python benchmarks/bench_replay.py [--quick] [--profile FILE] [--repeats 5] [--out results.json]

1. Calibrate the model replay runs on (the reference decoder, hidden 128, 2 layers; CPU clock,
   one thread), unless --profile gives a profile.
2. Batches: seeded draws from /work/shared/data (or the bundled copies): reasoning long-CoT
   (n=128, cap 32,768), math SFT (n=1024, cap 4,096), chat (n=512, cap 4,096), at the target
   cost (24576*l + l^2, a 7B-class model's a/b). Lengths and caps are scaled by the calibrated
   a/b over the target's, so each sequence's linear/quadratic balance is the target's.
3. Per batch: every trainer scheduler (TRAINER_SCHEDULERS, balancing the calibrated cost) and
   plan_step (the profile's cost and overhead, 1 s) are run ``--repeats`` times each, paired and
   interleaved (a fresh order per repeat) after one warm-up round, on 2 processes of one thread
   in a gloo group: forward+backward per micro-batch, then a gradient all-reduce.
Reports per batch the median step per schedule (wall clock and CPU clock), plan_step / best
trainer with a 95% bootstrap CI, the model's predicted ratio, and the step prediction error;
then PASS/FAIL per target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from seqpart.solver import Cost
from seqpart.solver.measure.calibrate import calibrate
from seqpart.solver.measure.compare import replay_batch, scale_factor, scale_lengths
from seqpart.solver.measure.design import make_design
from seqpart.solver.measure.models import ReferenceConfig
from seqpart.solver.measure.profile import load_cost_profile
from seqpart.solver.measure.replay import RunnerSpec
from seqpart.solver.study.datasets import load_dataset, sample_batch

SHARED = Path("/work/shared/data")
TARGET = Cost.attention()  # 24576*l + l^2
MODEL = ReferenceConfig(hidden=128, layers=2, heads=4, ffn=344, vocab=512)
#: (kind, file, n, cap at the target's scale, batches)
SOURCES = [
    ("long-CoT", "reasoning_short_cot_sky_t1_short_qwen25_32k", 128, 32768, 8),
    ("math", "math_sft_gsm8k_train", 1024, 4096, 6),
    ("chat", "sft_chat_alpaca_eval_4models", 512, 4096, 6),
]


def _lengths(name: str) -> list[int]:
    path = SHARED / f"{name}.json"
    if path.exists():
        return [int(x) for x in json.loads(path.read_text())["lengths"]]
    return list(load_dataset(name).lengths)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one batch per source, 3 repeats")
    ap.add_argument("--profile", default=None, help="a cost profile of the reference model above")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeats
    print(f"load: {os.getloadavg()}", flush=True)
    if args.profile:
        profile = load_cost_profile(args.profile)
    else:
        t0 = time.perf_counter()
        profile = calibrate(reference=MODEL, design=make_design(4096, 16, 16), clock="cpu", progress=False)
        print(f"calibrated in {time.perf_counter() - t0:.0f}s", flush=True)
    held = profile.fit_error["held_out"]
    print(f"profile: {profile.overhead_s * 1e3:.2f} ms + {profile.linear_s * 1e6:.2f} us*l + "
          f"{profile.quadratic_s * 1e9:.2f} ns*l^2 (a/b {profile.ratio:.0f}); held-out median "
          f"{held['median_rel']:.1%} max {held['max_rel']:.1%}", flush=True)
    factor = scale_factor(profile, TARGET)
    spec = RunnerSpec("reference", {"hidden": MODEL.hidden, "layers": MODEL.layers, "heads": MODEL.heads,
                                    "ffn": MODEL.ffn, "vocab": MODEL.vocab})
    print(f"scale {factor:.4f}: target cost {TARGET} over the model's a/b {profile.ratio:.0f}", flush=True)
    rows = []
    t_all = time.perf_counter()
    for kind, name, n, cap, count in SOURCES:
        pool = _lengths(name)
        for b in range(1 if args.quick else count):
            raw = sample_batch(pool, n, np.random.default_rng(1000 + b))
            lengths = scale_lengths(raw, factor)
            c = max(max(lengths), round(cap * factor))
            t0 = time.perf_counter()
            res = replay_batch(lengths, 2, c, profile, spec, repeats=repeats, seed=b, time_limit=1.0)
            row = _row(kind, b, lengths, c, res, time.perf_counter() - t0)
            rows.append(row)
            print(_fmt(row), flush=True)
    print(f"total {time.perf_counter() - t_all:.0f}s; load {os.getloadavg()}")
    ok = _verdicts(rows)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "scale": factor, "repeats": repeats}, indent=1))
    return 0 if ok else 1


def _row(kind: str, b: int, lengths: list[int], cap: int, res: object, seconds: float) -> dict:
    r = res  # BatchResult
    sched = r.schedules  # type: ignore[attr-defined]
    return {
        "kind": kind, "batch": b, "n": len(lengths), "tokens": sum(lengths), "cap": cap, "seconds": seconds,
        "best": r.best_trainer, "ratio_wall": r.ratio_wall, "ratio_cpu": r.ratio_cpu,  # type: ignore[attr-defined]
        "predicted_ratio": r.predicted_ratio, "noise": r.noise,  # type: ignore[attr-defined]
        "errors_cpu": {k: s.error("cpu") for k, s in sched.items()},
        "errors_wall": {k: s.error("wall") for k, s in sched.items()},
        "steps": {k: [s.predicted_s, s.wall_s, s.cpu_s, s.micro_batches] for k, s in sched.items()},
    }


def _fmt(row: dict) -> str:
    m, lo, hi = row["ratio_cpu"]
    mw, low, hiw = row["ratio_wall"]
    err = np.mean([abs(e) for e in row["errors_cpu"].values()])
    return (f"{row['kind']:>8} #{row['batch']} n={row['n']} tokens={row['tokens']} cap={row['cap']}: "
            f"plan/{row['best']} cpu {m:.3f} [{lo:.3f},{hi:.3f}] wall {mw:.3f} [{low:.3f},{hiw:.3f}] "
            f"predicted {row['predicted_ratio']:.3f}; |step err| cpu {err:.1%}; noise {row['noise']:.1%} "
            f"({row['seconds']:.0f}s)")


def _verdicts(rows: list[dict]) -> bool:
    ok = True
    for clock in ("cpu", "wall"):
        slower = [r for r in rows if r[f"ratio_{clock}"][1] > 1.0]
        gains = [r for r in rows if r["predicted_ratio"] <= 0.95]
        off = [r for r in gains if abs((1 - r[f"ratio_{clock}"][0]) - (1 - r["predicted_ratio"])) > 0.05]
        err = float(np.mean([abs(e) for r in rows for e in r[f"errors_{clock}"].values()]))
        ratio_err = float(np.mean([abs(r[f"ratio_{clock}"][0] - r["predicted_ratio"]) for r in rows]))
        print(f"[{clock}] plan_step slower than the best trainer beyond the CI on {len(slower)}/{len(rows)} "
              f"batches; predicted gain >= 5% on {len(gains)}, measured gain off by > 5 points on "
              f"{len(off)}; mean |step error| {err:.1%}; mean |ratio error| {ratio_err:.3f}")
        for name, passed in ((f"[{clock}] never slower beyond noise", not slower),
                             (f"[{clock}] gain within 5 points where predicted >= 5%", not off),
                             (f"[{clock}] mean absolute step error <= 5%", err <= 0.05)):
            print(f"{'PASS' if passed else 'FAIL'} {name}")
            ok &= passed
    return ok


if __name__ == "__main__":
    sys.exit(main())
