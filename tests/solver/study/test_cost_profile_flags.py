"""``--cost-profile FILE`` wherever the command line takes a cost: `solve`, `study`, `step` (its
grid and ``--data``); never with ``--cost`` (or ``--overhead-tokens``), and a bad file is one
line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import read_results, run_cli
from _profiles import PROFILE, bad_profile_files

from seqpart.solver import CostProfile
from seqpart.solver.study.methods import StudyConfig, run_study

LENGTHS = [(97 * i) % 1500 + 20 for i in range(40)]


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    profile, data = tmp_path / "profile.json", tmp_path / "lengths.json"
    PROFILE.save(profile)
    data.write_text(json.dumps(LENGTHS))
    return profile, data


def run(*args: str) -> tuple[int, str, str]:
    proc = run_cli(*args)
    return proc.returncode, proc.stdout, proc.stderr


def with_files(command: tuple[str, ...], data: Path, profile: Path, out: Path) -> list[str]:
    """``command`` on ``data`` (not the step grid: it has none) with ``--cost-profile``, and
    ``--out`` where it writes results."""
    extra = [] if "--datasets" in command else ["--data", str(data)]
    extra += [] if command[0] == "solve" else ["--out", str(out)]
    return [*command, *extra, "--cost-profile", str(profile)]


STUDY = ("study", "--k", "4", "--caps", "2x", "--methods", "lpt,capped_balance", "--jobs", "1", "--no-plots",
         "--quiet")


def test_study_balances_the_profile_cost(files: tuple[Path, Path], tmp_path: Path) -> None:
    profile, data = files
    code, _, err = run(*STUDY, "--data", str(data), "--cost-profile", str(profile),
                       "--out", str(tmp_path / "p"))
    assert code == 0, err
    by_flag = read_results(tmp_path / "p")
    assert {r["cost"] for r in by_flag} == {str(PROFILE.cost)}
    # The same study with the profile's cost given in Python: the same loads.
    run_study(StudyConfig(methods="lpt,capped_balance", data=(str(data),), k="4", caps="2x",
                          cost=PROFILE.cost, jobs=1, out=str(tmp_path / "c"), plots=False,
                          progress=False))
    given = read_results(tmp_path / "c")
    loads = {(r["method"], r["max_load"]) for r in by_flag}
    assert loads == {(r["method"], r["max_load"]) for r in given}
    code, _, err = run(*STUDY, "--data", str(data), "--out", str(tmp_path / "t"))
    assert code == 0, err
    assert loads != {(r["method"], r["max_load"]) for r in read_results(tmp_path / "t")}


STEP = ("step", "--datasets", "none", "--n", "32", "--dp", "2", "--pp", "2", "--methods",
        "verl,slime_kk", "--jobs", "1", "--no-plots", "--quiet")


def test_step_grid_and_data_plan_with_the_profile(files: tuple[Path, Path], tmp_path: Path) -> None:
    profile, data = files
    code, _, err = run(*STEP, "--cost-profile", str(profile), "--out", str(tmp_path / "g"))
    assert code == 0, err
    grid = read_results(tmp_path / "g")
    assert {(r["cost"], r["overhead"]) for r in grid} == {(str(PROFILE.cost), PROFILE.overhead)}
    code, _, err = run(*STEP, "--out", str(tmp_path / "d"))
    assert code == 0, err
    assert {r["cost"] for r in read_results(tmp_path / "d")} == {"attention"}

    code, out, err = run("step", "--data", str(data), "--dp", "2", "--methods", "verl",
                         "--no-plots", "--quiet", "--cost-profile", str(profile),
                         "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert f"cost {PROFILE.cost.linear}*l + {PROFILE.cost.quadratic}*l^2" in out
    assert f"overhead {PROFILE.overhead} per micro-batch" in out and "step time (s)" in out


@pytest.mark.parametrize("command", [
    ("solve", "--cost", "attention"),
    (*STUDY, "--cost", "tokens"),
    (*STEP, "--cost", "attention"),
    (*STEP, "--overhead-tokens", "256"),
    ("step", "--dp", "2", "--cost", "tokens", "--no-plots", "--quiet"),
])
def test_a_cost_flag_with_a_profile_is_refused(files: tuple[Path, Path], tmp_path: Path,
                                               command: tuple[str, ...]) -> None:
    profile, data = files
    code, out, err = run(*with_files(command, data, profile, tmp_path / "o"))
    assert code == 2 and not out
    flag = "--overhead-tokens" if "--overhead-tokens" in command else "--cost"
    assert err.strip().startswith(f"seqpart: error: --cost-profile and {flag} both given"), err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [("solve",), STUDY, STEP])
def test_a_bad_profile_is_one_line_naming_it(files: tuple[Path, Path], tmp_path: Path,
                                             command: tuple[str, ...]) -> None:
    _, data = files
    for path, words in bad_profile_files(tmp_path):
        code, _, err = run(*with_files(command, data, path, tmp_path / "o"))
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and words in err and str(path) in err


#: A profile whose fit kept a per-sequence cost and a size term (a per-token cost rising with
#: the micro-batch's size): the planners take it as Cost.per_sequence and a MicroBatchCost.
SIZED = CostProfile(
    overhead_s=2e-3, linear_s=1e-5, quadratic_s=1e-9, device="cpu", dtype="float32",
    torch_version="2.13.0", model={"kind": "reference"},
    extended={"coefficients": {"overhead": 2e-3, "linear": 1e-5, "quadratic": 1e-9,
                               "count": 3e-4, "total_sq": 2e-9, "fall@512": 1e-6}},
)


def test_a_profile_with_a_size_term_plans_everywhere(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from seqpart.solver import MicroBatchCost
    from seqpart.solver.dropins import build_dp_schedule

    path = tmp_path / "sized.json"
    SIZED.save(path)
    assert isinstance(SIZED.overhead, MicroBatchCost) and SIZED.cost.per_sequence > 0
    data = tmp_path / "lengths.json"
    data.write_text(json.dumps(LENGTHS))
    code, out, err = run("step", "--data", str(data), "--dp", "2", "--pp", "2", "--cost-profile",
                         str(path), "--out", str(tmp_path / "d"))
    assert code == 0, err
    saved = json.loads((tmp_path / "d" / "step_data.json").read_text())
    assert "T^2" in saved["overhead"] and saved["records"]
    code, _, err = run(*STEP, "--cost-profile", str(path), "--out", str(tmp_path / "g"))
    assert code == 0, err
    # slime's drop-in plans its dynamic steps with it, the same as with the cost and overhead.
    args = SimpleNamespace(micro_batch_size=1, use_dynamic_batch_size=True, max_tokens_per_gpu=4096,
                           balance_data=False, balance_by_flops=False, pipeline_model_parallel_size=2)
    kw = {"global_batch_size": 40, "rollout_indices": list(range(40))}
    by_profile = build_dp_schedule(args, {"dp_size": 2}, LENGTHS, cost_profile=str(path), **kw)
    assert by_profile == build_dp_schedule(args, {"dp_size": 2}, LENGTHS, cost=SIZED.cost,
                                           overhead=SIZED.overhead, **kw)
