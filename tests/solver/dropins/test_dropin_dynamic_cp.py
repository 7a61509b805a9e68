"""Megatron-LM's DefaultDynamicCPScheduler and verl's use of it: the contract, re-created.

What wrap_data_iterator and verl's DynamicCPScheduler.schedule rely on: sample_id_groups[step]
has one list per DPxCP rank, none empty; ranks with the same list form a contiguous group
aligned to its size, a size that has a process group; every sample runs exactly once; a rank
holds at most max_seqlen_per_dp_cp_rank tokens of its group's share."""

from __future__ import annotations

import random
import sys
import types

import pytest

from seqpart.solver import dropins
from seqpart.solver.dropins import DefaultDynamicCPScheduler
from seqpart.solver.dynamic_cp import default_degrees
from seqpart.solver.errors import TrainerInputError


def _check_contract(groups: list[list[list[int]]], lengths: dict[int, int], n: int, m: int) -> None:
    seen: list[int] = []
    for step in groups:
        assert len(step) == n
        assert all(step[r] for r in range(n)), "every rank is assigned"
        r = 0
        while r < n:
            members = [q for q in range(n) if step[q] == step[r]]
            size = len(members)
            assert members == list(range(r, r + size)), "a group is contiguous"
            assert r % size == 0, "a group is aligned to its size"
            assert size in default_degrees(n), "only sizes with process groups"
            assert sum(lengths[i] for i in step[r]) <= size * m
            seen += step[r]
            r += size
    assert sorted(seen) == sorted(lengths), "every sample exactly once"


@pytest.mark.parametrize("cp, dp", [(1, 2), (2, 2), (4, 2), (2, 3), (2, 6), (1, 8)])
def test_schedule_keeps_megatrons_contract(cp: int, dp: int) -> None:
    rng = random.Random(cp * 10 + dp)
    m = 2048
    n = cp * dp
    lengths = {100 + i: min(n * m, int(rng.lognormvariate(6.5, 1.2)) + 8) for i in range(3 * n)}
    sched = DefaultDynamicCPScheduler(m, cp, dp, None)
    groups = sched.get_groups_and_subsamples(list(lengths.items()))
    _check_contract(groups, lengths, n, m)
    assert sched.get_groups_and_subsamples(list(lengths.items())) == groups  # same on every rank


def test_bad_input_is_a_trainer_error() -> None:
    with pytest.raises(TrainerInputError, match="min_cp_size"):
        DefaultDynamicCPScheduler(1024, 2, 2, None, min_cp_size=3)
    sched = DefaultDynamicCPScheduler(1024, 2, 2, None)
    with pytest.raises(TrainerInputError, match="max_tokens_per_gpu"):
        sched.get_groups_and_subsamples([(0, 5000)])
    with pytest.raises(TrainerInputError, match="microbatch_group_size_per_vp_stage"):
        DefaultDynamicCPScheduler(1024, 2, 2, 2).get_groups_and_subsamples([(0, 100), (1, 100)])
    with pytest.raises(AssertionError):  # TrainerInputError is an AssertionError too, like theirs
        sched.get_groups_and_subsamples([])


def test_patch_megatron_rebinds_the_method(monkeypatch: pytest.MonkeyPatch) -> None:
    class Original:
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,  # type: ignore[no-untyped-def]
                     microbatch_group_size_per_vp_stage, pipeline_model_parallel_size=1, *,
                     min_cp_size=1):
            self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
            self.cp_size, self.dp_size = cp_size, dp_size
            self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
            self.min_cp_size = min_cp_size

        def get_groups_and_subsamples(self, sample_id_seqlens):  # type: ignore[no-untyped-def]
            raise AssertionError("the original ran")

    names = ["megatron", "megatron.core", "megatron.core.datasets",
             "megatron.core.datasets.data_schedule"]
    mods = {name: types.ModuleType(name) for name in names}
    mods["megatron.core.datasets.data_schedule"].DefaultDynamicCPScheduler = Original
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    done = dropins.patch("megatron")
    try:
        lengths = {i: 300 * (i + 1) for i in range(6)}
        groups = Original(1024, 2, 2, None).get_groups_and_subsamples(list(lengths.items()))
        _check_contract(groups, lengths, 4, 1024)
        assert dropins.patch("megatron").rebound == {
            "megatron.core.datasets.data_schedule.DefaultDynamicCPScheduler.get_groups_and_subsamples": []}
    finally:
        done.undo()
    with pytest.raises(AssertionError, match="the original ran"):
        Original(1024, 2, 2, None).get_groups_and_subsamples([(0, 1)])


def test_patch_verl_gives_its_scheduler_seqparts_class(monkeypatch: pytest.MonkeyPatch) -> None:
    def original_factory() -> type:
        raise RuntimeError("Dynamic CP requires a Megatron-Core build")

    names = ["verl", "verl.utils", "verl.utils.seqlen_balancing", "verl.utils.dynamic_cp_scheduler"]
    mods = {name: types.ModuleType(name) for name in names}
    mods["verl.utils.seqlen_balancing"].get_seqlen_balanced_partitions = lambda *a: None
    mods["verl.utils.seqlen_balancing"].rearrange_micro_batches = lambda *a, **k: None
    mods["verl.utils.dynamic_cp_scheduler"].get_megatron_dynamic_cp_scheduler_cls = original_factory
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    done = dropins.patch("verl")
    try:
        factory = mods["verl.utils.dynamic_cp_scheduler"].get_megatron_dynamic_cp_scheduler_cls
        # verl's schedule(): the factory's class, built with keywords, on enumerate(seq_lens)
        scheduler = factory()(max_seqlen_per_dp_cp_rank=4096, cp_size=2, dp_size=2,
                              microbatch_group_size_per_vp_stage=None)
        seq_lens = [4096, 3072, 3072, 1024, 1024, 700, 6000]
        groups = scheduler.get_groups_and_subsamples(list(enumerate(seq_lens)))
        _check_contract(groups, dict(enumerate(seq_lens)), 4, 4096)
    finally:
        done.undo()
    assert mods["verl.utils.dynamic_cp_scheduler"].get_megatron_dynamic_cp_scheduler_cls is original_factory
