"""The planner's own construction and its local search, on scaled integer times.

A state is a list of steps; a step a list of groups ``[start, c, ids, work, tokens, time]``
(``time`` is ``inst.scale`` times one GPU's time). The construction packs sequences longest
first at their cheapest degree, each where it least raises its step's time (filling idle GPUs
first, then the tightest fit), opening a step when nothing fits; idle GPUs are then covered by
widening groups or by moving sequences onto them. The local search then moves and swaps
sequences out of each step's slowest group while the barrier time falls, counting the
candidates it evaluates so that a work budget, not the clock, can end it.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from fractions import Fraction

from ._model import CPInstance, Steps

__all__ = ["Counter", "construct", "from_steps", "local_search", "perturb_search", "to_steps",
           "wide_degrees"]

Group = list  # [start, c, ids, work, tokens, time]


class Counter:
    """Work done, and whether the budget (or the caller's clock) says stop."""

    def __init__(self, limit: int, clock: Callable[[], bool] | None = None) -> None:
        self.limit = limit
        self.done = 0
        self.clock = clock
        self.stopped = ""
        self._next_look = 0

    def spend(self, k: int = 1) -> bool:
        """Charge k evaluations; False once the work budget or the clock is spent."""
        self.done += k
        if self.done > self.limit:
            self.stopped = self.stopped or "work budget"
            return False
        if self.clock is not None and self.done >= self._next_look:
            self._next_look = self.done + 200  # reading the clock every ~0.5 ms of work
            if self.clock():
                self.stopped = self.stopped or "clock"
                return False
        return not self.stopped


def _group(inst: CPInstance, start: int, c: int, ids: list[int]) -> Group:
    w = sum(inst.work(i) for i in ids)
    tok = sum(inst.lengths[i] for i in ids)
    return [start, c, ids, w, tok, inst.scaled_time(c, w, tok)]


def from_steps(inst: CPInstance, steps: Steps) -> list[list[Group]]:
    return [[_group(inst, r[0], len(r), list(ids)) for r, ids in step] for step in steps]


def to_steps(state: list[list[Group]]) -> Steps:
    out: Steps = []
    for step in state:
        groups = sorted(step, key=lambda g: g[0])
        out.append([(tuple(range(g[0], g[0] + g[1])), tuple(sorted(g[2]))) for g in groups])
    return out


def barrier_time(state: list[list[Group]]) -> int:
    return sum(max(g[5] for g in step) for step in state)


# ----------------------------------------------------------------------------- construction


def construct(inst: CPInstance, order: list[int], counter: Counter,
              degree: Callable[[int], int] | None = None) -> list[list[Group]] | None:
    """Pack ``order`` (longest first works best) step by step; None if the budget ran out or
    idle GPUs could not be covered. ``degree(i)``: sequence i's group size (default its
    smallest feasible degree)."""
    n = inst.n_gpus
    state: list[list[Group]] = []
    free: list[list[bool]] = []
    tops: list[int] = []
    rooms: list[int] = []  # the most tokens any group of the step still takes
    for i in order:
        # One unit per group scanned, halved: a scan here costs about half a search move.
        if not counter.spend(1 + sum(len(step) + 2 for s, step in enumerate(state)
                                     if rooms[s] >= inst.lengths[i] or True in free[s]) // 2):
            return None
        c = inst.min_degree(inst.lengths[i]) if degree is None else degree(i)
        assert c is not None
        best = _best_spot(inst, i, c, state, free, tops, rooms)
        if best is None:
            state.append([])
            free.append([True] * n)
            tops.append(0)
            rooms.append(0)
            best = _best_spot(inst, i, c, state, free, tops, rooms)
            assert best is not None
        _place(inst, i, c, best, state, free, tops)
        rooms[best[0]] = max(g[1] * inst.m - g[4] for g in state[best[0]])
    for s in range(len(state)):
        if not _cover_idle(inst, s, state, free):
            return None
    return state


def wide_degrees(inst: CPInstance, steps: int, slack: Fraction = Fraction(1)) -> Callable[[int], int]:
    """A degree per sequence for the "wide" construction: the smallest feasible degree whose
    time stays within ``slack`` times one step's share of the area bound (``steps`` steps), else
    the degree where the sequence alone is fastest. A long sequence at its smallest degree can
    take several steps' worth of time on a few GPUs while the others wait; wider, it fits one
    step (a slack above 1 keeps it narrower, leaving GPUs for the short ones)."""
    scale = inst.scale
    area = sum(scale * inst.work(i) for i in range(len(inst.lengths)))
    share = area // (inst.n_gpus * max(1, steps))
    target = share * slack.numerator // slack.denominator + scale * inst.overhead

    def degree(i: int) -> int:
        lo, w = inst.lengths[i], inst.work(i)
        feasible = [c for c in inst.degrees if lo <= c * inst.m]
        for c in feasible:
            if inst.scaled_time(c, w, lo) <= target:
                return c
        return min(feasible, key=lambda c: (inst.scaled_time(c, w, lo), c))

    return degree


def _best_spot(inst: CPInstance, i: int, c: int, state: list[list[Group]],
               free: list[list[bool]], tops: list[int], rooms: list[int]) -> tuple | None:
    lo, w = inst.lengths[i], inst.work(i)
    alone = inst.scaled_time(c, w, lo)
    inc = alone - inst.scale * inst.overhead
    best, key = None, None
    for s, step in enumerate(state):
        idle = True in free[s]
        if rooms[s] < lo and not idle:
            continue  # nothing of this length fits this step any more
        start = _free_block(free[s], c) if idle else None
        if start is not None:
            k = (max(0, alone - tops[s]), 0, tops[s] - alone)
            if key is None or k < key:
                best, key = (s, "new", start), k
        for gi, g in enumerate(step):
            if g[1] != c or g[4] + lo > c * inst.m:
                continue
            t = g[5] + inc
            k = (max(0, t - tops[s]), 1, tops[s] - t)
            if key is None or k < key:
                best, key = (s, "add", gi), k
    return best


def _free_block(free: list[bool], c: int) -> int | None:
    if free.count(True) < c:
        return None
    for start in range(0, len(free) - c + 1, c):
        if all(free[start:start + c]):
            return start
    return None


def _place(inst: CPInstance, i: int, c: int, spot: tuple, state: list[list[Group]],
           free: list[list[bool]], tops: list[int]) -> None:
    s, kind, where = spot
    if kind == "new":
        g = _group(inst, where, c, [i])
        state[s].append(g)
        for r in range(where, where + c):
            free[s][r] = False
    else:
        g = state[s][where]
        g[2].append(i)
        g[3] += inst.work(i)
        g[4] += inst.lengths[i]
        g[5] = inst.scaled_time(g[1], g[3], g[4])
    tops[s] = max(tops[s], g[5])


def _cover_idle(inst: CPInstance, s: int, state: list[list[Group]], free: list[list[bool]]) -> bool:
    """Give every idle GPU of step s work: widen a group over a free aligned block, or move a
    sequence of a shared group onto one; as a last resort one full-domain group."""
    step = state[s]
    while any(free[s]):
        if _widen_into_free(inst, step, free[s]) or _split_onto_free(inst, step, free[s]):
            continue
        ids = [i for g in step for i in g[2]]
        if inst.n_gpus in inst.degrees and sum(inst.lengths[i] for i in ids) <= inst.n_gpus * inst.m:
            state[s] = [_group(inst, 0, inst.n_gpus, ids)]
            free[s] = [False] * inst.n_gpus
            return True
        return False
    return True


def _widen_into_free(inst: CPInstance, step: list[Group], free: list[bool]) -> bool:
    best = None
    for g in step:
        c2 = 2 * g[1]
        if c2 not in inst.degrees:
            continue
        start = g[0] - g[0] % c2
        if start + c2 > inst.n_gpus:
            continue
        others = [r for r in range(start, start + c2) if not g[0] <= r < g[0] + g[1]]
        if all(free[r] for r in others):
            t = inst.scaled_time(c2, g[3], g[4])
            if best is None or t > best[0]:
                best = (t, g, start, c2, others)
    if best is None:
        return False
    t, g, start, c2, others = best
    g[0], g[1], g[5] = start, c2, t
    for r in others:
        free[r] = False
    return True


def _split_onto_free(inst: CPInstance, step: list[Group], free: list[bool]) -> bool:
    """Move the cheapest movable sequence of a shared group onto a free aligned block."""
    best = None
    for c in inst.degrees:
        start = _free_block(free, c)
        if start is None:
            continue
        for g in step:
            if len(g[2]) < 2:
                continue
            for i in g[2]:
                if inst.lengths[i] <= c * inst.m:
                    k = inst.work(i)
                    if best is None or k < best[0]:
                        best = (k, g, i, start, c)
        if best is not None:
            break
    if best is None:
        return False
    _, g, i, start, c = best
    _remove(inst, g, i)
    step.append(_group(inst, start, c, [i]))
    for r in range(start, start + c):
        free[r] = False
    return True


def _remove(inst: CPInstance, g: Group, i: int) -> None:
    g[2].remove(i)
    g[3] -= inst.work(i)
    g[4] -= inst.lengths[i]
    g[5] = inst.scaled_time(g[1], g[3], g[4])


def _add(inst: CPInstance, g: Group, i: int) -> None:
    g[2].append(i)
    g[3] += inst.work(i)
    g[4] += inst.lengths[i]
    g[5] = inst.scaled_time(g[1], g[3], g[4])


# ----------------------------------------------------------------------------- local search


def local_search(inst: CPInstance, state: list[list[Group]], counter: Counter) -> bool:
    """Improve the barrier time in place by moves and swaps out of slow groups; True when it
    stopped because no move improves (a local optimum), False when the budget ended it."""
    while True:
        improved = False
        tops = _Tops(state)
        order = sorted(range(len(state)), key=lambda s: -tops[s])
        for s in order:
            crit = max(state[s], key=lambda g: g[5])
            if _improve_group(inst, state, tops, s, crit, counter):
                improved = True
                break
            if counter.stopped:
                return False
        if not improved:
            return True


def _improve_group(inst: CPInstance, state: list[list[Group]], tops: _Tops, s: int,
                   crit: Group, counter: Counter) -> bool:
    """One improving move or swap of a sequence of ``crit`` (step s's slowest group)."""
    ids = sorted(crit[2], key=lambda i: -inst.work(i))
    # Moves first (one evaluation per group), then swaps (one per pair): a cheap improving
    # move is found before the first swap is scanned. A group's last sequence never moves.
    for attempt in ([_try_move] if len(crit[2]) > 1 else []) + [_try_swap]:
        for i in ids:
            lo, wi = inst.lengths[i], inst.work(i)
            for t, step in enumerate(state):
                if not counter.spend(len(step)):
                    return False
                for g in step:
                    if g is not crit and attempt(inst, tops, s, crit, t, g, i, lo, wi, counter):
                        return True
    return False


class _Tops:
    """Each step's three slowest groups: a move changes at most two groups, so the new time of a
    step is known in O(1), not by scanning its groups."""

    def __init__(self, state: list[list[Group]]) -> None:
        self.best = [heapq.nlargest(3, ((g[5], id(g)) for g in step)) for step in state]

    def __getitem__(self, s: int) -> int:
        return self.best[s][0][0]

    def after(self, s: int, changed: dict[int, int]) -> int:
        """Step s's time once the groups in ``changed`` (id -> new time, all in step s) change."""
        top = max(changed.values())
        for value, gid in self.best[s]:
            if gid not in changed:
                return max(top, value)
        return top


def _delta(tops: _Tops, s: int, crit: Group, new_crit: int, t: int, g: Group, new_g: int) -> int:
    """How much the barrier time changes when ``crit`` (step s) and ``g`` (step t) change."""
    if s == t:
        return tops.after(s, {id(crit): new_crit, id(g): new_g}) - tops[s]
    return tops.after(s, {id(crit): new_crit}) - tops[s] + tops.after(t, {id(g): new_g}) - tops[t]


def _try_move(inst: CPInstance, tops: _Tops, s: int, crit: Group, t: int, g: Group, i: int,
              lo: int, wi: int, counter: Counter) -> bool:
    if g[4] + lo > g[1] * inst.m:
        return False
    new_crit = inst.scaled_time(crit[1], crit[3] - wi, crit[4] - lo)
    new_g = inst.scaled_time(g[1], g[3] + wi, g[4] + lo)
    delta = _delta(tops, s, crit, new_crit, t, g, new_g)
    if delta >= 0:
        return False
    _remove(inst, crit, i)
    _add(inst, g, i)
    return True


def _try_swap(inst: CPInstance, tops: _Tops, s: int, crit: Group, t: int, g: Group, i: int,
              lo: int, wi: int, counter: Counter) -> bool:
    counter.done += len(g[2])
    for j in g[2]:
        lj, wj = inst.lengths[j], inst.work(j)
        if wj >= wi:
            continue
        if crit[4] - lo + lj > crit[1] * inst.m or g[4] - lj + lo > g[1] * inst.m:
            continue
        new_crit = inst.scaled_time(crit[1], crit[3] - wi + wj, crit[4] - lo + lj)
        new_g = inst.scaled_time(g[1], g[3] + wi - wj, g[4] + lo - lj)
        if _delta(tops, s, crit, new_crit, t, g, new_g) < 0:
            _remove(inst, crit, i)
            _remove(inst, g, j)
            _add(inst, crit, j)
            _add(inst, g, i)
            return True
    return False


# ----------------------------------------------------------------------------- perturbation


def perturb_search(inst: CPInstance, state: list[list[Group]], counter: Counter,
                   rng: random.Random, target: int = 0,
                   kick: int = 3) -> tuple[list[list[Group]], int]:
    """Iterated local search from a local optimum, while the budget lasts and the barrier time
    is above ``target`` (scaled; the bound): move ``kick`` random sequences of the slowest step
    to random groups they fit, search again, keep the result when its barrier time is lower.
    Returns the best state and the rounds run."""
    best, best_time = state, barrier_time(state)
    rounds = 0
    while not counter.stopped and best_time > target:
        cand = [[[g[0], g[1], list(g[2]), g[3], g[4], g[5]] for g in step] for step in best]
        if not counter.spend(len(inst.lengths) // 8 + 1) or not _kick(inst, cand, rng, kick):
            break
        local_search(inst, cand, counter)
        rounds += 1
        t = barrier_time(cand)
        if t < best_time and not counter.stopped:
            best, best_time = cand, t
    return best, rounds


def _kick(inst: CPInstance, state: list[list[Group]], rng: random.Random, kick: int) -> bool:
    """Move up to ``kick`` sequences out of the slowest step (out of any step when its groups
    each hold one sequence); False when none can move."""
    tops = [max(g[5] for g in step) for step in state]
    s = max(range(len(state)), key=lambda x: (tops[x], -x))
    moved = 0
    for _ in range(4 * kick):
        shared = [g for g in state[s] if len(g[2]) > 1] or [
            g for step in state for g in step if len(g[2]) > 1]
        if not shared or moved == kick:
            break
        g = rng.choice(shared)
        i = rng.choice(g[2])
        lo = inst.lengths[i]
        targets = [h for step in state for h in step if h is not g and h[4] + lo <= h[1] * inst.m]
        if not targets:
            continue
        _remove(inst, g, i)
        _add(inst, rng.choice(targets), i)
        moved += 1
    return moved > 0
