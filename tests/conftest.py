"""Tests mirror the packages (tests/heuristics, tests/solver/...); tests/integration holds the ones
that start processes (the CLI, gloo ranks) or run the docs. Shared brute-force helpers live in
tests/_brute.py, importable from every folder."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
