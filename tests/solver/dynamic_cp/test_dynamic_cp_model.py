"""The dynamic-CP model: the validator names each violation, times are exact, the bound holds."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from _brute_cp import optimum

from seqpart.solver import Cost
from seqpart.solver.dynamic_cp import (
    check_cp_schedule,
    cp_lower_bound,
    cp_step_time,
    default_degrees,
    find_cp_violations,
    make_cp_instance,
    sample_id_groups,
    steps_from_groups,
)
from seqpart.solver.errors import InvalidPlanError


def test_default_degrees_are_megatrons() -> None:
    assert default_degrees(1) == (1,)
    assert default_degrees(2) == (1, 2)
    assert default_degrees(8) == (1, 2, 4, 8)
    assert default_degrees(6) == (1, 2, 6)
    assert default_degrees(12) == (1, 2, 4, 12)


@pytest.mark.parametrize("steps, phrase", [
    ([[((0,), (0, 1)), ((1,), (2,))]], "in no group"),
    ([[((0,), (0, 1)), ((1,), (2, 3))], [((0, 1), (3,))]], "more than once"),
    ([[((1, 2), (0, 1)), ((0,), (2,)), ((3,), (3,))]], "not an aligned block"),
    ([[((0,), (0, 1, 2)), ((1,), (3,))]], "run nothing"),  # ranks 2, 3 idle
    ([[((0,), (0, 1, 2, 3)), ((1,), ()), ((2, 3), ())]], "runs no sequence"),
    ([[((0, 1, 2, 3), (0, 1, 2, 3, 1))]], "more than once"),
    ([[((0, 1), (0, 1, 2, 3)), ((2, 3), (9,))]], "out of range"),
    ([[((0, 1, 2), (0, 1)), ((3,), (2, 3))]], "degree 3 is not allowed"),
])
def test_validator_names_each_violation(steps, phrase) -> None:
    inst = make_cp_instance([100, 100, 100, 100], 4, 1000)
    violations = find_cp_violations(inst, steps)
    assert any(phrase in v for v in violations), violations
    with pytest.raises(InvalidPlanError):
        check_cp_schedule([100, 100, 100, 100], steps, 4, 1000)


def test_validator_catches_tokens_and_degrees() -> None:
    inst = make_cp_instance([600, 600], 2, 1000)
    assert any("tokens over" in v for v in find_cp_violations(inst, [[((0,), (0, 1)), ((1,), (0,))]]))
    inst = make_cp_instance([100] * 6, 6, 1000)  # degree 4 has no group on 6 GPUs
    steps = [[((0, 1, 2, 3), (0, 1, 2, 3)), ((4,), (4,)), ((5,), (5,))]]
    assert any("degree 4 is not allowed" in v for v in find_cp_violations(inst, steps))
    assert find_cp_violations(make_cp_instance([100] * 6, 6, 1000), [[((0, 1), (0, 1)), ((2, 3), (2, 3)),
                                                                      ((4, 5), (4, 5))]]) == []


def test_time_is_exact_under_both_sync_models() -> None:
    lengths = [3, 5, 7]
    steps = [[((0, 1), (0, 1))], [((0,), (2,)), ((1,), ())]]
    with pytest.raises(InvalidPlanError):
        cp_step_time(lengths, steps)
    steps = [[((0, 1), (0,))], [((0,), (2,)), ((1,), (1,))]]
    # group (0,1) on [3]: (2*3 + 9)/2 + (1/3)*3*(1/2) + 1 = 7.5 + 0.5 + 1 = 9
    # step 2: 7 -> 14 + 49 + 1 = 64; 5 -> 10 + 25 + 1 = 36
    t = cp_step_time(lengths, steps, n_gpus=2, cost=Cost(2, 1), cp_comm=Fraction(1, 3), overhead=1)
    assert t == 9 + 64
    # dag: GPU 1 runs 9 + 36, GPU 0 runs 9 + 64; the same here (both start after the CP2 group)
    t = cp_step_time(lengths, [[((0,), (2,)), ((1,), (1,))], [((0, 1), (0,))]], n_gpus=2,
                     cost=Cost(2, 1), cp_comm=Fraction(1, 3), overhead=1, sync="dag")
    assert t == 64 + 9
    t = cp_step_time([1, 2, 3], [[((0,), (0, 2)), ((1,), (1,))]], n_gpus=2, cost=(1, 0),
                     cp_comm=Fraction(1, 7))
    assert t == 4 and isinstance(t, int)


def test_dag_is_never_slower_than_barrier() -> None:
    lengths = [9, 1, 1, 9]
    steps = [[((0,), (0,)), ((1,), (1,))], [((0,), (2,)), ((1,), (3,))]]
    barrier = cp_step_time(lengths, steps, n_gpus=2, cost=(1, 0))
    dag = cp_step_time(lengths, steps, n_gpus=2, cost=(1, 0), sync="dag")
    assert (barrier, dag) == (18, 10)


def test_megatron_format_round_trips() -> None:
    steps = [[((0, 1), (0, 3)), ((2,), (1,)), ((3,), (2,))]]
    groups = sample_id_groups(steps, 4)
    assert groups == [[[0, 3], [0, 3], [1], [2]]]
    assert steps_from_groups(groups) == steps


def test_issue_example_bound_is_tight() -> None:
    inst = make_cp_instance([4096, 3072, 3072, 1024, 1024], 2, 4096, cost=(0, 1))
    assert cp_lower_bound(inst) == 18 * 1024**2


CASES = [
    ([3, 1, 1], 2, 3, {}),
    ([4, 3, 3, 1], 2, 4, {"cost": (0, 1)}),
    ([5, 2, 2, 1], 2, 4, {"cost": (2, 1), "cp_comm": 1, "overhead": 3}),
    ([6, 1, 2], 4, 2, {"cost": (1, 1), "cp_comm": Fraction(1, 2), "overhead": 1}),
    ([2, 2, 3, 1], 4, 3, {"cost": (3, 1), "cp_comm": 2, "overhead": 5}),
]


@pytest.mark.parametrize("lengths, n, m, model", CASES)
def test_bound_is_below_the_brute_force_optimum(lengths, n, m, model) -> None:
    best = optimum(lengths, n, m, **model)
    bound = cp_lower_bound(make_cp_instance(lengths, n, m, **model))
    assert best["dag"] is not None and best["barrier"] is not None
    assert bound <= best["dag"] <= best["barrier"]


def test_bound_on_random_tiny_instances() -> None:
    rng = random.Random(7)
    for _ in range(12):
        n = rng.choice([1, 2, 3, 4])
        m = rng.randint(2, 6)
        lengths = [rng.randint(1, m * n) for _ in range(rng.randint(max(1, n - 1), 3))]
        model = {"cost": (rng.randint(0, 3), 1), "cp_comm": rng.randint(0, 2),
                 "overhead": rng.randint(0, 4)}
        best = optimum(lengths, n, m, **model)
        bound = cp_lower_bound(make_cp_instance(lengths, n, m, **model))
        if best["dag"] is not None:
            assert bound <= best["dag"], (lengths, n, m, model)


#: Batches where one sequence's degree binds: wide is quick but costs every GPU communication,
#: narrow is long. The bound with that choice, then the brute-force optimum.
ONE_LONG = [
    (([2, 1], 2, 2, {"cost": (1, 1), "cp_comm": 2, "overhead": 2}), 8, 8),
    (([4, 2, 1, 2], 4, 2, {"cost": (0, 1), "cp_comm": 1, "overhead": 1}), Fraction(45, 4), 13),
    (([3, 1, 1, 2], 4, 3, {"cost": (1, 1), "cp_comm": 2, "overhead": 1}), 10, 10),
    (([10, 5, 2, 4], 4, 5, {"cost": (1, 1), "cp_comm": 1, "overhead": 1}), 51, Fraction(109, 2)),
]


@pytest.mark.parametrize("case, bound, best", ONE_LONG)
def test_one_sequence_at_each_degree_raises_the_bound_below_the_optimum(case, bound, best) -> None:
    lengths, n, m, model = case
    assert cp_lower_bound(make_cp_instance(lengths, n, m, **model)) == bound
    assert optimum(lengths, n, m, **model)["dag"] == best


#: Batches where, under "barrier", a long sequence's step cannot take the short ones' work:
#: (case, the bound under "dag", the bound under "barrier", the brute-force barrier optimum).
LONG_STEP = [
    (([7, 4, 4, 4], 4, 4, {"cost": (3, 1), "cp_comm": 2, "overhead": 0}), 42, 49, 55),
    (([3, 2, 2, 2], 4, 2, {"cost": (3, 1), "cp_comm": 2, "overhead": 3}),
     Fraction(39, 2), Fraction(41, 2), Fraction(47, 2)),
    (([3, 1, 2, 2], 4, 2, {"cost": (0, 1), "cp_comm": 1, "overhead": 3}), 9, Fraction(37, 4), 10),
]


@pytest.mark.parametrize("case, dag, barrier, best", LONG_STEP)
def test_the_barrier_bound_adds_the_long_step_below_the_optimum(case, dag, barrier, best) -> None:
    lengths, n, m, model = case
    assert cp_lower_bound(make_cp_instance(lengths, n, m, sync="dag", **model)) == dag
    assert cp_lower_bound(make_cp_instance(lengths, n, m, sync="barrier", **model)) == barrier
    assert optimum(lengths, n, m, **model)["barrier"] == best
