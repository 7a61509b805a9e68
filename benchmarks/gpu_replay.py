"""``gpu_check.py``'s replay on one device, and its context-parallel step.

The replay runs one step of plan_step's schedule and of every trainer scheduler's on one GPU:
the dp ranks' micro-batches one rank after another, each rank's gradients dropped where its
all-reduce would be. A step is the slowest rank's compute plus a modelled ring all-reduce (one
GPU has no peer to measure one with). The plans, the predicted steps and the paired statistics
are seqpart's own (``seqpart.solver.measure.compare`` and ``.stats``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gpu_steps import Settings, Workload

from seqpart.solver.measure.compare import PLAN, build_schedules, comparisons, same_schedule, summarise
from seqpart.solver.measure.profile import CostProfile
from seqpart.solver.measure.replay import Trial, schedule_lengths
from seqpart.solver.study.datasets import load_dataset, sample_batch


def allreduce_seconds(parameters: int, dtype_bytes: int, s: Settings) -> float:
    """A ring all-reduce of the gradients over ``s.dp`` ranks: 2 (dp-1)/dp of the bytes over the
    bus bandwidth, plus a latency. Modelled, not measured: one GPU has no peer."""
    if s.dp == 1:
        return 0.0
    return 2 * (s.dp - 1) / s.dp * parameters * dtype_bytes / (s.allreduce_gbps * 1e9) + s.allreduce_latency_s


def _one_step(run: Any, ranks: list[list[list[int]]], allreduce: float) -> tuple[tuple, tuple]:
    """The ranks' micro-batches one rank after another; each rank's gradients are dropped after
    it, where its all-reduce would be."""
    out, micro = [], []
    for rank in ranks:
        c0, w0 = time.process_time(), time.perf_counter()
        each = []
        for mb in rank:
            a = time.perf_counter()
            run(mb)
            each.append((time.perf_counter() - a, float("nan")))
        out.append((time.perf_counter() - w0, time.process_time() - c0, allreduce))
        micro.append(tuple(each))
        run.model.zero_grad(set_to_none=True)
    return tuple(out), tuple(micro)


def sequential_trials(run: Any, runs: dict[str, list[list[list[int]]]], *, allreduce: float,
                      repeats: tuple[int, int], warmup: int = 1, seed: int = 0,
                      seconds: float = float("inf")) -> list[Trial]:
    """Paired, interleaved rounds (each schedule once per round, in a fresh order) after
    ``warmup`` unrecorded ones: at least ``repeats[0]``, then more while the next round (as long
    as the last) fits ``seconds``, up to ``repeats[1]``."""
    deadline = time.perf_counter() + seconds
    rng = np.random.default_rng(seed)
    names = list(runs)
    for _ in range(warmup):
        for i in rng.permutation(len(names)):
            _one_step(run, runs[names[i]], allreduce)
    trials, last = [], 0.0
    for r in range(repeats[1]):
        if r >= repeats[0] and time.perf_counter() + last > deadline:
            break
        t0 = time.perf_counter()
        for i in rng.permutation(len(names)):
            ranks, micro = _one_step(run, runs[names[i]], allreduce)
            trials.append(Trial(names[i], r, ranks, micro))
        last = time.perf_counter() - t0
    return trials


def distinct(schedules: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """plan_step's schedule and one of each group of identical trainer schedules (a trainer
    identical to plan_step is kept: a control whose difference is noise); the rest map to the
    trainer whose schedule they share."""
    keep: dict[str, Any] = {PLAN: schedules[PLAN]}
    same: dict[str, str] = {}
    for name, sched in schedules.items():
        if name == PLAN:
            continue
        twin = next((k for k in keep if k != PLAN and same_schedule(keep[k], sched, False)), None)
        if twin is None:
            keep[name] = sched
        else:
            same[name] = twin
    return keep, same


def workload_batch(w: Workload, s: Settings, seed: int) -> tuple[list[int], int]:
    """A seeded draw of the workload's lengths (divided by ``s.length_divisor``) and its cap."""
    pool = load_dataset(w.dataset).lengths
    lengths = [max(1, x // s.length_divisor) for x in sample_batch(pool, w.n, np.random.default_rng(seed))]
    return lengths, max(max(lengths), w.cap // s.length_divisor)


def replay_workload(run: Any, profile: CostProfile, w: Workload, s: Settings, allreduce: float,
                    seconds: float, seed: int) -> dict[str, Any]:
    """plan_step against the trainers' schedules on one batch, run for real on one device."""
    t0 = time.perf_counter()
    lengths, cap = workload_batch(w, s, seed)
    schedules, same = distinct(build_schedules(lengths, s.dp, cap, profile, s.plan_time_limit))
    runs = {n: schedule_lengths(sc, lengths) for n, sc in schedules.items()}
    est = sum(profile.seconds(mb) for r in runs.values() for rank in r for mb in rank)
    row: dict[str, Any] = {"kind": w.kind, "dataset": w.dataset, "n": len(lengths), "tokens": sum(lengths),
                           "cap": cap, "dp": s.dp, "schedules": list(schedules), "same_as": same,
                           "predicted_round_s": est}
    left = seconds - (time.perf_counter() - t0)
    if est * (s.replay_repeats[0] + 1) > left:
        return {**row, "status": "skipped",
                "reason": f"{s.replay_repeats[0]} rounds + a warm-up need about "
                          f"{est * (s.replay_repeats[0] + 1):.0f} s, {left:.0f} s left"}
    trials = sequential_trials(run, runs, allreduce=allreduce, repeats=s.replay_repeats, seed=seed,
                               seconds=left - est)
    res = summarise(trials, schedules, lengths, profile)
    row.update(status="done", repeats=len(trials) // len(schedules), best=res.best["wall"],
               ratio=list(res.ratio["wall"]), ci_level=res.ci_level,
               predicted_ratio=res.predicted_ratio["wall"], extended_ratio=res.extended_ratio["wall"],
               noise=res.noise["wall"], identical=list(res.identical),
               steps={k: {"predicted_s": v.predicted_s, "measured_s": v.wall_s, "error": v.error("wall"),
                          "micro_batches": v.micro_batches} for k, v in res.schedules.items()},
               comparisons={k: {"ratio": list(c.ratio.as_tuple()), "level": c.ratio.level,
                                "p_slower": c.p_slower, "identical": c.identical}
                            for k, c in comparisons(res, "wall").items()},
               seconds=time.perf_counter() - t0)
    return row


def cp_step(quick: bool) -> dict[str, Any]:
    """The CP micro-batch timing on 2 or more GPUs; skipped, with why, otherwise."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        return {"status": "skipped", "reason": f"needs 2 or more GPUs ({gpus} visible)"}
    try:
        from seqpart.solver.measure import cp

        report = cp.cp_timing_report
    except (ImportError, AttributeError):
        return {"status": "skipped", "reason": "not available in this install"}
    return {"status": "done", "gpus": gpus, "quick": quick, "report": report(device="cuda", quick=quick)}
