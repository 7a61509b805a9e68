"""plan_step's starting schedules, by role:

* :mod:`~seqpart.solver.step.starts.constructions`: seqpart's constructions at a given count
  per rank (rank totals balanced first, micro-batches first, packed for a target step);
* :mod:`~seqpart.solver.step.starts.split`: a rank's sequences into its micro-batches, and the
  checks of a start;
* :mod:`~seqpart.solver.step.starts.trainers`: the trainers' schedules (the baselines' functions) as
  starts, within the budget.
"""

from __future__ import annotations

from .constructions import (
    CONSTRUCTIONS,
    Row,
    from_schedule,
    micro_first,
    rank_first,
    rank_first_room,
)
from .split import split_ranks

__all__ = ["CONSTRUCTIONS", "Row", "from_schedule", "micro_first", "rank_first",
           "rank_first_room", "split_ranks"]
