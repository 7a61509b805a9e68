"""The measurements behind ``gpu_check.py``: the environment, a calibration sized to its time
share, and the peak-memory fit with its cap check (the replay and the context-parallel step are
in ``gpu_replay.py``). Each step returns a JSON-able dict.

The timing and fitting are seqpart's own (``seqpart.solver.measure``): this module only sizes
the work to the time it is given and runs it on one device.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.solver import Cost
from seqpart.solver.measure.calibrate import (
    Timings,
    _cuda_memory,
    largest_cap,
    memory_fit,
    profile_from_timings,
    time_micro_batches,
)
from seqpart.solver.measure.design import Design, make_design
from seqpart.solver.measure.profile import CostProfile

Hooks = Callable[[], tuple[Callable[[], None], Callable[[], int]]]


@dataclass(frozen=True)
class Workload:
    """One replayed batch: ``n`` lengths drawn from a bundled dataset, under a token cap."""

    kind: str
    dataset: str
    n: int
    cap: int


@dataclass(frozen=True)
class Settings:
    """What one run measures, and how much of it; ``GPU`` and ``SMOKE`` in gpu_check.py."""

    device: str
    dtype: str
    #: name -> transformers config (random weights)
    models: dict[str, dict[str, Any]]
    #: the design's largest micro-batch: the largest of these that fits the time and memory
    max_tokens: tuple[int, ...]
    max_count: int = 32
    held_out: int = 16
    min_length: int = 16
    repeats: int = 3
    warmup: int = 1
    min_seconds: float = 0.1
    max_rounds: int = 8
    #: tokens of the probe micro-batch that sizes the design
    probe_tokens: int = 8192
    #: the design's largest micro-batch may use this share of the device's memory
    design_memory: float = 0.6
    #: memory budgets of the cap check, as shares of the device's memory
    budgets: tuple[float, ...] = (0.5, 0.8)
    workloads: tuple[Workload, ...] = ()
    dp: int = 2
    #: lengths are divided by this (1: real size)
    length_divisor: int = 1
    replay_repeats: tuple[int, int] = (3, 8)  # fewest and most paired rounds
    plan_time_limit: float = 1.0
    #: the modelled all-reduce: ring over dp ranks at this bus bandwidth, plus a latency
    allreduce_gbps: float = 100.0
    allreduce_latency_s: float = 50e-6


# --- 1. environment ------------------------------------------------------------------------------


def environment(device: str) -> dict[str, Any]:
    """GPU names, memory, driver, and the torch, CUDA and transformers versions."""
    import torch
    import transformers

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out: dict[str, Any] = {
        "status": "done", "device": device, "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if gpus else None,
        "transformers": transformers.__version__, "gpus_visible": gpus,
        "flash_attn_installed": importlib.util.find_spec("flash_attn") is not None,
        "attention": "torch scaled_dot_product_attention per sequence of the packed row "
                     "(transformers AttentionInterface 'seqpart_varlen')",
    }
    out["gpus"] = []
    for i in range(gpus):
        p = torch.cuda.get_device_properties(i)
        out["gpus"].append({"name": p.name, "memory_bytes": int(p.total_memory),
                            "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count})
    if gpus:
        out["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
    out["driver"] = _driver()
    return out


def _driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        got = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return got.stdout.strip().splitlines()[0] if got.stdout.strip() else None


# --- 2. calibration ------------------------------------------------------------------------------


def build(config: dict[str, Any], s: Settings) -> tuple[Any, dict[str, Any]]:
    """A runner over the transformers model of ``config`` (random weights) on the device."""
    import torch

    from seqpart.solver.measure.models import dtype_of, hf_runner, parameter_count

    t0 = time.perf_counter()
    if s.device == "cpu":
        from seqpart.solver.measure.allocator import keep_freed_memory

        torch.set_num_threads(1)  # as calibrate() does: one thread times steadily on a shared CPU
        keep_freed_memory()
    run = hf_runner(config, device=s.device, dtype=dtype_of(s.dtype), seed=0)
    return run, {"parameters": parameter_count(run), "build_s": time.perf_counter() - t0}


def release() -> None:
    """Give back the memory of dropped models (call once no reference to them is left), so
    the next model is measured alone."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def memory_hooks(device: str) -> Hooks | None:
    """CUDA's peak-memory reset and reader (seqpart's own); None elsewhere."""
    if not device.startswith("cuda"):
        return None
    import torch

    return _cuda_memory(torch.device(device))


def probe(run: Any, tokens: int, hooks: Hooks | None) -> dict[str, Any]:
    """Warm up, then time a 64-token and a ``tokens``-token micro-batch (and on CUDA their
    peak memory, and the memory held before them): what sizes the design."""
    run([64])
    run([tokens])  # warm-up: kernels are chosen and memory is allocated here
    out: dict[str, Any] = {"tokens": tokens}
    for key, lengths in (("small", [64]), ("large", [tokens])):
        if hooks is not None:
            hooks()[0]()
        t0 = time.perf_counter()
        run(lengths)
        out[f"{key}_s"] = time.perf_counter() - t0
        if hooks is not None:
            out[f"{key}_peak_bytes"] = hooks()[1]()
    if hooks is not None:
        import torch

        out["held_bytes"] = int(torch.cuda.memory_allocated())
        out["device_bytes"] = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return out


def _estimate_seconds(design: Design, p: dict[str, Any], s: Settings, repeats: int) -> float:
    """The design's expected timing time: each micro-batch at the probe's overhead and
    per-token time (1.3x for attention's growth), over every round and the short ones' extra."""
    per_token = max(0.0, p["large_s"] - p["small_s"]) / p["tokens"]
    est = np.array([p["small_s"] + 1.3 * per_token * sum(mb) for mb in design.all])
    short = est * repeats < s.min_seconds
    extra = float(est[short].sum()) * max(0, s.max_rounds - repeats)
    return float(est.sum()) * (s.warmup + repeats) + extra


def memory_tokens(p: dict[str, Any], share: float) -> int | None:
    """Tokens of the largest micro-batch whose peak fits ``share`` of the device's memory, by
    the probe's two points; None without memory figures."""
    if "large_peak_bytes" not in p:
        return None
    per_token = max(1.0, (p["large_peak_bytes"] - p["small_peak_bytes"]) / (p["tokens"] - 64))
    return int((share * p["device_bytes"] - p["small_peak_bytes"]) / per_token)


def size_design(p: dict[str, Any], s: Settings, seconds: float) -> tuple[Design | None, dict[str, Any]]:
    """The largest design (by its largest micro-batch, then by fewer repeats) that fits the
    memory and ``seconds``; None with the estimates when none does."""
    allowed = memory_tokens(p, s.design_memory)
    tried = []
    for repeats in sorted({s.repeats, min(s.repeats, 2)}, reverse=True):
        for tokens in sorted(s.max_tokens, reverse=True):
            if allowed is not None and tokens > allowed:
                tried.append({"max_tokens": tokens, "skipped": f"memory allows {allowed} tokens"})
                continue
            design = make_design(tokens, s.max_count, s.held_out, seed=0, min_length=s.min_length)
            est = _estimate_seconds(design, p, s, repeats)
            tried.append({"max_tokens": tokens, "repeats": repeats, "estimated_s": est})
            if est <= seconds:
                return design, {"repeats": repeats, "estimated_s": est, "memory_allows_tokens": allowed,
                                "tried": tried}
    return None, {"memory_allows_tokens": allowed, "tried": tried}


def calibration_record(name: str, config: dict[str, Any], profile: CostProfile) -> dict[str, Any]:
    """The fit, its held-out error and repeat noise, and a/b and the overhead against the
    ``attention`` default and the FLOP count."""
    fe = profile.fit_error
    planners = (profile.extended or {}).get("held_out") if profile.planning_fit == "extended" else None
    flops = Cost.from_hf_config(config)
    attention = Cost.attention()
    return {
        "model": name,
        "fit": {"overhead_ms": profile.overhead_s * 1e3, "linear_us_per_token": profile.linear_s * 1e6,
                "quadratic_ns_per_token2": profile.quadratic_s * 1e9,
                "a_over_b_tokens": profile.ratio,
                "overhead_in_tokens": profile.overhead_s / profile.linear_s if profile.linear_s else None},
        "held_out": fe.get("held_out"), "train": fe.get("train"), "noise": fe.get("noise"),
        "planning_fit": profile.planning_fit,
        "extended": None if not profile.extended else {
            "coefficients": profile.extended["coefficients"], "held_out": profile.extended.get("held_out")},
        "planners_held_out": planners or fe.get("held_out"),
        "against": {
            "attention_default_a_over_b": attention.linear / attention.quadratic,
            "measured_over_attention_default": profile.ratio / (attention.linear / attention.quadratic),
            "flops_a_over_b": flops.linear / flops.quadratic,
            "measured_over_flops": profile.ratio / (flops.linear / flops.quadratic),
            "attention_default_overhead": "none (chosen by the caller)",
        },
    }


def calibrate_model(name: str, config: dict[str, Any], s: Settings, seconds: float
                    ) -> tuple[dict[str, Any], Design | None, CostProfile | None, Timings | None, Any]:
    """Build, probe, size the design to ``seconds``, time it and fit: (record, design,
    profile, timings, runner); all but the record and runner are None when no design fits."""
    import torch
    import transformers

    t0 = time.perf_counter()
    run, built = build(config, s)
    hooks = memory_hooks(s.device)
    p = probe(run, s.probe_tokens, hooks)
    left = seconds - (time.perf_counter() - t0)
    design, sizing = size_design(p, s, left)
    rec: dict[str, Any] = {"model": name, "config": config, **built, "probe": p, "sizing": sizing}
    if design is None:
        return {**rec, "status": "skipped",
                "reason": f"no design fits the {left:.0f} s left of this step's share"}, None, None, None, run
    repeats = sizing["repeats"]
    t1 = time.perf_counter()
    timings = time_micro_batches(run, design.all, repeats=repeats, warmup=s.warmup, seed=0, progress=False,
                                 memory=hooks, min_seconds=s.min_seconds, max_rounds=s.max_rounds)
    timed = time.perf_counter() - t1
    profile = profile_from_timings(
        design, timings, device=s.device, dtype=s.dtype, model={"kind": "transformers", "name": name,
                                                                "config": config},
        meta={"torch_version": torch.__version__, "transformers_version": transformers.__version__},
        threads=1 if s.device == "cpu" else None, repeats=repeats, warmup=s.warmup)
    rec.update(calibration_record(name, config, profile))
    rec.update(status="done", timed_s=timed, design={
        "max_tokens": design.max_tokens, "max_count": design.max_count, "train": len(design.train),
        "held_out": len(design.held_out), "min_length": design.min_length, "repeats": repeats,
        "warmup": s.warmup, "rounds_used": int(timings.samples.shape[1])})
    return rec, design, profile, timings, run


# --- 3. peak memory ------------------------------------------------------------------------------


def _relative(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    rel = np.abs(pred - meas) / meas
    return {"median_rel": float(np.median(rel)), "max_rel": float(np.max(rel)), "count": int(len(rel))}


def _predict(fit: dict[str, Any], mb: Sequence[int]) -> float:
    return (fit["base_bytes"] + fit["per_token_bytes"] * sum(mb)
            + fit["per_pair_bytes"] * sum(x * x for x in mb))


def _split(total: int, count: int) -> list[int]:
    base, extra = divmod(total, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def memory_model(design: Design, t: Timings) -> dict[str, Any]:
    """Peak bytes against tokens and ``sum l^2``: fitted on the training micro-batches and
    scored on the held-out ones, then refitted on all (the profile's fit)."""
    assert t.peak_bytes is not None
    n = len(design.train)
    train = Timings(t.micro_batches[:n], t.seconds[:n], t.samples[:n], t.peak_bytes[:n])
    fit = memory_fit(train)
    held = t.micro_batches[n:]
    pred = np.array([_predict(fit, mb) for mb in held])
    rows = [{"lengths_count": len(mb), "tokens": sum(mb), "sum_l2": sum(x * x for x in mb),
             "peak_bytes": float(b), "held_out": i >= n}
            for i, (mb, b) in enumerate(zip(t.micro_batches, t.peak_bytes, strict=True))]
    return {"fit": memory_fit(t), "train_fit": fit,
            "held_out_error": _relative(pred, t.peak_bytes[n:]) if len(held) else None, "points": rows}


def cap_check(run: Any, fit: dict[str, Any], budgets: Sequence[float], hooks: Hooks,
              seconds_of: Callable[[Sequence[int]], float], seconds: float,
              reserved: Callable[[], int] | None = None, cleanup: Callable[[], None] | None = None
              ) -> list[dict[str, Any]]:
    """For each memory budget (bytes): the largest cap the fit allows, then micro-batches at that
    cap (one sequence, 4 and 32 equal ones) run with their peak measured against the budget. A
    run that fails for memory counts as exceeding it. Checks whose predicted time
    (``seconds_of``) would overrun ``seconds`` are left out, with why."""
    deadline = time.perf_counter() + seconds
    out = []
    for budget in budgets:
        cap = largest_cap(fit, budget)
        row: dict[str, Any] = {"budget_bytes": float(budget), "cap": cap, "runs": []}
        out.append(row)
        if not cap:
            row["skipped"] = "the fit leaves no room for a sequence under this budget"
            continue
        for count in (1, 4, 32):
            mb = _split(cap, min(count, cap))
            need = seconds_of(mb)
            if time.perf_counter() + need > deadline:
                row["runs"].append({"count": count,
                                    "skipped": f"predicted {need:.1f} s: over the step's share"})
                continue
            row["runs"].append(_run_at_cap(run, mb, budget, fit, hooks, reserved, cleanup))
    return out


def _run_at_cap(run: Any, mb: list[int], budget: float, fit: dict[str, Any], hooks: Hooks,
                reserved: Callable[[], int] | None, cleanup: Callable[[], None] | None) -> dict[str, Any]:
    got: dict[str, Any] = {"count": len(mb), "tokens": sum(mb), "predicted_bytes": _predict(fit, mb)}
    hooks()[0]()
    try:
        run(mb)
    except Exception as exc:  # noqa: BLE001 - an out-of-memory failure is the result, others too
        got.update(error=f"{type(exc).__name__}: {str(exc)[:300]}", within_budget=False,
                   out_of_memory="out of memory" in str(exc).lower() or "OutOfMemory" in type(exc).__name__)
        if cleanup is not None:
            cleanup()
        return got
    peak = hooks()[1]()
    got.update(peak_bytes=float(peak), within_budget=peak <= budget,
               error_rel=(got["predicted_bytes"] - peak) / peak)
    if reserved is not None:
        got["reserved_bytes"] = float(reserved())
    return got


def memory_step(run: Any, design: Design | None, timings: Timings | None, profile: CostProfile | None,
                s: Settings, seconds: float) -> dict[str, Any]:
    """Step 3 for one calibrated model: the peak-memory model and the cap check (CUDA)."""
    if timings is None or design is None or profile is None:
        return {"status": "skipped", "reason": "the model's calibration did not run"}
    if timings.peak_bytes is None:
        return {"status": "skipped", "reason": profile.memory.get("reason", "peak memory not measured")}
    import torch

    hooks = memory_hooks(s.device)
    assert hooks is not None
    total = torch.cuda.get_device_properties(torch.device(s.device)).total_memory

    def cleanup() -> None:
        run.model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()

    model = memory_model(design, timings)
    checks = cap_check(run, model["fit"], [share * total for share in s.budgets], hooks, profile.seconds,
                       seconds, reserved=lambda: int(torch.cuda.max_memory_reserved()), cleanup=cleanup)
    ran = [r for c in checks for r in c["runs"] if "within_budget" in r]
    return {"status": "done", **model, "device_bytes": int(total), "budget_shares": list(s.budgets),
            "checks": checks, "cap_protects": bool(ran) and all(r["within_budget"] for r in ran),
            "checked_runs": len(ran)}
