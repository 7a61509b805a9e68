"""The CP study's report: per sync model and method, the summary rows, the table and the CSV.

Each record is one schedule (see :func:`~.study.run_cp_task`); a baseline's record is scored
under both sync models, ``plan_cp_step``'s under the one it planned for. Times over the bound
are over valid schedules only, against the best bound known for the setting and sync model
(:func:`best_bounds`); plan_cp_step's speed-up over a method is that method's time over
plan_cp_step's on the same setting, where both are valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..methods_report import (
    STARVED,
    cpu_contention,
    format_figure,
    format_seconds,
    format_table,
    mean_or_nan,
    write_rows_csv,
)
from .methods import TIMED

PLANNER = "plan_cp_step"


def applies(record: Mapping[str, Any], sync: str) -> bool:
    """Whether a record is a run under ``sync``: a baseline's always, the planner's when it
    planned for it."""
    return record["sync"] in (None, sync)


def scored(record: Mapping[str, Any], sync: str) -> dict[str, Any] | None:
    """The record's time and bound under ``sync``, or None when it has no valid schedule."""
    return record["by_sync"].get(sync) if record["valid"] else None


def best_bounds(records: Sequence[dict[str, Any]], sync: str) -> dict[str, float]:
    """Per setting, the largest lower bound known under ``sync``: the model's
    (:func:`~seqpart.solver.dynamic_cp.cp_lower_bound`, in every scored record), or the one
    plan_cp_step reported for that sync model when higher (its exact model's, on small
    instances). Every valid schedule's time is at least it."""
    best: dict[str, float] = {}
    for r in records:
        v = scored(r, sync) if applies(r, sync) else None
        found = [v["bound"]] if v is not None else []
        if r["method"] == PLANNER and r["sync"] == sync and r["detail"].get("lower_bound"):
            found.append(r["detail"]["lower_bound"])
        for b in found:
            best[r["setting"]] = max(best.get(r["setting"], 0.0), b)
    return best


def over_bound(records: Sequence[dict[str, Any]], sync: str) -> list[tuple[dict[str, Any], float]]:
    """Each valid schedule's time under ``sync`` over the setting's best bound."""
    best = best_bounds(records, sync)
    return [(r, v["time"] / best[r["setting"]]) for r in records if applies(r, sync)
            and (v := scored(r, sync)) is not None and best.get(r["setting"])]


def summarize(records: Sequence[dict[str, Any]], methods: Sequence[str], sync: str
              ) -> list[dict[str, Any]]:
    """One row per method that ran, for one sync model."""
    plan = {r["setting"]: v["time"] for r in records if r["method"] == PLANNER and r["sync"] == sync
            and (v := scored(r, sync)) is not None}
    ratios = over_bound(records, sync)
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method and applies(r, sync)]
        if not mine:
            continue
        valid = [(r, v) for r in mine if (v := scored(r, sync)) is not None]
        over = [x for r, x in ratios if r["method"] == method]
        # The baseline's time over the planner's: the planner's speed-up over it.
        speed = [v["time"] / plan[r["setting"]] for r, v in valid
                 if method != PLANNER and plan.get(r["setting"])]
        walls = [r["seconds"] for r in mine]
        rows.append({
            "sync": sync,
            "method": method,
            "runs": len(mine),
            "valid_rate": len(valid) / len(mine),
            "errors": sum(1 for r in mine if r["error"]),
            "mean_over_bound": mean_or_nan(over),
            "max_over_bound": max(over, default=float("nan")),
            "planner_speedup_mean": mean_or_nan(speed),
            "planner_speedup_max": max(speed, default=float("nan")),
            # Settings where plan_cp_step was slower than this method (it never should be).
            "planner_behind": sum(1 for x in speed if x < 1) if method != PLANNER else None,
            "degrees": ",".join(str(c) for c in sorted({c for r, _ in valid for c in r["degrees"]})),
            "mean_steps": mean_or_nan([r["steps"] for r, _ in valid]),
            "wall_p50_s": float(np.percentile(walls, 50)),
            "wall_max_s": max(walls),
            # Its timed runs had under 0.8 of a core (median): the walls include waiting.
            "starved": method in TIMED and cpu_contention(mine)["cpu_per_wall_p50"] < STARVED,
        })
    return rows


def timing_rows(records: Sequence[dict[str, Any]], methods: Sequence[str]) -> list[dict[str, Any]]:
    """The timed methods' CPU contention (for the study's timing note)."""
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        if method in TIMED and mine:
            rows.append({"method": method, **cpu_contention(mine)})
    return rows


def format_summary(rows: Mapping[str, Sequence[dict[str, Any]]]) -> str:
    """A table per sync model: "time/LB" is the modelled step time over the best lower bound
    known (valid schedules), "plan_cp_step speed-up" each method's time over plan_cp_step's on the same
    setting (mean, then max), "slower" the settings where plan_cp_step was the slower one; a
    wall time marked * is of runs that had under 0.8 of a core (the timing note says more)."""
    head = ["method", "runs", "valid", "errors", "time/LB mean", "max", "plan_cp_step speed-up",
            "slower", "degrees", "steps", "wall p50", "wall max"]
    parts = []
    for sync, sync_rows in rows.items():
        table = [head]
        for r in sync_rows:
            speed = "-" if math.isnan(r["planner_speedup_mean"]) else (
                f"{r['planner_speedup_mean']:.3f}x (max {r['planner_speedup_max']:.3f}x)")
            table.append([
                r["method"], str(r["runs"]), f"{r['valid_rate']:.0%}", str(r["errors"]),
                format_figure(r["mean_over_bound"], "{:.3f}"),
                format_figure(r["max_over_bound"], "{:.3f}"), speed,
                "-" if r["planner_behind"] is None else str(r["planner_behind"]),
                r["degrees"] or "-", format_figure(r["mean_steps"], "{:.1f}"),
                *(format_seconds(r[c], ms_decimals=0) + ("*" if r["starved"] else "")
                  for c in ("wall_p50_s", "wall_max_s")),
            ])
        title = (f"sync={sync}: modelled step time over the best lower bound known, and "
                 "plan_cp_step's speed-up over each method")
        parts.append(f"{title}\n{format_table(table)}")
    return "\n\n".join(parts)


def write_summary_csv(rows: Mapping[str, Sequence[dict[str, Any]]], path: Path) -> None:
    write_rows_csv([r for sync_rows in rows.values() for r in sync_rows], path)
