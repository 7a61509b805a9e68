"""The re-implemented trainer schedulers: shapes, raw behaviour and small cases worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import TRAINER_SCHEDULERS, get_trainer_scheduler
from seqpart.heuristics.trainer_baselines import (
    megatron,
    prime_rl,
    refine_by_swaps,
    slime_kk,
    slime_rr,
    verl,
    verl_retry,
)

NAMES = sorted(TRAINER_SCHEDULERS)


def tokens_of(mb: list[int], lengths: list[int]) -> int:
    return sum(lengths[i] for i in mb)


def assert_covers(schedule: list[list[list[int]]], n: int, dp: int) -> None:
    assert len(schedule) == dp
    flat = [i for rank in schedule for mb in rank for i in mb]
    assert sorted(flat) == list(range(n))
    assert all(mb for rank in schedule for mb in rank), "an empty micro-batch"


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=8, max_size=60),
    dp=st.integers(1, 4),
    cap=st.integers(200, 700),
    multiple_of=st.sampled_from([1, 2]),
    quadratic=st.booleans(),
)
def test_every_index_once_and_shapes(lengths, dp, cap, multiple_of, quadratic):
    costs = [24576 * x + x * x for x in lengths] if quadratic else None
    for name in NAMES:
        sched = TRAINER_SCHEDULERS[name](lengths, dp, cap, costs=costs, multiple_of=multiple_of)
        assert_covers(sched, len(lengths), dp)
        counts = [len(rank) for rank in sched]
        # Packing-first schedulers never break the cap (splits only shrink micro-batches);
        # a sequence over the cap sits alone.
        if name in ("slime_rr", "slime_kk", "prime_rl", "megatron"):
            assert all(
                len(mb) == 1 or tokens_of(mb, lengths) <= cap for rank in sched for mb in rank
            )
        # With enough sequences to reach the multiple, every rank runs the same count.
        if name in ("slime_rr", "slime_kk", "prime_rl") and len(lengths) >= dp * multiple_of * (
            1 + sum(lengths) // cap
        ):
            assert len(set(counts)) == 1
            assert counts[0] % multiple_of == 0


def test_repeatable():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 5000, 300).tolist()
    for name in NAMES:
        fn = get_trainer_scheduler(name)
        assert fn(lengths, 4, 8192) == fn(lengths, 4, 8192)


def test_slime_first_fit_split_and_round_robin():
    # First-fit in arrival order: [6,3] [6,3] [2]; 3 -> 4 by splitting the later of the two
    # heaviest (9 tokens each), bins 0..3 = [0,2] [1] [4] [3]; round robin: 0,2 | 1,3.
    lengths = [6, 6, 3, 3, 2]
    assert slime_rr(lengths, 2, 10) == [[[0, 2], [4]], [[1], [3]]]
    # Equal-count KK on micro-batch cost [9, 6, 2, 3]: {9, 2} and {6, 3}.
    sched = slime_kk(lengths, 2, 10)
    assert sorted(sched) == [[[0, 2], [4]], [[1], [3]]]


def test_slime_kk_balances_on_costs_not_tokens():
    lengths = [6, 6, 3, 3, 2]
    costs = [1, 1, 1, 1, 100]  # the lone 2-token sequence dominates
    sched = slime_kk(lengths, 2, 10, costs=costs)
    heavy = next(rank for rank in sched if [4] in rank)
    assert len(heavy) == 2
    # Its partner is the cheapest other micro-batch ([1] or [3], cost 1).
    assert sorted(heavy)[0] in ([1], [3])


def test_slime_short_of_sequences_leaves_a_rank_short():
    # 3 sequences cannot make 2 ranks x 2 micro-batches: raw, one rank gets fewer.
    sched = slime_rr([3, 3, 3], 2, 10, multiple_of=2)
    assert [len(r) for r in sched] == [2, 1]


def test_prime_rl_ffd_split_kk():
    # FFD order 6,6,3,3,2: [6,3] [6,3] [2]; split the later 9 -> [0,2] [1] [4] [3].
    sched = prime_rl([6, 6, 3, 3, 2], 2, 10)
    assert sorted(sched) == [[[0, 2], [4]], [[1], [3]]]


def test_prime_rl_ffd_differs_from_first_fit():
    lengths = [2, 2, 2, 2, 8, 8]  # arrival first-fit: [2,2,2,2] [8] [8]; FFD: [8,2] [8,2] [2,2]
    flat = sorted(sorted(mb) for rank in prime_rl(lengths, 1, 10) for mb in rank)
    assert flat == [[0, 4], [1, 5], [2, 3]]


def test_swap_refinement_takes_the_first_best_swap():
    # sums 15 | 7; swapping item 0 (10) with item 3 (6) and item 2 (5) with item 1 (1) both
    # give 11 | 11; the first in (rank, rank, position, position) order wins.
    assert refine_by_swaps([10, 1, 5, 6], [[0, 2], [1, 3]])[0] == [[3, 2], [1, 0]]


def test_swap_refinement_no_improving_swap_keeps_groups():
    assert refine_by_swaps([9, 6, 2, 3], [[0, 2], [1, 3]])[0] == [[0, 2], [1, 3]]


def test_swap_refinement_huge_weights_stay_exact():
    big = 2**61
    out = refine_by_swaps([big + 10, 1, big + 5, 6], [[0, 2], [1, 3]])[0]
    sums = sorted(sum([big + 10, 1, big + 5, 6][i] for i in g) for g in out)
    assert sums == [big + 11, big + 11]


def test_verl_per_rank_kk_ignores_the_cap_and_retry_fixes_it():
    lengths = [6, 6, 6, 6]  # ceil(24 / 10) = 3 micro-batches: one must hold two sixes
    sched = verl(lengths, 1, 10)
    assert sorted(len(mb) for mb in sched[0]) == [1, 1, 2]
    assert max(tokens_of(mb, lengths) for mb in sched[0]) == 12
    retry = verl_retry(lengths, 1, 10)
    assert sorted(sorted(mb) for mb in retry[0]) == [[0], [1], [2], [3]]


def test_verl_agreed_count_and_bubble_order():
    lengths = [8, 1, 1, 8, 4, 4]  # ranks {8, 4, 1} each: 13 tokens, ceil(13 / 10) = 2
    sched = verl(lengths, 2, 10)
    for rank in sched:
        assert len(rank) == 2
        # Heaviest first for two micro-batches: [8] then [4, 1] (light ones at the ends).
        assert [tokens_of(mb, lengths) for mb in rank] == [8, 5]


def test_verl_max_count_beyond_a_light_rank_is_raw():
    # The all-reduced count (4, from the heavy rank) exceeds what a light rank can fill.
    lengths = [9, 9, 9, 9, 1, 1, 1, 1]
    sched = verl(lengths, 2, 10, costs=[100, 100, 100, 100, 1, 1, 1, 1])
    counts = sorted(len(r) for r in sched)
    assert_covers(sched, 8, 2)
    assert counts[-1] >= counts[0]


def test_verl_retry_stops_at_the_smallest_rank():
    lengths = [30, 1, 1, 1]  # a lone sequence over the cap is allowed alone
    sched = verl_retry(lengths, 1, 10)
    assert_covers(sched, 4, 1)
    assert all(len(mb) == 1 or tokens_of(mb, lengths) <= 10 for mb in sched[0])


def test_megatron_next_fit_and_peel():
    # Next-fit: [6] [6,3] [3] (first-fit would put the second 3 with the first 6).
    assert megatron([6, 6, 3, 3], 1, 10) == [[[0], [1, 2], [3]]]
    # [4,4] [4,4] [4] -> 3 micro-batches, 1 missing: peel index 3 off the last multi one.
    assert megatron([4, 4, 4, 4, 4], 2, 8) == [[[0, 1], [4]], [[2], [3]]]


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_names_the_argument(name):
    fn = TRAINER_SCHEDULERS[name]
    with pytest.raises(ValueError, match="dp_size"):
        fn([1, 2, 3], 0, 10)
    with pytest.raises(ValueError, match="dp_size"):
        fn([1, 2, 3], 4, 10)
    with pytest.raises(ValueError, match="cap"):
        fn([1, 2, 3], 1, 0)
    with pytest.raises(ValueError, match="costs"):
        fn([1, 2, 3], 1, 10, costs=[1, 2])
    with pytest.raises(ValueError, match="multiple_of"):
        fn([1, 2, 3], 1, 10, multiple_of=0)
    with pytest.raises(ValueError, match="lengths"):
        fn([1, 0, 3], 1, 10)


def test_unknown_name():
    with pytest.raises(ValueError, match="slime_rr"):
        get_trainer_scheduler("nope")


def _verl_retry_as_written(lengths: list[int], dp: int, cap: int, costs: list[int],
                           multiple_of: int) -> list[list[list[int]]]:
    """verl's retry as the trainer runs it: every rank split at every count from the first,
    until none breaks the cap or the next count passes the smallest rank."""
    from seqpart.heuristics.kernels import karmarkar_karp_lists

    n = len(lengths)
    padded = costs + [0] * (-n % dp)
    groups = karmarkar_karp_lists(padded, [1] * len(padded), dp, len(padded) // dp)
    ranks = [[i for i in g if i < n] for g in groups]
    k = max(min(len(r), -(-sum(lengths[i] for i in r) // cap)) for r in ranks)
    k = max(-(-k // multiple_of) * multiple_of, multiple_of)
    while True:
        sched = [[sorted(r[j] for j in b)
                  for b in karmarkar_karp_lists([costs[i] for i in r], [1] * len(r), k, None) if b]
                 for r in ranks]
        over = any(len(b) > 1 and tokens_of(b, lengths) > cap for rank in sched for b in rank)
        if not over or k + multiple_of > min(len(r) for r in ranks):
            return sched
        k += multiple_of


def test_verl_retry_skips_only_counts_that_break_the_cap():
    """verl_retry skips the counts below a rank's bin-packing bound and stops a count at the
    first rank that breaks the cap: it ends on the count the trainer's own loop ends on, the
    ceiling and sequences over the cap included."""
    rng = np.random.default_rng(9)
    checked = 0
    for trial in range(60):
        dp = int(rng.integers(1, 6))
        n = dp * int(rng.integers(1, 12)) + int(rng.integers(0, dp))
        lengths = rng.integers(1, 1001, n).tolist() if trial % 2 else \
            rng.integers(400, 1001, n).tolist()  # mostly over half the cap: many retries
        if trial % 3 == 0:
            lengths[0] = 1700  # over the cap: alone
        costs = [3 * x + x * x for x in lengths]
        multiple_of = 1 + trial % 3
        ref = _verl_retry_as_written(lengths, dp, 1000, costs, multiple_of)
        got = verl_retry(lengths, dp, 1000, costs=costs, multiple_of=multiple_of)
        assert [sorted(rank) for rank in got] == [sorted(rank) for rank in ref], trial
        checked += len(ref[0]) > 1
    assert checked > 20


def test_the_heaviest_split_is_the_rule_as_written():
    """slime's split from a heap takes the micro-batch a scan takes: the heaviest of several
    sequences, the later one on ties (equal lengths make many)."""
    from seqpart.heuristics import first_fit

    rng = np.random.default_rng(12)
    for trial in range(30):
        lengths = rng.integers(1, 6, 40).tolist() if trial % 2 else rng.integers(1, 400, 40).tolist()
        cap, dp = int(rng.integers(8, 900)), int(rng.integers(1, 9))
        bins = first_fit(lengths, None, cap)
        target = max(-(-len(bins) // dp) * dp, dp)
        while len(bins) < target:
            loads = [tokens_of(b, lengths) if len(b) > 1 else -1 for b in bins]
            at = max(range(len(bins)), key=lambda b: (loads[b], b))
            if loads[at] < 0:
                break
            halves: list[list[int]] = [[], []]
            for i in sorted(bins[at], key=lambda i: -lengths[i]):
                halves[tokens_of(halves[0], lengths) > tokens_of(halves[1], lengths)].append(i)
            bins[at:at + 1] = [halves[0]]
            bins.append(halves[1])
        want = [[bins[b] for b in range(r, len(bins), dp)] for r in range(dp)]
        assert slime_rr(lengths, dp, cap) == want, trial


def _all_pairs_refinement(weights: list[int], groups: list[list[int]]) -> list[list[int]]:
    """The rule as written, every pair scored: the first best swap in (group, group, position,
    position) order while it lowers (max sum, max - min)."""
    groups = [list(g) for g in groups]
    while True:
        sums = [sum(weights[i] for i in g) for g in groups]
        current = (max(sums), max(sums) - min(sums))
        best = None
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                for i, x in enumerate(groups[a]):
                    for j, y in enumerate(groups[b]):
                        after = list(sums)
                        after[a] -= weights[x] - weights[y]
                        after[b] += weights[x] - weights[y]
                        key = (max(after), max(after) - min(after))
                        if key < current and (best is None or key < best[0]):
                            best = (key, a, b, i, j)
        if best is None:
            return groups
        _, a, b, i, j = best
        groups[a][i], groups[b][j] = groups[b][j], groups[a][i]


def test_swap_refinement_scores_only_improving_pairs_but_takes_the_same_swaps():
    """refine_by_swaps scores only the pairs near the balance; every swap it takes is the one
    scoring all pairs takes (ties, equal weights, big ints, empty groups included)."""
    rng = np.random.default_rng(4)
    for trial in range(150):
        k, per = int(rng.integers(2, 7)), int(rng.integers(1, 6))
        top = (5, 60, 10**6)[trial % 3]
        weights = rng.integers(1, top, k * per).tolist()
        if trial % 10 == 0:
            weights = [w + 2**62 for w in weights]
        groups = [list(range(g * per, (g + 1) * per)) for g in range(k)]
        if trial % 7 == 0:
            groups[-1] = []
            weights = weights[: (k - 1) * per]
        got, work, how = refine_by_swaps(weights, groups)
        assert how == "done" and got == _all_pairs_refinement(weights, groups), trial
    # A budget stops it early, with a valid partial refinement.
    weights = rng.integers(1, 10**6, 400).tolist()
    groups = [list(range(g * 20, (g + 1) * 20)) for g in range(20)]
    cut, work, how = refine_by_swaps(weights, groups, work_budget=1)
    assert how == "work budget" and sorted(i for g in cut for i in g) == list(range(400))
