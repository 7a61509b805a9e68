"""plan_step under the exact pipeline makespan: what it reports is the schedule's makespan, the
orders it finds, and the schedule choice."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from seqpart.solver import InfeasibleError
from seqpart.solver.step import (
    PipelineModel,
    formula_step_time,
    order_for_pipeline,
    order_schedule,
    plan_step,
    step_lower_bound,
    step_time,
)
from seqpart.solver.step.makespan import light_ends_order
from seqpart.solver.step.pipeline import makespan


def test_a_long_sequence_alone_is_priced_by_its_whole_path() -> None:
    # One 32k sequence among short ones, pp=8, vpp=2: the formula charges the long micro-batch
    # t*(1 + 7/2); the schedule runs it through all 16 virtual stages, 8*t.
    rng = np.random.default_rng(24)
    lengths = [32768, *rng.integers(200, 3000, 95).tolist()]
    kw = {"cost": (24576, 1), "overhead": 24576 * 512, "pp": 8, "vpp": 2}
    plan = plan_step(lengths, 2, 32768, time_limit=0.3, **kw)
    assert plan.step_time == step_time(plan.ranks, lengths, **kw)
    long_time = 24576 * 512 + 24576 * 32768 + 32768**2
    assert plan.step_time >= 8 * long_time
    assert plan.formula_step_time == formula_step_time(plan.ranks, lengths, **kw)
    assert plan.formula_step_time < plan.step_time  # the formula is optimistic here
    assert plan.lower_bound <= plan.step_time


def test_order_for_pipeline_searches_on_the_exact_makespan() -> None:
    loads = [9, 1, 7, 3, 8, 2]
    light = light_ends_order(loads)
    assert order_for_pipeline(loads) == light  # without pp: the heuristic, as before
    for pp, vpp in ((2, 1), (4, 1), (3, 2)):
        order = order_for_pipeline(loads, pp=pp, vpp=vpp)
        assert sorted(order) == list(range(len(loads)))
        got = makespan([loads[i] for i in order], pp, vpp)
        assert got <= makespan([loads[i] for i in light], pp, vpp)
        assert got <= makespan(loads, pp, vpp)
        best = min(makespan(list(p), pp, vpp) for p in itertools.permutations(loads))
        assert best <= got
    with pytest.raises(ValueError, match="needs pp=4 <= N <= m"):
        order_for_pipeline([1, 2], pp=4, vpp=2)
    # Megatron-LM refuses m % N = 1 < pp: named with the fix.
    with pytest.raises(ValueError, match="multiple_of"):
        order_for_pipeline([1, 2, 3], pp=2, vpp=2)
    with pytest.raises(ValueError, match="virtual pipeline stages"):
        order_for_pipeline([1, 2, 3], pp=2**64)


def test_order_schedule_never_slower_than_the_schedule() -> None:
    lengths = [5, 90, 7, 40, 3, 60, 8, 2, 70, 4, 30, 6]
    sched = [[[1], [0, 2], [3]], [[5], [4, 6, 7], [8, 9, 10, 11]]]
    for pp, vpp in ((2, 1), (3, 1), (3, 3)):  # 3 per rank: interleaving needs m % N = 0 here
        kw = {"pp": pp, "vpp": vpp, "overhead": 3}
        ordered, t = order_schedule(sched, lengths, **kw)
        assert t == step_time(ordered, lengths, **kw) <= step_time(sched, lengths, **kw)
        assert sorted(map(sorted, ordered[0])) == sorted(map(sorted, sched[0]))


def test_plan_step_under_another_schedule() -> None:
    rng = np.random.default_rng(7)
    lengths = rng.integers(100, 4000, 60).tolist()
    gpipe = PipelineModel(schedule="gpipe", forward=1, backward=1, p2p_latency=50)
    plan = plan_step(lengths, 2, 8192, pp=4, overhead=500, pipeline=gpipe, time_limit=0.2)
    kw = {"pp": 4, "overhead": 500, "pipeline": gpipe}
    assert plan.step_time == step_time(plan.ranks, lengths, **kw)
    assert plan.lower_bound <= plan.step_time
    assert step_lower_bound(lengths, 2, 8192, **kw) <= plan.step_time
    assert plan.to_dict()["schedule"] == "gpipe"
    with pytest.raises(TypeError, match="PipelineModel"):
        plan_step(lengths, 2, 8192, pp=4, pipeline="gpipe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vpp must be 1"):
        plan_step(lengths, 2, 8192, pp=4, vpp=2, pipeline=PipelineModel(schedule="1f1b"))


def test_interleaving_needs_pp_micro_batches_per_rank() -> None:
    with pytest.raises(InfeasibleError, match="needs pp=4 <= N <= m"):
        plan_step([100] * 12, 4, 1000, pp=4, vpp=2, multiple_of=1)
    with pytest.raises(InfeasibleError, match="multiple of 4"):  # the default: multiples of pp
        plan_step([100] * 12, 4, 1000, pp=4, vpp=2)
    plan = plan_step([100] * 16, 4, 1000, pp=4, vpp=2, time_limit=0.2)
    assert plan.m == 4 and plan.step_time == step_time(plan.ranks, [100] * 16, pp=4, vpp=2)


def test_refine_assignment_lowers_the_exact_makespan_and_keeps_the_schedule_valid() -> None:
    """Random valid schedules, with and without a size term: the refined assignment's reported
    makespans are the exact evaluation of it (each rank in its kept order), never above the
    start, every micro-batch non-empty and under the cap."""
    import random

    from seqpart.solver import MicroBatchCost
    from seqpart.solver.step.makespan import order_ranks, rank_time_rows
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.phases.exact_choice import refine_assignment
    from seqpart.solver.step.pipeline import DEFAULT_MODEL, scaled_makespans, schedule_error

    rng = random.Random(0)
    tried = improved = 0
    while tried < 120:
        n, dp, pp, vpp = rng.randint(6, 30), rng.choice([2, 3, 4]), rng.choice([2, 4]), rng.choice([1, 2])
        m = rng.choice([pp, pp + 1, 2 * pp]) if vpp > 1 else rng.randint(1, 5)
        lengths = [rng.randint(1, 100) for _ in range(n)]
        k = dp * m
        start = np.array([i % k for i in range(n)])
        rng.shuffle(start)
        tokens = np.zeros(k, dtype=np.int64)
        np.add.at(tokens, start, lengths)
        if dp * m > n or schedule_error(pp, vpp, m) is not None or tokens.max() > 400:
            continue
        size = rng.choice([0, MicroBatchCost(overhead=3, square=1, falls=[(80, 5)])])
        inst = make_instance(lengths, dp, 400, cost=(5, 1), overhead=size, pp=pp, vpp=vpp)
        ordered = order_ranks(rank_time_rows(inst, start, m), pp, vpp)
        out = refine_assignment(inst, DEFAULT_MODEL, m, start, ordered.orders, 10**8)
        rows = rank_time_rows(inst, out.mb_of, m)
        assert out.values == scaled_makespans(
            [[row[p] for p in order] for row, order in zip(rows, ordered.orders, strict=True)], pp, vpp)
        assert out.step <= ordered.step
        np.add.at(after := np.zeros(k, dtype=np.int64), out.mb_of, lengths)
        assert len(set(out.mb_of.tolist())) == k and after.max() <= 400
        tried += 1
        improved += out.step < ordered.step
    assert improved > tried // 2  # random starts leave room: the search finds it


def test_the_exact_choice_and_the_order_search_start_nothing_past_their_deadline() -> None:
    """The clock is a safety net: past the deadline the exact choice still scores its first
    candidate (so it always has a schedule) but no other, nor any order search, and says the
    clock cut it; the order search returns its start as it was."""
    import time

    from seqpart.solver.step.makespan import choose_exact, order_ranks, rank_time_rows
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.pipeline import DEFAULT_MODEL, improve_order, scaled_makespans

    rng = np.random.default_rng(4)
    lengths = rng.integers(100, 4000, 96).tolist()
    inst = make_instance(lengths, 4, 8000, cost=(1, 0), pp=4)
    m = 6
    candidates = [(m, rng.permutation(np.arange(96) % (4 * m))) for _ in range(5)]
    cheap = [order_ranks(rank_time_rows(inst, mb_of, m), 4, 1).step for m, mb_of in candidates]
    assert min(cheap) < cheap[0]  # scoring them all would pick another
    past = time.perf_counter() - 1.0
    choice = choose_exact(inst, candidates, DEFAULT_MODEL, 10**12, deadline=past)
    assert (choice.index, choice.evaluated, choice.clock_cut) == (0, 0, True)
    full = choose_exact(inst, candidates, DEFAULT_MODEL, 10**12)
    assert not full.clock_cut and full.ordered.step <= choice.ordered.step

    times = rng.integers(1, 1000, 12).tolist()
    start = list(range(12))
    order, value, work = improve_order(times, 4, starts=[start], deadline=past)
    assert order == start and value == scaled_makespans([times], 4, 1)[0]
    assert work == 2 * 4 * 12  # the start's evaluation, no pass
