"""The calibration design separates the cost's terms, and the fit recovers known coefficients."""

from __future__ import annotations

import numpy as np
import pytest

from seqpart.solver.measure.design import make_design
from seqpart.solver.measure.fit import BASE_TERMS, error_of, fit_terms, select_and_fit


def test_design_varies_sum_l2_at_fixed_total_and_holds_out_large_micro_batches() -> None:
    d = make_design(max_tokens=1024, max_count=8, held_out=8, seed=3)
    by_total: dict[int, set[int]] = {}
    for mb in d.train:
        by_total.setdefault(sum(mb), set()).add(sum(x * x for x in mb))
    assert by_total[1024] and len(by_total[1024]) >= 4  # same total, different sum l^2
    assert {len(mb) for mb in d.train} >= {1, 2, 4, 8}
    assert all(1 <= len(mb) <= 8 and sum(mb) <= 1024 and min(mb) >= 1 for mb in d.held_out)
    assert sum(1 for mb in d.held_out if sum(mb) == 1024) >= 2
    assert not set(d.held_out) & set(d.train)
    assert make_design(max_tokens=1024, max_count=8, held_out=8, seed=3) == d


def test_design_reaches_many_short_sequences_when_asked() -> None:
    """Default: no training sequence under 16 tokens. Lowering min_length and raising
    max_count adds the many-short-sequence micro-batches a fit would otherwise extrapolate to."""
    default = make_design(max_tokens=1024, max_count=64, held_out=0)
    assert min(min(mb) for mb in default.train) >= 16
    assert max(len(mb) for mb in default.train) == 64  # 1024 / 64 = 16 tokens each
    short = make_design(max_tokens=1024, max_count=64, held_out=0, min_length=4)
    assert min(min(mb) for mb in short.train) >= 4
    assert any(len(mb) == 64 and sum(mb) == 256 for mb in short.train)  # 64 sequences of 4
    assert set(default.train) < set(short.train)


def test_random_training_micro_batches_leave_the_held_out_ones_alone() -> None:
    base = make_design(max_tokens=1024, max_count=32, held_out=8, seed=5)
    more = make_design(max_tokens=1024, max_count=32, held_out=8, seed=5, random_train=12)
    assert more.held_out == base.held_out and more.train[: len(base.train)] == base.train
    added = more.train[len(base.train):]
    assert 0 < len(added) <= 12 and not set(added) & set(more.held_out)
    assert any(len(set(mb)) > 1 and len(mb) > 8 for mb in added)  # unequal lengths, many sequences
    assert all(1 <= len(mb) <= 32 and sum(mb) <= 1024 for mb in added)
    assert make_design(max_tokens=1024, max_count=32, held_out=8, seed=5, random_train=12) == more


def test_design_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        make_design(max_tokens=10)
    with pytest.raises(ValueError, match="max_count"):
        make_design(max_count=0)
    with pytest.raises(ValueError, match="min_length"):
        make_design(min_length=0)
    with pytest.raises(ValueError, match="random_train"):
        make_design(random_train=-1)


def _truth(mb: tuple[int, ...], extra: float = 0.0) -> float:
    t = sum(mb)
    return 2e-3 + 40e-6 * t + 20e-9 * sum(x * x for x in mb) + extra * t * t


def test_fit_recovers_the_coefficients_of_noiseless_times() -> None:
    d = make_design(max_tokens=2048, max_count=16, held_out=8)
    fit = fit_terms(d.train, [_truth(mb) for mb in d.train], BASE_TERMS)
    assert fit.coef["overhead"] == pytest.approx(2e-3, rel=1e-6)
    assert fit.coef["linear"] == pytest.approx(40e-6, rel=1e-6)
    assert fit.coef["quadratic"] == pytest.approx(20e-9, rel=1e-6)
    assert fit.train_error is not None and fit.train_error.max_rel < 1e-6


def test_an_extra_term_is_kept_only_when_it_earns_its_place() -> None:
    d = make_design(max_tokens=4096, max_count=16, held_out=12)
    rng = np.random.default_rng(0)

    def noisy(mbs: tuple[tuple[int, ...], ...], extra: float) -> list[float]:
        return [_truth(mb, extra) * (1 + 0.002 * rng.standard_normal()) for mb in mbs]

    base, ext = select_and_fit(d.train, noisy(d.train, 0.0), d.held_out, noisy(d.held_out, 0.0), 4096)
    assert ext.terms == BASE_TERMS == base.terms
    # a per-token cost growing with the micro-batch's size: T^2 is selected, held-out error drops
    base, ext = select_and_fit(d.train, noisy(d.train, 4e-9), d.held_out, noisy(d.held_out, 4e-9), 4096)
    assert "total_sq" in ext.terms
    assert ext.held_out_error is not None and base.held_out_error is not None
    assert ext.held_out_error.median_rel < base.held_out_error.median_rel
    assert ext.held_out_error.max_rel < 0.02


def test_fit_rejects_bad_times() -> None:
    with pytest.raises(ValueError, match="> 0"):
        fit_terms([(10,), (20,), (30,)], [1.0, 0.0, 2.0], BASE_TERMS)
    with pytest.raises(ValueError, match="one per micro-batch"):
        fit_terms([(10,), (20,), (30,)], [1.0, 2.0], BASE_TERMS)


def test_error_report() -> None:
    e = error_of(np.array([1.1, 2.0, 2.7]), np.array([1.0, 2.0, 3.0]))
    assert e.median_rel == pytest.approx(0.1)
    assert e.max_rel == pytest.approx(0.1)
    assert 0.9 < e.r2 < 1.0 and e.count == 3


def test_short_micro_batches_get_extra_rounds_until_timed_long_enough() -> None:
    """A simulated clock: a 10-token micro-batch takes 10 ms (once 30 ms), a 1000-token one 1 s.
    With ``min_seconds=0.075`` the short one is timed until its samples reach 75 ms (6 times),
    the long one only in the 3 rounds, and the statistic is the median of every sample."""
    from seqpart.solver.measure.calibrate import time_micro_batches

    now = [0.0]
    noise = iter([0.0, 0.02, 0.0, 0.0, 0.0] + [0.0] * 20)

    def run(lengths: list[int]) -> None:
        now[0] += sum(lengths) * 1e-3 + (next(noise) if sum(lengths) == 10 else 0.0)

    t = time_micro_batches(run, [(10,), (1000,)], repeats=3, warmup=0, progress=False,
                           clock=lambda: now[0], min_seconds=0.075, max_rounds=15)
    counts = (~np.isnan(t.samples)).sum(axis=1).tolist()
    assert counts == [6, 3]
    assert t.seconds[0] == pytest.approx(0.01) and t.seconds[1] == pytest.approx(1.0)
    assert t.noise >= 0
    with pytest.raises(ValueError, match="min_seconds"):
        time_micro_batches(run, [(10,)], min_seconds=-1, progress=False, clock=lambda: now[0])
