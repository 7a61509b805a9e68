"""Studies on Ray: throughput against the local pool, Ray's overhead per task, and an estimate
of the offline study on 64 nodes.

    pip install -e ".[ray]"
    python benchmarks/bench_ray.py [--reps 4] [--noop-tasks 400] [--out results.json]

1. **Overhead per task.** ``--noop-tasks`` tasks that do nothing go through the study engine
   (``RayExecutor.stream``, as ``run_tasks`` drives it) on a local Ray of 1 CPU, each as a Ray
   task of its own (as timed tasks go): one worker, so they finish one after another, and
   each one's overhead is the time between its record and the previous one reaching the
   driver, minus the time the runner spent inside the worker. Median and p95. Target: median
   <= 10 ms. Then the same tasks untimed (in chunks, as an untimed study's go) on 2 CPUs: the
   records per second the driver takes in.
2. **Study throughput.** The untimed methods of the default study (every heuristic in
   ``DEFAULT_METHODS``) on the default grid with ``--reps`` batches per setting, through
   ``run_tasks``: in this process (``--jobs 1``), on the local pool of 2 processes, on a local
   Ray of 1 CPU and of 2 CPUs, each ``--repeats`` times, the fastest counted (the least
   disturbed by other work on the machine). The grid is built once, before any of them; each
   Ray's start is timed apart. Every run's records must equal the in-process run's (timings
   aside). Target: Ray with 2 CPUs >= 1.7x the tasks per second of Ray with 1.
3. **64 nodes, on paper.** What the default offline study (``seqpart study``, all defaults)
   and one at offline budgets would take on 64 nodes, from the task counts of their grids,
   the untimed task time measured in part 2, the methods' time budgets and the overheads
   measured in parts 1 and 2.

Timings depend on the machine's load, printed with each part: on a shared machine the 2-CPU
runs compete with other work for the same 2 cores.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine_header, median, percentile, table, verdict, write_json

from seqpart.solver.study.methods import (
    DEFAULT_METHODS,
    StudyConfig,
    build_instances,
    method_task,
    parse_methods,
    run_method_task,
)
from seqpart.solver.study.runner import ResultStore, Task, open_executor, run_tasks

OVERHEAD_TARGET_S = 0.010
SPEEDUP_TARGET = 1.7


def _load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def _noop_call(task: Task) -> dict[str, Any]:
    """A task that does nothing but say how long it took inside the worker."""
    t0 = time.perf_counter()
    record = {"key": task.key, "x": task.payload}
    return {**record, "inner_s": time.perf_counter() - t0}


def _lost(task: Task, why: str) -> dict[str, Any]:
    raise RuntimeError(f"task {task.key} lost: {why}")


def overhead_per_task(n: int, cpus: int = 1) -> dict[str, Any]:
    """Part 1: per-task overhead on a local Ray of ``cpus`` CPUs (see the module doc). With 1
    CPU each task is a Ray task of its own, and the gaps between records are each one's
    overhead; with 2 the tasks are untimed (chunked), and the rate is what the driver takes
    in, with the workers on this machine's cores too."""
    tasks = [Task(f"noop={i}", i, exclusive=cpus == 1) for i in range(n)]
    t0 = time.perf_counter()
    with open_executor("ray", cpus) as executor:
        start_s = time.perf_counter() - t0
        list(executor.stream(_noop_call, tasks[:20], 1, _lost))  # the worker started and warm
        arrivals, inner = [], []
        t0 = time.perf_counter()
        for record in executor.stream(_noop_call, tasks, 1, _lost):
            arrivals.append(time.perf_counter())
            inner.append(record["inner_s"])
        wall = time.perf_counter() - t0
    gaps = [b - a - s for a, b, s in zip(arrivals, arrivals[1:], inner[1:], strict=False)]
    return {"tasks": n, "ray_start_s": start_s, "median_s": median(gaps),
            "p95_s": percentile(gaps, 95), "mean_s": (wall - sum(inner)) / n,
            "tasks_per_s": n / wall, "load": _load()}


def _study_tasks(reps: int) -> tuple[list[Task], list[str], int]:
    methods = [m for m in parse_methods(DEFAULT_METHODS) if not m.startswith("partition@")]
    with open_executor("local", os.cpu_count() or 1) as pool:
        instances, _ = build_instances(StudyConfig(reps=reps), pool)
    return [method_task(inst, m, "tokens", 1) for inst in instances for m in methods], methods, len(
        instances)


def _run(kind: str, jobs: int, tasks: list[Task], folder: Path, repeats: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    walls = []
    with open_executor(kind, jobs) as executor:
        start_s = time.perf_counter() - t0
        for repeat in range(repeats):
            store = ResultStore(folder / f"{kind}-{jobs}-{repeat}.jsonl")
            t0 = time.perf_counter()
            outcome = run_tasks(tasks, run_method_task, store, jobs=jobs, pool=executor,
                                progress=False)
            walls.append(time.perf_counter() - t0)
            assert outcome.ran == len(tasks) and not outcome.failed
    wall = min(walls)
    records = {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in store.records()}
    return {"executor": kind, "cpus": jobs, "start_s": start_s, "wall_s": wall,
            "tasks_per_s": len(tasks) / wall, "walls_s": walls, "records": records,
            "load": _load(),
            "task_s_sum": sum(r["seconds"] for r in store.records())}


def throughput(reps: int, repeats: int) -> dict[str, Any]:
    """Part 2: the untimed study on each executor (see the module doc)."""
    tasks, methods, instances = _study_tasks(reps)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, jobs in (("local", 1), ("local", 2), ("ray", 1), ("ray", 2)):
            runs.append(_run(kind, jobs, tasks, Path(tmp), repeats))
            print(f"  {kind} x{jobs}: {runs[-1]['wall_s']:.2f} s ({runs[-1]['load']})", flush=True)
    same = all(r["records"] == runs[0]["records"] for r in runs)
    for r in runs:
        del r["records"]
    return {"tasks": len(tasks), "instances": instances, "methods": methods, "runs": runs,
            "same_records": same, "mean_task_s": runs[0]["wall_s"] / len(tasks)}


def _rounds(tasks: int, slots: int) -> int:
    return math.ceil(tasks / slots) if tasks else 0


def estimate(mean_untimed_s: float, overhead_s: float, driver_rate: float, start_s: float,
             nodes: int = 64, cores: int = 32) -> tuple[list[list[str]], dict[str, Any]]:
    """Part 3: wall time on ``nodes`` x ``cores`` from task counts, budgets and overheads.

    The untimed tasks take as long as measured here plus Ray's overhead each, spread over
    every core, but no faster than the one driver takes in records. A timed task of budget B
    takes at most B and holds its CP-SAT workers' cores: ceil(tasks / slots) rounds of B. The
    smallest k of each batch takes at most ``min_k_time`` (0.5 s), all batches in parallel.
    """
    study = StudyConfig()
    methods = parse_methods(study.methods)
    instances, _ = build_instances(study)
    batches = len({(i.source, i.n, i.rep, i.cap) for i in instances})
    grids = {
        "default study (seqpart study)": (len(instances), batches, methods, 1),
        # An offline run: 100 batches per setting, CP-SAT at 60 s with 8 workers a task.
        "offline: --reps 100, partition@60, 8 CP-SAT workers a run": (
            len(instances) * 100, batches * 100,
            [m for m in methods if not m.startswith("partition@")] + ["partition@60"], 8),
    }
    rows, figures = [], {}
    for name, (n_inst, n_batches, meths, workers) in grids.items():
        untimed = n_inst * sum(1 for m in meths if not m.startswith("partition@"))
        budgets = [float(m.split("@")[1]) for m in meths if m.startswith("partition@")]
        cpu_s = untimed * mean_untimed_s + n_inst * sum(budgets) * workers + n_batches * 0.5
        total_cores = nodes * cores
        slots = nodes * (cores // workers)
        wall = (start_s + _rounds(n_batches, total_cores) * 0.5
                + max(untimed * (mean_untimed_s + overhead_s) / total_cores, untimed / driver_rate)
                + sum(_rounds(n_inst, slots) * b for b in budgets))
        # This machine: 2 cores, a timed run with min(workers, 2) CP-SAT workers.
        one_machine = (untimed * mean_untimed_s + n_batches * 0.5) / 2 + sum(
            _rounds(n_inst, 2 // min(workers, 2)) * b for b in budgets)
        figures[name] = {"instances": n_inst, "batches": n_batches, "untimed_tasks": untimed,
                         "timed_tasks": n_inst * len(budgets), "cpu_s": cpu_s, "wall_s": wall,
                         "two_core_machine_s": one_machine}
        rows.append([name, str(n_inst), str(untimed), str(n_inst * len(budgets)),
                     f"{cpu_s / 3600:.2f} h", f"{one_machine / 3600:.2f} h", f"{wall / 60:.1f} min"])
    return rows, figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=4, help="batches per setting of the grid")
    parser.add_argument("--noop-tasks", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3, help="runs per executor (the fastest counts)")
    parser.add_argument("--out", default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    print(machine_header(["benchmarks/bench_ray.py", *argv]))
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # local Rays on loopback
    import ray

    print(f"ray {ray.__version__}\n")

    print(f"1. Ray's overhead per task ({args.noop_tasks} empty tasks, each a Ray task, local "
          "Ray of 1 CPU; then untimed, chunked, on 2 CPUs for the driver's rate)")
    over = overhead_per_task(args.noop_tasks)
    print(f"  Ray start {over['ray_start_s']:.1f} s; overhead per task: median "
          f"{over['median_s'] * 1e3:.2f} ms, p95 {over['p95_s'] * 1e3:.2f} ms, mean "
          f"{over['mean_s'] * 1e3:.2f} ms ({over['tasks_per_s']:.0f} tasks/s; {over['load']})")
    over2 = overhead_per_task(args.noop_tasks, 2)
    rate = max(over["tasks_per_s"], over2["tasks_per_s"])
    print(f"  untimed on 2 CPUs: {over2['tasks_per_s']:.0f} empty tasks/s through the driver "
          f"({over2['load']})\n")

    print(f"2. Untimed study, default grid x {args.reps} reps, per executor (fastest of "
          f"{args.repeats})")
    thr = throughput(args.reps, args.repeats)
    rows = [[f"{r['executor']} x{r['cpus']}", f"{r['start_s']:.1f}", f"{r['wall_s']:.2f}",
             f"{r['tasks_per_s']:.0f}", r["load"]] for r in thr["runs"]]
    print(f"  {thr['tasks']} tasks ({thr['instances']} instances x {len(thr['methods'])} "
          f"methods), {thr['mean_task_s'] * 1e3:.2f} ms a task in this process")
    print(table(["executor x CPUs", "start s", "wall s", "tasks/s", "load (1, 5, 15 min)"], rows))
    by = {(r["executor"], r["cpus"]): r for r in thr["runs"]}
    speedup = by["ray", 2]["tasks_per_s"] / by["ray", 1]["tasks_per_s"]
    ray_cost = (by["ray", 1]["wall_s"] - by["local", 1]["wall_s"]) / thr["tasks"]
    print(f"  Ray 2 CPUs / Ray 1 CPU: {speedup:.2f}x; local pool 2 / this process: "
          f"{by['local', 2]['tasks_per_s'] / by['local', 1]['tasks_per_s']:.2f}x; Ray 1 CPU "
          f"costs {ray_cost * 1e3:.2f} ms a task more than this process; records identical "
          f"on every executor: {thr['same_records']}\n")

    print("3. On paper: 64 nodes x 32 cores, one driver")
    rows, figures = estimate(thr["mean_task_s"], max(over["median_s"], 0.0), rate,
                             over["ray_start_s"])
    print(table(["study", "instances", "untimed", "timed", "CPU", "2-core machine", "64 nodes"],
                rows))
    print(f"  from: untimed task {thr['mean_task_s'] * 1e3:.2f} ms (part 2) + Ray's overhead of a "
          f"whole Ray task, {over['median_s'] * 1e3:.2f} ms (part 1; chunked untimed tasks pay "
          f"less: {ray_cost * 1e3:.2f} ms in part 2); the driver takes in {rate:.0f} records/s "
          "(part 1: measured with the workers on the same 2 cores, so a floor); timed tasks take their "
          "budget (an upper bound: a proven optimum stops early) in rounds of "
          "ceil(tasks / slots); the smallest k at most 0.5 s a batch; Ray's start "
          f"{over['ray_start_s']:.1f} s\n")

    ok_overhead = over["median_s"] <= OVERHEAD_TARGET_S
    ok_speedup = speedup >= SPEEDUP_TARGET
    print(f"{verdict(ok_overhead)}  Ray's median overhead per task {over['median_s'] * 1e3:.2f} ms"
          f" <= {OVERHEAD_TARGET_S * 1e3:.0f} ms")
    print(f"{verdict(ok_speedup)}  Ray 2 CPUs {speedup:.2f}x Ray 1 CPU on the untimed study "
          f">= {SPEEDUP_TARGET}x")
    print(f"{verdict(thr['same_records'])}  the same records on every executor")
    if args.out:
        write_json(args.out, {"overhead": over, "overhead_2cpus": over2, "throughput": thr,
                              "estimate": figures})
    return 0 if ok_overhead and ok_speedup and thr["same_records"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
