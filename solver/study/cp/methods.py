"""The dynamic-CP methods, each run on one instance and scored the same way.

Shared by ``seqpart cp-study`` (:mod:`.study`) and ``benchmarks/bench_dynamic_cp.py``, so both
run the same baselines:

- ``plan_cp_step``: seqpart's planner (:func:`~seqpart.solver.dynamic_cp.plan_cp_step`);
- ``megatron_greedy``: Megatron-LM's ``default_dynamic_cp`` greedy, re-implemented;
- ``dp_balanced``: Megatron-LM's fixed-CP ``dp_balanced`` at each degree dividing ``n_gpus``
  that holds the longest sequence, the fastest one kept;
- ``fixed_cp``: seqpart's own ``plan_step`` at each such degree (the share of the budget the
  planner gives its fixed-CP starts, split among the degrees), the fastest one kept.

The two "best of the degrees" baselines keep the schedule fastest under the barrier model and
are scored under both sync models; ``plan_cp_step`` is planned for one sync model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ...dynamic_cp import (
    SYNCS,
    CPInstance,
    Steps,
    cp_lower_bound,
    dp_balanced_schedule,
    find_cp_violations,
    fixed_cp_schedule,
    fixed_degrees,
    make_cp_instance,
    megatron_dynamic_cp_schedule,
    plan_cp_step,
    schedule_time,
)
from ...options import SolverOptions
from ...tuning import CP_FIXED_SHARE as FIXED_SHARE  # the planner's: fixed_cp is its own start

__all__ = [
    "BASELINES",
    "CP_METHODS",
    "DEFAULT_CP_MODEL",
    "FIXED_SHARE",
    "TIMED",
    "MethodRun",
    "best_dp_balanced",
    "best_fixed_cp",
    "run_cp_method",
    "score",
]

#: The benchmark's cost (docs/dynamic-cp.md): ``24576*l + l^2`` per sequence (the attention
#: cost), 512 tokens' worth of overhead per micro-batch, a quarter of a token's linear cost per
#: KV token a GPU receives from its group.
DEFAULT_CP_MODEL: dict[str, Any] = {"cost": (24576, 1), "overhead": 512 * 24576, "cp_comm": 6144}
BASELINES = ("megatron_greedy", "dp_balanced", "fixed_cp")
CP_METHODS = ("plan_cp_step", *BASELINES)
#: The methods that spend a time limit: a study runs them apart, timed.
TIMED = ("plan_cp_step", "fixed_cp")


@dataclass
class MethodRun:
    """One method's schedule on one instance; ``detail`` says how it was made (the degree a
    fixed-CP baseline kept, the planner's status)."""

    steps: Steps
    detail: dict[str, Any] = field(default_factory=dict)


def _fastest(inst: CPInstance, found: list[tuple[int, Steps]]) -> tuple[int, Steps] | None:
    best: tuple[int, Steps] | None = None
    for c, steps in found:  # the first (smallest degree) wins a tie
        if best is None or schedule_time(inst, steps, "barrier") < schedule_time(inst, best[1], "barrier"):
            best = (c, steps)
    return best


def best_fixed_cp(inst: CPInstance, time_limit: float, options: SolverOptions | None = None
                  ) -> tuple[int, Steps] | None:
    """seqpart's fastest plan at one degree for every step (the degree and the schedule), or
    None when no degree has a plan that keeps every replica busy."""
    degs = fixed_degrees(inst)
    found = []
    for c in degs:
        steps = fixed_cp_schedule(inst, c, time_limit * FIXED_SHARE / len(degs), options)
        if steps is not None:
            found.append((c, steps))
    return _fastest(inst, found)


def best_dp_balanced(inst: CPInstance) -> tuple[int, Steps] | None:
    """Megatron-LM's ``dp_balanced`` at its fastest degree, or None where no degree works."""
    found = []
    for c in fixed_degrees(inst):
        try:
            found.append((c, dp_balanced_schedule(list(inst.lengths), inst.n_gpus, inst.m, c)))
        except ValueError:
            continue
    return _fastest(inst, found)


def run_cp_method(method: str, inst: CPInstance, time_limit: float,
                  options: SolverOptions | None = None) -> MethodRun:
    """``method``'s schedule for ``inst`` (``plan_cp_step`` plans for ``inst.sync``). Raises
    ValueError (:class:`~seqpart.solver.dynamic_cp.GreedyError` included) where the method
    has no schedule, with the reason."""
    if method == "plan_cp_step":
        plan = plan_cp_step(list(inst.lengths), inst.n_gpus, inst.m, degrees=list(inst.degrees),
                            cost=inst.cost, cp_comm=inst.cp_comm, overhead=inst.overhead,
                            sync=inst.sync, time_limit=time_limit, options=options)
        # Its bound can be above the model's (CP-SAT's, on small instances): the report uses it.
        return MethodRun(plan.steps, {"status": plan.status, "stopped_by": plan.stopped_by,
                                      "start": plan.method, "lower_bound": float(plan.lower_bound)})
    if method == "megatron_greedy":
        return MethodRun(megatron_dynamic_cp_schedule(list(inst.lengths), inst.n_gpus, inst.m))
    if method in ("dp_balanced", "fixed_cp"):
        best = best_dp_balanced(inst) if method == "dp_balanced" else best_fixed_cp(
            inst, time_limit, options)
        if best is None:
            raise ValueError(f"{method}: no degree in {fixed_degrees(inst)} keeps all "
                             f"{inst.n_gpus} GPUs busy with {len(inst.lengths)} sequences")
        return MethodRun(best[1], {"cp": best[0]})
    raise ValueError(f"unknown method {method!r}: choose from {', '.join(CP_METHODS)}")


def score(inst: CPInstance, steps: Steps, syncs: tuple[str, ...] = SYNCS) -> dict[str, Any]:
    """A schedule checked with the validator and timed under each sync model against the bound:
    ``valid``, ``why`` (the first violations), ``degrees`` used, ``groups_by_degree``,
    ``steps`` and per sync ``{time, bound, over_bound}`` (times as floats; the ratio exact)."""
    why = find_cp_violations(inst, steps)
    groups = Counter(len(ranks) for step in steps for ranks, _ in step)
    out: dict[str, Any] = {
        "valid": not why, "why": why[:2], "degrees": sorted(groups),
        "groups_by_degree": {str(c): groups[c] for c in sorted(groups)}, "steps": len(steps),
        "by_sync": {},
    }
    if why:
        return out
    for sync in syncs:
        timed = make_cp_instance(list(inst.lengths), inst.n_gpus, inst.m, degrees=list(inst.degrees),
                                 cost=inst.cost, cp_comm=inst.cp_comm, overhead=inst.overhead,
                                 sync=sync)
        t, bound = schedule_time(timed, steps), cp_lower_bound(timed)
        out["by_sync"][sync] = {"time": float(t), "bound": float(bound),
                                "over_bound": float(Fraction(t) / bound) if bound else None}
    return out
