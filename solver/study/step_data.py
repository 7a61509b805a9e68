"""``seqpart step --data FILE``: how much faster would *my* step be?

The user's lengths (any format :mod:`~seqpart.solver.study.readers` reads) are cut into
training steps (``global_batch`` sequences each, in file order; or the whole file as one step)
and each step is scheduled by every trainer scheduler seqpart re-implements
(:data:`seqpart.heuristics.TRAINER_SCHEDULERS`: slime, prime-rl, verl, Megatron) and by
:func:`~seqpart.solver.step.plan_step`, for the user's ``dp``, ``pp`` and ``vpp``. Every
schedule is checked with the step validator and scored with the step model against the step
lower bound (the same scoring as the step study, :func:`~.step_study.run_step_task`). A
trainer's schedule that breaks the cap or gives ranks unequal counts is reported as invalid
(the trainer would run out of memory or hang), not hidden.

With vpp > 1 every method's count is a multiple of pp (Megatron's interleaved schedule needs
it) unless ``multiple_of`` says otherwise.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..step.model import default_multiple_of
from ..step.pipeline import pipeline_sizes
from .step_report import TRAINERS
from .step_study import Setting, run_step_task

#: The methods of ``step --data``: the trainers' schedulers, then seqpart's step planner.
DATA_METHODS = (*TRAINERS, "plan_step")
DEFAULT_OUT = "seqpart-step-data"


@dataclass(frozen=True)
class StepDataConfig:
    """One user's step question. ``cost`` is "tokens", "attention" or a ``Cost``;
    ``overhead`` is in the cost's units; ``unit_seconds`` (from a cost profile) turns the
    model's step time into seconds."""

    lengths: tuple[int, ...]
    source: str
    dp: int
    pp: int = 1
    vpp: int = 1
    multiple_of: int | None = None  # None: pp when vpp > 1, else 1
    cap: int | None = None  # None: the longest sequence
    global_batch: int | None = None  # None: the whole file is one step
    cost: Any = "attention"
    overhead: int = 0
    unit_seconds: float | None = None
    time_limit: float = 1.0
    #: plan_step on counted work, not the clock (``SolverOptions(deterministic=True)``): the
    #: same plans on every run and machine.
    deterministic: bool = False
    methods: tuple[str, ...] = DATA_METHODS
    out: str | None = DEFAULT_OUT
    plots: bool = True


@dataclass
class StepDataOutcome:
    steps: int
    cap: int
    multiple_of: int
    left_out: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plot: Path | None = None
    plot_skipped: str | None = None
    seconds: float = 0.0


def split_steps(lengths: Sequence[int], global_batch: int | None) -> tuple[list[tuple[int, ...]], int]:
    """The steps in file order, and how many trailing sequences do not fill one."""
    if global_batch is None:
        return [tuple(lengths)], 0
    steps = [tuple(lengths[i:i + global_batch])
             for i in range(0, len(lengths) - global_batch + 1, global_batch)]
    return steps, len(lengths) - global_batch * len(steps)


def run_step_data(config: StepDataConfig, say: Callable[[str], None] = lambda _: None
                  ) -> StepDataOutcome:
    """Schedule every step with every method; summarise per method over the steps."""
    t0 = time.perf_counter()
    lengths = config.lengths
    try:
        pipeline_sizes(config.pp, config.vpp)
    except ValueError as err:
        raise UsageError(f"--pp {config.pp} --vpp {config.vpp}: {err}") from None
    if config.global_batch is not None and config.global_batch > len(lengths):
        raise UsageError(f"--global-batch {config.global_batch} is more than the "
                         f"{len(lengths)} sequences in {config.source}")
    steps, left_out = split_steps(lengths, config.global_batch)
    smallest = min(len(s) for s in steps)
    if smallest < config.dp:
        raise UsageError(f"a step of {smallest} sequences cannot give each of --dp {config.dp} "
                         "ranks a micro-batch: use a larger --global-batch or a smaller --dp")
    cap = config.cap if config.cap is not None else max(lengths)
    group = config.multiple_of or default_multiple_of(config.pp, config.vpp)
    outcome = StepDataOutcome(len(steps), cap, group, left_out)
    if left_out:
        outcome.notes.append(f"the last {left_out} sequences do not fill a step of "
                             f"{config.global_batch}: left out")
    if config.cap is None:
        outcome.notes.append(f"no --cap: the cap is the longest sequence, {cap} tokens; pass "
                             "--cap with your trainer's max tokens per micro-batch")
    for i, step in enumerate(steps):
        say(f"seqpart step: step {i + 1} of {len(steps)} ({len(step)} sequences)")
        setting = Setting(f"{config.source}|step={i}", config.source, len(step), i, config.dp,
                          cap, config.cost, config.overhead, config.vpp, (config.pp,), step,
                          group)
        for method in config.methods:
            record = run_step_task((setting, method, (config.pp,), config.time_limit, 1,
                                    config.deterministic))
            outcome.records.append({**record, "step": i, "cost": str(config.cost)})
    outcome.rows = [{**row, "cap": cap}
                    for row in summarize_data(outcome.records, config.methods, config.pp)]
    if config.out is not None:
        out = Path(config.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"--out {config.out}: cannot create it ({err.strerror})") from None
        (out / "step_data.json").write_text(json.dumps(
            {"source": config.source, "dp": config.dp, "pp": config.pp, "vpp": config.vpp,
             "cap": cap, "multiple_of": group, "cost": str(config.cost),
             "overhead": config.overhead, "unit_seconds": config.unit_seconds,
             "rows": outcome.rows, "records": outcome.records}, default=str, indent=1))
        if config.plots:
            try:
                outcome.plot = write_data_plot(outcome.rows, config, out)
            except ImportError:
                outcome.plot_skipped = ("plot skipped: matplotlib is not installed "
                                        "(pip install 'seqpart[plot]')")
    outcome.seconds = time.perf_counter() - t0
    return outcome


def summarize_data(records: Sequence[dict[str, Any]], methods: Sequence[str], pp: int
                   ) -> list[dict[str, Any]]:
    """Per method over the steps: the summed step time (every step, valid or not), the valid
    steps, the summed bound, and the sum over plan_step's."""
    key = str(pp)
    bound = {}
    for r in records:
        lb = r["pp"].get(key, {}).get("lb")
        if lb is not None:
            bound[r["step"]] = lb
    rows = []
    for m in methods:
        mine = [r for r in records if r["method"] == m]
        # A schedule whose count the pipeline cannot run has no step time (it is invalid).
        scored = [r for r in mine if r["pp"].get(key, {}).get("step") is not None]
        unrunnable = [r for r in mine if r["valid"] and r not in scored]
        bad = [r for r in mine if not r["valid"]] + unrunnable
        why = []
        if bad:  # the first invalid step's first reason stands for them
            first = bad[0]
            reason = (f"error: {first['error'][:80]}" if first["error"] else
                      (first.get("why") or ["the pipeline schedule refuses its count"])[0]
                      .split(" (")[0])
            why = [f"step {first['step'] + 1}: {reason}"]
        total = sum(r["pp"][key]["step"] for r in scored) if len(scored) == len(mine) else None
        rows.append({
            "method": m, "steps": len(mine),
            "valid_steps": sum(1 for r in mine if r["valid"]) - len(unrunnable),
            "over_cap_steps": sum(1 for r in mine if r["over_cap"]),
            "unequal_steps": sum(1 for r in mine if r["unequal"]),
            "step_time": total,
            "bound": sum(bound.values()) if len(bound) == len(mine) else None,
            "mean_m": sum(r["m"] for r in mine if r["m"]) / max(1, sum(1 for r in mine if r["m"])),
            "seconds": sum(r["seconds"] for r in mine), "why_invalid": why[:3],
        })
    ref = next((r["step_time"] for r in rows if r["method"] == "plan_step"), None)
    for r in rows:
        r["vs_plan_step"] = (r["step_time"] / ref) if ref and r["step_time"] is not None else None
        r["over_bound"] = (r["step_time"] / r["bound"]
                           if r["bound"] and r["step_time"] is not None else None)
    return rows


def format_data_summary(rows: Sequence[dict[str, Any]], unit_seconds: float | None) -> str:
    """The table: step time (summed over steps; seconds with a cost profile, else the model's
    cost units), the ratio to plan_step's, and to the lower bound."""
    unit = "s" if unit_seconds else "units"
    head = ["method", "valid steps", f"step time ({unit})", "vs plan_step", "vs bound",
            "m per rank", "plan time", "why invalid"]
    table = [head]
    for r in rows:
        t = r["step_time"]
        shown = "-" if t is None else (f"{t * unit_seconds:.4g}" if unit_seconds else f"{t:.4g}")
        table.append([
            r["method"], f"{r['valid_steps']}/{r['steps']}", shown,
            "-" if r["vs_plan_step"] is None else f"{r['vs_plan_step']:.4f}x",
            "-" if r["over_bound"] is None else f"{r['over_bound']:.4f}",
            f"{r['mean_m']:.1f}", f"{r['seconds']:.2f} s", "; ".join(r["why_invalid"]) or "",
        ])
    widths = [max(len(row[c]) for row in table) for c in range(len(head))]
    lines = []
    for i, row in enumerate(table):
        lines.append("  ".join([row[0].ljust(widths[0])]
                               + [row[c].rjust(widths[c]) for c in range(1, len(head) - 1)]
                               + [row[-1]]).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_data_plot(rows: Sequence[dict[str, Any]], config: StepDataConfig, out: Path) -> Path:
    """step_data.png: each method's step time over plan_step's (bars; hatched: some step's
    schedule is invalid), with the lower bound as a line. matplotlib is imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["vs_plan_step"] is not None]
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, r in enumerate(shown):
        valid = r["valid_steps"] == r["steps"]
        ax.bar(i, r["vs_plan_step"], color="tab:green" if r["method"] == "plan_step" else
               "tab:blue" if valid else "tab:red", hatch=None if valid else "//")
    ref = next((r for r in rows if r["method"] == "plan_step"), None)
    if ref and ref["bound"] and ref["step_time"]:
        ax.axhline(ref["bound"] / ref["step_time"], color="black", linestyle="--", linewidth=1,
                   label="lower bound")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(shown)), [r["method"] for r in shown], rotation=30, fontsize=8)
    finite = [r["vs_plan_step"] for r in shown if math.isfinite(r["vs_plan_step"])]
    ax.set_ylim(min(0.9, *finite) * 0.98, max(finite) * 1.02)
    ax.set_ylabel("step time / plan_step's (red: invalid in some step)")
    ax.set_title(f"{Path(config.source).name}: dp={config.dp}, pp={config.pp}, vpp={config.vpp}, "
                 f"{rows[0]['steps']} step(s), cap {rows[0].get('cap', config.cap)}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "step_data.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
