"""``seqpart step``'s command line: the step study's grid, or the step on a user's data.

Arguments are parsed and results printed here; the grid is :mod:`.step_study`, the user's
data :mod:`.step_data`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from .methods import GENERATED_SOURCE
from .runner import add_executor_arguments
from .step_report import format_summary
from .step_study import (
    DEFAULT_CAPS,
    DEFAULT_COSTS,
    DEFAULT_DP,
    DEFAULT_N,
    DEFAULT_OVERHEAD_TOKENS,
    DEFAULT_PP,
    DEFAULT_TIME_LIMIT,
    EXIT_INTERRUPTED,
    STEP_METHODS,
    StepStudyConfig,
    run_step_study,
)

# --------------------------------------------------------------------------- CLI


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a finite number > 0 of ``kind`` (the study commands' sizes and limits)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or (kind is float and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value

    return parse


def add_step_parser(sub: Any) -> None:
    """Register ``seqpart step`` on the CLI's subparsers (the CLI's only hunk for it)."""
    p = sub.add_parser("step", help="step times: trainers' schedulers vs plan_step, on your "
                       "data (--data) or a study grid", description=(
        "With --data FILE: your lengths (one step, or steps of --global-batch sequences) "
        "scheduled by the trainers' step schedulers (slime, prime-rl, verl, Megatron, "
        "re-implemented) and by plan_step for your --dp, --pp and --vpp; prints each one's step "
        "time, its ratio to plan_step's and to the lower bound, and plots it. Without --data: "
        "the study grid over bundled datasets and generated RL batches across dp, pp, caps and "
        "costs; results go to OUT/results.jsonl as they finish (re-running resumes), then "
        "OUT/step_summary.csv and OUT/step_vs_pp.png."))
    p.add_argument("--data", metavar="FILE", default=None,
                   help="your lengths, any format `seqpart solve` reads: only they are used")
    p.add_argument("--field", "--column", dest="fields", action="append", metavar="NAME",
                   help="the field(s) of --data holding the lengths (repeat or join with '+' "
                        "to sum, e.g. prompt and response lengths)")
    p.add_argument("--global-batch", type=positive(int), default=None, metavar="N",
                   help="with --data: sequences per training step, in file order (default: the "
                        "whole file is one step)")
    p.add_argument("--methods", default=None, help="comma list")
    p.add_argument("--datasets", default=None, help="bundled dataset names, 'all' (the default "
                   "without --data) or 'none'")
    p.add_argument("--no-generated", dest="generated", action="store_false",
                   help=f"leave out the generated '{GENERATED_SOURCE}' batches")
    p.add_argument("--n", default=DEFAULT_N, help=f"batch sizes (default {DEFAULT_N})")
    p.add_argument("--dp", default=None, help=f"data-parallel size(s) (default {DEFAULT_DP}; "
                   "one int with --data)")
    p.add_argument("--pp", default=None, help=f"pipeline depth(s) (default {DEFAULT_PP}; one "
                   "int with --data, default 1)")
    p.add_argument("--vpp", type=positive(int), default=1,
                   help="virtual stages per rank (default 1); with --data and vpp > 1 the count "
                        "per rank is a multiple of pp (Megatron's interleaved schedule) unless "
                        "--multiple-of says otherwise")
    p.add_argument("--multiple-of", type=positive(int), default=None,
                   help="with --data: the count per rank is a multiple of this")
    p.add_argument("--caps", "--cap", dest="caps", default=None,
                   help=f"token cap(s), or multiples of the longest sequence like 2x (default "
                        f"{DEFAULT_CAPS}: the longest)")
    p.add_argument("--costs", "--cost", dest="costs", default=None,
                   help=f"tokens and/or attention (24576*l + l^2) (default {DEFAULT_COSTS}; one "
                        "with --data)")
    if _cost_profile_loader() is not None:
        p.add_argument("--cost-profile", metavar="FILE", default=None,
                       help="a calibrated cost profile (`seqpart calibrate`): its cost and "
                            "overhead instead of --cost and --overhead-tokens (not with them); "
                            "with --data step times print in seconds")
    p.add_argument("--overhead-tokens", type=int, default=None,
                   help="per-micro-batch overhead as the linear cost of this many tokens "
                        f"(default {DEFAULT_OVERHEAD_TOKENS})")
    p.add_argument("--time-limit", type=positive(float), default=None,
                   help=f"seconds for plan_step (and plan_global) per step (default "
                        f"{DEFAULT_TIME_LIMIT} in the grid; 1 with --data, plan_step's own default)")
    p.add_argument("--deterministic", action="store_true",
                   help="repeatable plans: plan_step (and plan_global, per_rank) on counted work, "
                        "not the clock, so every run gives the same plans (the wall time is "
                        "whatever that work takes, often less than --time-limit)")
    add_run_arguments(p, timed="time-budgeted runs (plan_step, plan_global, per_rank)",
                      out=None, out_help="output directory (default seqpart-step-study; "
                      "seqpart-step-data with --data)")
    p.set_defaults(func=cmd_step)


def add_run_arguments(p: Any, *, timed: str, out: str | None, out_help: str) -> None:
    """The flags every study command shares after its grid: batches per setting, seed,
    processes, the timed runs at a time (``timed`` names them), the output folder, a limit on
    new results, plots, progress and where the tasks run."""
    p.add_argument("--reps", type=positive(int), default=1, help="batches per setting")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=positive(int), default=None, help="processes (default: all cores)")
    p.add_argument("--timed-jobs", type=positive(int), default=None,
                   help=f"{timed} at a time, after the others (default: as --jobs)")
    p.add_argument("--out", default=out, help=out_help)
    p.add_argument("--limit", type=positive(int), default=None,
                   help="run at most this many new results")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    add_executor_arguments(p)


def run_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~.runner.RunConfig` fields from the flags :func:`add_run_arguments` adds (and
    ``seqpart study``'s own copies of them), for any study's config."""
    return {"reps": args.reps, "seed": args.seed, "jobs": args.jobs, "timed_jobs": args.timed_jobs,
            "out": args.out, "limit": args.limit, "plots": not args.no_plots,
            "progress": not args.quiet, "executor": args.executor, "address": args.address}


def _cost_profile_loader() -> Callable[[str], Any] | None:
    """The front door's ``load_cost_profile`` where this install has it (the calibration):
    ``--cost-profile`` is offered only then."""
    try:
        from .. import load_cost_profile
    except ImportError:
        return None
    return load_cost_profile


def profile_from_flags(path: str | None, *replaced: tuple[str, Any]) -> Any:
    """The cost profile ``--cost-profile`` names, or None without it. ``replaced``: (flag,
    value) pairs the profile stands in for; one of them given too is a usage error, so no run
    leaves its user guessing which cost it used."""
    if path is None:
        return None
    for flag, value in replaced:
        if value is not None:
            raise UsageError(f"--cost-profile and {flag} both given: the profile sets the cost "
                             f"(and the overhead); drop {flag} or --cost-profile")
    loader = _cost_profile_loader()
    if loader is None:  # the flag is offered only with the loader
        raise UsageError("--cost-profile needs seqpart's calibration (seqpart.solver.load_cost_profile)")
    try:
        return loader(path)
    except (OSError, ValueError) as err:
        raise UsageError(f"--cost-profile {path}: {err}") from None


def cmd_step(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(message + "\n")

    if args.data is not None:
        if args.executor != "local" or args.address is not None:
            raise UsageError("--executor and --address apply to the step study's grid: the step "
                             "on your data (--data) runs in this process")
        return cmd_step_data(args, say)
    only_data = [f for f, v in (("--field", args.fields), ("--global-batch", args.global_batch),
                                ("--multiple-of", args.multiple_of)) if v is not None]
    if only_data:
        raise UsageError(f"{only_data[0]} applies to the step on your data: add --data FILE")
    profile = profile_from_flags(getattr(args, "cost_profile", None), ("--cost", args.costs),
                                 ("--overhead-tokens", args.overhead_tokens))
    config = StepStudyConfig(
        methods=args.methods or ",".join(STEP_METHODS), datasets=args.datasets or "all",
        generated=args.generated, n=args.n, dp=args.dp or DEFAULT_DP, pp=args.pp or DEFAULT_PP,
        vpp=args.vpp, caps=args.caps or DEFAULT_CAPS, costs=args.costs or DEFAULT_COSTS,
        overhead_tokens=DEFAULT_OVERHEAD_TOKENS if args.overhead_tokens is None
        else args.overhead_tokens, cost_profile=profile,
        time_limit=args.time_limit or DEFAULT_TIME_LIMIT, deterministic=args.deterministic,
        # --out defaults to None here: with --data the default folder is another one.
        **{**run_fields(args), "out": args.out or StepStudyConfig.out},
    )

    outcome = run_step_study(config, say)
    if outcome.interrupted:
        sys.stderr.write(f"seqpart: interrupted; finished results are in {outcome.results_path}: "
                         "run the same command again to resume\n")
        return EXIT_INTERRUPTED
    print(format_summary(outcome.rows, outcome.pps))
    print_study_end(outcome, "step_summary.csv", say)
    return 0


def print_study_end(outcome: Any, summary: str, say: Callable[[str], None]) -> None:
    """What every study command prints after its table: the timing note, what is left to run,
    the plots and where the results are."""
    if outcome.timing_note:
        print(outcome.timing_note)
    if outcome.missing:
        print(f"({outcome.missing} of {outcome.wanted} results still to run: run the same "
              "command to resume)")
    if outcome.plots_skipped:
        say(outcome.plots_skipped)
    if outcome.plots:
        print("plots: " + ", ".join(str(p) for p in outcome.plots))
    print(f"results: {outcome.results_path}, summary: {outcome.out / summary} "
          f"({outcome.seconds:.1f}s)")


def _one_int(text: str | None, flag: str, default: int | None) -> int:
    if text is None:
        if default is None:
            raise UsageError(f"{flag} is needed with --data: your data-parallel size, e.g. {flag} 8")
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"{flag} {text!r}: with --data give one int >= 1 (your setting)")
    return int(text)


def _data_config(args: argparse.Namespace, say: Callable[[str], None]) -> Any:
    """The user's step question from the flags; grid-only flags given with --data are refused."""
    from ...heuristics.inputs import as_lengths
    from ..problem import Cost
    from .readers import load_lengths
    from .step_data import DATA_METHODS, DEFAULT_OUT, StepDataConfig

    if args.datasets is not None:
        raise UsageError("--datasets with --data: the step on your data uses only your file "
                         "(run without --data for the study over bundled datasets)")
    try:
        lengths = tuple(int(x) for x in as_lengths(load_lengths(args.data, args.fields, say)))
    except (TypeError, ValueError) as err:
        raise UsageError(f"{args.data}: {err}") from None
    cap = None
    if args.caps is not None:
        if not args.caps.strip().isdigit() or int(args.caps) < 1:
            raise UsageError(f"--cap {args.caps!r}: with --data give one int, your trainer's max "
                             "tokens per micro-batch")
        cap = int(args.caps)
    methods = tuple(DATA_METHODS)
    if args.methods is not None:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        bad = [m for m in methods if m not in DATA_METHODS]
        if bad or not methods:
            raise UsageError(f"--methods: {bad[0] if bad else 'empty'}; with --data choose from "
                             f"{', '.join(DATA_METHODS)}")
    cost: Any = args.costs or DEFAULT_COSTS
    if cost not in ("tokens", "attention"):
        raise UsageError(f"--cost {cost!r}: with --data use one of tokens, attention")
    tokens = DEFAULT_OVERHEAD_TOKENS if args.overhead_tokens is None else args.overhead_tokens
    overhead = Cost.parse(cost).linear * tokens
    unit_seconds = None
    profile = profile_from_flags(getattr(args, "cost_profile", None), ("--cost", args.costs),
                                 ("--overhead-tokens", args.overhead_tokens))
    if profile is not None:
        cost, overhead, unit_seconds = profile.cost, profile.overhead, profile.unit_seconds
    return StepDataConfig(
        lengths=lengths, source=args.data, dp=_one_int(args.dp, "--dp", None),
        pp=_one_int(args.pp, "--pp", 1), vpp=args.vpp, multiple_of=args.multiple_of, cap=cap,
        global_batch=args.global_batch, cost=cost, overhead=overhead, unit_seconds=unit_seconds,
        time_limit=args.time_limit or 1.0, deterministic=args.deterministic, methods=methods,
        out=args.out or DEFAULT_OUT,
        plots=not args.no_plots,
    )


def cmd_step_data(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """``seqpart step --data FILE``: print each scheduler's step time against plan_step's."""
    from ..problem import Cost
    from .step_data import format_data_summary, run_step_data

    config = _data_config(args, say)
    outcome = run_step_data(config, say)
    cost = Cost.parse(config.cost)
    steps = (f"{outcome.steps} steps of {config.global_batch}" if config.global_batch
             else "one step")
    print(f"{config.source}: {len(config.lengths)} sequences as {steps}; dp={config.dp}, "
          f"pp={config.pp}, vpp={config.vpp}, count per rank a multiple of {outcome.multiple_of}, "
          f"cap {outcome.cap}; cost {cost.linear}*l + {cost.quadratic}*l^2 per sequence, "
          f"overhead {config.overhead} per micro-batch")
    print(format_data_summary(outcome.rows, config.unit_seconds))
    print("step time: the step model's time (the slowest rank, with the pipeline bubble) summed "
          "over the steps" + ("" if config.unit_seconds else
                              ", in cost units (a --cost-profile gives seconds)")
          + "; vs bound: over the step lower bound; an invalid schedule would not run as is")
    for note in outcome.notes:
        print(f"note: {note}")
    if outcome.plot_skipped:
        say(outcome.plot_skipped)
    if outcome.plot:
        print(f"plot: {outcome.plot}")
    print(f"({outcome.seconds:.1f}s)")
    return 0
