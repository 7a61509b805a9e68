"""A small engine for studies: run keyed tasks on a process pool, append each record to
``results.jsonl`` as it finishes, resume from it, and show progress.

It knows nothing about partitioning; :mod:`seqpart.solver.study.methods` (the method study) is built on
it, and another kind of study can be too:

- :class:`Task` -- ``key`` (unique and stable across runs: it is how a resumed study knows what
  is done), ``payload`` (picklable, handed to the runner) and ``exclusive`` (timed: see below).
- :class:`ResultStore` -- ``results.jsonl``, one JSON record per line. ``records()`` reads every
  record (a line cut short by an interruption is skipped; the last record of a key wins), so a
  summary made from it covers earlier runs too; ``keys()`` the done keys; ``pending(tasks)`` the
  tasks not done yet; ``to_run(tasks, limit)`` those (at most ``limit``) and how many are done.
- :func:`run_tasks` ``(tasks, runner, store, jobs=, exclusive_jobs=, pool=, progress=,
  desc=)`` -- calls ``runner(task.payload)`` for each task (``runner`` is a module-level function
  returning a JSON-able dict), adds ``"key": task.key`` and appends the record to the store as
  soon as it finishes, with a tqdm progress bar on stderr. Tasks run on ``jobs`` processes,
  except ``exclusive`` ones: those run afterwards, while nothing else of the study runs,
  ``exclusive_jobs`` at a time (default 1: in this process, one after another) -- for anything
  timed, whose figures must not depend on how many siblings share the cores. Their records get
  ``run = {wall_s, cpu_s, load_avg_1m, cores, pid, at_a_time}`` so a summary can show whether anything
  else competed. Ctrl-C stops it cleanly: finished records are kept and it returns
  ``RunOutcome(interrupted=True)``; running again with ``store.pending(tasks)`` resumes.
- :class:`RunConfig` -- the settings every study shares (batches per setting, seed, processes,
  output folder, limit, plots, progress, executor); each study's config extends it.
- :func:`run_pending` ``(config, store, tasks, runner, ...)`` -- a study's run on its config:
  what is not done yet, announced, then the records; :class:`StudyOutcomeBase` -- what every
  study's outcome holds (folder, counts, plots or why not, timing note, time).
- :func:`worker_pool` / :func:`pool_map` -- one process pool for the tasks and for side
  computations, so workers start once.
- :func:`open_executor` ``(kind, jobs, address=)`` -- where the tasks run: ``"local"`` (this
  machine's process pool, :class:`LocalExecutor`) or ``"ray"`` (a Ray cluster, or a local Ray:
  :mod:`seqpart.solver.study.ray_executor`). ``run_tasks(pool=...)`` and ``pool_map`` take either;
  the store, resume and summary do not change. A task whose worker died (after the executor's
  retries) gets a failure record (``task_failed``): it is not done, so the next run retries it.

A new study writes its task list with stable keys and a module-level runner, then::

    store = ResultStore(out / "results.jsonl")
    with open_executor("local", jobs) as pool:  # or open_executor("ray", jobs, address=...)
        outcome = run_tasks(store.pending(tasks), runner, store, jobs=jobs, pool=pool)
    records = store.records()  # this run's and earlier runs' records, to summarise
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tqdm import tqdm

from ..errors import UsageError


@dataclass(frozen=True)
class Task:
    """One unit of a study: ``runner(payload)`` gives its record, stored under ``key``."""

    key: str
    payload: Any
    #: Its measured time is a result (e.g. a time-budgeted solver): run apart from the other
    #: tasks, at most ``exclusive_jobs`` at a time (see :func:`run_tasks`).
    exclusive: bool = False
    #: Cores the runner keeps busy (a solver's threads): what a cluster executor reserves for it.
    cpus: int = 1


#: The field of a failure record: the task's worker died (after the executor's retries), so the
#: record says why and the task counts as not done (resume runs it again).
FAILED = "task_failed"


class ResultStore:
    """``results.jsonl``: one JSON object per line, each with a ``key``; appended, never rewritten."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        """Every result, one per key (the last one written wins); torn lines and failure records
        (:data:`FAILED`) are skipped."""
        return list({r["key"]: r for r in read_results(self.path) if FAILED not in r}.values())

    def keys(self) -> set[str]:
        """The keys with a result: the tasks that are done."""
        return {r["key"] for r in read_results(self.path) if FAILED not in r}

    def failures(self) -> list[dict[str, Any]]:
        """The failure records of tasks that have no result (yet): what a resume will retry."""
        records = read_results(self.path)
        done = {r["key"] for r in records if FAILED not in r}
        return list({r["key"]: r for r in records if FAILED in r and r["key"] not in done}.values())

    def pending(self, tasks: Iterable[Task]) -> list[Task]:
        done = self.keys()
        return [t for t in tasks if t.key not in done]

    def to_run(self, tasks: Sequence[Task], limit: int | None = None) -> tuple[list[Task], int]:
        """A study's run: the tasks not done yet (the first ``limit`` of them, when given) and
        how many of ``tasks`` are done already."""
        pending = self.pending(tasks)
        resumed = len(tasks) - len(pending)
        return (pending if limit is None else pending[:limit]), resumed

    @contextmanager
    def appender(self) -> Iterator[Callable[[dict[str, Any]], None]]:
        """A function that appends one record and flushes it (so a kill loses at most one)."""
        # A killed run can leave half a line: start on a fresh one so no new record is glued to it.
        torn = self.path.exists() and self.path.stat().st_size > 0 and not (
            self.path.read_bytes().endswith(b"\n")
        )
        with self.path.open("a", encoding="utf-8") as fh:
            if torn:
                fh.write("\n")

            def append(record: dict[str, Any]) -> None:
                fh.write(json.dumps(record) + "\n")
                fh.flush()

            yield append


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


@dataclass(frozen=True)
class RunConfig:
    """How a study runs, whatever it studies: the settings the method study, the step study and
    the dynamic-CP study share (each study's config extends it with its grid). Each is one flag
    of every study command (``--reps``, ``--seed``, ``--jobs``, ...)."""

    reps: int = 1
    """Batches drawn per setting of the grid."""

    seed: int = 0
    """Seed of the drawn batches: with the same seed a study draws the same batches (its keys
    hold it, so results of another seed are not mistaken for these)."""

    jobs: int | None = None
    """Processes for the untimed runs; None: all cores."""

    timed_jobs: int | None = None
    """Time-budgeted runs at a time, run after the others and apart, so that their times do not
    depend on siblings sharing the cores; None: as ``jobs``."""

    out: str = "seqpart-study"
    """Output folder: ``results.jsonl`` (running the same study again resumes from it), the
    summary and the plots. The method study's default; the others have their own."""

    limit: int | None = None
    """At most this many new results in this run (the rest stay for the next); None: all."""

    plots: bool = True
    """Write the study's plots (matplotlib, the ``plot`` extra)."""

    progress: bool = True
    """Show a progress bar on stderr."""

    executor: str = "local"
    """Where the runs go: ``"local"`` (this machine's processes) or ``"ray"`` (the ``ray``
    extra); see :func:`open_executor`."""

    address: str | None = None
    """With ``executor="ray"``: the Ray cluster to join; None: a local Ray of ``jobs`` CPUs."""

    def job_counts(self) -> tuple[int, int]:
        """``(jobs, timed_jobs)`` with their defaults filled in."""
        jobs = self.jobs or os.cpu_count() or 1
        return jobs, self.timed_jobs or jobs

    def open_store(self) -> ResultStore:
        """``out/results.jsonl``, its folder made; a folder that cannot be made is a usage error
        naming ``--out``."""
        out = Path(self.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"--out {self.out}: cannot create it ({err.strerror})") from None
        return ResultStore(out / "results.jsonl")


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; the main process stops the pool and saves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def worker_pool(jobs: int) -> Iterator[ProcessPoolExecutor | None]:
    """A process pool of ``jobs`` workers that ignore Ctrl-C, or None for ``jobs == 1``."""
    executor = ProcessPoolExecutor(jobs, initializer=_worker_init) if jobs > 1 else None
    try:
        yield executor
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def pool_map(pool: ProcessPoolExecutor | TaskExecutor | None, fn: Callable[[Any], Any],
             items: Iterable[Any]) -> list[Any]:
    """``[fn(x) for x in items]``, on the pool or executor when there is one (order kept)."""
    if isinstance(pool, TaskExecutor):
        return pool.map(fn, items)
    return list(pool.map(fn, items) if pool is not None else map(fn, items))


@contextmanager
def keep_sigint() -> Iterator[None]:
    """CP-SAT (ortools 9.15) leaves SIGINT at the OS default after a solve, so a later Ctrl-C
    would kill the study without a word; put the handler that was there back."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


@dataclass(frozen=True)
class _Call:
    """A picklable ``runner(payload)``: the record gets the key, and for a timed task how much
    CPU the process had while it ran (see :func:`run_tasks`)."""

    runner: Callable[[Any], dict[str, Any]]
    exclusive_jobs: int = 1

    def __call__(self, task: Task) -> dict[str, Any]:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        wall, cpu = time.perf_counter(), time.process_time()
        with keep_sigint():
            record = self.runner(task.payload)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if task.exclusive:
            record = {**record, "run": {"wall_s": wall, "cpu_s": cpu, "load_avg_1m": load,
                                        "cores": os.cpu_count(), "pid": os.getpid(),
                                        "at_a_time": self.exclusive_jobs}}
        return {"key": task.key, **record}


@runtime_checkable
class TaskExecutor(Protocol):
    """Where a study's tasks run: :class:`LocalExecutor` (this machine's process pool) or
    :class:`~seqpart.solver.study.ray_executor.RayExecutor` (a Ray cluster)."""

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` (order kept): side computations, like the smallest k."""
        ...

    def stream(self, call: Callable[[Task], dict[str, Any]], tasks: Sequence[Task], width: int,
               failed: Callable[[Task, str], dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``call(task)`` of every task, yielded as each finishes, at most ``width`` at a time
        (a cluster may run more: its CPUs decide). A task whose worker died, after the
        executor's retries, yields ``failed(task, why)``. Closing the iterator (Ctrl-C)
        cancels the tasks still out."""
        ...

    def at_a_time(self, width: int, cpus: int) -> int:
        """How many tasks of ``cpus`` cores :meth:`stream` runs at once for this ``width``."""
        ...


@dataclass(frozen=True)
class LocalExecutor:
    """This machine's process pool (None: everything in this process, one task at a time)."""

    pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        return pool_map(self.pool, fn, items)

    def at_a_time(self, width: int, cpus: int) -> int:
        return width if self.pool is not None and width > 1 else 1

    def stream(self, call: Callable[[Task], dict[str, Any]], tasks: Sequence[Task], width: int,
               failed: Callable[[Task, str], dict[str, Any]]) -> Iterator[dict[str, Any]]:
        # A pool worker that dies breaks the pool (BrokenProcessPool): the run stops, every
        # record written so far is kept, and the next run resumes; ``failed`` is not needed.
        if self.pool is None or width <= 1:
            for task in tasks:
                yield call(task)
            return
        pending: set[Future[dict[str, Any]]] = set()
        try:
            # At most ``width`` in flight: a bound on concurrency (timed tasks), and memory kept
            # flat with Ctrl-C stopping promptly.
            for task in tasks:
                pending.add(self.pool.submit(call, task))
                if len(pending) >= width:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield from (future.result() for future in finished)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                yield from (future.result() for future in finished)
        finally:
            for future in pending:
                future.cancel()


@contextmanager
def open_executor(kind: str = "local", jobs: int = 1, *, address: str | None = None
                  ) -> Iterator[TaskExecutor]:
    """The executor a study runs on, started here and stopped on exit.

    ``"local"``: a process pool of ``jobs`` workers (none for ``jobs == 1``). ``"ray"``: the Ray
    cluster at ``address`` (``"auto"``: the one this machine belongs to), or with no address a
    local Ray of ``jobs`` CPUs started here; Ray is the ``ray`` extra (see
    :mod:`~seqpart.solver.study.ray_executor`).
    """
    if kind == "local":
        if address is not None:
            raise UsageError("--address is for --executor ray: drop it, or add --executor ray")
        with worker_pool(jobs) as pool:
            yield LocalExecutor(pool)
    elif kind == "ray":
        from .ray_executor import ray_executor

        with ray_executor(address=address, num_cpus=jobs) as executor:
            yield executor
    else:
        raise UsageError(f"--executor {kind!r}: use 'local' or 'ray'")


def add_executor_arguments(parser: Any) -> None:
    """``--executor`` and ``--address`` on a study's command (``seqpart study``, ``seqpart step``)."""
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the runs go: this machine's processes (default) or Ray "
                             "(pip install 'seqpart[ray]')")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="with --executor ray: the Ray cluster to join (host:port, ray://..., "
                             "or 'auto'); without it a local Ray of --jobs CPUs is started")


#: What a study says instead of its plots when matplotlib (the ``plot`` extra) is missing.
PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'seqpart[plot]')"


@dataclass
class StudyOutcomeBase:
    """What every study's run did, for the CLI to print (each study's outcome extends it)."""

    out: Path
    results_path: Path
    missing: int = 0
    wanted: int = 0
    plots: list[Path] = field(default_factory=list)
    plots_skipped: str | None = None
    timing_note: str = ""
    interrupted: bool = False
    seconds: float = 0.0

    def add_plots(self, write: Callable[..., list[Path]], *args: Any) -> None:
        """``write(*args)``'s plots, or without matplotlib the note that says why there are none
        (the plot writers import it inside, so a missing extra shows here)."""
        try:
            self.plots = write(*args)
        except ImportError:
            self.plots_skipped = PLOTS_SKIPPED


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_tasks` did: records written (``failed`` of them failure records), and
    whether Ctrl-C cut it short."""

    ran: int
    interrupted: bool
    failed: int = 0


def _failure(task: Task, why: str) -> dict[str, Any]:
    return {"key": task.key, FAILED: why}


def run_tasks(
    tasks: Sequence[Task],
    runner: Callable[[Any], dict[str, Any]],
    store: ResultStore,
    *,
    jobs: int = 1,
    exclusive_jobs: int = 1,
    pool: ProcessPoolExecutor | TaskExecutor | None = None,
    progress: bool = True,
    desc: str = "tasks",
) -> RunOutcome:
    """Run each task and append its record to ``store`` as it completes (see the module doc).

    Other tasks run first, ``jobs`` at a time on ``pool`` (a process pool or a
    :class:`TaskExecutor`; with None a pool is made here, none for ``jobs == 1``). Exclusive
    (timed) tasks run after them, ``exclusive_jobs`` at a time (1: in this process, one after
    another; on Ray, as many as the cluster has CPUs for, each holding ``task.cpus``), so
    nothing else of the study shares the cores with them; each exclusive record gets
    ``run = {wall_s, cpu_s, load_avg_1m, cores, pid, at_a_time}``: the CPU the process had
    during the task and the machine's load, which say whether something else competed.
    ``runner`` must be picklable (a module-level function) when a pool is used.
    """
    untimed = [t for t in tasks if not t.exclusive]
    timed = [t for t in tasks if t.exclusive]
    needs_pool = (jobs > 1 and untimed) or (exclusive_jobs > 1 and timed)
    ran = failed = 0
    with store.appender() as append, _executor(pool, max(jobs, exclusive_jobs) if needs_pool else 1
                                               ) as executor, tqdm(
        total=len(tasks), desc=desc, unit="run", disable=not progress, file=sys.stderr,
        dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 10.0,
    ) as bar:
        try:
            for group, width in ((untimed, jobs), (timed, exclusive_jobs)):
                if not group:
                    continue
                call = _Call(runner, executor.at_a_time(width, max(t.cpus for t in group)))
                with closing(executor.stream(call, group, width, _failure)) as records:
                    for record in records:
                        append(record)
                        ran += 1
                        failed += FAILED in record
                        bar.update()
        except KeyboardInterrupt:
            # One Ctrl-C is enough: a second one must not cut the wrap-up short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return RunOutcome(ran, True, failed)
    if failed:
        why = next((r[FAILED] for r in store.failures()), "")
        sys.stderr.write(f"seqpart: {failed} task(s) failed and are recorded as failed in "
                         f"{store.path} ({why}); run again to retry them\n")
    return RunOutcome(ran, False, failed)


@contextmanager
def _executor(pool: ProcessPoolExecutor | TaskExecutor | None, jobs: int) -> Iterator[TaskExecutor]:
    """The given executor, the given pool as one, or a pool of ``jobs`` made (and stopped) here."""
    if isinstance(pool, TaskExecutor):
        yield pool
    elif pool is None and jobs > 1:
        with worker_pool(jobs) as made:
            yield LocalExecutor(made)
    else:
        yield LocalExecutor(pool)


def run_pending(config: RunConfig, store: ResultStore, all_tasks: Sequence[Task],
                runner: Callable[[Any], dict[str, Any]], *, desc: str, say: Callable[[str], None],
                grid: str, how: str = "") -> list[dict[str, Any]] | None:
    """A study's run on ``config``'s executor: the tasks ``store`` does not hold yet (at most
    ``config.limit``), announced with ``say`` (``grid`` says what the study holds, ``how`` is
    added to the line); then every record of ``all_tasks`` in the store, or None when Ctrl-C
    cut the run short."""
    jobs, timed_jobs = config.job_counts()
    wanted = {t.key for t in all_tasks}
    tasks, resumed = store.to_run(all_tasks, config.limit)
    say(f"{grid}; {resumed} already in {store.path}, {len(tasks)} to run on {jobs} process(es), "
        f"time-budgeted ones {timed_jobs} at a time{how}")
    with open_executor(config.executor, max(jobs, timed_jobs), address=config.address) as pool:
        ran = run_tasks(tasks, runner, store, jobs=jobs, exclusive_jobs=timed_jobs, pool=pool,
                        progress=config.progress, desc=desc)
    if ran.interrupted:
        return None
    return [r for r in store.records() if r["key"] in wanted]
