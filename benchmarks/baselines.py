"""Baselines the benchmarks compare seqpart against, written for this project.

- :func:`trainer_karmarkar_karp`: Karmarkar-Karp the way RL trainers write it (a heap of states,
  each state k sets that carry their running sum and their (index, value) items, re-sorted after
  every merge). Deliberately plain, unoptimised Python: it is the speed reference of
  ``bench_core.py``.
- :func:`trainer_first_fit_count`: the trainers' micro-batch count (first-fit, arrival order).
- :func:`naive_cpsat`: the naive CP-SAT model ``bench_cpsat.py`` compares against (one boolean
  per sequence and micro-batch, no symmetry breaking, no hint, z in [0, sum]).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from common import trainer_first_fit_count
from ortools.sat.python import cp_model

__all__ = ["NaiveResult", "naive_cpsat", "naive_cpsat_min_k", "trainer_first_fit_count",
           "trainer_karmarkar_karp"]


# --- trainer-style Karmarkar-Karp -----------------------------------------------------------


class _Set:
    """One subset of a state: its running sum and its (index, value) items."""

    def __init__(self) -> None:
        self.sum = 0
        self.items: list[tuple[int, int]] = []

    def add(self, idx: int, val: int) -> None:
        self.items.append((idx, val))
        self.sum += val

    def merge(self, other: _Set) -> None:
        for idx, val in other.items:
            self.items.append((idx, val))
            self.sum += val

    def __lt__(self, other: _Set) -> bool:
        if self.sum != other.sum:
            return self.sum < other.sum
        if len(self.items) != len(other.items):
            return len(self.items) < len(other.items)
        return self.items < other.items


class _State:
    """k sets, kept sorted by sum, heaviest first."""

    def __init__(self, items: Sequence[tuple[int, int]], k: int) -> None:
        self.k = k
        self.sets = [_Set() for _ in range(k)]
        for i, (idx, val) in enumerate(items):
            self.sets[i].add(idx, val)
        self.sets = sorted(self.sets, reverse=True)

    def spread(self) -> int:
        return self.sets[0].sum - self.sets[-1].sum

    def merge(self, other: _State) -> None:
        # Heaviest set of one state with the lightest of the other.
        for i in range(self.k):
            self.sets[i].merge(other.sets[self.k - 1 - i])
        self.sets = sorted(self.sets, reverse=True)

    def __lt__(self, other: _State) -> bool:
        # Inverted so that heapq (a min-heap) pops the largest spread first.
        if self.spread() != other.spread():
            return self.spread() > other.spread()
        return self.sets[0] > other.sets[0]


def trainer_karmarkar_karp(
    lengths: Sequence[int], k: int, equal_size: bool = False
) -> list[list[int]]:
    """k lists of indices, each ascending, in the final state's order (sum descending).

    Raw output: no cap, and no check that a list is non-empty (the trainers assert that after).
    """
    pairs = sorted((int(v), i) for i, v in enumerate(lengths))
    heap: list[_State] = []
    if equal_size:
        if len(pairs) % k:
            raise ValueError(f"equal_size needs len(lengths) % k == 0, got n={len(pairs)}, k={k}")
        for start in range(0, len(pairs), k):
            run = [(idx, val) for val, idx in pairs[start : start + k]]
            heapq.heappush(heap, _State(run, k))
    else:
        for val, idx in pairs:
            heapq.heappush(heap, _State([(idx, val)], k))
    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, first)
    final = heap[0]
    return [sorted(idx for idx, _ in s.items) for s in final.sets]


# --- naive CP-SAT ---------------------------------------------------------------------------


@dataclass
class NaiveResult:
    """What the naive model did. ``status`` is CP-SAT's name (OPTIMAL, FEASIBLE, INFEASIBLE,
    UNKNOWN, MODEL_INVALID); ``proven`` means OPTIMAL or INFEASIBLE."""

    status: str
    k: int | None
    max_load: int | None
    bins: list[list[int]] | None
    build_seconds: float
    seconds: float
    proven: bool
    variables: int
    log: list[str] = field(default_factory=list)


def naive_cpsat(
    lengths: Sequence[int], k: int, cap: int | None, time_limit: float, workers: int = 2
) -> NaiveResult:
    """Build and solve the naive model; model building counts against ``time_limit``."""
    t0 = time.perf_counter()
    n = len(lengths)
    lengths = [int(v) for v in lengths]
    model = cp_model.CpModel()
    total = sum(lengths)
    z = model.NewIntVar(0, total, "z")
    x = {}
    for i in range(n):
        for b in range(k):
            x[i, b] = model.NewBoolVar(f"x[{i},{b}]")
    for i in range(n):
        model.AddExactlyOne([x[i, b] for b in range(k)])
    for b in range(k):
        model.Add(sum(x[i, b] for i in range(n)) >= 1)
        load = sum(lengths[i] * x[i, b] for i in range(n))
        if cap is not None:
            model.Add(load <= cap)
        model.Add(load <= z)
    model.Minimize(z)
    build = time.perf_counter() - t0
    left = time_limit - build
    if left <= 0:
        return NaiveResult("NOT_SOLVED (build used the budget)", k, None, None, build, build,
                           False, n * k)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = left
    status = solver.Solve(model)
    seconds = time.perf_counter() - t0
    name = solver.StatusName(status)
    bins = None
    max_load = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bins = [[i for i in range(n) if solver.Value(x[i, b])] for b in range(k)]
        max_load = int(solver.ObjectiveValue())
    proven = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    return NaiveResult(name, k, max_load, bins, build, seconds, proven, n * k)


def naive_cpsat_min_k(
    lengths: Sequence[int], cap: int, time_limit: float, workers: int = 2
) -> NaiveResult:
    """Smallest k the straightforward way: from ceil(sum/cap) up, one naive model per k, all
    within one ``time_limit``. Proven only if every smaller k was proven infeasible and the
    returned k's max load was proven optimal."""
    t0 = time.perf_counter()
    k = max(1, -(-sum(lengths) // cap))
    log: list[str] = []
    variables = 0
    while k <= len(lengths):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            break
        res = naive_cpsat(lengths, k, cap, left, workers)
        variables = max(variables, res.variables)
        log.append(f"k={k}:{res.status}")
        if res.status == "INFEASIBLE":
            k += 1
            continue
        res.seconds = time.perf_counter() - t0
        res.log = log
        res.variables = variables
        return res  # OPTIMAL is proven; FEASIBLE/UNKNOWN stop here unproven
    seconds = time.perf_counter() - t0
    if k > len(lengths):  # every k up to n proven infeasible
        return NaiveResult("INFEASIBLE", None, None, None, 0.0, seconds, True, variables, log)
    return NaiveResult("UNKNOWN (budget spent)", None, None, None, 0.0, seconds, False,
                       variables, log)
