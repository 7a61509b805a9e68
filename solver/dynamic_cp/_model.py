"""The dynamic-CP model: the domain, the cost of a group step, the two sync models, the validator.

A schedule is a list of steps. In each step the ``n_gpus`` GPUs are tiled by aligned groups
(a group of degree ``c`` is the ranks ``[s, s + c)`` with ``s % c == 0``, ``c`` an allowed
degree); each group runs whole sequences whose tokens sum to at most ``c * max_tokens_per_gpu``;
every GPU runs a non-empty group in every step and every sequence runs exactly once.

A group step takes, on each of its GPUs,
``sum(a*l + b*l^2 + p)/c + cp_comm * sum(l) * (c-1)/c + overhead``
(exact: ints and Fractions). ``sync="barrier"`` ends every step with its slowest group;
``sync="dag"`` starts a group when all its members have finished their previous group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ...heuristics.inputs import as_lengths, as_positive_int
from ..batch_cost import MicroBatchCost
from ..errors import InvalidPlanError
from ..problem import Cost

__all__ = [
    "SYNCS",
    "CPInstance",
    "CPStepPlan",
    "Steps",
    "check_cp_schedule",
    "cp_step_time",
    "default_degrees",
    "find_cp_violations",
    "make_cp_instance",
    "sample_id_groups",
]

#: The sync models: each step ends with its slowest group, or each group waits for its members.
SYNCS = ("barrier", "dag")

#: steps[s] = [(ranks, sequence ids), ...]: the groups of step s, ranks an aligned block.
Steps = list[list[tuple[tuple[int, ...], tuple[int, ...]]]]


def default_degrees(n_gpus: int) -> tuple[int, ...]:
    """Megatron-LM's degrees (the sizes that get process groups): powers of two ``c`` with
    ``2c <= n_gpus``, plus ``n_gpus`` itself."""
    out = []
    c = 1
    while 2 * c <= n_gpus:
        out.append(c)
        c *= 2
    return tuple(sorted(set(out) | {n_gpus}))


def _exact(x: Fraction) -> int | Fraction:
    return int(x) if x.denominator == 1 else x


def _as_fraction(value: Any, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) and not hasattr(
            value, "__index__"):
        raise TypeError(f"{name} must be a number >= 0 (int, float or Fraction), got {value!r}")
    frac = Fraction(value) if not hasattr(value, "__index__") else Fraction(int(value))
    if frac < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return frac


def _as_cost(cost: Any, overhead: Any) -> tuple[Cost, int]:
    """seqpart's Cost (or its names) and an overhead; a CostProfile gives both."""
    if hasattr(cost, "cost") and hasattr(cost, "overhead") and not isinstance(cost, (str, tuple)):
        profile_overhead = cost.overhead
        cost = cost.cost
        if overhead == 0:
            overhead = profile_overhead
    spec = Cost.parse(cost)
    if isinstance(overhead, MicroBatchCost):
        if overhead.has_size:
            raise ValueError("overhead: a MicroBatchCost with a size term is not modelled by the "
                             "dynamic-CP planner; pass its fixed part, overhead=cost.overhead")
        overhead = overhead.overhead
    if isinstance(overhead, bool) or not hasattr(overhead, "__index__"):
        raise TypeError(f"overhead must be an int >= 0 in the cost's units, got {overhead!r}: "
                        "round it, e.g. overhead=int(x)")
    if int(overhead) < 0:
        raise ValueError(f"overhead must be >= 0, got {overhead}")
    return spec, int(overhead)


@dataclass(frozen=True)
class CPInstance:
    """A validated problem: lengths, domain and cost, with each time scaled to an int."""

    lengths: tuple[int, ...]
    n_gpus: int
    m: int  # max tokens per GPU
    degrees: tuple[int, ...]
    cost: Cost
    cp_comm: Fraction
    overhead: int
    sync: str
    scale: int = field(init=False)  # every group time times ``scale`` is an int

    def __post_init__(self) -> None:
        lcm = 1
        for c in self.degrees:
            lcm = lcm * c // _gcd(lcm, c)
        object.__setattr__(self, "scale", lcm * self.cp_comm.denominator)

    def work(self, i: int) -> int:
        lo = self.lengths[i]
        return self.cost.linear * lo + self.cost.quadratic * lo * lo + self.cost.per_sequence

    def min_degree(self, tokens: int) -> int | None:
        """The smallest allowed degree whose group holds ``tokens``, or None."""
        for c in self.degrees:
            if tokens <= c * self.m:
                return c
        return None

    def scaled_time(self, c: int, work: int, tokens: int) -> int:
        """``scale`` times one GPU's time for a group of degree c with this work and tokens."""
        per = self.scale // c  # an int: c divides scale
        comm = self.cp_comm.numerator * (per // self.cp_comm.denominator)
        return per * work + comm * tokens * (c - 1) + self.scale * self.overhead

    def group_time(self, c: int, ids: Sequence[int]) -> Fraction:
        w = sum(self.work(i) for i in ids)
        tok = sum(self.lengths[i] for i in ids)
        return Fraction(w, c) + self.cp_comm * tok * (c - 1) / c + self.overhead


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def make_cp_instance(lengths: Any, n_gpus: Any, max_tokens_per_gpu: Any, *, degrees: Any = None,
                     cost: Any = "attention", cp_comm: Any = 0, overhead: Any = 0,
                     sync: str = "barrier") -> CPInstance:
    """Validate every argument (naming it and the fix)."""
    toks = [int(x) for x in as_lengths(lengths).tolist()]
    n = as_positive_int(n_gpus, "n_gpus")
    m = as_positive_int(max_tokens_per_gpu, "max_tokens_per_gpu")
    degs = _check_degrees(degrees, n)
    if sync not in SYNCS:
        raise ValueError(f"sync={sync!r}: use 'barrier' (every step ends with its slowest group) "
                         "or 'dag' (a group starts when its members are free)")
    spec, over = _as_cost(cost, overhead)
    comm = _as_fraction(cp_comm, "cp_comm")
    top = max(degs)
    for i, lo in enumerate(toks):
        if lo > top * m:
            raise ValueError(
                f"lengths[{i}]={lo} tokens is longer than the largest group holds ({top} GPUs x "
                f"max_tokens_per_gpu={m} = {top * m}): raise max_tokens_per_gpu to at least "
                f"{-(-lo // top)}, use more GPUs, or truncate the sequence")
    return CPInstance(tuple(toks), n, m, degs, spec, comm, over, sync)


def _check_degrees(degrees: Any, n: int) -> tuple[int, ...]:
    if degrees is None:
        return default_degrees(n)
    if isinstance(degrees, (str, bytes)) or not isinstance(degrees, Sequence | set | frozenset):
        raise TypeError(f"degrees must be a list of ints (group sizes), got {degrees!r}")
    out = sorted({as_positive_int(c, "degrees") for c in degrees})
    if not out:
        raise ValueError("degrees is empty: pass at least one group size, e.g. degrees=[1]")
    bad = [c for c in out if c > n]
    if bad:
        raise ValueError(f"degrees {bad} exceed n_gpus={n}: drop them")
    if not _tiles(n, out):
        raise ValueError(
            f"degrees {out} cannot tile n_gpus={n} GPUs with aligned blocks (a group of degree c "
            f"starts at a multiple of c): include a degree dividing {n}, e.g. 1 or {n}")
    return tuple(out)


def _tiles(n: int, degrees: Sequence[int]) -> bool:
    """Whether aligned blocks of these degrees can tile ranks [0, n)."""
    reach = [False] * (n + 1)
    reach[0] = True
    for s in range(n):
        if reach[s]:
            for c in degrees:
                if s % c == 0 and s + c <= n:
                    reach[s + c] = True
    return reach[n]


# ----------------------------------------------------------------------------- validator


def find_cp_violations(inst: CPInstance, steps: Any) -> list[str]:
    """Every hard constraint ``steps`` breaks, one line each (empty when valid)."""
    out: list[str] = []
    if not isinstance(steps, Sequence) or not steps and inst.lengths:
        return ["steps: a schedule needs at least one step (a list of groups)"]
    seen: dict[int, int] = {}
    for s, step in enumerate(steps):
        covered = [False] * inst.n_gpus
        for ranks, ids in step:
            out += _group_violations(inst, s, tuple(ranks), tuple(ids), covered, seen)
        idle = [r for r, hit in enumerate(covered) if not hit]
        if idle:
            out.append(f"step {s}: ranks {idle} run nothing (every GPU runs in every step)")
    n = len(inst.lengths)
    missing = [i for i in range(n) if i not in seen]
    if missing:
        out.append(f"sequences {missing} are in no group")
    twice = [i for i, k in seen.items() if k > 1]
    if twice:
        out.append(f"sequences {sorted(twice)} run more than once")
    return out


def _group_violations(inst: CPInstance, s: int, ranks: tuple[int, ...], ids: tuple[int, ...],
                      covered: list[bool], seen: dict[int, int]) -> list[str]:
    out = []
    c = len(ranks)
    where = f"step {s}, ranks {list(ranks)}"
    if c == 0 or list(ranks) != list(range(ranks[0], ranks[0] + c)) or ranks[0] % c:
        return out + [f"{where}: not an aligned block of consecutive ranks"]
    if ranks[0] < 0 or ranks[-1] >= inst.n_gpus:
        return out + [f"{where}: outside ranks 0..{inst.n_gpus - 1}"]
    if c not in inst.degrees:
        out.append(f"{where}: degree {c} is not allowed (degrees {list(inst.degrees)})")
    for r in ranks:
        if covered[r]:
            out.append(f"{where}: rank {r} is in two groups")
        covered[r] = True
    if not ids:
        out.append(f"{where}: the group runs no sequence")
    bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(inst.lengths)]
    if bad:
        return out + [f"{where}: sequence ids {bad} are out of range"]
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    tok = sum(inst.lengths[i] for i in ids)
    if tok > c * inst.m:
        out.append(f"{where}: {tok} tokens over {c} x max_tokens_per_gpu = {c * inst.m}")
    return out


def check_cp_schedule(lengths: Any, steps: Any, n_gpus: Any, max_tokens_per_gpu: Any, *,
                      degrees: Any = None) -> None:
    """Raise :class:`InvalidPlanError` listing every violation, or return None."""
    inst = make_cp_instance(lengths, n_gpus, max_tokens_per_gpu, degrees=degrees)
    violations = find_cp_violations(inst, steps)
    if violations:
        raise InvalidPlanError(violations)


# ----------------------------------------------------------------------------- time


def schedule_time(inst: CPInstance, steps: Steps, sync: str | None = None) -> Fraction:
    """The modelled time of a valid schedule under ``sync`` (default the instance's)."""
    sync = sync or inst.sync
    lens = inst.lengths

    def scaled(ranks: Sequence[int], ids: Sequence[int]) -> int:
        return inst.scaled_time(len(ranks), sum(inst.work(i) for i in ids), sum(lens[i] for i in ids))

    if sync == "barrier":
        total = sum(max(scaled(r, ids) for r, ids in step) for step in steps)
        return Fraction(total, inst.scale)
    free = [0] * inst.n_gpus
    for step in steps:
        for ranks, ids in step:
            end = max(free[r] for r in ranks) + scaled(ranks, ids)
            for r in ranks:
                free[r] = end
    return Fraction(max(free) if free else 0, inst.scale)


def cp_step_time(lengths: Any, steps: Steps, *, n_gpus: int | None = None,
                 max_tokens_per_gpu: int | None = None, degrees: Any = None,
                 cost: Any = "attention", cp_comm: Any = 0, overhead: Any = 0,
                 sync: str = "barrier") -> int | Fraction:
    """The modelled time of any schedule (a trainer's included), exact. ``n_gpus`` defaults to
    the ranks the schedule uses, ``max_tokens_per_gpu`` to no cap; the schedule is validated."""
    toks = [int(x) for x in as_lengths(lengths).tolist()]
    if n_gpus is None:
        n_gpus = 1 + max((max(r) for step in steps for r, _ in step), default=0)
    if max_tokens_per_gpu is None:
        max_tokens_per_gpu = max(1, sum(toks))
    if degrees is None:
        degrees = sorted({len(r) for step in steps for r, _ in step} | {1})
    inst = make_cp_instance(toks, n_gpus, max_tokens_per_gpu, degrees=degrees, cost=cost,
                            cp_comm=cp_comm, overhead=overhead, sync=sync)
    violations = find_cp_violations(inst, steps)
    if violations:
        raise InvalidPlanError(violations)
    return _exact(schedule_time(inst, steps))


def sample_id_groups(steps: Steps, n_gpus: int) -> list[list[list[int]]]:
    """Megatron-LM's format: ``[step][rank] -> ids`` (ranks of one group share the list)."""
    out = []
    for step in steps:
        row: list[list[int]] = [[] for _ in range(n_gpus)]
        for ranks, ids in step:
            for r in ranks:
                row[r] = list(ids)
        out.append(row)
    return out


def steps_from_groups(groups: Sequence[Sequence[Sequence[int]]]) -> Steps:
    """The inverse of :func:`sample_id_groups`: ranks with the same list form one group."""
    steps: Steps = []
    for row in groups:
        step = []
        r = 0
        while r < len(row):
            ids = tuple(int(i) for i in row[r])
            start = r
            while r < len(row) and tuple(int(i) for i in row[r]) == ids:
                r += 1
            step.append((tuple(range(start, r)), ids))
        steps.append(step)
    return steps


@dataclass
class CPStepPlan:
    """A dynamic-CP schedule that passed :func:`check_cp_schedule`.

    ``steps[s]`` lists step s's groups as ``(ranks, sequence ids)``; ``sample_id_groups`` is the
    same in Megatron-LM's ``[step][rank] -> ids``. ``step_time`` is its modelled time under
    ``sync``, ``lower_bound`` a bound below every schedule's, ``gap = step_time / lower_bound - 1``.
    ``status`` is "optimal" when proven (the time meets the bound, or the exact model closed),
    else "feasible". ``method`` names the start or search that gave it. ``stopped_by`` says what
    ended the search, in :data:`~seqpart.solver.plan.StopReason`'s words ("proof", "work",
    "clock", "safety_net", "complete"); ``bound_source`` which bound gave ``lower_bound``:
    "degree_choice" (:func:`cp_lower_bound`) or "cpsat" (the exact model's).
    """

    steps: Steps
    sample_id_groups: list[list[list[int]]]
    step_time: int | Fraction
    lower_bound: int | Fraction
    gap: float
    status: str
    degrees_used: tuple[int, ...]
    sync: str
    method: str
    stopped_by: str
    bound_source: str = "degree_choice"
    notes: list[str] = field(default_factory=list)
    baselines: dict[str, int | Fraction] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return len(self.steps)
