"""The study's plots (matplotlib is the ``plot`` extra, imported inside the functions).

Input is the study's records (dicts from ``results.jsonl``, see :mod:`seqpart.solver.study.methods`);
output is PNG files. Nothing here solves or measures anything.

- ``gap.png``: every valid plan's gap to the best proven bound, per method (all points shown).
- ``failures.png``: per method, how many runs were valid, broke the cap, left a micro-batch
  empty, or returned no plan: the failures trainers hit (an OOM, a crash on ``torch.cat([])``).
- ``time_vs_n.png``: median time against batch size.
- ``loads.png``: the micro-batches of every method on two instances: the one where most methods
  break the cap, and the one where the most leave micro-batches empty (the title counts them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

Record = dict[str, Any]


def write_plots(records: Sequence[Record], methods: Sequence[str], out: Path) -> list[Path]:
    """Write the plots above into ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in methods if any(r["method"] == m for r in records)]
    paths = []
    for name, draw in (("gap.png", _gap), ("failures.png", _failures),
                       ("time_vs_n.png", _time_vs_n), ("loads.png", _loads)):
        fig = draw(plt, records, methods)
        if fig is None:
            continue
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def best_bounds(records: Sequence[Record]) -> dict[str, int]:
    """The largest lower bound any run proved, per instance."""
    best: dict[str, int] = {}
    for r in records:
        best[r["instance"]] = max(best.get(r["instance"], 0), int(r["lower_bound"]))
    return best


def _gap(plt: Any, records: Sequence[Record], methods: Sequence[str]) -> Any:
    best = best_bounds(records)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(methods)), 4.5))
    data, labels = [], []
    for m in methods:
        mine = [r for r in records if r["method"] == m]
        gaps = [100 * (r["max_load"] - best[r["instance"]]) / best[r["instance"]]
                for r in mine if r["valid"]]
        data.append(gaps or [float("nan")])
        labels.append(f"{m}\nvalid {len(gaps)}/{len(mine)}")
    ax.boxplot(data, whis=(0, 100), showfliers=False)
    for i, gaps in enumerate(data, start=1):
        jitter = np.random.default_rng(i).uniform(-0.18, 0.18, len(gaps))
        ax.scatter(np.full(len(gaps), i) + jitter, gaps, s=6, alpha=0.5, color="tab:blue",
                   clip_on=False)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("symlog", linthresh=0.1)
    # Room above the largest gap and below zero, so no point sits on (or behind) the frame.
    finite = [g for gaps in data for g in gaps if not math.isnan(g)]
    top = max(finite, default=1.0)
    ax.set_ylim(-0.02, max(1.0, top) * 2.0)
    ax.set_ylabel("gap to lower bound (%), valid plans only")
    ax.set_title("Largest micro-batch load above the proven lower bound")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


#: Outcome of one run, in the order the bars are stacked, with their colours.
OUTCOMES = (
    ("valid", "tab:green"),
    ("over the cap", "tab:red"),
    ("empty micro-batch", "tab:orange"),
    ("over the cap and empty", "tab:purple"),
    ("no plan / error", "tab:gray"),
)


def outcome(record: Record) -> str:
    """Which of :data:`OUTCOMES` a run had."""
    if record["valid"]:
        return "valid"
    over, empty = bool(record["over_cap_bins"]), bool(record["empty_bins"])
    if over and empty:
        return "over the cap and empty"
    if over:
        return "over the cap"
    if empty:
        return "empty micro-batch"
    return "no plan / error"


def _failures(plt: Any, records: Sequence[Record], methods: Sequence[str]) -> Any:
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(methods) + 1.8))
    counts = {m: {name: 0 for name, _ in OUTCOMES} for m in methods}
    for r in records:
        if r["method"] in counts:
            counts[r["method"]][outcome(r)] += 1
    y = np.arange(len(methods))[::-1]
    left = np.zeros(len(methods))
    for name, color in OUTCOMES:
        widths = np.array([counts[m][name] for m in methods], dtype=float)
        if not widths.any():
            continue
        ax.barh(y, widths, left=left, color=color, label=name, height=0.7)
        for yi, x0, w in zip(y, left, widths, strict=True):
            if w:
                ax.text(x0 + w / 2, yi, str(int(w)), ha="center", va="center", fontsize=7,
                        color="white")
        left += widths
    ax.set_yticks(y, methods, fontsize=8)
    ax.set_xlabel("runs")
    ax.set_title("What each method returned: usable plans, and the failures trainers hit")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3,
              frameon=False)
    fig.tight_layout()
    return fig


def _time_vs_n(plt: Any, records: Sequence[Record], methods: Sequence[str]) -> Any:
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
    return fig


def _loads(plt: Any, records: Sequence[Record], methods: Sequence[str]) -> Any:
    shown_instances = showcase_instances(records)
    if not shown_instances:
        return None
    cols = min(4, len(methods))
    rows_each = -(-len(methods) // cols)
    fig = plt.figure(figsize=(3.4 * cols, 2.9 * rows_each * len(shown_instances)),
                     layout="constrained")
    subfigs = np.atleast_1d(fig.subfigures(len(shown_instances), 1))
    for sub, (instance, why) in zip(subfigs, shown_instances, strict=True):
        mine = {r["method"]: r for r in records if r["instance"] == instance}
        shown = [m for m in methods if m in mine]
        axes = sub.subplots(rows_each, cols, squeeze=False, sharey=True)
        cap = mine[shown[0]]["cap"]
        for ax, m in zip(axes.flat, shown, strict=False):
            tokens = mine[m]["tokens"]
            colors = ["tab:red" if t > cap else "tab:blue" for t in tokens]
            ax.bar(range(len(tokens)), tokens, color=colors, width=0.85)
            empty = [b for b, t in enumerate(tokens) if t == 0]
            ax.scatter(empty, [0] * len(empty), marker="x", color="tab:orange", zorder=3,
                       clip_on=False, s=30)
            ax.axhline(cap, color="black", linestyle="--", linewidth=1)
            if not tokens:
                ax.text(0.5, 0.5, "no plan", ha="center", va="center", transform=ax.transAxes)
            verdict = "valid" if mine[m]["valid"] else (
                f"{mine[m]['over_cap_bins']} over cap, {mine[m]['empty_bins']} empty")
            ax.set_title(f"{m}\n{verdict}", fontsize=8,
                         color="black" if mine[m]["valid"] else "tab:red")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(shown):]:
            ax.axis("off")
        axes[0][0].set_ylabel("tokens (dashed: cap)", fontsize=7)
        axes[-1][0].set_xlabel("micro-batch (x: empty)", fontsize=7)
        sub.suptitle(f"{why}: " + instance.replace("|", "  "), fontsize=8)
    return fig


def showcase_instances(records: Sequence[Record]) -> list[tuple[str, str]]:
    """Up to two instances to draw: where most methods break the cap, and where most leave a
    micro-batch empty (the two failures of the trainers' methods, docs/partition.md), with few
    enough micro-batches for the bars to stay readable. Returns (instance, why) pairs; ``why``
    counts the methods, e.g. "2 of 8 methods leave a micro-batch empty"."""
    score: dict[str, list[int]] = {}  # instance -> [runs over cap, runs with empty, k, runs]
    for r in records:
        s = score.setdefault(r["instance"], [0, 0, int(r["k"]), 0])
        s[0] += 1 if r["over_cap_bins"] else 0
        s[1] += 1 if r["empty_bins"] else 0
        s[3] += 1
    readable = {i: s for i, s in score.items() if 2 <= s[2] <= 24} or score
    chosen: list[tuple[str, str]] = []
    # The title counts the methods: "most" was wrong when 2 of 8 left one empty.
    for which, what in ((0, "go over the cap"), (1, "leave a micro-batch empty")):
        candidates = {i: s for i, s in readable.items() if i not in {c for c, _ in chosen}}
        if not candidates:
            break
        best = max(candidates, key=lambda i: (candidates[i][which], -candidates[i][2], i))
        hits, runs = candidates[best][which], candidates[best][3]
        if hits or not chosen:
            chosen.append((best, f"{hits} of {runs} methods {what}" if hits else "an instance"))
    return chosen
