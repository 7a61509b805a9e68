"""The step-time model, its lower bound, the schedule validator and the result type.

The model (the README states it the same way):

* a micro-batch's time is ``t = overhead + sum over its sequences of (a*l + b*l^2)``, with
  ``(a, b)`` the :class:`~seqpart.solver.problem.Cost` and ``overhead`` in the same units;
* a rank with ``pp`` pipeline stages and ``vpp`` virtual stages per rank runs its ``m``
  micro-batches in ``sum_j t_j + (pp - 1) * max_j t_j / vpp`` (with ``pp = 1``, just the sum);
* the step time is the max over ranks.

Arithmetic is exact: costs are Python ints, and a time is an ``int`` when ``vpp`` divides the
bubble term, else a :class:`fractions.Fraction`. Internally times are kept multiplied by
``vpp`` (``vpp*sum + (pp-1)*max``), which is always an integer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from seqpart.heuristics.bounds import min_bins_lower_bound
from seqpart.heuristics.inputs import as_lengths, as_positive_int
from seqpart.solver.errors import InfeasibleError, InvalidPlanError
from seqpart.solver.plan import find_violations
from seqpart.solver.problem import Cost

__all__ = [
    "StepPlan",
    "check_schedule",
    "find_schedule_violations",
    "rank_times",
    "step_lower_bound",
    "step_time",
]

Schedule = Sequence[Sequence[Sequence[int]]]


def as_overhead(overhead: Any) -> int:
    """``overhead`` as an int >= 0 (exact arithmetic: scale a fractional one to integer units)."""
    if isinstance(overhead, (bool, np.bool_)) or not isinstance(overhead, (int, np.integer)):
        raise TypeError(
            f"overhead must be an int >= 0 in the cost's units, got {overhead!r} "
            f"({type(overhead).__name__}): round it, e.g. overhead=int(x)"
        )
    if overhead < 0:
        raise ValueError(f"overhead must be >= 0, got {overhead}: a micro-batch cannot save time")
    return int(overhead)


def as_pipeline(pp: Any, vpp: Any) -> tuple[int, int]:
    return as_positive_int(pp, "pp"), as_positive_int(vpp, "vpp")


def sequence_costs(tokens: np.ndarray, cost: Cost) -> list[int]:
    """``a*l + b*l^2`` per sequence as Python ints: exact at any size."""
    a, b = int(cost.linear), int(cost.quadratic)
    return [a * x + b * x * x for x in tokens.tolist()]


def exact(scaled: int, vpp: int) -> int | Fraction:
    """A time kept multiplied by ``vpp``, back in the cost's units: an int when it divides."""
    q, r = divmod(scaled, vpp)
    return q if r == 0 else Fraction(scaled, vpp)


def scaled_rank_time(mb_times: Sequence[int], pp: int, vpp: int) -> int:
    """``vpp * (sum + (pp-1) * max / vpp)``: the rank's time times ``vpp``, an exact int."""
    if not mb_times:
        return 0
    return vpp * sum(mb_times) + (pp - 1) * max(mb_times)


def _micro_batch_times(
    schedule: Schedule, lengths: Any, cost: Any, overhead: Any
) -> list[list[int]]:
    tokens = as_lengths(lengths)
    n = len(tokens)
    costs = sequence_costs(tokens, Cost.parse(cost))
    over = as_overhead(overhead)
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, Sequence | np.ndarray):
        raise TypeError(
            "schedule must be a list over ranks of lists of micro-batches of sequence indices, "
            f"got {type(schedule).__name__}"
        )
    out = []
    for r, rank in enumerate(schedule):
        times = []
        for j, mb in enumerate(rank):
            total = over
            for i in mb:
                if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not (
                    0 <= i < n
                ):
                    raise ValueError(
                        f"schedule[{r}][{j}] holds {i!r}, not an index in range(0, {n}): "
                        "pass indices into lengths"
                    )
                total += costs[int(i)]
            times.append(total)
        out.append(times)
    return out


def rank_times(
    schedule: Schedule,
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int = 0,
    pp: int = 1,
    vpp: int = 1,
) -> list[int | Fraction]:
    """Each rank's time under the step model: ``sum_j t_j + (pp - 1) * max_j t_j / vpp``.

    Scores any schedule, valid or not (a trainer's may break the cap): only the indices are
    checked. A rank with no micro-batch takes 0; an empty micro-batch takes ``overhead``.
    """
    pp, vpp = as_pipeline(pp, vpp)
    times = _micro_batch_times(schedule, lengths, cost, overhead)
    return [exact(scaled_rank_time(t, pp, vpp), vpp) for t in times]


def step_time(
    schedule: Schedule,
    lengths: Any,
    *,
    cost: Any = "tokens",
    overhead: int = 0,
    pp: int = 1,
    vpp: int = 1,
) -> int | Fraction:
    """The step time of ``schedule`` (list over ranks of lists of micro-batches of indices into
    ``lengths``): the max over ranks of :func:`rank_times`. Exact: an int, or a Fraction when
    ``vpp`` does not divide the bubble term."""
    times = rank_times(schedule, lengths, cost=cost, overhead=overhead, pp=pp, vpp=vpp)
    if not times:
        raise ValueError("schedule has no ranks: pass one list of micro-batches per rank")
    return max(times)


# ----------------------------------------------------------------------------- lower bound


@dataclass(frozen=True)
class StepInstance:
    """A validated step-planning instance (shared by the bound and the planner)."""

    tokens: np.ndarray
    costs: list[int]  # a*l + b*l^2, Python ints
    dp_size: int
    cap: int | None
    cost: Cost
    overhead: int
    pp: int
    vpp: int
    multiple_of: int
    oversize: tuple[int, ...]  # over-cap sequences, each alone (oversize="alone")
    k_min: int  # proven floor on the total micro-batch count (bin-packing bound)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def feasible_ms(self) -> list[int]:
        """Candidate counts per rank: multiples of ``multiple_of`` from the count floor up to
        ``n / dp_size`` (each micro-batch needs a sequence)."""
        lo = -(-max(self.k_min, 1) // self.dp_size)
        lo = -(-lo // self.multiple_of) * self.multiple_of
        hi = self.n // self.dp_size
        return list(range(lo, hi + 1, self.multiple_of))


def make_instance(
    lengths: Any,
    dp_size: Any,
    cap: Any,
    *,
    cost: Any = "tokens",
    overhead: Any = 0,
    pp: Any = 1,
    vpp: Any = 1,
    multiple_of: Any = 1,
    oversize: str = "error",
) -> StepInstance:
    """Validate every argument (the same messages as ``partition`` for what it shares) and
    raise :class:`InfeasibleError` when no count per rank can work."""
    from seqpart.solver.problem import make_problem  # the shared validation of lengths, cap, cost, oversize

    problem = make_problem(lengths, None, cap, cost=cost, oversize=oversize)
    dp_size = as_positive_int(dp_size, "dp_size")
    pp, vpp = as_pipeline(pp, vpp)
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    over = as_overhead(overhead)
    tokens = problem.tokens
    n = len(tokens)
    k_min = len(problem.oversize)
    if problem.cap is not None:
        rest = np.delete(tokens, list(problem.oversize))
        if len(rest):
            k_min += min_bins_lower_bound(rest, problem.cap)
    else:
        k_min = 1
    inst = StepInstance(
        tokens=tokens,
        costs=sequence_costs(tokens, problem.cost),
        dp_size=dp_size,
        cap=problem.cap,
        cost=problem.cost,
        overhead=over,
        pp=pp,
        vpp=vpp,
        multiple_of=multiple_of,
        oversize=problem.oversize,
        k_min=k_min,
    )
    if not inst.feasible_ms():
        m_need = -(-max(k_min, 1) // dp_size)
        m_need = -(-m_need // multiple_of) * multiple_of
        raise InfeasibleError(
            f"{n} sequences cannot fill {dp_size} ranks x {m_need} non-empty micro-batches "
            f"(the cap needs at least {k_min} micro-batches in all, and m must be a multiple of "
            f"{multiple_of}): need at least {dp_size * m_need} sequences; use fewer ranks, a "
            "smaller multiple_of, a larger cap, or add samples",
            proven=True,
        )
    return inst


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


def scaled_bounds(inst: StepInstance) -> dict[int, int]:
    """For each feasible ``m``, a lower bound on ``vpp`` x the step time with that ``m``.

    With ``o`` the overhead, ``P`` = load_lower_bound(costs, dp) (a rank total, at least
    ceil(C/dp), c_max, ...) and ``L`` = load_lower_bound(costs, dp*m) (the heaviest
    micro-batch's cost):

    * the rank with the largest cost total has sum >= ``A = P + m*o`` and, holding m micro-batches,
      max >= ``ceil(A/m)``: ``vpp*A + (pp-1)*ceil(A/m)``;
    * the rank holding the heaviest micro-batch (time >= ``L + o``) has sum >= ``L + o`` plus
      ``m - 1`` other non-empty micro-batches (each ``o`` plus at least the smallest costs):
      ``vpp*(L + m*o + s_{m-1}) + (pp-1)*(L + o)``, ``s_{m-1}`` the m-1 smallest costs' sum.

    Both terms dominate the issue's ``(C/dp + m*o)(1 + (pp-1)/(m*vpp))`` and
    ``c_max + m*o + (pp-1)(c_max + o)/vpp``. With ``pp > 1`` and several ranks, the
    rank-maxima bound of :func:`_rank_maxima_bounds` raises them further.
    """
    c = np.array(sorted(inst.costs, reverse=True), dtype=object)
    prefix = np.concatenate(([0], np.cumsum(c))).astype(object)
    asc_prefix = np.concatenate(([0], np.cumsum(c[::-1]))).astype(object)
    o, pp, vpp, dp = inst.overhead, inst.pp, inst.vpp, inst.dp_size
    p_rank = _load_bounds(c, prefix, dp)
    ms = inst.feasible_ms()
    heavies = _load_bounds_many(c, prefix, [dp * m for m in ms])
    out = {}
    for m, heavy in zip(ms, heavies, strict=True):
        a_tot = p_rank + m * o
        term1 = vpp * a_tot + (pp - 1) * (-(-a_tot // m))
        term2 = vpp * (heavy + m * o + int(asc_prefix[m - 1])) + (pp - 1) * (heavy + o)
        out[m] = max(term1, term2)
    if pp > 1 and dp > 1:
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


def step_lower_bound(
    lengths: Any,
    dp_size: int,
    cap: int | None,
    *,
    cost: Any = "tokens",
    overhead: int = 0,
    pp: int = 1,
    vpp: int = 1,
    multiple_of: int = 1,
    oversize: str = "error",
) -> int | Fraction:
    """A lower bound on the step time of every valid schedule: the minimum over feasible ``m``
    (multiples of ``multiple_of``, ``dp_size*m`` at least the bin-packing floor on the count and
    at most ``n``) of the per-``m`` bound described in :func:`scaled_bounds`. It is never below
    the issue's ``max((C/dp + m*o)(1 + (pp-1)/(m*vpp)), c_max + m*o + (pp-1)(c_max + o)/vpp)``.
    """
    inst = make_instance(
        lengths, dp_size, cap, cost=cost, overhead=overhead, pp=pp, vpp=vpp,
        multiple_of=multiple_of, oversize=oversize,
    )
    return exact(min(scaled_bounds(inst).values()), inst.vpp)


# ----------------------------------------------------------------------------- validator


def find_schedule_violations(
    schedule: Schedule,
    lengths: Any,
    dp_size: int,
    m: int,
    cap: int | None,
    multiple_of: int = 1,
    *,
    oversize: str = "error",
) -> list[str]:
    """Every broken rule of a step schedule, as messages (empty: valid). The micro-batch rules
    (every index once, none empty, none over the cap except an over-cap sequence alone when
    ``oversize="alone"``) are :func:`~seqpart.solver.plan.find_violations` on the flattened
    micro-batches; the rank rules (``dp_size`` ranks, ``m`` each, ``m`` a multiple of
    ``multiple_of``) are checked here."""
    tokens = as_lengths(lengths)
    dp_size = as_positive_int(dp_size, "dp_size")
    m = as_positive_int(m, "m")
    multiple_of = as_positive_int(multiple_of, "multiple_of")
    cap = as_positive_int(cap, "cap", allow_none=True)
    if oversize not in ("error", "alone"):
        raise ValueError(f"oversize={oversize!r}: use 'error' or 'alone'")
    msgs = []
    if len(schedule) != dp_size:
        msgs.append(f"{len(schedule)} ranks, expected dp_size={dp_size}")
    counts = [len(rank) for rank in schedule]
    if any(c != m for c in counts):
        bad = next(r for r, c in enumerate(counts) if c != m)
        msgs.append(f"rank {bad} has {counts[bad]} micro-batches, expected m={m} on every rank")
    if m % multiple_of:
        msgs.append(f"m={m} is not a multiple of multiple_of={multiple_of}")
    alone = ()
    if oversize == "alone" and cap is not None:
        alone = tuple(int(i) for i in np.flatnonzero(tokens > cap))
    flat = [mb for rank in schedule for mb in rank]
    found = find_violations(flat, tokens, len(flat), cap, oversize=alone)
    return msgs + found.messages


def check_schedule(
    schedule: Schedule,
    lengths: Any,
    dp_size: int,
    m: int,
    cap: int | None,
    multiple_of: int = 1,
    *,
    oversize: str = "error",
) -> None:
    """Raise :class:`InvalidPlanError` unless ``schedule`` is a valid step schedule (see
    :func:`find_schedule_violations`)."""
    msgs = find_schedule_violations(
        schedule, lengths, dp_size, m, cap, multiple_of, oversize=oversize
    )
    if msgs:
        raise InvalidPlanError(msgs)


# ----------------------------------------------------------------------------- result


def _num(x: int | Fraction) -> int | float:
    return x if isinstance(x, int) else float(x)


@dataclass(frozen=True)
class StepPlan:
    """A checked step schedule and what is known about it (like scipy.optimize's result).

    ``ranks[r]`` lists rank r's micro-batches in execution order, each a list of global sequence
    indices. ``step_time`` and ``rank_times`` are the model's (exact: int or Fraction);
    ``lower_bound`` bounds every valid schedule's step time (see :func:`step_lower_bound`, raised
    by CP-SAT proofs when they ran); ``status`` is "optimal" when ``step_time`` meets it, else
    "feasible".
    """

    ranks: list[list[list[int]]]
    m: int
    step_time: int | Fraction
    rank_times: list[int | Fraction]
    lower_bound: int | Fraction
    status: str
    method: str
    seconds: float
    dp_size: int
    cap: int | None
    cost: Cost
    overhead: int
    pp: int
    vpp: int
    multiple_of: int = 1
    oversize: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """(step_time - lower_bound) / lower_bound."""
        return float((Fraction(self.step_time) - self.lower_bound) / self.lower_bound)

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    @property
    def micro_batches(self) -> list[list[int]]:
        """Every micro-batch, rank by rank."""
        return [mb for rank in self.ranks for mb in rank]

    def summary(self) -> str:
        """One line for logs."""
        return (
            f"dp={self.dp_size} pp={self.pp} vpp={self.vpp} m={self.m} "
            f"step_time={_num(self.step_time)} bound={_num(self.lower_bound)} "
            f"gap={self.gap:.4%} status={self.status} method={self.method} "
            f"time={self.seconds * 1000:.1f}ms"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields (Fractions become floats)."""
        return {
            "ranks": self.ranks,
            "m": self.m,
            "step_time": _num(self.step_time),
            "rank_times": [_num(t) for t in self.rank_times],
            "lower_bound": _num(self.lower_bound),
            "gap": self.gap,
            "status": self.status,
            "method": self.method,
            "seconds": self.seconds,
            "dp_size": self.dp_size,
            "cap": self.cap,
            "cost": {"linear": self.cost.linear, "quadratic": self.cost.quadratic},
            "overhead": self.overhead,
            "pp": self.pp,
            "vpp": self.vpp,
            "multiple_of": self.multiple_of,
            "oversize": self.oversize,
            "notes": self.notes,
        }
