"""The study engine's executors without Ray: the local one, failure records, the flags, and the
message a missing Ray gives (the Ray executor itself: tests/integration/test_ray.py)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from seqpart.solver.cli import build_parser
from seqpart.solver.errors import UsageError
from seqpart.solver.study.methods import StudyConfig, run_study
from seqpart.solver.study.runner import (
    FAILED,
    LocalExecutor,
    ResultStore,
    Task,
    TaskExecutor,
    open_executor,
    pool_map,
    run_tasks,
)


def _square(payload: int) -> dict[str, Any]:
    return {"x": payload, "y": payload * payload, "pid": os.getpid()}


def _tasks(n: int) -> list[Task]:
    return [Task(f"x={x}", x, exclusive=x % 3 == 2) for x in range(n)]


def test_the_local_executor_is_the_process_pool(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with open_executor("local", 2) as executor:
        assert isinstance(executor, LocalExecutor) and isinstance(executor, TaskExecutor)
        assert pool_map(executor, abs, [-1, 2, -3]) == [1, 2, 3]
        outcome = run_tasks(_tasks(7), _square, store, jobs=2, exclusive_jobs=1, pool=executor,
                            progress=False)
    assert outcome.ran == 7 and outcome.failed == 0
    records = store.records()
    assert sorted(r["y"] for r in records) == sorted(x * x for x in range(7))
    assert any(r["pid"] != os.getpid() for r in records if "run" not in r)  # on the pool
    assert {r["run"]["at_a_time"] for r in records if "run" in r} == {1}
    with open_executor("local", 1) as executor:  # one job: this process, no pool
        assert executor == LocalExecutor(None)


class _LosesOne:
    """An executor whose worker for one key dies past its retries: what a cluster reports."""

    def __init__(self, lost: str) -> None:
        self.lost = lost

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        return [fn(x) for x in items]

    def at_a_time(self, width: int, cpus: int) -> int:
        return 7

    def stream(self, call: Callable[[Task], dict[str, Any]], tasks: Sequence[Task], width: int,
               failed: Callable[[Task, str], dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for task in tasks:
            yield failed(task, "worker died") if task.key == self.lost else call(task)


def test_a_task_lost_by_the_executor_is_recorded_failed_and_resumed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    tasks = _tasks(6)
    outcome = run_tasks(tasks, _square, store, pool=_LosesOne("x=2"), progress=False)
    assert (outcome.ran, outcome.failed, outcome.interrupted) == (6, 1, False)
    assert "1 task(s) failed" in capsys.readouterr().err
    # The failure is written (never silently lost) but is not a result: a resume retries it.
    assert store.failures() == [{"key": "x=2", FAILED: "worker died"}]
    assert sorted(store.keys()) == ["x=0", "x=1", "x=3", "x=4", "x=5"]
    assert [t.key for t in store.pending(tasks)] == ["x=2"]
    timed = [r for r in store.records() if "run" in r]
    assert timed and all(r["run"]["at_a_time"] == 7 for r in timed)  # the executor's figure
    run_tasks(store.pending(tasks), _square, store, progress=False)
    assert store.failures() == [] and store.pending(tasks) == []
    assert sorted(r["x"] for r in store.records()) == list(range(6))


def test_a_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'seqpart\[ray\]'"), open_executor("ray", 2):
        pass
    config = StudyConfig(methods="lpt", datasets="none", n="8", k="2", out=str(tmp_path),
                         executor="ray", plots=False, progress=False)
    with pytest.raises(UsageError, match=r"seqpart\[ray\]"):
        run_study(config)


def test_executor_flags_on_study_and_step() -> None:
    parser = build_parser()
    for command in ("study", "step"):
        args = parser.parse_args([command, "--executor", "ray", "--address", "auto"])
        assert (args.executor, args.address) == ("ray", "auto")
        args = parser.parse_args([command])
        assert (args.executor, args.address) == ("local", None)
    with pytest.raises(UsageError, match="--address is for --executor ray"), open_executor(
            "local", 1, address="auto"):
        pass
    with pytest.raises(UsageError, match="use 'local' or 'ray'"), open_executor("dask", 1):
        pass


@pytest.mark.ray  # needs Ray: CI's second step runs it
def test_an_address_nothing_answers_at_fails_at_once() -> None:
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'seqpart[ray]'")
    with socket.socket() as sock:  # a loopback port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UsageError, match="no Ray cluster answers there"), open_executor(
            "ray", 1, address=f"127.0.0.1:{port}"):
        pass
    with pytest.raises(UsageError, match="use HOST:PORT"), open_executor("ray", 1, address="x"):
        pass


def test_the_step_on_a_users_data_refuses_an_executor(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from seqpart.solver.cli import main

    data = tmp_path / "lengths.json"
    data.write_text("[100, 200, 300, 400, 500, 600]")
    assert main(["step", "--data", str(data), "--dp", "2", "--executor", "ray"]) == 2
    assert "--executor and --address apply to the step study's grid" in capsys.readouterr().err
