"""The load search (LP dive and branch and price at each load): its claims against brute force."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.solver import check_plan, partition
from seqpart.solver.engines import load_search, prove
from seqpart.solver.engines.load_search import (
    FOUND,
    REFUTED,
    Exhaust,
    affordable,
    decide,
    search_loads,
)
from seqpart.solver.options import Budget, SolverOptions

from _brute import brute_force_min_max

#: A public bench batch (48 long sequences, 16 micro-batches, ~3 each) where local search and
#: CP-SAT stop 78 tokens above the optimum: the LP bound is 47017 and a plan meets it.
HARD = [
    29855, 29125, 28975, 26610, 26213, 25754, 25209, 25051, 24031, 23496, 22697, 22618, 22534,
    22345, 21073, 20837, 20630, 20393, 20254, 19818, 18120, 17506, 17321, 15880, 15581, 15487,
    15405, 15078, 12886, 12450, 12102, 10966, 9392, 9325, 8601, 7821, 7764, 7727, 6699, 6479,
    5307, 5181, 4544, 4109, 4039, 3879, 2134, 2079,
]
HARD_K, HARD_CAP, HARD_OPT = 16, 50314, 47017


def _instance(data: st.DataObject) -> tuple[list[int], int, int]:
    # Brute force enumerates k**n assignments: n <= 7 and k <= 4 keep it to milliseconds.
    lengths = data.draw(st.lists(st.integers(1, 40), min_size=2, max_size=7))
    k = data.draw(st.integers(1, min(4, len(lengths))))
    opt = brute_force_min_max(lengths, k, None)
    assert opt is not None
    return lengths, k, opt


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_each_decision_agrees_with_brute_force(data: st.DataObject) -> None:
    lengths, k, opt = _instance(data)
    z = data.draw(st.integers(max(lengths), sum(lengths)))
    for status, bins in (decide(lengths, k, z, Budget(10**9)), _exhaust(lengths, k, z)):
        assert status in (FOUND, REFUTED)  # small batches: always decided
        assert (status == FOUND) == (z >= opt)
        if status == FOUND:
            assert bins is not None
            check_plan(bins, lengths, k, z)


def _exhaust(lengths: list[int], k: int, z: int) -> tuple[str, list[list[int]] | None]:
    tree = Exhaust(lengths, k, z, Budget(10**9))
    status = tree.run()
    if status != FOUND:
        return status, None
    bins = tree.bins(lengths)
    while len(bins) < k:  # the tree may use fewer bins: split as the search does
        donor = max(range(len(bins)), key=lambda j: len(bins[j]))
        bins.append([bins[donor].pop()])
    return status, bins


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_search_claims_are_never_wrong(data: st.DataObject) -> None:
    lengths, k, opt = _instance(data)
    lower = max(max(lengths), -(-sum(lengths) // k))
    upper = data.draw(st.integers(opt, sum(lengths)))
    # Any allowance, down to none: whatever it establishes must hold.
    seconds = data.draw(st.sampled_from([1e-6, 0.001, 1.0]))
    found = search_loads(lengths, k, lower, upper, seconds)
    assert found.lower_bound <= opt
    if found.bins is not None:
        assert found.max_load is not None and opt <= found.max_load < upper
        check_plan(found.bins, lengths, k, found.max_load)
    if seconds == 1.0 and upper > opt:
        assert found.max_load == opt == found.lower_bound


def test_a_hard_batch_is_decided_at_its_lp_bound() -> None:
    # 47016 is refuted (the waste-limited LP) and a plan is found at 47017: optimal.
    found = search_loads(HARD, HARD_K, HARD_OPT - 1, 47095, 60.0)
    assert found.max_load == found.lower_bound == HARD_OPT
    assert found.bins is not None
    check_plan(found.bins, HARD, HARD_K, HARD_CAP)


def test_partition_proves_the_hard_batch_optimal() -> None:
    plan = partition(HARD, HARD_K, HARD_CAP, time_limit=10,
                     options=SolverOptions(deterministic=True))
    assert plan.status == "optimal" and max(plan.tokens) == HARD_OPT


def test_the_exhaustive_search_leaves_no_garbage_for_the_paused_collector() -> None:
    """partition pauses the cyclic collector; the enumeration's recursive closure (and the
    LP pricing's) would otherwise be reference cycles, collected all at once after the call."""
    tokens = [50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        statuses = [Exhaust(tokens, 4, z, Budget(10**9, None)).run() for z in (146, 150)]
        left = gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    assert statuses == [FOUND, FOUND]
    assert left == 0


def _spy_on_the_proofs(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """Record the plain LP's calls and the load search's allowances, calling through."""
    seen: dict[str, list[float]] = {"plain_lp": [], "load_search": []}
    plain, loads = prove.lp_load_bound, prove.search_loads

    def plain_spy(*args: Any, **kwargs: Any) -> int:
        seen["plain_lp"].append(1.0)
        return plain(*args, **kwargs)

    def loads_spy(tokens: list[int], k: int, lower: int, upper: int, seconds: float,
                  *args: Any) -> Any:
        seen["load_search"].append(seconds)
        return loads(tokens, k, lower, upper, seconds, *args)

    monkeypatch.setattr(prove, "lp_load_bound", plain_spy)
    monkeypatch.setattr(prove, "search_loads", loads_spy)
    return seen


def test_the_load_search_takes_the_plain_lps_turn_where_it_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In clock timing a 0.4 s call pays for the hard batch's root LP: the load search's
    stronger LP bisects the loads, so the plain LP is left out and its share is added."""
    seen = _spy_on_the_proofs(monkeypatch)
    limit = 0.4
    plan = partition(HARD, HARD_K, HARD_CAP, time_limit=limit)
    assert seen["plain_lp"] == []
    assert len(seen["load_search"]) == 1
    assert seen["load_search"][0] > prove.LOAD_SEARCH_SHARE * limit  # the LP's share added
    assert plan.lower_bound <= HARD_OPT <= max(plan.tokens)


def test_counted_work_keeps_the_plain_lp_where_the_root_lp_does_not_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At the counted rate 0.6 s does not pay for the root LP: the plain LP runs (its share
    holds 20 iterations), and the load search skips."""
    assert affordable(HARD, 47094, 0.35, Budget(1.0, by_clock=True))
    assert not affordable(HARD, 47094, 0.35, Budget(1.0))
    seen = _spy_on_the_proofs(monkeypatch)
    plan = partition(HARD, HARD_K, HARD_CAP, time_limit=0.6,
                     options=SolverOptions(deterministic=True))
    assert seen["plain_lp"] == [1.0]
    assert plan.lower_bound <= HARD_OPT <= max(plan.tokens)


def test_the_dive_before_the_exhaustive_search_gets_at_most_its_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a large allowance the dive's share is capped (it spends what it is given, and a
    60 s call had spent 11 s of dives on loads the exhaustive search refuted in 0.5 s)."""
    given: list[int] = []
    real = load_search.search_count

    def spy(tokens: list[int], z: int, k: int, start: Any, work: Budget, **kwargs: Any) -> Any:
        given.append(work.limit - work.used)
        return real(tokens, z, k, start, work, **kwargs)

    monkeypatch.setattr(load_search, "search_count", spy)
    work = Budget(100 * load_search.DIVE_MOST_WORK)
    status, bins = decide(HARD, HARD_K, HARD_OPT, work)
    assert status == FOUND and bins is not None
    check_plan(bins, HARD, HARD_K, HARD_OPT)
    assert given and given[0] <= load_search.DIVE_MOST_WORK
