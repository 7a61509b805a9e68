"""plan_step's starts phase, over its state (:class:`~.state.StepState`): seqpart's constructions
at several counts, best bound first (``starts_at_counts``); at cluster scale with pp > 1 one
construction's cheap split at more counts (``counts_on_shared_ranks``); the capped balancer when
every construction broke the cap (``capped_balancer_when_no_start``); and the steps they share
(``build_next``: one count's constructions; ``count_fits``: whether the clock leaves a count its
time; ``drop_hopeless``)."""

from __future__ import annotations

import time

from ..budget import (
    BUILD_SHARE,
    COUNTS_BEFORE_CLOCK,
    FIRST_BUILD_SECONDS_PER_SEQUENCE,
    FIRST_BUILD_SECONDS_PER_SEQUENCE_PP,
    SPLIT_SECONDS_PER_SEQUENCE,
    SPLIT_WORK_PER_SEQUENCE,
)
from ..makespan import count_penalty
from ..starts import CONSTRUCTIONS, micro_first, rank_first
from .state import StepState

__all__ = ["build_next", "capped_balancer_when_no_start", "count_fits", "counts_on_shared_ranks",
           "drop_hopeless", "starts_at_counts"]


def count_fits(state: StepState) -> bool:
    """Whether the clock leaves a count the time it needs before it is begun: a whole
    count's constructions, or only the first's while none of seqpart's has given a start
    yet (with pp > 1, the cheapest's, before the exact makespan's deadline)."""
    if state.constructed:
        return not state.out_of_clock(max(state.nominal_build, state.count_wall))
    if state.inst.pp == 1:
        return not state.out_of_clock(FIRST_BUILD_SECONDS_PER_SEQUENCE * state.inst.n)
    # With shared ranks, rank_first's are made already: only its split is left to run.
    first = SPLIT_SECONDS_PER_SEQUENCE if state.shared_ranks else FIRST_BUILD_SECONDS_PER_SEQUENCE_PP
    return state.final_deadline is None or (
        time.perf_counter() + first * state.inst.n <= state.final_deadline)


def build_next(state: StepState) -> None:
    m = state.pending.pop(0)
    if not state.usable(m):
        return
    state.tried += 1
    began_count = time.perf_counter()
    longest = 0.0  # this count's longest construction so far
    # Until one of seqpart's constructions gave a start, they may run into the exact phase's
    # share (with pp > 1; see count_fits): a construction that checks its time sees that.
    until = state.deadline if state.constructed else state.final_deadline
    for make in CONSTRUCTIONS:
        # Once a construction gave a valid start, the next only while twice the longest so
        # far fits the clock (the given and trainers' starts do not count: ours are usually
        # far better; the constructions' costs differ by about 2x at most).
        if state.constructed and state.out_of_clock(2 * longest):
            break
        began = time.perf_counter()
        for method, mb_of in make(state.inst, m, state.seconds, state.bounds[m], until):
            state.add(method, m, mb_of)
        longest = max(longest, time.perf_counter() - began)
        state.spent += state.build // len(CONSTRUCTIONS)
    state.count_wall = max(state.count_wall, time.perf_counter() - began_count)


def drop_hopeless(state: StepState) -> None:
    # Both sides weighed by what the schedule makes of the count (1 when pp == 1).
    inst, model, bounds, pending = state.inst, state.model, state.bounds, state.pending
    rows = [(row.objective, row.m) for row in state.pool]
    if state.best.objective is not None:
        rows.append((state.best.objective, state.best.m))
    if not rows:
        return
    top = min(obj * count_penalty(inst, model, m) for obj, m in rows)
    while pending and bounds[pending[0]] * count_penalty(inst, model, pending[0]) >= top:
        pending.pop(0)


def starts_at_counts(state: StepState) -> None:
    """Starts at several counts before any search: with pp > 1 the bounds of neighbouring
    counts are close, and the constructions' own step times separate them better. Until a
    construction gave a valid start the clock is not looked at for the first
    ``COUNTS_BEFORE_CLOCK`` counts (ours are usually far better than the given and the
    trainers' starts; a plan beats an error), unless a start is at hand and a count's
    nominal build takes more than twice the whole time (n=262,144 in 1 s)."""
    forced = not state.pool or state.nominal_build <= 2 * state.seconds
    while state.pending and (
        (forced and not state.constructed and state.tried < COUNTS_BEFORE_CLOCK)
        or count_fits(state)
    ):
        drop_hopeless(state)
        if not state.pending or (state.constructed
                                and state.spent + state.build > BUILD_SHARE * state.budget):
            break
        if (state.constructed and state.deadline is not None
                and time.perf_counter() - state.t0 > BUILD_SHARE * state.seconds):
            state.clock_cut = True  # a slow machine: leave the rest of the time to the search
            break
        build_next(state)


def counts_on_shared_ranks(state: StepState) -> None:
    """pp > 1 at cluster scale (``shared_ranks``), once a construction gave a start:
    rank_first's split of its shared ranks at the next counts, in their order, while one
    more split (the longest so far, at least ``SPLIT_SECONDS_PER_SEQUENCE`` a sequence)
    ends within the first half of the exact makespan's share (the other half evaluates
    and orders the candidates; repeatable: ``SPLIT_WORK_PER_SEQUENCE`` within the work
    budget). The exact makespan then weighs the best start of each count:
    the formula that ranks the pool is neither exact nor a bound at pp > 1, and on
    long-tail batches it prefers the smallest count."""
    if not state.shared_ranks or not state.constructed:
        return
    inst = state.inst
    longest = SPLIT_SECONDS_PER_SEQUENCE * inst.n
    while state.pending:
        state.fit_final_deadline()
        if state.final_deadline is None:
            if state.spent + SPLIT_WORK_PER_SEQUENCE * inst.n > state.budget:
                break
        elif time.perf_counter() + longest > _half_of_the_exact_share(state):
            state.clock_cut = True
            break
        m = state.pending.pop(0)
        if not state.usable(m):
            continue
        began = time.perf_counter()
        state.tried += 1
        for method, mb_of in rank_first(inst, m, state.seconds, shared_only=True):
            state.add(method, m, mb_of)
        state.spent += SPLIT_WORK_PER_SEQUENCE * inst.n
        longest = max(longest, time.perf_counter() - began)


def _half_of_the_exact_share(state: StepState) -> float:
    assert state.deadline is not None and state.final_deadline is not None
    return state.deadline + max(0.0, state.final_deadline - state.deadline) / 2


def capped_balancer_when_no_start(state: StepState) -> None:
    """No start yet (every construction broke the cap): the capped balancer, count by
    count, from the smallest; it always finds a split when one is easy to find."""
    for j, m in enumerate(m for m in sorted(state.bounds) if state.usable(m)):
        if state.pool or (j and state.out_of_clock()):
            break
        for method, mb_of in micro_first(state.inst, m, state.seconds, repair=True):
            state.add(method, m, mb_of)
