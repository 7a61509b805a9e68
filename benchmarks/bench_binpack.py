"""The smallest count on the classic bin-packing benchmarks: Falkenauer's classes.

``partition(sizes, k=None, cap=C, time_limit=T)`` on 160 instances of Falkenauer's classes:
uniform u120-u1000 (sizes 20..100, capacity 150) and triplets t60-t501 (capacity 1000, optimum
n/3, every bin exactly full), 20 of each, generated from the published recipe
(``falkenauer.py``; seeded, the same on every run). For each class: how many calls returned
the optimum, how many a larger count, the extra bins in all, how many counts were proven
(``k_status``), and the median time; then PASS/FAIL lines for the targets. First fit
decreasing's count is the baseline: no count may be above it.

The optima: n/3 for the triplets. For the uniform classes none is known in advance: a call
counts as at the optimum when its count meets the lower bound it proves (``k_lower_bound``),
which is stricter than matching a table.

    python benchmarks/bench_binpack.py                 # time_limit 1.0 and 10
    python benchmarks/bench_binpack.py --limits 1.0 --classes u120 t60
    python benchmarks/bench_binpack.py --orlib DIR     # OR-Library's binpack1-8.txt, if you have them
    python benchmarks/bench_binpack.py --data DIR      # one-instance files (Scholl, BPPLib)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import falkenauer
from common import machine_header

from seqpart.heuristics import first_fit_decreasing
from seqpart.solver import partition

#: OR-Library optima below the 1996 table's counts (packings at the LP bound exist), for --orlib.
BELOW_TABLE = {"u120_08": 50, "u120_19": 49, "u250_07": 103, "u250_12": 105}
CLASSES = list(falkenauer.CLASSES)


def load_orlib(path: Path) -> list[tuple[str, int, list[int], int]]:
    """(name, capacity, sizes, best known) per instance of one OR-Library binpack file,
    sizes and capacity times 10 (integers)."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    out, pos = [], 1
    for _ in range(int(lines[0])):
        name = lines[pos]
        cap, n, best = lines[pos + 1].split()
        sizes = [round(float(x) * 10) for x in lines[pos + 2 : pos + 2 + int(n)]]
        out.append((name, round(float(cap) * 10), sizes, int(best)))
        pos += 2 + int(n)
    return out


def load_bpplib(folder: Path) -> list[tuple[str, int, list[int], int]]:
    """One-instance files as Scholl's and BPPLib's (n, capacity, then n sizes); the optimum
    is read from a ``<name> <optimum>`` line of ``optima.txt`` in the folder when present,
    else unknown: each count is then measured against the lower bound ``partition`` proves
    (``plan.k_lower_bound``), so "at the optimum" reads "proven optimal"."""
    optima: dict[str, int] = {}
    if (folder / "optima.txt").exists():
        for line in (folder / "optima.txt").read_text().splitlines():
            if line.strip():
                name, value = line.split()[:2]
                optima[name] = int(value)
    out = []
    for path in sorted(folder.glob("*.txt")):
        if path.name == "optima.txt":
            continue
        values = [int(float(x)) for x in path.read_text().split()]
        n, cap = values[0], values[1]
        out.append((path.stem, cap, values[2 : 2 + n], optima.get(path.stem, 0)))
    return out


def _class(name: str) -> str:
    """Falkenauer's class (u120, t60, ...), or the first four characters (Scholl's N1C1...)."""
    return name.split("_")[0] if "_" in name and name[0] in "ut" else name[:4]


def run(instances: list[tuple[str, int, list[int], int]], limit: float) -> list[dict]:
    rows = []
    for name, cap, sizes, best in instances:
        opt = BELOW_TABLE.get(name, best) if best else 0  # 0: unknown, the proven bound decides
        ffd = len(first_fit_decreasing(sizes, None, cap))
        t0 = time.perf_counter()
        plan = partition(sizes, k=None, cap=cap, time_limit=limit)
        seconds = time.perf_counter() - t0
        if opt == 0:  # optimum unknown: counted against the proven lower bound instead
            opt = plan.k_lower_bound or plan.k
        rows.append({"name": name, "cls": _class(name), "k": plan.k, "opt": opt,
                     "ffd": ffd, "proven": plan.k_status == "optimal", "seconds": seconds})
    return rows


def table(rows: list[dict], limit: float) -> None:
    print(f"\ntime_limit={limit}")
    print("| class | at the optimum | above it | extra bins | proven | FFD extra bins "
          "| bins | median time | max time |")
    print("|---|---|---|---|---|---|---|---|---|")
    classes = [c for c in CLASSES if any(r["cls"] == c for r in rows)]
    classes += sorted({r["cls"] for r in rows} - set(classes))
    for c in classes:
        mine = [r for r in rows if r["cls"] == c]
        at = sum(r["k"] <= r["opt"] for r in mine)
        extra = sum(max(0, r["k"] - r["opt"]) for r in mine)
        ffd_extra = sum(max(0, r["ffd"] - r["opt"]) for r in mine)
        times = [r["seconds"] for r in mine]
        print(f"| {c} | {at} / {len(mine)} | {len(mine) - at} | {extra} "
              f"| {sum(r['proven'] for r in mine)} | {ffd_extra} | {sum(r['k'] for r in mine)} "
              f"| {statistics.median(times):.2f} s | {max(times):.2f} s |")
    for r in rows:
        if r["k"] < r["opt"]:
            print(f"note: {r['name']}: {r['k']} bins, below the reference {r['opt']}")


def verdicts(rows: list[dict], limit: float, falkenauer: bool) -> bool:
    ok = True

    def line(passed: bool, text: str) -> None:
        nonlocal ok
        ok = ok and passed
        print(f"{'PASS' if passed else 'FAIL'} time_limit={limit}: {text}")

    at = sum(r["k"] <= r["opt"] for r in rows)
    above_ffd = [r["name"] for r in rows if r["k"] > r["ffd"]]
    line(not above_ffd, f"no count above first fit decreasing's ({len(above_ffd)} above)")
    if not falkenauer:
        print(f"info time_limit={limit}: at the optimum on {at} / {len(rows)}")
        return ok
    if limit <= 1.0:
        line(at >= 150, f"the optimum on {at} / 160 (target 150)")
        for c in ("u120", "u250", "u500", "t60", "t120"):
            mine = [r for r in rows if r["cls"] == c]
            hit = sum(r["k"] <= r["opt"] for r in mine)
            line(hit == len(mine), f"{c}: the optimum on {hit} / {len(mine)}")
    else:
        line(at == len(rows), f"the optimum on {at} / {len(rows)}")
        unproven = [r["name"] for r in rows if r["k"] <= r["opt"] and not r["proven"]]
        line(not unproven, f"proven on {len(rows) - len(unproven)} / {len(rows)}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--classes", nargs="+", default=CLASSES)
    ap.add_argument("--orlib", type=Path, default=None,
                    help="a folder with OR-Library's binpack1.txt .. binpack8.txt (Falkenauer's "
                         "own instances) instead of the generated ones")
    ap.add_argument("--data", type=Path, default=None,
                    help="a folder of BPPLib one-instance files instead of Falkenauer's")
    args = ap.parse_args()
    print(machine_header(["benchmarks/bench_binpack.py", *sys.argv[1:]]))
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.data is not None:
        instances = load_bpplib(args.data)
    elif args.orlib is not None:
        instances = [inst for i in range(1, 9) for inst in load_orlib(args.orlib / f"binpack{i}.txt")]
        instances = [x for x in instances if x[0].split("_")[0] in args.classes]
    else:
        instances = falkenauer.instances(args.classes)
    ok = True
    for limit in args.limits:
        rows = run(instances, limit)
        table(rows, limit)
        ok = verdicts(rows, limit, args.data is None and len(args.classes) == 8) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
