"""The README opens with the two set-up commands, CI runs exactly its test command, the README and
every page of ``docs/`` have their Python blocks run as written, every docs page is reachable
from the README, and every relative link resolves."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


def _repo_root() -> Path:
    # Walk up rather than count parents, so this file can live at any depth of tests/.
    here = Path(__file__).resolve().parent
    while not (here / "pyproject.toml").exists():
        here = here.parent
    return here


ROOT = _repo_root()
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: Every Markdown file whose relative links must resolve.
LINKED_FILES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md", *DOCS]
#: The README is a front page; the topics live in docs/.
README_MAX_LINES = 250


def _first_code_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_opens_with_the_main_job_and_the_test_command() -> None:
    main_job, tests = _first_code_block()
    assert main_job.startswith("pip install -e ") and main_job.endswith("seqpart study")
    assert tests.startswith("pip install -e ") and tests.endswith("python -m pytest -n 2")


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = _first_code_block()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in [line.strip() for line in ci]


# --------------------------------------------------------------------------- python blocks

#: What a trainer has in scope where the docs' trainer fragments go: a real (1-rank gloo)
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
for name, line, preamble, code in blocks:
    scope = {"__name__": "__docs__"}
    try:
        exec(preamble, scope)
        # Padded so tracebacks give the file's own line numbers.
        exec(compile("\\n" * (line - 1) + code, name, "exec"), scope)
    except BaseException:
        failed.append(f"{name} python block at line {line}:\\n{traceback.format_exc()}")
    finally:
        if "torch.distributed" in sys.modules:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
print("\\n".join(failed))
sys.exit(1 if failed else 0)
'''


def _python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line of the block's first code line, code) for every ```python block of ``path``."""
    text = path.read_text()
    blocks, pos = [], 0
    while (start := text.find("```python\n", pos)) != -1:
        body_start = start + len("```python\n")
        end = text.index("```", body_start)
        blocks.append((text.count("\n", 0, body_start) + 1, text[body_start:end]))
        pos = end + 3
    return blocks


def _names(code: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name)}


def test_readme_and_docs_python_blocks_run_as_written() -> None:
    """Every ```python block of the README and of docs/*.md, each in a fresh namespace, all in one
    subprocess (one interpreter start and one import of seqpart): no undefined names, no API
    drift. Trainer fragments get the trainer's context (above), nothing else."""
    jobs = []
    for path in [ROOT / "README.md", *DOCS]:
        name = str(path.relative_to(ROOT))
        for line, code in _python_blocks(path):
            preamble = TRAINER_CONTEXT if _names(code) & set(TRAINER_NAMES) else ""
            jobs.append((name, line, preamble, code))
    assert len(_python_blocks(ROOT / "README.md")) >= 2
    assert sum(name.startswith("docs") for name, *_ in jobs) >= len(DOCS) - 2
    if any(preamble for _, _, preamble, _ in jobs):
        pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- pages and links

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HISTORY = re.compile(r"\bissues?[- ]?#?\d+|\b(?:this|last|previous) session\b", re.IGNORECASE)


def _prose(path: Path) -> list[str]:
    """The lines of ``path`` outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    slugs = set()
    for line in _prose(path):
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def test_readme_is_a_front_page_linking_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES, "move the detail to a docs/ page"
    linked = {target.split("#", 1)[0] for target in _LINK.findall(readme)}
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in linked]
    assert not missing, f"docs pages not linked from the README: {missing}"


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for path in LINKED_FILES:
        for line in _prose(path):
            for target in _LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if not dest.exists():
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_docs_and_benchmark_output_speak_of_the_software_not_its_history() -> None:
    """No issue numbers or session narration where a reader has no tracker to look them up:
    each benchmark names the property it checks, each figure stands on its own."""
    texts = [*LINKED_FILES, *sorted((ROOT / "benchmarks").glob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in texts for n, line in enumerate(path.read_text().splitlines(), 1)
             if _HISTORY.search(line)]
    assert not found, "\n".join(found)
