"""Bad input to the trainer drop-ins: a TrainerInputError (ValueError and AssertionError) or a
clear TypeError naming the argument, never a dropped sample or a raw error from inside."""

from __future__ import annotations

import types

import numpy as np
import pytest

from seqpart.solver import TrainerInputError
from seqpart.solver.dropins import (
    build_dp_schedule,
    get_capped_seqlen_balanced_partitions,
    get_seqlen_balanced_partitions,
    rearrange_micro_batches,
)

torch = pytest.importorskip("torch")


def _covers(parts: list[list[int]], n: int) -> bool:
    return sorted(i for p in parts for i in p) == list(range(n))


@pytest.mark.parametrize("values", [np.ma.array([3, 4, 5], mask=[0, 1, 0]),
                                    np.ma.array([1.5, 2.0, 3.0], mask=[0, 1, 0])])
def test_masked_entries_are_refused_never_dropped(values: np.ma.MaskedArray) -> None:
    with pytest.raises(TrainerInputError, match="masked"):
        get_seqlen_balanced_partitions(values, 2, False)
    parts = get_seqlen_balanced_partitions(np.ma.array([3, 4, 5], mask=[0, 0, 0]), 2, False)
    assert _covers(parts, 3)


@pytest.mark.parametrize("values", [{5: "a", 3: "b"}, {5, 3}])
def test_mappings_and_sets_are_refused(values: object) -> None:
    with pytest.raises(TypeError, match="seqlen_list is a"):
        get_seqlen_balanced_partitions(values, 2, False)


def test_weights_summing_past_float64_are_refused() -> None:
    with pytest.raises(TrainerInputError, match="beyond float64"):
        get_seqlen_balanced_partitions([1e308, 1e308, 1.0], 2, False)


@pytest.mark.parametrize("values", [np.array([1.5, 2, 3], dtype=np.float16),
                                    torch.tensor([1.5, 2, 3], dtype=torch.bfloat16),
                                    torch.tensor([1.5, 2, 3], dtype=torch.float16)])
def test_half_precision_weights_are_balanced(values: object) -> None:
    parts = get_seqlen_balanced_partitions(values, 2, False)
    assert _covers(parts, 3) and sorted(map(len, parts)) == [1, 2]
    assert [2] in parts  # 3.0 alone against 1.5 + 2.0


def test_a_meta_tensor_is_refused() -> None:
    with pytest.raises(TrainerInputError, match="meta device"):
        get_seqlen_balanced_partitions(torch.empty(3, device="meta"), 2, False)


def test_capped_equal_size_over_cap_names_what_this_function_takes() -> None:
    with pytest.raises(TrainerInputError, match="equal_size=False") as err:
        get_capped_seqlen_balanced_partitions([9, 8, 7, 6, 5, 4], 3, 8, equal_size=True)
    assert "oversize" not in str(err.value)


ARGS = types.SimpleNamespace(use_dynamic_batch_size=True, max_tokens_per_gpu=100)


@pytest.mark.parametrize("config, match", [({"cp_size": 1}, "no dp_size"),
                                           (None, "must be a dict"), ([1], "must be a dict")])
def test_slime_schedule_names_a_bad_parallel_config(config: object, match: str) -> None:
    with pytest.raises(TrainerInputError, match=match):
        build_dp_schedule(ARGS, config, [5, 6, 7], global_batch_size=1,  # type: ignore[arg-type]
                          rollout_indices=[0, 0, 0])


def test_slime_schedule_names_an_unhashable_rollout_id() -> None:
    with pytest.raises(TrainerInputError, match=r"rollout_indices\[0\]"):
        build_dp_schedule(ARGS, {"dp_size": 1}, [5, 6, 7], global_batch_size=1,
                          rollout_indices=[[0], [0], [1]])


@pytest.mark.parametrize("batch, match", [
    (None, "must be a TensorDict"),
    ({"x": 1}, "no input_ids"),
    ({"input_ids": torch.zeros(3, 5)}, "no attention_mask"),
    ({"input_ids": torch.zeros(3, 5), "attention_mask": torch.ones(5)}, "must be 2-D"),
])
def test_verl_rearrange_names_a_bad_batch(batch: object, match: str) -> None:
    with pytest.raises(TrainerInputError, match=match):
        rearrange_micro_batches(batch, 100)
