"""``seqpart cp-study``: dynamic context parallelism over real and generated length batches.

For every batch (the bundled datasets and generated long-tail RL batches, or a user's file cut
into training steps) and every ``n_gpus`` x ``max_tokens_per_gpu`` of the grid, it runs each
method of :data:`~.methods.CP_METHODS`, checks the schedule with the dynamic-CP validator and
scores it with the exact model against the lower bound under each sync model. Lengths longer
than the widest group holds (``n_gpus * max_tokens_per_gpu``) are clipped to it, as a trainer
truncates them; records count them (``clipped``).

``plan_cp_step`` runs once per sync model, in the repeatable mode (its time limit is counted
work, so a resumed or re-run study gets the same schedules); the baselines do not look at the
sync model, so each runs once per setting and is scored under both. Built on
:mod:`seqpart.solver.study.runner`: results go to ``OUT/results.jsonl`` as they finish (running
the same command again resumes), then ``OUT/cp_summary.csv`` and the plots.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ...dynamic_cp import SYNCS, CPInstance, make_cp_instance
from ...errors import UsageError
from ...options import SolverOptions
from ..methods import (
    Source,
    bundled_sources,
    generated_source,
    parse_ns,
    split_list,
    stable_seed,
)
from ..methods_report import format_timing_note
from ..runner import RunConfig, StudyOutcomeBase, Task, run_pending
from .methods import CP_METHODS, TIMED, MethodRun, run_cp_method, score
from .report import summarize, timing_rows, write_summary_csv

DEFAULT_N = "128,512"
DEFAULT_GPUS = "8,16"
DEFAULT_MAX_TOKENS = "8K"
QUICK = {"n": "64", "gpus": "4,8", "max_tokens": "4K"}
DEFAULT_TIME_LIMIT = 1.0
DEFAULT_COST = "attention"
DEFAULT_OVERHEAD_TOKENS = 512
#: cp_comm as a multiple of the cost's linear (per-token) term: 0.25 * 24576 = 6144 by default.
DEFAULT_CP_COMM = "0.25"
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class CPStudyConfig(RunConfig):
    """The CP study's grid (how it runs: :class:`~seqpart.solver.study.runner.RunConfig`);
    comma-list strings are the CLI's syntax, parsed here."""

    methods: str = ",".join(CP_METHODS)
    datasets: str = "all"  # bundled names, "all" or "none"
    generated: bool = True
    #: A user's lengths (then only they are studied), cut into steps of ``global_batch``.
    data: tuple[int, ...] | None = None
    data_name: str = "data"
    global_batch: int | None = None
    n: str = DEFAULT_N
    gpus: str = DEFAULT_GPUS
    max_tokens: str = DEFAULT_MAX_TOKENS
    syncs: str = ",".join(SYNCS)
    cost: Any = DEFAULT_COST  # "tokens", "attention" or a Cost (a profile's)
    overhead_tokens: int = DEFAULT_OVERHEAD_TOKENS
    overhead: int | None = None  # in the cost's units; None: overhead_tokens of the linear cost
    cp_comm: str = DEFAULT_CP_COMM
    time_limit: float = DEFAULT_TIME_LIMIT
    out: str = "seqpart-cp-study"  # RunConfig's, with this study's folder


@dataclass(frozen=True)
class CPSetting:
    """One batch on one domain (``n_gpus``, ``max_tokens_per_gpu``) under one cost."""

    key: str
    source: str
    n: int
    rep: int
    n_gpus: int
    max_tokens_per_gpu: int
    cost: Any
    overhead: int
    cp_comm: Fraction
    lengths: tuple[int, ...]  # clipped to n_gpus * max_tokens_per_gpu
    clipped: int = 0

    def instance(self, sync: str = "barrier") -> CPInstance:
        return make_cp_instance(list(self.lengths), self.n_gpus, self.max_tokens_per_gpu,
                                cost=self.cost, cp_comm=self.cp_comm, overhead=self.overhead,
                                sync=sync)


# --------------------------------------------------------------------------- the grid


def parse_ints(text: str, flag: str, *, kilo: bool = False) -> list[int]:
    """Ints >= 1; with ``kilo``, ``K`` stands for 1024 (``4K`` is 4096)."""
    out = []
    for part in split_list(text):
        digits, times = (part[:-1], 1024) if kilo and part[-1:] in ("K", "k") else (part, 1)
        if not digits.isdigit() or int(digits) < 1:
            raise UsageError(f"{flag} value {part!r}: use ints >= 1"
                             + (" (4096, or 4K for 4096)" if kilo else ""))
        out.append(int(digits) * times)
    if not out:
        raise UsageError(f"{flag} is empty")
    return list(dict.fromkeys(out))


def parse_choice(text: str, flag: str, allowed: Sequence[str]) -> list[str]:
    chosen = split_list(text)
    bad = [c for c in chosen if c not in allowed]
    if bad or not chosen:
        raise UsageError(f"{flag} value {(bad or [''])[0]!r}: choose from {', '.join(allowed)}")
    return list(dict.fromkeys(chosen))


def cost_terms(config: CPStudyConfig) -> tuple[Any, int, Fraction]:
    """The cost, the overhead and cp_comm (a multiple of the cost's linear term), exact."""
    from ...problem import Cost

    try:
        spec = Cost.parse(config.cost)
    except (TypeError, ValueError) as err:
        raise UsageError(f"--cost {config.cost!r}: {err}") from None
    try:
        ratio = Fraction(config.cp_comm)
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"--cp-comm {config.cp_comm!r}: use a number >= 0, e.g. 0.25") from None
    if ratio < 0 or config.overhead_tokens < 0:
        raise UsageError("--cp-comm and --overhead-tokens must be >= 0")
    overhead = config.overhead if config.overhead is not None else spec.linear * config.overhead_tokens
    return config.cost, overhead, ratio * spec.linear


def _batches(config: CPStudyConfig) -> list[tuple[str, str, int, int, tuple[int, ...]]]:
    """(source, key, n, rep, lengths) for every batch: the user's steps (the key holds a checksum
    of the file's lengths, so an edited file is not taken as done), or the grid's draws."""
    if config.data is not None:
        from ..step_data import split_steps

        steps, _ = split_steps(config.data, config.global_batch)
        if not steps:
            raise UsageError(f"--global-batch {config.global_batch}: the file holds only "
                             f"{len(config.data)} sequences")
        crc = zlib.crc32(np.asarray(config.data, dtype=np.int64).tobytes())
        return [(config.data_name, f"{config.data_name}|crc={crc:08x}|gb={config.global_batch}"
                 f"|step={i}", len(s), i, s) for i, s in enumerate(steps)]
    out = []
    ns = [n for n in parse_ns(config.n) if n is not None]
    if not ns:
        raise UsageError("--n needs batch sizes (ints)")
    for source in _sources(config):
        for n in ns:
            for rep in range(config.reps):
                rng = np.random.default_rng(stable_seed(config.seed, "cp", source.name, n, rep))
                out.append((source.name, f"{source.name}|n={n}|rep={rep}|seed={config.seed}", n,
                            rep, tuple(source.batch(n, rng))))
    return out


def _sources(config: CPStudyConfig) -> list[Source]:
    sources = bundled_sources(config.datasets) + ([generated_source()] if config.generated else [])
    if not sources:
        raise UsageError("no data: choose bundled --datasets, keep the generated batches, or "
                         "give --data FILE")
    return sources


def build_settings(config: CPStudyConfig) -> list[CPSetting]:
    """Every (batch, n_gpus, max_tokens_per_gpu) of the grid, with stable keys."""
    gpus = parse_ints(config.gpus, "--n-gpus")
    caps = parse_ints(config.max_tokens, "--max-tokens-per-gpu", kilo=True)
    cost, overhead, cp_comm = cost_terms(config)
    settings = []
    for source, batch, n, rep, lengths in _batches(config):
        for g in gpus:
            for m in caps:
                top = g * m
                key = f"{batch}|gpus={g}|m={m}|cost={cost}|o={overhead}|comm={cp_comm}"
                settings.append(CPSetting(key, source, n, rep, g, m, cost, overhead, cp_comm,
                                          tuple(min(x, top) for x in lengths),
                                          sum(1 for x in lengths if x > top)))
    return settings


def cp_tasks(settings: Sequence[CPSetting], methods: Sequence[str], syncs: Sequence[str],
             time_limit: float) -> list[Task]:
    """plan_cp_step: one task per sync model; a baseline: one per setting, scored under both.
    Time-budgeted methods (:data:`TIMED`) run apart, after the others."""
    tasks = []
    for s in settings:
        for m in methods:
            budget = f"@{time_limit:g}" if m in TIMED else ""
            for sync in (syncs if m == "plan_cp_step" else [None]):
                where = f"|sync={sync}" if sync else ""
                tasks.append(Task(f"{s.key}{where}|{m}{budget}", (s, m, sync, time_limit),
                                  exclusive=m in TIMED))
    return tasks


# --------------------------------------------------------------------------- one run


def run_cp_task(payload: tuple[CPSetting, str, str | None, float]) -> dict[str, Any]:
    """The runner: one method on one setting, its schedule validated and scored. A method that
    has no schedule (the greedy refusing a domain, a fixed degree that cannot fill the GPUs) is
    recorded with its ``error``, not raised."""
    s, method, sync, time_limit = payload
    record: dict[str, Any] = {
        "setting": s.key, "source": s.source, "n": s.n, "rep": s.rep, "n_gpus": s.n_gpus,
        "max_tokens_per_gpu": s.max_tokens_per_gpu, "clipped": s.clipped, "cost": str(s.cost),
        "overhead": s.overhead, "cp_comm": str(s.cp_comm), "method": method, "sync": sync,
        "time_limit": time_limit if method in TIMED else None, "workers": 1, "error": None,
    }
    t0 = time.perf_counter()
    try:
        inst = s.instance(sync or "barrier")
        # Repeatable: one CP-SAT worker and counted work, whatever the machine and its load.
        run: MethodRun = run_cp_method(method, inst, time_limit,
                                       SolverOptions(deterministic=True, workers=1))
    except ValueError as err:  # GreedyError included
        return {**record, "seconds": time.perf_counter() - t0, "valid": False,
                "error": f"{type(err).__name__}: {err}", "why": [], "degrees": [],
                "groups_by_degree": {}, "steps": None, "detail": {}, "by_sync": {}}
    seconds = time.perf_counter() - t0
    return {**record, "seconds": seconds, **score(inst, run.steps, (sync,) if sync else SYNCS),
            "detail": run.detail}


# --------------------------------------------------------------------------- run


@dataclass
class CPStudyOutcome(StudyOutcomeBase):
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per sync
    records: list[dict[str, Any]] = field(default_factory=list)
    settings: int = 0
    clipped: int = 0


def run_cp_study(config: CPStudyConfig, say: Callable[[str], None] = lambda _: None
                 ) -> CPStudyOutcome:
    """Build the grid, run what ``OUT/results.jsonl`` does not hold yet, summarise, plot."""
    methods = parse_choice(config.methods, "--methods", CP_METHODS)
    syncs = parse_choice(config.syncs, "--sync", SYNCS)
    if not config.time_limit > 0 or math.isinf(config.time_limit):
        raise UsageError("--time-limit must be a positive number of seconds")
    settings = build_settings(config)
    store = config.open_store()
    out = Path(config.out)
    outcome = CPStudyOutcome(out, store.path, settings=len(settings))
    t0 = time.perf_counter()
    all_tasks = cp_tasks(settings, methods, syncs, config.time_limit)
    records = run_pending(
        config, store, all_tasks, run_cp_task, desc="cp-study", say=say,
        grid=f"seqpart cp-study: {len(settings)} settings x {len(methods)} methods "
             f"({len(all_tasks)} runs)")
    if records is None:
        outcome.interrupted = True
        return outcome
    outcome.records = records
    outcome.clipped = sum(1 for s in settings if s.clipped)
    outcome.rows = {sync: summarize(records, methods, sync) for sync in syncs}
    outcome.timing_note = format_timing_note(timing_rows(records, methods), records)
    write_summary_csv(outcome.rows, out / "cp_summary.csv")
    wanted = len({t.key for t in all_tasks})
    outcome.wanted, outcome.missing = wanted, wanted - len(records)
    if config.plots and records:
        from .plots import write_cp_plots

        outcome.add_plots(write_cp_plots, records, methods, syncs, out)
    outcome.seconds = time.perf_counter() - t0
    return outcome
