"""Megatron-LM's packing-aware dynamic-CP greedy (``default_dynamic_cp``), re-implemented from
its description (see docs/dynamic-cp.md) as a baseline and a start.

One step at a time: the longest remaining sequence opens a group at its smallest degree on
ranks ``[0, cmin)`` and sets a per-GPU ceiling of ``1.05 * l * m`` (in ``l^2/c`` units); each
further sequence, longest first, goes where it least raises the step's largest ``sum l^2/c``
(joining a group of exactly its degree with room for ``l/c`` more tokens per GPU, or opening one
on the lowest free ranks), smaller degrees and joining first on ties; what fits nowhere waits
for a later step. Idle GPUs (a suffix) are then filled by widening the first smallest group to
the next degree, the later groups shifted right; when no group can widen, the step becomes one
full-domain group that takes sequences longest first while they fit.
"""

from __future__ import annotations

import math
from typing import Any

from ._model import Steps, default_degrees, find_cp_violations, make_cp_instance

__all__ = ["GreedyError", "megatron_dynamic_cp_schedule"]

#: The ceiling is 1.05 x: ``20 * load <= 21 * l * m``.
_CAP_NUM, _CAP_DEN = 21, 20


class GreedyError(ValueError):
    """Megatron-LM's greedy fails on this input (it would raise, or emit an unusable schedule)."""


def megatron_dynamic_cp_schedule(lengths: Any, n_gpus: int, max_tokens_per_gpu: int, *,
                                 min_cp: int = 1) -> Steps:
    """The greedy's schedule as ``steps`` (validated against Megatron's degrees), or
    :class:`GreedyError` where Megatron-LM would fail or emit degrees without process groups."""
    inst = make_cp_instance(lengths, n_gpus, max_tokens_per_gpu)
    n, m = inst.n_gpus, inst.m
    sizes = default_degrees(n)
    if min_cp not in sizes:
        raise ValueError(f"min_cp={min_cp} is not a group size for n_gpus={n}: use one of {list(sizes)}")
    enabled = tuple(c for c in sizes if c >= min_cp)
    remaining = sorted(range(len(inst.lengths)), key=lambda i: -inst.lengths[i])
    steps: Steps = []
    while remaining:
        step, remaining = _one_step(inst.lengths, remaining, n, m, enabled)
        steps.append(step)
    violations = find_cp_violations(inst, steps)
    if violations:
        raise GreedyError("Megatron-LM's greedy emits an unusable schedule here: "
                          + "; ".join(violations[:3]))
    return steps


def _cmin(lo: int, m: int, enabled: tuple[int, ...]) -> int:
    for c in enabled:
        if lo <= c * m:
            return c
    raise GreedyError(f"a sequence of {lo} tokens needs more than {enabled[-1]} GPUs")


def _one_step(lengths: tuple[int, ...], order: list[int], n: int, m: int,
              enabled: tuple[int, ...]) -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], list[int]]:
    # Loads and per-GPU tokens are kept times D = lcm(degrees), so every l^2/c and l/c is an int.
    d = _lcm(enabled)
    first = order[0]
    cap = _CAP_NUM * lengths[first] * m * d  # compared with _CAP_DEN * load
    load = [0] * n
    owner: list[int | None] = [None] * n
    groups: list[dict[str, Any]] = []
    c0 = _cmin(lengths[first], m, enabled)
    if c0 > n:
        raise GreedyError(f"sequence {first} needs {c0} GPUs, only {n}")
    _open(groups, owner, load, list(range(c0)), first, lengths[first], d)
    left: list[int] = []
    room = max(g["c"] * m * d - g["c"] * g["tok"] for g in groups)  # most tokens a group takes, x d
    for i in order[1:]:
        if lengths[i] * d > room and None not in owner:
            left.append(i)  # fits no group and no GPU is free: the same answer, sooner
            continue
        best = _best_place(lengths[i], m, d, enabled, groups, owner, load, cap)
        if best is None:
            left.append(i)
        elif best[1] == "add":
            g = groups[best[2]]
            g["ids"].append(i)
            g["tok"] += lengths[i] * (d // g["c"])
            for r in g["ranks"]:
                load[r] += lengths[i] ** 2 * (d // g["c"])
        else:
            _open(groups, owner, load, best[2], i, lengths[i], d)
        if best is not None:
            room = max(g["c"] * m * d - g["c"] * g["tok"] for g in groups)
    return _fill(lengths, order, groups, owner, n, m, enabled, left)


def _lcm(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def _open(groups: list[dict[str, Any]], owner: list[int | None], load: list[int],
          ranks: list[int], i: int, lo: int, d: int) -> None:
    c = len(ranks)
    groups.append({"ranks": ranks, "c": c, "ids": [i], "tok": lo * (d // c)})
    for r in ranks:
        owner[r] = len(groups) - 1
        load[r] += lo * lo * (d // c)


def _best_place(lo: int, m: int, d: int, enabled: tuple[int, ...], groups: list[dict[str, Any]],
                owner: list[int | None], load: list[int], cap: int) -> Any:
    need = _cmin(lo, m, enabled)
    best = None
    top = max(load)
    free = [r for r, o in enumerate(owner) if o is None]
    by_degree: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for gi, g in enumerate(groups):
        by_degree.setdefault(g["c"], []).append((gi, g))
    for c in enabled:
        if c < need:
            continue
        per = lo * lo * (d // c)
        room = m * d - lo * (d // c)
        for gi, g in by_degree.get(c, ()):
            if g["tok"] > room:
                continue
            score = max(top, load[g["ranks"][0]] + per)  # a group's GPUs carry equal loads
            if _CAP_DEN * score <= cap and (best is None or score < best[0]):
                best = (score, "add", gi)
        if len(free) >= c:
            chosen = free[:c]  # free ranks carry no load yet: the lowest ones, as Megatron's sort
            score = max(top, max(load[r] for r in chosen) + per)
            if _CAP_DEN * score <= cap and (best is None or score < best[0]):
                best = (score, "new", chosen)
    return best


def _fill(lengths: tuple[int, ...], order: list[int], groups: list[dict[str, Any]],
          owner: list[int | None], n: int, m: int, enabled: tuple[int, ...],
          left: list[int]) -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], list[int]]:
    """Widen groups until no GPU idles, else one full-domain group."""
    # rank -> group index, as a layout that shifts when a group widens
    layout: list[int | None] = list(owner)
    while any(g is None for g in layout):
        if not _widen_once(groups, layout, n, enabled):
            return _full_group(lengths, order, n, m)
    step = [(tuple(g["ranks"]), tuple(g["ids"])) for g in sorted(groups, key=lambda g: g["ranks"][0])]
    return step, sorted(left, key=lambda i: -lengths[i])


def _widen_once(groups: list[dict[str, Any]], layout: list[int | None], n: int,
                enabled: tuple[int, ...]) -> bool:
    empty = layout.index(None)
    if any(x is not None for x in layout[empty:]):
        raise GreedyError("Megatron-LM's greedy assumes idle ranks form a suffix; here they do not")
    smallest = min(g["c"] for g in groups)
    k = enabled.index(smallest)
    if k + 1 >= len(enabled):
        return False
    nxt = enabled[k + 1]
    need = nxt - smallest
    for gi, g in enumerate(groups):
        if g["c"] != smallest:
            continue
        start, end = g["ranks"][0], g["ranks"][-1]
        pushed = layout[end + 1:empty]
        if end + 1 > empty or end + need >= n or end + need + len(pushed) >= n:
            continue
        g["c"] = nxt
        g["ranks"] = list(range(start, end + need + 1))
        for other in groups:
            if other is not g and min(other["ranks"]) > end:
                other["ranks"] = [r + need for r in other["ranks"]]
        new: list[int | None] = [None] * n
        for j, grp in enumerate(groups):
            for r in grp["ranks"]:
                if r >= n:
                    raise GreedyError(f"widening pushes a group past rank {n - 1} (Megatron-LM's "
                                      "IndexError on this domain size)")
                new[r] = j
        layout[:] = new
        _ = gi
        return True
    return False


def _full_group(lengths: tuple[int, ...], order: list[int], n: int,
                m: int) -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], list[int]]:
    taken, rest, tok = [], [], 0
    for i in order:
        if tok + lengths[i] <= m * n:
            taken.append(i)
            tok += lengths[i]
        else:
            rest.append(i)
    if not taken:
        raise GreedyError("no sequence fits the full-domain group: raise max_tokens_per_gpu")
    return [(tuple(range(n)), tuple(taken))], rest
