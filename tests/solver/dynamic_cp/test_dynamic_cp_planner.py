"""plan_cp_step: valid, never behind its starts, repeatable, clear about bad input."""

from __future__ import annotations

import random

import pytest
from _brute_cp import optimum

from seqpart.solver import Cost, SolverOptions, cp_step_time, plan_cp_step
from seqpart.solver.dynamic_cp import (
    GreedyError,
    check_cp_schedule,
    dp_balanced_schedule,
    find_cp_violations,
    make_cp_instance,
    megatron_dynamic_cp_schedule,
    schedule_time,
)

BENCH = {"cost": (24576, 1), "overhead": 512 * 24576, "cp_comm": 6144}
DET = SolverOptions(deterministic=True)


def _batch(seed: int, k: int, top: int) -> list[int]:
    rng = random.Random(seed)
    return [min(top, int(rng.lognormvariate(7.0, 1.0)) + 16) for _ in range(k)]


def test_example_1_greedy_25_planner_18() -> None:
    lengths = [4096, 3072, 3072, 1024, 1024]
    unit = 1024**2
    greedy = megatron_dynamic_cp_schedule(lengths, 2, 4096)
    assert cp_step_time(lengths, greedy, n_gpus=2, max_tokens_per_gpu=4096, cost=(0, 1)) == 25 * unit
    plan = plan_cp_step(lengths, 2, 4096, cost=(0, 1), time_limit=0.2, options=DET)
    assert plan.step_time == 18 * unit == plan.lower_bound
    assert plan.status == "optimal"
    assert optimum(lengths, 2, 4096, cost=(0, 1))["barrier"] == 18 * unit


def test_example_2_balances_tokens_once_linear_work_counts() -> None:
    lengths = [2048, 1024, 1024, 1024, 1024]
    greedy = megatron_dynamic_cp_schedule(lengths, 2, 4096)
    assert sorted(sum(lengths[i] for i in ids) for _, ids in greedy[0]) == [2048, 4096]
    plan = plan_cp_step(lengths, 2, 4096, cost="attention", time_limit=0.2, options=DET)
    g = cp_step_time(lengths, greedy, n_gpus=2, max_tokens_per_gpu=4096, cost="attention")
    assert g / plan.step_time > 1.25
    best = optimum(lengths, 2, 4096, cost="attention")["barrier"]
    assert plan.step_time == best


@pytest.mark.parametrize("sync", ["barrier", "dag"])
def test_never_behind_the_greedy_or_fixed_cp(sync: str) -> None:
    for seed in range(3):
        lengths = _batch(seed, 48, 8 * 2048)
        plan = plan_cp_step(lengths, 8, 2048, sync=sync, time_limit=0.3, options=DET, **BENCH)
        check_cp_schedule(lengths, plan.steps, 8, 2048)
        inst = make_cp_instance(lengths, 8, 2048, sync=sync, **BENCH)
        greedy = schedule_time(inst, megatron_dynamic_cp_schedule(lengths, 8, 2048))
        assert plan.step_time <= greedy
        assert all(plan.step_time <= t for t in plan.baselines.values())
        assert "megatron-greedy" in plan.baselines
        if max(lengths) <= 8 * 2048:
            bal = schedule_time(inst, dp_balanced_schedule(lengths, 8, 2048, 8))
            assert plan.step_time <= bal
        assert plan.lower_bound <= plan.step_time
        assert plan.sample_id_groups[0][0] == list(plan.steps[0][0][1])


def test_deterministic_mode_repeats() -> None:
    lengths = _batch(5, 96, 4 * 4096)
    runs = [plan_cp_step(lengths, 4, 4096, time_limit=0.2, options=DET, **BENCH).steps
            for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("n", [6, 10, 12, 14])
def test_non_power_of_two_domains_use_only_real_groups(n: int) -> None:
    lengths = _batch(n, 3 * n, 2048 * n)
    plan = plan_cp_step(lengths, n, 2048, time_limit=0.2, options=DET, **BENCH)
    inst = make_cp_instance(lengths, n, 2048)
    assert not find_cp_violations(inst, plan.steps)
    assert set(plan.degrees_used) <= set(inst.degrees)
    try:
        steps = megatron_dynamic_cp_schedule(lengths, n, 2048)
    except GreedyError:
        return
    assert plan.step_time <= schedule_time(make_cp_instance(lengths, n, 2048, **BENCH), steps)


def test_fewer_sequences_than_gpus_widen_groups() -> None:
    plan = plan_cp_step([1000, 200], 8, 1024, time_limit=0.1, options=DET)
    assert sorted(len(r) for step in plan.steps for r, _ in step) in ([4, 4], [8, 8], [8])
    with pytest.raises(ValueError, match="cannot keep 8 GPUs busy"):
        plan_cp_step([1000, 200], 8, 1024, degrees=[1, 2], time_limit=0.1)


def test_matches_the_brute_force_on_tiny_instances() -> None:
    rng = random.Random(3)
    for _ in range(6):
        lengths = [rng.randint(1, 8) for _ in range(4)]
        model = {"cost": (rng.randint(0, 2), 1), "cp_comm": rng.randint(0, 2), "overhead": 2}
        plan = plan_cp_step(lengths, 2, 4, time_limit=0.2, options=DET, **model)
        best = optimum(lengths, 2, 4, **model)["barrier"]
        assert best is not None and best <= plan.step_time
        assert plan.lower_bound <= best


@pytest.mark.parametrize("kwargs, match", [
    ({"lengths": [5000], "n_gpus": 2, "max_tokens_per_gpu": 2048}, "max_tokens_per_gpu to at least 2500"),
    ({"lengths": [100, 100], "n_gpus": 0, "max_tokens_per_gpu": 2048}, "n_gpus"),
    ({"lengths": [100, 100], "n_gpus": 4, "max_tokens_per_gpu": 2048, "degrees": [3]}, "cannot tile"),
    ({"lengths": [100, 100], "n_gpus": 4, "max_tokens_per_gpu": 2048, "degrees": [8]}, "exceed n_gpus"),
    ({"lengths": [100, 100], "n_gpus": 2, "max_tokens_per_gpu": 2048, "sync": "async"}, "sync="),
    ({"lengths": [100, 100], "n_gpus": 2, "max_tokens_per_gpu": 2048, "cp_comm": -1}, "cp_comm"),
    ({"lengths": [100, 100], "n_gpus": 2, "max_tokens_per_gpu": 2048, "overhead": 0.5}, "overhead"),
    ({"lengths": [100, 100], "n_gpus": 2, "max_tokens_per_gpu": 2048, "cost": "flops"}, "cost="),
    ({"lengths": [], "n_gpus": 2, "max_tokens_per_gpu": 2048}, "lengths"),
    ({"lengths": [100], "n_gpus": 2, "max_tokens_per_gpu": 0}, "max_tokens_per_gpu"),
    ({"lengths": [100], "n_gpus": 2, "max_tokens_per_gpu": 100, "time_limit": 0}, "time_limit"),
])
def test_bad_input_names_the_argument(kwargs, match) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        plan_cp_step(**kwargs)


def test_a_cost_profile_like_object_gives_cost_and_overhead() -> None:
    class Profile:
        cost = Cost(2, 1)
        overhead = 7

    a = plan_cp_step([300, 200, 100], 2, 512, cost=Profile(), time_limit=0.1, options=DET)
    b = plan_cp_step([300, 200, 100], 2, 512, cost=Cost(2, 1), overhead=7, time_limit=0.1, options=DET)
    assert a.step_time == b.step_time
