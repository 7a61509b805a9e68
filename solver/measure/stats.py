"""Exact, distribution-free statistics for paired step-time ratios.

Why not a bootstrap: with a handful of repeats, the bootstrap interval of a median can only
span the observed values, and it covers far less often than its nominal level says. With 5
repeats its "95%" interval is at best the range of the 5 ratios, which misses the true median
with probability 1/16, and at the 99.2% a Bonferroni correction over 6 trainers asks for it
misses 7.5 times more often than claimed. Replays of two identical schedules then come out
"slower beyond the CI" several times per 20 batches.

What is used instead, for ``n`` paired ratios ``r_i = plan_i / trainer_i`` (the repeats
independent, each pair run in the same round):

* :func:`median_ci`: the order-statistic interval ``[r_(j), r_(n+1-j)]`` for the median, with the
  largest ``j`` whose binomial coverage ``1 - 2 P(Bin(n, 1/2) <= j - 1)`` is at least the
  level. Its coverage is exact for any continuous distribution; when ``n`` is too small to reach
  the level, the interval is the whole range and the achieved level (lower) is returned with it.
* :func:`sign_test_slower`: the one-sided sign test's p-value for "plan_step is slower"
  (more ratios above 1 than chance allows).
* :func:`holm`: Holm's step-down correction, so that "slower beyond noise" over a whole run of
  batches and trainers is wrong with probability at most ``alpha`` (family-wise).

Every probability is computed from integer binomial counts (``math.comb``): exact, no float
tails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb

import numpy as np


@dataclass(frozen=True)
class MedianCI:
    """The median of paired ratios and its order-statistic interval, at ``level`` (what the
    interval covers, exactly; lower than asked when there are too few repeats)."""

    median: float
    low: float
    high: float
    level: float

    def as_tuple(self) -> tuple[float, float, float]:
        return self.median, self.low, self.high


def _binom_cdf_half(k: int, n: int) -> Fraction:
    """P(Bin(n, 1/2) <= k), exactly."""
    if k < 0:
        return Fraction(0)
    return Fraction(sum(comb(n, i) for i in range(min(k, n) + 1)), 2**n)


def coverage(n: int, j: int) -> float:
    """The exact coverage of ``[x_(j), x_(n+1-j)]`` (1-based order statistics) for the median
    of ``n`` independent draws of a continuous distribution."""
    if not 1 <= j <= (n + 1) // 2:
        raise ValueError(f"j={j}: use 1 <= j <= (n + 1) // 2 for n={n}")
    return float(1 - 2 * _binom_cdf_half(j - 1, n))


def repeats_for(level: float) -> int:
    """The fewest repeats whose widest interval (the range) covers the median at ``level``:
    ``1 - 2^(1-n) >= level``. E.g. 6 for 95%, 8 for 95% over 6 trainers (Bonferroni)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: give a probability strictly between 0 and 1")
    n = 1
    while 1 - Fraction(2, 2**n) < Fraction(level):
        n += 1
    return n


def median_ci(values: Sequence[float], level: float = 0.95) -> MedianCI:
    """The median of ``values`` and the narrowest order-statistic interval that covers the true
    median with probability at least ``level``; the range (and its lower, achieved level) when
    ``len(values)`` cannot reach ``level``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: give a probability strictly between 0 and 1")
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("values: give at least one paired repeat")
    if not np.all(np.isfinite(x)):
        raise ValueError("values: every ratio must be finite (a step time of 0 or a failed repeat?)")
    j = 1
    while j + 1 <= (n + 1) // 2 and coverage(n, j + 1) >= level:
        j += 1
    return MedianCI(float(np.median(x)), float(x[j - 1]), float(x[n - j]), coverage(n, j))


def ratio_ci(num: Sequence[float], den: Sequence[float], *, level: float = 0.95) -> MedianCI:
    """:func:`median_ci` of the paired ratios ``num_i / den_i``."""
    if len(num) != len(den):
        raise ValueError(f"num and den: give the same number of paired repeats ({len(num)} != {len(den)})")
    return median_ci(np.asarray(num, dtype=float) / np.asarray(den, dtype=float), level)


def sign_test_slower(ratios: Sequence[float]) -> float:
    """One-sided sign test of "the median ratio is above 1": ``P(Bin(m, 1/2) >= k)`` with ``k``
    ratios above 1 out of the ``m`` that are not exactly 1. 1.0 when every ratio is a tie."""
    r = np.asarray(ratios, dtype=float)
    above, m = int(np.sum(r > 1.0)), int(np.sum(r != 1.0))
    if m == 0:
        return 1.0
    return float(1 - _binom_cdf_half(above - 1, m))


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected so that the chance of any false
    rejection among all of them is at most ``alpha``."""
    p = list(pvalues)
    reject = [False] * len(p)
    for rank, i in enumerate(sorted(range(len(p)), key=p.__getitem__)):
        if p[i] > alpha / (len(p) - rank):
            break
        reject[i] = True
    return reject
