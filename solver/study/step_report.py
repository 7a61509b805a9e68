"""The step study's report: per-setting summary rows, the table, the CSV and the plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .methods_report import STARVED, cpu_contention, format_figure, format_seconds, format_table, mean_or_nan

#: The re-implemented trainer schedulers the step study runs (seqpart.heuristics.trainer_baselines).
TRAINERS = ("slime_rr", "slime_kk", "prime_rl", "verl", "verl_retry", "megatron")


def summarize(records: Sequence[dict[str, Any]], methods: Sequence[str], pps: Sequence[int]
              ) -> list[dict[str, Any]]:
    """Per method: validity, violations, mean step time over the bound per pp (valid schedules;
    the step is the exact makespan of Megatron's schedule in the schedule's own order), the
    closed formula's figure over it (mean and range), mean count per rank, plan time; and each
    against the best valid trainer schedule, in its own order and in seqpart's order for it."""
    best: dict[tuple[str, str], float] = {}  # (setting, pp) -> best valid trainer step time
    best_ordered: dict[tuple[str, str], float] = {}
    for r in records:
        if r["method"] in TRAINERS and r["valid"]:
            for pp, v in r["pp"].items():
                k = (r["setting"], pp)
                if v["step"] is not None:
                    best[k] = min(best.get(k, math.inf), v["step"])
                    best_ordered[k] = min(best_ordered.get(k, math.inf), v["step_ordered"])
    rows = []
    for m in methods:
        mine = [r for r in records if r["method"] == m]
        if not mine:
            continue
        row: dict[str, Any] = {
            "method": m,
            "runs": len(mine),
            "valid_rate": sum(1 for r in mine if r["valid"]) / len(mine),
            "over_cap_runs": sum(1 for r in mine if r["over_cap"]),
            "unequal_runs": sum(1 for r in mine if r["unequal"]),
            "failed": sum(1 for r in mine if r["error"]),
            "mean_m": mean_or_nan([r["m"] for r in mine if r["m"]]),
            "time_p50_s": float(np.percentile([r["seconds"] for r in mine], 50)),
            "time_p95_s": float(np.percentile([r["seconds"] for r in mine], 95)),
            **cpu_contention(mine),
        }
        for pp in pps:
            vals = [r["pp"][str(pp)]["ratio"] for r in mine if r["valid"] and str(pp) in r["pp"]
                    and r["pp"][str(pp)]["ratio"] is not None]
            row[f"step_over_lb_pp{pp}"] = mean_or_nan(vals)
        fe = [v["formula_over_exact"] for r in mine if r["valid"] for pp, v in r["pp"].items()
              if int(pp) > 1 and v.get("formula_over_exact") is not None]
        row["formula_over_exact_mean"] = mean_or_nan(fe)
        row["formula_over_exact_min"] = min(fe, default=float("nan"))
        row["formula_over_exact_max"] = max(fe, default=float("nan"))
        ran = [(r, pp, v) for r in mine if r["valid"] for pp, v in r["pp"].items()
               if v["step"] is not None and (r["setting"], pp) in best]
        vs = [v["step"] / best[(r["setting"], pp)] for r, pp, v in ran]
        row["vs_best_trainer"] = mean_or_nan(vs)
        row["behind_best_trainer"] = sum(1 for x in vs if x > 1 + 1e-12)
        row["behind_reordered_trainer"] = sum(
            1 for r, pp, v in ran if v["step"] > best_ordered[(r["setting"], pp)] * (1 + 1e-12))
        rows.append(row)
    return rows


def format_summary(rows: Sequence[dict[str, Any]], pps: Sequence[int]) -> str:
    """The table: "formula/exact" is the closed formula's step over the exact makespan at
    pp > 1 (mean, then range); "vs best trainer" the mean step time over the best valid trainer
    schedule's on the same (setting, pp), "behind" how many times it was slower, "behind
    reordered" slower than a trainer's schedule in the order seqpart finds for it."""
    head = ["method", "runs", "valid", "over-cap runs", "unequal m", "failed",
            *[f"step/LB pp={pp}" for pp in pps], "formula/exact", "range", "vs best trainer",
            "behind", "behind reordered", "mean m", "time p50", "time p95"]
    table = [head]
    for r in rows:
        table.append([
            r["method"], str(r["runs"]), f"{r['valid_rate']:.0%}", str(r["over_cap_runs"]),
            str(r["unequal_runs"]), str(r["failed"]),
            *[format_figure(r[f"step_over_lb_pp{pp}"], "{:.3f}") for pp in pps],
            format_figure(r["formula_over_exact_mean"], "{:.3f}"),
            format_figure(r["formula_over_exact_min"], "{:.3f}") + ".."
            + format_figure(r["formula_over_exact_max"], "{:.3f}"),
            format_figure(r["vs_best_trainer"], "{:.3f}x"), str(r["behind_best_trainer"]),
            str(r["behind_reordered_trainer"]),
            format_figure(r["mean_m"], "{:.1f}"),
            *(format_seconds(r[c]) + ("*" if r["timed_runs"] and r["cpu_per_wall_p50"] < STARVED
                                    else "") for c in ("time_p50_s", "time_p95_s")),
        ])
    return format_table(table)


def write_plot(rows: Sequence[dict[str, Any]], pps: Sequence[int], out: Path) -> Path:
    """step_vs_pp.png: mean step time over the lower bound against pp, one line per method
    (valid schedules only). matplotlib is the ``plot`` extra, imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for r in rows:
        ys = [r[f"step_over_lb_pp{pp}"] for pp in pps]
        style = "-" if r["method"] in ("plan_step", "plan_global", "per_rank") else "--"
        ax.plot(list(pps), ys, style, marker="o", label=f"{r['method']} (valid {r['valid_rate']:.0%})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(pps), [str(p) for p in pps])
    ax.set_xlabel("pipeline stages (pp)")
    ax.set_ylabel("step time / step lower bound (mean, valid schedules)")
    ax.set_title("Step time above the lower bound")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out / "step_vs_pp.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
