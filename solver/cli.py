"""The ``seqpart`` command line: ``solve`` one batch, ``study`` methods over data, ``repro``.

All file and terminal I/O of the package lives here (and in ``datasets``). Errors the user can
fix print one line, ``seqpart: error: ...``, and exit non-zero: 2 for bad usage or input, 3 when
no plan exists (or none was found in the time limit). A traceback means a bug in seqpart.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import signal
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130

DEFAULT_METHODS = (
    "karmarkar_karp,lpt,first_fit,first_fit_decreasing,capped_balance,local_search,"
    "partition@0.02,partition@1"
)
DEFAULT_N = "64,256,1024"
DEFAULT_K = "min,min+2"
DEFAULT_CAPS = "1x,2x"
GENERATED_SOURCE = "rl_longtail"
#: Batches from a user's file are taken whole up to this many lengths, sampled beyond it.
WHOLE_FILE_MAX = 4096


class UsageError(Exception):
    """Bad arguments or input: reported on one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) so scripts can grep them."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"seqpart: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"seqpart: error: {' '.join(message.split())}\n")
    return code


# --------------------------------------------------------------------------- reading lengths


def read_text(path: str | None) -> tuple[str, str]:
    """The text of ``path``, or of stdin for ``-``/None; and a name for messages."""
    if path in (None, "-"):
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no input: give a file of lengths, or pipe them into stdin")
        return sys.stdin.read(), "<stdin>"
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{path} is a directory, not a file of lengths")
    try:
        return file.read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a text file (expected JSON or CSV)") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror})") from None


def _is_int(cell: str) -> bool:
    try:
        int(cell.strip())
    except ValueError:
        return False
    return True


def parse_lengths(text: str, name: str, column: str | None = None) -> list[Any]:
    """Lengths from a JSON list, a JSON object with ``lengths``, CSV, or whitespace-separated ints.

    JSON values are returned as parsed (the solver names a float or a bool precisely); CSV cells
    must be integers.
    """
    stripped = text.strip()
    if not stripped:
        raise UsageError(
            f"{name} is empty: expected a JSON list, a JSON object with 'lengths', or CSV"
        )
    if stripped[0] in "[{":
        if column is not None:
            raise UsageError("--column applies to CSV input, not JSON")
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise UsageError(
                f"{name} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
            ) from None
        if isinstance(data, dict):
            if "lengths" not in data:
                raise UsageError(f"{name}: a JSON object needs a 'lengths' list of token counts")
            data = data["lengths"]
        if not isinstance(data, list):
            raise UsageError(f"{name}: 'lengths' must be a JSON list, got {type(data).__name__}")
        return data
    return _parse_table(stripped, name, column)


def _parse_table(text: str, name: str, column: str | None) -> list[int]:
    first_line = text.splitlines()[0]
    if "\t" in first_line:
        delimiter = "\t"
    elif "," in text:
        delimiter = ","
    elif ";" in first_line:
        delimiter = ";"
    else:  # plain ints, one per line or separated by spaces: one column
        cells = text.split()
        rows = [[c] for c in cells]
        return _pick_column(rows, name, column)
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    rows = [row for row in reader if any(c.strip() for c in row)]
    return _pick_column(rows, name, column)


def _pick_column(rows: list[list[str]], name: str, column: str | None) -> list[int]:
    header = [c.strip() for c in rows[0]] if not all(_is_int(c) for c in rows[0]) else None
    body = rows[1:] if header is not None else rows
    if not body:
        raise UsageError(f"{name} has a header but no rows of lengths")
    if header is None and len(body) == 1 and column is None:  # "8,7,6": one line, one batch
        return [int(c) for c in body[0] if c.strip()]
    width = max(len(r) for r in body)
    if column is not None:
        if header is not None and column in header:
            col = header.index(column)
        elif header is not None and column.lower() in [h.lower() for h in header]:
            col = [h.lower() for h in header].index(column.lower())
        elif column.isdigit() and 1 <= int(column) <= width:
            col = int(column) - 1
        else:
            known = f"columns: {', '.join(header)}" if header else f"{width} unnamed columns"
            raise UsageError(f"--column {column!r} not found in {name} ({known}); "
                             "give a header name or a 1-based number")
    else:
        candidates = [c for c in range(width) if all(c < len(r) and _is_int(r[c]) for r in body)]
        if not candidates:
            raise UsageError(f"{name} has no column of integers: pick one with --column NAME")
        col = candidates[0]
    label = header[col] if header is not None and col < len(header) else f"column {col + 1}"
    values = []
    for line, row in enumerate(body, start=2 if header is not None else 1):
        cell = row[col].strip() if col < len(row) else ""
        if not _is_int(cell):
            raise UsageError(
                f"{name} row {line}, {label}: {cell!r} is not an integer token count"
            )
        values.append(int(cell))
    return values


def load_lengths(path: str | None, column: str | None = None) -> list[Any]:
    text, name = read_text(path)
    return parse_lengths(text, name, column)


# --------------------------------------------------------------------------- solve


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _k_arg(text: str) -> int | None:
    return None if text in ("min", "auto", "none") else _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _indices(members: Sequence[int], width: int = 48) -> str:
    text = " ".join(str(i) for i in members)
    return text if len(text) <= width else text[: width - 3].rsplit(" ", 1)[0] + " ..."


def format_plan(plan: Any, n: int) -> str:
    """The human table ``seqpart solve`` prints."""
    k_note = {"given": "given", "optimal": "smallest feasible, proven",
              "upper_bound": f"smallest found; >= {plan.k_lower_bound} proven"}[plan.k_status]
    cap = f"cap {plan.cap}" if plan.cap is not None else "no cap"
    head = (f"{n} sequences, {sum(plan.tokens)} tokens -> k={plan.k} micro-batches ({k_note}), "
            f"{cap}, cost {plan.cost}")
    rows = [("micro-batch", "seqs", "tokens", "load", "sequence indices")]
    for b, members in enumerate(plan.bins):
        alone = " (over cap, alone)" if len(members) == 1 and members[0] in plan.oversize else ""
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
                         ("equal_size=False", "no --equal-size"), ("time_limit", "--time-limit")):
        message = message.replace(python, flag)
    return message


def cmd_solve(args: argparse.Namespace) -> int:
    from .partition import partition
    from .plan import InfeasibleError

    lengths = load_lengths(args.file, args.column)
    try:
        plan = partition(
            lengths, args.k, args.cap, time_limit=args.time_limit, cost=args.cost,
            equal_size=args.equal_size, oversize=args.oversize,
        )
    except InfeasibleError as err:
        raise InfeasibleError(_as_flags(str(err).split(": ", 1)[1]), proven=err.proven) from None
    except (ValueError, TypeError) as err:  # the solver's input checks name the fix
        raise UsageError(_as_flags(str(err))) from None
    if args.json:
        print(json.dumps(plan.to_dict()))
    else:
        print(format_plan(plan, len(lengths)))
    return EXIT_OK


# --------------------------------------------------------------------------- repro


def cmd_repro(args: argparse.Namespace) -> int:
    from .datasets import list_datasets, load_dataset
    from .repro import run_all

    datasets = {} if args.no_data else {n: load_dataset(n).lengths for n in list_datasets()}
    print(run_all(datasets))
    return EXIT_OK


# --------------------------------------------------------------------------- study


@dataclass(frozen=True)
class Source:
    """Where a study's batches come from: a bundled dataset, a user's file, or the generator."""

    name: str
    lengths: tuple[int, ...] | None  # None: generated
    max_length: int
    whole: bool = False  # a user's file taken as one batch

    def batch(self, n: int, rng: np.random.Generator) -> list[int]:
        from .datasets import rl_batch, sample_batch

        if self.lengths is None:
            return rl_batch(n, rng)
        if self.whole:
            return list(self.lengths)
        return sample_batch(self.lengths, n, rng)


@dataclass(frozen=True)
class Instance:
    key: str
    source: str
    n: int
    rep: int
    cap: int
    k: int
    k_spec: str
    k_status: str
    lengths: tuple[int, ...]


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_methods(text: str) -> list[str]:
    from seqpart.heuristics import HEURISTICS

    methods = []
    for spec in _split(text):
        name, _, budget = spec.partition("@")
        if name == "partition":
            try:
                seconds = float(budget) if budget else 0.1
            except ValueError:
                raise UsageError(f"method {spec!r}: the budget after @ must be seconds") from None
            if not seconds > 0 or math.isinf(seconds):
                raise UsageError(f"method {spec!r}: the budget must be a positive time")
            methods.append(f"partition@{seconds:g}")
        elif name in HEURISTICS and not budget:
            methods.append(name)
        else:
            raise UsageError(
                f"unknown method {spec!r}: use partition@SECONDS or one of {', '.join(HEURISTICS)}"
            )
    if not methods:
        raise UsageError("--methods is empty")
    return list(dict.fromkeys(methods))


def parse_k_specs(text: str) -> list[str]:
    specs = []
    for spec in _split(text):
        if spec == "min" or (spec.startswith("min+") and spec[4:].isdigit()) or (
            spec.isdigit() and int(spec) >= 1
        ):
            specs.append(spec)
        else:
            raise UsageError(f"--k value {spec!r}: use an int >= 1, 'min' or 'min+N'")
    if not specs:
        raise UsageError("--k is empty")
    return specs


def parse_caps(text: str) -> list[tuple[str, float]]:
    """'2x' (times the source's longest sequence) or an absolute token count."""
    caps = []
    for spec in _split(text):
        try:
            value = float(spec[:-1]) if spec.endswith("x") else float(int(spec))
        except ValueError:
            raise UsageError(
                f"--caps value {spec!r}: use tokens (16384) or a multiple (2x)"
            ) from None
        if not value > 0 or math.isinf(value):
            raise UsageError(f"--caps value {spec!r} must be positive")
        caps.append(("x" if spec.endswith("x") else "tokens", value))
    if not caps:
        raise UsageError("--caps is empty")
    return caps


def parse_ns(text: str) -> list[int | None]:
    ns: list[int | None] = []
    for spec in _split(text):
        if spec == "all":
            ns.append(None)
        elif spec.isdigit() and int(spec) >= 1:
            ns.append(int(spec))
        else:
            raise UsageError(f"--n value {spec!r}: use an int >= 1 (or 'all' with --data)")
    if not ns:
        raise UsageError("--n is empty")
    return ns


def _sources(args: argparse.Namespace) -> list[Source]:
    from seqpart.heuristics._inputs import as_lengths

    from .datasets import RL_PROMPT_CAP, RL_RESPONSE_CAP, list_datasets, load_dataset

    sources = []
    names = args.datasets
    if names is None:
        names = "none" if args.data else "all"
    if names != "none":
        known = list_datasets()
        chosen = known if names == "all" else _split(names)
        for name in chosen:
            if name not in known:
                raise UsageError(f"no bundled dataset {name!r}: choose from {', '.join(known)}")
            data = load_dataset(name)
            sources.append(Source(name, data.lengths, max(data.lengths)))
    for path in args.data or []:
        raw = load_lengths(path, args.column)
        try:
            lengths = tuple(int(x) for x in as_lengths(raw))
        except (TypeError, ValueError) as err:
            raise UsageError(f"{path}: {err}") from None
        whole = args.n is None and len(lengths) <= WHOLE_FILE_MAX
        sources.append(Source(Path(path).stem, lengths, max(lengths), whole))
    for _ in range(1 if args.generated else 0):
        sources.append(Source(GENERATED_SOURCE, None, RL_PROMPT_CAP + RL_RESPONSE_CAP))
    if not sources:
        raise UsageError("no data: use bundled datasets, --data FILE, or --generated")
    return sources


def _seed(*parts: object) -> list[int]:
    # crc32, not hash(): Python salts str hashes per process, and resumed studies must
    # regenerate the same batches.
    return [zlib.crc32(str(p).encode()) for p in parts]


def resolve_min_k(lengths: Sequence[int], cap: int, seconds: float) -> tuple[int, str]:
    """Smallest feasible k: the bin-packing bound when first-fit decreasing meets it, else
    partition(k=None). Returns (k, "optimal" | "upper_bound")."""
    from seqpart.heuristics import first_fit_decreasing, min_bins_lower_bound

    from .partition import SolverOptions, partition

    floor = min_bins_lower_bound(lengths, cap)
    if len(first_fit_decreasing(lengths, None, cap)) == floor:
        return floor, "optimal"
    plan = partition(list(lengths), None, cap, time_limit=seconds,
                     options=SolverOptions(workers=1))
    return plan.k, plan.k_status


@contextmanager
def _keep_sigint() -> Iterator[None]:
    """CP-SAT (ortools 9.15) leaves SIGINT at the OS default after a solve, so a later Ctrl-C
    would kill the study without a word; put the handler that was there back."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; the main process stops the pool and saves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _resolve_task(task: tuple[tuple[int, ...], int, float]) -> tuple[int, str]:
    lengths, cap, seconds = task
    with _keep_sigint():
        return resolve_min_k(lengths, cap, seconds)


def build_instances(
    args: argparse.Namespace,
    pool_map: Callable[[Callable[..., Any], Iterable[Any]], Iterable[Any]],
    min_k_cache: dict[str, list[Any]] | None = None,
) -> tuple[list[Instance], int]:
    """Every (source, n, rep, cap, k) of the grid; returns the instances and how many were
    skipped (k > n, or a cap below the longest sequence in the batch).

    ``min_k_cache`` (batch key -> [k, k_status]) is read and filled: the smallest k comes from
    a timed search, and a resumed study must see the same k (it is part of each key)."""
    cache = min_k_cache if min_k_cache is not None else {}
    sources = _sources(args)
    ns = parse_ns(args.n) if args.n is not None else parse_ns(DEFAULT_N)
    k_specs = parse_k_specs(args.k)
    caps = parse_caps(args.caps)
    batches = []  # (source, n, rep, cap, lengths)
    skipped = 0
    for source in sources:
        for n in ([None] if source.whole else ns):
            if n is None and not source.whole:
                raise UsageError("--n all needs --data FILE")
            for rep in range(args.reps):
                rng = np.random.default_rng(_seed(args.seed, source.name, n, rep))
                lengths = tuple(source.batch(n or 0, rng))
                for kind, value in caps:
                    cap = int(value * source.max_length) if kind == "x" else int(value)
                    if cap < max(lengths):
                        skipped += len(k_specs)
                        continue
                    batches.append((source.name, len(lengths), rep, cap, lengths))
    def batch_key(name: str, n: int, rep: int, cap: int) -> str:
        return f"{name}|n={n}|rep={rep}|cap={cap}|seed={args.seed}"

    need_min = [b for b in batches if any(s.startswith("min") for s in k_specs)
                and batch_key(*b[:4]) not in cache]
    solved = pool_map(_resolve_task, [(b[4], b[3], args.min_k_time) for b in need_min])
    for b, (k_min, k_status) in zip(need_min, solved, strict=True):
        cache[batch_key(*b[:4])] = [k_min, k_status]
    instances = []
    for name, n, rep, cap, lengths in batches:
        for spec in k_specs:
            if spec.startswith("min"):
                k_min, k_status = cache[batch_key(name, n, rep, cap)]
                k = k_min + (int(spec[4:]) if spec != "min" else 0)
                if spec != "min":
                    k_status = "given"
            else:
                k, k_status = int(spec), "given"
            if k > n:
                skipped += 1
                continue
            key = f"{name}|n={n}|rep={rep}|seed={args.seed}|cap={cap}|k={k}|cost={args.cost}"
            instances.append(Instance(key, name, n, rep, cap, k, spec, k_status, lengths))
    unique = list({inst.key: inst for inst in instances}.values())
    return unique, skipped


def run_method(
    lengths: Sequence[int], k: int, cap: int, method: str, cost: str, workers: int
) -> dict[str, Any]:
    """One method on one instance, measured; the raw bins are validated, not trusted."""
    from seqpart.heuristics import HEURISTICS, load_lower_bound

    from .partition import SolverOptions, partition
    from .plan import InfeasibleError, find_violations
    from .problem import Cost

    spec = Cost.parse(cost)
    costs = spec.of(np.asarray(lengths, dtype=np.int64))
    bound = load_lower_bound(costs, k)
    record: dict[str, Any] = {"error": None}
    t0 = time.perf_counter()
    if method.startswith("partition@"):
        budget = float(method.split("@", 1)[1])
        try:
            plan = partition(list(lengths), k, cap, time_limit=budget, cost=cost,
                             options=SolverOptions(workers=workers))
        except InfeasibleError as err:
            seconds = time.perf_counter() - t0
            return {**record, "valid": False, "status": "infeasible" if err.proven else "no_plan",
                    "error": str(err), "seconds": seconds, "lower_bound": bound, "max_load": None,
                    "max_tokens": None, "gap": None, "over_cap_bins": 0, "empty_bins": 0,
                    "wrong_bin_count": True, "tokens": []}
        seconds = time.perf_counter() - t0
        bins = plan.bins
        bound = max(bound, plan.lower_bound)
        status = plan.status
        record["engine"] = plan.method
    else:
        try:
            bins = HEURISTICS[method](list(lengths), k, cap, costs=costs.tolist())
        except (TypeError, ValueError) as err:
            seconds = time.perf_counter() - t0
            return {**record, "valid": False, "status": "error", "error": str(err),
                    "seconds": seconds, "lower_bound": bound, "max_load": None,
                    "max_tokens": None, "gap": None, "over_cap_bins": 0, "empty_bins": 0,
                    "wrong_bin_count": True, "tokens": []}
        seconds = time.perf_counter() - t0
        status = ""
    found = find_violations(bins, lengths, k, cap)
    loads = [int(costs[b].sum()) if b else 0 for b in bins]
    tokens = [int(sum(lengths[i] for i in b)) for b in bins]
    max_load = max(loads) if loads else 0
    if not status:
        status = ("optimal" if max_load <= bound else "feasible") if found.ok else "invalid"
    return {
        **record,
        "valid": found.ok,
        "status": status,
        "seconds": seconds,
        "lower_bound": bound,
        "max_load": max_load,
        "max_tokens": max(tokens) if tokens else 0,
        "gap": (max_load - bound) / bound,
        "over_cap_bins": found.over_cap_bins,
        "empty_bins": found.empty_bins,
        "wrong_bin_count": found.wrong_bin_count,
        "tokens": tokens,
    }


def _run_task(task: tuple[Instance, str, str, int]) -> dict[str, Any]:
    inst, method, cost, workers = task
    with _keep_sigint():
        result = run_method(inst.lengths, inst.k, inst.cap, method, cost, workers)
    return {
        "key": f"{inst.key}|{method}",
        "instance": inst.key,
        "source": inst.source,
        "n": inst.n,
        "rep": inst.rep,
        "cap": inst.cap,
        "k": inst.k,
        "k_spec": inst.k_spec,
        "k_status": inst.k_status,
        "cost": cost,
        "method": method,
        **result,
    }


class Progress:
    """A one-line progress bar on stderr; on a non-terminal, a line every quarter."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self.last = 0.0
        self.next_quarter = 1

    def update(self, step: int = 1) -> None:
        self.done += step
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            if now - self.last < 0.1 and self.done < self.total:
                return
            self.last = now
            self.stream.write("\r" + self._line(now))
            if self.done >= self.total:
                self.stream.write("\n")
        elif self.done * 4 >= self.next_quarter * self.total:
            while self.done * 4 >= self.next_quarter * self.total:
                self.next_quarter += 1
            self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def _line(self, now: float) -> str:
        frac = self.done / self.total
        width = 30
        filled = int(frac * width)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{frac:4.0%} {elapsed:5.1f}s eta {eta:4.0f}s")

    def finish_interrupted(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")


def read_results(path: Path) -> list[dict[str, Any]]:
    """Records from results.jsonl; a line cut short by an interruption is ignored."""
    if not path.exists():
        return []
    records = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "key" in record:
                records.append(record)
    return records


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


SUMMARY_COLUMNS = (
    "method", "runs", "valid_rate", "runs_over_cap", "over_cap_bins", "runs_empty", "empty_bins",
    "mean_gap", "max_gap", "optimal_share", "time_p50_s", "time_p95_s",
)


def summarize(records: Sequence[dict[str, Any]], methods: Sequence[str]) -> list[dict[str, Any]]:
    """Per method. Gaps are to the best lower bound known for the instance (the largest any run
    proved), over valid plans only: an invalid plan's load says nothing about a usable one."""
    best_bound: dict[str, int] = {}
    for r in records:
        best_bound[r["instance"]] = max(best_bound.get(r["instance"], 0), int(r["lower_bound"]))
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        if not mine:
            continue
        valid = [r for r in mine if r["valid"]]
        gaps = [(r["max_load"] - best_bound[r["instance"]]) / best_bound[r["instance"]]
                for r in valid]
        times = [r["seconds"] for r in mine]
        rows.append({
            "method": method,
            "runs": len(mine),
            "valid_rate": len(valid) / len(mine),
            "runs_over_cap": sum(1 for r in mine if r["over_cap_bins"]),
            "over_cap_bins": sum(r["over_cap_bins"] for r in mine),
            "runs_empty": sum(1 for r in mine if r["empty_bins"]),
            "empty_bins": sum(r["empty_bins"] for r in mine),
            "mean_gap": float(np.mean(gaps)) if gaps else float("nan"),
            "max_gap": max(gaps) if gaps else float("nan"),
            "optimal_share": sum(1 for r, g in zip(valid, gaps, strict=True) if g <= 0) / len(mine),
            "time_p50_s": _percentile(times, 50),
            "time_p95_s": _percentile(times, 95),
        })
    return rows


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    head = ("method", "runs", "valid", "over-cap runs (bins)", "empty runs (bins)", "mean gap",
            "max gap", "optimal", "time p50", "time p95")
    table = [head]
    for r in rows:
        table.append((
            r["method"], str(r["runs"]), f"{r['valid_rate']:.0%}",
            f"{r['runs_over_cap']} ({r['over_cap_bins']})",
            f"{r['runs_empty']} ({r['empty_bins']})",
            "-" if math.isnan(r["mean_gap"]) else f"{r['mean_gap']:.2%}",
            "-" if math.isnan(r["max_gap"]) else f"{r['max_gap']:.2%}",
            f"{r['optimal_share']:.0%}",
            _fmt_seconds(r["time_p50_s"]), _fmt_seconds(r["time_p95_s"]),
        ))
    widths = [max(len(row[c]) for row in table) for c in range(len(head))]
    lines = []
    for i, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [row[c].rjust(widths[c]) for c in range(1, len(head))]
        lines.append("  ".join(cells))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def write_summary_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in SUMMARY_COLUMNS})


def write_plots(records: Sequence[dict[str, Any]], methods: Sequence[str], out: Path) -> list[Path]:
    """gap.png, time_vs_n.png, loads.png; matplotlib is the ``plot`` extra, imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in methods if any(r["method"] == m for r in records)]
    best_bound: dict[str, int] = {}
    for r in records:
        best_bound[r["instance"]] = max(best_bound.get(r["instance"], 0), int(r["lower_bound"]))
    paths = []

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(methods)), 4.5))
    data, labels = [], []
    for m in methods:
        mine = [r for r in records if r["method"] == m]
        gaps = [100 * (r["max_load"] - best_bound[r["instance"]]) / best_bound[r["instance"]]
                for r in mine if r["valid"]]
        data.append(gaps or [float("nan")])
        labels.append(f"{m}\nvalid {len(gaps)}/{len(mine)}")
    ax.boxplot(data, whis=(0, 100), showfliers=False)
    for i, gaps in enumerate(data, start=1):
        jitter = np.random.default_rng(i).uniform(-0.18, 0.18, len(gaps))
        ax.scatter(np.full(len(gaps), i) + jitter, gaps, s=6, alpha=0.5, color="tab:blue")
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("gap to lower bound (%), valid plans only")
    ax.set_title("Largest micro-batch load above the proven lower bound")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    paths.append(out / "gap.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for m in methods:
        by_n: dict[int, list[float]] = {}
        for r in records:
            if r["method"] == m:
                by_n.setdefault(r["n"], []).append(r["seconds"])
        ns = sorted(by_n)
        ax.plot(ns, [1000 * float(np.median(by_n[n])) for n in ns], marker="o", label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sequences per batch (n)")
    ax.set_ylabel("median time (ms)")
    ax.set_title("Time against batch size")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "time_vs_n.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    instance = _showcase_instance(records)
    if instance is not None:
        mine = {r["method"]: r for r in records if r["instance"] == instance}
        shown = [m for m in methods if m in mine]
        cols = min(4, len(shown))
        rows_n = -(-len(shown) // cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 2.8 * rows_n), squeeze=False,
                                 sharey=True)
        cap = mine[shown[0]]["cap"]
        for ax, m in zip(axes.flat, shown, strict=False):
            tokens = mine[m]["tokens"]
            colors = ["tab:red" if t > cap else "tab:blue" for t in tokens]
            ax.bar(range(len(tokens)), tokens, color=colors, width=0.85)
            empty = [b for b, t in enumerate(tokens) if t == 0]
            ax.scatter(empty, [0] * len(empty), marker="x", color="tab:red", zorder=3)
            ax.axhline(cap, color="black", linestyle="--", linewidth=1)
            verdict = "valid" if mine[m]["valid"] else (
                f"{mine[m]['over_cap_bins']} over cap, {mine[m]['empty_bins']} empty")
            ax.set_title(f"{m}\n{verdict}", fontsize=8)
            ax.set_xlabel("micro-batch", fontsize=7)
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(shown):]:
            ax.axis("off")
        axes[0][0].set_ylabel("tokens (dashed: cap)", fontsize=7)
        fig.suptitle(instance.replace("|", "  "), fontsize=8)
        fig.tight_layout()
        paths.append(out / "loads.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def _showcase_instance(records: Sequence[dict[str, Any]]) -> str | None:
    """The instance where most methods break the cap (then: are invalid), with few micro-batches
    so the bars stay readable."""
    score: dict[str, tuple[int, int, int]] = {}
    for r in records:
        over, bad, k = score.get(r["instance"], (0, 0, r["k"]))
        score[r["instance"]] = (over + (1 if r["over_cap_bins"] else 0),
                                bad + (0 if r["valid"] else 1), k)
    readable = {i: s for i, s in score.items() if 2 <= s[2] <= 24} or score
    if not readable:
        return None
    # Over-cap failures first: they are the ones an OOM comes from.
    return max(readable, key=lambda i: (readable[i][0], readable[i][1], -readable[i][2], i))


def cmd_study(args: argparse.Namespace) -> int:
    methods = parse_methods(args.methods)
    jobs = args.jobs or os.cpu_count() or 1
    # CP-SAT's own threads share the cores with the pool's processes.
    workers = max(1, (os.cpu_count() or 1) // jobs)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {args.out}: cannot create it ({err.strerror})") from None
    results_path = out / "results.jsonl"
    executor = ProcessPoolExecutor(jobs, initializer=_worker_init) if jobs > 1 else None
    pool_map: Callable[[Callable[..., Any], Iterable[Any]], Iterable[Any]] = (
        executor.map if executor is not None else map  # type: ignore[assignment]
    )
    t0 = time.perf_counter()
    cache_path = out / "min_k.json"
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    except json.JSONDecodeError:
        cache = {}
    try:
        instances, skipped = build_instances(args, pool_map, cache)
        cache_path.write_text(json.dumps(cache, indent=0, sort_keys=True) + "\n")
        wanted = {f"{inst.key}|{m}" for inst in instances for m in methods}
        done = {r["key"] for r in read_results(results_path)}
        tasks = [(inst, m, args.cost, workers) for inst in instances for m in methods
                 if f"{inst.key}|{m}" not in done]
        if args.limit is not None:
            tasks = tasks[: args.limit]
        resumed = len(wanted & done)
        _say(args, f"seqpart study: {len(instances)} instances x {len(methods)} methods; "
             f"{resumed} results already in {results_path}, {len(tasks)} to run on {jobs} "
             f"process(es)" + (f"; {skipped} grid points skipped (k > n or cap < longest)"
                               if skipped else ""))
        progress = Progress(len(tasks), enabled=not args.quiet)
        interrupted = _run_tasks(tasks, executor, jobs, results_path, progress)
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
    if interrupted:
        progress.finish_interrupted()
        sys.stderr.write(f"seqpart: interrupted; finished results are in {results_path}: "
                         "run the same command again to resume\n")
        return EXIT_INTERRUPTED
    records = [r for r in read_results(results_path) if r["key"] in wanted]
    records = list({r["key"]: r for r in records}.values())
    rows = summarize(records, methods)
    write_summary_csv(rows, out / "summary.csv")
    print(format_summary(rows))
    missing = len(wanted) - len(records)
    if missing:
        print(f"({missing} of {len(wanted)} results still to run: run the same command to resume)")
    if not args.no_plots:
        try:
            paths = write_plots(records, methods, out)
        except ImportError:
            _say(args, "plots skipped: matplotlib is not installed (pip install 'seqpart[plot]')")
        else:
            print("plots: " + ", ".join(str(p) for p in paths))
    print(f"results: {results_path}, summary: {out / 'summary.csv'} "
          f"({time.perf_counter() - t0:.1f}s)")
    return EXIT_OK


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        sys.stderr.write(message + "\n")


def _run_tasks(
    tasks: Sequence[tuple[Instance, str, str, int]],
    executor: ProcessPoolExecutor | None,
    jobs: int,
    results_path: Path,
    progress: Progress,
) -> bool:
    """Run and append each record as it completes; returns True if interrupted (Ctrl-C)."""
    # A killed run can leave half a line: start on a fresh one so no new record is glued to it.
    torn = results_path.exists() and results_path.stat().st_size > 0 and not (
        results_path.read_bytes().endswith(b"\n")
    )
    with results_path.open("a", encoding="utf-8") as fh:
        if torn:
            fh.write("\n")

        def save(record: dict[str, Any]) -> None:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            progress.update()

        try:
            if executor is None:
                for task in tasks:
                    save(_run_task(task))
                return False
            # Bounded submission keeps memory flat and lets Ctrl-C stop promptly.
            pending: set[Future[dict[str, Any]]] = set()
            queue = iter(tasks)
            limit = 4 * jobs
            for task in queue:
                pending.add(executor.submit(_run_task, task))
                if len(pending) >= limit:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        save(future.result())
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    save(future.result())
        except KeyboardInterrupt:
            # One Ctrl-C is enough: a second one must not cut the wrap-up short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return True
    return False


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seqpart", description=(
        "Split a batch of sequences into exactly k non-empty micro-batches under a token cap, "
        "minimising the largest one."))
    sub = parser.add_subparsers(dest="command", metavar="{solve,study,repro}")

    solve = sub.add_parser("solve", help="plan one batch of lengths", description=(
        "Plan one batch. Lengths come from a JSON list, a JSON object with 'lengths', a CSV "
        "column, or stdin ('-' or no file)."))
    solve.add_argument("file", nargs="?", default=None, help="JSON or CSV file; '-' for stdin")
    solve.add_argument("--k", type=_k_arg, default=None,
                       help="number of micro-batches (default: the smallest feasible)")
    solve.add_argument("--cap", type=_positive_int, default=None, help="max tokens per micro-batch")
    solve.add_argument("--time-limit", type=_positive_float, default=1.0,
                       help="seconds (default 1)")
    solve.add_argument("--cost", choices=("tokens", "attention"), default="tokens",
                       help="what to balance (the cap always counts tokens)")
    solve.add_argument("--equal-size", action="store_true",
                       help="same number of sequences in every micro-batch")
    solve.add_argument("--oversize", choices=("error", "alone"), default="error",
                       help="a sequence over the cap: reject it, or give it a micro-batch alone")
    solve.add_argument("--column", default=None, help="CSV column name or 1-based number")
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
                       help="a JSON/CSV file of lengths (repeatable)")
    study.add_argument("--column", default=None, help="CSV column for --data files")
    study.add_argument("--no-generated", dest="generated", action="store_false",
                       help=f"leave out the generated '{GENERATED_SOURCE}' batches")
    study.add_argument("--n", default=None,
                       help=f"batch sizes (default {DEFAULT_N}; --data files up to "
                            f"{WHOLE_FILE_MAX} lengths are taken whole)")
    study.add_argument("--k", default=DEFAULT_K,
                       help=f"micro-batch counts: ints, 'min', 'min+N' (default {DEFAULT_K})")
    study.add_argument("--caps", default=DEFAULT_CAPS,
                       help="token caps, or multiples of the source's longest sequence like 2x "
                            f"(default {DEFAULT_CAPS})")
    study.add_argument("--cost", choices=("tokens", "attention"), default="tokens")
    study.add_argument("--reps", type=_positive_int, default=1, help="batches per setting")
    study.add_argument("--seed", type=int, default=0)
    study.add_argument("--min-k-time", type=_positive_float, default=0.5,
                       help="seconds to find the smallest k when bounds do not settle it")
    study.add_argument("--jobs", type=_positive_int, default=None,
                       help="processes (default: all cores)")
    study.add_argument("--out", default="seqpart-study", help="output directory")
    study.add_argument("--limit", type=_positive_int, default=None,
                       help="run at most this many new (instance, method) results")
    study.add_argument("--no-plots", action="store_true")
    study.add_argument("--quiet", action="store_true", help="no progress output")
    study.set_defaults(func=cmd_study)

    repro = sub.add_parser("repro", help="reproduce the two counterexamples")
    repro.add_argument("--no-data", action="store_true",
                       help="skip the search in the bundled real length files")
    repro.set_defaults(func=cmd_repro)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .plan import InfeasibleError

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
