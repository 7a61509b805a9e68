"""plan_step's CP-SAT phase on tiny instances, over its state (:class:`~.state.StepState`)."""

from __future__ import annotations

from ..starts import Row
from ..tiny_cpsat import solve_step_exactly
from .state import StepState

__all__ = ["cp_sat_on_tiny_instances"]


def cp_sat_on_tiny_instances(state: StepState) -> dict[int, int]:
    """CP-SAT improves and proves, count by count (the formula's optimum: with pp > 1 a
    candidate for the exact choice, and its bounds bound the formula only). Returns each
    count's proven bound."""
    proven = dict(state.bounds)
    best, inst = state.best, state.inst
    state.clock_short |= state.use_exact and state.out_of_clock()
    if state.use_exact and not state.out_of_clock():
        exact = solve_step_exactly(inst, state.bounds, best.objective, state.deadline,
                                   state.seconds / 2, state.options)
        if exact is not None:
            state.interrupted |= exact.interrupted
            state.clock_short |= exact.clock_cut
            state.work_short |= exact.unsolved > 0
            if inst.pp == 1:
                proven = exact.bounds
                if min(proven.values()) > min(state.bounds.values()):
                    state.bound_source = "cpsat"
            state.notes += exact.notes
            if exact.mb_of is not None and exact.objective is not None and state.usable(exact.m):
                state.finals.append(Row(exact.objective, len(state.pool), "cp-sat", exact.m,
                                       exact.mb_of))
                if best.objective is None or exact.objective < best.objective:
                    best.objective, best.m, best.mb_of, best.method = (
                        exact.objective, exact.m, exact.mb_of, "cp-sat")
    return proven
