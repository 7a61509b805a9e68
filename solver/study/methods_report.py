"""The method study's report: per-method summary rows, the timing note, the table and the CSV.
"""

from __future__ import annotations

import csv
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


SUMMARY_COLUMNS = (
    "method", "runs", "valid_rate", "runs_over_cap", "over_cap_bins", "runs_empty", "empty_bins",
    "mean_gap", "max_gap", "optimal_share", "time_p50_s", "time_p95_s",
    "timed_runs", "cpu_per_wall_p50", "cpu_per_wall_min", "load_avg_1m_max",
)


def summarize(records: Sequence[dict[str, Any]], methods: Sequence[str]) -> list[dict[str, Any]]:
    """Per method. Gaps are to the best lower bound known for the instance (the largest any run
    proved), over valid plans only: an invalid plan's load says nothing about a usable one."""
    best_bound: dict[str, int] = {}
    for r in records:
        best_bound[r["instance"]] = max(best_bound.get(r["instance"], 0), int(r["lower_bound"]))
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        if not mine:
            continue
        valid = [r for r in mine if r["valid"]]
        gaps = [(r["max_load"] - best_bound[r["instance"]]) / best_bound[r["instance"]]
                for r in valid]
        times = [r["seconds"] for r in mine]
        rows.append({
            "method": method,
            "runs": len(mine),
            "valid_rate": len(valid) / len(mine),
            "runs_over_cap": sum(1 for r in mine if r["over_cap_bins"]),
            "over_cap_bins": sum(r["over_cap_bins"] for r in mine),
            "runs_empty": sum(1 for r in mine if r["empty_bins"]),
            "empty_bins": sum(r["empty_bins"] for r in mine),
            "mean_gap": float(np.mean(gaps)) if gaps else float("nan"),
            "max_gap": max(gaps) if gaps else float("nan"),
            "optimal_share": sum(1 for r, g in zip(valid, gaps, strict=True) if g <= 0) / len(mine),
            "time_p50_s": _percentile(times, 50),
            "time_p95_s": _percentile(times, 95),
            **cpu_contention(mine),
        })
    return rows


def cpu_contention(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How much CPU the timed runs had: CPU seconds per wall second of the process (about 1 for
    one busy thread that had a core to itself; less when something else competed) and the
    machine's 1-minute load average when they started."""
    runs = [r["run"] for r in records if isinstance(r.get("run"), dict)]
    shares = [r["cpu_s"] / r["wall_s"] for r in runs if r["wall_s"] > 0]
    loads = [r["load_avg_1m"] for r in runs if r.get("load_avg_1m") is not None]
    return {
        "timed_runs": len(runs),
        "cpu_per_wall_p50": _percentile(shares, 50),
        "cpu_per_wall_min": min(shares) if shares else float("nan"),
        "load_avg_1m_max": max(loads) if loads else float("nan"),
    }


def format_timing_note(rows: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> str:
    """What the time columns of the time-budgeted methods mean, with the measured contention."""
    timed = [r for r in rows if r["timed_runs"]]
    if not timed:
        return ""
    runs = [r for r in records if isinstance(r.get("run"), dict)]
    how = sorted({(r["run"].get("at_a_time", 1), r.get("workers", 1), r["run"]["cores"])
                  for r in runs})
    ways = "; ".join(f"{a} at a time with {w} CP-SAT worker(s) each, on {c} core(s)"
                     for a, w, c in how)
    lines = textwrap.wrap(
        f"Time-budgeted methods ran after the others, {ways}. CPU/wall is CPU seconds per wall "
        "second of a run: about 1 (or more with several workers) when it had its cores, lower "
        "when other processes competed; * in the table marks a median below 0.8, where the "
        "times include waiting for the CPU:", width=100)
    for r in timed:
        lines.append(f"  {r['method']}: CPU/wall median {r['cpu_per_wall_p50']:.2f}, "
                     f"lowest {r['cpu_per_wall_min']:.2f}; 1-min load average up to "
                     f"{r['load_avg_1m_max']:.1f} over {r['timed_runs']} runs")
    return "\n".join(lines)


#: Below this median CPU/wall, a timed method's times are marked as inflated by other load.
STARVED = 0.8


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    head = ("method", "runs", "valid", "over-cap runs (bins)", "empty runs (bins)", "mean gap",
            "max gap", "optimal", "time p50", "time p95")
    table = [head]
    for r in rows:
        table.append((
            r["method"], str(r["runs"]), f"{r['valid_rate']:.0%}",
            f"{r['runs_over_cap']} ({r['over_cap_bins']})",
            f"{r['runs_empty']} ({r['empty_bins']})",
            "-" if math.isnan(r["mean_gap"]) else f"{r['mean_gap']:.2%}",
            "-" if math.isnan(r["max_gap"]) else f"{r['max_gap']:.2%}",
            f"{r['optimal_share']:.0%}",
            *(format_seconds(r[c]) + ("*" if _starved(r) else "")
              for c in ("time_p50_s", "time_p95_s")),
        ))
    return format_table(table)


def _starved(row: dict[str, Any]) -> bool:
    return bool(row.get("timed_runs")) and row["cpu_per_wall_p50"] < STARVED


# --------------------------------------------------------------------------- shared by the reports


def mean_or_nan(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def format_table(table: Sequence[Sequence[str]]) -> str:
    """The rows of ``table`` (its head first) in aligned columns, the first (the method) to the
    left and the figures to the right, with a rule under the head."""
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = []
    for i, row in enumerate(table):
        lines.append("  ".join([row[0].ljust(widths[0])]
                               + [row[c].rjust(widths[c]) for c in range(1, len(widths))]))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_figure(x: float | None, spec: str) -> str:
    """``x`` in ``spec`` (a ``str.format`` spec), or "-" where there is none (None or NaN)."""
    return "-" if x is None or math.isnan(x) else spec.format(x)


def format_seconds(seconds: float, ms_decimals: int = 1) -> str:
    return f"{seconds * 1000:.{ms_decimals}f} ms" if seconds < 1 else f"{seconds:.2f} s"


def write_rows_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """The rows as a CSV with the first row's fields as its columns; no rows, no file."""
    if not rows:
        return
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_summary_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in SUMMARY_COLUMNS})
