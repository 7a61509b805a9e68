"""``gpu_check.py``'s Markdown report and plots, from its record (the dict saved as record.json).

Both are rewritten after every step, from whatever the record holds so far. matplotlib is
optional: without it the plots are left out and the record says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GIB = 2**30


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: Any, fmt: str = ".3f") -> str:
    """None (an infinite or undefined figure in the JSON) as "-"."""
    return "-" if x is None else format(x, fmt)


def render(data: dict[str, Any]) -> str:
    """The short Markdown report of a (possibly partial) record."""
    steps = data.get("steps", {})
    kind = "smoke run on CPU (tiny models, tiny lengths: NOT GPU figures)" if data.get("smoke") else "GPU run"
    done = "finished" if data.get("done") else "NOT finished"
    out = [f"# seqpart GPU check: {kind}", "",
           f"Started {data.get('started')}, {data.get('elapsed_s', 0):.0f} s so far of a "
           f"{data.get('budget_s', 0):.0f} s budget; {done}.", ""]
    out += _env(steps.get("env", {}))
    out += _calibration(steps.get("calibration", {}))
    out += _memory(steps.get("memory", {}))
    out += _replay(steps.get("replay", {}))
    cp = steps.get("cp", {})
    out += ["## 5. Context-parallel micro-batch timing", "", _status(cp) if cp.get("status") != "done"
            else "done: see `steps.cp.report` in record.json", ""]
    if "targets" in data:
        out += ["## Targets", ""] + [f"- {'SKIP' if ok is None else 'PASS' if ok else 'FAIL'} {name}"
                                     for name, ok in data["targets"].items()] + [""]
    return "\n".join(out)


def _status(step: dict[str, Any]) -> str:
    if not step:
        return "not run"
    if step.get("status") == "error":
        return f"error: {step.get('error')}"
    if step.get("status") == "skipped":
        return f"skipped: {step.get('reason')}"
    return str(step.get("status"))


def _env(env: dict[str, Any]) -> list[str]:
    if env.get("status") != "done":
        return ["## 1. Environment", "", _status(env), ""]
    gpus = ", ".join(f"{g['name']} ({g['memory_bytes'] / GIB:.0f} GiB)" for g in env.get("gpus", []))
    return ["## 1. Environment", "",
            f"GPUs: {gpus or 'none'}; driver {env.get('driver')}; torch {env.get('torch')}, "
            f"CUDA {env.get('cuda')}, transformers {env.get('transformers')}; flash-attn installed: "
            f"{env.get('flash_attn_installed')}; attention: {env.get('attention')}.", ""]


def _calibration(cal: dict[str, Any]) -> list[str]:
    out = ["## 2. Calibration", "",
           "| model | params | design | fit | a/b (tokens) | vs attention default | vs FLOPs | "
           "overhead (tokens) | held-out median | held-out max | planners' fit held-out median | noise |",
           "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for name, c in cal.items():
        if c.get("status") != "done":
            notes.append(f"- {name}: {_status(c)}")
            continue
        f, d, a = c["fit"], c["design"], c["against"]
        out.append(
            f"| {name} | {c['parameters'] / 1e9:.2f}B | {d['train']}+{d['held_out']} mbs up to "
            f"{d['max_tokens']} tokens, {d['repeats']} rounds | {f['overhead_ms']:.2f} ms + "
            f"{f['linear_us_per_token']:.3g} us*l + {f['quadratic_ns_per_token2']:.3g} ns*l^2 | "
            f"{_num(f['a_over_b_tokens'], '.0f')} | "
            f"{_num(a['measured_over_attention_default'], '.2f')}x of "
            f"{a['attention_default_a_over_b']:.0f} | "
            f"{_num(a['measured_over_flops'], '.2f')}x of {a['flops_a_over_b']:.0f} | "
            f"{_num(f['overhead_in_tokens'], '.0f')} | "
            f"{_pct(c['held_out']['median_rel'])} | {_pct(c['held_out']['max_rel'])} | "
            f"{_pct((c.get('planners_held_out') or {}).get('median_rel'))} ({c['planning_fit']}) | "
            f"{_pct(c.get('noise'))} |")
    return out + [""] + notes + ([""] if notes else [])


def _memory(mem: dict[str, Any]) -> list[str]:
    out = ["## 3. Peak memory and the cap", ""]
    for name, m in mem.items():
        if m.get("status") != "done":
            out.append(f"- {name}: {_status(m)}")
            continue
        f, e = m["fit"], m["held_out_error"] or {}
        out.append(f"- {name}: peak = {f['base_bytes'] / GIB:.2f} GiB + "
                   f"{f['per_token_bytes'] / 2**10:.1f} KiB*T + {f['per_pair_bytes']:.3g} B*sum l^2; "
                   f"held-out error median {_pct(e.get('median_rel'))}, "
                   f"max {_pct(e.get('max_rel'))}; cap protects memory: {m['cap_protects']} "
                   f"({m['checked_runs']} micro-batches at the cap)")
        for c in m["checks"]:
            runs = "; ".join(f"{r['count']} seq: {_at_cap(r)}" for r in c["runs"]) or c.get("skipped")
            out.append(f"  - budget {c['budget_bytes'] / GIB:.1f} GiB: cap {c['cap']} tokens; {runs}")
    return out + [""]


def _at_cap(r: dict[str, Any]) -> str:
    if "peak_bytes" in r:
        return f"peak {r['peak_bytes'] / GIB:.2f} GiB ({'within' if r['within_budget'] else 'OVER'})"
    return str(r.get("error") or r.get("skipped", ""))


def _replay(rep: dict[str, Any]) -> list[str]:
    out = ["## 4. Replay: plan_step against the trainers' schedules", ""]
    if rep.get("status") not in ("done", "running"):
        return out + [_status(rep), ""]
    out += [f"Method: {rep.get('method')}.", "",
            "| workload | n | tokens | cap | schedules run | rounds | best trainer | "
            "measured plan/best [interval] (level) | predicted | noise |",
            "|---|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    for w in rep.get("workloads", []):
        if w.get("status") != "done":
            out.append(f"| {w['kind']} | {w['n']} | {w['tokens']} | {w['cap']} | {len(w['schedules'])} | "
                       f"- | - | {_status(w)} | - | - |")
            continue
        m, lo, hi = w["ratio"]
        out.append(f"| {w['kind']} | {w['n']} | {w['tokens']} | {w['cap']} | {len(w['schedules'])} | "
                   f"{w['repeats']} | {w['best']} | {m:.3f} [{lo:.3f}, {hi:.3f}] ({w['ci_level']:.1%}) | "
                   f"{w['predicted_ratio']:.3f} | {_pct(w.get('noise'))} |")
    return out + [""]


def write_plots(out: Path, data: dict[str, Any]) -> list[str]:
    """The calibration, memory and replay plots the record allows and does not have yet (each is
    drawn once); the file names of all of them."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        data["plots"] = "left out: matplotlib is not installed"
        return []
    from seqpart.solver.measure.plot import plot_profile
    from seqpart.solver.measure.profile import load_cost_profile

    steps = data["steps"]
    names = list(data.get("plots") or []) if isinstance(data.get("plots"), list) else []
    for name, c in steps.get("calibration", {}).items():
        if c.get("profile_file") and f"calibration_{name}.png" not in names:
            names.append(plot_profile(load_cost_profile(out / c["profile_file"]),
                                      out / f"calibration_{name}.png").name)
    for name, m in steps.get("memory", {}).items():
        if m.get("status") == "done" and f"memory_{name}.png" not in names:
            names.append(_plot_memory(plt, m, out / f"memory_{name}.png", name))
    rows = [w for w in steps.get("replay", {}).get("workloads", []) if w.get("status") == "done"]
    if rows and steps["replay"].get("status") == "done" and "replay.png" not in names:
        names.append(_plot_replay(plt, rows, out / "replay.png"))
    data["plots"] = names
    return names


def _plot_memory(plt: Any, m: dict[str, Any], path: Path, name: str) -> str:
    pts, f = m["points"], m["fit"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    held = [p["held_out"] for p in pts]
    for ax, key, label in ((axes[0], "tokens", "tokens in the micro-batch"),
                           (axes[1], "sum_l2", "sum of l^2")):
        for flag, marker, what in ((False, "o", "training"), (True, "x", "held-out")):
            xs = [p[key] for p, h in zip(pts, held, strict=True) if h == flag]
            ys = [p["peak_bytes"] / GIB for p, h in zip(pts, held, strict=True) if h == flag]
            ax.scatter(xs, ys, marker=marker, s=16, label=what)
        ax.set(xlabel=label, ylabel="peak memory (GiB)")
        ax.legend(fontsize=8)
    pred = [(f["base_bytes"] + f["per_token_bytes"] * p["tokens"] + f["per_pair_bytes"] * p["sum_l2"]) / GIB
            for p in pts]
    axes[2].scatter([p["peak_bytes"] / GIB for p in pts], pred, s=16, label="calibration micro-batches")
    at_cap = [r for c in m["checks"] for r in c["runs"] if "peak_bytes" in r]
    axes[2].scatter([r["peak_bytes"] / GIB for r in at_cap], [r["predicted_bytes"] / GIB for r in at_cap],
                    marker="*", s=60, label="micro-batches at the cap")
    top = max([p["peak_bytes"] / GIB for p in pts] + [r["peak_bytes"] / GIB for r in at_cap]) * 1.05
    axes[2].plot([0, top], [0, top], "k--", lw=0.8)
    axes[2].set(xlabel="measured peak (GiB)", ylabel="fitted peak (GiB)", title="measured vs fitted")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"{name}: peak memory per micro-batch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _plot_replay(plt: Any, rows: list[dict[str, Any]], path: Path) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = list(range(len(rows)))
    meds = [w["ratio"][0] for w in rows]
    err = [[w["ratio"][0] - w["ratio"][1] for w in rows], [w["ratio"][2] - w["ratio"][0] for w in rows]]
    ax.errorbar(xs, meds, yerr=err, fmt="o", capsize=4, label="measured (median, exact interval)")
    ax.scatter(xs, [w["predicted_ratio"] for w in rows], marker="x", s=60, color="k", label="predicted")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs, [f"{w['kind']}\n(vs {w['best']})" for w in rows])
    ax.set(ylabel="plan_step step / best trainer's step", title="replay: one step per schedule")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
