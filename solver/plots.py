"""The study's plots (matplotlib is the ``plot`` extra, imported inside the functions).

Input is the study's records (dicts from ``results.jsonl``, see :mod:`seqpart.solver.study`);
output is PNG files. Nothing here solves or measures anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def write_plots(records: Sequence[dict[str, Any]], methods: Sequence[str], out: Path) -> list[Path]:
    """gap.png, time_vs_n.png, loads.png; matplotlib is the ``plot`` extra, imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in methods if any(r["method"] == m for r in records)]
    best_bound: dict[str, int] = {}
    for r in records:
        best_bound[r["instance"]] = max(best_bound.get(r["instance"], 0), int(r["lower_bound"]))
    paths = []

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(methods)), 4.5))
    data, labels = [], []
    for m in methods:
        mine = [r for r in records if r["method"] == m]
        gaps = [100 * (r["max_load"] - best_bound[r["instance"]]) / best_bound[r["instance"]]
                for r in mine if r["valid"]]
        data.append(gaps or [float("nan")])
        labels.append(f"{m}\nvalid {len(gaps)}/{len(mine)}")
    ax.boxplot(data, whis=(0, 100), showfliers=False)
    for i, gaps in enumerate(data, start=1):
        jitter = np.random.default_rng(i).uniform(-0.18, 0.18, len(gaps))
        ax.scatter(np.full(len(gaps), i) + jitter, gaps, s=6, alpha=0.5, color="tab:blue")
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("gap to lower bound (%), valid plans only")
    ax.set_title("Largest micro-batch load above the proven lower bound")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    paths.append(out / "gap.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for m in methods:
        by_n: dict[int, list[float]] = {}
        for r in records:
            if r["method"] == m:
                by_n.setdefault(r["n"], []).append(r["seconds"])
        ns = sorted(by_n)
        ax.plot(ns, [1000 * float(np.median(by_n[n])) for n in ns], marker="o", label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sequences per batch (n)")
    ax.set_ylabel("median time (ms)")
    ax.set_title("Time against batch size")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "time_vs_n.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    instance = showcase_instance(records)
    if instance is not None:
        mine = {r["method"]: r for r in records if r["instance"] == instance}
        shown = [m for m in methods if m in mine]
        cols = min(4, len(shown))
        rows_n = -(-len(shown) // cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 2.8 * rows_n), squeeze=False,
                                 sharey=True)
        cap = mine[shown[0]]["cap"]
        for ax, m in zip(axes.flat, shown, strict=False):
            tokens = mine[m]["tokens"]
            colors = ["tab:red" if t > cap else "tab:blue" for t in tokens]
            ax.bar(range(len(tokens)), tokens, color=colors, width=0.85)
            empty = [b for b, t in enumerate(tokens) if t == 0]
            ax.scatter(empty, [0] * len(empty), marker="x", color="tab:red", zorder=3)
            ax.axhline(cap, color="black", linestyle="--", linewidth=1)
            verdict = "valid" if mine[m]["valid"] else (
                f"{mine[m]['over_cap_bins']} over cap, {mine[m]['empty_bins']} empty")
            ax.set_title(f"{m}\n{verdict}", fontsize=8)
            ax.set_xlabel("micro-batch", fontsize=7)
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(shown):]:
            ax.axis("off")
        axes[0][0].set_ylabel("tokens (dashed: cap)", fontsize=7)
        fig.suptitle(instance.replace("|", "  "), fontsize=8)
        fig.tight_layout()
        paths.append(out / "loads.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def showcase_instance(records: Sequence[dict[str, Any]]) -> str | None:
    """The instance where most methods break the cap (then: are invalid), with few micro-batches
    so the bars stay readable."""
    score: dict[str, tuple[int, int, int]] = {}
    for r in records:
        over, bad, k = score.get(r["instance"], (0, 0, r["k"]))
        score[r["instance"]] = (over + (1 if r["over_cap_bins"] else 0),
                                bad + (0 if r["valid"] else 1), k)
    readable = {i: s for i, s in score.items() if 2 <= s[2] <= 24} or score
    if not readable:
        return None
    # Over-cap failures first: they are the ones an OOM comes from.
    return max(readable, key=lambda i: (readable[i][0], readable[i][1], -readable[i][2], i))
