"""Exhaustive search over every dynamic-CP schedule of a tiny instance (tests only).

Every schedule is a sequence of steps; each step is a tiling of the GPUs by aligned blocks of
allowed degrees and a non-empty set of the remaining sequences for each block (within its token
cap). All of them are enumerated, in every order, and timed exactly under both sync models."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from itertools import product

from seqpart.solver.dynamic_cp import make_cp_instance, schedule_time


def tilings(n: int, degrees: tuple[int, ...], start: int = 0) -> Iterator[list[tuple[int, ...]]]:
    if start == n:
        yield []
        return
    for c in degrees:
        if start % c == 0 and start + c <= n:
            for rest in tilings(n, degrees, start + c):
                yield [tuple(range(start, start + c)), *rest]


def _assignments(ids: list[int], k: int) -> Iterator[list[list[int]]]:
    """Each sequence to one of k groups or to none (-1); every group non-empty."""
    for labels in product(range(-1, k), repeat=len(ids)):
        if all(g in labels for g in range(k)):
            yield [[i for i, lab in zip(ids, labels, strict=True) if lab == g] for g in range(k)]


def schedules(inst, remaining: tuple[int, ...]) -> Iterator[list]:
    if not remaining:
        yield []
        return
    for tiling in tilings(inst.n_gpus, inst.degrees):
        for groups in _assignments(list(remaining), len(tiling)):
            if any(sum(inst.lengths[i] for i in g) > len(r) * inst.m for r, g in zip(tiling, groups,
                                                                                   strict=True)):
                continue
            used = {i for g in groups for i in g}
            step = [(r, tuple(g)) for r, g in zip(tiling, groups, strict=True)]
            for rest in schedules(inst, tuple(i for i in remaining if i not in used)):
                yield [step, *rest]


def optimum(lengths, n_gpus, m, **model) -> dict[str, Fraction | None]:
    """The best time under each sync model (None where no schedule exists)."""
    inst = make_cp_instance(lengths, n_gpus, m, **model)
    best: dict[str, Fraction | None] = {"barrier": None, "dag": None}
    for steps in schedules(inst, tuple(range(len(lengths)))):
        for sync in best:
            t = schedule_time(inst, steps, sync)
            if best[sync] is None or t < best[sync]:
                best[sync] = t
    return best
