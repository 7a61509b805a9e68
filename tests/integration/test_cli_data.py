"""The command line on a user's own data: `step --data`, `study --data`, flags that are never
abbreviated, and the hints a new user needs (no cap given, how k was chosen)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from _cli import run_cli

from seqpart.solver.cli import build_parser
from seqpart.solver.study.step_data import DATA_METHODS

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = [(97 * i) % 1500 + 20 for i in range(48)]
FAST = ("--dp", "2", "--pp", "2", "--time-limit", "0.05", "--no-plots", "--quiet")


def run(*args: str) -> subprocess.CompletedProcess:
    """``seqpart ARGS`` in this process, as a subprocess would report it."""
    return run_cli(*args)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seqpart: error: "), proc.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


def _table(stdout: str) -> dict[str, list[str]]:
    """method -> its cells in the step table (the step time column is the third)."""
    rows = {}
    for line in stdout.splitlines():
        cells = line.split()
        if cells and cells[0] in DATA_METHODS:
            rows[cells[0]] = cells
    return rows


def test_step_data_is_not_taken_for_datasets(tmp_path: Path) -> None:
    # argparse used to read --data as an abbreviation of --datasets ("no bundled dataset").
    data = tmp_path / "lens.json"
    data.write_text(json.dumps(LENGTHS))
    proc = run("step", "--data", str(data), *FAST, "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    rows = _table(proc.stdout)
    assert set(rows) == set(DATA_METHODS)  # every scheduler's step time against plan_step's
    assert rows["plan_step"][1] == "1/1" and rows["plan_step"][3] == "1.0000x"
    for cells in rows.values():
        assert re.fullmatch(r"\d+(\.\d+)?(e\+\d+)?", cells[2]), cells  # a step time
    assert "no --cap: the cap is the longest sequence" in proc.stdout
    saved = json.loads((tmp_path / "o" / "step_data.json").read_text())
    assert {r["method"] for r in saved["records"]} == set(DATA_METHODS)
    assert all(r["valid"] for r in saved["records"] if r["method"] == "plan_step")


@pytest.mark.parametrize("flag", ["--dat", "--time", "--glob", "--no-gen"])
def test_no_flag_is_abbreviated(flag: str) -> None:
    for command in ("solve", "study", "step"):
        proc = run(command, flag, "x")
        assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr, proc.stderr


def test_the_same_flags_in_every_subcommand() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # the subparsers action
    for name in ("solve", "study", "step"):
        flags = {s for a in sub.choices[name]._actions for s in a.option_strings}
        assert {"--data", "--field", "--column", "--cap", "--cost"} <= flags, name
        # study's budgets are per method (partition@SECONDS), so it has no --time-limit
        assert ("--time-limit" in flags) == (name != "study"), name


def test_step_data_same_answer_from_jsonl_csv_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(LENGTHS))
    (tmp_path / "b.jsonl").write_text("".join(
        json.dumps({"prompt_len": 10, "response_len": x - 10}) + "\n" for x in LENGTHS))
    (tmp_path / "c.csv").write_text("id,len\n" + "".join(f"{i},{x}\n" for i, x in enumerate(LENGTHS)))
    # Repeatable plans: with the clock, plan_step's count search runs to the limit, and where
    # it stops differs between runs.
    common = (*FAST, "--time-limit", "0.5", "--cap", "3000", "--global-batch", "24", "--vpp", "2",
              "--deterministic")
    out_a = run("step", "--data", str(tmp_path / "a.json"), *common, "--out", str(tmp_path / "oa"))
    out_b = run("step", "--data", str(tmp_path / "b.jsonl"), "--field", "prompt_len",
                "--field", "response_len", *common, "--out", str(tmp_path / "ob"))
    out_c = run("step", "--data", str(tmp_path / "c.csv"), "--column", "len", *common,
                "--out", str(tmp_path / "oc"))
    # Every cell but the plan time (column 7) is the same.
    tables = [{m: c[:6] + c[7:] for m, c in _table(p.stdout).items()} for p in (out_a, out_b, out_c)]
    assert tables[0] and tables[0] == tables[1] == tables[2]
    assert "2 steps of 24" in out_a.stdout
    # vpp > 1: every method's count per rank is a multiple of pp (Megatron's interleaving).
    assert "count per rank a multiple of 2" in out_a.stdout
    saved = json.loads((tmp_path / "oa" / "step_data.json").read_text())
    assert all(r["m"] % 2 == 0 for r in saved["records"] if r["valid"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--dp", "2,4"), ("--dp", "one int")),
        (("--dp", "2", "--cap", "2x"), ("--cap", "one int")),
        (("--dp", "2", "--datasets", "all"), ("--datasets with --data",)),
        (("--dp", "2", "--global-batch", "99"), ("--global-batch 99", "48 sequences")),
        (("--dp", "40", "--global-batch", "24"), ("--dp 40",)),
        (("--dp", "2", "--methods", "plan_step,nope"), ("nope",)),
        (("--pp", "2",), ("--dp is needed",)),
    ],
)
def test_step_data_bad_arguments(tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]) -> None:
    data = tmp_path / "lens.json"
    data.write_text(json.dumps(LENGTHS))
    one_line_error(run("step", "--data", str(data), *args, "--no-plots", "--quiet",
                       "--out", str(tmp_path / "o")), *words)


def test_data_only_flags_without_data_are_refused() -> None:
    one_line_error(run("step", "--global-batch", "8", "--quiet"), "--global-batch", "--data FILE")


def test_study_data_uses_only_the_users_data_unless_asked(tmp_path: Path) -> None:
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"tokens": x}) + "\n" for x in LENGTHS))
    base = ("study", "--data", str(data), "--k", "min", "--caps", "2x", "--methods", "lpt",
            "--n", "32", "--jobs", "1", "--no-plots", "--quiet")
    proc = run(*base, "--out", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stderr
    sources = {json.loads(line)["source"]
               for line in (tmp_path / "a" / "results.jsonl").read_text().splitlines()}
    assert sources == {"mine"}  # generated RL batches were mixed in before
    proc = run(*base, "--generated", "--out", str(tmp_path / "b"))
    sources = {json.loads(line)["source"]
               for line in (tmp_path / "b" / "results.jsonl").read_text().splitlines()}
    assert sources == {"mine", "rl_longtail"}


def test_solve_without_a_cap_says_a_cap_is_expected(tmp_path: Path) -> None:
    data = tmp_path / "lens.json"
    data.write_text("[8, 7, 6, 5]")
    proc = run("solve", "--data", str(data))
    assert proc.returncode == 0 and "k=1" in proc.stdout
    assert "no --cap given" in proc.stderr and "--cap TOKENS" in proc.stderr
    assert "no --cap" not in run("solve", str(data), "--cap", "15").stderr
    one_line_error(run("solve", str(data), "--data", str(data)), "give the file once")


def test_default_output_folders_are_ignored_by_git() -> None:
    ignored = (ROOT / ".gitignore").read_text().split()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    defaults = {"seqpart-step-study", "seqpart-step-data"}  # step's --out default depends on --data
    defaults.add(sub.choices["study"].get_default("out"))
    for folder in defaults:
        assert f"{folder}/" in ignored, folder


def test_cost_profile_flag_follows_the_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cost-profile exists only when seqpart.solver has load_cost_profile (the calibration);
    then its cost and overhead are used and step times print in seconds."""
    import dataclasses

    import seqpart.solver
    from seqpart.solver import Cost

    def flags() -> set[str]:
        sub = next(a for a in build_parser()._actions if a.dest == "command")
        return {s for a in sub.choices["step"]._actions for s in a.option_strings}

    if not hasattr(seqpart.solver, "load_cost_profile"):
        assert "--cost-profile" not in flags()

    @dataclasses.dataclass(frozen=True)
    class Profile:  # the three fields step --data reads from a loaded profile
        cost: Cost
        overhead: int
        unit_seconds: float

    def load(path: str) -> Profile:
        assert json.loads(Path(path).read_text()) == {"fake": True}
        return Profile(Cost(512, 1), 512 * 300, 1e-9)

    monkeypatch.setattr(seqpart.solver, "load_cost_profile", load, raising=False)
    assert "--cost-profile" in flags()
    (tmp_path / "p.json").write_text('{"fake": true}')
    (tmp_path / "l.json").write_text(json.dumps(LENGTHS))
    proc = run("step", "--data", str(tmp_path / "l.json"), "--cost-profile", str(tmp_path / "p.json"),
               *FAST, "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "step time (s)" in proc.stdout and "cost 512*l + 1*l^2" in proc.stdout
    assert "overhead 153600 per micro-batch" in proc.stdout


def test_step_data_draws_its_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra")
    data = tmp_path / "lens.json"
    data.write_text(json.dumps(LENGTHS))
    proc = run("step", "--data", str(data), "--dp", "2", "--time-limit", "0.05", "--quiet",
               "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    png = tmp_path / "o" / "step_data.png"
    assert f"plot: {png}" in proc.stdout and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
