"""What each rank runs (module-level, so that the rank processes can import them): the
equivalence check, the timing of micro-batches at each degree, and the replay of schedules.

Timing rounds are paired and interleaved as :mod:`~seqpart.solver.measure.calibrate`'s are:
every round runs every item once, in a fresh random order (the same on every rank: one seed),
after unrecorded warm-up rounds, so load drifts on a shared machine hit every item alike. Every
timed item starts at a barrier of all ranks, so an item's time is its own, and a step's time is
its slowest rank's (the "barrier" sync model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .procs import RankContext

#: A step as the ranks run it: its groups as (ranks, the lengths of their sequences).
LengthStep = list[tuple[tuple[int, ...], list[int]]]


def _group_of(ctx: RankContext, degree: int) -> tuple[Any, int]:
    """The aligned group of ``degree`` ranks this rank is in, and its rank there."""
    first = ctx.rank - ctx.rank % degree
    return ctx.groups.get(tuple(range(first, first + degree))), ctx.rank - first


def equivalence_task(ctx: RankContext, batches: Sequence[Sequence[int]],
                     configs: Sequence[dict[str, Any] | None], seed: int
                     ) -> list[list[dict[str, Any]]] | None:
    """For each model config (None: the reference decoder; one with ``model_type``: a
    transformers model), every micro-batch of ``batches`` by the CP group of all ranks, against
    rank 0 running it alone on a second copy of the model: the losses and every gradient."""
    from .runner import MicroBatchRunner

    out = []
    for config in configs:
        cp = MicroBatchRunner.build(config, ctx.device, ctx.backend, seed)
        ref = MicroBatchRunner.build(config, ctx.device, ctx.backend, seed) if ctx.rank == 0 else None
        out.append([_compare(ctx, cp, ref, lengths) for lengths in batches])
    return out if ctx.rank == 0 else None


def _compare(ctx: RankContext, cp: Any, ref: Any, lengths: Sequence[int]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    group, grank = _group_of(ctx, ctx.world)
    cp.zero_grad()
    loss = cp.in_group(lengths, group, ctx.world, grank).cpu()  # gloo: reduce on the CPU
    dist.all_reduce(loss, group=group)
    grads = torch.cat([g.reshape(-1) for g in cp.grads()]).cpu()
    dist.all_reduce(grads, group=group)
    if ref is None:
        return {}
    ref.zero_grad()
    ref_loss = ref.alone(lengths).cpu()
    ref_grads = torch.cat([g.reshape(-1) for g in ref.grads()]).cpu()
    diff = (grads - ref_grads).abs()
    return {"lengths": [int(x) for x in lengths], "loss_cp": float(loss), "loss_alone": float(ref_loss),
            "loss_abs_diff": float((loss - ref_loss).abs()), "grad_max_abs_diff": float(diff.max()),
            "grad_rel_diff": float(diff.norm() / ref_grads.norm().clamp_min(1e-30))}


def _shuffled_rounds(n_items: int, repeats: int, warmup: int, seed: int) -> list[tuple[int, int]]:
    """(round, item) in run order; warm-up rounds are negative."""
    rng = np.random.default_rng(seed)
    return [(r, int(i)) for r in range(-warmup, repeats) for i in rng.permutation(n_items)]


def timing_task(ctx: RankContext, items: Sequence[tuple[Sequence[int], int]], repeats: int, warmup: int,
                config: dict[str, Any] | None, seed: int) -> list[tuple[int, int, float, float, float]]:
    """Each (lengths, degree) item timed ``repeats`` times: at degree 1 every rank runs the
    micro-batch alone, at degree c each aligned group of c ranks runs it with CP attention.
    Per recorded run (round, item, wall seconds, CPU seconds, wall seconds inside the CP
    collectives)."""
    import torch.distributed as dist

    from .runner import MicroBatchRunner

    run = MicroBatchRunner.build(config, ctx.device, ctx.backend, seed)
    rows = []
    for r, i in _shuffled_rounds(len(items), repeats, warmup, seed):
        lengths, degree = items[i]
        group, grank = _group_of(ctx, degree)
        dist.barrier()
        comm0 = run.clock.seconds
        wall, cpu = run.run(lengths, group, degree, grank)
        run.zero_grad()
        if r >= 0:
            rows.append((r, i, wall, cpu, run.clock.seconds - comm0))
    return rows


def replay_task(ctx: RankContext, schedules: dict[str, list[LengthStep]], repeats: int, warmup: int,
                config: dict[str, Any] | None, seed: int) -> list[tuple[str, int, list[tuple[float, float]]]]:
    """Every schedule run ``repeats`` times, paired and interleaved: each step starts at a
    barrier, and this rank runs its group's sequences as one micro-batch (with CP attention at
    degree > 1). Per recorded run (schedule, repeat, this rank's (wall, CPU) seconds per step)."""
    import torch.distributed as dist

    from .runner import MicroBatchRunner

    run = MicroBatchRunner.build(config, ctx.device, ctx.backend, seed)
    names = list(schedules)
    rows = []
    for r, i in _shuffled_rounds(len(names), repeats, warmup, seed):
        times = []
        for step in schedules[names[i]]:
            ranks, lengths = next((g, lens) for g, lens in step if ctx.rank in g)
            group, grank = _group_of(ctx, len(ranks))
            dist.barrier()
            times.append(run.run(lengths, group, len(ranks), grank))
        run.zero_grad()  # gradients accumulate over a step's micro-batches, as in training
        if r >= 0:
            rows.append((names[i], r, times))
    return rows
