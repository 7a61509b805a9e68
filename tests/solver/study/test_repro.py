"""The counterexamples (seqpart.solver.study.repro) and the bundled data they and the study use."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.heuristics import first_fit, karmarkar_karp
from seqpart.solver import find_violations, partition
from seqpart.solver.study.datasets import (
    RL_PROMPT_CAP,
    RL_RESPONSE_CAP,
    list_datasets,
    load_dataset,
    rl_batch,
    sample_batch,
)
from seqpart.solver.study.repro import (
    _optimal_max_by_k,
    _set_partitions,
    cap_case,
    cap_counterexample,
    dp_empty_counterexample,
    render,
    search_real_data,
    smallest_cap_counterexample,
)


def test_issue_example_kk_breaks_the_cap_seqpart_does_not() -> None:
    case = cap_counterexample()
    assert case.lengths == [8, 7, 6, 5, 4] and case.cap == 15
    assert case.k == 2  # first-fit's count
    assert case.first_fit.ok
    assert sorted(case.karmarkar_karp.tokens) == [14, 16]
    assert case.karmarkar_karp.over_cap_bins == 1
    assert case.seqpart.ok
    assert sorted(case.seqpart.tokens) == [15, 15]
    assert sorted(sorted(case.lengths[i] for i in b) for b in case.seqpart.bins) == [
        [4, 5, 6],
        [7, 8],
    ]
    assert case.seqpart.note.startswith("optimal")


def test_set_partitions_are_counted_by_bell_numbers() -> None:
    assert [sum(1 for _ in _set_partitions(n)) for n in range(1, 7)] == [1, 2, 5, 15, 52, 203]


def test_optimal_max_by_k_matches_hand_values() -> None:
    parts = [list(p) for p in _set_partitions(5)]
    opt = _optimal_max_by_k([8, 7, 6, 5, 4], parts)
    # k=4: some micro-batch holds two sequences, at least 5 + 4.
    assert opt[1:] == [30, 15, 11, 9, 8]


def test_smallest_counterexample_search() -> None:
    found = smallest_cap_counterexample(max_items=6, max_length=8)
    # What the exhaustive search finds: nothing with <= 4 sequences, and the smallest 5-sequence
    # case is smaller than the issue's example.
    assert all(found.counts_by_n[n] == 0 for n in range(1, 5))
    assert found.counts_by_n[5] > 0
    case = found.found
    assert case is not None
    assert case.lengths == [3, 3, 2, 2, 2] and case.cap == 6 and case.k == 2
    assert case.karmarkar_karp.over_cap_bins == 1
    assert case.seqpart.ok and case.first_fit.ok
    # The issue's example is one of the 5-sequence cases but not the smallest.
    assert (len(case.lengths), case.cap, sum(case.lengths)) < (5, 15, 30)


def test_smaller_bounds_find_nothing_and_say_so() -> None:
    found = smallest_cap_counterexample(max_items=4, max_length=6)
    assert found.found is None
    assert set(found.counts_by_n.values()) == {0}
    assert "none found" in render(cap_counterexample(), found, None, dp_empty_counterexample())


def test_real_data_search_finds_true_counterexamples() -> None:
    datasets = {name: load_dataset(name).lengths for name in list_datasets()}
    result = search_real_data(datasets, batch_sizes=(8, 16), trials_per_setting=10)
    assert result.trials == sum(t for _, t in result.hits_by_dataset.values())
    assert result.hits > 0
    case = result.example
    assert case is not None and result.example_dataset in datasets
    # Each claim re-checked independently of repro's own bookkeeping.
    assert len(first_fit(case.lengths, None, case.cap)) == case.k
    kk = karmarkar_karp(case.lengths, case.k)
    assert max(sum(case.lengths[i] for i in b) for b in kk) > case.cap
    plan = partition(case.lengths, case.k, case.cap, time_limit=1.0)
    assert find_violations(plan.bins, case.lengths, case.k, case.cap).ok


def test_real_data_search_is_seeded() -> None:
    datasets = {"humaneval": load_dataset("code_humaneval_pypi").lengths}
    a = search_real_data(datasets, batch_sizes=(8,), trials_per_setting=5, seed=3)
    b = search_real_data(datasets, batch_sizes=(8,), trials_per_setting=5, seed=3)
    assert a.hits_by_dataset == b.hits_by_dataset


def test_dp_scenario_first_fit_leaves_bins_empty_seqpart_does_not() -> None:
    case = dp_empty_counterexample()
    assert case.rank_counts == [2, 4]
    assert case.k == 4 and case.rank == 0
    assert case.first_fit.empty_bins == 2 and case.first_fit.over_cap_bins == 0
    assert not case.first_fit.ok
    assert case.seqpart.ok
    assert len(case.seqpart.bins) == 4 and all(case.seqpart.bins)
    assert max(case.seqpart.tokens) <= case.cap
    assert case.karmarkar_karp.empty_bins == 0


def test_cap_case_on_a_batch_that_is_fine() -> None:
    case = cap_case([5, 5, 5, 5], 10)
    assert case.k == 2
    assert case.first_fit.ok and case.karmarkar_karp.ok and case.seqpart.ok


def test_render_names_inputs_loads_and_broken_constraints() -> None:
    text = render(
        cap_counterexample(), smallest_cap_counterexample(5, 4), None, dp_empty_counterexample()
    )
    assert "lengths [8, 7, 6, 5, 4], cap 15" in text
    assert "{7,5,4}=16 OVER CAP" in text
    assert "{8,7}=15  {6,5,4}=15" in text
    assert "EMPTY" in text and "torch.cat([])" in text
    assert "all_reduce(MAX)" in text


# --------------------------------------------------------------------------- bundled data


def test_bundled_datasets_keep_provenance() -> None:
    names = list_datasets()
    assert len(names) >= 3
    for name in names:
        data = load_dataset(name)
        assert data.source and data.license and data.unit
        assert data.n == len(data.lengths) > 0
        assert min(data.lengths) > 0
        if data.truncated is not None:
            assert len(data.truncated) == data.n


def test_unknown_dataset_names_the_choices() -> None:
    with pytest.raises(ValueError, match="code_humaneval_pypi"):
        load_dataset("nope")


def test_rl_batch_shape_and_seed() -> None:
    a = rl_batch(2048, np.random.default_rng(7))
    b = rl_batch(2048, np.random.default_rng(7))
    assert a == b and len(a) == 2048
    arr = np.asarray(a)
    assert arr.min() > 0 and arr.max() <= RL_PROMPT_CAP + RL_RESPONSE_CAP
    # The spike at the response cap and the short aborted samples are both there.
    responses_at_cap = np.mean(arr >= RL_RESPONSE_CAP + 16)
    assert 0.15 < responses_at_cap < 0.35
    # Aborted: a prompt (median 300) plus at most 256 response tokens.
    assert np.mean(arr < 556) > 0.02


def test_sample_batch_with_and_without_replacement() -> None:
    rng = np.random.default_rng(0)
    pool = [1, 2, 3, 4]
    assert sorted(sample_batch(pool, 4, rng)) == pool
    assert len(sample_batch(pool, 10, rng)) == 10
    with pytest.raises(ValueError):
        sample_batch(pool, 0, rng)
