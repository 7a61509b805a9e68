"""Studies on Ray and central planning in a Ray single-controller trainer, on a local Ray.

Every test here uses a local Ray of 2 CPUs on this machine, started and stopped by the tests:
the CLI's test has its own (``--executor ray`` with no address starts one), the others share
the module fixture's, started the same way. No test joins any other address. Marked ``ray`` and
left out of a plain ``python -m pytest`` (each Ray start takes seconds): ``python -m pytest -m
ray`` runs them.
"""

from __future__ import annotations

import _thread
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# The local Rays these tests start stay on the loopback address (before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'seqpart[ray]'")

from seqpart.solver.study.methods import StudyConfig, build_instances, method_task, run_study  # noqa: E402
from seqpart.solver.study.ray_executor import ray_executor  # noqa: E402
from seqpart.solver.study.runner import FAILED, ResultStore, Task, open_executor, run_tasks  # noqa: E402
from seqpart.solver.study.step_study import StepStudyConfig, run_step_study  # noqa: E402

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
CPUS = 2
UNTIMED = "lpt,karmarkar_karp,first_fit_decreasing,capped_balance"


@pytest.fixture(scope="module")
def local_ray() -> Any:
    """A local Ray of 2 CPUs, started as ``--executor ray`` starts one with no address, and
    stopped at the end; the toy runners below travel by value (a worker cannot import a test
    module). Executors opened inside it join it and leave it running."""
    assert not ray.is_initialized()
    with ray_executor(num_cpus=CPUS):
        assert ray.cluster_resources()["CPU"] == CPUS
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        yield ray
    assert not ray.is_initialized()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Records by key without the measured time: what must not depend on the executor."""
    return {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in records}


# --------------------------------------------------------------------------- the CLI


def _session_processes(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "sid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if line.split()[0] == str(sid) and not line.split()[1].startswith("Z")]


def test_cli_study_on_a_local_ray_stops_on_ctrl_c_and_resumes(tmp_path: Path) -> None:
    """``seqpart study --executor ray``, no address: the CLI starts a local Ray and stops it.
    Ctrl-C (SIGINT to the whole process group, as a terminal sends it) exits 130 with every
    record whole, and leaves no Ray process running; a resume (on the local pool: the store
    does not depend on the executor) finishes every task exactly once."""
    out = tmp_path / "study"
    cmd = [sys.executable, "-m", "seqpart.solver.cli", "study", "--methods",
           f"{UNTIMED},partition@0.3", "--datasets", "code_humaneval_pypi", "--n", "64,256",
           "--k", "min,min+1,min+3", "--jobs", str(CPUS), "--out", str(out), "--no-plots"]
    proc = subprocess.Popen([*cmd, "--executor", "ray"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            results = out / "results.jsonl"
            if results.exists() and results.read_text().count("\n") >= 3:
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while _session_processes(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_processes(proc.pid) == [], "Ray processes outlived the study"
    finally:
        if proc.poll() is None or _session_processes(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode == 0:
        pytest.skip("the study finished before the Ctrl-C landed (machine idle and fast)")
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    first = _lines(out / "results.jsonl")
    assert len({r["key"] for r in first}) == len(first)  # every line whole, no key twice
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    records = _lines(out / "results.jsonl")
    assert set(Counter(r["key"] for r in records).values()) == {1}, "a task written twice"
    assert len(records) > len(first) and not any(FAILED in r for r in records)
    assert "lpt" in done.stdout and "partition@0.3" in done.stdout


# --------------------------------------------------------------------------- the same records


def test_untimed_method_study_gives_the_local_pools_records(local_ray: Any, tmp_path: Path
                                                            ) -> None:
    """The untimed methods on Ray give the records the local pool gives (timings aside), the
    smallest-k search included; the summary is made from them the same way."""
    base = dict(methods=UNTIMED, datasets="code_humaneval_pypi,math_sft_gsm8k_train", n="64,256",
                k="min,min+2,3", caps="1x,2x", jobs=CPUS, plots=False, progress=False)
    local = run_study(StudyConfig(**base, out=str(tmp_path / "local")))
    on_ray = run_study(StudyConfig(**base, out=str(tmp_path / "ray"), executor="ray"))
    a, b = (_untimed(_lines(o.results_path)) for o in (local, on_ray))
    assert len(a) == local.wanted > 50 and a == b
    # The same table too (its means summed in the order records arrived: equal to rounding).
    quality = ("runs", "valid_rate", "over_cap_bins", "empty_bins", "mean_gap", "max_gap")
    assert [r["method"] for r in local.rows] == [r["method"] for r in on_ray.rows]
    for mine, theirs in zip(local.rows, on_ray.rows, strict=True):
        assert [theirs[c] for c in quality] == pytest.approx([mine[c] for c in quality])


def test_untimed_step_study_gives_the_local_pools_records(local_ray: Any, tmp_path: Path) -> None:
    base = dict(methods="slime_kk,verl,megatron,prime_rl", datasets="code_humaneval_pypi",
                generated=True, n="64", dp="2,4", pp="1,4", jobs=CPUS, plots=False, progress=False)
    local = run_step_study(StepStudyConfig(**base, out=str(tmp_path / "local")))
    on_ray = run_step_study(StepStudyConfig(**base, out=str(tmp_path / "ray"), executor="ray"))
    a, b = (_untimed(_lines(o.results_path)) for o in (local, on_ray))
    assert len(a) == local.wanted > 10 and a == b


def test_a_batch_goes_to_the_object_store_once(local_ray: Any, tmp_path: Path) -> None:
    """Four methods x two caps x three counts of each batch: the lengths are stored once (an
    instance travels as a small shell referring to them), and the runner once per group of
    tasks."""
    config = StudyConfig(methods=UNTIMED, datasets="math_sft_gsm8k_train", generated=False, n="512",
                         k="3,5,min", caps="1x,2x", reps=2, out=str(tmp_path))
    instances, _ = build_instances(config)
    tasks = [method_task(inst, m, "tokens", 1) for inst in instances for m in UNTIMED.split(",")]
    batches = {id(inst.lengths) for inst in instances}
    assert len(batches) == 2 and len(instances) == 12
    store = ResultStore(tmp_path / "results.jsonl")
    from seqpart.solver.study.methods import run_method_task

    with ray_executor() as executor:
        run_tasks(tasks, run_method_task, store, jobs=CPUS, pool=executor, progress=False)
    assert executor.puts == len(batches) + 1
    assert len(store.records()) == len(tasks)


# --------------------------------------------------------------------------- failures


def _dies_once(payload: tuple[int, str]) -> dict[str, Any]:
    """Task 3 kills its own worker process (SIGKILL) the first time it runs."""
    x, folder = payload
    marker = Path(folder) / f"{x}.started"
    if x == 3 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"x": x, "y": x * x}


def _toy_tasks(n: int, folder: Path) -> list[Task]:
    return [Task(f"x={x}", (x, str(folder)), exclusive=x % 4 == 1) for x in range(n)]


def test_a_killed_worker_is_retried_and_every_task_is_written_once(local_ray: Any,
                                                                   tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with ray_executor(retries=2) as executor:
        outcome = run_tasks(_toy_tasks(12, tmp_path), _dies_once, store, jobs=CPUS,
                            exclusive_jobs=CPUS, pool=executor, progress=False)
    assert (tmp_path / "3.started").exists()  # the worker really died once
    assert outcome.ran == 12 and outcome.failed == 0 and not outcome.interrupted
    lines = _lines(store.path)
    assert sorted(r["key"] for r in lines) == sorted(f"x={x}" for x in range(12))
    assert all(r["y"] == r["x"] ** 2 for r in lines)


def test_a_killed_worker_past_its_retries_is_recorded_failed_then_resumed(
        local_ray: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    tasks = _toy_tasks(8, tmp_path)
    with ray_executor(retries=0) as executor:
        outcome = run_tasks(tasks, _dies_once, store, jobs=CPUS, pool=executor, progress=False)
    assert outcome.ran == 8 and outcome.failed == 1
    lines = _lines(store.path)
    assert sorted(r["key"] for r in lines) == sorted(t.key for t in tasks)  # each exactly once
    (failure,) = [r for r in lines if FAILED in r]
    assert failure["key"] == "x=3" and "Worker" in failure[FAILED]
    assert "1 task(s) failed" in capsys.readouterr().err
    # Not done: the next run retries it (the worker does not die the second time).
    assert [t.key for t in store.pending(tasks)] == ["x=3"]
    assert [r["key"] for r in store.failures()] == ["x=3"]
    with open_executor("ray", CPUS) as executor:
        assert run_tasks(store.pending(tasks), _dies_once, store, pool=executor,
                         progress=False).ran == 1
    assert store.pending(tasks) == [] and store.failures() == []
    assert sorted(r["x"] for r in store.records()) == list(range(8))


def _raises(payload: tuple[int, str]) -> dict[str, Any]:
    x, _ = payload
    if x == 2:
        raise ZeroDivisionError("the runner's own bug")
    return {"x": x}


def test_a_runners_error_stops_the_study_as_on_the_local_pool(local_ray: Any, tmp_path: Path
                                                              ) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with ray_executor() as executor, pytest.raises(ZeroDivisionError, match="own bug"):
        run_tasks(_toy_tasks(6, tmp_path), _raises, store, jobs=CPUS, pool=executor,
                  progress=False)
    assert all(FAILED not in r for r in _lines(store.path))


def _slow(payload: tuple[int, str]) -> dict[str, Any]:
    x, folder = payload
    (Path(folder) / f"{x}.start").touch()
    time.sleep(0.3)
    return {"x": x}


def test_ctrl_c_on_a_ray_the_caller_started_keeps_the_store_whole(local_ray: Any,
                                                                  tmp_path: Path) -> None:
    """Ctrl-C on a Ray this process connected to before (left running): the run stops, the
    records written are whole, the tasks still out are not written, and a resume runs the
    rest, so every task is in the store exactly once."""
    store = ResultStore(tmp_path / "results.jsonl")
    tasks = _toy_tasks(14, tmp_path)

    def press_ctrl_c() -> None:
        while not store.path.exists() or store.path.read_text().count("\n") < 2:
            time.sleep(0.02)
        _thread.interrupt_main()

    handler = signal.getsignal(signal.SIGINT)
    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    try:
        # Python's own handler, whatever ran before: interrupt_main does nothing while SIGINT is
        # at the OS default, where a CP-SAT solve in this process leaves it (see keep_sigint).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with ray_executor() as executor:
            presser.start()
            outcome = run_tasks(tasks, _slow, store, jobs=CPUS, pool=executor, progress=False)
    finally:
        signal.signal(signal.SIGINT, handler)  # run_tasks ignores a second Ctrl-C
    assert outcome.interrupted and 2 <= outcome.ran < len(tasks)
    assert len(_lines(store.path)) == outcome.ran
    with ray_executor() as executor:
        run_tasks(store.pending(tasks), _slow, store, jobs=CPUS, pool=executor, progress=False)
    assert sorted(Counter(r["key"] for r in _lines(store.path)).items()) == sorted(
        (t.key, 1) for t in tasks)


# --------------------------------------------------------------------------- central planning


@pytest.fixture(scope="module")
def trainer(local_ray: Any) -> Any:
    """examples/ray_central_planning.py, its worker actors started on the module's Ray."""
    spec = importlib.util.spec_from_file_location("ray_central_planning",
                                                  ROOT / "examples" / "ray_central_planning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    module.WORKERS = module.start_workers(2)
    return module


def test_central_planning_every_worker_runs_exactly_its_schedule(trainer: Any) -> None:
    samples = trainer.rollout(0, 48)
    results = trainer.train_step(trainer.WORKERS, samples, 0)
    assert [r["rank"] for r in results] == [0, 1]
    assert len({r["m"] for r in results}) == 1 and len({r["plan"] for r in results}) == 1
    trained = sorted(i for r in results for i in r["samples"])
    assert trained == list(range(len(samples)))  # every sample once, on one rank
    total = sum(len(s.tokens) for s in samples)
    assert all(r["global_tokens"] == total for r in results)
    assert all(t <= trainer.CAP for r in results for t in r["tokens"])
    assert results[0]["loss"] == results[1]["loss"]  # the all-reduce joined both ranks


def test_a_worker_refuses_an_assignment_that_is_not_its_schedule(trainer: Any) -> None:
    samples = trainer.rollout(1, 24)
    wrong = trainer.Assignment(1, 0, 2, "x", [[0, 1], [2]], [[samples[0]], [samples[2]]],
                               trainer.CAP)
    with pytest.raises(ray.exceptions.RayTaskError, match="micro-batch 0 holds samples"):
        ray.get(trainer.WORKERS[0].run_step.remote(wrong), timeout=60)


@pytest.mark.parametrize("case", ["oversized", "too_few"])
def test_a_failed_plan_reaches_every_worker_as_the_same_error(trainer: Any, case: str) -> None:
    """The driver sends the failure to every worker: each raises the same message at once (no
    worker waits in the collective for the others), and the workers serve the next step."""
    samples = trainer.rollout(2, 32)
    if case == "oversized":
        samples[7] = trainer.Sample(7, np.zeros(trainer.CAP + 1, dtype=np.int64))
        expected = "sequence 7 has"
    else:
        samples = samples[:1]
        expected = "cannot fill 2 ranks"
    with pytest.raises(trainer.StepAborted) as caught:
        trainer.train_step(trainer.WORKERS, samples, 5)
    per_rank = caught.value.per_rank
    assert len(per_rank) == 2 and len(set(per_rank)) == 1
    assert expected in per_rank[0] and "step 5 not run: planning failed" in per_rank[0]
    assert len(trainer.train_step(trainer.WORKERS, trainer.rollout(3, 16), 6)) == 2
