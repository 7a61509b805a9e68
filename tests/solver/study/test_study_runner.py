"""The study engine (seqpart.solver.study.runner) with a toy runner: what another study relies on."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import time
from pathlib import Path

import pytest

from seqpart.solver.errors import UsageError
from seqpart.solver.study.cp import CPStudyConfig
from seqpart.solver.study.methods import StudyConfig
from seqpart.solver.study.runner import ResultStore, RunConfig, Task, run_tasks, worker_pool
from seqpart.solver.study.step_study import StepStudyConfig


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


def test_the_three_studies_share_one_run_config(tmp_path: Path) -> None:
    """The method, step and dynamic-CP studies take their run settings from RunConfig (one
    definition, each field documented), each with its own output folder."""
    run = {f.name for f in dataclasses.fields(RunConfig)}
    assert {"reps", "seed", "jobs", "timed_jobs", "out", "limit", "executor"} <= run
    configs = (StudyConfig, StepStudyConfig, CPStudyConfig)
    assert all(issubclass(c, RunConfig) for c in configs)
    assert len({c().out for c in configs}) == 3  # no study writes into another's folder by default
    body = ast.parse(inspect.getsource(RunConfig)).body[0].body
    pairs = zip(body[:-1], body[1:], strict=True)  # a field, then its docstring
    documented = {a.target.id for a, doc in pairs if isinstance(a, ast.AnnAssign)
                  and isinstance(a.target, ast.Name) and isinstance(doc, ast.Expr)
                  and isinstance(doc.value, ast.Constant)}
    assert documented == run, run - documented
    assert RunConfig(jobs=3).job_counts() == (3, 3)
    assert RunConfig(jobs=3, timed_jobs=1).job_counts() == (3, 1)
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="--out"):
        RunConfig(out=str(tmp_path / "file" / "sub")).open_store()
    assert RunConfig(out=str(tmp_path / "new")).open_store().path == tmp_path / "new" / "results.jsonl"
