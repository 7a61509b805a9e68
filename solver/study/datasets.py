"""Bundled real length files, and generators of long-tail RL batches for studies and benchmarks.

This is a loader, so it reads files (the package's own data, via importlib.resources); the
partition core never imports it. The bundled files are trimmed copies of the project's shared
data: per-sample token counts with their source, licence and unit, no text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

_DATA_PACKAGE = "seqpart.solver"
_DATA_DIR = "data"

#: DAPO's published rollout shape: prompt cap 2,048 tokens, response cap 20,480.
RL_PROMPT_CAP = 2048
RL_RESPONSE_CAP = 20480


@dataclass(frozen=True)
class Dataset:
    """One bundled length file: ``lengths[i]`` is prompt + response tokens of sample i."""

    name: str
    lengths: tuple[int, ...]
    source: str
    license: str
    unit: str
    kind: str = ""
    truncated: tuple[int, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.lengths)


def _data_files() -> dict[str, Any]:
    root = resources.files(_DATA_PACKAGE).joinpath(_DATA_DIR)
    return {
        entry.name.removesuffix(".json"): entry
        for entry in root.iterdir()
        if entry.name.endswith(".json")
    }


def list_datasets() -> list[str]:
    """Names of the bundled length files, sorted (file names without ``.json``)."""
    return sorted(_data_files())


def load_dataset(name: str) -> Dataset:
    """Load a bundled length file by name (see :func:`list_datasets`)."""
    files = _data_files()
    if name not in files:
        raise ValueError(
            f"no bundled dataset {name!r}: choose one of {', '.join(sorted(files))}"
        )
    raw = json.loads(files[name].read_text(encoding="utf-8"))
    known = {"source", "license", "unit", "kind", "lengths", "truncated", "n"}
    return Dataset(
        name=name,
        lengths=tuple(int(x) for x in raw["lengths"]),
        source=str(raw.get("source", "")),
        license=str(raw.get("license", "")),
        unit=str(raw.get("unit", "")),
        kind=str(raw.get("kind", "")),
        truncated=tuple(int(x) for x in raw["truncated"]) if "truncated" in raw else None,
        extra={key: value for key, value in raw.items() if key not in known},
    )


def sample_batch(lengths: Sequence[int], n: int, rng: np.random.Generator) -> list[int]:
    """``n`` lengths drawn from a dataset: without replacement when it is large enough."""
    pool = np.asarray(lengths, dtype=np.int64)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    picks = rng.choice(len(pool), size=n, replace=n > len(pool))
    return [int(x) for x in pool[picks]]


def rl_batch(
    n: int,
    rng: np.random.Generator,
    *,
    prompt_cap: int = RL_PROMPT_CAP,
    response_cap: int = RL_RESPONSE_CAP,
    truncated_share: float = 0.25,
    aborted_share: float = 0.10,
    group_size: int = 16,
    median_response: float | None = None,
) -> list[int]:
    """One long-tail RL rollout batch of ``n`` prompt + response lengths.

    Shape, after published RL figures (see the shared data README): responses follow a
    lognormal body with a long right tail, ``truncated_share`` of them sit exactly at the
    response cap (the spike of runaway generations), and ``aborted_share`` are short aborted or
    partial samples (1-256 tokens), as partial rollouts produce. Responses come in groups of
    ``group_size`` per prompt (GRPO-style), sharing the prompt's length.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= truncated_share + aborted_share <= 1:
        raise ValueError("truncated_share + aborted_share must lie in [0, 1]")
    median = median_response if median_response is not None else response_cap / 6
    n_prompts = -(-n // group_size)
    prompts = np.clip(rng.lognormal(np.log(300), 0.6, n_prompts), 16, prompt_cap)
    prompt = np.repeat(prompts.astype(np.int64), group_size)[:n]
    response = np.clip(rng.lognormal(np.log(median), 0.9, n), 1, response_cap)
    kind = rng.random(n)
    response[kind < truncated_share] = response_cap
    aborted = (kind >= truncated_share) & (kind < truncated_share + aborted_share)
    response[aborted] = rng.integers(1, 257, int(aborted.sum()))
    return [int(x) for x in prompt + response.astype(np.int64)]
