"""A calibrated cost profile given to the drop-ins, to patch() and to the worker hook: the same
plans as its cost and overhead given by hand, other plans than the defaults, clear errors."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _profiles import PROFILE, bad_profile_files

from seqpart.solver import load_cost_profile
from seqpart.solver.dropins import (
    build_dp_schedule,
    get_capped_seqlen_balanced_partitions,
    get_minimum_num_micro_batch_size,
    patch,
    rearrange_micro_batches,
    setup_worker,
)

LENGTHS = [int(x) for x in np.random.default_rng(0).integers(20, 1500, 48)]
CAP = 3000


@pytest.fixture()
def profile_path(tmp_path: Path) -> Path:
    path = tmp_path / "cost_profile.json"
    path.write_text(json.dumps(PROFILE.to_json()))
    return path


def _slime_args(**kw: Any) -> SimpleNamespace:
    base = dict(micro_batch_size=1, use_dynamic_batch_size=True, max_tokens_per_gpu=CAP,
                balance_data=False, balance_by_flops=False, pipeline_model_parallel_size=4)
    return SimpleNamespace(**{**base, **kw})


def _schedule(args: Any = None, **kw: Any) -> tuple:
    return build_dp_schedule(args or _slime_args(), {"dp_size": 2}, LENGTHS, global_batch_size=48,
                             rollout_indices=list(range(48)), **kw)


def test_the_written_profile_reads_back_as_the_one_in_memory(profile_path: Path) -> None:
    loaded = load_cost_profile(profile_path)
    assert (loaded.cost, loaded.overhead) == (PROFILE.cost, PROFILE.overhead)
    assert PROFILE.cost.quadratic > 1 and PROFILE.overhead > 10**6  # far from the defaults


def test_build_dp_schedule_plans_with_the_profile_cost_and_overhead(profile_path: Path) -> None:
    by_path = _schedule(cost_profile=str(profile_path))
    assert by_path == _schedule(cost_profile=PROFILE)
    assert by_path == _schedule(cost=PROFILE.cost, overhead=PROFILE.overhead)
    default = _schedule()
    # The overhead of ~5 ms per micro-batch makes fewer of them pay off than 512 tokens' worth.
    assert by_path[2][0] < default[2][0]
    # The FLOP flags choose slime's estimate; a profile replaces it too.
    flops = _slime_args(balance_by_flops=True, hidden_size=4096, num_layers=32,
                        num_attention_heads=32, ffn_hidden_size=11008)
    assert _schedule(flops, cost_profile=PROFILE) == by_path
    static = _slime_args(use_dynamic_batch_size=False, micro_batch_size=6, balance_data=True)
    assert _schedule(static, cost_profile=PROFILE) == _schedule(static, cost=PROFILE.cost)


def test_capped_balancer_balances_the_profile_cost(profile_path: Path) -> None:
    k = get_minimum_num_micro_batch_size(LENGTHS, CAP) + 2
    parts = get_capped_seqlen_balanced_partitions(LENGTHS, k, CAP, cost_profile=profile_path)
    assert parts == get_capped_seqlen_balanced_partitions(LENGTHS, k, CAP, cost=PROFILE.cost)
    assert parts != get_capped_seqlen_balanced_partitions(LENGTHS, k, CAP)
    loads = [int(PROFILE.cost.exact(np.asarray(LENGTHS)[p]).sum()) for p in parts]
    assert loads == sorted(loads, reverse=True)  # heaviest by the balanced cost first
    assert all(sum(LENGTHS[i] for i in p) <= CAP for p in parts)


def _verl_batch() -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    valid = torch.tensor([int(x) for x in np.random.default_rng(1).integers(5, 100, 24)])
    mask = (torch.arange(100)[None, :] < valid[:, None]).long()
    return {"input_ids": torch.zeros(len(valid), 100, dtype=torch.long), "attention_mask": mask}


def test_rearrange_micro_batches_balances_the_profile_cost(profile_path: Path) -> None:
    batch = _verl_batch()
    idx = rearrange_micro_batches(batch, 300, cost_profile=profile_path)[1]
    assert idx == rearrange_micro_batches(batch, 300, cost=PROFILE.cost)[1]
    assert idx != rearrange_micro_batches(batch, 300)[1]
    assert all(int(batch["attention_mask"][p].sum()) <= 300 for p in idx)


def test_a_cost_and_a_profile_together_name_both(profile_path: Path) -> None:
    for call in (lambda: _schedule(cost="tokens", cost_profile=profile_path),
                 lambda: _schedule(overhead=512, cost_profile=profile_path),
                 lambda: get_capped_seqlen_balanced_partitions(LENGTHS, 20, CAP, cost="attention",
                                                               cost_profile=PROFILE)):
        with pytest.raises(ValueError, match=r"cost= or cost_profile=|overhead= or cost_profile="):
            call()
    with pytest.raises(TypeError, match="cost_profile must be a CostProfile"):
        _schedule(cost_profile={"overhead_s": 1})


def test_a_bad_profile_raises_the_loaders_error(tmp_path: Path) -> None:
    for path, words in bad_profile_files(tmp_path):
        with pytest.raises(ValueError, match=words) as err:
            _schedule(cost_profile=path)
        assert str(path) in str(err.value)
        with pytest.raises(ValueError, match=words):
            get_capped_seqlen_balanced_partitions(LENGTHS, 20, CAP, cost_profile=path)


# --------------------------------------------------------------------------- patch


def _fake_trainer(monkeypatch: pytest.MonkeyPatch, trainer: str, module: str,
                  names: list[str]) -> dict[str, types.ModuleType]:
    """A stand-in trainer package in sys.modules whose functions raise if the original runs,
    and a module that imported them by name."""

    def original(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the original ran")

    parts = module.split(".")
    mods = {".".join(parts[:i]): types.ModuleType(".".join(parts[:i]))
            for i in range(1, len(parts) + 1)}
    mods[f"{trainer}.importer"] = types.ModuleType(f"{trainer}.importer")
    for name in names:
        setattr(mods[module], name, original)
        setattr(mods[f"{trainer}.importer"], name, original)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return mods


def test_patch_binds_the_profile_into_slime_and_verl(monkeypatch: pytest.MonkeyPatch,
                                                     profile_path: Path) -> None:
    mods = _fake_trainer(monkeypatch, "slime", "slime.utils.dp_schedule", ["build_dp_schedule"])
    done = patch("slime", cost_profile=profile_path)
    try:
        assert done.profiled == ["slime.utils.dp_schedule.build_dp_schedule"]
        assert "slime.importer.build_dp_schedule" in done.rebound[done.profiled[0]]
        held = mods["slime.importer"].build_dp_schedule
        out = held(_slime_args(), {"dp_size": 2}, LENGTHS, global_batch_size=48,
                   rollout_indices=list(range(48)))
        assert out == _schedule(cost=PROFILE.cost, overhead=PROFILE.overhead)
        assert held.__name__ == "build_dp_schedule"
        # The same profile again: nothing left to rebind. Another (none): rebound to it.
        assert patch("slime", cost_profile=PROFILE).rebound[done.profiled[0]] == []
        plain = patch("slime")
        assert mods["slime.importer"].build_dp_schedule is build_dp_schedule
        plain.undo()
        assert mods["slime.importer"].build_dp_schedule is held
        import seqpart.solver.dropins as dropins  # seqpart's own names are never rebound

        assert dropins.build_dp_schedule is build_dp_schedule
    finally:
        done.undo()

    mods = _fake_trainer(monkeypatch, "verl", "verl.utils.seqlen_balancing",
                         ["get_seqlen_balanced_partitions", "rearrange_micro_batches"])
    done = patch("verl", cost_profile=PROFILE)
    try:
        assert done.profiled == ["verl.utils.seqlen_balancing.rearrange_micro_batches"]
        batch = _verl_batch()
        assert mods["verl.importer"].rearrange_micro_batches(batch, 300)[1] == (
            rearrange_micro_batches(batch, 300, cost=PROFILE.cost)[1])
    finally:
        done.undo()


def test_patch_refuses_a_profile_nothing_would_use(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_trainer(monkeypatch, "openrlhf", "openrlhf.utils.seqlen_balancing",
                  ["get_seqlen_balanced_partitions", "get_minimum_num_micro_batch_size"])
    with pytest.raises(ValueError, match="leave cost_profile out"):
        patch("openrlhf", cost_profile=PROFILE)


def test_the_worker_hook_reads_the_profile_variable(monkeypatch: pytest.MonkeyPatch,
                                                    profile_path: Path) -> None:
    mods = _fake_trainer(monkeypatch, "slime", "slime.utils.dp_schedule", ["build_dp_schedule"])
    monkeypatch.setenv("SEQPART_PATCH", "slime")
    monkeypatch.setenv("SEQPART_COST_PROFILE", str(profile_path))
    [done] = setup_worker()
    try:
        assert done.cost_profile == PROFILE
        out = mods["slime.importer"].build_dp_schedule(
            _slime_args(), {"dp_size": 2}, LENGTHS, global_batch_size=48,
            rollout_indices=list(range(48)))
        assert out == _schedule(cost_profile=PROFILE)
    finally:
        done.undo()
    monkeypatch.setenv("SEQPART_COST_PROFILE", str(profile_path.with_name("missing.json")))
    with pytest.raises(ValueError, match="SEQPART_COST_PROFILE: cost profile .* does not exist"):
        setup_worker()
    monkeypatch.setenv("SEQPART_PATCH", "")
    with pytest.raises(ValueError, match="SEQPART_PATCH names no trainer"):
        setup_worker()
