"""Replaying context-parallel schedules on real processes, against the model's prediction.

A schedule is a list of steps, each step its groups as ``(ranks, sequence ids)`` (the planner's
``CPStepPlan.steps``). Every step starts at a barrier of all ranks; each group runs its
sequences as one micro-batch (a group of degree > 1 with all-gather-KV CP attention); a step
lasts as long as its slowest rank (``sync="barrier"``), and a schedule's time is the sum of its
steps. The gradient reduction after the last step is the same for every schedule and is not
run. Repeats are paired and interleaved (each repeat runs every schedule once, in a fresh random
order), and the ratio of two schedules is the median of the per-repeat ratios with its exact
order-statistic interval (:func:`~seqpart.solver.measure.stats.ratio_ci`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..checks import positive_int
from ..stats import ratio_ci
from .costfit import barrier_seconds
from .layout import Step, check_steps
from .procs import check_backend, run_ranks
from .tasks import replay_task

#: Lengths of the replayed batch on a CPU (the issue's first example at half scale) and its cap:
#: Megatron's greedy runs the longest sequence alone, a better schedule spreads it over CP2.
CPU_LENGTHS = (2048, 1536, 1536, 512, 512)
CPU_CAP = 2048


def reference_schedules() -> dict[str, list[list[tuple[tuple[int, ...], tuple[int, ...]]]]]:
    """Two schedules of :data:`CPU_LENGTHS` (or any lengths in the same proportions) on 2 GPUs,
    written out for when the dynamic-CP planner is not installed: seqpart's under the ``l^2``
    cost, which puts {2048, 512, 512} on CP2 and then runs 1536 | 1536 (the lower bound of that
    cost), and Megatron-LM's greedy (what ``megatron_dynamic_cp_schedule`` returns: the longest
    sequence alone on rank 0 next to {1536, 512}, then 1536 | 512)."""
    return {
        "seqpart": [[((0, 1), (0, 3, 4))], [((0,), (1,)), ((1,), (2,))]],
        "megatron_greedy": [[((0,), (0,)), ((1,), (1, 3))], [((0,), (2,)), ((1,), (4,))]],
    }


def _as_lengths(steps: Sequence[Step], lengths: Sequence[int]
                ) -> list[list[tuple[tuple[int, ...], list[int]]]]:
    return [[(tuple(ranks), [int(lengths[i]) for i in seqs]) for ranks, seqs in step] for step in steps]


def _measured(rows: Sequence[Sequence[tuple[str, int, list[tuple[float, float]]]]], col: int
              ) -> dict[str, dict[int, float]]:
    """Per schedule and repeat the measured time: per step the slowest rank, summed."""
    per: dict[tuple[str, int], list[list[float]]] = {}
    for rank_rows in rows:
        for name, rep, times in rank_rows:
            per.setdefault((name, rep), []).append([t[col] for t in times])
    out: dict[str, dict[int, float]] = {}
    for (name, rep), ranks in per.items():
        out.setdefault(name, {})[rep] = float(np.sum(np.max(np.array(ranks), axis=0)))
    return out


CLOCKS = ("wall", "cpu")


def _summary(meas: dict[str, dict[int, float]], checked: Mapping[str, Any], lens: list[int],
             coef: Mapping[str, float] | None) -> dict[str, Any]:
    """One clock's measured times and paired ratio, and with ``coef`` the prediction next to them."""
    first, second = list(checked)
    reps = sorted(set(meas[first]) & set(meas[second]))
    ci = ratio_ci([meas[first][r] for r in reps], [meas[second][r] for r in reps])
    out: dict[str, Any] = {
        "measured_s": {n: float(np.median(list(meas[n].values()))) for n in checked},
        "ratio": {"of": f"{first}/{second}", "median": ci.median, "low": ci.low, "high": ci.high,
                  "level": ci.level},
        "repeats": len(reps),
    }
    if coef is not None:
        pred = {n: barrier_seconds(coef, lens, s) for n, s in checked.items()}
        ratio = pred[first] / pred[second]
        out["predicted_s"] = pred
        out["predicted_ratio"] = ratio
        # Equal predicted times (e.g. the same schedule twice): the ranking holds when the
        # measured interval admits a tie.
        tie = ratio == 1.0
        out["ranking_matches"] = bool(ci.low <= 1.0 <= ci.high if tie else
                                      np.sign(ratio - 1) == np.sign(ci.median - 1))
        out["beyond_noise"] = bool(ci.high < 1.0 or ci.low > 1.0)
    return out


def replay_cp(lengths: Sequence[int], schedules: Mapping[str, Sequence[Step]], *, n_gpus: int = 2,
              coef: Mapping[str, Mapping[str, float]] | None = None, repeats: int = 5, warmup: int = 1,
              seed: int = 0, device: str = "cpu", backend: str | None = None,
              config: dict[str, Any] | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """Run two schedules of ``lengths`` on ``n_gpus`` real processes, paired and interleaved.

    Per clock (``"wall"``, and ``"cpu"``: each process's CPU time, which leaves out waiting for
    a core and waiting for a peer inside a collective), under ``out["clocks"][clock]``: each
    schedule's median measured seconds, the measured ratio first/second (median of the paired
    ratios and its interval), and with ``coef[clock]`` (seconds per unit of
    :data:`~.costfit.MODEL_TERMS`) each one's predicted seconds, the predicted ratio, and whether
    the measured ranking equals the predicted one."""
    if len(schedules) != 2:
        raise ValueError(f"schedules: give exactly two (name -> steps) to compare, got {len(schedules)}")
    lens = [int(x) for x in lengths]
    checked = {name: check_steps(steps, n_gpus, len(lens)) for name, steps in schedules.items()}
    chosen = check_backend(backend, device, n_gpus)
    degrees = tuple(sorted({len(r) for s in checked.values() for step in s for r, _ in step}))
    runs = {n: _as_lengths(s, lens) for n, s in checked.items()}
    rows = run_ranks(replay_task, (runs, positive_int(repeats, "repeats"),
                                   positive_int(warmup, "warmup", minimum=0), config, seed),
                     world=n_gpus, backend=chosen, device=device, degrees=degrees, timeout=timeout)
    return {
        "lengths": lens, "n_gpus": n_gpus, "backend": chosen, "device": device,
        "schedules": {n: [[[list(r), list(s)] for r, s in step] for step in st] for n, st in checked.items()},
        "clocks": {c: _summary(_measured(rows, col), checked, lens, (coef or {}).get(c))
                   for col, c in enumerate(CLOCKS)},
    }
