"""``seqpart cp-study``: the dynamic-CP study through the real CLI (a tiny grid), its resume, its
records (valid, repeatable, plan_cp_step never slower than a baseline) and its usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import read_results, run_cli

from seqpart.solver.dynamic_cp import SYNCS, GreedyError
from seqpart.solver.study.cp import CP_METHODS, DEFAULT_CP_MODEL
from seqpart.solver.study.cp import methods as cp_methods
from seqpart.solver.study.cp.report import best_bounds, summarize
from seqpart.solver.study.cp.study import (
    CPStudyConfig,
    build_settings,
    cost_terms,
    cp_tasks,
    run_cp_task,
)

#: Generated long-tail RL batches of 24 sequences on 4 GPUs of 2K tokens (clipped at 8K).
TINY = ("cp-study", "--datasets", "none", "--n", "24", "--n-gpus", "4", "--max-tokens-per-gpu",
        "2K", "--time-limit", "0.05", "--jobs", "1", "--quiet")
#: Each baseline once per setting, plan_cp_step once per sync model.
RUNS = len(CP_METHODS) - 1 + len(SYNCS)


def test_tiny_study_valid_never_slower_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "cp"
    part = run_cli(*TINY, "--limit", "2", "--no-plots", "--out", str(out))
    assert part.returncode == 0, part.stderr
    assert len(read_results(out)) == 2 and "still to run" in part.stdout

    proc = run_cli(*TINY, "--out", str(out))  # resumes: only the missing runs
    assert proc.returncode == 0, proc.stderr
    records = read_results(out)
    assert len(records) == RUNS == len({r["key"] for r in records})  # nothing ran twice
    for sync in SYNCS:
        assert f"sync={sync}" in proc.stdout
    assert all(m in proc.stdout for m in CP_METHODS) and "still to run" not in proc.stdout
    assert all(r["valid"] and r["error"] is None and r["clipped"] > 0 for r in records)
    for sync in SYNCS:
        plan = next(r for r in records if r["method"] == "plan_cp_step" and r["sync"] == sync)
        assert plan["by_sync"][sync]["over_bound"] >= 1
        for r in records:
            if r["method"] != "plan_cp_step":
                assert set(r["by_sync"]) == set(SYNCS)
                assert plan["by_sync"][sync]["time"] <= r["by_sync"][sync]["time"], r["method"]
    assert (out / "cp_summary.csv").exists()
    assert (out / "cp_over_bound.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "cp_degrees.png").read_bytes()[:4] == b"\x89PNG"

    # Again: nothing runs, the table is rebuilt from the stored records.
    before = (out / "results.jsonl").read_bytes()
    again = run_cli(*TINY, "--no-plots", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "results.jsonl").read_bytes() == before
    assert "plan_cp_step" in again.stdout


def test_records_repeat_and_keys_are_stable() -> None:
    config = CPStudyConfig(datasets="none", n="24", gpus="4", max_tokens="2K", time_limit=0.05)
    settings = build_settings(config)
    assert [s.key for s in build_settings(config)] == [s.key for s in settings]
    tasks = cp_tasks(settings, CP_METHODS, SYNCS, 0.05)
    assert len(tasks) == RUNS and len({t.key for t in tasks}) == RUNS
    assert {t.key.rsplit("|", 1)[1]: t.exclusive for t in tasks} == {
        "plan_cp_step@0.05": True, "megatron_greedy": False, "dp_balanced": False,
        "fixed_cp@0.05": True}
    plan = next(t for t in tasks if "plan_cp_step" in t.key)
    first, second = run_cp_task(plan.payload), run_cp_task(plan.payload)
    for field in ("by_sync", "degrees", "groups_by_degree", "steps", "detail"):
        assert first[field] == second[field]


def test_quick_is_a_small_grid_and_given_flags_win() -> None:
    from seqpart.solver.cli import build_parser
    from seqpart.solver.study.cp.cli import _config

    args = build_parser().parse_args(["cp-study", "--quick", "--n", "32"])
    config = _config(args, lambda _: None)
    assert (config.n, config.gpus, config.max_tokens) == ("32", "4,8", "4K")


def test_the_default_cost_is_the_benchmarks() -> None:
    from seqpart.solver.problem import Cost

    cost, overhead, cp_comm = cost_terms(CPStudyConfig())
    spec = Cost.parse(cost)
    assert (spec.linear, spec.quadratic) == DEFAULT_CP_MODEL["cost"]
    assert (overhead, cp_comm) == (DEFAULT_CP_MODEL["overhead"], DEFAULT_CP_MODEL["cp_comm"])


def test_a_method_that_fails_is_an_error_record(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise GreedyError("Megatron-LM's greedy assumes idle ranks form a suffix; here they do not")

    monkeypatch.setattr(cp_methods, "megatron_dynamic_cp_schedule", refuse)
    (setting,) = build_settings(CPStudyConfig(datasets="none", n="12", gpus="6", max_tokens="1K"))
    record = run_cp_task((setting, "megatron_greedy", None, 0.05))
    assert not record["valid"] and record["error"].startswith("GreedyError: ")
    (row,) = summarize([{**record, "key": "k"}], ["megatron_greedy"], "barrier")
    assert row["errors"] == 1 and row["valid_rate"] == 0


def test_the_table_uses_the_best_bound_known() -> None:
    """A bound plan_cp_step proved above the model's counts for every method of the setting."""
    def record(method: str, sync: str | None, time: float, proved: float | None = None) -> dict:
        return {"key": method, "setting": "s", "method": method, "sync": sync, "valid": True,
                "error": None, "degrees": [1], "steps": 1, "seconds": 0.0,
                "by_sync": {x: {"time": time, "bound": 80.0} for x in ([sync] if sync else SYNCS)},
                "detail": {} if proved is None else {"lower_bound": proved}}

    records = [record("plan_cp_step", "barrier", 100.0, proved=100.0),
               record("megatron_greedy", None, 120.0)]
    assert best_bounds(records, "barrier") == {"s": 100.0}
    assert best_bounds(records, "dag") == {"s": 80.0}  # the barrier proof says nothing of dag
    plan, greedy = summarize(records, ["plan_cp_step", "megatron_greedy"], "barrier")
    assert plan["mean_over_bound"] == 1.0 and greedy["mean_over_bound"] == 1.2
    assert greedy["planner_speedup_mean"] == 1.2 and greedy["planner_behind"] == 0


def test_user_data_is_cut_into_steps(tmp_path: Path) -> None:
    data = tmp_path / "rollouts.json"
    data.write_text(json.dumps([(977 * i) % 6000 + 50 for i in range(40)]))
    out = tmp_path / "mine"
    proc = run_cli("cp-study", "--data", str(data), "--global-batch", "16", "--n-gpus", "4",
                   "--max-tokens-per-gpu", "4K", "--methods", "plan_cp_step,megatron_greedy",
                   "--sync", "barrier", "--time-limit", "0.05", "--jobs", "1", "--no-plots",
                   "--quiet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = read_results(out)
    assert {r["source"] for r in records} == {"rollouts"}
    assert sorted((r["rep"], r["method"]) for r in records) == [
        (0, "megatron_greedy"), (0, "plan_cp_step"), (1, "megatron_greedy"), (1, "plan_cp_step")]
    assert all(r["valid"] and r["n"] == 16 for r in records)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--n-gpus", "0"), ("--n-gpus",)),
        (("--max-tokens-per-gpu", "4Q"), ("--max-tokens-per-gpu", "4K")),
        (("--sync", "async"), ("--sync", "barrier")),
        (("--methods", "nope"), ("--methods", "plan_cp_step")),
        (("--cp-comm", "-1"), ("--cp-comm",)),
        (("--time-limit", "0"), ("--time-limit",)),
        (("--global-batch", "8"), ("--global-batch", "--data")),
        (("--datasets", "nope"), ("nope",)),
        (("--cost-profile", "p.json", "--cost", "tokens"), ("--cost-profile", "--cost")),
    ],
)
def test_bad_arguments_are_one_line_naming_the_flag(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    proc = run_cli(*TINY, *args, "--out", str(tmp_path / "s"))
    assert proc.returncode == 2
    err = proc.stderr
    assert err.startswith("seqpart: error:") and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err
    assert not (tmp_path / "s" / "results.jsonl").exists()
