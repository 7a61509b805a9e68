"""The study engine (seqpart.solver.study.runner) with a toy runner: what another study relies on."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from seqpart.solver.study.runner import ResultStore, Task, run_tasks, worker_pool


def _square(payload: tuple[int, str]) -> dict:
    x, _ = payload
    if x % 2:  # the odd ones are "timed": burn a little CPU so the record has some
        deadline = time.process_time() + 0.01
        while time.process_time() < deadline:
            pass
    return {"x": x, "y": x * x, "pid": os.getpid()}


def _tasks(n: int) -> list[Task]:
    return [Task(f"x={x}", (x, "payload"), exclusive=bool(x % 2)) for x in range(n)]


def test_runs_every_task_once_and_resumes(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    tasks = _tasks(6)
    first = run_tasks(store.pending(tasks)[:3], _square, store, progress=False)
    assert first == first.__class__(ran=3, interrupted=False)
    assert store.keys() == {"x=0", "x=1", "x=2"}
    # A torn last line (a killed run) is skipped, and the next record starts on a new line.
    with store.path.open("a") as fh:
        fh.write('{"key": "x=3", "y"')
    assert [t.key for t in store.pending(tasks)] == ["x=3", "x=4", "x=5"]
    second = run_tasks(store.pending(tasks), _square, store, progress=False)
    assert second.ran == 3
    records = store.records()
    assert sorted(r["key"] for r in records) == [f"x={x}" for x in range(6)]
    assert all(r["y"] == r["x"] ** 2 for r in records)
    assert run_tasks(store.pending(tasks), _square, store, progress=False).ran == 0


def test_exclusive_tasks_run_last_in_this_process_with_their_cpu(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    run_tasks(_tasks(6), _square, store, jobs=2, exclusive_jobs=1, progress=False)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    order = [r["x"] % 2 for r in lines]
    assert order == sorted(order)  # every untimed task finished before the first timed one
    timed = [r for r in lines if r["x"] % 2]
    assert all(r["pid"] == os.getpid() for r in timed)  # one at a time, here
    assert any(r["pid"] != os.getpid() for r in lines if not r["x"] % 2)  # on the pool
    for r in timed:
        assert r["run"]["cpu_s"] >= 0.009 and r["run"]["wall_s"] >= r["run"]["cpu_s"] * 0.5
    assert all("run" not in r for r in lines if not r["x"] % 2)


def test_a_given_pool_is_reused(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with worker_pool(2) as pool:
        assert pool is not None
        run_tasks(_tasks(4), _square, store, jobs=2, exclusive_jobs=2, pool=pool,
                  progress=False)
        pids = {r["pid"] for r in store.records()}
    assert os.getpid() not in pids and len(store.records()) == 4
