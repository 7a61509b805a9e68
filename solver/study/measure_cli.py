"""``seqpart calibrate`` and ``seqpart replay``: the command-line side of
:mod:`seqpart.solver.measure` (arguments, reading files, printing; the work is there)."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from ..errors import UsageError
from ..problem import Cost

DEFAULT_PROFILE = "cost_profile.json"


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value

    return parse


def add_measure_parsers(sub: Any) -> None:
    """Register ``calibrate`` and ``replay`` on the CLI's subparsers."""
    c = sub.add_parser("calibrate", help="time forward+backward on this device and fit the step cost",
                       description=(
        "Time forward+backward passes of designed micro-batches (the reference decoder, or a "
        "transformers model from --hf-config with random weights) and fit "
        "overhead + a*sum(l) + b*sum(l^2) seconds per micro-batch by non-negative least squares. "
        "Writes a cost profile (JSON, docs/cost_profile.schema.json) for --cost-profile."))
    c.add_argument("--hf-config", metavar="FILE", help="a transformers config.json (needs seqpart[hf])")
    c.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default cpu)")
    c.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    c.add_argument("--max-tokens", type=_positive(int), default=4096,
                   help="largest micro-batch to time, in tokens (default 4096)")
    c.add_argument("--max-count", type=_positive(int), default=16, help="most sequences per micro-batch")
    c.add_argument("--min-length", type=_positive(int), default=16,
                   help="shortest sequence in the training micro-batches (default 16); lower it, and "
                        "raise --max-count, when your micro-batches hold many very short sequences")
    c.add_argument("--random-train", type=int, default=0, metavar="N",
                   help="also fit on N random micro-batches drawn like the held-out ones (many "
                        "sequences of unequal lengths; default 0)")
    c.add_argument("--held-out", type=int, default=16, help="random micro-batches to score the fit on")
    c.add_argument("--repeats", type=_positive(int), default=3, help="interleaved timed rounds (median)")
    c.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    c.add_argument("--min-seconds", type=float, default=0.3,
                   help="extra rounds for short micro-batches until each was timed this long "
                        "(up to 15 samples; default 0.3 s)")
    c.add_argument("--threads", type=_positive(int), default=1, help="torch CPU threads (default 1)")
    c.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time, or this process's CPU time (CPU only: leaves out time other "
                        "processes take on a shared machine)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default=DEFAULT_PROFILE, help=f"profile file (default {DEFAULT_PROFILE})")
    c.add_argument("--plot", metavar="FILE", help="also draw measured vs fitted (needs seqpart[plot])")
    c.add_argument("--memory-budget", type=_positive(float), metavar="GIB",
                   help="also print the largest token cap whose peak memory fits this many GiB "
                        "(CUDA: peak memory is measured there only)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_calibrate)

    r = sub.add_parser("replay", help="run one step of each schedule for real and time it", description=(
        "Plan one batch with plan_step (the profile's cost) and each trainer scheduler, then run "
        "each schedule's step on the profile's model: --dp processes in a gloo group, forward+"
        "backward per micro-batch, then a gradient all-reduce; paired, interleaved repeats. "
        "Lengths and the cap are scaled by (profile's a/b) / (target's a/b), printed. With --pp > 1 "
        "one machine cannot run a real pipeline: each rank's micro-batches run and are timed one by "
        "one, and the step is the exact makespan of those measured times under the modelled "
        "pipeline schedule (Megatron-LM's 1F1B, interleaved with --vpp > 1), plus the all-reduce."))
    r.add_argument("file", nargs="?", help="lengths of one step, any format `solve` reads (else --dataset)")
    r.add_argument("--data", metavar="FILE", default=None, help="the same as FILE")
    r.add_argument("--field", "--column", dest="fields", action="append", metavar="NAME",
                   help="the field or CSV column holding the lengths (as in `solve`)")
    r.add_argument("--dataset", help="a bundled length file to sample --n lengths from")
    r.add_argument("--n", type=_positive(int), default=128, help="sample size with --dataset")
    r.add_argument("--cost-profile", required=True, metavar="FILE", help="from `seqpart calibrate`")
    r.add_argument("--dp", type=_positive(int), default=2, help="data-parallel ranks (processes)")
    r.add_argument("--pp", type=_positive(int), default=1,
                   help="pipeline stages per rank: > 1 combines measured micro-batch times with the "
                        "modelled pipeline (not a real pipeline run)")
    r.add_argument("--vpp", type=_positive(int), default=1, help="model chunks per stage (needs --pp > 1)")
    r.add_argument("--order-trainers", action="store_true",
                   help="at --pp > 1, run the trainers' micro-batches in the order seqpart finds for "
                        "them (default: their own order)")
    r.add_argument("--cap", type=_positive(int), default=None,
                   help="token cap at the target scale (default: the longest sequence)")
    r.add_argument("--target-cost", default="attention",
                   help="the target model's cost: 'attention' (24576*l + l^2) or 'A,B'")
    r.add_argument("--target-hf-config", metavar="FILE", help="the target's config.json (its FLOPs a/b)")
    r.add_argument("--scale", type=_positive(float), default=None, help="length scale (default: auto)")
    r.add_argument("--repeats", type=_positive(int), default=6,
                   help="paired rounds (6: the fewest whose interval reaches 95%%; 8 to test 6 trainers)")
    r.add_argument("--time-limit", type=_positive(float), default=1.0, help="plan_step's budget")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=cmd_replay)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..measure.calibrate import calibrate
    from ..measure.design import make_design
    from ..measure.models import load_hf_config

    t0 = time.perf_counter()
    try:
        hf = load_hf_config(args.hf_config) if args.hf_config else None
        design = make_design(args.max_tokens, args.max_count, args.held_out, args.seed,
                             min_length=args.min_length, random_train=args.random_train)
        p = calibrate(device=args.device, dtype=args.dtype, hf_config=hf, design=design,
                      repeats=args.repeats, warmup=args.warmup, threads=args.threads,
                      seed=args.seed, progress=not args.quiet, clock=args.clock,
                      min_seconds=args.min_seconds)
    except (ValueError, TypeError, ImportError) as err:
        raise UsageError(str(err)) from None
    p.save(args.out)
    print(format_profile(p, args.memory_budget))
    if args.plot:
        from ..measure.plot import plot_profile

        print(f"plot: {plot_profile(p, args.plot)}")
    print(f"profile: {args.out} ({time.perf_counter() - t0:.1f}s; load {os.getloadavg()[0]:.2f})")
    return 0


def format_profile(p: Any, memory_budget_gib: float | None = None) -> str:
    held = p.fit_error.get("held_out") or {}
    lines = [
        f"{p.model.get('kind')} model on {p.device} ({p.dtype}, torch {p.torch_version}): "
        f"t = {p.overhead_s * 1e3:.3f} ms + {p.linear_s * 1e6:.3f} us*l + {p.quadratic_s * 1e9:.3f} ns*l^2 "
        "per micro-batch",
        f"a/b = {p.ratio:.0f} tokens; overhead = the linear cost of {p.overhead_s / p.linear_s:.0f} tokens"
        if p.linear_s else f"a = 0; overhead {p.overhead_s:.4g} s",
        f"held-out error: median {held.get('median_rel', float('nan')):.1%}, "
        f"max {held.get('max_rel', float('nan')):.1%}, R^2 {held.get('r2', float('nan')):.4f} "
        f"over {held.get('count', 0)} micro-batches; "
        f"repeat noise {p.fit_error.get('noise', float('nan')):.1%}",
        f"planner ({p.planning_fit} fit): cost={p.cost} per sequence, overhead={p.overhead} "
        f"per micro-batch (1 unit = {p.unit_seconds:.3g} s)",
    ]
    if p.extended:
        e = p.extended["held_out"] or {}
        extra = ", ".join(k for k in p.extended["coefficients"]
                          if k not in ("overhead", "linear", "quadratic"))
        used = "used by the planners" if p.planning_fit == "extended" else "not used by the planners"
        lines.append(f"with extra terms ({extra}): held-out median {e.get('median_rel', 0):.1%}, "
                     f"max {e.get('max_rel', 0):.1%} ({used})")
    mem = p.memory
    lines.append("memory: " + (f"peak = {mem['base_bytes'] / 2**20:.0f} MiB + "
                               f"{mem['per_token_bytes'] / 2**10:.1f} KiB/token"
                               if mem.get("measured") else mem.get("reason", "not measured")))
    if memory_budget_gib is not None:
        from ..measure.calibrate import largest_cap

        cap = largest_cap(mem, memory_budget_gib * 2**30)
        lines.append(f"largest cap for {memory_budget_gib:g} GiB: " + (
            "unknown: peak memory was not measured (CUDA only)" if not mem.get("measured")
            else "no limit under the fit (peak memory does not grow with tokens)" if cap is None
            else f"{cap} tokens (one sequence of that length, the worst micro-batch under the fit)"))
    return "\n".join(lines)


def _target_cost(args: argparse.Namespace) -> Cost:
    if args.target_hf_config:
        from ..measure.models import load_hf_config

        return Cost.from_hf_config(load_hf_config(args.target_hf_config))
    if args.target_cost == "attention":
        return Cost.attention()
    try:
        a, b = (int(x) for x in args.target_cost.split(","))
        return Cost(a, b)
    except ValueError:
        raise UsageError(f"--target-cost {args.target_cost!r}: use 'attention' or 'A,B' (ints)") from None


def _lengths(args: argparse.Namespace) -> list[int]:
    if args.dataset:
        from .datasets import load_dataset, sample_batch

        try:
            ds = load_dataset(args.dataset)
        except ValueError as err:
            raise UsageError(str(err)) from None
        return sample_batch(ds.lengths, args.n, np.random.default_rng(args.seed))
    if args.file is not None and args.data is not None:
        raise UsageError("give the file once: as FILE or as --data FILE")
    if not (args.file or args.data):
        raise UsageError("give a lengths FILE (or --data FILE) or --dataset NAME")
    from .readers import load_lengths

    return [int(x) for x in load_lengths(args.data or args.file, args.fields)]


def cmd_replay(args: argparse.Namespace) -> int:
    from ..measure.compare import replay_batch, scale_factor, scale_lengths
    from ..measure.profile import load_cost_profile

    t0 = time.perf_counter()
    try:
        profile = load_cost_profile(args.cost_profile)
    except ValueError as err:
        raise UsageError(str(err)) from None
    spec = runner_spec(profile)
    lengths = _lengths(args)
    factor = args.scale or scale_factor(profile, _target_cost(args))
    scaled = scale_lengths(lengths, factor)
    cap = max(1, round((args.cap or max(lengths)) * factor))
    if max(scaled) > cap:
        raise UsageError(f"a sequence of {max(lengths)} tokens is over --cap {args.cap}: raise the cap")
    if args.vpp > 1 and args.pp == 1:
        raise UsageError(f"--vpp {args.vpp} interleaves pipeline stages: give --pp > 1 as well")
    try:
        res = replay_batch(scaled, args.dp, cap, profile, spec, repeats=args.repeats, seed=args.seed,
                           time_limit=args.time_limit, pp=args.pp, vpp=args.vpp,
                           order_trainers=args.order_trainers)
    except (ValueError, TypeError) as err:  # planning or pipeline arguments; a failed run: RuntimeError
        raise UsageError(str(err)) from None
    print(format_replay(res, factor, scaled, cap, args.dp, time.perf_counter() - t0, args.json))
    return 0


def runner_spec(profile: Any) -> Any:
    """The model a profile was measured on, to replay on the same one."""
    from ..measure.replay import RunnerSpec

    kind = profile.model.get("kind")
    if kind == "transformers":
        return RunnerSpec("hf", dict(profile.model["config"]), profile.dtype)
    if kind == "reference":
        keys = {"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads",
                "intermediate_size": "ffn", "vocab_size": "vocab"}
        return RunnerSpec("reference", {v: profile.model[k] for k, v in keys.items()}, profile.dtype)
    raise UsageError(f"the profile was measured on a {kind!r} model, which replay cannot rebuild: "
                     "calibrate the reference model or an --hf-config one")


def format_replay(res: Any, factor: float, scaled: list[int], cap: int, dp: int, seconds: float,
                  as_json: bool) -> str:
    from ..measure.compare import PLAN, min_repeats, slower_than_any

    if as_json:
        return json.dumps({
            "scale": factor, "cap": cap, "dp": dp, "pp": res.pp, "vpp": res.vpp, "method": res.method,
            "skipped": res.skipped, "lengths": scaled, "best": res.best, "ratio": res.ratio,
            "predicted_ratio": res.predicted_ratio, "extended_ratio": res.extended_ratio,
            "noise": res.noise, "allreduce_s": res.allreduce_s, "ci_level": res.ci_level,
            "identical": list(res.identical),
            "slower_than": {c: slower_than_any(res, c) for c in ("wall", "cpu")},
            "schedules": {n: vars(s) for n, s in res.schedules.items()}})
    lines = [f"scale {factor:.4f}: {len(scaled)} sequences, {sum(scaled)} tokens (longest {max(scaled)}), "
             f"cap {cap}, dp {dp} gloo processes, one torch thread each",
             f"step: {res.method}"]
    lines += [f"left out {n}: {why}" for n, why in res.skipped.items()]
    lines.append(f"{'schedule':<11} {'mbs':>4} {'predicted':>10} {'wall':>9} {'cpu':>9} {'error':>7}")
    for n, s in res.schedules.items():
        lines.append(f"{n:<11} {s.micro_batches:>4} {s.predicted_s * 1e3:>8.1f}ms {s.wall_s * 1e3:>7.1f}ms "
                     f"{s.cpu_s * 1e3:>7.1f}ms {s.error('cpu'):>+7.1%}")
    kind = ("measured" if res.pp == 1
            else f"measured micro-batches + modelled pp={res.pp} vpp={res.vpp} pipeline")
    for c in ("wall", "cpu"):
        m, lo, hi = res.ratio[c]
        ext = res.extended_ratio[c]
        lines.append(f"{PLAN} / best trainer by {c} clock ({res.best[c]}): "
                     f"{kind} {m:.3f} [{lo:.3f}, {hi:.3f}] "
                     f"(median, exact {res.ci_level:.1%} interval), predicted {res.predicted_ratio[c]:.3f}"
                     + (f", extended fit {ext:.3f}" if ext is not None else "")
                     + f"; noise (p90-p10)/median {res.noise[c]:.1%}")
    if res.identical:
        lines.append(f"same schedule as {PLAN}: {', '.join(res.identical)} (any difference is noise)")
    trainers = len(res.schedules) - 1
    for c in ("wall", "cpu"):
        slower = slower_than_any(res, c)
        lines.append(f"{PLAN} slower beyond noise by {c} clock (each of {trainers} trainers at "
                     f"1 - 0.05/{trainers}): "
                     + (", ".join(f"{n} {m:.3f} [{lo:.3f}, {hi:.3f}]" for n, (m, lo, hi) in slower.items())
                        or "none")
                     + ("" if len(res.trials) // len(res.schedules) >= min_repeats(trainers)
                        else f" (too few repeats to tell: give --repeats {min_repeats(trainers)})"))
    lines.append(f"({seconds:.1f}s; load {os.getloadavg()[0]:.2f}; "
                 "error = predicted vs measured cpu-clock step)")
    return "\n".join(lines)
