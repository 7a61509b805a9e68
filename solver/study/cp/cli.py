"""``seqpart cp-study``'s command line: flags in, the study's tables out (the work is
:mod:`.study`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ..methods import GENERATED_SOURCE
from ..step_cli import (
    add_run_arguments,
    positive,
    print_study_end,
    profile_from_flags,
    run_fields,
)
from .methods import CP_METHODS
from .report import format_summary
from .study import (
    DEFAULT_CP_COMM,
    DEFAULT_GPUS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_N,
    DEFAULT_OVERHEAD_TOKENS,
    DEFAULT_TIME_LIMIT,
    EXIT_INTERRUPTED,
    QUICK,
    CPStudyConfig,
    cost_terms,
    run_cp_study,
)

COMMAND = "cp-study"


def add_cp_parser(sub: Any) -> None:
    """Register ``seqpart cp-study`` on the CLI's subparsers (the CLI's only hunk for it)."""
    p = sub.add_parser(COMMAND, help="dynamic context parallelism: plan_cp_step against "
                       "Megatron-LM's greedy and fixed CP, over datasets or your data",
                       description=(
        "For each batch (the bundled datasets and generated long-tail RL batches, or your "
        "--data FILE cut into steps of --global-batch) and each --n-gpus x "
        "--max-tokens-per-gpu, runs plan_cp_step (per --sync model, in the repeatable mode), "
        "Megatron-LM's dynamic-CP greedy, dp_balanced and seqpart's best fixed-CP plan; checks "
        "every schedule and scores it with the dynamic-CP model against the lower bound. "
        "Results go to OUT/results.jsonl as they finish (re-running resumes), then a table per "
        "sync model, OUT/cp_summary.csv, cp_over_bound.png and cp_degrees.png."))
    if isinstance(getattr(sub, "metavar", None), str) and COMMAND not in sub.metavar:
        sub.metavar = sub.metavar.rstrip("}") + f",{COMMAND}}}"  # the usage line lists it too
    p.add_argument("--data", metavar="FILE", default=None,
                   help="your lengths, any format `seqpart solve` reads: only they are studied")
    p.add_argument("--field", "--column", dest="fields", action="append", metavar="NAME",
                   help="the field(s) of --data holding the lengths (repeat or join with '+')")
    p.add_argument("--global-batch", type=positive(int), default=None, metavar="N",
                   help="with --data: sequences per training step, in file order (default: the "
                        "whole file is one step)")
    p.add_argument("--methods", default=",".join(CP_METHODS), help="comma list (default all)")
    p.add_argument("--datasets", default=None, help="bundled dataset names, 'all' (the default) "
                   "or 'none'")
    p.add_argument("--no-generated", dest="generated", action="store_false",
                   help=f"leave out the generated '{GENERATED_SOURCE}' batches")
    p.add_argument("--n", default=None, help=f"sequences per batch (default {DEFAULT_N})")
    p.add_argument("--n-gpus", dest="gpus", default=None, metavar="N",
                   help=f"GPUs (DP x CP ranks) (default {DEFAULT_GPUS})")
    p.add_argument("--max-tokens-per-gpu", dest="max_tokens", default=None, metavar="TOKENS",
                   help=f"tokens a GPU holds in a micro-batch, e.g. 8192 or 8K (default "
                        f"{DEFAULT_MAX_TOKENS}); longer sequences are clipped to n_gpus times it")
    p.add_argument("--sync", default="barrier,dag", help="sync models: barrier and/or dag")
    p.add_argument("--cost", choices=("tokens", "attention"), default=None,
                   help="each sequence's cost (default attention: 24576*l + l^2)")
    p.add_argument("--cost-profile", metavar="FILE", default=None,
                   help="a calibrated cost profile (`seqpart calibrate`): its cost and overhead "
                        "instead of --cost and --overhead-tokens (not with them)")
    p.add_argument("--overhead-tokens", type=int, default=None,
                   help="per-micro-batch overhead as the linear cost of this many tokens "
                        f"(default {DEFAULT_OVERHEAD_TOKENS})")
    p.add_argument("--cp-comm", default=None, metavar="X",
                   help="exposed cost per KV token a GPU receives from its group, as a multiple "
                        f"of the cost's per-token term (default {DEFAULT_CP_COMM}; 0: overlapped)")
    p.add_argument("--time-limit", type=positive(float), default=DEFAULT_TIME_LIMIT,
                   help=f"seconds for plan_cp_step, spent as counted work so that records "
                        f"repeat (default {DEFAULT_TIME_LIMIT:g}); fixed_cp gets the planner's "
                        "share of it")
    p.add_argument("--quick", action="store_true",
                   help=f"a small grid: --n {QUICK['n']} --n-gpus {QUICK['gpus']} "
                        f"--max-tokens-per-gpu {QUICK['max_tokens']} (flags given win)")
    add_run_arguments(p, timed="plan_cp_step and fixed_cp runs", out="seqpart-cp-study",
                      out_help="output directory")
    p.set_defaults(func=cmd_cp_study)


def _user_data(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """The config's fields for ``--data``; flags of the grid's batches are refused with it."""
    from ....heuristics.inputs import as_lengths
    from ..readers import load_lengths

    if args.data is None:
        if args.fields or args.global_batch is not None:
            flag = "--field" if args.fields else "--global-batch"
            raise UsageError(f"{flag} applies to your data: add --data FILE")
        return {}
    for flag, value in (("--datasets", args.datasets), ("--n", args.n)):
        if value is not None:
            raise UsageError(f"{flag} with --data: the study of your data uses your file's "
                             "steps (--global-batch); run without --data for the bundled batches")
    try:
        lengths = tuple(int(x) for x in as_lengths(load_lengths(args.data, args.fields, say)))
    except (TypeError, ValueError) as err:
        raise UsageError(f"{args.data}: {err}") from None
    name = "stdin" if args.data == "-" else Path(args.data).stem
    return {"data": lengths, "data_name": name, "global_batch": args.global_batch,
            "datasets": "none", "generated": False}


def _config(args: argparse.Namespace, say: Callable[[str], None]) -> CPStudyConfig:
    quick = QUICK if args.quick else {}
    profile = profile_from_flags(args.cost_profile, ("--cost", args.cost),
                                 ("--overhead-tokens", args.overhead_tokens))
    terms: dict[str, Any] = {"cost": args.cost or "attention"}
    if profile is not None:
        if getattr(profile.overhead, "has_size", False):
            raise UsageError(f"--cost-profile {args.cost_profile}: its micro-batch cost has a "
                             "size term, which the dynamic-CP model does not express")
        overhead = profile.overhead
        terms = {"cost": profile.cost, "overhead": int(getattr(overhead, "overhead", overhead))}
    fields: dict[str, Any] = dict(
        methods=args.methods, datasets=args.datasets or "all", generated=args.generated,
        n=args.n or quick.get("n", DEFAULT_N), gpus=args.gpus or quick.get("gpus", DEFAULT_GPUS),
        max_tokens=args.max_tokens or quick.get("max_tokens", DEFAULT_MAX_TOKENS),
        syncs=args.sync, overhead_tokens=DEFAULT_OVERHEAD_TOKENS if args.overhead_tokens is None
        else args.overhead_tokens, cp_comm=args.cp_comm or DEFAULT_CP_COMM,
        time_limit=args.time_limit, **run_fields(args),
    )
    return CPStudyConfig(**{**fields, **terms, **_user_data(args, say)})


def _cost_line(config: CPStudyConfig) -> str:
    from ...problem import Cost

    cost, overhead, cp_comm = cost_terms(config)
    spec = Cost.parse(cost)
    per_seq = f" + {spec.per_sequence}" if spec.per_sequence else ""
    return (f"cost {spec.linear}*l + {spec.quadratic}*l^2{per_seq} per sequence of l tokens, "
            f"overhead {overhead} per micro-batch, cp_comm {cp_comm} per KV token received")


def cmd_cp_study(args: argparse.Namespace) -> int:
    def say(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(message + "\n")

    config = _config(args, say)
    outcome = run_cp_study(config, say)
    if outcome.interrupted:
        sys.stderr.write(f"seqpart: interrupted; finished results are in {outcome.results_path}: "
                         "run the same command again to resume\n")
        return EXIT_INTERRUPTED
    print(_cost_line(config) + f"; plan_cp_step at {config.time_limit:g} s of counted work "
          "(repeatable)\n")
    print(format_summary(outcome.rows))
    if outcome.clipped:
        print(f"\n{outcome.clipped} of {outcome.settings} settings clipped sequences longer than "
              "n_gpus x max_tokens_per_gpu to it (records count them: 'clipped')")
    print_study_end(outcome, "cp_summary.csv", say)
    return 0
