"""The CP study's figures (matplotlib is the ``plot`` extra, imported inside the function).

- ``cp_over_bound.png``: every valid schedule's modelled step time over the best lower bound
  known for its setting (:func:`~.report.best_bounds`), per method, one panel per sync model
  (all points shown over a box of their range).
- ``cp_degrees.png``: the share of each method's groups that ran at each CP degree, over its
  valid schedules (plan_cp_step per sync model: its schedule depends on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .report import applies, over_bound

Record = dict[str, Any]


def write_cp_plots(records: Sequence[Record], methods: Sequence[str], syncs: Sequence[str],
                   out: Path) -> list[Path]:
    """Write the two plots into ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in methods if any(r["method"] == m for r in records)]
    paths = []
    for name, fig in (("cp_over_bound.png", _over_bound(plt, records, methods, syncs)),
                      ("cp_degrees.png", _degrees(plt, records, methods, syncs))):
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def _over_bound(plt: Any, records: Sequence[Record], methods: Sequence[str],
                syncs: Sequence[str]) -> Any:
    fig, axes = plt.subplots(1, len(syncs), figsize=(4.5 * len(syncs), 4.5), sharey=True,
                             squeeze=False)
    for ax, sync in zip(axes[0], syncs, strict=True):
        data, labels = [], []
        ratios = over_bound(records, sync)
        for m in methods:
            mine = [r for r in records if r["method"] == m and applies(r, sync)]
            vals = [x for r, x in ratios if r["method"] == m]
            data.append(vals or [float("nan")])
            labels.append(f"{m}\nvalid {len(vals)}/{len(mine)}")
        ax.boxplot(data, whis=(0, 100), showfliers=False)
        for i, vals in enumerate(data, start=1):
            jitter = np.random.default_rng(i).uniform(-0.18, 0.18, len(vals))
            ax.scatter(np.full(len(vals), i) + jitter, vals, s=6, alpha=0.5, color="tab:blue")
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(f"sync={sync}")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("modelled step time / lower bound (valid schedules)")
    fig.suptitle("Dynamic CP: step time above the lower bound")
    fig.tight_layout()
    return fig


def _degrees(plt: Any, records: Sequence[Record], methods: Sequence[str],
             syncs: Sequence[str]) -> Any:
    series: list[tuple[str, dict[int, int]]] = []
    for m in methods:
        for sync in (syncs if m == "plan_cp_step" else [None]):
            counts: dict[int, int] = {}
            for r in records:
                if r["method"] == m and r["valid"] and r["sync"] == sync:
                    for c, k in r["groups_by_degree"].items():
                        counts[int(c)] = counts.get(int(c), 0) + k
            series.append((f"{m} ({sync})" if sync else m, counts))
    degrees = sorted({c for _, counts in series for c in counts}) or [1]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(degrees) + 5), 4.5))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(degrees))
    for j, (label, counts) in enumerate(series):
        total = sum(counts.values()) or 1
        ax.bar(x + (j - (len(series) - 1) / 2) * width,
               [100 * counts.get(c, 0) / total for c in degrees], width,
               label=f"{label} ({sum(counts.values())} groups)")
    ax.set_xticks(x, [str(c) for c in degrees])
    ax.set_xlabel("CP degree (GPUs in the group)")
    ax.set_ylabel("share of the method's groups (%), valid schedules")
    ax.set_title("Dynamic CP: the degrees each method uses")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
