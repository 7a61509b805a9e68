"""Real multi-process tests of seqpart.solver.distributed.planners: 3 ranks on CPU in a gloo group.

The ranks run every scenario once (see tests/integration/_dist_workers.py) inside a module-scoped fixture;
each test checks one scenario's outcome on all ranks. Every spawn is joined with a timeout and
killed on expiry, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import _dist_workers as workers  # noqa: E402  (after the skip: it needs nothing, but reads clearer)

from seqpart.heuristics import first_fit  # noqa: E402
from seqpart.solver import find_violations  # noqa: E402

WORLD = 3
SPAWN_TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parents[2]


def _context() -> Any:
    """Fresh processes, as a trainer starts its ranks, but forked from one server that imported
    torch and the workers once (spawning re-imports torch in every rank: about 1 s each)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", workers.__name__])
    return ctx


def _spawn(world: int, init_file: Path, out_dir: Path, timeout: float,
           target: Any = workers.run_worker) -> None:
    ctx = _context()
    procs = [
        ctx.Process(target=target, args=(r, world, str(init_file), str(out_dir)))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    if hung:
        pytest.fail(f"ranks {hung} still running after {timeout:.0f}s: a collective hung")
    failed = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode != 0}
    if failed:
        pytest.fail(f"ranks exited with non-zero codes {failed}")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("gloo")
    _spawn(WORLD, tmp / "init", tmp, SPAWN_TIMEOUT)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _outcomes(results: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r[name] for r in results]


def _assert_valid_local_plans(outs: list[dict[str, Any]], lengths: list[list[int]]) -> None:
    for rank, out in enumerate(outs):
        assert out["ok"], f"rank {rank}: {out}"
        found = find_violations(out["bins"], lengths[rank], out["k"], workers.CAP)
        assert found.ok, (rank, found.messages)
        assert all(t <= workers.CAP for t in out["tokens"])
        assert all(len(b) > 0 for b in out["bins"])


def _assert_same_error(outs: list[dict[str, Any]], code: str, rank: int | None) -> str:
    for out in outs:
        assert not out["ok"], out
        assert out["type"] == "DistributedPlanError"
        assert out["code"] == code
        assert out["rank"] == rank
    messages = {out["message"] for out in outs}
    assert len(messages) == 1, messages
    return messages.pop()


def test_seed_scenario_every_rank_runs_the_same_count_none_empty(
    results: list[dict[str, Any]],
) -> None:
    # What the wrapper prevents: rank 0 alone needs 1 micro-batch, and capped first fit into
    # the agreed 3 leaves trailing micro-batches empty (torch.cat([]) in the trainer).
    assert any(len(b) == 0 for b in first_fit(workers.SEED_LENGTHS[0], 3, workers.CAP))
    outs = _outcomes(results, "seed")
    _assert_valid_local_plans(outs, workers.SEED_LENGTHS)
    assert [o["k"] for o in outs] == [3, 3, 3]
    assert "this rank alone needed 1" in outs[0]["notes"][-1]


def test_multiple_of_rounds_the_agreed_count_up(results: list[dict[str, Any]]) -> None:
    outs = _outcomes(results, "multiple_of")
    _assert_valid_local_plans(outs, workers.SEED_LENGTHS)
    assert [o["k"] for o in outs] == [4, 4, 4]  # max needed 3, next multiple of 2


def test_rank_with_fewer_samples_than_the_count_fails_on_every_rank(
    results: list[dict[str, Any]],
) -> None:
    message = _assert_same_error(_outcomes(results, "too_few"), "too_few_samples", rank=0)
    assert "rank 0 has 2 sequences" in message
    assert "k=3" in message
    assert "rank 1 needs 3" in message


def test_sequence_over_the_cap_fails_on_every_rank(results: list[dict[str, Any]]) -> None:
    message = _assert_same_error(_outcomes(results, "over_cap"), "over_cap", rank=2)
    assert "150 tokens, over cap=100" in message
    assert "oversize='alone'" in message


def test_mismatched_caps_fail_on_every_rank(results: list[dict[str, Any]]) -> None:
    message = _assert_same_error(_outcomes(results, "mismatched_cap"), "mismatched_args", None)
    assert "disagree on cap" in message and "200" in message


def test_mismatched_multiple_of_fails_on_every_rank(results: list[dict[str, Any]]) -> None:
    outs = _outcomes(results, "mismatched_multiple_of")
    message = _assert_same_error(outs, "mismatched_args", None)
    assert "disagree on multiple_of" in message


def test_global_plan_is_identical_on_every_rank_and_valid(results: list[dict[str, Any]]) -> None:
    outs = _outcomes(results, "global_plan")
    assert all(o["ok"] for o in outs), outs
    assert [o["rank"] for o in outs] == list(range(WORLD))
    assert all(o["plans"] == outs[0]["plans"] for o in outs)  # broadcast: bit-identical
    lengths = [x for rank_lengths in workers.GLOBAL_LENGTHS for x in rank_lengths]
    assert outs[0]["lengths"] == lengths
    assert outs[0]["offsets"] == [0, 7, 13]
    assert outs[0]["owner_of_last"] == [2, 7]
    plans = outs[0]["plans"]
    m = plans[0]["k"]
    assert all(p["k"] == m and len(p["bins"]) == m for p in plans)
    union = [b for p in plans for b in p["bins"]]
    found = find_violations(union, lengths, WORLD * m, workers.CAP)
    assert found.ok, found.messages


@pytest.mark.parametrize(("scenario", "rank", "words"), [
    ("global_bad_input", 1, ["local_lengths[1] is -1"]),
    ("cap_over_int64", 1, ["does not fit in int64"]),
    ("multiple_of_over_int64", 2, ["multiple_of=", "int64"]),
    ("bad_timeout", 1, ["timeout must be a positive number"]),
], ids=["global_plan_bad_lengths", "cap_over_int64", "multiple_of_over_int64", "bad_timeout"])
def test_bad_input_on_one_rank_fails_on_every_rank(
    results: list[dict[str, Any]], scenario: str, rank: int, words: list[str]
) -> None:
    message = _assert_same_error(_outcomes(results, scenario), "bad_input", rank=rank)
    for word in words:
        assert word in message


def test_ranks_calling_different_collectives_get_one_clear_error(
    results: list[dict[str, Any]],
) -> None:
    message = _assert_same_error(_outcomes(results, "mismatched_call"), "mismatched_call", None)
    assert "ranks [0] called plan_global_across_ranks" in message
    assert "ranks [1, 2] called partition_across_ranks" in message
    message = _assert_same_error(_outcomes(results, "mismatched_step_call"), "mismatched_call",
                                 None)
    assert "ranks [2] called plan_step_across_ranks" in message


def test_step_plan_is_identical_on_every_rank(results: list[dict[str, Any]]) -> None:
    outs = _outcomes(results, "step_plan")
    assert all(o["ok"] for o in outs), outs
    assert [o["rank"] for o in outs] == list(range(WORLD))
    assert len({o["schedule"] for o in outs}) == 1
    assert outs[0]["offsets"] == [0, 7, 13]


def test_verl_rearrange_agrees_on_one_count_under_the_cap(results: list[dict[str, Any]]) -> None:
    outs = _outcomes(results, "verl_rearrange")
    assert all(o["ok"] for o in outs), outs
    counts = {len(o["idx"]) for o in outs}
    assert len(counts) == 1  # same number of micro-batches on every rank
    for o in outs:
        assert sorted(i for p in o["idx"] for i in p) == list(range(len(o["valid"])))
        assert all(p for p in o["idx"]) and max(o["tokens"]) <= 150
        assert o["tokens"] == [sum(o["valid"][i] for i in p) for p in o["idx"]]


def test_verl_rearrange_bad_rank_fails_on_every_rank(results: list[dict[str, Any]]) -> None:
    message = _assert_same_error(_outcomes(results, "verl_rearrange_bad_rank"), "bad_input", rank=1)
    assert "over max_token_len=80" in message


def test_verl_rearrange_bad_cost_profile_on_one_rank_fails_on_every_rank(
    results: list[dict[str, Any]],
) -> None:
    message = _assert_same_error(_outcomes(results, "verl_bad_profile"), "bad_input", rank=2)
    assert "/nonexistent/cost_profile.json" in message and "does not exist" in message


def test_verl_rearrange_ranks_with_different_caps_fail_alike(results: list[dict[str, Any]]) -> None:
    message = _assert_same_error(_outcomes(results, "verl_mismatched_cap"), "mismatched_args", None)
    assert "cap" in message


def test_verl_rearrange_bad_timeout_on_one_rank_fails_on_every_rank(
    results: list[dict[str, Any]],
) -> None:
    message = _assert_same_error(_outcomes(results, "verl_bad_timeout"), "bad_input", rank=0)
    assert "timeout=inf is too long" in message


def test_verl_rearrange_and_partition_across_ranks_mixed_fail_alike(
    results: list[dict[str, Any]],
) -> None:
    message = _assert_same_error(_outcomes(results, "verl_vs_partition"), "mismatched_call", None)
    assert "rearrange_micro_batches" in message and "partition_across_ranks" in message


def test_a_bad_group_on_one_rank_fails_on_every_rank(results: list[dict[str, Any]]) -> None:
    message = _assert_same_error(_outcomes(results, "bad_group"), "bad_input", rank=2)
    assert "group must be a torch.distributed ProcessGroup" in message


@pytest.mark.parametrize("scenario", ["mismatched_step_kwargs", "mismatched_partition_kwargs"])
def test_keyword_arguments_that_differ_between_ranks_fail_alike(
    results: list[dict[str, Any]], scenario: str
) -> None:
    message = _assert_same_error(_outcomes(results, scenario), "mismatched_args", None)
    assert "ranks passed different" in message


@pytest.mark.parametrize("world", [2, 4])
def test_per_rank_groups_are_kept_on_every_rank(tmp_path: Path, world: int) -> None:
    """Each rank's groups index its own sequences: they may differ, and each rank's plan (and
    the global plan, in global indices) keeps every group in one micro-batch."""
    _spawn(world, tmp_path / "init", tmp_path, SPAWN_TIMEOUT, workers.run_groups_worker)
    outs = [json.loads((tmp_path / f"groups{r}.json").read_text()) for r in range(world)]
    local = [o["local"] for o in outs]
    _assert_valid_local_plans(local, workers.GROUPED_LENGTHS)
    assert len({o["k"] for o in local}) == 1
    for rank, out in enumerate(local):
        bin_of = {i: b for b, members in enumerate(out["bins"]) for i in members}
        for group in workers.GROUPED_GROUPS[rank]:
            assert len({bin_of[i] for i in group}) == 1, (rank, group, out["bins"])
    global_bins = outs[0]["global"]["bins"]
    assert all(o["global"]["bins"] == global_bins for o in outs)
    offsets = [sum(len(x) for x in workers.GROUPED_LENGTHS[:r]) for r in range(world)]
    bin_of = {i: (r, b) for r, bins in enumerate(global_bins) for b, members in enumerate(bins)
              for i in members}
    for rank in range(world):
        for group in workers.GROUPED_GROUPS[rank]:
            assert len({bin_of[offsets[rank] + i] for i in group}) == 1
    message = _assert_same_error([o["bad_group"] for o in outs], "bad_input", rank=world - 1)
    assert "groups[0] holds index 99" in message
    message = _assert_same_error([o["other_cost"] for o in outs], "mismatched_args", None)
    assert "each rank plans its own sequences" in message and "groups" in message


@pytest.mark.parametrize("worker", ["run_absent_rank_worker", "run_absent_rank_verl_worker"])
def test_a_rank_that_never_calls_times_out_the_others(tmp_path: Path, worker: str) -> None:
    _spawn(WORLD, tmp_path / "init", tmp_path, SPAWN_TIMEOUT, getattr(workers, worker))
    outs = [json.loads((tmp_path / f"absent{r}.json").read_text()) for r in range(WORLD)]
    assert outs[-1] == {"absent": True}
    for out in outs[:-1]:
        assert not out["ok"] and out["code"] == "timeout", out
        assert "did not call it" in out["message"]
        assert out["seconds"] < 30  # the call's 1 s, not the group's 60 s


def test_ranks_stay_in_lockstep_after_every_error(results: list[dict[str, Any]]) -> None:
    assert [r["lockstep"] for r in results] == [WORLD] * WORLD


def test_example_training_loop_runs() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "dp_training_loop.py")],
        capture_output=True,
        text=True,
        timeout=SPAWN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rank 0:" in proc.stdout and "rank 1:" in proc.stdout
