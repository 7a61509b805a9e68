"""Bad input gets a clear exception naming the argument and the fix; good input of any kind works."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seqpart import heuristics
from seqpart.solver import Cost, InfeasibleError, partition


@pytest.mark.parametrize(
    ("lengths", "error", "needle"),
    [
        ([], ValueError, "empty"),
        ([3, 0, 2], ValueError, "lengths[1] is 0"),
        ([3, -4], ValueError, "lengths[1] is -4"),
        ([3, 2.5], TypeError, "lengths[1] is 2.5"),
        ([3, math.nan], ValueError, "NaN"),
        ([3, True], TypeError, "bool"),
        (np.array([1.0, 2.0]), TypeError, "float"),
        (np.array([[1, 2]]), ValueError, "1-D"),
        ("123", TypeError, "sequence"),
        (None, TypeError, "sequence"),
        ([1, "2"], TypeError, "lengths[1]"),
    ],
)
def test_bad_lengths_are_named(lengths: object, error: type, needle: str) -> None:
    with pytest.raises(error, match=None) as info:
        partition(lengths, 1)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": -1}, ValueError, "k must be >= 1"),
        ({"k": 2.0}, TypeError, "k must be an int"),
        ({"k": True}, TypeError, "k must be an int"),
        ({"k": 6}, ValueError, "k=6 micro-batches cannot all be non-empty with only 5"),
        ({"k": 2, "cap": 0}, ValueError, "cap must be >= 1"),
        ({"k": 2, "cap": 7}, ValueError, "sequence 0 has 8 tokens, over cap=7"),
        ({"k": 2, "time_limit": 0}, ValueError, "time_limit"),
        ({"k": 2, "time_limit": math.nan}, ValueError, "time_limit"),
        ({"k": 2, "engine": "magic"}, ValueError, "engine"),
        ({"k": 2, "cost": "flops"}, ValueError, "cost='flops'"),
        ({"k": 2, "oversize": "drop"}, ValueError, "oversize"),
        ({"k": 2, "equal_size": True}, ValueError, "divisible by k=2"),
        ({"k": 2, "groups": [[0, 9]]}, ValueError, "index 9"),
        ({"k": 2, "groups": [[0, 1], [1, 2]]}, ValueError, "two groups"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, error: type, needle: str) -> None:
    with pytest.raises(error) as info:
        partition([8, 7, 6, 5, 4], **kwargs)
    assert needle in str(info.value)


def test_nothing_is_half_done_on_bad_input() -> None:
    data = [5, 4, 3]
    with pytest.raises(ValueError):
        partition(data, 4)
    assert data == [5, 4, 3]


@pytest.mark.parametrize(
    "lengths",
    [
        [8, 7, 6, 5, 4],
        (8, 7, 6, 5, 4),
        np.array([8, 7, 6, 5, 4], dtype=np.int32),
        np.array([8, 7, 6, 5, 4], dtype=np.uint16),
        [np.int64(8), 7, 6, 5, 4],
    ],
)
def test_arrays_and_sequences_are_accepted(lengths: object) -> None:
    plan = partition(lengths, 2, 15)
    assert plan.tokens == [15, 15]


def test_torch_tensors_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    plan = partition(torch.tensor([8, 7, 6, 5, 4]), 2, 15)
    assert sorted(plan.tokens) == [15, 15]
    with pytest.raises(TypeError, match="float"):
        partition(torch.tensor([1.5, 2.0]), 1)


def test_oversize_alone_places_each_long_sequence_on_its_own() -> None:
    plan = partition([20, 3, 4, 30, 5], 4, 10, oversize="alone")
    assert plan.oversize == [0, 3]
    assert [0] in plan.bins and [3] in plan.bins
    assert len(plan.bins) == 4
    assert all(t <= 10 for b, t in zip(plan.bins, plan.tokens, strict=True) if b not in ([0], [3]))


def test_oversize_alone_needs_enough_micro_batches() -> None:
    with pytest.raises(InfeasibleError) as info:
        partition([20, 3, 4, 30], 2, 10, oversize="alone")
    assert info.value.proven
    assert "use k >= 3" in str(info.value)


def test_heuristics_validate_their_input_too() -> None:
    with pytest.raises(ValueError, match="lengths\\[0\\] is -1"):
        heuristics.lpt([-1, 2], 1)
    with pytest.raises(ValueError, match="k=3"):
        heuristics.karmarkar_karp([1, 2], 3)
    with pytest.raises(ValueError, match="unknown heuristic"):
        heuristics.get("best_fit_magic")


def test_cost_spec() -> None:
    assert Cost.parse("tokens") == Cost(1, 0)
    assert Cost.parse("attention") == Cost(24576, 1)
    assert Cost.parse((2, 3)) == Cost(2, 3)
    with pytest.raises(ValueError, match="linear"):
        Cost(-1, 0)
    with pytest.raises(ValueError, match="cost the same"):
        Cost(0, 0)


@pytest.mark.parametrize(
    ("groups", "error", "needle"),
    [
        ([0, 1], TypeError, "groups[0] is 0"),
        ({0: [1, 2]}, TypeError, "got dict"),
        (np.array([[0, 1], [2, 3]]), TypeError, "not a numpy array"),
        ([[0, 1, 0]], ValueError, "lists index 0 twice"),
        ("01", TypeError, "got str"),
        ([[0, 1.0]], TypeError, "groups[0] holds 1.0"),
    ],
)
def test_malformed_groups_are_named(groups: object, error: type, needle: str) -> None:
    with pytest.raises(error) as info:
        partition([8, 7, 6, 5, 4], 2, groups=groups)
    assert needle in str(info.value)


def test_malformed_options_are_named() -> None:
    from seqpart.solver import SolverOptions

    with pytest.raises(TypeError, match="SolverOptions\\(\\*\\*your_dict\\)"):
        partition([8, 7, 6, 5, 4], 2, options={"workers": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed must be an int"):
        SolverOptions(seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        SolverOptions(deterministic="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'num_workers'='x'.*wrong type"):
        SolverOptions(cp_sat_parameters={"num_workers": "x"})
    with pytest.raises(ValueError, match="timing"):
        SolverOptions(timing="fast")


def test_masked_arrays() -> None:
    with pytest.raises(ValueError, match="1 masked entries"):
        partition(np.ma.masked_array([8, 7, 6], mask=[0, 1, 0]), 2)
    plan = partition(np.ma.masked_array([8, 7, 6, 5, 4], mask=False), 2, 15)
    assert sorted(plan.tokens) == [15, 15]


def test_torch_meta_and_bfloat16_tensors_are_named() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="meta device"):
        partition(torch.tensor([8, 7, 6], device="meta"), 2)
    with pytest.raises(TypeError, match="bfloat16 tensor"):
        partition(torch.tensor([8, 7, 6], dtype=torch.bfloat16), 2)
