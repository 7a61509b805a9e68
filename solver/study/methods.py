"""``seqpart study``: heuristics and ``partition`` measured over datasets and generated batches.

Built on :mod:`seqpart.solver.study.runner` (tasks, resumable ``results.jsonl``, the pool).
:class:`StudyConfig` holds the CLI's flags as a typed config; :func:`build_instances` makes the
grid (source x n x rep x cap x k); :func:`run_method` runs one method on one instance, measured,
its bins validated rather than trusted; :func:`summarize`, :func:`format_summary` and
:func:`write_summary_csv` make the table; :func:`run_study` ties them together and returns a
:class:`StudyOutcome` for the CLI to print.
"""

from __future__ import annotations

import json
import math
import os
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .methods_report import (
    format_timing_note,
    summarize,
    write_summary_csv,
)
from .readers import load_lengths
from .runner import (
    RunConfig,
    StudyOutcomeBase,
    Task,
    TaskExecutor,
    keep_sigint,
    open_executor,
    pool_map,
    run_tasks,
)

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


# --------------------------------------------------------------------------- the method study


@dataclass(frozen=True)
class StudyConfig(RunConfig):
    """The method study's grid (how it runs: :class:`~.runner.RunConfig`); the comma-list
    strings are the CLI's syntax, parsed here."""

    methods: str = DEFAULT_METHODS
    datasets: str | None = None  # names, "all" or "none"; None: all, or none with ``data``
    data: tuple[str, ...] = ()  # files of lengths
    fields: tuple[str, ...] = ()  # the length field(s) of ``data`` files, summed
    # add the generated long-tail RL batches; None: only without ``data`` (a user's study is of
    # their data unless they ask for more)
    generated: bool | None = None
    n: str | None = None  # None: DEFAULT_N (and whole ``data`` files up to WHOLE_FILE_MAX)
    k: str = DEFAULT_K
    caps: str = DEFAULT_CAPS
    cost: Any = "tokens"  # "tokens", "attention" or a Cost (a profile's); records hold str(cost)
    min_k_time: float = 0.5


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


def bundled_sources(names: str) -> list[Source]:
    """The bundled datasets ``names`` lists (comma-separated, ``"all"`` or ``"none"``), in that
    order; an unknown name is a usage error that lists the known ones."""
    from .datasets import list_datasets, load_dataset

    if names == "none":
        return []
    known = list_datasets()
    sources = []
    for name in known if names == "all" else split_list(names):
        if name not in known:
            raise UsageError(f"no bundled dataset {name!r}: choose from {', '.join(known)}")
        data = load_dataset(name)
        sources.append(Source(name, data.lengths, max(data.lengths)))
    return sources


def generated_source() -> Source:
    """The generated long-tail RL batches (DAPO's prompt and response caps)."""
    from .datasets import RL_PROMPT_CAP, RL_RESPONSE_CAP

    return Source(GENERATED_SOURCE, None, RL_PROMPT_CAP + RL_RESPONSE_CAP)


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


def split_list(text: str) -> list[str]:
    """The non-empty, stripped items of a comma-separated option (shared with the step study)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_methods(text: str) -> list[str]:
    from ...heuristics import HEURISTICS

    methods = []
    for spec in split_list(text):
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
    for spec in split_list(text):
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
    for spec in split_list(text):
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
    for spec in split_list(text):
        if spec == "all":
            ns.append(None)
        elif spec.isdigit() and int(spec) >= 1:
            ns.append(int(spec))
        else:
            raise UsageError(f"--n value {spec!r}: use an int >= 1 (or 'all' with --data)")
    if not ns:
        raise UsageError("--n is empty")
    return ns


def _sources(config: StudyConfig, say: Callable[[str], None] | None = None) -> list[Source]:
    from ...heuristics.inputs import as_lengths

    names = config.datasets
    if names is None:
        names = "none" if config.data else "all"
    sources = bundled_sources(names)
    for path in config.data or []:
        raw = load_lengths(path, config.fields, say)
        try:
            lengths = tuple(int(x) for x in as_lengths(raw))
        except (TypeError, ValueError) as err:
            raise UsageError(f"{path}: {err}") from None
        whole = config.n is None and len(lengths) <= WHOLE_FILE_MAX
        sources.append(Source(Path(path).stem, lengths, max(lengths), whole))
    generated = config.generated if config.generated is not None else not config.data
    if generated:
        sources.append(generated_source())
    if not sources:
        raise UsageError("no data: use bundled datasets, --data FILE, or --generated")
    return sources


def stable_seed(*parts: object) -> list[int]:
    """A numpy seed from the parts that names a batch (shared with the step study)."""
    # crc32, not hash(): Python salts str hashes per process, and resumed studies must
    # regenerate the same batches.
    return [zlib.crc32(str(p).encode()) for p in parts]


def resolve_min_k(lengths: Sequence[int], cap: int, seconds: float) -> tuple[int, str]:
    """Smallest feasible k: the bin-packing bound when first-fit decreasing meets it, else
    partition(k=None) in the repeatable mode. Returns (k, "optimal" | "upper_bound")."""
    from ...heuristics import first_fit_decreasing, min_bins_lower_bound
    from .._partition import partition
    from ..options import SolverOptions

    floor = min_bins_lower_bound(lengths, cap)
    if len(first_fit_decreasing(lengths, None, cap)) == floor:
        return floor, "optimal"
    # Repeatable mode: the count is part of every record's key, so a resumed run, another
    # executor or a loaded machine must find the same one.
    plan = partition(list(lengths), None, cap, time_limit=seconds,
                     options=SolverOptions(workers=1, deterministic=True))
    return plan.k, plan.k_status


def _resolve_task(task: tuple[tuple[int, ...], int, float]) -> tuple[int, str]:
    lengths, cap, seconds = task
    with keep_sigint():
        return resolve_min_k(lengths, cap, seconds)


def build_instances(
    config: StudyConfig,
    pool: ProcessPoolExecutor | TaskExecutor | None = None,
    min_k_cache: dict[str, list[Any]] | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[list[Instance], int]:
    """Every (source, n, rep, cap, k) of the grid; returns the instances and how many were
    skipped (k > n, or a cap below the longest sequence in the batch).

    ``min_k_cache`` (batch key -> [k, k_status]) is read and filled: the smallest k comes from
    a search in the repeatable mode, and a resumed study must see the same k (part of each key)."""
    cache = min_k_cache if min_k_cache is not None else {}
    sources = _sources(config, say)
    ns = parse_ns(config.n) if config.n is not None else parse_ns(DEFAULT_N)
    k_specs = parse_k_specs(config.k)
    caps = parse_caps(config.caps)
    batches = []  # (source, n, rep, cap, lengths)
    skipped = 0
    for source in sources:
        for n in ([None] if source.whole else ns):
            if n is None and not source.whole:
                raise UsageError("--n all needs --data FILE")
            for rep in range(config.reps):
                rng = np.random.default_rng(stable_seed(config.seed, source.name, n, rep))
                lengths = tuple(source.batch(n or 0, rng))
                for kind, value in caps:
                    cap = int(value * source.max_length) if kind == "x" else int(value)
                    if cap < max(lengths):
                        skipped += len(k_specs)
                        continue
                    batches.append((source.name, len(lengths), rep, cap, lengths))
    def batch_key(name: str, n: int, rep: int, cap: int) -> str:
        return f"{name}|n={n}|rep={rep}|cap={cap}|seed={config.seed}"

    need_min = [b for b in batches if any(s.startswith("min") for s in k_specs)
                and batch_key(*b[:4]) not in cache]
    solved = pool_map(pool, _resolve_task, [(b[4], b[3], config.min_k_time) for b in need_min])
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
            key = f"{name}|n={n}|rep={rep}|seed={config.seed}|cap={cap}|k={k}|cost={config.cost}"
            instances.append(Instance(key, name, n, rep, cap, k, spec, k_status, lengths))
    unique = list({inst.key: inst for inst in instances}.values())
    return unique, skipped


def run_method(
    lengths: Sequence[int], k: int, cap: int, method: str, cost: Any, workers: int
) -> dict[str, Any]:
    """One method on one instance, measured; the raw bins are validated, not trusted."""
    from ...heuristics import HEURISTICS, load_lower_bound
    from .._partition import partition
    from ..errors import InfeasibleError
    from ..options import SolverOptions
    from ..plan import find_violations
    from ..problem import Cost

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


def method_task(inst: Instance, method: str, cost: Any, workers: int) -> Task:
    """The engine's task for one method on one instance; time-budgeted methods are exclusive."""
    timed = method.startswith("partition@")
    return Task(f"{inst.key}|{method}", (inst, method, cost, workers), exclusive=timed,
                cpus=workers if timed else 1)


def run_method_task(payload: tuple[Instance, str, Any, int]) -> dict[str, Any]:
    """The runner of :func:`method_task`'s tasks: the instance's fields and the measurement."""
    inst, method, cost, workers = payload
    result = run_method(inst.lengths, inst.k, inst.cap, method, cost, workers)
    return {
        "instance": inst.key,
        "source": inst.source,
        "n": inst.n,
        "rep": inst.rep,
        "cap": inst.cap,
        "k": inst.k,
        "k_spec": inst.k_spec,
        "k_status": inst.k_status,
        "cost": str(cost),
        "method": method,
        **({"workers": workers} if method.startswith("partition@") else {}),
        **result,
    }


@dataclass
class StudyOutcome(StudyOutcomeBase):
    """What :func:`run_study` did, for the caller to print."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    earlier: int = 0  # records from earlier runs with other settings, in the summary too


def run_study(config: StudyConfig, say: Callable[[str], None] = lambda _: None) -> StudyOutcome:
    """Build the grid, run what ``OUT/results.jsonl`` does not hold yet, summarise, plot.

    ``say`` gets progress messages (the CLI sends them to stderr unless ``--quiet``).
    """
    methods = parse_methods(config.methods)
    # Timed methods run after the others, timed_jobs at a time, and CP-SAT gets the cores they
    # leave: no more busy threads of the study than cores (the note under the table shows how
    # much CPU they really had).
    jobs, timed_jobs = config.job_counts()
    workers = max(1, (os.cpu_count() or 1) // timed_jobs)
    store = config.open_store()
    out = Path(config.out)
    outcome = StudyOutcome(out, store.path)
    t0 = time.perf_counter()
    cache_path = out / "min_k.json"
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    except json.JSONDecodeError:
        cache = {}
    with open_executor(config.executor, max(jobs, timed_jobs), address=config.address) as pool:
        instances, skipped = build_instances(config, pool, cache, say)
        cache_path.write_text(json.dumps(cache, indent=0, sort_keys=True) + "\n")
        all_tasks = [method_task(inst, m, config.cost, workers) for inst in instances
                     for m in methods]
        wanted = {t.key for t in all_tasks}
        tasks, resumed = store.to_run(all_tasks, config.limit)
        say(f"seqpart study: {len(instances)} instances x {len(methods)} methods; "
            f"{resumed} results already in {store.path}, {len(tasks)} to run on {jobs} "
            f"process(es), time-budgeted ones {timed_jobs} at a time with {workers} CP-SAT "
            f"worker(s)" + (f"; {skipped} grid points skipped (k > n or cap < longest)"
                              if skipped else ""))
        run = run_tasks(tasks, run_method_task, store, jobs=jobs, exclusive_jobs=timed_jobs,
                        pool=pool, progress=config.progress, desc="study")
    if run.interrupted:
        outcome.interrupted = True
        return outcome
    # The summary and the plots cover every record in the store: a re-run of a subset into the
    # same directory adds to the earlier results instead of replacing them.
    records = store.records()
    shown = list(dict.fromkeys([*methods, *(r["method"] for r in records)]))
    outcome.rows = summarize(records, shown)
    outcome.timing_note = format_timing_note(outcome.rows, records)
    write_summary_csv(outcome.rows, out / "summary.csv")
    outcome.wanted = len(wanted)
    outcome.missing = len(wanted - {r["key"] for r in records})
    outcome.earlier = sum(1 for r in records if r["key"] not in wanted)
    if config.plots:
        from .plots import write_plots

        outcome.add_plots(write_plots, records, shown, out)
    outcome.seconds = time.perf_counter() - t0
    return outcome
