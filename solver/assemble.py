"""Assembling ``partition``'s result: the engines' item-level plan expanded to the original
sequences, validated once, and summed exactly into a :class:`Plan`."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .errors import InvalidPlanError
from .options import BestPlan, Budget
from .plan import Plan, check_plan
from .problem import Items, Problem, bin_sums


def finish_plan(
    problem: Problem,
    items: Items,
    best: BestPlan,
    k: int,
    k_status: str,
    k_floor: int | None,
    t0: float,
    budget: Budget | None = None,
) -> Plan:
    """The item-level plan as a :class:`Plan` over the original sequences: expanded, checked
    by :func:`check_plan` (an invalid one is an engine's bug, raised as such), its loads
    summed exactly, its status set from the bound. ``t0`` is when the call started; ``budget``
    the call's, which says why the search ended (None: it ended on its own)."""
    assert best.bins is not None
    scratch: dict[str, Any] = {}
    flat = items.expand_flat(best.bins)  # one sequence per item: vectorised
    ends = None
    if flat is not None:
        bins, scratch["idx"], ends = flat
    else:
        bins = items.expand(best.bins) + [[i] for i in problem.oversize]
        bins.sort(key=lambda b: b[0])
    try:
        check_plan(
            bins, problem.tokens, k, problem.cap, oversize=problem.oversize,
            groups=problem.groups, equal_size=problem.equal_size, scratch=scratch,
            flat=scratch.get("idx"),
        )
    except InvalidPlanError as err:  # a bug in an engine, never the caller's fault
        raise RuntimeError(f"seqpart produced an invalid plan (please report): {err}") from err
    # Exact: int64 prefix sums on the fast path (every sum below 2**62), Python ints beyond.
    idx = scratch.get("idx")
    if idx is None:
        load_sums, token_sums = bin_sums(bins, problem.costs, problem.tokens)
    else:  # the validator's flattened indices: the bins are not flattened again
        if ends is None:
            ends = np.cumsum(np.fromiter(map(len, bins), dtype=np.int64, count=len(bins)))

        def per_bin(v: np.ndarray) -> np.ndarray:
            prefix = np.concatenate((np.zeros(1, dtype=v.dtype), np.cumsum(v[idx])))[ends]
            return np.diff(prefix, prepend=np.zeros(1, dtype=v.dtype))

        load_sums = per_bin(problem.costs)
        # Token costs are the token array itself (make_problem): summed once.
        token_sums = load_sums if problem.costs is problem.tokens else per_bin(problem.tokens)
    loads, tokens = load_sums.tolist(), token_sums.tolist()
    over_costs = [int(problem.costs[i]) for i in problem.oversize]
    lower = max([best.lower_bound, *over_costs])
    source = best.bound_source if lower == best.lower_bound else "oversize"
    max_load = max(loads)
    proven = max_load <= lower and k_status != "upper_bound"
    stopped_by = "proof" if proven else "complete"
    if budget is not None:
        stopped_by = budget.stop_reason(proven)
    return Plan(
        bins=bins,
        loads=loads,
        tokens=tokens,
        max_load=max_load,
        lower_bound=lower,
        status="optimal" if max_load <= lower else "feasible",
        method=best.method,
        seconds=time.perf_counter() - t0,
        k=k,
        cap=problem.given_cap,
        cost=problem.cost,
        k_status=k_status,
        k_lower_bound=k_floor if k_floor is not None else None,
        oversize=list(problem.oversize),
        notes=list(best.notes),
        stopped_by=stopped_by,
        bound_source=source,
    )
