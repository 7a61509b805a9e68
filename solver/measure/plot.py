"""A picture of a calibration: measured against fitted time per micro-batch, the residuals, and
the fitted split of each micro-batch's time into its parts (overhead, linear, quadratic, and the
per-sequence and size terms when the planners' fit has them).
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
    title = (f"{profile.model.get('kind', 'model')} on {profile.device} ({profile.dtype}), "
             f"{profile.planning_fit} fit: t = {_formula(profile.planning_coefficients)}")
    if profile.design.get("context") == "steps":
        # The points are the design's, timed alone; the fit is the one refitted inside steps.
        title += (f"\nrefitted in the step context (factor {profile.design['step_level']:.3f}); "
                  "points: the design's micro-batches, timed alone")
    fig.suptitle(title)
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


#: How each fit term reads in the title and the legend.
_NAMES = {"overhead": ("ms", 1e3, "overhead"), "linear": ("us*l", 1e6, "linear (a*sum l)"),
          "quadratic": ("ns*l^2", 1e9, "quadratic (b*sum l^2)"),
          "count": ("ms per sequence", 1e3, "per sequence"),
          "total_sq": ("ns*T^2", 1e9, "size (T^2, T = tokens)")}


def _label(term: str) -> tuple[str, float, str]:
    if term.startswith("hinge@"):
        return f"us*max(0, T-{term[6:]})", 1e6, f"size (above {term[6:]} tokens)"
    if term.startswith("fall@"):
        return f"us*max(0, {term[5:]}-T)", 1e6, f"size (below {term[5:]} tokens)"
    return _NAMES[term]


def _formula(coef: dict[str, float]) -> str:
    return " + ".join(f"{v * _label(k)[1]:.3g} {_label(k)[0]}" for k, v in coef.items() if v)


def _split(ax: Any, profile: CostProfile, lengths: list[list[int]]) -> None:
    from .profile import feature

    order = sorted(range(len(lengths)), key=lambda i: (sum(lengths[i]), len(lengths[i])))
    x = np.arange(len(order))
    bottom = np.zeros(len(order))
    for term, coef in profile.planning_coefficients.items():
        if not coef:
            continue
        part = np.array([coef * feature(lengths[i], term) for i in order]) * 1e3
        ax.bar(x, part, bottom=bottom, label=_label(term)[2], width=1.0)
        bottom += part
    ax.set(xlabel="micro-batches, by token total", ylabel="fitted time (ms)", title="fitted split")
    ax.legend(fontsize=8)
