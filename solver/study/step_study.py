"""``seqpart step``: the step-time study, trainers' schedulers against seqpart's step planning.

For bundled datasets and generated long-tail RL batches, across data-parallel sizes ``dp``,
pipeline depths ``pp``, caps and costs, it runs every method of :data:`STEP_METHODS`, checks
each schedule with the step validator and scores it with the step model
(:func:`seqpart.solver.step.step_time`) against the step lower bound
(:func:`~seqpart.solver.step.step_lower_bound`). Methods:

- the trainers' own schedulers, re-implemented in
  :data:`seqpart.heuristics.TRAINER_SCHEDULERS` (slime, prime-rl, verl, Megatron), run raw: an
  over-cap micro-batch or unequal counts make the schedule invalid, which is counted;
- ``plan_global`` (seqpart's two-level proxy: smallest heaviest micro-batch, then ranks);
- ``per_rank`` (seqpart dropped into a trainer's per-rank flow, see :func:`per_rank_agreement`);
- ``plan_step`` (the step planner, told ``pp``).

Only ``plan_step`` looks at ``pp``, so every other method runs once per setting and its schedule
is scored for every ``pp``; ``plan_step`` runs once per ``pp``. Built on
:mod:`seqpart.solver.study.runner`: results go to ``OUT/results.jsonl`` as they finish (running
the same command again resumes), then ``OUT/step_summary.csv`` and ``OUT/step_vs_pp.png``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .methods import (
    Source,
    bundled_sources,
    generated_source,
    parse_caps,
    parse_ns,
    split_list,
    stable_seed,
)
from .methods_report import format_timing_note, write_rows_csv
from .runner import RunConfig, StudyOutcomeBase, Task, run_pending
from .step_report import (
    TRAINERS,
    summarize,
    write_plot,
)

STEP_METHODS = (*TRAINERS, "plan_global", "per_rank", "plan_step")
#: Methods with a time budget: run after the others, apart (``exclusive``), like the study's.
TIMED = ("plan_global", "per_rank", "plan_step")
DEFAULT_N = "256,1024"
DEFAULT_DP = "2,4,8,16,32,64"
DEFAULT_PP = "1,2,4,8"
DEFAULT_CAPS = "1x"
DEFAULT_COSTS = "attention"
#: A micro-batch's fixed overhead, as the linear cost of this many tokens (the issue's choice).
DEFAULT_OVERHEAD_TOKENS = 512
#: plan_step's and plan_global's budget; the per-rank partitions get a tenth each.
DEFAULT_TIME_LIMIT = 0.2
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class StepStudyConfig(RunConfig):
    """The step study's grid (how it runs: :class:`~.runner.RunConfig`); comma-list strings are
    the CLI's syntax, parsed here."""

    methods: str = ",".join(STEP_METHODS)
    datasets: str = "all"  # bundled names, "all" or "none"
    generated: bool = True
    n: str = DEFAULT_N
    dp: str = DEFAULT_DP
    pp: str = DEFAULT_PP
    vpp: int = 1
    caps: str = DEFAULT_CAPS
    costs: str = DEFAULT_COSTS
    overhead_tokens: int = DEFAULT_OVERHEAD_TOKENS
    #: A loaded CostProfile: its ``cost`` and ``overhead`` replace ``costs`` and
    #: ``overhead_tokens`` (the CLI refuses both at once).
    cost_profile: Any = None
    time_limit: float = DEFAULT_TIME_LIMIT
    #: plan_step, plan_global and the per-rank partitions on counted work, not the clock
    #: (``SolverOptions(deterministic=True)``): the same plans on every run and machine.
    deterministic: bool = False
    out: str = "seqpart-step-study"  # RunConfig's, with this study's folder


@dataclass(frozen=True)
class Setting:
    """One batch and step configuration; every pp in ``pps`` is scored on it."""

    key: str
    source: str
    n: int
    rep: int
    dp: int
    cap: int
    cost: Any  # "tokens", "attention" or a Cost (a profile's); records hold str(cost)
    overhead: int
    vpp: int
    pps: tuple[int, ...]
    lengths: tuple[int, ...]
    #: m is a multiple of this for every method; 0: of ``vpp`` (the grid's rule, whose schedules
    #: are scored at several pp). ``step --data`` sets it (pp when vpp > 1, Megatron's rule).
    multiple_of: int = 0

    @property
    def group(self) -> int:
        return self.multiple_of or self.vpp


# --------------------------------------------------------------------------- the grid


def _ints(text: str, flag: str) -> list[int]:
    out = []
    for part in split_list(text):
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"{flag} value {part!r}: use ints >= 1")
        out.append(int(part))
    if not out:
        raise UsageError(f"{flag} is empty")
    return list(dict.fromkeys(out))


def parse_methods(text: str) -> list[str]:
    methods = split_list(text)
    bad = [m for m in methods if m not in STEP_METHODS]
    if bad:
        raise UsageError(f"unknown method {bad[0]!r}: choose from {', '.join(STEP_METHODS)}")
    if not methods:
        raise UsageError("--methods is empty")
    return list(dict.fromkeys(methods))


def parse_costs(text: str) -> list[str]:
    costs = split_list(text)
    bad = [c for c in costs if c not in ("tokens", "attention")]
    if bad or not costs:
        raise UsageError(f"--costs value {(bad or [''])[0]!r}: use tokens and/or attention")
    return list(dict.fromkeys(costs))


def _sources(config: StepStudyConfig) -> list[Source]:
    sources = bundled_sources(config.datasets) + ([generated_source()] if config.generated else [])
    if not sources:
        raise UsageError("no data: choose bundled --datasets or keep the generated batches")
    return sources


def build_settings(config: StepStudyConfig) -> tuple[list[Setting], int]:
    """Every (source, n, rep, cap, cost, dp) of the grid, and how many were skipped (fewer
    sequences than ``2 * dp``, or a cap below the batch's longest sequence)."""
    from ..problem import Cost

    ns = [n for n in parse_ns(config.n) if n is not None]
    if not ns:
        raise UsageError("--n needs batch sizes (ints)")
    dps = _ints(config.dp, "--dp")
    pps = tuple(_ints(config.pp, "--pp"))
    caps = parse_caps(config.caps)
    costs: list[Any] = parse_costs(config.costs)
    profile = config.cost_profile
    if profile is not None:
        costs = [profile.cost]
    if config.vpp < 1 or config.overhead_tokens < 0:
        raise UsageError("--vpp must be >= 1 and --overhead-tokens >= 0")
    settings, skipped = [], 0
    for source in _sources(config):
        for n in ns:
            for rep in range(config.reps):
                rng = np.random.default_rng(stable_seed(config.seed, "step", source.name, n, rep))
                lengths = tuple(source.batch(n, rng))
                for kind, value in caps:
                    cap = int(value * source.max_length) if kind == "x" else int(value)
                    for cost in costs:
                        overhead = (profile.overhead if profile is not None
                                    else Cost.parse(cost).linear * config.overhead_tokens)
                        for dp in dps:
                            if cap < max(lengths) or n < 2 * dp:
                                skipped += 1
                                continue
                            key = (f"{source.name}|n={n}|rep={rep}|seed={config.seed}|cap={cap}"
                                   f"|cost={cost}|o={overhead}|dp={dp}|vpp={config.vpp}")
                            settings.append(Setting(key, source.name, n, rep, dp, cap, cost,
                                                    overhead, config.vpp, pps, lengths))
    return settings, skipped


def step_tasks(
    settings: Sequence[Setting], methods: Sequence[str], time_limit: float, workers: int = 1,
    deterministic: bool = False,
) -> list[Task]:
    """plan_step: one task per pp; every other method: one task per setting, scored for each pp.
    Time-budgeted methods are exclusive (run after the others, apart) with ``workers`` CP-SAT
    workers; with ``deterministic``, on counted work (a result of the clock's is not reused)."""
    tasks = []
    for s in settings:
        for m in methods:
            timed = m in TIMED
            for pps in ([(pp,) for pp in s.pps] if m == "plan_step" else [s.pps]):
                key = (f"{s.key}|pp={','.join(map(str, pps))}|{m}@{time_limit:g}"
                       + ("|deterministic" if deterministic and timed else ""))
                tasks.append(Task(key, (s, m, pps, time_limit, workers, deterministic),
                                  exclusive=timed, cpus=workers if timed else 1))
    return tasks


# --------------------------------------------------------------------------- one run


def per_rank_agreement(
    lengths: Sequence[int], dp: int, cap: int | None, *, cost: Any = "tokens",
    multiple_of: int = 1, time_limit: float = 0.02, options: Any = None,
) -> list[list[list[int]]]:
    """seqpart inside a trainer's per-rank flow: each rank holds a contiguous chunk of the batch
    (the dispatch order), plans ``partition(k=None)`` on it, the ranks agree on the MAX count
    (rounded up to ``multiple_of``: the all-reduce) and each re-plans its chunk with that count.
    Raises :class:`~seqpart.solver.plan.InfeasibleError` when a rank cannot fill the count."""
    from .._partition import partition

    chunks = np.array_split(np.arange(len(lengths)), dp)
    local = [[int(lengths[i]) for i in c] for c in chunks]
    counts = [partition(x, None, cap, cost=cost, time_limit=time_limit, options=options).k
              for x in local]
    m = -(-max(counts) // multiple_of) * multiple_of
    out = []
    for c, x in zip(chunks, local, strict=True):
        plan = partition(x, m, cap, cost=cost, time_limit=time_limit, options=options)
        out.append([[int(c[i]) for i in b] for b in plan.bins])
    return out


def _schedule(
    s: Setting, method: str, pp: int, time_limit: float, workers: int, deterministic: bool
) -> list[list[list[int]]]:
    from ...heuristics import TRAINER_SCHEDULERS
    from ..options import SolverOptions
    from ..problem import Cost
    from ..step import plan_global, plan_step

    options = SolverOptions(workers=workers, deterministic=deterministic)
    lengths = list(s.lengths)
    if method in TRAINER_SCHEDULERS:
        costs = Cost.parse(s.cost).of(np.asarray(lengths, dtype=np.int64)).tolist()
        return TRAINER_SCHEDULERS[method](lengths, s.dp, s.cap, costs=costs, multiple_of=s.group)
    if method == "plan_global":
        plans = plan_global(lengths, s.dp, s.cap, cost=s.cost, multiple_of=s.group,
                            time_limit=time_limit, options=options)
        return [p.bins for p in plans]
    if method == "per_rank":
        return per_rank_agreement(lengths, s.dp, s.cap, cost=s.cost, multiple_of=s.group,
                                  time_limit=time_limit / 10, options=options)
    return plan_step(lengths, s.dp, s.cap, pp=pp, vpp=s.vpp, multiple_of=s.group, cost=s.cost,
                     overhead=s.overhead, time_limit=time_limit, options=options).ranks


def run_step_task(payload: tuple[Setting, str, tuple[int, ...], float, int, bool]
                  ) -> dict[str, Any]:
    """The runner: one method on one setting, its schedule validated and scored for each pp.
    ``payload``: the setting, the method, the pps, the time limit, the CP-SAT workers and
    whether the timed methods run on counted work (repeatable)."""
    from ..errors import InfeasibleError
    from ..step.model import find_schedule_violations

    s, method, pps, time_limit, workers, deterministic = payload
    record: dict[str, Any] = {
        "setting": s.key, "source": s.source, "n": s.n, "rep": s.rep, "dp": s.dp, "cap": s.cap,
        "cost": str(s.cost), "overhead": s.overhead if isinstance(s.overhead, int) else str(s.overhead),
        "vpp": s.vpp, "method": method, "error": None,
        "time_limit": time_limit, "workers": workers, "deterministic": deterministic,
    }
    t0 = time.perf_counter()
    try:
        sched = _schedule(s, method, pps[0], time_limit, workers, deterministic)
    except (InfeasibleError, ValueError) as err:
        return {**record, "seconds": time.perf_counter() - t0, "valid": False, "error": str(err),
                "m": None, "unequal": False, "over_cap": 0, "pp": {}}
    seconds = time.perf_counter() - t0
    lengths = s.lengths
    counts = [len(r) for r in sched]
    msgs = find_schedule_violations(sched, lengths, s.dp, max(max(counts), 1), s.cap, s.group)
    over = sum(1 for r in sched for mb in r if len(mb) > 1 and sum(lengths[i] for i in mb) > s.cap)
    by_pp = {}
    for pp in pps:
        by_pp[str(pp)] = _score_pp(sched, s, pp)
    return {**record, "seconds": seconds, "valid": not msgs, "why": msgs[:2], "m": max(counts),
            "unequal": len(set(counts)) > 1, "over_cap": over, "pp": by_pp}


def _score_pp(sched: list[list[list[int]]], s: Setting, pp: int) -> dict[str, Any]:
    """One schedule at one pp: the exact makespan of Megatron's schedule in its own order
    ("step") and in the order seqpart finds for it ("step_ordered"), the closed formula's figure
    ("formula") and the step lower bound ("lb"); steps are None when the schedule cannot run
    the count (interleaving needs at least pp micro-batches)."""
    from ..errors import InfeasibleError
    from ..step import formula_step_time, order_schedule, step_lower_bound, step_time

    kw = {"cost": s.cost, "overhead": s.overhead, "pp": pp, "vpp": s.vpp}
    try:
        lb: Any = step_lower_bound(s.lengths, s.dp, s.cap, multiple_of=s.group, **kw)
    except InfeasibleError:
        lb = None
    formula = formula_step_time(sched, s.lengths, **kw)
    try:
        t = step_time(sched, s.lengths, **kw)
        ordered = order_schedule(sched, s.lengths, **kw)[1]
    except ValueError:
        t = ordered = None
    return {"step": None if t is None else float(t),
            "step_ordered": None if ordered is None else float(ordered),
            "formula": float(formula), "lb": None if lb is None else float(lb),
            "formula_over_exact": None if t is None else float(Fraction(formula) / Fraction(t)),
            "ratio": None if not lb or t is None else float(Fraction(t) / Fraction(lb))}


# --------------------------------------------------------------------------- run


@dataclass
class StepStudyOutcome(StudyOutcomeBase):
    rows: list[dict[str, Any]] = field(default_factory=list)
    pps: tuple[int, ...] = ()


def run_step_study(config: StepStudyConfig, say: Callable[[str], None] = lambda _: None
                   ) -> StepStudyOutcome:
    """Build the grid, run what ``OUT/results.jsonl`` does not hold yet, summarise, plot."""
    methods = parse_methods(config.methods)
    if not config.time_limit > 0 or math.isinf(config.time_limit):
        raise UsageError("--time-limit must be a positive number of seconds")
    settings, skipped = build_settings(config)
    # Timed methods run after the others, timed_jobs at a time, CP-SAT on the cores they leave.
    timed_jobs = config.job_counts()[1]
    workers = max(1, (os.cpu_count() or 1) // timed_jobs)
    store = config.open_store()
    out = Path(config.out)
    pps = tuple(_ints(config.pp, "--pp"))
    outcome = StepStudyOutcome(out, store.path, pps=pps)
    t0 = time.perf_counter()
    all_tasks = step_tasks(settings, methods, config.time_limit, workers, config.deterministic)
    records = run_pending(
        config, store, all_tasks, run_step_task, desc="step", say=say,
        grid=f"seqpart step: {len(settings)} settings x {len(methods)} methods "
             f"({len(all_tasks)} runs)",
        how=f" with {workers} CP-SAT worker(s)"
            + (f"; {skipped} grid points skipped (n < 2*dp or cap < longest)" if skipped else ""))
    if records is None:
        outcome.interrupted = True
        return outcome
    outcome.rows = summarize(records, methods, pps)
    outcome.timing_note = format_timing_note(outcome.rows, records)
    write_rows_csv(outcome.rows, out / "step_summary.csv")
    wanted = len({t.key for t in all_tasks})
    outcome.wanted, outcome.missing = wanted, wanted - len(records)
    if config.plots and outcome.rows:
        outcome.add_plots(lambda: [write_plot(outcome.rows, pps, out)])
    outcome.seconds = time.perf_counter() - t0
    return outcome
