"""The Karmarkar-Karp ranks that several step starts share, and the count order they give."""

from __future__ import annotations

import importlib
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics.kernels import karmarkar_karp_lists
from seqpart.solver import SolverOptions
from seqpart.solver.step import plan_step
from seqpart.solver.step.model import find_schedule_violations, make_instance
from seqpart.solver.step.phases import StepSearch
from seqpart.solver.step.phases.starts import counts_on_shared_ranks, starts_at_counts
from seqpart.solver.step.pipeline import DEFAULT_MODEL
from seqpart.solver.step.starts import micro_first, rank_first
from seqpart.solver.step.starts.ranks import counts_by_ranks, kk_ranks
from seqpart.solver.step.starts.trainers import trainer_starts

_KK = importlib.import_module("seqpart.heuristics._karmarkar_karp")


@settings(max_examples=60, deadline=None)
@given(k=st.sampled_from([64, 65, 96, 128]), runs=st.integers(1, 12),
       top=st.sampled_from([1, 3, 1000, 10**12]), seed=st.integers(0, 2**32 - 1))
def test_equal_count_numpy_gives_the_list_forms_bins(k: int, runs: int, top: int, seed: int,
                                                      ) -> None:
    cost = np.random.default_rng(seed).integers(0, top + 1, size=k * runs).tolist()
    fast = karmarkar_karp_lists(cost, [1] * len(cost), k, runs)
    old = _KK._NUMPY_EQUAL_MIN_BINS
    try:
        _KK._NUMPY_EQUAL_MIN_BINS = 10**9  # the list form
        slow = karmarkar_karp_lists(cost, [1] * len(cost), k, runs)
    finally:
        _KK._NUMPY_EQUAL_MIN_BINS = old
    assert fast == slow
    assert sorted(i for b in fast for i in b) == list(range(len(cost)))


def test_equal_count_sums_past_int64_take_the_exact_list_form() -> None:
    cost = [2**62 + j for j in range(128)]
    bins = karmarkar_karp_lists(cost, [1] * 128, 64, 2)
    assert sorted(len(b) for b in bins) == [2] * 64
    sums = [sum(cost[i] for i in b) for b in bins]
    assert max(sums) - min(sums) <= 64  # Python ints: nothing wrapped


def test_shared_ranks_are_computed_once_and_copied() -> None:
    inst = make_instance(list(range(1, 257)), 8, 4096)
    first = kk_ranks(inst, equal=True)
    first[0].append(-1)  # a split may move sequences: the shared copy must not see it
    again = kk_ranks(inst, equal=True)
    assert -1 not in again[0]
    assert sorted(i for r in again for i in r) == list(range(256))
    assert "kk_ranks_equal" in inst.shared and "kk_ranks" not in inst.shared


def test_verl_start_is_the_same_on_shared_ranks() -> None:
    lengths = np.random.default_rng(3).integers(100, 4000, size=512).tolist()
    plain = trainer_starts(make_instance(lengths, 8, 8192))
    inst = make_instance(lengths, 8, 8192)
    kk_ranks(inst, equal=True)  # made first, by rank_first
    assert trainer_starts(inst) == plain


def test_counts_by_ranks_is_the_per_rank_estimate() -> None:
    lengths = np.random.default_rng(5).integers(100, 9000, size=96).tolist()
    inst = make_instance(lengths, 4, 16384, cost=(10, 1), overhead=500, pp=3, vpp=2)
    ranks = kk_ranks(inst, equal=True)
    counts = inst.feasible_ms()
    got = counts_by_ranks(inst, ranks, counts)
    for m in counts:
        want = 0
        for r in ranks:
            s = sum(inst.costs[i] for i in r) + m * 500
            h = max(inst.costs[i] for i in r) + 500
            want = max(want, 2 * s + 2 * max(h, -(-s // m)))
        assert got[m] == want


def test_counts_by_ranks_is_exact_past_int64() -> None:
    inst = make_instance([10**6] * 8, 2, None, cost=(10**13, 10**3))
    got = counts_by_ranks(inst, kk_ranks(inst, equal=True), [1, 2])
    assert got[1] == 4 * (10**13 * 10**6 + 10**3 * 10**12)
    assert got[1] > 2**63


def test_shared_only_split_skips_the_room_fallback() -> None:
    # Karmarkar-Karp's equal counts break the cap here at pp > 1, where rank_first falls back
    # on the room-keeping balance (0.5 s at n = 262,144); its cheap form does not.
    lengths = [4000, 190, 4000, 277, 345, 889, 1266, 507, 89, 108, 1842, 352, 181, 2038, 270,
               4000, 65, 143, 2319, 99, 289, 4000, 842, 195, 638, 2564, 374, 50, 211, 4000, 184]
    inst = make_instance(lengths, 3, 4096, pp=2)
    assert [method for method, _ in rank_first(inst, 3)] == ["rank_first_room"]
    assert rank_first(inst, 3, shared_only=True) == []


def test_micro_first_gives_way_when_its_time_is_past_the_deadline() -> None:
    inst = make_instance(list(range(1, 65)), 4, 512)
    assert micro_first(inst, 2, deadline=time.perf_counter() - 1.0) == []
    assert micro_first(inst, 2) != []


@pytest.mark.parametrize("pp", [2, 4])
def test_cluster_scale_builds_counts_on_shared_ranks_in_their_order(pp: int) -> None:
    # A limit short enough that the count bounds' rank-maxima refinement is left out: the
    # counts follow the shared ranks' estimate, and once a construction gave a start, each
    # further count costs one split of the shared ranks (repeatable mode: work units).
    rng = np.random.default_rng(11)
    lengths = np.minimum(rng.lognormal(7, 1.2, size=2048).astype(int) + 16, 8192).tolist()
    inst = make_instance(lengths, 256, 8192, pp=pp, cost=(64, 1), overhead=64 * 512)
    search = StepSearch(inst, 0.01, time.perf_counter(), SolverOptions(deterministic=True),
                        "auto", False, DEFAULT_MODEL)
    assert search.shared_ranks
    estimate = counts_by_ranks(inst, kk_ranks(inst, equal=True), list(search.bounds))
    assert search.pending[0] == min(search.bounds, key=lambda m: (estimate[m], m))
    starts_at_counts(search)
    first, built = len(search.pool), search.tried
    assert first >= 1 and 1 <= built < len(search.bounds)
    search.budget = 10**12  # room for every count
    counts_on_shared_ranks(search)
    assert not search.pending and search.tried == len(search.bounds)
    assert {row[3] for row in search.pool[first:]} == set(search.bounds) - {
        row[3] for row in search.pool[:first]}
    assert all(row[2] == "rank_first" for row in search.pool[first:])
    for row in search.pool:
        sched = [[[] for _ in range(row[3])] for _ in range(256)]
        for i, b in enumerate(row[4].tolist()):
            sched[b // row[3]][b % row[3]].append(i)
        assert not find_schedule_violations(sched, lengths, 256, row[3], 8192)


def test_cluster_scale_plans_are_repeatable() -> None:
    rng = np.random.default_rng(12)
    lengths = np.minimum(rng.lognormal(7, 1.2, size=2048).astype(int) + 16, 8192).tolist()
    kw = dict(pp=4, cost=(64, 1), overhead=64 * 512, time_limit=0.01,
              options=SolverOptions(deterministic=True))
    plan = plan_step(lengths, 256, 8192, **kw)
    assert plan.ranks == plan_step(lengths, 256, 8192, **kw).ranks
    assert not find_schedule_violations(plan.ranks, lengths, 256, plan.m, 8192)
