"""Local search: it stops only at a true local optimum, and it repairs over-cap starts.

The search finds its steps by a nearest-partner lookup (and, for large k, in batches). These
tests check its stopping point against an exhaustive scan of every move and swap out of the
heaviest bin, so a lookup that missed an improving change would fail here.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import improve, karmarkar_karp, local_search, lpt
from seqpart.heuristics.kernels import improve_lists
from seqpart.solver import find_violations

NO_LIMIT = 10**18


def improving_change(
    costs: Sequence[int],
    tokens: Sequence[int],
    counts: Sequence[int],
    bins: Sequence[Sequence[int]],
    cap: int | None,
    max_count: int | None,
) -> tuple[int, int, int] | None:
    """Any move or swap out of the heaviest bin that the search's rules allow and that lowers
    that bin's load without raising another to it: (a, target bin, b or -1), or None."""
    cap_v = NO_LIMIT if cap is None else cap
    cnt_v = NO_LIMIT if max_count is None else max_count
    load = [sum(costs[i] for i in b) for b in bins]
    tok = [sum(tokens[i] for i in b) for b in bins]
    cnt = [sum(counts[i] for i in b) for b in bins]
    h = max(range(len(bins)), key=lambda b: (load[b], -b))
    top = load[h]

    def allowed(a: int, j: int, b: int) -> bool:
        dc, dt, dl = counts[a], tokens[a], costs[a]
        if b >= 0:
            dc, dt, dl = dc - counts[b], dt - tokens[b], dl - costs[b]
        elif len(bins[h]) == 1:
            return False  # a move must not empty the bin
        return (
            load[j] + dl < top
            and top - dl < top
            and tok[j] + dt <= max(cap_v, tok[j])
            and tok[h] - dt <= max(cap_v, tok[h])
            and cnt[j] + dc <= cnt_v
            and cnt[h] - dc <= cnt_v
        )

    for a in bins[h]:
        for j, other in enumerate(bins):
            if j == h:
                continue
            for b in [-1, *other]:
                if allowed(a, j, b):
                    return a, j, b
    return None


def loads_of(bins: Sequence[Sequence[int]], costs: Sequence[int]) -> list[int]:
    return [sum(costs[i] for i in b) for b in bins]


def round_robin(n: int, k: int) -> list[list[int]]:
    return [list(range(b, n, k)) for b in range(k)]


def check_round_robin_start_ends_at_local_optimum(
    lengths: list[int], k: int, cap: int | None
) -> None:
    """From a round-robin start (which may break the cap): a partition into k non-empty bins,
    no worse than the start, where no move or swap out of the heaviest bin helps."""
    n = len(lengths)
    start = round_robin(n, k)
    out = improve(lengths, start, cap)
    assert find_violations(out, lengths, k, None).ok  # structure only: the cap may stay broken
    assert max(loads_of(out, lengths)) <= max(loads_of(start, lengths))
    assert improving_change(lengths, lengths, [1] * n, out, cap, None) is None


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 400), min_size=2, max_size=60),
    data=st.data(),
)
def test_stops_only_where_no_move_or_swap_helps(lengths: list[int], data: st.DataObject) -> None:
    k = data.draw(st.integers(2, len(lengths)))
    cap = data.draw(st.one_of(st.none(), st.integers(max(lengths), 2 * sum(lengths) // k + 400)))
    check_round_robin_start_ends_at_local_optimum(lengths, k, cap)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 3000), min_size=120, max_size=400),
    data=st.data(),
)
def test_batched_steps_for_large_k_stop_at_a_local_optimum(
    lengths: list[int], data: st.DataObject
) -> None:
    # k >= 48 switches on the batched steps (many heavy bins improved at once).
    k = data.draw(st.integers(48, len(lengths) // 2))
    cap = data.draw(st.one_of(st.none(), st.integers(max(lengths), 2 * sum(lengths) // k + 3000)))
    check_round_robin_start_ends_at_local_optimum(lengths, k, cap)


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=4, max_size=40),
    data=st.data(),
)
def test_other_costs_and_sample_counts_fall_back_to_a_full_scan(
    lengths: list[int], data: st.DataObject
) -> None:
    # Costs that are not the tokens, and items standing for several samples: the nearest
    # lookup is not exact there, so the full scan must still find every improving change.
    n = len(lengths)
    k = data.draw(st.integers(2, n // 2))
    counts = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    costs = [3 * t + t * t // 50 for t in lengths]
    start = round_robin(n, k)
    max_count = max(sum(counts[i] for i in b) for b in start) + data.draw(st.integers(0, 2))
    cap = max(sum(lengths[i] for i in b) for b in start) + data.draw(st.integers(0, 50))
    out = improve(lengths, start, cap, costs=costs, counts=counts, max_count=max_count)
    assert all(out) and sorted(i for b in out for i in b) == list(range(n))
    assert all(sum(lengths[i] for i in b) <= cap for b in out)
    assert all(sum(counts[i] for i in b) <= max_count for b in out)
    assert max(loads_of(out, costs)) <= max(loads_of(start, costs))
    assert improving_change(costs, lengths, counts, out, cap, max_count) is None


def test_repairs_karmarkar_karp_over_the_cap() -> None:
    # The seed example: KK gives 16/14 under cap 15; the search finds the 15/15 split.
    lengths = [8, 7, 6, 5, 4]
    kk = karmarkar_karp(lengths, 2)
    assert not find_violations(kk, lengths, 2, 15).ok
    fixed = improve(lengths, kk, 15)
    assert find_violations(fixed, lengths, 2, 15).ok
    assert sorted(loads_of(fixed, lengths)) == [15, 15]


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(1, 100), min_size=3, max_size=50), data=st.data())
def test_over_cap_bins_only_lose_tokens(lengths: list[int], data: st.DataObject) -> None:
    # From an uncapped LPT start, a bin over the cap may shrink but never grow, and a bin under
    # the cap never goes over it.
    n = len(lengths)
    k = data.draw(st.integers(2, n))
    cap = data.draw(st.integers(max(lengths), max(max(lengths), sum(lengths) // k + 20)))
    start = lpt(lengths, k)
    out = improve(lengths, start, cap)

    def over(bins: list[list[int]]) -> int:
        return sum(max(0, load - cap) for load in loads_of(bins, lengths))

    assert over(out) <= over(start)
    assert max(loads_of(out, lengths)) <= max(loads_of(start, lengths))
    assert improving_change(lengths, lengths, [1] * n, out, cap, None) is None


def test_local_search_heuristic_repairs_lpt_over_the_cap() -> None:
    # Capped LPT gives loads 38/31/37 over cap 37; the search gets all three under it.
    lengths = [8, 10, 16, 13, 18, 1, 14, 10, 16]
    assert not find_violations(lpt(lengths, 3, 37), lengths, 3, 37).ok
    out = local_search(lengths, 3, 37)
    assert find_violations(out, lengths, 3, 37).ok
    assert max(loads_of(out, lengths)) == 36  # ceil(106 / 3): the optimum


def test_repair_deadline_gives_up_on_an_over_cap_start_only() -> None:
    lengths = [8, 10, 16, 13, 18, 1, 14, 10, 16]
    start = lpt(lengths, 3, 37)  # over the cap
    given_up = improve_lists(lengths, lengths, [1] * 9, start, 37, None, repair_deadline=0.0).bins
    assert sorted(map(sorted, given_up)) == sorted(map(sorted, start))
    # 35/38/33 is under a cap of 60: nothing to repair, so the deadline does not stop it.
    searched = improve_lists(lengths, lengths, [1] * 9, round_robin(9, 3), 60, None,
                             repair_deadline=0.0).bins
    assert max(loads_of(searched, lengths)) == 36


def test_costs_too_large_for_the_sorted_keys_still_search_every_pair() -> None:
    # (bin, cost, item) keys would overflow int64 here, so the nearest-partner lookup is off;
    # scoring pairs in range and the full scan must still reach a local optimum.
    lengths = [3, 5, 7, 2, 9, 4, 6, 1]
    costs = [x * 10**17 for x in lengths]
    out = improve(lengths, [[0, 1, 2, 3], [4, 5], [6, 7]], costs=costs)
    assert max(loads_of(out, costs)) == 13 * 10**17  # ceil(37 / 3) = 13: the optimum
    assert improving_change(costs, lengths, [1] * 8, out, None, None) is None


def test_until_repaired_stops_once_the_start_is_under_the_cap() -> None:
    """partition runs Karmarkar-Karp between the repair of an over-cap LPT and the rest of the
    search: the first call must stop as soon as every bin is under the cap."""
    from seqpart.heuristics.kernels import improve_lists

    lengths = [9, 9, 8, 7, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1]
    cap = 17
    start = [[0, 1], [2, 3], list(range(4, 14))]  # 18 tokens in the first: over the cap
    ones = [1] * len(lengths)
    first = improve_lists(lengths, lengths, ones, start, cap, None, repair_work=10**9,
                          until_repaired=True)
    out = first.bins
    assert first.stopped == "repaired"
    assert all(sum(lengths[i] for i in b) <= cap for b in out)
    assert sorted(i for b in out for i in b) == list(range(len(lengths)))
    resumed = improve_lists(lengths, lengths, ones, out, cap, None)
    final = resumed.bins
    assert resumed.stopped != "repaired"
    assert max(sum(lengths[i] for i in b) for b in final) <= max(
        sum(lengths[i] for i in b) for b in out)
