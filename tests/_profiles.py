"""Shared test data for cost profiles: one profile far from the defaults, and the bad profile
files every reader of a profile (drop-ins, CLI flags) must refuse with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

from seqpart.solver import CostProfile

#: Strongly quadratic, with a large fixed time per micro-batch: far from the defaults (tokens,
#: attention, 512 tokens of overhead), so a plan that honours it differs from one that does not.
PROFILE = CostProfile(overhead_s=5e-3, linear_s=1e-9, quadratic_s=1e-9, device="cpu",
                      dtype="float32", torch_version="2.13.0", model={"kind": "reference"})


def bad_profile_files(folder: Path) -> list[tuple[Path, str]]:
    """Profile paths in ``folder`` that a reader must refuse, each with words its error holds:
    a missing file, corrupt JSON, and a schema newer than this seqpart reads."""
    corrupt = folder / "corrupt.json"
    corrupt.write_text("{not json")
    newer = folder / "newer.json"
    newer.write_text(json.dumps({**PROFILE.to_json(), "schema_version": 99}))
    return [(folder / "missing.json", "does not exist"), (corrupt, "corrupt"),
            (newer, "newer than this seqpart reads")]
