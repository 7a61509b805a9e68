"""The fast paths of issue 10 agree with the plain ones they replace.

- ``seqpart solve``'s JSON reader: a list of plain positive ints becomes an int64 array read
  in C; anything else goes through ``json.loads`` as before (same values, same errors).
- Plan assembly: ``Items.expand_flat`` gives the bins ``expand`` and a sort give, and the
  validator's ``flat`` hint is used only when it agrees with the bins.
- ``partition`` pauses the garbage collector and leaves it as it found it.
- Best fit and first fit with a per-bin sample limit (equal_size) step over full bins and
  place runs of equal lengths at once, with the same bins as their one-at-a-time definitions.

Small inputs only: speed is measured in benchmarks/bench_scale.py.
"""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics.kernels import best_fit_lists, first_fit_lists
from seqpart.solver import InvalidPlanError, check_plan, partition
from seqpart.solver.errors import UsageError
from seqpart.solver.problem import make_items, make_problem
from seqpart.solver.study.readers.text import parse_lengths


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(1, 10**18 - 1), min_size=1, max_size=30),
    spaces=st.sampled_from(["", " ", "\n", " \t", "\r\n "]),
)
def test_int_lists_are_read_exactly_into_int64(values: list[int], spaces: str) -> None:
    text = "[" + spaces + ("," + spaces).join(map(str, values)) + spaces + "]"
    got = parse_lengths(text, "x.json")
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert got.tolist() == values == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "[1,,2]", "[1,2,]", "[,1]", "[1 2,3]", "[1,2 3]", "[01,2]", "[1, 00]", "[1,2]]",
        "[1\u00a0,2]", "[1,2\x0b]",
    ],
)
def test_text_that_is_not_a_json_list_is_refused_as_before(text: str) -> None:
    with pytest.raises(UsageError, match="not valid JSON"):
        parse_lengths(text, "x.json")


@pytest.mark.parametrize(
    "text",
    [
        "[0, 2]", "[3, 0]", "[-1, 2]", "[1.5, 2]", "[1e3]", "[true, 1]", '["1"]', "[[1, 2], 3]",
        "[99999999999999999999, 1]", "[1000000000000000000]", '{"lengths": [1, 2]}', "[]",
    ],
)
def test_other_json_is_parsed_by_json_loads(text: str) -> None:
    # Zero, signs, floats, bools, strings, mixed lists, values that may not fit int64 and
    # objects: left to json.loads, so the solver sees (and names) the value as written.
    got = parse_lengths(text, "x.json")
    assert isinstance(got, list)
    loaded = json.loads(text)
    assert got == (loaded["lengths"] if isinstance(loaded, dict) else loaded)


def _lists(bins: list[list[int]]) -> list[list[int]]:
    return sorted((sorted(b) for b in bins), key=lambda b: b[0])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_expand_flat_is_expand_then_sort(data: st.DataObject, n: int) -> None:
    k = data.draw(st.integers(1, n))
    labels = data.draw(st.permutations(list(range(n))))  # a random order of the items
    cuts = sorted(data.draw(st.lists(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1,
                                     unique=True))) if k > 1 else []
    bins = [list(labels[lo:hi]) for lo, hi in zip([0, *cuts], [*cuts, n], strict=True)]
    items = make_items(make_problem([5] * n, k, None))
    out = items.expand_flat(bins)
    assert out is not None
    flat_bins, flat, ends = out
    assert flat_bins == _lists(bins)
    assert flat.tolist() == [i for b in flat_bins for i in b]
    assert ends.tolist() == np.cumsum([len(b) for b in flat_bins]).tolist()


def test_expand_flat_leaves_broken_or_merged_bins_to_the_validator() -> None:
    items = make_items(make_problem([5, 6, 7, 8], 2, None))
    assert items.expand_flat([[0, 1], [2, 2]]) is None  # 3 twice, 3 missing
    assert items.expand_flat([[0, 1, 2, 3], []]) is None  # an empty bin
    assert items.expand_flat([[0, 1], [2, 4]]) is None  # out of range
    grouped = make_items(make_problem([5, 6, 7, 8], 2, None, groups=[[0, 3]]))
    assert grouped.expand_flat([[0], [1, 2]]) is None  # items merge sequences: the slow path


def test_the_validators_flat_hint_is_ignored_when_it_disagrees() -> None:
    tokens = [4, 4, 4, 4]
    bins = [[0, 1], [2, 3]]
    check_plan(bins, tokens, 2, 8, flat=np.array([0, 1, 2, 3]))
    # A hint whose sizes or first entries do not match the bins (or whose first entries are
    # not plain ints) is not trusted: the bins themselves are checked.
    with pytest.raises(InvalidPlanError, match="more than one"):
        check_plan([[0, 1], [1, 3]], tokens, 2, 8, flat=np.array([0, 1, 2, 3]))
    with pytest.raises(InvalidPlanError, match="exceed cap"):
        check_plan([[0, 1, 2], [3]], tokens, 2, 8, flat=np.array([0, 1, 2, 3]))
    with pytest.raises(InvalidPlanError, match="not indices"):
        check_plan([[0, 1], [2.0, 3]], tokens, 2, 8, flat=np.array([0, 1, 2, 3]))
    with pytest.raises(InvalidPlanError, match="more than one"):
        check_plan([[0, 1], [0, 3]], tokens, 2, 8, flat=np.array([0, 1, 2, 3]))


@pytest.mark.parametrize("enabled", [True, False])
def test_partition_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        plan = partition([8, 7, 6, 5, 4], k=2, cap=15, time_limit=0.05)
        assert plan.bins == [[0, 1], [2, 3, 4]]
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError):
            partition([8, 0], k=1)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_large_batch_plan_is_assembled_sorted_and_checked() -> None:
    rng = np.random.default_rng(4)
    lengths = rng.integers(16, 4000, 30_000)  # above CAPPED_BALANCE_UP_TO: best fit's path
    cap = 8000
    k = -(-int(lengths.sum()) // cap) + 2
    plan = partition(lengths, k, cap, time_limit=0.005)
    assert all(b == sorted(b) for b in plan.bins)
    assert [b[0] for b in plan.bins] == sorted(b[0] for b in plan.bins)
    assert plan.tokens == [int(lengths[b].sum()) for b in plan.bins]
    assert plan.loads == plan.tokens and max(plan.tokens) <= cap


def naive_counted_best_fit(
    tokens: list[int], counts: list[int], k: int, cap: int, max_count: int
) -> list[list[int]]:
    """Longest first (ties by index), each into the fullest bin (ties: highest index) with
    room for its tokens and samples; none: the bin with the fewest tokens (lowest index)."""
    bins: list[list[int]] = [[] for _ in range(k)]
    tok, cnt = [0] * k, [0] * k
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        fits = [b for b in range(k)
                if tok[b] + tokens[i] <= cap and cnt[b] + counts[i] <= max_count]
        b = max(fits, key=lambda b: (tok[b], b)) if fits else min(range(k),
                                                                   key=lambda b: (tok[b], b))
        bins[b].append(i)
        tok[b] += tokens[i]
        cnt[b] += counts[i]
    return bins


@settings(max_examples=80, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 12), min_size=1, max_size=40),
    data=st.data(),
)
def test_counted_best_fit_is_its_definition(tokens: list[int], data: st.DataObject) -> None:
    n = len(tokens)
    k = data.draw(st.integers(1, n))
    cap = data.draw(st.integers(12, 60))
    max_count = data.draw(st.integers(1, 6))
    ones = [1] * n
    counts = data.draw(st.sampled_from([ones, [1 + i % 3 for i in range(n)]]))
    ours = best_fit_lists(tokens, counts, k, cap, max_count)
    assert [sorted(b) for b in ours] == [
        sorted(b) for b in naive_counted_best_fit(tokens, counts, k, cap, max_count)
    ]


def naive_counted_first_fit(
    tokens: list[int], k: int | None, cap: int | None, max_count: int, order: list[int]
) -> list[list[int]]:
    """Each sequence in ``order`` into the first bin with room for its tokens and one more
    sample; none: a new bin (k=None) or the bin with the fewest tokens (lowest index)."""
    bins: list[list[int]] = [[] for _ in range(k or 0)]
    tok = [0] * (k or 0)
    for i in order:
        fits = [b for b in range(len(bins))
                if (cap is None or tok[b] + tokens[i] <= cap) and len(bins[b]) < max_count]
        if fits:
            b = fits[0]
        elif k is None:
            bins.append([])
            tok.append(0)
            b = len(bins) - 1
        else:
            b = min(range(k), key=lambda b: (tok[b], b))
        bins[b].append(i)
        tok[b] += tokens[i]
    return bins


@settings(max_examples=80, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 12), min_size=1, max_size=40),
    data=st.data(),
)
def test_counted_first_fit_is_its_definition(tokens: list[int], data: st.DataObject) -> None:
    n = len(tokens)
    k = data.draw(st.one_of(st.none(), st.integers(1, n)))
    cap = data.draw(st.one_of(st.none(), st.integers(6, 40)))
    max_count = data.draw(st.integers(1, 6))
    order = data.draw(st.sampled_from([list(range(n)),
                                       sorted(range(n), key=lambda i: (-tokens[i], i))]))
    ours = first_fit_lists(tokens, [1] * n, k, cap, max_count, order)
    assert ours == naive_counted_first_fit(tokens, k, cap, max_count, order)
