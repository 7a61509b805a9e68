"""Scale: the time limit holds at any n, memory stays linear.

    python benchmarks/bench_scale.py [--sizes 10000,100000,1000000] [--limits 0.005,0.02,0.1,1]
                                     [--repeats 2] [--cli] [--memory] [--calibrate]

Long-tail lengths (lognormal, median 800, sigma 1.2, clipped to 16..32768), cap = 2 x the
longest, k = ceil(S / cap) + 2 and k = None. Each call's wall time is compared with
``time_limit + 10 ms + 1 us * n`` (at n = 10^6 that allows ~1 s over). Small batches
(n = 256..2048, and the tight-cap batch) are held to ``time_limit + 5 ms``.

``--cli`` times ``seqpart solve`` on the same batches (a JSON file), in a fresh process each,
from the moment its imports are done to the moment its plan is written (the child reports
both), minus the same on a 3-length file; the least of ``--repeats`` runs. The interpreter's
start-up and exit (module teardown, 50-150 ms whatever n is) are left out: timed whole, their
noise (+-250 ms on a loaded machine) swamped the figure. ``--memory`` runs n = 10^6 in a fresh
process and reports its peak RSS (imports included) and the peak RSS after imports.
``--calibrate`` prints the per-item CPU costs the budget split uses (the tuning table,
solver/tuning.py, and heuristics/_search_state.py WORK_SECONDS), in CPU
time (the least of 3 runs) so a loaded machine skews them less. Print ``uptime`` with any
figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import machine_header, table, verdict

from seqpart.solver import partition


def long_tail(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([10, n, seed])
    return np.clip(np.round(rng.lognormal(np.log(800), 1.2, n)), 16, 32768).astype(np.int64)


def tight_batch() -> tuple[list[int], int, int]:
    """A tight-cap batch (uniform 100..3999 tokens, cap 8192, one micro-batch over the
    count bound): the capped balancer's case."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(100, 4000, 2048).tolist()
    return lengths, -(-sum(lengths) // 8192) + 1, 8192


def allowed(n: int, limit: float) -> float:
    if n <= 2048:
        return limit + 0.005
    return limit + 0.010 + 1e-6 * n


def run_partition(sizes: list[int], limits: list[float], repeats: int) -> list[list[str]]:
    rows = []
    cases: list[tuple[str, object, int | None, int]] = []
    for n in sizes:
        lengths = long_tail(n)
        cap = 2 * int(lengths.max())
        k = -(-int(lengths.sum()) // cap) + 2
        cases.append((f"long-tail n={n} k=S/cap+2", lengths, k, cap))
        cases.append((f"long-tail n={n} k=None", lengths, None, cap))
    if min(sizes) <= 2048:
        lengths, k, cap = tight_batch()
        cases.append(("tight cap n=2048", lengths, k, cap))
    for name, lengths, k, cap in cases:
        n = len(lengths)  # type: ignore[arg-type]
        for limit in limits:
            walls, plan = [], None
            for _ in range(repeats):
                t = time.perf_counter()
                plan = partition(lengths, k, cap, time_limit=limit)
                walls.append(time.perf_counter() - t)
            assert plan is not None
            bound = allowed(n, limit)
            rows.append([
                name, f"{limit:g}", f"{max(walls) * 1000:.1f}", f"{bound * 1000:.0f}",
                verdict(max(walls) <= bound), str(plan.k), f"{plan.gap:.5%}", plan.method,
                str(plan.stopped_by == "safety_net"),
            ])
            print("  " + "  ".join(rows[-1]), flush=True)
    return rows


#: ``seqpart solve`` as its console script runs it, after saying (on stderr) when the
#: interpreter and every module the command imports are loaded.
_SOLVE = (
    "import sys, time\n"
    "import seqpart.solver.cli as cli, seqpart.solver._partition\n"
    "sys.stderr.write(f'ready {time.perf_counter()!r}\\n')\n"
    "code = cli.main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "sys.stderr.write(f'done {time.perf_counter()!r}\\n')\n"
    "sys.exit(code)\n"
)


def _solve_after_start(args: list[str]) -> tuple[float, float]:
    """(wall time of ``seqpart solve ARGS``, its part from the end of its imports to its plan
    written): the second figure does not carry the 0.6-1.2 s import time's noise."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _SOLVE, "solve", *args], check=True,
                          capture_output=True, text=True)
    end = time.perf_counter()
    stamps = {line.split()[0]: float(line.split()[1]) for line in proc.stderr.splitlines()
              if line.startswith(("ready ", "done "))}
    # From the end of the imports to the plan written (reading, solving, printing); the
    # interpreter's exit, 50-150 ms of module teardown whatever n is, is left out.
    return end - t, stamps["done"] - stamps["ready"]


def run_cli(sizes: list[int], limits: list[float], repeats: int = 1) -> list[list[str]]:
    """``seqpart solve`` beyond start-up: each command's least time from its imports to its
    plan written over ``repeats`` runs (parsing, reading, solving, printing), minus the same on
    a 3-length file, so what is left is what the batch's size costs."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.json"
        tiny.write_text("[3, 2, 1]")
        start = [_solve_after_start([str(tiny), "--k", "2", "--json"])
                 for _ in range(max(3, repeats))]
        base = min(after for _, after in start)
        for n in sizes:
            lengths = long_tail(n)
            cap = 2 * int(lengths.max())
            path = Path(tmp) / f"n{n}.json"
            path.write_text(json.dumps(lengths.tolist()))
            for k in (str(-(-int(lengths.sum()) // cap) + 2), "min"):
                for limit in limits:
                    runs = [_solve_after_start([str(path), "--k", k, "--cap", str(cap),
                                                "--time-limit", str(limit), "--json"])
                            for _ in range(repeats)]
                    wall = min(after for _, after in runs) - base
                    bound = allowed(n, limit)
                    rows.append([f"solve n={n} --k {k}", f"{limit:g}", f"{wall * 1000:.0f}",
                                 f"{bound * 1000:.0f}", verdict(wall <= bound),
                                 f"{min(total for total, _ in runs) * 1000:.0f}"])
                    print("  " + "  ".join(rows[-1]), flush=True)
    print(f"  (subtracted: {base * 1000:.0f} ms after start-up on a 3-length file, whose whole "
          f"run took {min(total for total, _ in start) * 1000:.0f} ms)")
    return rows


def _peak_kib() -> int:
    """This process's peak RSS. Linux's VmHWM starts afresh at exec; ru_maxrss does not (it
    kept the parent's peak from before the fork: 316 MiB "after imports" when the parent had
    run n = 10^6 first)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_child(n: int) -> None:
    """In a fresh process: peak RSS after imports, then after one call at n."""
    lengths = long_tail(n)
    cap = 2 * int(lengths.max())
    partition([3, 2, 1], 2)
    before = _peak_kib()
    partition(lengths, -(-int(lengths.sum()) // cap) + 2, cap, time_limit=0.02)
    partition(lengths, None, cap, time_limit=0.02)
    after = _peak_kib()
    print(json.dumps({"before_kib": before, "after_kib": after}))


def _cpu(fn: Callable[[], object], repeats: int = 3) -> float:
    """The least CPU time of ``repeats`` runs (the shared machine's noise only adds)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def _fixed_work(lengths: np.ndarray, k: int, cap: int) -> float:
    """CPU seconds of what FIXED_SECONDS_PER_ITEM stands for: checking the input, the items,
    the load bound, and checking and assembling a plan (best fit's, packed untimed)."""
    from seqpart.solver._partition import _load_bound
    from seqpart.solver.assemble import finish_plan as _finish
    from seqpart.solver.engines.heuristic_phase import pack_fallback as _pack
    from seqpart.solver.options import BestPlan
    from seqpart.solver.problem import make_items, make_problem

    bins = _pack(make_items(make_problem(lengths, k, cap)), k, cap, None)
    t = time.process_time()
    problem = make_problem(lengths, k, cap)
    items = make_items(problem)
    best = BestPlan(bins, 0, _load_bound(items, k, None), "best_fit_decreasing", [])
    _finish(problem, items, best, k, "given", None, time.perf_counter())
    return time.process_time() - t


def _calibrate_row(n: int) -> list[str]:
    from seqpart.heuristics.kernels import (
        argsort_desc,
        best_fit_lists,
        fill_empty,
        first_fit_tree,
        improve_lists,
        karmarkar_karp_lists,
        lpt_lists,
    )

    cb_module = importlib.import_module("seqpart.heuristics._capped_balance")
    tokens = long_tail(n).tolist()
    cap = 2 * max(tokens)
    k = -(-sum(tokens) // cap) + 2
    ones = [1] * n
    lpt = [sorted(b) for b in lpt_lists(tokens, tokens, ones, k, cap, None)]
    search = _cpu(lambda: improve_lists(tokens, tokens, ones, lpt, cap, None, max_steps=200))
    work = improve_lists(tokens, tokens, ones, lpt, cap, None, max_steps=200).work
    small = n <= 20_000
    pack = _cpu(lambda: fill_empty(best_fit_lists(tokens, ones, k, cap), tokens, ones, None))
    arr = np.asarray(tokens, dtype=np.int64)
    ffd = _cpu(lambda: fill_empty(first_fit_tree(arr, k, cap, argsort_desc(arr)), tokens, ones,
                                  None))
    fixed = _fixed_work(arr, k, cap)
    cb = _cpu(lambda: cb_module.capped_balance_lists(tokens, tokens, ones, k, cap, None))
    kk = _cpu(lambda: karmarkar_karp_lists(tokens, ones, k, None)) if small else 0.0
    return [
        str(n),
        f"{_cpu(lambda: lpt_lists(tokens, tokens, ones, k, cap, None)) / n * 1e6:.2f}",
        f"{pack / n * 1e6:.2f}",
        f"{ffd / n * 1e6:.2f}",
        f"{fixed / n * 1e6:.2f}",
        f"{cb / n * 1e6:.2f}" if small else "-",
        f"{kk / n * 1e6:.2f}" if small else "-",
        f"{search / max(work, 1) * 1e9:.1f}",
    ]


def calibrate() -> None:
    """Per-item CPU costs of the steps the budget split estimates."""
    from seqpart.heuristics.kernels import lpt_lists

    cb_module = importlib.import_module("seqpart.heuristics._capped_balance")
    rows = [_calibrate_row(n) for n in (2048, 10_000, 100_000)]
    lengths, k, cap = tight_batch()
    ones = [1] * len(lengths)
    tight = _cpu(lambda: cb_module.capped_balance_lists(
        lengths, lengths, ones, k, cap, None)) / len(lengths) * 1e6
    # In partition the balancer gets step 1's LPT: what CAPPED_BALANCE_SECONDS_PER_ITEM is.
    lpt = [sorted(b) for b in lpt_lists(lengths, lengths, ones, k, cap, None)]
    given = _cpu(lambda: cb_module.capped_balance_lists(
        lengths, lengths, ones, k, cap, None, lpt_bins=lpt)) / len(lengths) * 1e6
    print(table(["n", "LPT us/item", "best fit+fill us/item", "FFD+fill us/item",
                 "fixed us/item", "capped balancer us/item",
                 "KK us/item", "local search ns/work unit"], rows))
    print(f"capped balancer on the tight-cap batch: {tight:.2f} us/item, {given:.2f} with "
          "LPT's plan given (as in partition)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,2048,10000,100000,1000000")
    parser.add_argument("--limits", default="0.005,0.02,0.1,1")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cli", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return 0
    print(machine_header(sys.argv))
    if args.calibrate:
        calibrate()
        return 0
    sizes = [int(x) for x in args.sizes.split(",")]
    limits = [float(x) for x in args.limits.split(",")]
    partition([8, 7, 6, 5, 4, 9, 3, 3, 12, 2], 3, 20, time_limit=0.5)  # imports, first call
    ok = True
    rows = run_partition(sizes, limits, args.repeats)
    print(table(["batch", "limit s", "wall max ms", "allowed ms", "", "k", "gap", "method",
                 "cut"], rows))
    ok &= all(r[4] == "PASS" for r in rows)
    if args.cli:
        cli_rows = run_cli([n for n in sizes if n >= 10_000], limits, args.repeats)
        print(table(["command", "limit s", "after start-up ms", "allowed ms", "",
                     "whole run ms"], cli_rows))
        ok &= all(r[4] == "PASS" for r in cli_rows)
    if args.memory:
        out = subprocess.run([sys.executable, __file__, "--memory-child", "1000000"],
                             check=True, capture_output=True, text=True).stdout
        mem = json.loads(out.strip().splitlines()[-1])
        peak = mem["after_kib"] / 1024
        print(f"{verdict(peak < 400)}  peak RSS at n=10^6 (k given and k=None): {peak:.0f} MiB "
              f"(after imports: {mem['before_kib'] / 1024:.0f} MiB)")
        ok &= peak < 400
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
