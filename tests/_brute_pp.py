"""A dumb brute force of the optimal step under the exact pipeline makespan (tiny cases only):
every labelling of the sequences with micro-batches, every order of every rank."""

from __future__ import annotations

import itertools

from seqpart.solver.step.model import StepInstance
from seqpart.solver.step.pipeline import PipelineModel, scaled_makespans, schedule_error


def brute_step_at_count(inst: StepInstance, model: PipelineModel, m: int) -> int | None:
    """The least scaled step with ``m`` micro-batches per rank over all ``(dp*m)**n`` labellings
    (no symmetry removed) and all ``m!`` orders of each rank; None when no labelling is valid."""
    k, n = inst.dp_size * m, inst.n
    if k > n or (inst.pp > 1 and schedule_error(inst.pp, inst.vpp, m, model) is not None):
        return None
    best = None
    for label in itertools.product(range(k), repeat=n):
        blocks: list[list[int]] = [[] for _ in range(k)]
        for i, b in enumerate(label):
            blocks[b].append(i)
        if any(not b for b in blocks):
            continue
        if any(len(b) > 1 and (inst.cap is None or any(i in inst.oversize for i in b)
                               or sum(int(inst.tokens[i]) for i in b) > inst.cap)
               for b in blocks if inst.cap is not None):
            continue
        times = []
        for b in blocks:
            t = inst.overhead + sum(inst.costs[i] for i in b)
            if inst.size is not None:
                t += inst.size.size(sum(int(inst.tokens[i]) for i in b))
            times.append(t)
        step = 0
        for r in range(inst.dp_size):
            rank = times[r * m:(r + 1) * m]
            step = max(step, min(scaled_makespans([list(p) for p in itertools.permutations(rank)],
                                                  inst.pp, inst.vpp, model)))
        best = step if best is None else min(best, step)
    return best


def brute_step(inst: StepInstance, model: PipelineModel) -> tuple[int, int] | None:
    """The least (scaled step, m) over every count the instance allows."""
    found = [(v, m) for m in inst.feasible_ms()
             if (v := brute_step_at_count(inst, model, m)) is not None]
    return min(found) if found else None
