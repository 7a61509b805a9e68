"""No input, option or timing aborts, hangs or claims wrongly: a sweep run in subprocesses.

    python benchmarks/bench_cpsat_sweep.py [--instances 600] [--runs 4] [--processes 2]
        [--seed 0] [--quick] [--json out.json]

Small tight and infeasible batches (n = 8-64 sequences, about 2 per micro-batch, the cap
within 15% of the longest sequence, some below the count's need) are planned by ``partition``
and, on the smaller ones, by ``plan_step`` (whose exact phase runs CP-SAT) and by
``plan_cp_step`` on 2 or 4 GPUs (4-10 sequences: its exact CP-SAT model runs, under the barrier
or the dag sync model), each ``--runs`` times with its own drawn options: 1-4 CP-SAT workers,
the clock or the repeatable timing, and a time limit of 0.01-2 s. Every call runs in a worker
subprocess, so a process abort inside OR-Tools is counted, not fatal: the worker announces each
case before it starts, and the parent restarts it past a case that killed it. A case that says
nothing within its limit plus 10 s is a hang (the worker is killed and restarted).

A wrong claim is a plan or an error that another run of the same batch contradicts: a plan
(or a step time) below a run's proven optimum or lower bound, or a plan where another run
proved that none exists. Every returned plan is re-checked here too: k non-empty micro-batches,
each sequence once, none over the cap (a dynamic-CP schedule: every GPU in one aligned group per
step, each sequence once, no group over its tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import DEFAULT_DATA_DIR, machine_header, table, verdict, write_json

LIMITS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
LIMIT_WEIGHTS = (0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05)
#: Silence past a case's limit before it counts as a hang.
HANG_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Case:
    """One call: a batch (``instance``) under one drawn set of options."""

    index: int
    instance: int
    kind: str  # "partition", "plan_step" or "plan_cp_step"
    lengths: list[int]
    k: int
    cap: int
    workers: int
    deterministic: bool
    time_limit: float
    dp: int = 1  # plan_cp_step: the GPUs
    pp: int = 1
    sync: str = "barrier"


def _pool(seed: int) -> list[int]:
    """Real lengths (the bundled long-CoT and code data), else a lognormal long tail."""
    out: list[int] = []
    for name in ("reasoning_short_cot_sky_t1_short_qwen25_32k.json", "code_humaneval_pypi.json"):
        path = DEFAULT_DATA_DIR / name
        if path.exists():
            raw = json.loads(path.read_text())
            out.extend(int(x) for x in (raw["lengths"] if isinstance(raw, dict) else raw) if int(x) > 0)
    if not out:
        rng = np.random.default_rng(seed)
        out = [int(x) for x in np.clip(rng.lognormal(8.5, 1.0, 20000), 16, 32768)]
    return out


def make_cases(instances: int, runs: int, seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    pool = _pool(seed)
    cases: list[Case] = []
    for inst in range(instances):
        kind = {4: "plan_step", 3: "plan_cp_step"}.get(inst % 5, "partition")
        n = int(rng.integers(*{"plan_step": (8, 17), "plan_cp_step": (4, 11)}.get(kind, (8, 65))))
        # Half real long-tail lengths, half uniform up to 32K (many near the longest).
        if rng.random() < 0.5:
            lengths = [int(pool[j]) for j in rng.integers(0, len(pool), n)]
        else:
            lengths = [int(x) for x in rng.integers(1, 32769, n)]
        longest = max(lengths)
        # Half the batches have the longest sequence's length as the cap, and half ask for
        # the token bound's count: together the tightest, where the LP bound is slowest to
        # prove what does not fit and CP-SAT starts without a valid plan. The rest hold about
        # 2 sequences per micro-batch under a cap within 15% of the longest.
        cap = longest if rng.random() < 0.5 else int(longest * rng.uniform(1.0, 1.15))
        if rng.random() < 0.5:
            k = max(1, min(n, -(-sum(lengths) // cap)))
        else:
            k = max(1, min(n, int(round(n / rng.uniform(1.6, 2.6)))))
        dp = int(rng.integers(1, 3)) if kind == "plan_step" else 1
        pp = int(rng.integers(1, 3)) if kind == "plan_step" else 1
        sync = "barrier"
        if kind == "plan_cp_step":  # the cap is the GPUs' tokens: the longest fills its group
            dp = int(rng.choice([2, 4]))
            cap = -(-cap // dp)  # max_tokens_per_gpu
            sync = str(rng.choice(["barrier", "dag"]))
        for _ in range(runs):
            cases.append(Case(
                index=len(cases), instance=inst, kind=kind, lengths=lengths, k=k, cap=cap,
                workers=int(rng.integers(1, 5)), deterministic=bool(rng.integers(0, 2)),
                time_limit=float(rng.choice(LIMITS, p=LIMIT_WEIGHTS)), dp=dp, pp=pp, sync=sync))
    return cases


# --------------------------------------------------------------------------- the worker side


def _check_bins(bins: Sequence[Sequence[int]], lengths: Sequence[int], k: int, cap: int) -> str:
    """What is wrong with a returned plan, checked here, not by seqpart's validator."""
    seen = sorted(i for b in bins for i in b)
    if seen != list(range(len(lengths))):
        return "not every sequence exactly once"
    if len(bins) != k or not all(bins):
        return f"{len(bins)} micro-batches (k={k}) or an empty one"
    if max(sum(lengths[i] for i in b) for b in bins) > cap:
        return "a micro-batch over the cap"
    return ""


def _check_cp(steps: Sequence[Any], lengths: Sequence[int], n_gpus: int, m: int) -> str:
    """What is wrong with a dynamic-CP schedule, checked here, not by seqpart's validator."""
    seen = []
    for step in steps:
        covered = []
        for ranks, ids in step:
            c = len(ranks)
            if not ids or list(ranks) != list(range(ranks[0], ranks[0] + c)) or ranks[0] % c:
                return "an empty or unaligned group"
            if sum(lengths[i] for i in ids) > c * m:
                return "a group over its tokens"
            covered += list(ranks)
            seen += list(ids)
        if sorted(covered) != list(range(n_gpus)):
            return "a step that does not run every GPU once"
    return "" if sorted(seen) == list(range(len(lengths))) else "not every sequence exactly once"


def run_case(case: Case) -> dict[str, Any]:
    from seqpart.solver import InfeasibleError, SolverOptions, partition, plan_cp_step, plan_step

    options = SolverOptions(deterministic=case.deterministic, workers=case.workers)
    out: dict[str, Any] = {"index": case.index}
    start = time.perf_counter()
    try:
        if case.kind == "partition":
            plan = partition(case.lengths, case.k, case.cap, time_limit=case.time_limit, options=options)
            out.update(status=plan.status, value=plan.max_load, bound=plan.lower_bound,
                       bad=_check_bins(plan.bins, case.lengths, case.k, case.cap))
        elif case.kind == "plan_cp_step":
            cp = plan_cp_step(case.lengths, case.dp, case.cap, cost=(24576, 1),
                              overhead=512 * 24576, cp_comm=6144, sync=case.sync,
                              time_limit=case.time_limit, options=options)
            out.update(status=cp.status, value=float(cp.step_time), bound=float(cp.lower_bound),
                       bad=_check_cp(cp.steps, case.lengths, case.dp, case.cap))
        else:
            step = plan_step(case.lengths, case.dp, case.cap, pp=case.pp, cost="tokens",
                             time_limit=case.time_limit, options=options)
            flat = [mb for rank in step.ranks for mb in rank]
            out.update(status=step.status, value=float(step.step_time), bound=float(step.lower_bound),
                       bad=_check_bins(flat, case.lengths, len(flat), case.cap))
    except InfeasibleError as err:
        out.update(status="infeasible" if err.proven else "no plan", value=None, bound=None, bad="")
    except Exception as err:  # an unexpected error is a failure of its own kind
        out.update(status="error", error=f"{type(err).__name__}: {err}"[:300], value=None, bound=None,
                   bad="")
    out["seconds"] = time.perf_counter() - start
    return out


def worker_main(cases: list[Case], first: int) -> None:
    """Run ``cases[first:]``, naming each case by its position in ``cases``."""
    for position in range(first, len(cases)):
        print(json.dumps({"begin": position}), flush=True)
        print(json.dumps({**run_case(cases[position]), "index": position}), flush=True)


# --------------------------------------------------------------------------- the parent side


def _reader(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_shard(cases: list[Case], args: list[str]) -> Iterator[dict[str, Any]]:
    """Run ``cases`` (indexed by position) in a worker process, restarting it past a case that
    aborted or hung."""
    position = 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    while position < len(cases):
        proc = subprocess.Popen([sys.executable, __file__, "--worker", "--from", str(position), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        current: Case | None = None
        while True:
            limit = HANG_GRACE_SECONDS + (3 * current.time_limit if current else 30.0)
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:
                proc.kill()
                proc.wait()
                assert current is not None
                yield {"index": current.index, "status": "hang"}
                position = current.index + 1
                break
            if line is None:  # the worker ended
                code = proc.wait()
                if current is not None:
                    yield {"index": current.index, "status": "abort", "returncode": code}
                    position = current.index + 1
                else:
                    position = len(cases)
                break
            record = json.loads(line)
            if "begin" in record:
                current = cases[record["begin"]]
            else:
                current = None
                yield record


def wrong_claims(cases: list[Case], results: dict[int, dict[str, Any]]) -> list[str]:
    """Claims that another run of the same batch contradicts (see the module docstring)."""
    by_instance: dict[int, list[dict[str, Any]]] = {}
    for case in cases:
        if case.index in results:
            by_instance.setdefault(case.instance, []).append(results[case.index])
    wrong = []
    for inst, runs in by_instance.items():
        found = [r["value"] for r in runs if r.get("value") is not None]
        bounds = [r["bound"] for r in runs if r.get("bound") is not None]
        optima = [r["value"] for r in runs if r.get("status") == "optimal"]
        if found and any(r.get("status") == "infeasible" for r in runs):
            wrong.append(f"batch {inst}: a plan was found where another run proved none exists")
        if found and bounds and min(found) < max(bounds) - 1e-9 * max(1.0, abs(max(bounds))):
            wrong.append(f"batch {inst}: a plan of {min(found)} below a claimed bound {max(bounds)}")
        if found and optima and min(found) < min(optima) - 1e-9 * max(1.0, abs(min(optima))):
            wrong.append(f"batch {inst}: a plan of {min(found)} below a claimed optimum {min(optima)}")
        wrong.extend(f"batch {inst}: {r['bad']}" for r in runs if r.get("bad"))
    return wrong


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=600, help="batches (each run --runs times)")
    ap.add_argument("--runs", type=int, default=4, help="runs of each batch with drawn options")
    ap.add_argument("--processes", type=int, default=2, help="worker processes at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="40 batches")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--from", dest="first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    instances = 40 if args.quick else args.instances
    cases = make_cases(instances, args.runs, args.seed)
    # Whole batches per shard, so that each worker's cases can be re-drawn from the seed alone.
    shards = [[c for c in cases if c.instance % args.processes == s] for s in range(args.processes)]
    if args.worker:
        worker_main(shards[args.shard], args.first)
        return 0
    print(machine_header(sys.argv))
    print(f"{len(cases)} calls on {instances} batches; workers 1-4, both timings, limits "
          f"{LIMITS[0]}-{LIMITS[-1]} s\n")
    common = ["--instances", str(instances), "--runs", str(args.runs), "--processes",
              str(args.processes), "--seed", str(args.seed)]
    results: dict[int, dict[str, Any]] = {}
    threads = []
    lock = threading.Lock()

    def drain(shard: int) -> None:
        for record in _run_indexed(shards[shard], [*common, "--shard", str(shard)]):
            with lock:
                results[record["index"]] = record

    for s in range(args.processes):
        t = threading.Thread(target=drain, args=(s,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return _report(cases, results, args.json)


def _run_indexed(shard: list[Case], args: list[str]) -> Iterator[dict[str, Any]]:
    """run_shard over a shard whose case indices are not contiguous: positions, not indices."""
    local = [Case(**{**c.__dict__, "index": i}) for i, c in enumerate(shard)]
    for record in run_shard(local, args):
        yield {**record, "index": shard[record["index"]].index}


def _report(cases: list[Case], results: dict[int, dict[str, Any]], path: str | None) -> int:
    statuses: dict[tuple[str, str], int] = {}
    for case in cases:
        status = results.get(case.index, {"status": "missing"})["status"]
        statuses[(case.kind, status)] = statuses.get((case.kind, status), 0) + 1
    rows = [[kind, status, str(count)] for (kind, status), count in sorted(statuses.items())]
    print(table(["entry point", "outcome", "calls"], rows))
    aborts = [i for i, r in results.items() if r["status"] == "abort"]
    hangs = [i for i, r in results.items() if r["status"] == "hang"]
    errors = [r for r in results.values() if r["status"] == "error"]
    missing = [c.index for c in cases if c.index not in results]
    wrong = wrong_claims(cases, results)
    for label, found in (("abort", aborts), ("hang", hangs)):
        for i in found[:10]:
            c = cases[i]
            print(f"  {label}: {c.kind}(lengths={c.lengths}, k={c.k}, cap={c.cap}, workers={c.workers}, "
                  f"deterministic={c.deterministic}, time_limit={c.time_limit}, dp={c.dp}, pp={c.pp}, "
                  f"sync={c.sync})")
    for r in errors[:10]:
        print(f"  error in call {r['index']}: {r['error']}")
    for line in wrong[:10]:
        print(f"  wrong claim: {line}")
    checks = [("no call aborts the process", not aborts), ("no call hangs", not hangs),
              ("no unexpected exception", not errors), ("every call answered", not missing),
              ("no wrong claim", not wrong)]
    print()
    for name, ok in checks:
        print(f"{verdict(ok)} {name}")
    if path:
        write_json(path, {"cases": [c.__dict__ for c in cases], "results": results})
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
