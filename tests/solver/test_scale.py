"""The O(n log n) constructions match their simple definitions, and partition's large-batch
path (best-fit fallback, LPT by rounds, vectorised checks) returns valid plans.

Speed itself is measured in benchmarks/bench_scale.py, not here: these tests stay small.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics.kernels import best_fit_lists, karmarkar_karp_lists, lpt_lists
from seqpart.solver import SolverOptions, check_plan, partition

from _patching import patch_solver

lpt_module = importlib.import_module("seqpart.heuristics._lpt")



def naive_best_fit(tokens: list[int], k: int | None, cap: int) -> list[list[int]]:
    """Best fit decreasing, one sequence at a time, straight from its definition."""
    order = sorted(range(len(tokens)), key=lambda i: (-tokens[i], i))
    bins: list[list[int]] = [[] for _ in range(k or 0)]
    fill = [0] * (k or 0)
    for i in order:
        fits = [b for b in range(len(bins)) if fill[b] + tokens[i] <= cap]
        if fits:
            b = max(fits, key=lambda b: (fill[b], -b))  # fullest, ties: lowest index
        elif k is None:
            bins.append([])
            fill.append(0)
            b = len(bins) - 1
        else:
            continue  # placed nowhere here; compared only when every sequence fits
        bins[b].append(i)
        fill[b] += tokens[i]
    return bins


@settings(max_examples=80, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    cap=st.integers(40, 100),
)
def test_grouped_best_fit_is_best_fit(tokens: list[int], cap: int) -> None:
    ours = best_fit_lists(tokens, [1] * len(tokens), None, cap)
    assert [sorted(b) for b in ours] == [sorted(b) for b in naive_best_fit(tokens, None, cap)]
    k = len(ours) + 1
    fixed = best_fit_lists(tokens, [1] * len(tokens), k, cap)
    assert len(fixed) == k
    assert [sorted(b) for b in fixed] == [sorted(b) for b in naive_best_fit(tokens, k, cap)]


def test_best_fit_with_many_bins_uses_the_chunked_index() -> None:
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 500, 30_000).tolist()
    bins = best_fit_lists(tokens, [1] * len(tokens), None, 1000)
    assert len(bins) > 4096  # beyond _FLAT_KEYS_UP_TO
    check_plan(bins, tokens, len(bins), 1000)
    assert len(bins) <= -(-sum(tokens) // 1000) * 11 // 9 + 1


def test_lpt_by_rounds_places_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lpt_module, "ROUNDS_FROM", 10)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 1000, 500).tolist()
    bins = lpt_lists(tokens, tokens, [1] * 500, 40, None, None)
    check_plan(bins, tokens, 40)
    loads = [sum(tokens[i] for i in b) for b in bins]
    assert max(loads) - min(loads) <= max(tokens)  # rounds keep LPT's balance guarantee


@pytest.mark.parametrize("k_extra", [None, 2])
def test_large_batch_path_returns_valid_plans(k_extra: int | None) -> None:
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(800), 1.2, 25_000).round(), 16, 32768).astype(int)
    cap = 2 * int(lengths.max())
    k = None if k_extra is None else -(-int(lengths.sum()) // cap) + k_extra
    plan = partition(lengths, k, cap, time_limit=0.01)
    check_plan(plan.bins, lengths, plan.k, cap)
    if k is None:
        ceiling = len(best_fit_lists(lengths.tolist(), [1] * len(lengths), None, cap))
        assert plan.k <= ceiling
    assert plan.gap < 0.01


def test_work_plans_repeat_and_strict_mode_too() -> None:
    rng = np.random.default_rng(7)
    lengths = rng.integers(100, 4000, 700).tolist()
    k = -(-sum(lengths) // 8192) + 1
    work = SolverOptions(timing="work")
    runs = [partition(lengths, k, 8192, time_limit=0.2, cost="attention", options=work)
            for _ in range(2)]
    cut = any(r.stopped_by == "safety_net" for r in runs)
    assert cut or runs[0].bins == runs[1].bins
    strict = SolverOptions(deterministic=True)
    a, b = (partition(lengths, k, 8192, time_limit=0.05, options=strict) for _ in range(2))
    assert a.bins == b.bins


def test_clock_timing_is_the_default_and_keeps_improving_until_the_limit() -> None:
    """An unproven clock-timed call spends its limit: perturb-and-search rounds after the
    heuristics, and the plan is never worse than the repeatable one's."""
    assert SolverOptions().timing == "clock"
    plan = partition([8, 7, 6, 5, 4], 2, 15)
    assert plan.status == "optimal"
    rng = np.random.default_rng(11)
    lengths = rng.integers(100, 4000, 300).tolist()
    k = -(-sum(lengths) // 8192) + 3
    strict = partition(lengths, k, 8192, time_limit=0.3, cost="attention",
                       options=SolverOptions(deterministic=True), engine="heuristics")
    clock = partition(lengths, k, 8192, time_limit=0.3, cost="attention", engine="heuristics")
    check_plan(clock.bins, lengths, k, 8192)
    assert clock.max_load <= strict.max_load
    if clock.status != "optimal":
        assert any("perturb and search" in note for note in clock.notes)


def naive_first_fit(tokens: list[int], order: list[int], cap: int) -> list[list[int]]:
    bins: list[list[int]] = []
    fill: list[int] = []
    for i in order:
        for b in range(len(bins)):
            if fill[b] + tokens[i] <= cap:
                break
        else:
            bins.append([])
            fill.append(0)
            b = len(bins) - 1
        bins[b].append(i)
        fill[b] += tokens[i]
    return bins


@settings(max_examples=80, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    cap=st.integers(40, 100),
    decreasing=st.booleans(),
)
def test_first_fit_tree_is_first_fit(tokens: list[int], cap: int, decreasing: bool) -> None:
    from seqpart.heuristics.kernels import first_fit_tree

    order = sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)) if decreasing else list(
        range(len(tokens)))
    ours = first_fit_tree(np.asarray(tokens), None, cap, order)
    assert [sorted(b) for b in ours] == [sorted(b) for b in naive_first_fit(tokens, order, cap)]
    fixed = first_fit_tree(np.asarray(tokens), len(ours) + 2, cap, order)
    assert [sorted(b) for b in fixed[: len(ours)]] == [sorted(b) for b in ours]
    assert fixed[len(ours):] == [[], []]


def naive_lpt(tokens: list[int], cost: list[int], k: int, cap: int) -> list[list[int]]:
    """Capped LPT from its definition: each item, heaviest first, to the least-loaded bin
    whose tokens it fits (ties: lowest bin); the least-loaded bin when none fits."""
    order = sorted(range(len(cost)), key=lambda i: (-cost[i], i))
    bins: list[list[int]] = [[] for _ in range(k)]
    load, tok = [0] * k, [0] * k
    for i in order:
        fits = [b for b in range(k) if tok[b] + tokens[i] <= cap]
        b = min(fits or range(k), key=lambda b: (load[b], b))
        bins[b].append(i)
        load[b] += cost[i]
        tok[b] += tokens[i]
    return bins


@settings(max_examples=80, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 60), min_size=2, max_size=40),
    k=st.integers(1, 8),
    cap=st.integers(60, 200),
    quadratic=st.booleans(),
)
def test_parked_lpt_is_capped_lpt(tokens: list[int], k: int, cap: int, quadratic: bool) -> None:
    k = min(k, len(tokens))
    cost = [7 * x + x * x for x in tokens] if quadratic else tokens
    ours = lpt_lists(tokens, cost, [1] * len(tokens), k, cap, None)
    assert [sorted(b) for b in ours] == [sorted(b) for b in naive_lpt(tokens, cost, k, cap)]


def test_karmarkar_karp_stops_at_its_deadline() -> None:
    rng = np.random.default_rng(3)
    costs = rng.integers(1, 10_000, 500).tolist()
    ones = [1] * len(costs)
    whole = karmarkar_karp_lists(costs, ones, 12, None)
    assert karmarkar_karp_lists(costs, ones, 12, None, time.perf_counter() - 1) is None
    # A deadline that does not pass changes nothing: the same merges, the same plan.
    assert karmarkar_karp_lists(costs, ones, 12, None, time.perf_counter() + 60) == whole


def test_partition_keeps_a_plan_when_the_net_stops_karmarkar_karp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The safety net stopping KK (a slow machine) leaves a valid plan, noted as cut."""

    def stopped(*args: Any) -> list[list[int]] | None:
        deadline = args[4]  # None in "strict" timing: no net, KK runs whole
        return None if deadline is not None else karmarkar_karp_lists(*args)

    patch_solver(monkeypatch, "karmarkar_karp_lists", stopped)
    lengths = np.random.default_rng(4).integers(50, 500, 600).tolist()  # 50 per micro-batch:
    plan = partition(lengths, 12, None, time_limit=0.05,  # KK runs first (no cap)
                     options=SolverOptions(timing="work"))
    check_plan(plan.bins, lengths, 12, None)
    assert any("safety net" in note for note in plan.notes)
    strict = partition(lengths, 12, None, time_limit=0.05, options=SolverOptions(timing="strict"))
    assert not any("safety net" in note for note in strict.notes)  # no net: KK ran whole
