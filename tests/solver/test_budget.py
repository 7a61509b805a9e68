"""The one budget type: a call's budget hands each step its part, with the clock as the timing
mode says; a step's part counts units and records what stopped it."""

from __future__ import annotations

import time

from seqpart.solver.options import Budget

#: Far enough ahead that no test reaches it, far enough back that every test is past it.
AHEAD, BEHIND = 3600.0, -3600.0


def test_a_steps_deadline_follows_the_timing_mode() -> None:
    now = time.perf_counter()
    strict = Budget(1.0)
    assert strict.allowance(100, 0.5).deadline is None  # no clock at all
    work = Budget(1.0, now + AHEAD)
    assert work.allowance(100, 0.5, own_clock=False).deadline == now + AHEAD  # the call's net
    own = work.allowance(100, 0.5).deadline
    assert own is not None and own < now + AHEAD  # its own seconds, when sooner
    clock = Budget(1.0, now + AHEAD, by_clock=True, on_clock=True)
    part = clock.allowance(100, 0.5, own_clock=False, every=64)
    assert part.deadline is not None and part.deadline < now + AHEAD  # the clock is its limit
    assert (part.limit, part.by_clock, part.every, part.on_clock) == (100, True, 64, False)


def test_the_calls_budget_counts_estimates_or_reads_the_clock() -> None:
    counted = Budget(1.0, time.perf_counter() + AHEAD)
    counted.charge(0.25)
    assert counted.left() == 0.75 and counted.fits(0.5) and not counted.fits(0.9)
    assert counted.ran_out and not counted.cut
    on_clock = Budget(1.0, time.perf_counter() + BEHIND, by_clock=True, on_clock=True)
    on_clock.charge(0.25)  # recorded, but the clock decides
    assert on_clock.left() < 0 and on_clock.stop_reason(proven=False) == "clock"


def test_a_part_stops_on_its_units_or_on_the_clock_and_says_which() -> None:
    units = Budget(10)
    units.charge(4)
    assert not units.out() and units.over(7) and units.ran_out and not units.cut
    units.charge(6)
    assert units.out() and not units.cut
    late = Budget(10, time.perf_counter() + BEHIND, every=4)
    late.charge(1)
    assert not late.out()  # the clock is read every 4 units only
    late.charge(3)
    assert late.out() and late.cut and not late.ran_out
    assert Budget(10, time.perf_counter() + AHEAD).clock_out(ahead=2 * AHEAD)  # would be late


def test_a_child_takes_its_share_of_units_and_clock() -> None:
    parent = Budget(1000, time.perf_counter() + AHEAD, every=8)
    parent.charge(200)
    child = parent.child(0.25, most=150)
    assert (child.limit, child.used, child.every) == (150, 0, 8)
    assert child.deadline is not None and child.deadline < parent.deadline  # type: ignore[operator]
    assert Budget(1000).child(0.3).limit == 300 and Budget(1000).child(0.3).deadline is None
