"""Step planning: the step-time model, its lower bound, the schedule validator and plan_step."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpart.heuristics import load_lower_bound
from seqpart.solver import Cost, InfeasibleError, InvalidPlanError, SolverOptions
from seqpart.solver.step import (
    PipelineModel,
    StepPlan,
    check_schedule,
    formula_step_time,
    plan_step,
    rank_times,
    step_lower_bound,
    step_time,
)
from seqpart.solver.step.bound import _load_bounds, _load_bounds_many
from seqpart.solver.step.model import find_schedule_violations, make_instance

from _brute import brute_force_step

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- the model


def test_step_time_matches_a_hand_computation() -> None:
    lengths = [10, 20, 30, 40]
    schedule = [[[0, 1], [2]], [[3]]]
    # pp=1: the sum. rank 0: micro-batches 30+5 and 30+5; rank 1: 40+5.
    assert rank_times(schedule, lengths, overhead=5) == [70, 45]
    # One micro-batch through pp stages: its forward and backward cross every stage one after
    # another, pp*t, whatever vpp. Two equal ones under 1F1B: (m + pp - 1)*t.
    assert rank_times(schedule, lengths, overhead=5, pp=3)[1] == 3 * 45
    assert rank_times(schedule, lengths, overhead=5, pp=3) == [4 * 35, 3 * 45]
    # Interleaved (vpp=2): (m + (pp-1)/vpp)*t for equal times; Megatron refuses m < pp.
    assert rank_times(schedule[:1], lengths, overhead=5, pp=2, vpp=2) == [Fraction(5, 2) * 35]
    with pytest.raises(ValueError, match="needs pp=2 <= N <= m .* m=1 is refused"):
        rank_times(schedule, lengths, overhead=5, pp=2, vpp=2)
    # The closed formula (the search's proxy) says sum + (pp-1)*max/vpp: here optimistic.
    assert formula_step_time(schedule, lengths, overhead=5, pp=3, vpp=2) == 105
    t = formula_step_time(schedule, lengths, overhead=5, pp=2, vpp=2)
    assert t == Fraction(175, 2) and isinstance(t, Fraction)
    # attention-style cost: a*l + b*l^2 per sequence, summed.
    assert step_time(schedule, lengths, cost=(1, 1)) == 40 + 1600
    assert step_time(schedule, lengths, cost=Cost(2, 0)) == 2 * 60
    # Another schedule and shares, by name; a latency adds to every crossing.
    one = PipelineModel(schedule="gpipe", forward=1, backward=1, p2p_latency=2)
    assert rank_times([[[0]]], [10], pp=3, pipeline=one) == [30 + 2 * 2 * 2]
    # Exact: a third of a micro-batch's time per virtual stage is a Fraction.
    assert step_time([[[0], [1]]], [1, 2], pp=2, vpp=2) == Fraction(13, 3)  # worked by hand


def test_step_time_is_exact_beyond_int64() -> None:
    lengths = [2**31 - 1, 2**31 - 3, 2**30]
    a, b = 2**20, 2**10
    schedule = [[[0, 1, 2]]]
    expect = sum(a * x + b * x * x for x in lengths)
    assert expect > 2**63
    assert step_time(schedule, lengths, cost=(a, b)) == expect
    # One micro-batch: 4 stages one after another (the formula would say 2x). Megatron needs
    # m >= pp to interleave, so the all-forward-all-backward order runs it.
    gpipe = PipelineModel(schedule="gpipe")
    assert step_time(schedule, lengths, cost=(a, b), pp=4, vpp=3, pipeline=gpipe) == 4 * expect
    assert formula_step_time(schedule, lengths, cost=(a, b), pp=4, vpp=3) == 2 * expect


def test_step_time_scores_raw_schedules_and_rejects_bad_indices() -> None:
    # A trainer's schedule may break the cap or leave a rank short: still scored.
    assert rank_times([[[0, 1]], []], [5, 6]) == [11, 0]
    # An empty micro-batch pays its overhead only; an index given more times than there are
    # sequences is summed as often, exactly (summed in Python ints past n entries).
    assert rank_times([[[0, 1], [], [1, 1, 1]]], [5, 6], overhead=2) == [13 + 2 + 20]
    huge = 2**40
    assert rank_times([[[0] * 5]], [huge], cost=(huge, 0)) == [5 * huge * huge]
    with pytest.raises(ValueError, match="not an index"):
        step_time([[[0, True]]], [1, 2])
    with pytest.raises(ValueError, match="not an index"):
        step_time([[[0, 7]]], [1, 2])
    with pytest.raises(ValueError, match="not an index"):
        step_time([[[True]]], [1, 2])
    with pytest.raises(TypeError, match="list over ranks"):
        step_time("abc", [1, 2])
    with pytest.raises(ValueError, match="no ranks"):
        step_time([], [1, 2])
    with pytest.raises(ValueError, match="overhead"):
        step_time([[[0]]], [1], overhead=-1)
    with pytest.raises(TypeError, match="overhead"):
        step_time([[[0]]], [1], overhead=1.5)
    with pytest.raises(ValueError, match="pp"):
        step_time([[[0]]], [1], pp=0)


@FAST
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),
    st.integers(1, 9),
)
def test_load_bounds_helper_matches_load_lower_bound(costs: list[int], k: int) -> None:
    c = np.array(sorted(costs, reverse=True), dtype=object)
    prefix = np.concatenate(([0], np.cumsum(c))).astype(object)
    assert _load_bounds(c, prefix, k) == load_lower_bound(costs, k)
    ks = [1, k, k + 1, 2 * k, len(costs) + 3]
    assert _load_bounds_many(c, prefix, ks) == [load_lower_bound(costs, x) for x in ks]


def _issue_bound(lengths: list[int], dp: int, ms: list[int], cost: tuple[int, int], o: int,
                 pp: int, vpp: int) -> Fraction:
    """The issue's formula, literally."""
    c = [cost[0] * x + cost[1] * x * x for x in lengths]
    total, c_max = sum(c), max(c)
    return min(
        max(
            (Fraction(total, dp) + m * o) * (1 + Fraction(pp - 1, m * vpp)),
            c_max + m * o + Fraction((pp - 1) * (c_max + o), vpp),
        )
        for m in ms
    )


instances = st.tuples(
    st.lists(st.integers(1, 30), min_size=2, max_size=5),
    st.integers(1, 2),  # dp
    st.sampled_from([None, 30, 45]),  # cap
    st.integers(1, 3),  # pp
    st.integers(1, 2),  # vpp
    st.sampled_from([0, 7]),  # overhead
    st.sampled_from([(1, 0), (3, 1)]),  # cost
)


@FAST
@given(instances)
def test_bound_is_valid_for_the_exact_makespan(inst: tuple) -> None:
    """Brute force over every schedule and every order: the bound never exceeds the best exact
    makespan; at pp = 1 (the formula is exact there) it is no weaker than the issue's."""
    lengths, dp, cap, pp, vpp, o, cost = inst
    best = brute_force_step(lengths, dp, cap, cost=cost, overhead=o, pp=pp, vpp=vpp)
    if best is None:
        try:
            step_lower_bound(lengths, dp, cap, cost=cost, overhead=o, pp=pp, vpp=vpp)
        except InfeasibleError:
            return
        assert vpp > 1  # counts exist, but interleaving cannot run any (fewer than pp)
        return
    bound = step_lower_bound(lengths, dp, cap, cost=cost, overhead=o, pp=pp, vpp=vpp)
    assert bound <= best
    if pp == 1:
        ms = make_instance(lengths, dp, cap, cost=cost, overhead=o, pp=pp, vpp=vpp).feasible_ms()
        assert bound >= _issue_bound(lengths, dp, ms, cost, o, pp, vpp)


# --------------------------------------------------------------------------- the validator


def test_check_schedule_names_each_broken_rule() -> None:
    lengths = [10, 20, 30, 40]
    twice = [[[0, 1], [2]], [[3], [1]]]
    assert any("more than one" in x for x in find_schedule_violations(twice, lengths, 2, 2, 50))
    short = [[[0, 1], [2]], [[3]]]
    assert any("expected m=2" in x for x in find_schedule_violations(short, lengths, 2, 2, 50))
    assert any("expected dp_size=3" in x for x in find_schedule_violations(short, lengths, 3, 2, 50))
    good = [[[0, 3]], [[1, 2]]]
    check_schedule(good, lengths, 2, 1, 50)  # no raise
    with pytest.raises(InvalidPlanError, match="exceed cap"):
        check_schedule(good, lengths, 2, 1, 45)
    with pytest.raises(InvalidPlanError, match="multiple_of"):
        check_schedule(good, lengths, 2, 1, 50, multiple_of=2)
    with pytest.raises(InvalidPlanError, match="empty"):
        check_schedule([[[0, 1, 2, 3], []]], lengths, 1, 2, None)
    # An over-cap sequence alone is fine only with oversize="alone", and only alone.
    alone = [[[2], [0, 1]]]
    with pytest.raises(InvalidPlanError, match="exceed cap"):
        check_schedule(alone, [10, 20, 40], 1, 2, 35)
    check_schedule(alone, [10, 20, 40], 1, 2, 35, oversize="alone")
    with pytest.raises(InvalidPlanError, match="exceed cap"):
        check_schedule([[[1, 2], [0]]], [10, 20, 40], 1, 2, 35, oversize="alone")


# --------------------------------------------------------------------------- plan_step


def _assert_consistent(plan: StepPlan, lengths: list[int], **model: object) -> None:
    over = "alone" if plan.oversize else "error"
    check_schedule(plan.ranks, lengths, plan.dp_size, plan.m, plan.cap, plan.multiple_of,
                   oversize=over)
    kw = {"cost": plan.cost, "overhead": plan.overhead, "pp": plan.pp, "vpp": plan.vpp}
    # The reported step is the exact makespan of the returned schedule, in its order.
    assert plan.step_time == step_time(plan.ranks, lengths, pipeline=plan.pipeline, **kw)
    assert plan.rank_times == rank_times(plan.ranks, lengths, pipeline=plan.pipeline, **kw)
    assert plan.formula_step_time == formula_step_time(plan.ranks, lengths, **kw)
    assert plan.lower_bound <= plan.step_time
    assert (plan.status == "optimal") == (plan.step_time <= plan.lower_bound)
    json.dumps(plan.to_dict())
    assert f"m={plan.m}" in plan.summary()


@FAST
@given(instances, st.sampled_from([1, 2]))
def test_plan_step_against_brute_force(inst: tuple, multiple_of: int) -> None:
    lengths, dp, cap, pp, vpp, o, cost = inst
    best = brute_force_step(lengths, dp, cap, cost=cost, overhead=o, pp=pp, vpp=vpp,
                            multiple_of=multiple_of)
    kw = {"cost": cost, "overhead": o, "pp": pp, "vpp": vpp, "multiple_of": multiple_of}
    if best is None:
        with pytest.raises(InfeasibleError):
            plan_step(lengths, dp, cap, **kw)
        return
    plan = plan_step(lengths, dp, cap, time_limit=2.0, **kw)
    _assert_consistent(plan, lengths)
    assert plan.lower_bound <= best <= plan.step_time
    if plan.optimal:
        assert plan.step_time == best
    if pp == 1:
        # Tiny instances: CP-SAT solves every count, so the plan is the optimum, proven.
        assert plan.step_time == best, plan.notes
        assert plan.optimal, plan.notes


@FAST
@given(
    st.lists(st.integers(1, 2000), min_size=8, max_size=120),
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from([0, 500]),
)
def test_plan_step_heuristics_are_valid_and_never_behind_a_given_start(
    lengths: list[int], dp: int, pp: int, overhead: int
) -> None:
    cap = 4000
    if len(lengths) < dp:
        return
    plan = plan_step(lengths, dp, cap, pp=pp, overhead=overhead, engine="heuristics",
                     time_limit=0.2, trainer_starts=False)
    _assert_consistent(plan, lengths)
    # A simple valid start: round robin of one sequence per micro-batch when it fits.
    n = len(lengths)
    start = [[[i] for i in range(r, n, dp)] for r in range(dp)]
    if len({len(r) for r in start}) == 1:
        again = plan_step(lengths, dp, cap, pp=pp, overhead=overhead, engine="heuristics",
                          time_limit=0.2, trainer_starts=False, starts=[start])
        _assert_consistent(again, lengths)
        assert again.step_time <= step_time(start, lengths, overhead=overhead, pp=pp)


def test_pipeline_prefers_more_micro_batches_and_overhead_fewer() -> None:
    # pp=4, no overhead: 8 micro-batches of one sequence shrink the bubble to 3*10.
    plan = plan_step([10] * 8, 1, 80, pp=4)
    assert plan.m == 8 and plan.step_time == 80 + 3 * 10 and plan.optimal
    # pp=1 with a per-micro-batch overhead: one micro-batch is best.
    plan = plan_step([10] * 4, 1, 40, overhead=100)
    assert plan.m == 1 and plan.step_time == 140 and plan.optimal


def test_pipeline_order_puts_the_heaviest_micro_batch_in_the_middle() -> None:
    lengths = [1, 2, 3, 4, 5]
    plan = plan_step(lengths, 1, 5, pp=2)
    times = [sum(lengths[i] for i in mb) for mb in plan.ranks[0]]
    assert plan.m >= 3
    peak = times.index(max(times))
    assert 0 < peak < len(times) - 1
    assert times[0] == min(times)


def test_oversize_alone() -> None:
    lengths = [100, 10, 20, 30]
    with pytest.raises(ValueError, match="oversize='alone'"):
        plan_step(lengths, 2, 50)
    plan = plan_step(lengths, 2, 50, oversize="alone")
    _assert_consistent(plan, lengths)
    assert plan.oversize == [0]
    assert [0] in plan.micro_batches


def test_plan_step_is_deterministic() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 3000, 400).tolist()
    kw = {"pp": 4, "cost": "attention", "overhead": 24576 * 512, "time_limit": 0.3}
    a = plan_step(lengths, 8, 8192, **kw)
    b = plan_step(lengths, 8, 8192, **kw)
    if not any("clock" in x for x in a.notes + b.notes):  # the clock is only a safety net
        assert a.ranks == b.ranks and a.step_time == b.step_time and a.method == b.method
    # Without the clock at all (options.deterministic), always the same plan.
    still = SolverOptions(deterministic=True)
    c = plan_step(lengths, 8, 8192, options=still, **kw)
    d = plan_step(lengths, 8, 8192, options=still, **kw)
    assert c.ranks == d.ranks and c.step_time == d.step_time and c.method == d.method
    assert not any("clock" in x for x in c.notes)


def test_plan_step_rejects_bad_input() -> None:
    ok = [5, 6, 7, 8]
    with pytest.raises(ValueError, match="dp_size"):
        plan_step(ok, 0, 10)
    with pytest.raises(TypeError, match="dp_size"):
        plan_step(ok, 1.5, 10)
    with pytest.raises(ValueError, match="pp"):
        plan_step(ok, 1, 10, pp=0)
    with pytest.raises(TypeError, match="vpp"):
        plan_step(ok, 1, 10, vpp=True)
    with pytest.raises(ValueError, match="multiple_of"):
        plan_step(ok, 1, 10, multiple_of=-2)
    with pytest.raises(ValueError, match="overhead"):
        plan_step(ok, 1, 10, overhead=-1)
    with pytest.raises(ValueError, match="time_limit"):
        plan_step(ok, 1, 10, time_limit=0)
    with pytest.raises(ValueError, match="cost"):
        plan_step(ok, 1, 10, cost="flops")
    with pytest.raises(ValueError, match="lengths"):
        plan_step([3, 0], 1, 10)
    with pytest.raises(ValueError, match="cap"):
        plan_step(ok, 1, 0)
    with pytest.raises(ValueError, match="engine"):
        plan_step(ok, 1, 10, engine="magic")
    with pytest.raises(TypeError, match="starts"):
        plan_step(ok, 1, 10, starts="abc")
    # Too few sequences for dp_size * m non-empty micro-batches at every feasible m.
    with pytest.raises(InfeasibleError, match="fewer ranks") as err:
        plan_step(ok, 5, 10)
    assert err.value.proven
    with pytest.raises(InfeasibleError, match="multiple_of"):
        plan_step(ok, 2, 100, multiple_of=4)
    with pytest.raises(InfeasibleError):  # the cap needs 4 micro-batches, 3 ranks need 6
        plan_step([9, 9, 9, 9], 3, 10)


def test_invalid_starts_are_skipped_with_a_note() -> None:
    lengths = [5, 6, 7, 8]
    bad = [[[0, 1, 2]], [[3]], [[0]]]
    plan = plan_step(lengths, 2, 20, starts=[bad], trainer_starts=False)
    assert any("start 0" in x for x in plan.notes)
    _assert_consistent(plan, lengths)


def test_plan_step_is_exact_beyond_int64() -> None:
    # A huge overhead and cost push every time past int64: the search runs on exact ints.
    lengths = [3, 5, 7, 9, 11]
    kw = {"pp": 3, "overhead": 2**70, "cost": (2**40, 2**30)}
    plan = plan_step(lengths, 2, 20, **kw)
    _assert_consistent(plan, lengths)
    assert plan.step_time > 2**70
    assert plan.step_time == brute_force_step(lengths, 2, 20, **kw)
    rng = np.random.default_rng(1)
    bigger = rng.integers(1, 3000, 40).tolist()
    plan = plan_step(bigger, 4, 5000, pp=3, vpp=2, overhead=2**61, cost=(7, 1), time_limit=0.3)
    _assert_consistent(plan, bigger)


def test_plan_step_is_never_behind_a_valid_trainer_schedule() -> None:
    from seqpart.heuristics.trainer_baselines import TRAINER_SCHEDULERS

    rng = np.random.default_rng(5)
    cost, overhead = (24576, 1), 24576 * 512
    for dp, pp, every in ((2, 1, True), (4, 4, True), (2, 2, None), (8, 1, None)):
        lengths = rng.integers(50, 6000, 96).tolist()
        costs = [cost[0] * x + cost[1] * x * x for x in lengths]
        # None: the trainers' starts within the budget (all of them fit at this size).
        plan = plan_step(lengths, dp, 8192, pp=pp, cost=cost, overhead=overhead,
                         trainer_starts=every, time_limit=0.3)
        assert every or not plan.trainers_not_run
        _assert_consistent(plan, lengths)
        for fn in TRAINER_SCHEDULERS.values():
            sched = fn(lengths, dp, 8192, costs=costs)
            if not find_schedule_violations(sched, lengths, dp, len(sched[0]), 8192):
                assert plan.step_time <= step_time(sched, lengths, cost=cost, overhead=overhead,
                                                   pp=pp)


def test_trainer_starts_keep_to_their_work_budget() -> None:
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.starts.trainers import (
        finish_open_ended,
        run_trainer_starts,
        trainer_starts,
    )

    lengths = np.random.default_rng(3).integers(1, 4000, 600).tolist()
    inst = make_instance(lengths, 8, 4096, cost=(3, 1))
    never = lambda m, onwards: False  # noqa: E731

    def run(budget: int | None, hopeless=never) -> tuple[list[str], list[str], int]:
        names: list[str] = []
        notes, spent, left = run_trainer_starts(inst, budget, None, hopeless,
                                                lambda name, sched: names.append(name))
        return names, notes + left.notes(), spent

    # The set-ups always run (the clock aside); the open-ended parts keep to the budget.
    names, notes, spent = run(1000)
    assert {"trainer:slime_kk", "trainer:prime_rl (refinement cut short)"} <= set(names)
    assert any("stopped by the work budget" in note for note in notes)
    full, notes, full_spent = run(None)
    assert {"trainer:slime_rr", "trainer:prime_rl", "trainer:verl_retry"} <= set(full)
    assert not notes and full_spent > spent
    late: list[str] = []
    notes, _, _ = run_trainer_starts(inst, None, 0.0, never, lambda n, s: late.append(n))
    assert late == ["trainer:megatron"] and "no time left on the clock" in notes[0]
    # The open-ended parts get what the set-ups leave: cut short, and said so; resumed, the
    # refinement ends on prime-rl's own schedule.
    cut, notes, _ = run(full_spent - 50)
    assert any("stopped by the work budget" in note for note in notes)
    got: list = []
    _, _, left = run_trainer_starts(inst, None, None, never, lambda n, s: got.append((n, s)),
                                    open_share=0)
    assert left.prime is not None and "prime_rl" in left.stopped
    finish_open_ended(inst, left, 10**18, None, never, lambda n, s: got.append((n, s)))
    assert left.prime is None and not left.notes()
    full = dict(trainer_starts(inst))
    assert got[-2][0] == "trainer:prime_rl" and got[-2][1] == full["trainer:prime_rl"]
    assert got[-1][0] == "trainer:verl_retry" and got[-1][1] == full["trainer:verl_retry"]
    # A schedule that cannot beat the incumbent is not built at all.
    names, _, _ = run(None, lambda m, onwards: True)
    assert "trainer:prime_rl" not in names and "trainer:verl_retry" not in names


def test_verl_retry_cut_by_the_budget_resumes_to_verls_schedule() -> None:
    """A retry the work budget cuts keeps its state (count, splits made) and, resumed a split at
    a time, ends on the trainer's own schedule, having split no rank twice at a count."""
    from seqpart.heuristics.trainer_baselines import TRAINER_SCHEDULERS
    from seqpart.solver.step.model import make_instance
    from seqpart.solver.step.starts.trainers import _kk_work, resume_verl_retry, start_verl

    lengths = np.random.default_rng(3).integers(1, 4000, 600).tolist()
    inst = make_instance(lengths, 8, 4096, cost=(3, 1))
    state = start_verl(inst.tokens.tolist(), inst.costs, 8, 4096, 1)[1]
    assert state is not None
    never = lambda m, onwards: False  # noqa: E731
    one_split = _kk_work(max(len(r) for r in state.ranks), len(lengths))  # >= any split here
    total, calls, how = 0, 0, "work budget"
    while how == "work budget":
        sched, work, how = resume_verl_retry(inst.tokens.tolist(), inst.costs, inst.cap, 1,
                                             state, one_split, never, None)
        assert work <= one_split
        total, calls = total + work, calls + 1
    assert how == "done" and sched is not None and calls > 1
    ref = TRAINER_SCHEDULERS["verl_retry"](lengths, 8, 4096, costs=inst.costs)

    def canon(s: list) -> list:
        return sorted(sorted(tuple(sorted(mb)) for mb in rank) for rank in s)

    assert canon(sched) == canon(ref)
    _, whole, _ = resume_verl_retry(inst.tokens.tolist(), inst.costs, inst.cap, 1,
                                    start_verl(inst.tokens.tolist(), inst.costs, 8, 4096, 1)[1],
                                    10**18, never, None)
    assert total == whole  # resuming redid no split


@FAST
@given(st.lists(st.integers(1, 40), min_size=4, max_size=60), st.integers(2, 6),
       st.integers(2, 4))
def test_count_bounds_without_the_rank_maxima_refinement_are_weaker_only(
    lengths: list[int], dp: int, pp: int
) -> None:
    # plan_step leaves the refinement out when it would take a large share of the limit: the
    # bounds it then orders counts by are the refinement's starting point, never above it.
    from seqpart.solver.step.bound import rank_maxima_seconds, scaled_bounds
    from seqpart.solver.step.model import make_instance

    try:
        inst = make_instance(lengths, dp, 60, cost=(3, 1), overhead=7, pp=pp)
    except InfeasibleError:  # too few sequences for dp ranks of at least pp micro-batches
        return
    plain, refined = scaled_bounds(inst, rank_maxima=False), scaled_bounds(inst)
    assert plain.keys() == refined.keys()
    assert all(plain[m] <= refined[m] for m in plain)
    assert 0 < rank_maxima_seconds(inst) < 0.1
    assert rank_maxima_seconds(make_instance(lengths, dp, 60, pp=1)) == 0.0


def test_the_step_plan_says_why_its_search_ended_and_which_bound_it_met() -> None:
    strict = SolverOptions(deterministic=True)  # the same on every machine
    # Tiny: CP-SAT solves every count and raises the bound to the plan's step time.
    tiny = [3417, 2584, 2093, 1152, 1300, 259, 393, 164]
    plan = plan_step(tiny, 2, 8192, time_limit=0.5, options=strict)
    assert (plan.stopped_by, plan.bound_source) == ("proof", "cpsat")
    assert plan.optimal and plan.lower_bound > step_lower_bound(tiny, 2, 8192)
    assert plan.to_dict()["stopped_by"] == "proof" and plan.to_dict()["bound_source"] == "cpsat"
    # Local search alone, with time to spare: every count built, every start searched.
    small = np.random.default_rng(5).integers(100, 4000, 16).tolist()
    done = plan_step(small, 2, 8192, time_limit=1.0, engine="heuristics", options=strict)
    assert (done.status, done.stopped_by, done.bound_source) == ("feasible", "complete",
                                                                 "step_bound")
    assert done.lower_bound == step_lower_bound(small, 2, 8192) and done.trainers_not_run == []
    # A budget far too small: the work ran out, prime-rl's refinement among what it cut.
    lengths = np.random.default_rng(5).integers(50, 6000, 512).tolist()
    kw = {"cost": (24576, 1), "overhead": 24576 * 512, "options": strict}
    short = plan_step(lengths, 8, 8192, time_limit=0.005, **kw)
    assert (short.status, short.stopped_by) == ("feasible", "work")
    assert short.trainers_not_run == ["prime_rl"] == short.to_dict()["trainers_not_run"]
    every = plan_step(lengths, 8, 8192, time_limit=0.005, trainer_starts=True, **kw)
    assert every.trainers_not_run == []  # run to their end whatever the budget
