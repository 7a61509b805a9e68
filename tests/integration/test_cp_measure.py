"""Context-parallel micro-batches on real 2-process gloo groups: all-gather-KV CP attention gives
the single process's loss and gradients, bad degrees and world sizes are refused, a failing rank
stops the run with its cause, and the replay of two written-out schedules returns a ratio."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")

from seqpart.solver.errors import MeasureError  # noqa: E402
from seqpart.solver.measure.cp import reference_schedules, replay_cp  # noqa: E402
from seqpart.solver.measure.cp.procs import check_backend, run_ranks  # noqa: E402
from seqpart.solver.measure.cp.tasks import equivalence_task  # noqa: E402

TINY = {"hidden": 16, "layers": 2, "heads": 2, "ffn": 32, "vocab": 64}
TINY_LLAMA = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 32, "vocab_size": 64}


def test_cp_attention_loss_and_gradients_equal_one_process() -> None:
    # [1]: one token, so rank 1 holds nothing; [3, 1, 2]: every sequence shorter than the 4 zigzag
    # chunks; [37, 64, 5]: uneven lengths, chunks of different sizes. The reference decoder, and
    # a transformers Llama (rotary positions: each rank's tokens keep their place in the sequence).
    batches = [[1], [3, 1, 2], [37, 64, 5]]
    configs = [TINY] + ([TINY_LLAMA] if importlib.util.find_spec("transformers") else [])
    per_model = run_ranks(equivalence_task, (batches, configs, 0), world=2, timeout=120)[0]
    assert len(per_model) == len(configs)
    for rows in per_model:
        assert [r["lengths"] for r in rows] == batches
        for r in rows:
            assert r["loss_abs_diff"] <= 1e-5, r
            assert r["grad_rel_diff"] <= 1e-5, r
            assert r["grad_max_abs_diff"] <= 1e-5, r


def _fails_on_rank_1(ctx: object) -> int:
    if ctx.rank == 1:
        raise RuntimeError("boom on purpose")
    import torch.distributed as dist

    dist.barrier()  # would wait for rank 1 until the collective timeout
    return 0


def test_a_failing_rank_stops_the_run_with_its_cause() -> None:
    with pytest.raises(MeasureError, match="rank 1.*boom on purpose"):
        run_ranks(_fails_on_rank_1, world=2, timeout=60, collective_timeout=60)


def test_bad_degree_world_and_backend_are_refused() -> None:
    lengths = [8, 6, 6, 2, 2]
    three = {"a": [[((0, 1, 2), (0, 1, 2, 3, 4))]], "b": reference_schedules()["seqpart"]}
    with pytest.raises(ValueError, match=r"degree 3, which is not in degrees \[1, 2\]"):
        replay_cp(lengths, three, n_gpus=2)
    misaligned = {"a": [[((1,), (0, 1, 2)), ((0,), (3, 4))]] + [[((1, 2), (0,))]],
                  "b": reference_schedules()["seqpart"]}
    with pytest.raises(ValueError, match="aligned block"):
        replay_cp(lengths, {"a": [[((1, 2), (0, 1, 2, 3, 4))]], "b": misaligned["b"]}, n_gpus=4)
    with pytest.raises(ValueError, match="not each of 0..1 once"):
        replay_cp(lengths, {"a": [[((0,), (0, 1, 2, 3, 4))]], "b": misaligned["b"]}, n_gpus=2)
    with pytest.raises(ValueError, match="exactly two"):
        replay_cp(lengths, {"a": reference_schedules()["seqpart"]}, n_gpus=2)
    with pytest.raises(ValueError, match="backend='nccl' needs device='cuda'"):
        check_backend("nccl", "cpu", 2)
    with pytest.raises(ValueError, match="world must be an int >= 1"):
        run_ranks(_fails_on_rank_1, world=0)


def test_replay_of_two_written_out_schedules_returns_a_ratio() -> None:
    lengths = [16, 12, 12, 4, 4]  # the written-out schedules' proportions, tiny
    coef = {"overhead": 1e-3, "linear": 1e-5, "quadratic": 1e-7, "cp_comm": 2e-6}
    out = replay_cp(lengths, reference_schedules(), n_gpus=2, coef={"wall": coef}, repeats=2, warmup=0,
                    config=TINY, timeout=120)
    wall, cpu = out["clocks"]["wall"], out["clocks"]["cpu"]
    for clock in (wall, cpu):
        assert clock["ratio"]["of"] == "seqpart/megatron_greedy"
        assert clock["repeats"] == 2
        assert clock["ratio"]["low"] <= clock["ratio"]["median"] <= clock["ratio"]["high"]
        assert set(clock["measured_s"]) == {"seqpart", "megatron_greedy"}
        assert all(t > 0 for t in clock["measured_s"].values())
    assert 0 < wall["predicted_ratio"] < 1  # the model's: CP2 of the longest beats running it alone
    assert isinstance(wall["ranking_matches"], bool)
    assert "predicted_ratio" not in cpu  # no coefficients given for that clock
