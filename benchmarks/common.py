"""Shared benchmark plumbing: instances, long-tail RL batch generators, timing and reporting.

Nothing here is timed itself; the bench scripts time only the calls they compare.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The repository root (benchmarks/ lives directly under it).
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INSTANCES = REPO_ROOT / ".." / "shared" / "bench" / "instances.json"
DEFAULT_DATA_DIR = REPO_ROOT / ".." / "shared" / "data"

#: Batch sizes of the online (20 ms) benchmarks.
BATCH_SIZES = (64, 256, 1024, 2048)
#: Time buckets by number of sequences: (label, lowest n, highest n).
N_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("n<=64", 1, 64),
    ("65-256", 65, 256),
    ("257-1023", 257, 1023),
    ("1024-2047", 1024, 2047),
    ("2048+", 2048, 10**9),
)


@dataclass(frozen=True)
class Instance:
    """One partitioning problem. ``k=None`` means the smallest feasible k."""

    name: str
    lengths: list[int]
    cap: int | None
    k: int | None
    source: str  # "bench", "generated" or "real"

    @property
    def n(self) -> int:
        return len(self.lengths)


def resolve_path(path: str | Path) -> Path:
    """A user path as given, or relative to the repo root when it is not found from the cwd."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    return REPO_ROOT / p


def add_instances_argument(parser: argparse.ArgumentParser) -> None:
    """``--instances``, the bench instances file, as every benchmark that reads it names it."""
    parser.add_argument("--instances", default=str(DEFAULT_INSTANCES),
                        help="bench instances JSON (default: ../shared/bench/instances.json "
                        "relative to the repo root)")


def load_instances(path: str | Path = DEFAULT_INSTANCES) -> list[Instance]:
    """The shared bench instances (``{"instances": [{name, lengths, cap, k}]}``)."""
    p = resolve_path(path)
    if not p.exists():
        raise SystemExit(f"instances file {p} not found: pass --instances PATH")
    with p.open() as f:
        raw = json.load(f)
    return [
        Instance(
            name=str(r["name"]),
            lengths=[int(x) for x in r["lengths"]],
            cap=None if r.get("cap") is None else int(r["cap"]),
            k=None if r.get("k") is None else int(r["k"]),
            source="bench",
        )
        for r in raw["instances"]
    ]


def trainer_first_fit_count(lengths: Sequence[int], cap: int) -> int:
    """Micro-batch count as trainers compute it: first-fit in arrival order, sums only.

    A sequence over the cap opens a bin of its own (no error), as in the trainers.
    """
    sums: list[int] = []
    for length in lengths:
        for b, s in enumerate(sums):
            if s + length <= cap:
                sums[b] = s + length
                break
        else:
            sums.append(length)
    return len(sums)


# --- long-tail RL batch generators ----------------------------------------------------------


@dataclass(frozen=True)
class RLShape:
    """How one family of RL rollout batches looks, and the trainer cap it is packed under.

    ``truncate_total``: the limit is on prompt + response (a context cap), so every truncated
    sample has exactly ``context_cap`` tokens; otherwise the response is capped and truncated
    totals vary with the prompt (verl/slime ``max_response_length``).
    """

    name: str
    prompt_cap: int
    response_cap: int
    max_tokens_per_gpu: int
    truncate_total: bool = False
    body_median_frac: float = 0.25  # median completed response as a share of the response cap
    body_sigma: float = 0.9
    truncated_share: tuple[float, float] = (0.20, 0.35)
    aborted_share: tuple[float, float] = (0.05, 0.15)

    @property
    def context_cap(self) -> int:
        return self.prompt_cap + self.response_cap


#: Caps like trainers' ``max_tokens_per_gpu``; every shape's longest sample fits its cap.
RL_SHAPES: tuple[RLShape, ...] = (
    RLShape("resp8k@16k", prompt_cap=1024, response_cap=8192, max_tokens_per_gpu=16384),
    RLShape(
        "ctx16k@32k", prompt_cap=2048, response_cap=14336, max_tokens_per_gpu=32768,
        truncate_total=True,
    ),
    # DAPO-like: prompt cap 2k, response cap 20k.
    RLShape("dapo20k@64k", prompt_cap=2048, response_cap=20480, max_tokens_per_gpu=65536),
)


def rl_batch(n: int, shape: RLShape, rng: np.random.Generator) -> list[int]:
    """One long-tail RL batch of ``n`` total lengths (prompt + response tokens).

    Three kinds of sample, shuffled into arrival order: a lognormal body of completed responses,
    a spike of truncated ones at the response (or context) cap, 20-35% of the batch, and short
    aborted ones (partial rollouts cut off early).
    """
    prompts = np.clip(np.rint(rng.lognormal(math.log(300), 0.6, n)), 16, shape.prompt_cap)
    prompts = prompts.astype(np.int64)
    share_trunc = rng.uniform(*shape.truncated_share)
    share_abort = rng.uniform(*shape.aborted_share)
    kind = rng.choice(3, size=n, p=[1 - share_trunc - share_abort, share_trunc, share_abort])
    median = shape.body_median_frac * shape.response_cap
    body = np.rint(rng.lognormal(math.log(median), shape.body_sigma, n))
    body = np.clip(body, 1, shape.response_cap - 1).astype(np.int64)
    aborted = rng.integers(1, max(2, shape.response_cap // 20), n)
    response = np.where(kind == 0, body, np.where(kind == 2, aborted, shape.response_cap))
    total = prompts + response
    if shape.truncate_total:
        total = np.where(kind == 1, shape.context_cap, np.minimum(total, shape.context_cap - 1))
    return [int(x) for x in total]


def generated_instances(
    sizes: Iterable[int], seeds: int, shapes: Sequence[RLShape] = RL_SHAPES, base_seed: int = 0
) -> list[Instance]:
    """Generated batches with k = the trainer's first-fit count under ``max_tokens_per_gpu``."""
    out: list[Instance] = []
    for si, shape in enumerate(shapes):
        for n in sizes:
            for s in range(seeds):
                rng = np.random.default_rng([base_seed, si, n, s])
                lengths = rl_batch(n, shape, rng)
                cap = shape.max_tokens_per_gpu
                k = trainer_first_fit_count(lengths, cap)
                out.append(Instance(f"gen/{shape.name}/n{n}/s{s}", lengths, cap, k, "generated"))
    return out


#: Caps tried for real-data batches; the smallest two that hold the longest sample are used.
REAL_CAPS = (4096, 8192, 16384, 32768, 65536)


def real_instances(
    data_dir: str | Path, sizes: Iterable[int], seeds: int, base_seed: int = 1
) -> list[Instance]:
    """Batches drawn (seeded) from the real length files, k = trainer first-fit count."""
    d = resolve_path(data_dir)
    files = sorted(d.glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json length files in {d}: pass --data-dir PATH")
    out: list[Instance] = []
    for fi, path in enumerate(files):
        with path.open() as f:
            pool = np.asarray(json.load(f)["lengths"], dtype=np.int64)
        for n in sizes:
            for s in range(seeds):
                rng = np.random.default_rng([base_seed, fi, n, s])
                lengths = rng.choice(pool, size=n, replace=n > len(pool)).tolist()
                caps = [c for c in REAL_CAPS if c >= max(lengths)][:2]
                cap = caps[s % len(caps)]
                k = trainer_first_fit_count(lengths, cap)
                out.append(Instance(f"real/{path.stem}/n{n}/s{s}/cap{cap}", lengths, cap, k, "real"))
    return out


# --- timing and statistics -----------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[Any, float, BaseException | None]:
    """(result, wall seconds, exception) of one call; garbage collected first so one method
    does not pay for another's garbage."""
    gc.collect()
    t0 = time.perf_counter()
    try:
        result = fn()
    except Exception as err:  # recorded and reported, never hidden
        return None, time.perf_counter() - t0, err
    return result, time.perf_counter() - t0, None


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=float), q))


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def bucket_of(n: int) -> str:
    for label, lo, hi in N_BUCKETS:
        if lo <= n <= hi:
            return label
    raise ValueError(f"n={n} is in no bucket")


def machine_header(argv: Sequence[str]) -> str:
    """Command line and machine, printed at the top of every benchmark run."""
    import ortools

    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return "\n".join(
        [
            "command: " + " ".join([Path(sys.executable).name, *argv]),
            "seqpart: " + _code_version(),
            f"machine: {usable} usable cores (os.cpu_count={os.cpu_count()}), {cpu}",
            f"python {platform.python_version()}, numpy {np.__version__}, "
            f"ortools {ortools.__version__}, {platform.platform()}",
        ]
    )


def _code_version() -> str:
    """Git commit of the code under test, and whether the engine code has local changes."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "solver", "heuristics"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "commit unknown (no git)"
    note = " + uncommitted or untracked files in solver/ or heuristics/" if dirty else ""
    return f"commit {commit}{note}"


def run_at_once(command: Sequence[str], processes: int) -> list[str]:
    """``command`` in ``processes`` processes started together (they load the machine for each
    other); their standard outputs, in start order. Exits naming a worker that failed."""
    procs = [subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(processes)]
    outs = [proc.communicate() for proc in procs]  # all waited for before any failure is raised
    for proc, (_, stderr) in zip(procs, outs, strict=True):
        if proc.returncode:
            raise SystemExit(f"worker failed:\n{stderr}")
    return [stdout for stdout, _ in outs]


def fmt_ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def fmt_ratio(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return "-"
    return f"{x:.3f}x" if x < 10 else f"{x:.1f}x"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain fixed-width table: first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for j, r in enumerate([header, *rows]):
        cells = [
            str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def write_json(path: str | Path, payload: Any) -> None:
    with Path(path).open("w") as f:
        json.dump(payload, f, indent=1, default=str)
