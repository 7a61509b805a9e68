"""A picture of a calibration: measured against fitted time per micro-batch, the residuals, and
the fitted split of each micro-batch's time into overhead, linear and quadratic parts.
matplotlib is imported here only (the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .profile import CostProfile


def plot_profile(profile: CostProfile, path: str | Path) -> Path:
    """Write the three panels for ``profile``'s measurements to ``path`` (PNG, SVG, PDF)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'seqpart[plot]'") from exc
    rows = profile.measurements
    if not rows:
        raise ValueError("the profile holds no measurements to plot (it was written without them)")
    lengths = [r["lengths"] for r in rows]
    meas = np.array([r["seconds"] for r in rows]) * 1e3
    pred = np.array([profile.seconds(ls) for ls in lengths]) * 1e3
    held = np.array([bool(r.get("held_out")) for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    _measured_vs_fitted(axes[0], meas, pred, held)
    _residuals(axes[1], lengths, meas, pred, held)
    _split(axes[2], profile, lengths)
    fig.suptitle(f"{profile.model.get('kind', 'model')} on {profile.device} ({profile.dtype}): "
                 f"t = {profile.overhead_s * 1e3:.3g} ms + {profile.linear_s * 1e6:.3g} us*l "
                 f"+ {profile.quadratic_s * 1e9:.3g} ns*l^2 per sequence")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _measured_vs_fitted(ax: Any, meas: np.ndarray, pred: np.ndarray, held: np.ndarray) -> None:
    ax.scatter(meas[~held], pred[~held], s=14, label="training micro-batches")
    ax.scatter(meas[held], pred[held], s=22, marker="x", label="held-out micro-batches")
    top = float(max(meas.max(), pred.max())) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=0.8)
    ax.set(xlabel="measured (ms)", ylabel="fitted (ms)", title="measured vs fitted")
    ax.legend(fontsize=8)


def _residuals(ax: Any, lengths: list[list[int]], meas: np.ndarray, pred: np.ndarray,
               held: np.ndarray) -> None:
    totals = np.array([sum(ls) for ls in lengths])
    rel = (pred - meas) / meas * 100
    ax.scatter(totals[~held], rel[~held], s=14, label="training")
    ax.scatter(totals[held], rel[held], s=22, marker="x", label="held-out")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xlabel="tokens in the micro-batch", ylabel="(fitted - measured) / measured (%)",
           title="relative residuals")
    ax.legend(fontsize=8)


def _split(ax: Any, profile: CostProfile, lengths: list[list[int]]) -> None:
    order = sorted(range(len(lengths)), key=lambda i: (sum(lengths[i]), len(lengths[i])))
    over = np.full(len(order), profile.overhead_s * 1e3)
    lin = np.array([profile.linear_s * sum(lengths[i]) for i in order]) * 1e3
    quad = np.array([profile.quadratic_s * sum(x * x for x in lengths[i]) for i in order]) * 1e3
    x = np.arange(len(order))
    ax.bar(x, over, label="overhead", width=1.0)
    ax.bar(x, lin, bottom=over, label="linear (a*sum l)", width=1.0)
    ax.bar(x, quad, bottom=over + lin, label="quadratic (b*sum l^2)", width=1.0)
    ax.set(xlabel="micro-batches, by token total", ylabel="fitted time (ms)", title="fitted split")
    ax.legend(fontsize=8)
