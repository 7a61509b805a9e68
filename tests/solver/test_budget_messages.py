"""Messages say which budget ended a search (the work estimate or the clock) and after how long."""

from __future__ import annotations

import re

import numpy as np
import pytest

from seqpart.heuristics import min_bins_lower_bound
from seqpart.solver import InfeasibleError, SolverOptions, partition


def _tight() -> tuple[list[int], int, int]:
    """The smallest count under a tight cap: LPT's repair needs more than a millisecond."""
    lengths = np.random.default_rng(0).integers(1000, 9000, 400).tolist()
    return lengths, min_bins_lower_bound(lengths, 12000), 12000


def test_no_plan_says_the_work_budget_ran_out_and_after_how_long() -> None:
    lengths, k, cap = _tight()
    with pytest.raises(InfeasibleError) as err:
        partition(lengths, k, cap, time_limit=0.001,
                  options=SolverOptions(deterministic=True))
    text = str(err.value)
    # It used to say "was found in 0.001s" whatever had run out, and whenever.
    assert "the work budget for time_limit=0.001s ran out after" in text
    assert re.search(r"after \d+(\.\d+)? (ms|s) of wall time", text)
    assert "work is estimated, not timed" in text
    assert "heuristics stopped: their work budget ran out" in text


def test_a_plan_cut_by_the_work_budget_says_so() -> None:
    lengths, k, cap = _tight()
    # Strict timing: the work estimate alone decides, so this run is the same everywhere. The
    # note used to say "stopped by the time limit" though the call ended well before it.
    plan = partition(lengths, k + 3, cap, time_limit=0.01,
                     options=SolverOptions(deterministic=True))
    notes = " ".join(plan.notes)
    assert "by the time limit" not in notes
    assert "heuristics stopped: their work budget ran out" in notes
    assert "time_limit=0.01s" in notes and "a call can end before time_limit" in notes
