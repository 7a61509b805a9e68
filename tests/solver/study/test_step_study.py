"""``seqpart step``: the step study through the real CLI (tiny grid), its resume and its records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _cli import read_results

from seqpart.solver.study.step_study import (
    STEP_METHODS,
    Setting,
    StepStudyConfig,
    build_settings,
    per_rank_agreement,
    run_step_task,
    step_tasks,
)

CLI = (sys.executable, "-m", "seqpart.solver.cli")
TINY = ("step", "--datasets", "code_humaneval_pypi", "--no-generated", "--n", "16", "--dp", "2",
        "--pp", "1,4", "--time-limit", "0.05", "--jobs", "1", "--quiet")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


def test_tiny_step_study_limit_resume_table_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "step"
    # --limit: part of the runs, and the summary says what is left.
    part = run(*TINY, "--limit", "3", "--no-plots", "--out", str(out))
    assert part.returncode == 0, part.stderr
    assert len(read_results(out)) == 3
    assert "still to run" in part.stdout

    proc = run(*TINY, "--out", str(out))  # resumes: only the missing runs
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for method in STEP_METHODS:
        assert method in proc.stdout
    assert "step/LB pp=4" in proc.stdout and "still to run" not in proc.stdout
    first = read_results(out)
    # One setting: the 8 pp-agnostic methods once each, plan_step once per pp.
    assert len(first) == (len(STEP_METHODS) - 1) + 2
    assert len({r["key"] for r in first}) == len(first)
    plan_step = [r for r in first if r["method"] == "plan_step"]
    assert len(plan_step) == 2 and all(r["valid"] for r in plan_step)
    for r in first:
        if r["valid"]:  # the bound holds for every valid schedule (an over-cap one may beat it)
            assert set(r["pp"]) == ({"1"} if r["key"].endswith("|pp=1|plan_step@0.05") else
                                    {"4"} if r["method"] == "plan_step" else {"1", "4"})
            for v in r["pp"].values():
                assert v["step"] >= v["lb"] > 0
    assert (out / "step_summary.csv").exists()
    timed = [r for r in first if r["method"] in ("plan_step", "plan_global", "per_rank")]
    assert all(r["run"]["cpu_s"] >= 0 and r["run"]["at_a_time"] == 1 for r in timed)
    assert "CPU/wall" in proc.stdout
    assert (out / "step_vs_pp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Running again: nothing new is run, the table is rebuilt from the stored records.
    again = run(*TINY, "--no-plots", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert read_results(out) == first
    assert "plan_step" in again.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--dp", "0"), ("--dp",)),
        (("--pp", "x"), ("--pp",)),
        (("--methods", "nope"), ("nope", "plan_step")),
        (("--costs", "flops"), ("--costs",)),
        (("--datasets", "none", "--no-generated"), ("no data",)),
    ],
)
def test_bad_arguments_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    from seqpart.solver.cli import main

    assert main([*TINY, *args, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqpart: error:") and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err


def test_settings_skip_too_many_ranks_and_tasks_per_pp() -> None:
    config = StepStudyConfig(datasets="none", n="16", dp="2,8,16", pp="1,2,8")
    settings, skipped = build_settings(config)
    assert [s.dp for s in settings] == [2, 8]  # 16 sequences cannot give 16 ranks two each
    assert skipped == 1
    tasks = step_tasks(settings, ["verl", "plan_step"], 0.1)
    assert len(tasks) == 2 * (1 + 3)
    assert len({t.key for t in tasks}) == len(tasks)
    # Timed methods run apart, after the others (as in the method study).
    assert [t.exclusive for t in tasks[:4]] == [False, True, True, True]
    # Same config, same batches and keys (a resumed study must regenerate them).
    again, _ = build_settings(config)
    assert [s.key for s in again] == [s.key for s in settings]
    assert [s.lengths for s in again] == [s.lengths for s in settings]


def test_deterministic_tasks_repeat_their_plans_and_keep_apart_from_the_clocks() -> None:
    config = StepStudyConfig(datasets="none", n="48", dp="2", pp="4")
    settings, _ = build_settings(config)
    clock = step_tasks(settings[:1], ["verl", "plan_step"], 0.2)
    strict = step_tasks(settings[:1], ["verl", "plan_step"], 0.2, deterministic=True)
    # A timed result of the clock's is never reused for a repeatable run (nor the other way).
    assert clock[0].key == strict[0].key and clock[1].key != strict[1].key
    first, again = (run_step_task(strict[1].payload) for _ in range(2))
    assert first["deterministic"] and first["valid"]
    assert first["m"] == again["m"] and first["pp"] == again["pp"]


def test_runner_counts_a_trainer_cap_violation() -> None:
    # verl asks for ceil(24 / 10) = 3 micro-batches: one holds two sixes, 12 tokens > 10.
    setting = Setting("hand", "hand", 4, 0, 1, 10, "tokens", 0, 1, (1, 2), (6, 6, 6, 6))
    rec = run_step_task((setting, "verl", (1, 2), 0.05, 1, False))
    assert rec["over_cap"] == 1 and not rec["valid"]
    assert rec["m"] == 3 and set(rec["pp"]) == {"1", "2"}
    assert rec["pp"]["1"]["step"] == 24 and rec["pp"]["2"]["formula"] == 24 + 12
    # verl's order puts the 12 in the middle (6, 12, 6): 1F1B over two stages, forward a third
    # of each time and backward two thirds, ends at 32 (12 first or last would take 36).
    assert rec["pp"]["2"]["step"] == 32 and rec["pp"]["2"]["step_ordered"] == 32
    assert rec["pp"]["2"]["formula_over_exact"] == 36 / 32
    ps = run_step_task((setting, "plan_step", (2,), 0.05, 1, False))
    assert ps["valid"] and ps["over_cap"] == 0 and ps["m"] == 4
    assert ps["pp"]["2"]["ratio"] >= 1


def test_per_rank_agreement_same_count_on_every_rank() -> None:
    lengths = [5, 9, 3, 7, 2, 8, 6, 4, 1, 9, 9, 2]
    sched = per_rank_agreement(lengths, 3, 12)
    assert len({len(r) for r in sched}) == 1
    assert sorted(i for r in sched for mb in r for i in mb) == list(range(12))
    assert all(sum(lengths[i] for i in mb) <= 12 for r in sched for mb in r)
    # Each rank keeps its own contiguous chunk.
    assert sorted(i for mb in sched[0] for i in mb) == [0, 1, 2, 3]
