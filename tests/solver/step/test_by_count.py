"""plan_step at pp > 1 plans each promising count on its own (solver/step/phases/by_count.py)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from seqpart.solver import SolverOptions
from seqpart.solver.step import check_schedule, plan_step, step_lower_bound, step_time
from seqpart.solver.step.model import StepInstance, make_instance
from seqpart.solver.step.phases import StepSearch, by_count
from seqpart.solver.step.phases.by_count import _split

STRICT = SolverOptions(deterministic=True)
COST = (64, 1)
OVERHEAD = 64 * 32


def _batch(seed: int, n: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in np.clip(rng.lognormal(6.5, 1.0, n), 16, 6000)]


def _plan(lengths: list[int], seconds: float, **kw: object) -> object:
    args = {"pp": 4, "vpp": 1, "cost": COST, "overhead": OVERHEAD, "time_limit": seconds,
            "options": STRICT, **kw}
    return plan_step(lengths, 2, 2 * max(lengths), **args)


def test_a_longer_limit_is_never_slower_in_the_repeatable_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every limit from COUNT_BASE_SECONDS / BASE_SHARE on runs the same first part (0.5 s as shipped;
    # 0.1 s here, to keep the test short): a longer one only searches more counts, or longer.
    monkeypatch.setattr(by_count, "COUNT_BASE_SECONDS", 0.04)
    searched: list[float] = []
    plan_one = by_count._Counts.plan

    def spy(self: by_count._Counts, entry: by_count._Count, size: float) -> None:
        searched.append(size)
        plan_one(self, entry, size)

    monkeypatch.setattr(by_count._Counts, "plan", spy)
    lengths = _batch(0, 48)
    short = _plan(lengths, 0.25)
    assert len(searched) >= 2  # the count search ran
    longer = _plan(lengths, 0.6)
    assert Fraction(longer.step_time) <= Fraction(short.step_time)
    again = _plan(lengths, 0.25)
    assert again.ranks == short.ranks and again.step_time == short.step_time


def test_the_plan_is_valid_and_keeps_the_callers_bound_and_multiple() -> None:
    lengths = _batch(2, 40)
    cap = 2 * max(lengths)
    plan = plan_step(lengths, 2, cap, pp=2, vpp=2, cost=COST, overhead=OVERHEAD, time_limit=0.3,
                     options=STRICT)
    assert plan.multiple_of == 2  # the interleaved schedule's rule, not a count's own search
    check_schedule(plan.ranks, lengths, 2, plan.m, cap, 2)
    assert plan.m % 2 == 0
    assert step_time(plan.ranks, lengths, cost=COST, overhead=OVERHEAD, pp=2, vpp=2) == plan.step_time
    # The bound of every count, not of the multiples of the chosen one.
    assert plan.lower_bound == step_lower_bound(lengths, 2, cap, cost=COST, overhead=OVERHEAD,
                                                pp=2, vpp=2, multiple_of=2)
    assert plan.stopped_by in ("work", "complete", "proof")


def test_the_count_search_is_never_behind_the_whole_search_alone() -> None:
    lengths = _batch(3, 64)
    inst = make_instance(lengths, 2, 2 * max(lengths), cost=COST, overhead=OVERHEAD, pp=4, vpp=1,
                         multiple_of=1)
    base_seconds, _ = _split(inst, 0.3)  # type: ignore[misc]
    alone = StepSearch(inst, base_seconds, 0.0, STRICT, "auto", None, inst.pipeline).run(())
    assert Fraction(_plan(lengths, 0.3).step_time) <= Fraction(alone.step_time)


def test_where_the_count_search_applies() -> None:
    small = make_instance(_batch(4, 64), 2, None, pp=4)
    assert _split(make_instance(_batch(4, 64), 2, None, pp=1), 1.0) is None
    base, quantum = _split(small, 1.0)  # type: ignore[misc]
    assert base == pytest.approx(0.2) and 2 * quantum <= 1.0 - base
    assert _split(small, 0.01) is None  # no room for two counts' searches
    assert _split(small, 0.5)[0] == pytest.approx(0.2)  # type: ignore[index]
    assert _split(small, 10.0)[0] == pytest.approx(0.2)  # type: ignore[index]
    # n = 4,096: a count's first search takes 0.16 s; four fit in the 0.8 s that 1 s leaves.
    mid = make_instance([100] * 4096, 8, None, pp=4)
    assert _split(mid, 1.0) is not None and _split(mid, 0.5) is None
    # n = 16,384: the first part takes one count's first search (0.66 s), so that the trainers'
    # schedulers run there.
    wide = make_instance([100] * 16_384, 8, None, pp=4)
    assert _split(wide, 5.0) == pytest.approx((16_384 * 40e-6, 16_384 * 40e-6))
    big = make_instance([100] * 40_000, 8, None, pp=4)
    assert _split(big, 1.0) is None  # one count's search would not fit twice


def test_a_search_of_one_count_keeps_to_it() -> None:
    lengths = _batch(5, 32)
    inst = make_instance(lengths, 2, 2 * max(lengths), cost=COST, overhead=OVERHEAD, pp=2,
                         multiple_of=1)
    full = StepSearch(inst, 0.2, 0.0, STRICT, "auto", None, inst.pipeline)
    m = sorted(full.bounds)[1]
    one = StepSearch(inst, 0.2, 0.0, STRICT, "auto", None, inst.pipeline, count=(m, full.bounds))
    one.add("elsewhere", m + 1, np.arange(len(lengths)) % (2 * (m + 1)))
    assert one.pool == []  # a row of another count is not taken
    assert one.run(()).m == m


def _second_count(seed: int) -> tuple[int, dict[int, int], StepInstance]:
    """A batch's second feasible count, the formula's bounds, and the instance the count
    search gives that count's searches (multiples of it)."""
    lengths = _batch(seed, 48)
    inst = make_instance(lengths, 2, 2 * max(lengths), cost=COST, overhead=OVERHEAD, pp=4,
                         multiple_of=1)
    full = StepSearch(inst, 0.1, 0.0, STRICT, "auto", None, inst.pipeline)
    m = sorted(full.bounds)[1]
    return m, full.bounds, dataclasses.replace(inst, multiple_of=m)


def test_a_counts_searches_order_each_trainer_schedule_once() -> None:
    m, bounds, one = _second_count(6)
    cache: dict[tuple[int, bytes], object] = {}
    searches = []
    for seconds in (0.05, 0.2):
        search = StepSearch(one, seconds, 0.0, STRICT, "auto", None, one.pipeline,
                            count=(m, bounds), order_cache=cache)  # type: ignore[arg-type]
        search.run(())
        searches.append(search)
    first, again = searches
    assert cache and first.fixed_work > 0
    # The schedules met again take their orders from the first search, and no work.
    met = [(row, ordered) for row, ordered in again.fixed.values()
           if any(np.array_equal(row.mb_of, old.mb_of) for old, _ in first.fixed.values())]
    assert met
    assert all(cache[(row.m, row.mb_of.tobytes())] is ordered for row, ordered in met)
    assert again.fixed_work < first.fixed_work


def test_a_counts_longer_search_goes_on_from_its_best_plan() -> None:
    m, bounds, one = _second_count(7)
    best = StepSearch(one, 0.1, 0.0, STRICT, "auto", None, one.pipeline, count=(m, bounds)).run(())
    again = StepSearch(one, 0.1, 0.0, STRICT, "auto", None, one.pipeline, count=(m, bounds))
    by_count._continue_from(again, best)
    (row,) = again.pool
    assert row.m == m
    # The same micro-batches, under a name without the searches' suffixes (added again by the
    # phases that apply), never taken for a trainer's or given schedule.
    groups = {frozenset(np.flatnonzero(row.mb_of == b).tolist()) for b in range(2 * m)}
    assert groups == {frozenset(mb) for rank in best.ranks for mb in rank}
    assert "+local_search" not in row.method and "+exact_moves" not in row.method
    assert not row.method.startswith(("trainer:", "start "))


def test_what_the_winners_moves_leave_goes_to_the_runners_up(monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    """The exact makespan's moves refine the winner of the exact choice, then the runners-up,
    fastest first, while the work lasts; the plan is the fastest of all that they reach."""
    from seqpart.solver.step.model import exact
    from seqpart.solver.step.phases import exact_choice
    from seqpart.solver.step.pipeline import scale

    refined: list[exact_choice.Refined] = []
    refine = exact_choice.refine_assignment

    def spy(*args: object, **kw: object) -> exact_choice.Refined:
        out = refine(*args, **kw)  # type: ignore[arg-type]
        refined.append(out)
        return out

    monkeypatch.setattr(exact_choice, "refine_assignment", spy)
    m, bounds, one = _second_count(1)
    plan = StepSearch(one, 0.1, 0.0, STRICT, "auto", None, one.pipeline, count=(m, bounds)).run(())
    assert len(refined) >= 2
    sc = scale(one.vpp, one.pipeline)
    assert Fraction(plan.step_time) == min(exact(r.step, sc) for r in refined)
    # Here a runner-up's moves reach a faster plan than the winner's (its local optimum).
    assert min(r.step for r in refined[1:]) < refined[0].step
    assert any("from the runner-up" in note for note in plan.notes)
    assert Fraction(plan.step_time) == step_time(plan.ranks, one.tokens.tolist(), pp=one.pp,
                                                 vpp=one.vpp, cost=COST, overhead=OVERHEAD)
