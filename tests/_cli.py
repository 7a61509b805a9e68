"""Shared test helpers: the ``seqpart`` command line run in this process, and the records a
study command wrote."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

from seqpart.solver.cli import main


class _Stdin(io.StringIO):
    def isatty(self) -> bool:
        return False


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``seqpart ARGS`` in this process: exit code, stdout and stderr as a subprocess gives."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = _Stdin(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: usage errors, --help, --version
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        sys.stdin = old_stdin
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def read_results(out: Path) -> list[dict]:
    """Every line of a study's ``out/results.jsonl``, strictly: a torn line fails the test (the
    package's own reader skips it)."""
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
