"""The ``seqpart`` command line through its entry point, ``seqpart.solver.cli.main``: in this
process for most cases (each subprocess costs a second of imports), and in subprocesses for the
console script, ``python -m``, a parallel study and Ctrl-C."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli import read_results, run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("gap.png", "failures.png", "time_vs_n.png", "loads.png")
ROOT = Path(__file__).resolve().parents[2]


CLI = (sys.executable, "-m", "seqpart.solver.cli")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``seqpart ARGS`` in this process: exit code, stdout and stderr as a subprocess gives."""
    return run_cli(*args, stdin=stdin)


def run_process(*args: str, stdin: str = "", entry: tuple[str, ...] = CLI
                ) -> subprocess.CompletedProcess:
    return subprocess.run([*entry, *args], input=stdin, capture_output=True, text=True,
                          timeout=180)


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


def test_solve_csv_length_named_column_and_chosen_column(tmp_path: Path) -> None:
    path = tmp_path / "batch.csv"
    path.write_text("name,len,id\na,8,1\nb,7,1\nc,6,1\nd,5,1\ne,4,1\n")
    proc = run("solve", str(path), "--cap", "15", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens"] == [15, 15]  # 'len': named like a length
    assert "using field 'len'" in proc.stderr and "--field" in proc.stderr
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
        ('{"x": 1}', (), ("'lengths'",)),
        ('{"a": [1], "b": [2, 3]}', (), ("'lengths'", "equal length")),
        ('[{"a": 1, "b": 2}]', (), ("--field", "a, b")),
        ('[{"len": 1}, {"n": 2}]', (), ("record 2", "no field 'len'")),
        ('[{"len": 1}, {"len": 2.5}]', (), ("record 2", "field 'len'", "whole numbers")),
        ('{"len": 4}\n{"len": }', (), ("line 2", "JSONL")),
        ("[8, 7, 6]", ("--k", "4"), ("k=4", "3 sequences")),
        ("[8, 7, 6]", ("--cap", "7"), ("over cap=7", "--oversize alone")),
        ("len\n5\nabc\n", ("--column", "len"), ("line 3", "column 'len'", "'abc'")),
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


def test_csv_with_several_columns_and_no_length_name_is_refused(tmp_path: Path) -> None:
    """`id,total`: summing the ids would be a wrong answer with exit 0; refuse and list."""
    path = tmp_path / "b1.csv"
    path.write_text("id,total\n1,900\n2,800\n3,700\n")
    assert_one_line_error(run("solve", str(path), "--cap", "8192"), 2, "id, total", "--field")
    proc = run("solve", str(path), "--column", "total", "--k", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert sum(json.loads(proc.stdout)["tokens"]) == 2400
    two = tmp_path / "two.csv"
    two.write_text("tokens,seq_len\n1,2\n3,4\n")  # two length-like names: which one?
    assert_one_line_error(run("solve", str(two)), 2, "tokens, seq_len", "--field")
    bare = tmp_path / "bare.csv"
    bare.write_text("1,900\n2,800\n")  # no header: no name to go by
    assert_one_line_error(run("solve", str(bare)), 2, "2 columns", "--field")


@pytest.mark.parametrize("name", ["length", "lengths", "tokens", "num_tokens", "total_tokens",
                                  "seq_len", "seqlen", "response_length", "Num Tokens"])
def test_csv_length_column_names_are_recognised(tmp_path: Path, name: str) -> None:
    path = tmp_path / "b.csv"
    path.write_text(f"id,{name},reward\n0,8,1\n1,7,0\n2,6,1\n3,5,1\n4,4,0\n")
    proc = run("solve", str(path), "--cap", "15", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens"] == [15, 15]
    assert f"using field {name!r}" in proc.stderr


@pytest.mark.parametrize(
    ("cell", "words"),
    [("NA", ("row 3", "column 'tokens'", "'NA'", "not a number")),
     ("3.5", ("row 3", "column 'tokens'", "'3.5'", "whole numbers")),
     ("nan", ("row 3", "'nan'", "missing")),
     ("", ("row 3", "column 'tokens'", "empty"))],
)
def test_csv_bad_cell_names_row_column_and_cell(
    tmp_path: Path, cell: str, words: tuple[str, ...]
) -> None:
    path = tmp_path / "b.csv"
    path.write_text(f"id,tokens\n0,8\n1,{cell}\n2,6\n")
    assert_one_line_error(run("solve", str(path)), 2, str(path), *words)


def test_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    csv_path = tmp_path / "excel.csv"
    csv_path.write_bytes("\ufeffid,length\n0,8\n1,7\n2,6\n3,5\n4,4\n".encode())
    json_path = tmp_path / "bom.json"
    json_path.write_bytes("\ufeff[8, 7, 6, 5, 4]".encode())
    for path in (csv_path, json_path):
        proc = run("solve", str(path), "--cap", "15", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["tokens"] == [15, 15]
    proc = run("solve", "--cap", "15", "--json", stdin=csv_path.read_text(encoding="utf-8"))
    assert json.loads(proc.stdout)["tokens"] == [15, 15]  # stdin too
    assert "using field 'length'" in proc.stderr  # no invisible character in the name


def test_solve_k_min_plus_n(issue_json: Path) -> None:
    plan = json.loads(run("solve", str(issue_json), "--cap", "15", "--k", "min+2",
                          "--json").stdout)
    assert plan["k"] == 4 and plan["k_status"] == "given"  # smallest feasible is 2
    assert any("smallest feasible count 2 (proven) + 2" in note for note in plan["notes"])
    # The table says how k was chosen, not "(given)": the user gave min+2, not 4.
    table = run("solve", str(issue_json), "--cap", "15", "--k", "min+2").stdout
    assert "k=4 micro-batches (the smallest feasible count 2 (proven) + 2)" in table
    assert "(given)" not in table
    assert_one_line_error(run("solve", str(issue_json), "--k", "min+x"), 2, "min+N")
    assert_one_line_error(run("solve", str(issue_json), "--k", "min+9"), 2, "k=10", "5 sequences")


def test_solve_json_matches_the_documented_schema(issue_json: Path, tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "solve.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    cases = [("--k", "2"), ("--cap", "15"), ("--cap", "7", "--oversize", "alone"),
             ("--k", "min+1", "--cost", "attention"), ("--k", "5", "--equal-size", "--cap", "20")]
    for args in cases:
        proc = run("solve", str(issue_json), "--json", *args)
        assert proc.returncode == 0, proc.stderr
        jsonschema.validate(json.loads(proc.stdout), schema)
    # The schema is strict: a renamed or missing field would fail.
    plan = json.loads(run("solve", str(issue_json), "--json").stdout)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**plan, "extra": 1}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in plan.items() if k != "bins"}, schema)


def test_version_help_and_time_limit_defaults() -> None:
    from importlib.metadata import version

    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"seqpart {version('seqpart')}"
    help_text = " ".join(run("solve", "--help").stdout.split())
    assert "default 1:" in help_text and "defaults to 0.1 because it runs inside every training" in help_text
    assert "plan_step() to 1 because" in help_text
    assert "min+N" in help_text


def test_python_dash_m_seqpart_solver_and_py_typed() -> None:
    proc = run_process("solve", "--k", "2", "--json", stdin="[8,7,6,5,4]",
                       entry=(sys.executable, "-m", "seqpart.solver"))
    assert json.loads(proc.stdout)["max_load"] == 15
    import seqpart.heuristics
    import seqpart.solver

    for package in (seqpart.solver, seqpart.heuristics):
        assert (Path(package.__file__).parent / "py.typed").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"seqpart.solver" = ["data/*.json", "py.typed"]' in pyproject


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
    script = Path(__file__).resolve().parents[2] / "examples" / "counterexamples.py"
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


def test_tiny_parallel_study_writes_results_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "study"
    proc = run_process(*TINY, "--jobs", "2", "--no-plots", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = read_results(out)
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


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_study_interrupted_by_ctrl_c_then_resumed(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ("study", "--datasets", "math_sft_gsm8k_train", "--no-generated", "--n", "64",
            "--reps", "40", "--k", "16", "--caps", "2x", "--methods", "lpt,partition@0.05",
            "--jobs", "1", "--no-plots", "--quiet", "--out", str(out))
    # The child takes Ctrl-C as a terminal would deliver it even when this process ignores
    # SIGINT (a background job: CI started with `&` or nohup), which it would otherwise
    # inherit: the study then ran to the end and the test skipped.
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_sigint_default)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    # A Ctrl-C that lands inside a CP-SAT solve takes effect when the solve returns; keep
    # pressing until the process has ended, in case one is lost on the way.
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
    keys = [r["key"] for r in read_results(out)]
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
    records = read_results(out)
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


def test_study_subset_rerun_merges_into_the_summary(tmp_path: Path) -> None:
    """A second run with other methods into the same --out adds to the table, not replaces it."""
    out = tmp_path / "study"
    base = ("study", "--datasets", "code_humaneval_pypi", "--no-generated", "--n", "16",
            "--k", "min", "--caps", "1x", "--jobs", "1", "--quiet", "--out", str(out))
    first = run(*base, "--methods", "karmarkar_karp,partition@0.05", "--no-plots")
    assert first.returncode == 0, first.stderr
    second = run(*base, "--methods", "lpt")
    assert second.returncode == 0, second.stderr
    with (out / "summary.csv").open() as fh:
        rows = {row["method"]: row for row in csv.DictReader(fh)}
    assert list(rows) == ["lpt", "karmarkar_karp", "partition@0.05"]
    assert all(int(row["runs"]) == 1 for row in rows.values())
    assert "karmarkar_karp" in second.stdout and "2 results of earlier runs" in second.stdout
    for name in PLOTS:  # the plots cover all three methods' records
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_study_timed_runs_record_their_cpu_and_the_table_says_how_they_ran(
    tmp_path: Path,
) -> None:
    out = tmp_path / "study"
    proc = run("study", "--datasets", "code_humaneval_pypi", "--no-generated", "--n", "16,24",
               "--k", "min", "--caps", "1x", "--methods", "lpt,partition@0.05", "--jobs", "1",
               "--no-plots", "--quiet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = read_results(out)
    timed = [r for r in records if r["method"] == "partition@0.05"]
    assert len(timed) == 2 and all(r["workers"] == (os.cpu_count() or 1) for r in timed)
    for r in timed:
        run_info = r["run"]
        assert run_info["wall_s"] >= r["seconds"] > 0 and run_info["cpu_s"] > 0
        assert run_info["cores"] == os.cpu_count()
    assert all("run" not in r for r in records if r["method"] == "lpt")
    assert "Time-budgeted methods ran after the others, 1 at a time" in proc.stdout
    assert "partition@0.05: CPU/wall median" in proc.stdout
    with (out / "summary.csv").open() as fh:
        rows = {row["method"]: row for row in csv.DictReader(fh)}
    assert int(rows["partition@0.05"]["timed_runs"]) == 2
    assert float(rows["partition@0.05"]["cpu_per_wall_p50"]) > 0


def test_showcase_picks_an_over_cap_and_an_empty_instance() -> None:
    from seqpart.solver.study.plots import outcome, showcase_instances

    def rec(instance: str, over: int, empty: int, valid: bool = False) -> dict:
        return {"instance": instance, "k": 4, "over_cap_bins": over, "empty_bins": empty,
                "valid": valid, "method": "m"}

    records = [rec("a", 1, 0), rec("a", 2, 0), rec("b", 0, 1), rec("b", 0, 0, True),
               rec("c", 0, 0, True)]
    # The titles count the methods: "most methods leave one empty" was printed when 1 of 2 did.
    assert showcase_instances(records) == [("a", "2 of 2 methods go over the cap"),
                                           ("b", "1 of 2 methods leave a micro-batch empty")]
    assert [outcome(r) for r in records] == ["over the cap", "over the cap",
                                             "empty micro-batch", "valid", "valid"]
    assert outcome(rec("d", 1, 1)) == "over the cap and empty"
    assert outcome(rec("d", 0, 0)) == "no plan / error"


def test_gap_plot_frame_holds_every_point() -> None:
    """The largest gap (first-fit's ~94% in the README's study) sat on the frame before."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seqpart.solver.study.plots import _gap

    def rec(method: str, load: int) -> dict:
        return {"instance": f"i{load}", "method": method, "valid": True, "max_load": load,
                "lower_bound": 100}

    records = [rec("a", 100), rec("a", 194), rec("b", 101), rec("b", 100)]
    fig = _gap(plt, records, ["a", "b"])
    bottom, top = fig.axes[0].get_ylim()
    plt.close(fig)
    assert bottom < 0 < 94 < top / 1.5  # zero and the largest gap both inside, with room
