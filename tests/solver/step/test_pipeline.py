"""The exact pipeline makespan: textbook values, an independent reference, the lower bound
against brute force over orders, and the order search."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpart.solver.step.pipeline import (
    BWD,
    FWD,
    MAX_SCHEDULE_OPERATIONS,
    MAX_VIRTUAL_STAGES,
    PipelineModel,
    count_error,
    device_orders,
    improve_order,
    makespan,
    makespan_lower_bound,
    pipeline_sizes,
    scale,
    scaled_load_bound,
    scaled_lower_bound,
    scaled_makespan_of,
    scaled_makespans,
    schedule_error,
)
from seqpart.solver.step.pipeline._schedule import _chunk_table

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(orders: list, times: list[int], pp: int, vpp: int, model: PipelineModel) -> Fraction:
    """Event-driven simulation in real (unscaled) time, by relaxation to a fixed point: every
    operation starts when its device is free and its input has arrived. Independent of the
    module's topological pass."""
    fb = model.forward + model.backward
    nv = pp * vpp
    end: dict = {}
    changed = True
    rounds = 0
    while changed:
        rounds += 1
        assert rounds < 10_000, "no fixed point: the order deadlocks"
        changed = False
        for d, ops in enumerate(orders):
            free = Fraction(0)
            for k, j, c in ops:
                v = c * pp + d
                need = None
                if k == FWD and v > 0:
                    need = (FWD, j, v - 1)
                elif k == BWD:
                    need = (FWD, j, v) if v == nv - 1 else (BWD, j, v + 1)
                if need is not None and need not in end:
                    break
                start = free
                if need is not None:
                    lat = model.p2p_latency if need[2] % pp != d else 0
                    start = max(start, end[need] + lat)
                share = model.forward if k == FWD else model.backward
                finish = start + Fraction(times[j] * share, fb * vpp)
                if end.get((k, j, v)) != finish:
                    end[(k, j, v)] = finish
                    changed = True
                free = finish
    assert len(end) == 2 * nv * len(times)
    return max(end.values())


def test_textbook_makespans_for_equal_times() -> None:
    for pp in (2, 3, 4, 8):
        for m in (1, 2, 5, 8, 16):
            assert makespan([6] * m, pp) == (m + pp - 1) * 6
    for pp in (2, 4, 8):
        for vpp in (2, 3, 4):
            for m in (pp, 2 * pp, 3 * pp):
                assert makespan([6] * m, pp, vpp) == 6 * (m + Fraction(pp - 1, vpp))
    # Shares and schedule do not matter to the 1F1B makespan for equal times.
    assert makespan([6] * 5, 4, 1, PipelineModel(forward=1, backward=1)) == 48


def test_megatron_schedule_table_example() -> None:
    # Megatron-LM's own example: pp=2, 5 micro-batches, vpp=2, groups of 3.
    table = _chunk_table(5, 2, 3)
    assert [j for j, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_1f1b_orders_warm_up_then_alternate() -> None:
    orders = device_orders(4, 1, 6)
    assert [k for k, _, _ in orders[0][:4]] == [FWD, FWD, FWD, FWD]
    assert [k for k, _, _ in orders[3][:4]] == [FWD, BWD, FWD, BWD]
    assert all(len(o) == 12 for o in orders)


def test_bad_schedules_are_named() -> None:
    with pytest.raises(ValueError, match="schedule="):
        PipelineModel(schedule="zero-bubble")
    with pytest.raises(ValueError, match="vpp must be 1"):
        makespan([1, 2], 2, 2, PipelineModel(schedule="1f1b"))
    with pytest.raises(ValueError, match="needs pp=4 <= N <= m"):
        makespan([1, 2, 3], 4, 2)
    # Interleaving 3 chunks over 4 devices with 5 micro-batches deadlocks in Megatron's order.
    assert schedule_error(4, 3, 5) is not None
    assert schedule_error(4, 3, 8) is None
    with pytest.raises(ValueError, match="deadlocks"):
        scaled_makespan_of([[(BWD, 0, 0), (FWD, 0, 0)], [(FWD, 0, 0), (BWD, 0, 0)]], [1], 2, 1)
    with pytest.raises(TypeError, match="forward"):
        PipelineModel(forward=0.5)  # type: ignore[arg-type]


schedules = st.sampled_from([
    ("megatron", 1), ("megatron", 2), ("gpipe", 1), ("gpipe", 2), ("interleaved", 1),
])


@FAST
@given(
    sched=schedules,
    pp=st.integers(2, 3),
    times=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    shares=st.sampled_from([(1, 2), (1, 1), (2, 3)]),
    lat=st.sampled_from([0, 0, 2]),
)
def test_exact_and_bound_against_brute_force_over_orders(
    sched: tuple[str, int], pp: int, times: list[int], shares: tuple[int, int], lat: int
) -> None:
    name, vpp = sched
    m = len(times)
    model = PipelineModel(schedule=name, forward=shares[0], backward=shares[1], p2p_latency=lat)
    if schedule_error(pp, vpp, m, model) is not None:
        return
    orders = device_orders(pp, vpp, m, model)
    got = makespan(times, pp, vpp, model)
    assert got == reference(orders, times, pp, vpp, model)
    # The vectorised pass over many orders agrees with the one-order pass.
    perms = [list(p) for p in itertools.permutations(times)]
    scaled = scaled_makespans(perms, pp, vpp, model)
    assert scaled == [scaled_makespans([p], pp, vpp, model)[0] for p in perms]
    # The bound holds for every order, and the order search finds one no worse than any start.
    bound = scaled_lower_bound(times, pp, vpp, model)
    assert bound <= min(scaled)
    order, value, _ = improve_order(times, pp, vpp, model, starts=[list(range(m))])
    assert value == scaled_makespans([[times[i] for i in order]], pp, vpp, model)[0]
    assert min(scaled) <= value <= scaled[0]


@FAST
@given(times=st.lists(st.integers(1, 20), min_size=1, max_size=2), lat=st.sampled_from([0, 1]))
def test_bound_holds_for_every_device_order(times: list[int], lat: int) -> None:
    """pp=2, vpp=1: every interleaving of each device's operations that does not deadlock."""
    m, pp = len(times), 2
    model = PipelineModel(p2p_latency=lat)
    ops = [(k, j, 0) for k in (FWD, BWD) for j in range(m)]
    bound = scaled_lower_bound(times, pp, 1, model)
    best = None
    for a in itertools.permutations(ops):
        for b in itertools.permutations(ops):
            try:
                value = scaled_makespan_of([list(a), list(b)], times, pp, 1, model)
            except ValueError:
                continue
            best = value if best is None else min(best, value)
    assert best is not None and bound <= best


def test_bound_tight_on_textbook_and_a_long_micro_batch() -> None:
    assert makespan_lower_bound([6] * 8, 4, 2) == makespan([6] * 8, 4, 2)
    # One long micro-batch: its whole path through all 16 virtual stages bounds the step.
    times = [100] + [1] * 7
    assert makespan_lower_bound(times, 8, 2) == 800
    assert makespan(times, 8, 2) >= 800


def test_exact_with_huge_times() -> None:
    big = 10**30
    rows = [[big, 3 * big], [2 * big, big]]
    assert scaled_makespans(rows, 2, 1) == [scaled_makespans([r], 2, 1)[0] for r in rows]
    assert makespan([big] * 3, 2) == 4 * big
    assert scale(2) == 6


@FAST
@given(
    times=st.lists(st.integers(1, 10**6), min_size=1, max_size=12),
    pp=st.integers(1, 8),
    vpp=st.integers(1, 4),
    lat=st.sampled_from([0, 3]),
)
def test_load_bound_is_below_every_split(times: list[int], pp: int, vpp: int, lat: int) -> None:
    """The bound from a rank's total alone never exceeds the bound of any actual split."""
    model = PipelineModel(p2p_latency=lat)
    got = scaled_load_bound(sum(times), len(times), min(times), pp, vpp, model)
    assert got <= scaled_lower_bound(times, pp, vpp, model)


def test_load_bound_is_tight_for_a_geometric_split() -> None:
    # pp=2, vpp=1 (q = 1/2), m=2: times 2/3 and 1/3 of 6 meet 6/(1 - 1/4) = 8.
    assert scaled_load_bound(6, 2, 1, 2, 1) == scale(1) * 8 == scaled_lower_bound([4, 2], 2, 1)


def test_interleaved_counts_follow_megatron_s_rule_exactly() -> None:
    """Megatron-LM's interleaved schedule takes m micro-batches in groups of N per chunk only
    when pp <= N <= m and m % N is 0 or at least pp: every other count is named, never run."""
    for pp in (2, 3, 4):
        for group in (pp, pp + 1, 2 * pp):
            model = PipelineModel(group=group)
            for m in range(1, 4 * group):
                ok = pp <= group <= m and (m % group == 0 or m % group >= pp)
                why = count_error(pp, 2, m, model)
                assert (why is None) == ok, (pp, group, m, why)
                if not ok:
                    assert "multiple_of" in why
                    with pytest.raises(ValueError, match="multiple_of"):
                        makespan([1] * m, pp, 2, model)
    assert count_error(4, 1, 3) is None  # 1F1B runs any count


def test_absurd_pipeline_sizes_are_refused_before_any_work() -> None:
    for pp, vpp in ((10**6, 1), (2**64, 1), (2, 2**64), (1, 2**64)):
        with pytest.raises(ValueError, match="virtual pipeline stages"):
            pipeline_sizes(pp, vpp)
        with pytest.raises(ValueError, match="virtual pipeline stages"):
            makespan([1, 2], pp, vpp)
    assert pipeline_sizes(MAX_VIRTUAL_STAGES, 1) == (MAX_VIRTUAL_STAGES, 1)
    # A count whose schedule has more operations than are evaluated is refused by name.
    m = MAX_SCHEDULE_OPERATIONS // (2 * 8) + 1
    assert "operations" in (count_error(8, 1, m) or "")
