"""The README opens with the two set-up commands, and CI runs exactly its test command."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _first_code_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_opens_with_the_main_job_and_the_test_command() -> None:
    main_job, tests = _first_code_block()
    assert main_job.startswith("pip install -e ") and main_job.endswith("seqpart study")
    assert tests.startswith("pip install -e ") and tests.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = _first_code_block()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in [line.strip() for line in ci]
