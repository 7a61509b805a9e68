"""The README opens with the two set-up commands, CI runs exactly its test command, and its
Python blocks run as written."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


# --------------------------------------------------------------------------- python blocks

#: What a trainer has in scope where the README's trainer fragments go: a real (1-rank gloo)
#: process group, the rank's lengths and samples, and the trainer's arguments. Blocks that use
#: one of these names run after this preamble; every other block runs as written.
TRAINER_CONTEXT = '''
import os, tempfile, types
import torch
import torch.distributed as dist
# A file rendezvous, not a TCP port: other test runs on the machine cannot collide with it.
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
dp_group = dist.group.WORLD
local_lengths = [900, 4100, 2500, 3000, 700, 1200, 5200, 800]
samples = [torch.ones(n) for n in local_lengths]
args = types.SimpleNamespace(max_tokens_per_gpu=4096)
cp_size = 2
microbatch_group_size_per_vp_stage = 2
'''
TRAINER_NAMES = ("local_lengths", "dp_group", "samples")

RUNNER = '''
import json, sys, traceback
blocks = json.loads(sys.stdin.read())
failed = []
for line, preamble, code in blocks:
    scope = {"__name__": "__readme__"}
    try:
        exec(preamble, scope)
        # Padded so tracebacks give the README's own line numbers.
        exec(compile("\\n" * (line - 1) + code, "README.md", "exec"), scope)
    except BaseException:
        failed.append(f"README.md python block at line {line}:\\n{traceback.format_exc()}")
    finally:
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
print("\\n".join(failed))
sys.exit(1 if failed else 0)
'''


def _python_blocks() -> list[tuple[int, str]]:
    text = (ROOT / "README.md").read_text()
    blocks, pos = [], 0
    while (start := text.find("```python\n", pos)) != -1:
        body_start = start + len("```python\n")
        end = text.index("```", body_start)
        blocks.append((text.count("\n", 0, body_start) + 1, text[body_start:end]))
        pos = end + 3
    return blocks


def _names(code: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name)}


def test_readme_python_blocks_run_as_written() -> None:
    """Every ```python block of the README, each in a fresh namespace: no undefined names, no
    API drift. Trainer fragments get the trainer's context (above), nothing else."""
    blocks = _python_blocks()
    assert len(blocks) >= 3
    jobs = [(line, TRAINER_CONTEXT if _names(code) & set(TRAINER_NAMES) else "", code)
            for line, code in blocks]
    if any(preamble for _, preamble, _ in jobs):
        pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
