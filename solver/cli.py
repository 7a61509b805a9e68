"""The ``seqpart`` command line: ``solve`` one batch, ``study`` methods, ``step`` times,
``calibrate`` and ``replay`` (measured costs, in ``study.measure_cli``), ``repro``.

This module parses arguments and prints; the work is elsewhere: reading lengths in
``study.readers`` (JSON, JSONL, CSV, parquet, saved datasets), the study in ``study.methods``
(on the engine in ``study.runner``), its plots in ``study.plots``, ``seqpart step`` in
``study.step_cli`` (the grid in ``study.step_study``, a user's data in ``study.step_data``),
the counterexamples in ``study.repro``. Flags are never abbreviated (``--data`` is not
``--datasets``), and a flag means the same in every subcommand that has it: ``--data FILE``,
``--field NAME`` (alias ``--column``), ``--cap``, ``--cost``, ``--time-limit``. Errors the user
can fix print one line,
``seqpart: error: ...``, and exit non-zero: 2 for bad usage or input, 3 when no plan exists (or
none was found in the time limit). A traceback means a bug in seqpart.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import json
import math
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import UsageError
from .study.measure_cli import add_measure_parsers
from .study.methods import (
    DEFAULT_CAPS,
    DEFAULT_K,
    DEFAULT_METHODS,
    DEFAULT_N,
    GENERATED_SOURCE,
    WHOLE_FILE_MAX,
    StudyConfig,
    run_study,
)
from .study.methods_report import format_summary
from .study.readers import load_lengths
from .study.runner import add_executor_arguments
from .study.step_cli import add_step_parser, profile_from_flags, run_fields

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130

__all__ = ["UsageError", "build_parser", "format_plan", "load_lengths", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) so scripts can grep them, and no
    abbreviated flags: a prefix like ``--data`` must never be taken for ``--datasets``
    (subcommands' parsers are this class too, so the rule holds everywhere)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"seqpart: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")


def _version() -> str:
    try:
        return importlib.metadata.version("seqpart")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"seqpart: error: {' '.join(message.split())}\n")
    return code


# --------------------------------------------------------------------------- solve


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _k_arg(text: str) -> int | str | None:
    """An int, 'min' (None: the smallest feasible count) or 'min+N' (kept as text)."""
    if text in ("min", "auto", "none"):
        return None
    if text.startswith("min+"):
        if not text[4:].isdigit():
            raise argparse.ArgumentTypeError(f"{text!r}: use min+N with N an integer >= 0")
        return text
    return _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _indices(members: Sequence[int], width: int = 48) -> str:
    # Each index takes at least 2 characters: the first width // 2 + 1 decide the text (a
    # join over every member cost O(n) string conversions at n = 10^6).
    text = " ".join(str(i) for i in members[: width // 2 + 1])
    return text if len(text) <= width else text[: width - 3].rsplit(" ", 1)[0] + " ..."


def format_plan(plan: Any, n: int, k_note: str | None = None) -> str:
    """The human table ``seqpart solve`` prints; ``k_note`` says how k was chosen when the
    plan's own ``k_status`` does not (``--k min+N``: the plan saw a given k)."""
    k_note = k_note or {"given": "given", "optimal": "smallest feasible, proven",
                        "upper_bound": f"smallest found; >= {plan.k_lower_bound} proven"}[plan.k_status]
    cap = f"cap {plan.cap}" if plan.cap is not None else "no cap"
    head = (f"{n} sequences, {sum(plan.tokens)} tokens -> k={plan.k} micro-batches ({k_note}), "
            f"{cap}, cost {plan.cost}")
    rows = [("micro-batch", "seqs", "tokens", "load", "sequence indices")]
    oversize = set(plan.oversize)
    for b, members in enumerate(plan.bins):
        alone = " (over cap, alone)" if len(members) == 1 and members[0] in oversize else ""
        rows.append((str(b), str(len(members)), str(plan.tokens[b]), str(plan.loads[b]),
                     _indices(members) + alone))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = [head, ""]
    for r in rows:
        lines.append("  ".join(r[c].rjust(widths[c]) for c in range(4)) + "  " + r[4])
    lines.append("")
    lines.append(
        f"status {plan.status}  max load {plan.max_load}  lower bound {plan.lower_bound}  "
        f"gap {plan.gap:.2%}  method {plan.method}  time {plan.seconds * 1000:.1f} ms"
    )
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)


def _as_flags(message: str) -> str:
    """The solver's messages name Python arguments; on the command line, name the flags."""
    for python, flag in (("oversize='alone'", "--oversize alone"), ("k=None", "--k min"),
                         ("equal_size=False", "no --equal-size"),
                         ("equal_size=True", "--equal-size"), ("time_limit", "--time-limit")):
        message = message.replace(python, flag)
    return message


def cmd_solve(args: argparse.Namespace) -> int:
    from ._partition import partition
    from .errors import InfeasibleError

    if args.file is not None and args.data is not None:
        raise UsageError("give the file once: as FILE or as --data FILE")
    profile = profile_from_flags(args.cost_profile, ("--cost", args.cost))
    lengths = load_lengths(args.data or args.file, args.fields, say=_stderr)
    cost: Any = profile.cost if profile is not None else args.cost or "tokens"
    solve = functools.partial(partition, lengths, cap=args.cap, time_limit=args.time_limit,
                              cost=cost, equal_size=args.equal_size,
                              oversize=args.oversize)
    k_note = None
    try:
        if isinstance(args.k, str):  # min+N: the smallest feasible count first, then N more
            smallest = solve(None)
            extra = int(args.k[4:])
            plan = solve(smallest.k + extra)
            proven = "proven" if smallest.k_status == "optimal" else "found, not proven"
            k_note = f"the smallest feasible count {smallest.k} ({proven}) + {extra}"
            plan = dataclasses.replace(plan, notes=[*plan.notes, f"k = {k_note}"])
        else:
            plan = solve(args.k)
    except InfeasibleError as err:
        raise InfeasibleError(_as_flags(str(err).split(": ", 1)[1]), proven=err.proven) from None
    except (ValueError, TypeError) as err:  # the solver's input checks name the fix
        raise UsageError(_as_flags(str(err))) from None
    if args.cap is None and args.k is None:
        # Without a cap nothing bounds a micro-batch, so the smallest count is one.
        _stderr("seqpart: no --cap given, so one micro-batch can hold every sequence and the "
                "smallest count is 1: pass --cap TOKENS (your trainer's max tokens per "
                "micro-batch), or --k N for a fixed count")
    if args.json:
        print(json.dumps(plan.to_dict()))
    else:
        print(format_plan(plan, len(lengths), k_note))
    return EXIT_OK


# --------------------------------------------------------------------------- repro


def cmd_repro(args: argparse.Namespace) -> int:
    from .study.datasets import list_datasets, load_dataset
    from .study.repro import run_all

    datasets = {} if args.no_data else {n: load_dataset(n).lengths for n in list_datasets()}
    print(run_all(datasets))
    return EXIT_OK


# --------------------------------------------------------------------------- study


def cmd_study(args: argparse.Namespace) -> int:
    profile = profile_from_flags(args.cost_profile, ("--cost", args.cost))
    config = StudyConfig(
        methods=args.methods, datasets=args.datasets, data=tuple(args.data or ()),
        fields=tuple(args.fields or ()), generated=args.generated, n=args.n, k=args.k, caps=args.caps,
        cost=profile.cost if profile is not None else args.cost or "tokens",
        min_k_time=args.min_k_time, **run_fields(args),
    )
    outcome = run_study(config, say=lambda message: _say(args, message))
    if outcome.interrupted:
        sys.stderr.write(f"seqpart: interrupted; finished results are in {outcome.results_path}: "
                         "run the same command again to resume\n")
        return EXIT_INTERRUPTED
    print(format_summary(outcome.rows))
    if outcome.timing_note:
        print(outcome.timing_note)
    if outcome.earlier:
        print(f"(the table includes {outcome.earlier} results of earlier runs with other settings "
              f"in {outcome.results_path})")
    if outcome.missing:
        print(f"({outcome.missing} of {outcome.wanted} results still to run: run the same "
              "command to resume)")
    if outcome.plots_skipped:
        _say(args, outcome.plots_skipped)
    if outcome.plots:
        print("plots: " + ", ".join(str(p) for p in outcome.plots))
    print(f"results: {outcome.results_path}, summary: {outcome.out / 'summary.csv'} "
          f"({outcome.seconds:.1f}s)")
    return EXIT_OK


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        sys.stderr.write(message + "\n")


# --------------------------------------------------------------------------- main


TIME_LIMIT_HELP = (
    "seconds for the search (default 1: a command-line run can afford a second; in Python, "
    "partition() defaults to 0.1 because it runs inside every training step, and plan_step() "
    "to 1 because it plans a whole step, dp*m micro-batches, once)")


COST_PROFILE_HELP = ("balance the cost calibrated by `seqpart calibrate` (its JSON profile) "
                     "instead of --cost (not with it)")


def _add_field(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--field", "--column", dest="fields", action="append", metavar="NAME",
        help="the field (JSON/JSONL records, parquet, datasets) or CSV column holding the "
             "lengths: a name or 1-based number; repeat it (or join with '+') to sum fields, "
             "e.g. --field prompt_length --field response_length. A field of token-id lists "
             "counts their lengths. Default: the one field named like a length")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seqpart", description=(
        "Split a batch of sequences into exactly k non-empty micro-batches under a token cap, "
        "minimising the largest one."))
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="{solve,study,step,calibrate,replay,repro}")

    solve = sub.add_parser("solve", help="plan one batch of lengths", description=(
        "Plan one batch. Lengths come from a JSON list (of counts, token-id lists or objects), "
        "a JSON object with 'lengths', JSONL, CSV, parquet, a saved Hugging Face dataset, or "
        "stdin ('-' or no file)."))
    solve.add_argument("file", nargs="?", default=None, help="file of lengths; '-' for stdin")
    solve.add_argument("--data", metavar="FILE", default=None, help="the same as FILE")
    solve.add_argument("--k", type=_k_arg, default=None,
                       help="number of micro-batches: an int, 'min' (the default: the smallest "
                            "feasible) or 'min+N' (finding the smallest takes up to another "
                            "--time-limit)")
    solve.add_argument("--cap", type=_positive_int, default=None, help="max tokens per micro-batch")
    solve.add_argument("--time-limit", type=_positive_float, default=1.0,
                       help=TIME_LIMIT_HELP)
    solve.add_argument("--cost", choices=("tokens", "attention"), default=None,
                       help="what to balance (default tokens; the cap always counts tokens)")
    solve.add_argument("--cost-profile", metavar="FILE", default=None,
                       help=COST_PROFILE_HELP)
    solve.add_argument("--equal-size", action="store_true",
                       help="same number of sequences in every micro-batch")
    solve.add_argument("--oversize", choices=("error", "alone"), default="error",
                       help="a sequence over the cap: reject it, or give it a micro-batch alone")
    _add_field(solve)
    solve.add_argument("--json", action="store_true", help="print the plan as JSON")
    solve.set_defaults(func=cmd_solve)

    study = sub.add_parser("study", help="compare methods over datasets and generated batches",
                           description=(
        "Run heuristics and seqpart's partition() over bundled datasets (or --data files) and "
        "generated long-tail RL batches, across n, k and cap. Results go to OUT/results.jsonl as "
        "they finish (re-running resumes), then OUT/summary.csv and PNG plots."))
    study.add_argument("--methods", default=DEFAULT_METHODS,
                       help="comma list: heuristic names and partition@SECONDS")
    study.add_argument("--datasets", default=None,
                       help="bundled dataset names, 'all' or 'none' "
                            "(default all, none with --data)")
    study.add_argument("--data", action="append", metavar="FILE",
                       help="a file of lengths, any format `solve` reads (repeatable); with "
                            "--data only your data is studied unless --datasets or "
                            "--generated asks for more")
    _add_field(study)
    study.add_argument("--generated", dest="generated", action="store_true", default=None,
                       help=f"add the generated '{GENERATED_SOURCE}' batches (the default "
                            "without --data)")
    study.add_argument("--no-generated", dest="generated", action="store_false",
                       help=f"leave out the generated '{GENERATED_SOURCE}' batches")
    study.add_argument("--n", default=None,
                       help=f"batch sizes (default {DEFAULT_N}; --data files up to "
                            f"{WHOLE_FILE_MAX} lengths are taken whole)")
    study.add_argument("--k", default=DEFAULT_K,
                       help=f"micro-batch counts: ints, 'min', 'min+N' (default {DEFAULT_K})")
    study.add_argument("--caps", "--cap", dest="caps", default=DEFAULT_CAPS,
                       help="token caps, or multiples of the source's longest sequence like 2x "
                            f"(default {DEFAULT_CAPS})")
    study.add_argument("--cost", choices=("tokens", "attention"), default=None,
                       help="what to balance (default tokens; the cap always counts tokens)")
    study.add_argument("--cost-profile", metavar="FILE", default=None, help=COST_PROFILE_HELP)
    study.add_argument("--reps", type=_positive_int, default=1, help="batches per setting")
    study.add_argument("--seed", type=int, default=0)
    study.add_argument("--min-k-time", type=_positive_float, default=0.5,
                       help="seconds to find the smallest k when bounds do not settle it")
    study.add_argument("--jobs", type=_positive_int, default=None,
                       help="processes for the untimed methods (default: all cores)")
    study.add_argument("--timed-jobs", type=_positive_int, default=None,
                       help="time-budgeted runs (partition@S) at a time; they run after the "
                            "others, apart, with cores/N CP-SAT workers each (default: --jobs; "
                            "1 runs them one by one)")
    study.add_argument("--out", default="seqpart-study", help="output directory")
    study.add_argument("--limit", type=_positive_int, default=None,
                       help="run at most this many new (instance, method) results")
    study.add_argument("--no-plots", action="store_true")
    study.add_argument("--quiet", action="store_true", help="no progress output")
    add_executor_arguments(study)
    study.set_defaults(func=cmd_study)

    add_step_parser(sub)
    from .study.cp.cli import add_cp_parser  # seqpart cp-study (its flags live there)

    add_cp_parser(sub)
    add_measure_parsers(sub)

    repro = sub.add_parser("repro", help="reproduce the two counterexamples")
    repro.add_argument("--no-data", action="store_true",
                       help="skip the search in the bundled real length files")
    repro.set_defaults(func=cmd_repro)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import InfeasibleError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except UsageError as err:
        return _fail(str(err), EXIT_USAGE)
    except InfeasibleError as err:
        return _fail(str(err), EXIT_INFEASIBLE)
    except KeyboardInterrupt:
        sys.stderr.write("seqpart: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `seqpart solve ... | head`
        return EXIT_OK
    except Exception as err:  # a bug: still one line, but say so
        return _fail(f"internal error ({type(err).__name__}: {err}); please report it",
                     EXIT_INTERNAL)


if __name__ == "__main__":
    sys.exit(main())
