"""Where each group of a step runs, and in which order the steps run, for the "dag" sync model.

Under "barrier" a step's groups may sit on any aligned blocks and the steps may run in any order:
the time is the same. Under "dag" a group starts when all its GPUs are free, so both choices
matter: a GPU that ran a long sequence should get the step's lightest work next. This pass keeps
every group (its sequences and degree) and only moves it: step by step, widest groups first and
the slowest of equal width first, each onto the aligned free block whose GPUs are free earliest.
It tries a few step orders and returns the fastest schedule it found, the given one included.
"""

from __future__ import annotations

from ._model import CPInstance, Steps, schedule_time

__all__ = ["place_for_dag"]


def place_for_dag(inst: CPInstance, steps: Steps) -> Steps:
    """The fastest under "dag" of ``steps`` and its re-placed variants (same groups)."""
    times = [[inst.scaled_time(len(r), sum(inst.work(i) for i in ids),
                               sum(inst.lengths[i] for i in ids)) for r, ids in step]
             for step in steps]
    tops = [max(t) for t in times]
    orders = [list(range(len(steps))),
              sorted(range(len(steps)), key=lambda s: (-tops[s], s)),
              sorted(range(len(steps)), key=lambda s: (tops[s], s))]
    best, best_time = steps, schedule_time(inst, steps, "dag")
    for order in orders:
        placed = _place(inst, steps, times, order)
        if placed is None:
            continue
        t = schedule_time(inst, placed, "dag")
        if t < best_time:
            best, best_time = placed, t
    return best


def _place(inst: CPInstance, steps: Steps, times: list[list[int]],
           order: list[int]) -> Steps | None:
    """Each step of ``order`` placed group by group on the earliest-free aligned block; None
    when the widest-first placement cannot tile a step (degree sets that are not nested)."""
    n = inst.n_gpus
    free = [0] * n
    out: Steps = []
    for s in order:
        taken = [False] * n
        groups = sorted(range(len(steps[s])),
                        key=lambda g: (-len(steps[s][g][0]), -times[s][g], g))
        step: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for g in groups:
            c = len(steps[s][g][0])
            start = _earliest_block(free, taken, c)
            if start is None:
                return None
            ranks = tuple(range(start, start + c))
            end = max(free[r] for r in ranks) + times[s][g]
            for r in ranks:
                free[r] = end
                taken[r] = True
            step.append((ranks, steps[s][g][1]))
        out.append(sorted(step))
    return out


def _earliest_block(free: list[int], taken: list[bool], c: int) -> int | None:
    best, key = None, None
    for start in range(0, len(free) - c + 1, c):
        if any(taken[start:start + c]):
            continue
        k = max(free[start:start + c])
        if key is None or k < key:
            best, key = start, k
    return best
