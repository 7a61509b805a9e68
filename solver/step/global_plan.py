"""plan_global: the two-level proxy for a step (the lightest heaviest micro-batch at the smallest
count, then rank totals), kept as a cheap baseline and as a fallback for plan_step_across_ranks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...heuristics.inputs import as_lengths, as_positive_int
from .._partition import partition
from ..errors import InfeasibleError
from ..options import as_seconds
from ..plan import Plan, find_violations


def round_up(k: int, multiple_of: int) -> int:
    return -(-k // multiple_of) * multiple_of


def plan_global(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    multiple_of: int = 1,
    time_limit: float = 0.5,
    **partition_kwargs: Any,
) -> list[Plan]:
    """Plan a whole step: assign sequences to ``dp_size`` ranks and to micro-batches together.

    Every rank gets the same number ``m`` of micro-batches (the smallest multiple of
    ``multiple_of`` for which ``dp_size * m`` non-empty micro-batches under the cap exist), and:

    1. the ``dp_size * m`` micro-batches are made by ``partition(lengths, k=dp_size*m, cap)``,
       so the largest micro-batch load is minimal (proven when ``status == "optimal"``);
    2. they are dealt to ranks, exactly ``m`` each, by ``partition(loads, k=dp_size,
       equal_size=True)`` on their loads, which balances the per-rank totals in the chosen cost.

    Level 1 comes first: rank balance never costs a heavier micro-batch. Single process; see
    :func:`plan_global_across_ranks` for the collective form.

    Args:
        lengths: token count per sequence of the whole step (all ranks' samples).
        dp_size: number of data-parallel ranks.
        cap: max tokens per micro-batch; None for no cap (then ``m = multiple_of``).
        multiple_of: ``m`` is a multiple of this (virtual pipeline stages).
        time_limit: seconds for the whole call, shared by the count search, the split and the
            rank assignment (each step gets what the earlier ones left, at least 10 ms).
        **partition_kwargs: passed to the micro-batch ``partition`` (cost, oversize, groups,
            equal_size, engine, options).

    Returns:
        ``dp_size`` plans; plan r is rank r's, its bins hold indices into ``lengths``. Per-rank
        fields: ``bins``/``loads``/``tokens``/``max_load`` are that rank's own micro-batches;
        ``k`` is ``m``; ``lower_bound`` is the bound on the largest micro-batch load of the
        *whole step* and ``status`` is "optimal" when the step's largest load meets it, so a
        lightly loaded rank can show ``max_load < lower_bound`` (a negative ``gap``);
        ``k_status`` is "optimal" when ``m`` is the proven smallest (given ``multiple_of``),
        else "upper_bound", with ``k_lower_bound`` the proven floor on ``m``; ``notes`` give
        the step's largest load and the spread of rank totals.

    Raises:
        InfeasibleError: fewer sequences than ``dp_size * m`` (some micro-batch would be
            empty), or no split found / possible under the cap.
        ValueError / TypeError: bad arguments, naming the fix.
    """
    t0 = time.perf_counter()
    deadline = t0 + positive_seconds(time_limit)
    tokens = as_lengths(lengths)
    n = len(tokens)
    dp_size = as_positive_int(dp_size, "dp_size")
    cap = as_positive_int(cap, "cap", allow_none=True)
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    if "k" in partition_kwargs:
        raise TypeError("plan_global chooses the micro-batch count itself: drop the k= argument")
    if partition_kwargs.get("equal_size"):
        raise ValueError(
            "plan_global does not support equal_size=True (sample counts per micro-batch): "
            "use partition per rank for that"
        )
    if n < dp_size * multiple_of:
        raise InfeasibleError(
            f"{n} sequences cannot fill {dp_size} ranks x {multiple_of} non-empty micro-batches: "
            f"need at least {dp_size * multiple_of} sequences, or fewer ranks or a smaller "
            "multiple_of",
            proven=True,
        )

    def budget(share: float) -> float:
        return max(0.01, (deadline - time.perf_counter()) * share)

    step, m, m_floor = _smallest_step_split(tokens, dp_size, cap, multiple_of, budget, partition_kwargs)

    # Deal the micro-batches to ranks, m each, balancing rank totals (equal-size partition).
    if dp_size == 1:
        by_rank = [list(range(len(step.bins)))]
        assign_method = "single rank"
    else:
        assignment = partition(
            step.loads, dp_size, None, time_limit=budget(1.0), equal_size=True,
            engine=partition_kwargs.get("engine", "auto"),
            options=partition_kwargs.get("options"),
        )
        by_rank, assign_method = assignment.bins, assignment.method

    all_bins = [step.bins[b] for ranks in by_rank for b in ranks]
    found = find_violations(
        all_bins, tokens, dp_size * m, cap, oversize=step.oversize,
        groups=partition_kwargs.get("groups") or (),
    )
    if not found.ok or any(len(r) != m for r in by_rank):
        raise RuntimeError(f"seqpart produced an invalid global plan (please report): {found}")

    return _rank_plans(step, tokens, by_rank, m, m_floor, cap, dp_size, assign_method, t0)


def _smallest_step_split(
    tokens: np.ndarray, dp_size: int, cap: int | None, multiple_of: int,
    budget: Callable[[float], float], partition_kwargs: dict[str, Any],
) -> tuple[Plan, int, int]:
    """The step's micro-batches at the smallest per-rank count m that splits (m, its floor)."""
    n = len(tokens)
    # Smallest total count: the bound gives the floor on m, the search's plan the ceiling.
    search = partition(tokens, None, cap, time_limit=budget(0.4), **partition_kwargs)
    k_floor = search.k_lower_bound or search.k
    m_floor = round_up(-(-k_floor // dp_size), multiple_of)
    m_ceiling = round_up(-(-search.k // dp_size), multiple_of)
    if dp_size * m_floor > n:
        raise InfeasibleError(
            f"the cap needs at least {k_floor} micro-batches, so {dp_size} ranks need "
            f"{m_floor} each ({dp_size * m_floor} in all), but there are only {n} sequences: "
            "raise the cap, use fewer ranks, or add samples",
            proven=True,
        )
    step: Plan | None = None
    m = m_floor
    last: InfeasibleError | None = None
    while m <= m_ceiling and dp_size * m <= n:
        k = dp_size * m
        if search.k == k:
            step = search
            break
        try:
            step = partition(tokens, k, cap, time_limit=budget(0.6), **partition_kwargs)
            break
        except InfeasibleError as err:
            last = err
            m += multiple_of
    if step is None:
        if last is not None:
            raise last
        raise InfeasibleError(
            f"{dp_size} ranks x {m} micro-batches need {dp_size * m} sequences, only {n} given: "
            "raise the cap, use fewer ranks, or add samples",
            proven=True,
        )
    return step, m, m_floor


def _rank_plans(
    step: Plan, tokens: np.ndarray, by_rank: list[list[int]], m: int, m_floor: int,
    cap: int | None, dp_size: int, assign_method: str, t0: float,
) -> list[Plan]:
    """Each rank's share of the step as a Plan of its own, with the step's figures in its notes."""
    costs = step.cost.of(tokens)
    totals = [int(sum(step.loads[b] for b in ranks)) for ranks in by_rank]
    status = "optimal" if step.max_load <= step.lower_bound else "feasible"
    seconds = time.perf_counter() - t0
    plans = []
    for r, ranks in enumerate(by_rank):
        bins = sorted((step.bins[b] for b in ranks), key=lambda b: b[0])
        loads = [int(costs[b].sum()) for b in bins]
        mine = {i for b in bins for i in b}
        plans.append(
            Plan(
                bins=bins,
                loads=loads,
                tokens=[int(tokens[b].sum()) for b in bins],
                max_load=max(loads),
                lower_bound=step.lower_bound,
                status=status,
                method=f"plan_global[{step.method}; ranks: {assign_method}]",
                seconds=seconds,
                k=m,
                cap=cap,
                cost=step.cost,
                k_status="optimal" if m == m_floor else "upper_bound",
                k_lower_bound=m_floor,
                oversize=[i for i in step.oversize if i in mine],
                notes=[
                    *step.notes,
                    f"rank {r} of {dp_size}: total load {totals[r]}; step: largest micro-batch "
                    f"load {step.max_load} (bound {step.lower_bound}), rank totals "
                    f"{min(totals)}..{max(totals)}",
                ],
                stopped_by=step.stopped_by,
                bound_source=step.bound_source,
            )
        )
    return plans


def positive_seconds(time_limit: Any) -> float:
    seconds = as_seconds(time_limit, "time_limit")
    assert seconds is not None
    return seconds
