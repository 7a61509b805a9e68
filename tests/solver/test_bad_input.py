"""Bad input to the public functions: a valid answer, or a ValueError/TypeError that names the
argument and the fix, never a silently wrong answer, a wrapped number or a raw error from inside."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from seqpart.heuristics import improve, lpt
from seqpart.solver import (
    Cost,
    InfeasibleError,
    check_plan,
    check_schedule,
    find_violations,
    partition,
    plan_global_across_ranks,
    plan_step,
    step_time,
)

L = [9, 8, 7, 6, 5, 4]


def _brute_min_max(lengths: list[int], k: int, cost: Cost) -> int:
    costs = [cost.linear * x + cost.quadratic * x * x for x in lengths]
    best = None
    for labels in itertools.product(range(k), repeat=len(lengths)):
        if len(set(labels)) < k:
            continue
        loads = [sum(c for c, b in zip(costs, labels, strict=True) if b == j) for j in range(k)]
        best = max(loads) if best is None else min(best, max(loads))
    assert best is not None
    return best


@pytest.mark.parametrize("kind", [np.int64, np.uint64, int])
@pytest.mark.parametrize("lengths", [[349110, 70006, 1900015], [1175129, 1430564, 1128580, 1590802]])
def test_numpy_cost_coefficients_are_exact_and_the_optimum_is_true(kind: type, lengths: list[int]) -> None:
    cost = (kind(2**40), kind(2**30))
    plan = partition(lengths, 2, cost=cost)
    exact = Cost(2**40, 2**30)
    assert isinstance(plan.cost.linear, int) and isinstance(plan.cost.quadratic, int)
    assert plan.max_load == max(sum(exact.linear * lengths[i] + exact.quadratic * lengths[i] ** 2
                                    for i in b) for b in plan.bins)
    assert plan.status != "optimal" or plan.max_load == _brute_min_max(lengths, 2, exact)


def test_a_huge_numpy_coefficient_does_not_wrap_negative() -> None:
    plan = partition([349110, 70006, 1900015], 2, cost=(np.int64(2**62), 0))
    assert plan.max_load == 2**62 * 1900015 and min(plan.loads) > 0


def test_cost_rejects_non_integers_with_the_argument_named() -> None:
    with pytest.raises(TypeError, match="Cost.linear"):
        Cost(1.5, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Cost.quadratic"):
        Cost(1, np.float64(2.0))  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths, what", [({1: 8, 2: 7, 3: 6}, "dict"), ({8, 7, 6}, "set"),
                                           (frozenset({8, 7}), "frozenset")])
def test_mappings_and_sets_are_refused_not_guessed(lengths: object, what: str) -> None:
    with pytest.raises(TypeError, match=f"lengths is a {what}"):
        partition(lengths, 2)


@pytest.mark.parametrize("limit", [float("inf"), 10**400, 1e300, float("nan"), -1, 0])
def test_time_limits_that_are_no_limit_are_refused_clearly(limit: float) -> None:
    with pytest.raises(ValueError, match="time_limit"):
        partition(L, 2, time_limit=limit)
    with pytest.raises(ValueError, match="time_limit"):
        plan_step(L, 2, 15, time_limit=limit)


def test_a_step_cost_beyond_int64_is_planned_exactly() -> None:
    """Costs past int64 once crashed in the starts' ordering; the plan is exact, and the same as
    for the proportional cost (1, 1)."""
    plan = plan_step(L, 2, 15, cost=(2**64, 2**64))
    small = plan_step(L, 2, 15, cost=(1, 1))
    assert check_schedule(plan.ranks, L, 2, plan.m, 15) is None
    assert plan.step_time == small.step_time * 2**64


@pytest.mark.parametrize("options", [{"deterministic": True}, "x"])
def test_plan_step_options_must_be_solver_options(options: object) -> None:
    with pytest.raises(TypeError, match="options must be a SolverOptions"):
        plan_step(L, 2, 15, options=options)  # type: ignore[arg-type]


@pytest.mark.parametrize("starts", [[{}], [[{}]], [None], [[[0, 1], "x"]]])
def test_invalid_starts_are_skipped_as_documented(starts: list[object]) -> None:
    plan = plan_step(L, 2, 15, starts=starts)
    assert plan.m >= 1 and check_schedule(plan.ranks, L, 2, plan.m, 15) is None


@pytest.mark.parametrize("index", [1.5, "1", None, True])
def test_global_plan_owner_takes_int_indices_only(index: object) -> None:
    result = plan_global_across_ranks(L, 20)
    with pytest.raises(TypeError, match="index must be an int"):
        result.owner(index)  # type: ignore[arg-type]
    assert result.owner(np.int64(5)) == (0, 5)


@pytest.mark.parametrize("bins", [[[0, 1, 2], 3], [[0, 1, 2], None], [1, 2], "ab"])
def test_validators_name_a_malformed_plan(bins: object) -> None:
    for check in (lambda: check_plan(bins, L, 2, 100), lambda: find_violations(bins, L, 2, 100)):
        with pytest.raises(TypeError, match="bins"):
            check()


def test_validators_refuse_a_k_that_is_not_an_int() -> None:
    with pytest.raises(TypeError, match="k must be an int"):
        check_plan([[0, 1, 2], [3, 4, 5]], L, "2", 100)  # type: ignore[arg-type]


@pytest.mark.parametrize("schedule", [[[0, 1], [2]], [[[0, 1]], None], [[[0, 1], 2]], 5])
def test_step_functions_name_a_malformed_schedule(schedule: object) -> None:
    with pytest.raises(TypeError, match="schedule"):
        step_time(schedule, L)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="schedule"):
        check_schedule(schedule, L, 2, 1, 100)  # type: ignore[arg-type]


@pytest.mark.parametrize("bins, match", [([[0, 1, 2], [3, 4, 99]], "holds 99"),
                                         ([[0, 1, 2], [3, 4]], "sequence 5 is in no"),
                                         ([[0, 1, 2], [2, 3, 4, 5]], "sequence 2 is in 2")])
def test_improve_checks_its_starting_bins(bins: list[list[int]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        improve(L, bins, 15)


def test_heuristic_counts_are_checked_like_lengths() -> None:
    with pytest.raises(TypeError, match=r"counts\[0\] is 'a'"):
        lpt(L, 2, counts=["a"] * 6)


def test_oversize_alone_messages_speak_of_the_callers_k() -> None:
    # 9 is over cap 8 and sits alone; the other five need 5 more: 6 in all, and k=3 was given.
    with pytest.raises(InfeasibleError, match=r"at least 6 micro-batches.*but k=3: use k >= 6"):
        partition(L, 3, 8, oversize="alone")
    # Two over cap 7 alone, the rest need 4: k=2 leaves none for them.
    with pytest.raises(InfeasibleError, match="need at least 4: use k >= 6"):
        partition(L, 2, 7, oversize="alone")


def test_equal_sizes_with_groups_under_a_tiny_limit_never_claim_infeasible_wrongly() -> None:
    """With equal_size and groups together no construction is guaranteed to find a plan, so a
    2 ms call may raise; it must then say "not found", never "proven infeasible" when a plan
    exists (documented in partition's Raises)."""
    rng = random.Random(7)
    for _ in range(30):
        k = rng.randint(2, 4)
        lengths = [rng.randint(1, 50) for _ in range(k * rng.randint(2, 4))]
        groups = [[0, 1]] if len(lengths) >= 4 else []
        try:
            plan = partition(lengths, k, 200, equal_size=True, groups=groups, time_limit=0.002)
        except InfeasibleError as err:
            if err.proven:
                with pytest.raises(InfeasibleError):
                    partition(lengths, k, 200, equal_size=True, groups=groups, time_limit=2.0)
            continue
        assert len({len(b) for b in plan.bins}) == 1


def test_solver_options_take_numpy_scalars_as_python_values() -> None:
    from seqpart.solver import SolverOptions

    options = SolverOptions(workers=np.int64(2), seed=np.int32(3), deterministic=np.bool_(True))
    assert (options.workers, options.seed, options.deterministic) == (2, 3, True)
    assert type(options.workers) is int and type(options.deterministic) is bool
    with pytest.raises(TypeError, match="workers"):
        SolverOptions(workers=float("inf"))  # type: ignore[arg-type]


def test_a_large_gap_says_how_much_of_it_a_stronger_bound_found_in_the_bound() -> None:
    """Attention cost under a tight cap: the cost-only bound leaves a gap of over 10%; the note
    says the token-room bound removed most of it, and that the rest is undecided."""
    rng = np.random.default_rng(0)
    x = np.clip(np.exp(rng.normal(np.log(3000), 1.0, 500)), 200, 32000).astype(int).tolist()
    plan = partition(x, 36, 65536, cost="attention", time_limit=0.1, engine="heuristics")
    notes = [n for n in plan.notes if n.startswith("gap ")]
    assert plan.gap > 0.01 and len(notes) == 1
    assert "token-room bound is" in notes[0] and "may be in the plan or in the bound" in notes[0]
    small = partition([8, 7, 6, 5, 4], 2, 15)
    assert not any(n.startswith("gap ") for n in small.notes)  # proven: nothing to say
