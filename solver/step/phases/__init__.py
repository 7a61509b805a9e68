"""plan_step's search, one module per phase over one state.

- :mod:`.state`: :class:`StepState`, the search's state (the call's inputs, its budget and
  deadlines, the pool of starts, the searches' results, the best so far, what ended it short)
  and the steps the phases share;
- :mod:`.run`: :class:`StepSearch`, the phases in order over that state;
- :mod:`.starts`: seqpart's constructions at several counts;
- :mod:`.formula_search`: local search on the closed formula, and the clock's time left;
- :mod:`.tiny_exact`: CP-SAT on tiny instances;
- :mod:`.trainer_starts`: the given and the trainers' schedules;
- :mod:`.exact_choice`: with pp > 1, the choice by the exact pipeline makespan and its moves;
- :mod:`.by_count`: with pp > 1, each count searched on its own (:func:`plan_by_count`, what
  :func:`~seqpart.solver.step.plan_step` calls).
"""

from .by_count import plan_by_count
from .run import StepSearch
from .state import StepState

__all__ = ["StepSearch", "StepState", "plan_by_count"]
