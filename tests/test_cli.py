"""The ``seqpart`` command line, through its real entry point (a subprocess per call)."""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("gap.png", "time_vs_n.png", "loads.png")


CLI = (sys.executable, "-m", "seqpart.solver.cli")


def run(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=180,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("seqpart: error: ")
    for word in words:
        assert word in lines[0]
    assert proc.stdout == ""


@pytest.fixture()
def issue_json(tmp_path: Path) -> Path:
    path = tmp_path / "lengths.json"
    path.write_text("[8, 7, 6, 5, 4]")
    return path


# --------------------------------------------------------------------------- solve


def test_solve_json_list_prints_the_table(issue_json: Path) -> None:
    proc = run("solve", str(issue_json), "--k", "2", "--cap", "15")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "5 sequences, 30 tokens -> k=2 micro-batches (given), cap 15" in out
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()[:1].isdigit()]
    assert [row[:4] for row in rows] == [["0", "2", "15", "15"], ["1", "3", "15", "15"]]
    assert "status optimal" in out and "gap 0.00%" in out and "method" in out


def test_solve_json_object_machine_output(tmp_path: Path) -> None:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"source": "x", "lengths": [8, 7, 6, 5, 4]}))
    proc = run("solve", str(path), "--cap", "15", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["k"] == 2 and plan["k_status"] == "optimal"
    assert plan["bins"] == [[0, 1], [2, 3, 4]]
    assert plan["tokens"] == [15, 15] and plan["status"] == "optimal"


def test_solve_csv_default_first_integer_column_and_named_column(tmp_path: Path) -> None:
    path = tmp_path / "batch.csv"
    path.write_text("name,len,id\na,8,1\nb,7,1\nc,6,1\nd,5,1\ne,4,1\n")
    proc = run("solve", str(path), "--cap", "15", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens"] == [15, 15]  # 'len', the first integer column
    proc = run("solve", str(path), "--column", "id", "--k", "5", "--json")
    assert json.loads(proc.stdout)["tokens"] == [1, 1, 1, 1, 1]
    proc = run("solve", str(path), "--column", "2", "--cap", "15", "--json")
    assert json.loads(proc.stdout)["tokens"] == [15, 15]


def test_solve_stdin_dash_none_and_plain_numbers() -> None:
    for args in (("solve", "-"), ("solve",)):
        proc = run(*args, "--k", "2", "--json", stdin="[8, 7, 6, 5, 4]")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["max_load"] == 15
    proc = run("solve", "--k", "2", "--json", stdin="8\n7\n6\n5\n4\n")
    assert json.loads(proc.stdout)["max_load"] == 15
    proc = run("solve", "--k", "2", "--json", stdin="8 7 6 5 4")
    assert json.loads(proc.stdout)["max_load"] == 15
    proc = run("solve", "--k", "2", "--json", stdin="8,7,6,5,4\n")
    assert json.loads(proc.stdout)["max_load"] == 15


def test_solve_options_cost_equal_size_oversize(issue_json: Path, tmp_path: Path) -> None:
    proc = run("solve", str(issue_json), "--k", "2", "--cost", "attention", "--json")
    plan = json.loads(proc.stdout)
    assert plan["cost"] == {"linear": 24576, "quadratic": 1}
    even = tmp_path / "even.json"
    even.write_text("[9, 1, 1, 1]")
    plan = json.loads(run("solve", str(even), "--k", "2", "--equal-size", "--json").stdout)
    assert sorted(len(b) for b in plan["bins"]) == [2, 2]
    proc = run("solve", str(issue_json), "--cap", "7", "--oversize", "alone", "--time-limit", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "(over cap, alone)" in proc.stdout


@pytest.mark.parametrize(
    ("content", "args", "words"),
    [
        ("[]", (), ("empty",)),
        ("", (), ("empty",)),
        ("[5, -1, 3]", (), ("lengths[1]", "> 0")),
        ("[5, 2.5]", (), ("lengths[1]", "float")),
        ('[5, "a"]', (), ("lengths[1]",)),
        ("[5, true]", (), ("bool",)),
        ("[1, 2", (), ("not valid JSON",)),
        ('{"x": [1]}', (), ("'lengths'",)),
        ("[8, 7, 6]", ("--k", "4"), ("k=4", "3 sequences")),
        ("[8, 7, 6]", ("--cap", "7"), ("over cap=7", "--oversize alone")),
        ("len\n5\nabc\n", ("--column", "len"), ("'abc'", "not an integer")),
        ("len\n5\n6\n", ("--column", "size"), ("size", "len")),
        ("[8, 7]", ("--equal-size", "--k", "3"), ("k=3",)),
    ],
)
def test_solve_bad_input_is_one_line_exit_2(
    tmp_path: Path, content: str, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    path = tmp_path / ("in.csv" if content.startswith("len") else "in.json")
    path.write_text(content)
    assert_one_line_error(run("solve", str(path), *args), 2, *words)


def test_solve_missing_file_bad_flags_and_unknown_command(tmp_path: Path) -> None:
    assert_one_line_error(run("solve", str(tmp_path / "nope.json")), 2, "no such file")
    assert_one_line_error(run("solve", str(tmp_path)), 2, "directory")
    assert_one_line_error(run("solve", "-", "--k", "x", stdin="[1]"), 2, "--k")
    assert_one_line_error(run("solve", "-", "--cap", "0", stdin="[1]"), 2, "--cap")
    assert_one_line_error(run("solve", "-", "--time-limit", "-1", stdin="[1]"), 2)
    assert_one_line_error(run("solve", "-", "--cost", "flops", stdin="[1]"), 2, "--cost")
    assert_one_line_error(run("bogus"), 2, "bogus")
    proc = run()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_solve_infeasible_exits_3(issue_json: Path) -> None:
    assert_one_line_error(
        run("solve", str(issue_json), "--k", "1", "--cap", "15"), 3, "infeasible", "k >= 2"
    )


# --------------------------------------------------------------------------- repro


def test_repro_prints_both_counterexamples() -> None:
    proc = run("repro")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Counterexample 1" in out and "Counterexample 2" in out
    assert "{7,5,4}=16 OVER CAP" in out and "{8,7}=15  {6,5,4}=15" in out
    assert "lengths [3, 3, 2, 2, 2], cap 6" in out
    assert "In real length data" in out
    assert "EMPTY" in out and "torch.cat([])" in out


def test_example_script_runs() -> None:
    script = Path(__file__).resolve().parents[1] / "examples" / "counterexamples.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Counterexample 2" in proc.stdout


def test_console_script_is_installed() -> None:
    exe = shutil.which("seqpart")
    if exe is None:
        pytest.skip("the seqpart console script is not on PATH (pip install -e .)")
    proc = subprocess.run([exe, "solve", "--k", "2", "--json"], input="[8,7,6,5,4]",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["max_load"] == 15


# --------------------------------------------------------------------------- study

TINY = ("study", "--datasets", "code_humaneval_pypi", "--n", "16,24", "--k", "min,min+2",
        "--caps", "1x", "--methods", "karmarkar_karp,partition@0.05", "--quiet")


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_tiny_study_writes_results_summary_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "study"
    proc = run(*TINY, "--jobs", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = read_records(out)
    # 2 batch sizes x 2 k values (plus the generated RL batches) x 2 methods.
    assert len(records) == len({r["key"] for r in records}) == 16
    assert {r["method"] for r in records} == {"karmarkar_karp", "partition@0.05"}
    assert {r["source"] for r in records} == {"code_humaneval_pypi", "rl_longtail"}
    for r in records:
        assert r["k"] <= r["n"]
        if r["method"] == "partition@0.05" and r["valid"]:
            assert r["over_cap_bins"] == 0 and r["empty_bins"] == 0 and len(r["tokens"]) == r["k"]
    with (out / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [row["method"] for row in rows] == ["karmarkar_karp", "partition@0.05"]
    assert all(int(row["runs"]) == 8 for row in rows)
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "valid" in proc.stdout and "karmarkar_karp" in proc.stdout


def test_study_resumes_without_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = (*TINY, "--no-generated", "--jobs", "1", "--no-plots", "--out", str(out))
    first = run(*args, "--limit", "3")
    assert first.returncode == 0, first.stderr
    assert "still to run" in first.stdout
    done = (out / "results.jsonl").read_text()
    assert len(done.splitlines()) == 3
    # An interruption can leave half a line behind: it is ignored and redone.
    with (out / "results.jsonl").open("a") as fh:
        fh.write('{"key": "code_humaneval_pypi|n=16')
    second = run(*args)
    assert second.returncode == 0, second.stderr
    text = (out / "results.jsonl").read_text()
    assert text.startswith(done)  # earlier results kept as they were
    records = [json.loads(line) for line in text.splitlines()[4:]] + [
        json.loads(line) for line in done.splitlines()
    ]
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == 8
    assert "still to run" not in second.stdout
    third = run(*args)  # nothing left: no new lines
    assert third.returncode == 0
    assert (out / "results.jsonl").read_text() == text


def test_study_interrupted_by_ctrl_c_then_resumed(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ("study", "--datasets", "math_sft_gsm8k_train", "--no-generated", "--n", "64",
            "--reps", "40", "--k", "16", "--caps", "2x", "--methods", "lpt,partition@0.05",
            "--jobs", "1", "--no-plots", "--quiet", "--out", str(out))
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    # A Ctrl-C that lands inside a CP-SAT solve only ends that solve early, so keep pressing.
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the study finished before it could be interrupted")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "resume" in err
    partial = {json.loads(line)["key"] for line in results.read_text().splitlines()}
    assert 4 <= len(partial) < 80
    resumed = run(*args)
    assert resumed.returncode == 0, resumed.stderr
    keys = [r["key"] for r in read_records(out)]
    assert len(keys) == len(set(keys)) == 80
    assert partial <= set(keys)


def test_study_on_a_user_file(tmp_path: Path) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("sample,tokens\n" + "".join(f"s{i},{100 + 37 * i % 400}\n" for i in range(40)))
    out = tmp_path / "study"
    proc = run("study", "--data", str(data), "--k", "min", "--caps", "1000",
               "--methods", "lpt,first_fit_decreasing", "--jobs", "1", "--no-plots",
               "--quiet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = read_records(out)
    # The generated RL batches hold sequences over cap=1000, so that grid point is skipped.
    assert {r["source"] for r in records} == {"mine"}
    mine = [r for r in records if r["source"] == "mine"]
    assert {r["n"] for r in mine} == {40} and {r["cap"] for r in mine} == {1000}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--methods", "karmarkar_karp,nope"), ("nope",)),
        (("--methods", "partition@x"), ("partition@x",)),
        (("--k", "zero"), ("--k",)),
        (("--caps", "big"), ("--caps",)),
        (("--n", "-4"), ("--n",)),
        (("--datasets", "nope"), ("nope",)),
        (("--data", "/no/such/file.json"), ("no such file",)),
    ],
)
def test_study_bad_arguments(tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]) -> None:
    proc = run("study", *args, "--out", str(tmp_path / "s"), "--jobs", "1", "--quiet")
    assert_one_line_error(proc, 2, *words)
