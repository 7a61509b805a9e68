"""A small engine for studies: run keyed tasks on a process pool, append each record to
``results.jsonl`` as it finishes, resume from it, and show progress.

It knows nothing about partitioning; :mod:`seqpart.solver.study.methods` (the method study) is built on
it, and another kind of study can be too:

- :class:`Task` -- ``key`` (unique and stable across runs: it is how a resumed study knows what
  is done), ``payload`` (picklable, handed to the runner) and ``exclusive`` (timed: see below).
- :class:`ResultStore` -- ``results.jsonl``, one JSON record per line. ``records()`` reads every
  record (a line cut short by an interruption is skipped; the last record of a key wins), so a
  summary made from it covers earlier runs too; ``keys()`` the done keys; ``pending(tasks)`` the
  tasks not done yet.
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
- :func:`worker_pool` / :func:`pool_map` -- one process pool for the tasks and for side
  computations, so workers start once.

A new study writes its task list with stable keys and a module-level runner, then::

    store = ResultStore(out / "results.jsonl")
    with worker_pool(jobs) as pool:
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm


@dataclass(frozen=True)
class Task:
    """One unit of a study: ``runner(payload)`` gives its record, stored under ``key``."""

    key: str
    payload: Any
    #: Its measured time is a result (e.g. a time-budgeted solver): run apart from the other
    #: tasks, at most ``exclusive_jobs`` at a time (see :func:`run_tasks`).
    exclusive: bool = False


class ResultStore:
    """``results.jsonl``: one JSON object per line, each with a ``key``; appended, never rewritten."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        """Every record, one per key (the last one written wins); torn lines are skipped."""
        return list({r["key"]: r for r in read_results(self.path)}.values())

    def keys(self) -> set[str]:
        return {r["key"] for r in read_results(self.path)}

    def pending(self, tasks: Iterable[Task]) -> list[Task]:
        done = self.keys()
        return [t for t in tasks if t.key not in done]

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


def pool_map(pool: ProcessPoolExecutor | None, fn: Callable[[Any], Any], items: Iterable[Any]
             ) -> list[Any]:
    """``[fn(x) for x in items]``, on the pool when there is one (order kept)."""
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


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_tasks` did: records written, and whether Ctrl-C cut it short."""

    ran: int
    interrupted: bool


def run_tasks(
    tasks: Sequence[Task],
    runner: Callable[[Any], dict[str, Any]],
    store: ResultStore,
    *,
    jobs: int = 1,
    exclusive_jobs: int = 1,
    pool: ProcessPoolExecutor | None = None,
    progress: bool = True,
    desc: str = "tasks",
) -> RunOutcome:
    """Run each task and append its record to ``store`` as it completes (see the module doc).

    Other tasks run first, ``jobs`` at a time on ``pool`` (or on a pool made here; none for
    ``jobs == 1``). Exclusive (timed) tasks run after them, ``exclusive_jobs`` at a time (1: in
    this process, one after another), so nothing else of the study shares the cores with them;
    each exclusive record gets ``run = {wall_s, cpu_s, load_avg_1m, cores, pid, at_a_time}``:
    the CPU the process had during the task and the machine's load, which say whether something
    else competed.
    ``runner`` must be picklable (a module-level function) when a pool is used.
    """
    call = _Call(runner, exclusive_jobs)
    untimed = [t for t in tasks if not t.exclusive]
    timed = [t for t in tasks if t.exclusive]
    needs_pool = (jobs > 1 and untimed) or (exclusive_jobs > 1 and timed)
    ran = 0
    with store.appender() as append, (
        worker_pool(max(jobs, exclusive_jobs)) if pool is None and needs_pool else _given(pool)
    ) as executor, tqdm(total=len(tasks), desc=desc, unit="run", disable=not progress,
                        file=sys.stderr, dynamic_ncols=True,
                        mininterval=0.2 if sys.stderr.isatty() else 10.0) as bar:

        def save(record: dict[str, Any]) -> None:
            nonlocal ran
            append(record)
            ran += 1
            bar.update()

        try:
            for group, width in ((untimed, jobs), (timed, exclusive_jobs)):
                if executor is None or width <= 1:
                    for task in group:
                        save(call(task))
                else:
                    _run_on_pool(group, call, executor, save, width)
        except KeyboardInterrupt:
            # One Ctrl-C is enough: a second one must not cut the wrap-up short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return RunOutcome(ran, True)
    return RunOutcome(ran, False)


@contextmanager
def _given(pool: ProcessPoolExecutor | None) -> Iterator[ProcessPoolExecutor | None]:
    yield pool


def _run_on_pool(
    tasks: Sequence[Task],
    call: _Call,
    executor: ProcessPoolExecutor,
    save: Callable[[dict[str, Any]], None],
    width: int,
) -> None:
    """At most ``width`` tasks in flight: a bound on concurrency (timed tasks), and memory kept
    flat with Ctrl-C stopping promptly."""
    pending: set[Future[dict[str, Any]]] = set()
    for task in tasks:
        pending.add(executor.submit(call, task))
        if len(pending) >= width:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                save(future.result())
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in finished:
            save(future.result())
