"""The step lower bound: no valid schedule's step time is below it.

:func:`scaled_bounds` bounds the closed formula (exact at pp = 1, the search's proxy at pp > 1);
:func:`exact_scaled_bounds` bounds the exact pipeline makespan, and :func:`step_lower_bound`
reports it.

Per count m, the bound is the largest of the load terms (the heaviest rank's share of the total
and the heaviest micro-batches) and the pipeline bubble, searched over the counts the cap allows.
A schedule whose step time meets it is optimal under the model of :mod:`seqpart.solver.step.model`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from fractions import Fraction
from importlib import resources
from typing import Any

import numpy as np

from ..batch_cost import MicroBatchCost
from .makespan_optimum import LP_BUDGET, LP_OPERATIONS, lp_certificate
from .model import StepInstance, exact, make_instance
from .pipeline import (
    DEFAULT_MODEL,
    PipelineModel,
    scale,
    scaled_load_bound,
)

#: The schedule whose LP certificates are bundled (``lp_certificates.json``): Megatron-LM's,
#: 1:2, the p2p latency added apart.
_BUNDLED_MODEL = replace(DEFAULT_MODEL, p2p_latency=0)


@functools.cache
def bundled_certificates() -> dict[tuple[int, int, int], tuple[int, int, int]]:
    """``(pp, vpp, m) -> (C, L, S)``: the pipeline LP's certificates for ``_BUNDLED_MODEL``,
    each :func:`~seqpart.solver.step.makespan_optimum.lp_certificate`'s, read once from the
    package's data (``benchmarks/make_lp_table.py`` writes them)."""
    text = resources.files(__package__).joinpath("lp_certificates.json").read_text("utf-8")
    return {(pp, vpp, m): (c, crossed, flow)
            for pp, vpp, m, c, crossed, flow in json.loads(text)["certificates"]}

__all__ = [
    "capped_load_bound",
    "ends_bound",
    "exact_scaled_bounds",
    "instance_exact_bounds",
    "max_micro_batch_time",
    "scaled_bounds",
    "step_lower_bound",
]


def _sorted_costs(costs: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The costs sorted descending, their prefix sums and the ascending prefix sums: int64
    when every sum fits (numpy's sort, ~10x faster than Python's at n = 262,144), else object
    arrays of exact Python ints."""
    if sum(costs) < 2**62:  # costs are non-negative: every prefix sum fits too
        c = np.sort(np.asarray(costs, dtype=np.int64))[::-1]
        zero = np.zeros(1, dtype=np.int64)
        return c, np.concatenate((zero, np.cumsum(c))), np.concatenate((zero, np.cumsum(c[::-1])))
    c = np.array(sorted(costs, reverse=True), dtype=object)
    prefix = np.concatenate(([0], np.cumsum(c))).astype(object)
    return c, prefix, np.concatenate(([0], np.cumsum(c[::-1]))).astype(object)


def _load_bounds(costs_desc: np.ndarray, prefix: np.ndarray, k: int) -> int:
    """``load_lower_bound(costs, k)`` on costs sorted descending with their prefix sums (object
    arrays, exact): max(ceil(S/k), c_1, max_t sum of c_{tk-t+1..tk+1}). Same formula, computed
    for many k without re-sorting (checked against it in the tests)."""
    n = len(costs_desc)
    bound = max(-(-int(prefix[n]) // k), int(costs_desc[0]))
    if n > k:
        t = np.arange(1, (n - 1) // k + 1)
        hi = t * k + 1
        bound = max(bound, int((prefix[hi] - prefix[hi - t - 1]).max()))
    return bound


def _load_bounds_many(c: np.ndarray, prefix: np.ndarray, ks: list[int]) -> list[int]:
    """:func:`_load_bounds` for many k at once: the windows of every k in one numpy pass
    (sum over k of n/k windows, about n log n)."""
    n = len(c)
    total, top = int(prefix[n]), int(c[0])
    out = [max(-(-total // k), top) for k in ks]
    k_arr = np.asarray(ks, dtype=np.int64)
    counts = np.maximum((n - 1) // k_arr, 0)
    if not counts.sum():
        return out
    dt: Any = np.int64 if total < 2**62 else object
    pre = prefix.astype(dt)
    kk = np.repeat(k_arr, counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    t = np.arange(len(kk)) - first + 1
    hi = t * kk + 1
    windows = pre[hi] - pre[hi - t - 1]
    starts = (np.cumsum(counts) - counts)[counts > 0]
    best = np.maximum.reduceat(windows, starts)
    for idx, value in zip(np.flatnonzero(counts > 0).tolist(), best.tolist(), strict=True):
        out[idx] = max(out[idx], int(value))
    return out


def _rank_cost_floor(inst: StepInstance, p_rank: int, total: int, m: int) -> int:
    """A floor on the heaviest rank's cost (without the fixed overheads) at ``m`` micro-batches
    per rank: ``p_rank`` (its sequences' share), raised, when micro-batches pay a size term, by
    the average rank's share of the least size ``dp*m`` micro-batches can pay in all (Jensen:
    ``dp*m*size(T/(dp*m))``, ``size`` being convex)."""
    if inst.size is None:
        return p_rank
    paid = inst.size.spread_bound(int(inst.tokens.sum()), inst.dp_size * m)
    return max(p_rank, -(-(total + paid) // inst.dp_size))


def rank_maxima_seconds(inst: StepInstance) -> float:
    """The wall time :func:`_rank_maxima_bounds` takes, about: its rounds each walk the ranks
    with one binary search per candidate over the prefix sums (measured 25-135 us a rank on an
    idle machine, the more counts the longer: 0.42 s at n = 262,144, dp = 1,024, 252 counts)."""
    if inst.pp == 1 or inst.dp_size == 1:
        return 0.0
    return _GRID_ROUNDS * inst.dp_size * (25e-6 + 0.44e-6 * len(inst.feasible_ms()))


def scaled_bounds(inst: StepInstance, rank_maxima: bool = True) -> dict[int, int]:
    """For each feasible ``m``, a lower bound on ``vpp`` x the step time with that ``m``.

    With ``o`` the overhead, ``P`` = load_lower_bound(costs, dp) (a rank total, at least
    ceil(C/dp), c_max, ...) and ``L`` = load_lower_bound(costs, dp*m) (the heaviest
    micro-batch's cost; with a size term, ``P`` also covers the average rank's share of the
    least size the micro-batches pay, :func:`_rank_cost_floor`):

    * the rank with the largest cost total has sum >= ``A = P + m*o`` and, holding m micro-batches,
      max >= ``ceil(A/m)``: ``vpp*A + (pp-1)*ceil(A/m)``;
    * the rank holding the heaviest micro-batch (time >= ``L + o``) has sum >= ``L + o`` plus
      ``m - 1`` other non-empty micro-batches (each ``o`` plus at least the smallest costs):
      ``vpp*(L + m*o + s_{m-1}) + (pp-1)*(L + o)``, ``s_{m-1}`` the m-1 smallest costs' sum.

    Both terms dominate the issue's ``(C/dp + m*o)(1 + (pp-1)/(m*vpp))`` and
    ``c_max + m*o + (pp-1)(c_max + o)/vpp``. With ``pp > 1`` and several ranks, the
    rank-maxima bound of :func:`_rank_maxima_bounds` raises them further (unless
    ``rank_maxima`` is False: it costs :func:`rank_maxima_seconds`).
    """
    c, prefix, asc_prefix = _sorted_costs(inst.costs)
    o, pp, vpp, dp = inst.overhead, inst.pp, inst.vpp, inst.dp_size
    p_rank = _load_bounds(c, prefix, dp)
    ms = inst.feasible_ms()
    heavies = _load_bounds_many(c, prefix, [dp * m for m in ms])
    out = {}
    for m, heavy in zip(ms, heavies, strict=True):
        a_tot = _rank_cost_floor(inst, p_rank, int(prefix[-1]), m) + m * o
        term1 = vpp * a_tot + (pp - 1) * (-(-a_tot // m))
        term2 = vpp * (heavy + m * o + int(asc_prefix[m - 1])) + (pp - 1) * (heavy + o)
        out[m] = max(term1, term2)
    if pp > 1 and dp > 1 and rank_maxima:
        out = _rank_maxima_bounds(inst, c, prefix, out)
    return out


#: The rank-maxima bound's search: _GRID_ROUNDS rounds of _GRID candidates each narrow
#: [bound, 2*bound + 1] to 1/9**3 of its width. The bound stays valid whatever the precision:
#: only values proven impossible are passed.
_GRID = 8


_GRID_ROUNDS = 3


def _rank_maxima_bounds(
    inst: StepInstance, c: np.ndarray, prefix: np.ndarray, lower: dict[int, int]
) -> dict[int, int]:
    """Raise each count's bound with every rank's bubble, not just the heaviest one's.

    A rank whose costliest sequence is ``h`` and whose sequences cost ``P`` in all runs in at
    least ``vpp*(P + m*o) + (pp-1)*max(h + o, (P + m*o)/m)``; for a step ``Z`` (times ``vpp``)
    that caps ``P`` at ``cap(h) = min((Z - (pp-1)(h + o))/vpp, Z*m/(vpp*m + pp - 1)) - m*o``.
    Order the ranks by their costliest sequence: every sequence costlier than rank r+1's
    must sit on ranks 1..r. Relaxing the sequences to be divisible, the best case is greedy:
    rank 1's costliest is ``c_1``, and rank r+1's is the first sequence that does not fit in
    the capacity of ranks 1..r (later is better: a cheaper maximum leaves more room). ``Z`` is
    impossible when the ranks' capacities cannot hold every sequence that way, and the
    smallest possible ``Z`` is found by bisection, for all counts at once (numpy over m).
    With many long sequences every rank pays a large bubble, which the other terms miss.
    """
    ms = np.array(sorted(lower), dtype=np.int64)
    o, beta, vpp, dp, n = inst.overhead, inst.pp - 1, inst.vpp, inst.dp_size, inst.n
    lo_py = [lower[int(m)] for m in ms]
    hi_py = [2 * x + 1 for x in lo_py]
    # int64 when no intermediate (Z*m, prefix sums) can reach 2**62, else exact Python ints.
    big = max(hi_py) * (int(ms.max()) + _GRID + 1) + int(prefix[-1]) + (vpp + beta) * (o + 1) * int(ms.max())
    dt: Any = np.int64 if big < 2**62 else object
    lo = np.array(lo_py, dtype=dt)
    hi = np.array(hi_py, dtype=dt)
    m_all = ms.astype(dt)
    cs = c.astype(dt)
    pre = prefix.astype(dt)

    def feasible(z: np.ndarray, m_arr: np.ndarray) -> np.ndarray:
        j = np.zeros(len(z), dtype=np.int64)  # index of the current rank's costliest sequence
        room = np.zeros(len(z), dtype=dt)  # capacity of the ranks so far
        ok = np.ones(len(z), dtype=bool)
        done = np.zeros(len(z), dtype=bool)
        for _ in range(dp):
            h = cs[np.minimum(j, n - 1)]
            cap_r = np.minimum((z - beta * (h + o)) // vpp, (z * m_arr) // (vpp * m_arr + beta))
            cap_r = cap_r - m_arr * o
            ok &= done | (cap_r >= h)
            room = room + np.where(done, 0, cap_r)
            j = np.searchsorted(pre, room, side="right") - 1  # sequences that fit so far
            done |= j >= n
            if done.all():
                break
        return ok & done

    # Bisection on a grid: each round tests _GRID values per count at once (one pass over the
    # ranks for all of them), so the Python loop runs dp times per round, not per halving.
    steps = np.arange(1, _GRID + 1, dtype=np.int64)
    for _ in range(_GRID_ROUNDS):
        width = hi - lo
        if not (width > 0).any():
            break
        # Candidates lo + width*i/(GRID+1), i = 1..GRID (exact integer arithmetic).
        z = lo[:, None] + (width[:, None] * steps[None, :].astype(dt)) // (_GRID + 1)
        fits = feasible(z.reshape(-1), np.repeat(m_all, _GRID)).reshape(len(ms), _GRID)
        # First feasible candidate (else hi) and the last infeasible one below it.
        first = np.where(fits.any(axis=1), fits.argmax(axis=1), _GRID)
        new_hi = np.where(first < _GRID, z[np.arange(len(ms)), np.minimum(first, _GRID - 1)], hi)
        below = first - 1
        new_lo = np.where(below >= 0, z[np.arange(len(ms)), np.maximum(below, 0)] + 1, lo)
        lo, hi = new_lo, np.maximum(new_hi, new_lo)
    return {int(m): max(lower[int(m)], int(x)) for m, x in zip(ms, lo, strict=True)}


def max_micro_batch_time(inst: StepInstance, cost_total: int) -> int | None:
    """An upper bound on the time of any valid micro-batch (None: no cap, no bound).

    A micro-batch under the cap holds sequences of ``L <= cap`` tokens in all (and no more
    than every sequence's tokens), so its costs sum to at most ``a*L + b*L*l_max + c*k``
    (``sum l^2 <= max(l) * sum l``; ``k`` its sequences, at most ``L // l_min``), and never
    more than every sequence's cost together (``cost_total``); with a size term, plus the largest size on
    ``[0, L]`` (convex: at an end). An over-cap sequence sits alone: its own time."""
    if inst.cap is None:
        return None
    tokens = inst.tokens
    over = np.zeros(len(tokens), dtype=bool)
    over[list(inst.oversize)] = True
    size = inst.size
    best = 0
    for i in inst.oversize:  # alone: its own cost
        x = int(tokens[i])
        best = max(best, inst.costs[i] + (0 if size is None else size.size(x)))
    rest = tokens[~over]
    if len(rest):
        a, b, c = inst.cost.linear, inst.cost.quadratic, inst.cost.per_sequence
        low, high = int(rest.min()), int(rest.max())
        fill = min(inst.cap, int(rest.sum(dtype=np.int64)) if len(rest) < 2**31 else inst.cap)
        k = len(rest) if low == 0 else min(len(rest), fill // low)
        bound = a * fill + b * fill * min(fill, high) + c * k
        if not inst.oversize:
            bound = min(bound, cost_total)
        best = max(best, bound + (0 if size is None else size.size_max(fill)))
    return inst.overhead + best


def ends_bound(total: int, m: int, top: int | None, low: int, two: int, pp: int, vpp: int,
               model: PipelineModel = DEFAULT_MODEL) -> int:
    """A lower bound, times :func:`~.pipeline.scale`, on the makespan of ``m >= 2`` micro-batches
    of times summing to at least ``total`` under the model's schedule, each at least ``low``,
    any two at least ``two``, none above ``top`` (None: unbounded); 0 when ``m < 2``.

    Proof: in every schedule :mod:`~.pipeline` runs (1F1B, interleaved, GPipe), the last device
    starts with the forward of the first micro-batch in the order (position 0) on chunk 0 and
    ends with the backward of the last one (position ``m-1``) on chunk 0. The first cannot start
    before that micro-batch's forward crossed the ``pp-1`` devices before it (``(pp-1)*F*t_0``
    scaled, plus ``pp-1`` latencies), and after the last the backward still crosses them
    (``(pp-1)*B*t_{m-1}``); in between the device does all its work, ``scale*sum t``. So the
    makespan is at least ``scale*total + (pp-1)*(F*t_0 + B*t_{m-1}) + 2(pp-1)*latency`` with
    two distinct micro-batches, at least ``(pp-1)*(max(F,B)*y + min(F,B)*x)`` for the two
    least times ``y <= x``. These are bounded below by ``y >= low``, ``y >= total-(m-1)*top``
    (the other ``m-1`` hold at most ``top`` each) and ``x + y >= max(two, total-(m-2)*top)``;
    the least weighted sum puts ``y`` at its floor (the heavier weight) and ``x`` at
    ``max(y, pair - y)``. Monotone in ``total``: valid for the heaviest rank from any floor on
    its load."""
    if m < 2 or pp < 2:
        return 0
    y, pair = low, two
    if top is not None:
        y = max(y, total - (m - 1) * top)
        pair = max(pair, total - (m - 2) * top)
    x = max(y, pair - y)
    heavy, light = max(model.forward, model.backward), min(model.forward, model.backward)
    lat2 = 2 * (pp - 1) * model.p2p_latency * scale(vpp, model)
    return scale(vpp, model) * total + (pp - 1) * (heavy * y + light * x) + lat2


def capped_load_bound(total: int, m: int, top: int | None, pp: int, vpp: int,
                      model: PipelineModel = DEFAULT_MODEL) -> int:
    """:func:`~.pipeline.scaled_load_bound`'s geometric term when no micro-batch can take more
    than ``top`` (0: none or ``m > 256``, where it adds nothing worth the arithmetic).

    Proof: every order's makespan is at least ``scale*T_k + bb*t_k`` (+ the latencies) for every
    ``k``, ``t`` sorted descending, ``T_k`` the ``k`` largest's sum, ``bb = (pp-1)*(F+B)``
    (:func:`~.pipeline.scaled_lower_bound`). For a value ``Z`` the largest total those
    constraints allow with every ``t_k <= top`` is reached greedily, each ``t_k`` as large as
    allowed, ``min(top, (Z - scale*T_{k-1})/(scale+bb))`` (a larger prefix only loosens the
    next constraint, and the values come out descending): the first ``j`` take ``top``
    (``(scale+bb)*top <= Z - scale*(k-1)*top``), after which the slack ``D_k = Z - scale*T_k``
    shrinks by ``q = bb/(scale+bb)`` a step, so ``scale*T_m = Z - (Z - scale*j*top)*q^(m-j)``.
    ``Z`` is possible only if that reaches ``scale*total``; the least such ``Z`` (bisection over
    ``j``, then linear in ``Z``; exact ints) bounds the makespan. With ``m*top < total`` no
    split exists and the bound is vacuous but still valid."""
    if top is None or top <= 0 or m > 256 or pp < 2:
        return 0
    ss = scale(vpp, model)
    bb = (pp - 1) * (model.forward + model.backward)
    lat2 = 2 * (pp - 1) * model.p2p_latency * ss
    if m * top < total:
        return ss * total + bb * top + lat2

    floor = ss * total

    def edge(j: int) -> int:  # the least Z at which the first j micro-batches take top
        return floor if j == 0 else max(floor, (ss + bb) * top + ss * (j - 1) * top)

    def possible(z: int, j: int | None = None) -> bool:  # the greedy reaches the total
        if j is None:
            j = 0 if z < (ss + bb) * top else min(m, (z - (ss + bb) * top) // (ss * top) + 1)
        return z >= floor and (z - ss * j * top) * bb ** (m - j) <= (z - floor) * (ss + bb) ** (
            m - j)

    if possible(floor):
        return floor + lat2
    lo, hi = 0, m  # the test fails at edge(lo), holds at edge(hi) (m*top >= total)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if possible(edge(mid)):
            hi = mid
        else:
            lo = mid
    # The least Z lies in (edge(lo), edge(hi)], in region lo, where the test is linear in Z.
    p0, p1 = bb ** (m - lo), (ss + bb) ** (m - lo)
    z = min(max(-(-(floor * p1 - ss * lo * top * p0) // (p1 - p0)), edge(lo) + 1), edge(hi))
    if not possible(z) or possible(z - 1):  # never seen; a smaller value stays a bound
        return floor + lat2
    return z + lat2


def exact_scaled_bounds(inst: StepInstance, model: PipelineModel = DEFAULT_MODEL, *,
                        lp_budget: int | None = None) -> dict[int, int]:
    """For each feasible count, a lower bound on the step time times
    :func:`~seqpart.solver.step.pipeline.scale` valid for every schedule with that count, in
    every order, under ``model``'s pipeline schedule (Megatron-LM's 1F1B or interleaved, or
    GPipe; any forward:backward and p2p latency).

    With ``pp == 1`` a rank's time is the sum of its micro-batches', which the formula's bounds
    (:func:`scaled_bounds`) bound. Else, per count ``m`` (``o`` the overhead, ``P`` the heaviest
    rank's cost floor, ``L`` the heaviest micro-batch's, ``c_min`` the cheapest sequence), of the
    heaviest rank's load ``A = P + m*o`` (or the rank holding the heaviest micro-batch,
    ``L + m*o`` plus the ``m-1`` cheapest sequences; every term grows with the load), the
    largest of:

    * :func:`~seqpart.solver.step.pipeline.scaled_load_bound`: at least ``A/(1 - q^m)`` with
      ``q = (pp-1)/(pp-1+vpp)``, and ``A + (pp-1)*(o + c_min)/vpp`` (any per-device order);
    * the heaviest micro-batch's whole path through every virtual stage, ``pp*(L + o)``;
    * :func:`ends_bound`: the last device waits for the first micro-batch's forward and ends
      before the last one's backward crossed the ``pp-1`` devices before it, two distinct
      micro-batches, forced up by the cap (:func:`max_micro_batch_time`);
    * :func:`capped_load_bound`: the geometric term when no micro-batch exceeds the cap's time;
    * for Megatron-LM's schedule at forward:backward 1:2 (any latency), every count's LP
      certificate from the bundled table (:func:`bundled_certificates`: pp 2,
      3, 4, 6, 8, vpp 1, 2, 4, m up to 256 within 8,192 operations); for the other counts and
      schedules, the least bounds first, within ``lp_budget`` operations (default
      :data:`~seqpart.solver.step.makespan_optimum.LP_BUDGET`, counts of at most
      ``LP_OPERATIONS`` each; larger budgets lift both limits, for offline reports), the LP over
      every real-valued split of ``A`` into ``m`` times and every order
      (:func:`~seqpart.solver.step.makespan_optimum.lp_certificate`, exact by its dual).

    each with the p2p latencies those terms cross. The formula's bubble ``(pp-1)*max/vpp`` is
    not a bound on the real schedule. Checked against the exact optimum of tiny steps at every
    count (``tests/solver/step/test_pp_bound.py``).
    """
    sc = scale(inst.vpp, model)
    if inst.pp == 1:
        return {m: x * sc // inst.vpp for m, x in scaled_bounds(inst).items()}
    c, prefix, asc = _sorted_costs(inst.costs)
    o, pp, vpp, dp = inst.overhead, inst.pp, inst.vpp, inst.dp_size
    lat = model.p2p_latency * sc
    p_rank = _load_bounds(c, prefix, dp)
    # Every feasible count, runnable by the schedule or not (checking is O(pp*vpp*m) a count,
    # and a minimum over more counts is still a bound).
    ms = inst.feasible_ms()
    top = max_micro_batch_time(inst, int(prefix[-1]))
    two = 2 * o + int(asc[min(2, len(asc) - 1)])  # two micro-batches hold two sequences
    out, totals = {}, {}
    for m, heavy in zip(ms, _load_bounds_many(c, prefix, [dp * m for m in ms]), strict=True):
        rank_floor = _rank_cost_floor(inst, p_rank, int(prefix[-1]), m)
        total = max(rank_floor + m * o, heavy + m * o + int(asc[m - 1]))
        load = scaled_load_bound(total, m, o + int(c[-1]), pp, vpp, model)
        path = pp * sc * (heavy + o) + 2 * (pp * vpp - 1) * lat
        ends = ends_bound(total, m, top, o + int(c[-1]), two, pp, vpp, model)
        capped = capped_load_bound(total, m, top, pp, vpp, model)
        out[m] = max(load, path, ends, capped)
        totals[m] = total
    spent, free = 0, replace(model, p2p_latency=0)
    # Megatron-LM's schedule at 1:2: the certificates are bundled, every count's at no cost.
    bundled = bundled_certificates() if free == _BUNDLED_MODEL else {}
    for m in out:
        if (pp, vpp, m) in bundled:
            cost, crossed, flow = bundled[pp, vpp, m]
            out[m] = max(out[m], -(-(cost * totals[m] + crossed * lat) // flow))
    budget = LP_BUDGET if lp_budget is None else lp_budget
    largest = LP_OPERATIONS if lp_budget is None else max(LP_OPERATIONS, lp_budget)
    for m in sorted(out, key=lambda x: (out[x], x)):  # the LP where the bound is least first
        if (pp, vpp, m) in bundled:
            continue
        ops = 2 * pp * vpp * m
        if ops > largest or spent + ops > budget:
            break  # the least bounds are the ones the LP must raise: none past this one
        spent += ops
        cost, crossed, flow = lp_certificate(pp, vpp, m, free)
        out[m] = max(out[m], -(-(cost * totals[m] + crossed * lat) // flow))
    return out


def instance_exact_bounds(inst: StepInstance, model: PipelineModel) -> dict[int, int]:
    """:func:`exact_scaled_bounds` of this instance, computed once and kept in
    ``inst.shared`` (the exact phase's reported bound and the count search both read it; a
    count's own search, whose instance asks for other multiples, computes its own)."""
    key = ("exact_bounds", model, inst.multiple_of)
    if key not in inst.shared:
        inst.shared[key] = exact_scaled_bounds(inst, model)
    return inst.shared[key]


def step_lower_bound(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    cost: Any = "tokens",
    overhead: int | MicroBatchCost = 0,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int = 1,
    oversize: str = "error",
    pipeline: PipelineModel | None = None,
) -> int | Fraction:
    """A lower bound on the step time (:func:`~seqpart.solver.step.model.step_time`) of every
    valid schedule, in every order, under the pipeline schedule ``pipeline`` (default:
    Megatron-LM's, forward:backward 1:2, no p2p latency): the minimum over the feasible counts
    (multiples of ``multiple_of``, ``dp_size*m`` at least the bin-packing floor on the count and
    at most ``n``) of :func:`exact_scaled_bounds`.
    """
    inst = make_instance(
        lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
        multiple_of=multiple_of, oversize=oversize, pipeline=pipeline,
    )
    model = inst.pipeline
    return exact(min(exact_scaled_bounds(inst, model).values()), scale(inst.vpp, model))
