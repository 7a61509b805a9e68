"""Measured replay: plan_step (with a calibrated cost) against the trainers' schedulers, each
step run for real on dp=2 gloo processes, on real length data.

    python benchmarks/bench_replay.py [--quick] [--batches N] [--pp 4 [--vpp 2]] [--profile FILE]
        [--repeats 12] [--out results.json]

1. Calibrate the model replay runs on (the reference decoder, hidden 128, 2 layers; CPU clock,
   one thread), unless --profile gives a profile. The calibration runs in 2 processes at once,
   as the replay's 2 ranks do: on a CPU they share caches and memory bandwidth, and a profile
   timed alone would under-predict every replayed step (rank 0's profile is used;
   --calibrate-procs 1 times it alone; --calibrate-lock-step makes both time the same
   micro-batch at the same moment: measured, it moved the step error from 5.6% to 6.5%).
   Then (``--calibrate steps``, the default) the profile is refitted in the step context
   (``calibrate_in_steps``): --calibrate-batches other draws per source (seeds 2000+, never
   replayed) run under every schedule, each micro-batch timed inside the steps; their ranks'
   times choose the term set and one common factor (``refit_in_steps``). --calibrate alone
   keeps the design's fit.
2. Batches: seeded draws from /work/shared/data (or the bundled copies): reasoning long-CoT
   (n=128, cap 32,768), math SFT (n=1024, cap 4,096), chat (n=512, cap 4,096), at the target
   cost (24576*l + l^2, a 7B-class model's a/b). Lengths and caps are scaled by the calibrated
   a/b over the target's, so each sequence's linear/quadratic balance is the target's.
3. Per batch: every trainer scheduler (TRAINER_SCHEDULERS, balancing the calibrated cost) and
   plan_step (the profile's cost and overhead, 1 s) are run ``--repeats`` times each, paired and
   interleaved (a fresh order per repeat) after one warm-up round, on 2 processes of one thread
   in a gloo group: forward+backward per micro-batch, then a gradient all-reduce.
Reports per batch the median step per schedule (wall clock and CPU clock), plan_step / best
trainer with an exact 95% interval for the median paired ratio (order statistics), the model's
predicted ratio, and the step prediction error; then PASS/FAIL per target.

"Slower beyond noise" is a one-sided sign test of plan_step against every trainer on every
batch, Holm-corrected over the whole run: the chance that any "slower" it reports is noise is at
most 5%. That needs 2^-repeats <= 0.05 / (comparisons), hence 12 repeats for 20 batches of 6
trainers. A trainer whose schedule is plan_step's own (the same micro-batches on the same
ranks) is an A/A control: the run reports how often the per-batch test calls one of those
"slower", which is how often it would be wrong.

With --pp > 1 (and --vpp), every schedule is planned for that pipeline (plan_step told pp/vpp;
the trainers asked for a count that is a multiple of pp when interleaving, in their own order
unless --order-trainers), each rank's micro-batches run and are timed one by one, and a step is
the exact makespan of those measured times under Megatron-LM's modelled schedule (1F1B,
interleaved when vpp > 1) plus the measured all-reduce: NOT a real pipeline run, as the output
says. --batches N takes N batches in all, round-robin over the sources.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from seqpart.solver import Cost
from seqpart.solver.measure.calibrate import calibrate, calibrate_in_steps
from seqpart.solver.measure.compare import (
    build_schedules,
    comparisons,
    replay_batch,
    scale_factor,
    scale_lengths,
    slower_than_any,
)
from seqpart.solver.measure.design import make_design
from seqpart.solver.measure.models import ReferenceConfig
from seqpart.solver.measure.pipeline_replay import PipelineSetting
from seqpart.solver.measure.profile import load_cost_profile
from seqpart.solver.measure.replay import RunnerSpec, schedule_lengths
from seqpart.solver.measure.stats import holm
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


def _design() -> Any:
    """Covers the micro-batches the replay runs: up to 2,726 tokens (the long-CoT cap at this
    scale) and 47 sequences, down to 5-token sequences (math at this scale), with 32 random
    micro-batches of unequal lengths in training."""
    return make_design(4096, 64, 16, min_length=8, random_train=32)


def _calibrate_one(_index: int) -> dict[str, Any]:
    profile = calibrate(reference=MODEL, design=_design(), clock="cpu",
                        progress=False, seed=0)
    return profile.to_json()


def _calibrate_in_step(index: int, barrier: Any, out: Any) -> None:
    """One of the processes timing the design in lock-step: every timed call of the main rounds
    starts when all processes are ready, so all run the same micro-batch at once (the same seed
    gives the same order), as the replay's ranks run theirs. The wait is not CPU time, so the
    CPU clock leaves it out; the short micro-batches' extra rounds (their number depends on each
    process's own times) run without the barrier."""
    import torch

    from seqpart.solver.measure.allocator import keep_freed_memory
    from seqpart.solver.measure.models import reference_runner

    torch.set_num_threads(1)
    keep_freed_memory()
    design = _design()
    inner = reference_runner(MODEL)
    warmup, repeats = 1, 3
    in_step = [(warmup + repeats) * len(design.all)]  # the calls of the main rounds

    def run(lengths: list[int]) -> None:
        if in_step[0] > 0:
            in_step[0] -= 1
            barrier.wait()
        inner(lengths)

    profile = calibrate(run, design=design, repeats=repeats, warmup=warmup, clock="cpu",
                        progress=False, seed=0, model=MODEL.describe())
    out.put((index, profile.to_json()))


def _calibrate(procs: int, lock_step: bool = False) -> Any:
    """The reference model's profile, timed while ``procs - 1`` other processes time the same
    design (the contention the replay's ranks meet), in lock-step with ``lock_step``; rank 0's
    profile."""
    from seqpart.solver.measure.profile import profile_from_json

    if procs <= 1:
        return profile_from_json(_calibrate_one(0))
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    if not lock_step:
        with ctx.Pool(procs) as pool:
            profiles = pool.map(_calibrate_one, range(procs))
        return profile_from_json(profiles[0])
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_calibrate_in_step, args=(i, barrier, out)) for i in range(procs)]
    for w in workers:
        w.start()
    got = dict(out.get(timeout=1800) for _ in workers)
    for w in workers:
        w.join()
    return profile_from_json(got[0])


def _describe(profile: Any) -> None:
    held = profile.fit_error["held_out"]
    print(f"profile: {profile.overhead_s * 1e3:.2f} ms + {profile.linear_s * 1e6:.2f} us*l + "
          f"{profile.quadratic_s * 1e9:.2f} ns*l^2 (a/b {profile.ratio:.0f}); held-out median "
          f"{held['median_rel']:.1%} max {held['max_rel']:.1%}", flush=True)
    if profile.planning_fit == "extended":
        ext = profile.extended or {}
        print(f"planners use the extended fit: {ext.get('coefficients')}; held-out median "
              f"{ext['held_out']['median_rel']:.1%} max {ext['held_out']['max_rel']:.1%}; "
              f"cost {profile.cost}, overhead {profile.overhead}", flush=True)


def _step_error(profile: Any) -> str:
    ext = profile.extended if profile.planning_fit == "extended" else profile.fit_error
    e = (ext or {}).get("held_out_steps") or {}
    return f"{e.get('median_rel', float('nan')):.1%} max {e.get('max_rel', float('nan')):.1%}"


def _scale_ratio(factor: float) -> float:
    return factor * TARGET.linear / TARGET.quadratic


def _calibration_steps(profile: Any, factor: float, pipe: PipelineSetting, per_source: int
                       ) -> dict[str, Any]:
    """Steps like the replay's, from other draws (seeds 2000+): every source's batches under
    every schedule (the trainers' and plan_step's with ``profile``), as lengths per rank."""
    steps: dict[str, Any] = {}
    for kind, name, n, cap, _ in SOURCES:
        pool = _lengths(name)
        for b in range(per_source):
            lengths, c = _scaled_batch(pool, n, cap, factor, 2000 + b)
            for sched, ranks in build_schedules(lengths, 2, c, profile, 1.0, pipeline=pipe).items():
                steps[f"{kind}#{b}/{sched}"] = schedule_lengths(ranks, lengths)
    return steps


def _scaled_batch(pool: list[int], n: int, cap: int, factor: float, seed: int) -> tuple[list[int], int]:
    """A seeded draw of ``n`` lengths at the calibrated scale, and its cap (at least the longest)."""
    lengths = scale_lengths(sample_batch(pool, n, np.random.default_rng(seed)), factor)
    return lengths, max(max(lengths), round(cap * factor))


def _lengths(name: str) -> list[int]:
    path = SHARED / f"{name}.json"
    if path.exists():
        return [int(x) for x in json.loads(path.read_text())["lengths"]]
    return list(load_dataset(name).lengths)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one batch per source, 3 repeats")
    ap.add_argument("--profile", default=None, help="a cost profile of the reference model above")
    ap.add_argument("--repeats", type=int, default=12,
                    help="paired rounds per batch (12: enough for the run-wide 5%% test over 20 batches)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--save-profile", default=None, help="write the calibrated profile here")
    ap.add_argument("--batches", type=int, default=None, help="N batches in all, round-robin over sources")
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages (> 1: modelled pipeline)")
    ap.add_argument("--vpp", type=int, default=1, help="model chunks per stage (needs --pp > 1)")
    ap.add_argument("--calibrate-procs", type=int, default=2,
                    help="processes calibrating at once (as many as the replay's ranks)")
    ap.add_argument("--calibrate-lock-step", action="store_true",
                    help="the calibrating processes time the same micro-batch at the same moment")
    ap.add_argument("--calibrate", choices=("steps", "alone"), default="steps",
                    help="steps: refit the profile from micro-batches timed inside calibration steps "
                         "(other draws of the same sources); alone: the design's, timed one by one")
    ap.add_argument("--calibrate-batches", type=int, default=2,
                    help="with --calibrate steps: calibration batches per source")
    ap.add_argument("--order-trainers", action="store_true",
                    help="at --pp > 1, run the trainers' micro-batches in seqpart's order")
    args = ap.parse_args()
    try:
        pipe = PipelineSetting(args.pp, args.vpp)  # bad values stop here, before calibrating
    except (TypeError, ValueError) as err:
        raise SystemExit(f"bench_replay: {err}") from None
    batches = _batches(args.quick, args.batches)
    repeats = 3 if args.quick else args.repeats
    print(f"load: {os.getloadavg()}", flush=True)
    if args.profile:
        profile = load_cost_profile(args.profile)
    else:
        t0 = time.perf_counter()
        profile = _calibrate(args.calibrate_procs, args.calibrate_lock_step)
        how = "in lock-step" if args.calibrate_lock_step else "each at its own pace"
        print(f"calibrated in {time.perf_counter() - t0:.0f}s, {args.calibrate_procs} processes at once "
              f"({how})", flush=True)
    _describe(profile)
    factor = scale_factor(profile, TARGET)
    spec = RunnerSpec("reference", {"hidden": MODEL.hidden, "layers": MODEL.layers, "heads": MODEL.heads,
                                    "ffn": MODEL.ffn, "vocab": MODEL.vocab})
    if not args.profile and args.calibrate == "steps":
        t0 = time.perf_counter()
        steps = _calibration_steps(profile, factor, pipe, args.calibrate_batches)
        profile = calibrate_in_steps(steps, spec, profile, repeats=3, clock="cpu", seed=1)
        d = profile.design
        shapes = ", ".join(f"{k} {v:.2%}" for k, v in d["terms_by_shape"].items())
        print(f"refitted in the step context from {len(steps)} calibration steps ({args.calibrate_batches} "
              f"other draws per source, every schedule; every 4th step held out) in "
              f"{time.perf_counter() - t0:.0f}s: in-step error after one common factor, per term set: "
              f"{shapes}; factor {d['step_level']:.3f}; held-out steps' rank times: median "
              f"{_step_error(profile)}", flush=True)
        _describe(profile)
    if args.save_profile and not args.profile:
        profile.save(args.save_profile)
    print(f"scale {factor:.4f}: target cost {TARGET} over the model's a/b "
          f"{_scale_ratio(factor):.0f} (the design's calibration)", flush=True)
    print(f"step: {pipe.describe()}", flush=True)
    rows = []
    t_all = time.perf_counter()
    pools: dict[str, list[int]] = {}
    for kind, name, n, cap, b in batches:
        pool = pools.setdefault(name, _lengths(name))
        lengths, c = _scaled_batch(pool, n, cap, factor, 1000 + b)
        t0 = time.perf_counter()
        res = replay_batch(lengths, 2, c, profile, spec, repeats=repeats, seed=b, time_limit=1.0,
                           pp=pipe.pp, vpp=pipe.vpp, order_trainers=args.order_trainers)
        row = _row(kind, b, lengths, c, res, time.perf_counter() - t0)
        rows.append(row)
        print(_fmt(row), flush=True)
    print(f"total {time.perf_counter() - t_all:.0f}s; load {os.getloadavg()}")
    ok = _verdicts(rows, profile.planning_fit)
    if pipe.combined:
        print(f"(pp={pipe.pp}: measured micro-batch times combined with the modelled pipeline schedule, "
              "not a real pipeline run)")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "scale": factor, "repeats": repeats,
                                              "pp": pipe.pp, "vpp": pipe.vpp, "method": pipe.describe()},
                                             indent=1))
    return 0 if ok else 1


def _batches(quick: bool, total: int | None) -> list[tuple[str, str, int, int, int]]:
    """(kind, file, n, cap, batch number): every source's batches, one per source with --quick,
    or ``total`` in all taken round-robin over the sources."""
    if total is not None and total < 1:
        raise SystemExit(f"--batches {total}: give at least 1")
    per = [[(kind, name, n, cap, b) for b in range(1 if quick else count)]
           for kind, name, n, cap, count in SOURCES]
    if total is None:
        return [x for src in per for x in src]
    out: list[tuple[str, str, int, int, int]] = []
    for b in range(max(len(src) for src in per)):
        out += [src[b] for src in per if b < len(src)]
    return sorted(out[:total], key=lambda x: [s[1] for s in SOURCES].index(x[1]))


def _row(kind: str, b: int, lengths: list[int], cap: int, res: Any, seconds: float) -> dict:
    return {
        "kind": kind, "batch": b, "n": len(lengths), "tokens": sum(lengths), "cap": cap, "seconds": seconds,
        "pp": res.pp, "vpp": res.vpp, "skipped": res.skipped,
        "best": res.best, "ratio": res.ratio, "predicted_ratio": res.predicted_ratio,
        "extended_ratio": res.extended_ratio, "noise": res.noise,
        "errors": {c: {k: s.error(c) for k, s in res.schedules.items()} for c in ("wall", "cpu")},
        "slower_than": {c: slower_than_any(res, c) for c in ("wall", "cpu")},
        "identical": list(res.identical), "ci_level": res.ci_level,
        "comparisons": {c: {n: [*x.ratio.as_tuple(), x.p_slower, x.identical]
                            for n, x in comparisons(res, c).items()} for c in ("wall", "cpu")},
        "steps": {k: [s.predicted_s, s.wall_s, s.cpu_s, s.micro_batches, s.extended_s]
                  for k, s in res.schedules.items()},
    }


def _fmt(row: dict) -> str:
    out = f"{row['kind']:>8} #{row['batch']} n={row['n']} tokens={row['tokens']} cap={row['cap']}:"
    for c in ("cpu", "wall"):
        m, lo, hi = row["ratio"][c]
        ext = row["extended_ratio"][c]
        err = np.mean([abs(e) for e in row["errors"][c].values()])
        out += (f"\n    [{c}] plan/{row['best'][c]} {m:.3f} [{lo:.3f},{hi:.3f}] predicted "
                f"{row['predicted_ratio'][c]:.3f}" + (f" (extended fit {ext:.3f})" if ext is not None else "")
                + f"; |step err| {err:.1%}; noise {row['noise'][c]:.1%}")
    if row["identical"]:
        out += f"\n    same schedule as plan_step: {', '.join(row['identical'])}"
    for name, why in row["skipped"].items():
        out += f"\n    left out {name}: {why}"
    return out + f" ({row['seconds']:.0f}s)"


def _slower_run_wide(rows: list[dict], clock: str, alpha: float = 0.05) -> list[tuple[int, str]]:
    """(row, trainer) pairs where plan_step is slower beyond noise: one-sided sign tests over
    every batch and trainer, Holm-corrected so that all of them together are wrong with
    probability at most ``alpha``."""
    keys = [(i, n) for i, r in enumerate(rows) for n in r["comparisons"][clock]]
    pvals = [rows[i]["comparisons"][clock][n][3] for i, n in keys]
    return [k for k, rejected in zip(keys, holm(pvals, alpha), strict=True) if rejected]


def _verdicts(rows: list[dict], planning_fit: str) -> bool:
    ok = True
    for clock in ("cpu", "wall"):
        ratio = [r["ratio"][clock] for r in rows]
        pred = [r["predicted_ratio"][clock] for r in rows]
        gains = [i for i, p in enumerate(pred) if p <= 0.95]
        off = [i for i in gains if abs(ratio[i][0] - pred[i]) > 0.05]
        off_beyond = [i for i in off if ratio[i][1] > pred[i] + 0.05 or ratio[i][2] < pred[i] - 0.05]
        err = float(np.mean([abs(e) for r in rows for e in r["errors"][clock].values()]))
        ratio_err = float(np.mean([abs(q[0] - p) for q, p in zip(ratio, pred, strict=True)]))
        levels = sorted({round(r["ci_level"], 4) for r in rows})
        print(f"[{clock}] plan_step / best trainer: mean {np.mean([q[0] for q in ratio]):.3f} measured, "
              f"{np.mean(pred):.3f} predicted (intervals cover {', '.join(f'{x:.1%}' for x in levels)}); "
              f"predicted gain >= 5% on {len(gains)}, measured gain off by > 5 points on {len(off)} "
              f"({len(off_beyond)} beyond its interval); mean |step error| {err:.1%}; "
              f"mean |ratio error| {ratio_err:.3f}")
        slower = _slower_run_wide(rows, clock)
        tests = sum(len(r["comparisons"][clock]) for r in rows)
        print(f"[{clock}] slower than some trainer beyond noise (sign tests, Holm over {tests} comparisons, "
              f"family-wise 5%): {len(slower)}" + "".join(
                  f"; {rows[i]['kind']} #{rows[i]['batch']} vs {n} "
                  f"{rows[i]['comparisons'][clock][n][0]:.3f} (p {rows[i]['comparisons'][clock][n][3]:.2g})"
                  for i, n in slower))
        same = [(i, n) for i, r in enumerate(rows) for n in r["identical"]]
        false = [(i, n) for i, n in same if n in rows[i]["slower_than"][clock]]
        print(f"[{clock}] per batch (each trainer at 1 - 0.05/T, exact intervals): slower on "
              f"{sum(bool(r['slower_than'][clock]) for r in rows)}/{len(rows)} batches; A/A control: "
              f"{len(same)} trainer schedules were plan_step's own, {len(false)} of them called slower")
        for name, passed in ((f"[{clock}] never slower beyond noise", not slower),
                             (f"[{clock}] gain within 5 points where predicted >= 5%", not off),
                             (f"[{clock}] mean absolute step error <= 5%", err <= 0.05)):
            print(f"{'PASS' if passed else 'FAIL'} {name}")
            ok &= passed
        _extended_note(rows, clock, planning_fit)
    return ok


def _extended_note(rows: list[dict], clock: str, planning_fit: str) -> None:
    """How the calibration's extended fit predicts, next to the fit the planners use."""
    col = 1 if clock == "wall" else 2
    pairs = [(s[4], s[col]) for r in rows for s in r["steps"].values() if s[4] is not None]
    if not pairs:
        print(f"[{clock}] (the calibration kept no extra term: no extended prediction)")
        return
    err = float(np.mean([abs(p - m) / m for p, m in pairs]))
    ratio_err = [abs(r["ratio"][clock][0] - r["extended_ratio"][clock]) for r in rows
                 if r["extended_ratio"][clock] is not None]
    print(f"[{clock}] with the extended fit instead: mean |step error| {err:.1%}, mean |ratio error| "
          f"{float(np.mean(ratio_err)):.3f} (the planners use the {planning_fit} fit)")


if __name__ == "__main__":
    sys.exit(main())
