"""The result type and the one validator every returned plan passes."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from ..heuristics.inputs import as_lengths, as_positive_int, check_nesting
from .errors import InvalidPlanError
from .problem import Cost


@dataclass(frozen=True)
class Violations:
    """What is wrong with a candidate split; empty means valid. Counted, so studies can tally."""

    messages: list[str] = field(default_factory=list)
    wrong_bin_count: bool = False
    missing: int = 0
    duplicated: int = 0
    out_of_range: int = 0
    empty_bins: int = 0
    over_cap_bins: int = 0
    split_groups: int = 0
    unequal_bins: int = 0

    @property
    def ok(self) -> bool:
        return not self.messages


def find_violations(
    bins: Sequence[Sequence[int]],
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    oversize: Sequence[int] = (),
    groups: Sequence[Sequence[int]] = (),
    equal_size: bool = False,
    scratch: dict[str, Any] | None = None,
    flat: np.ndarray | None = None,
) -> Violations:
    """Check every hard constraint: each index exactly once, exactly k bins, none empty, none over
    ``cap`` (except a listed ``oversize`` sequence alone in its bin), groups kept together, and
    equal sample counts when asked. ``scratch``, when given, receives the flattened indices
    ("idx", an int64 array) when every entry is a plain int, so a caller that sums per bin
    next does not flatten 10^6 entries twice. ``flat``: the entries of ``bins`` in order as an
    int64 array, when the caller built ``bins`` as slices of ``flat.tolist()`` (so they are
    plain ints): then they are not flattened and type-checked again. It must agree with the
    bins' sizes and every bin's first entry, else it is ignored."""
    tokens = as_lengths(lengths)
    n = len(tokens)
    k = as_positive_int(k, "k")
    if flat is None:
        check_nesting(bins, "bins", 1)
    msgs: list[str] = []
    wrong_k = len(bins) != k
    if wrong_k:
        msgs.append(f"{len(bins)} micro-batches, expected exactly k={k}")
    idx = None
    if flat is not None and _agrees(bins, flat):
        entries: list[Any] = []  # not needed: every entry is a plain int
        plain_ints = True
        idx = flat
    else:
        entries = list(itertools.chain.from_iterable(bins))
        plain_ints = set(map(type, entries)) <= {int}
    if plain_ints:  # the common case, checked without a Python loop
        if idx is None:
            idx = np.fromiter(entries, dtype=np.int64, count=len(entries))
        if scratch is not None:
            scratch["idx"] = idx
        in_range = (idx >= 0) & (idx < n)
        out_of_range = int((~in_range).sum())
        seen = np.bincount(idx[in_range], minlength=n)
    else:
        seen = np.zeros(n, dtype=np.int64)
        out_of_range = 0
        for i in entries:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                out_of_range += 1
            elif 0 <= i < n:
                seen[i] += 1
            else:
                out_of_range += 1
    if out_of_range:
        msgs.append(f"{out_of_range} entries are not indices in range(0, {n})")
    missing = int((seen == 0).sum())
    duplicated = int((seen > 1).sum())
    if missing:
        msgs.append(f"{missing} sequences are in no micro-batch (first: {int(np.argmin(seen))})")
    if duplicated:
        msgs.append(f"{duplicated} sequences are in more than one micro-batch")
    empty = [b for b, items in enumerate(bins) if len(items) == 0]
    if empty:
        msgs.append(f"{len(empty)} micro-batches are empty (first: #{empty[0]})")
    alone_ok = {int(i) for i in oversize}
    over = []
    if cap is not None:
        clean = plain_ints and not out_of_range
        for b, total in enumerate(_bin_tokens(bins, tokens, idx if clean else None)):
            if total > cap and not (len(bins[b]) == 1 and int(bins[b][0]) in alone_ok):
                over.append((b, total))
        if over:
            b, total = over[0]
            msgs.append(f"{len(over)} micro-batches exceed cap={cap} (first: #{b} with {total})")
    split = 0
    if groups:
        where = {int(i): b for b, items in enumerate(bins) for i in items}
        split = sum(1 for g in groups if len({where.get(int(i), -1) for i in g}) > 1)
    if split:
        msgs.append(f"{split} groups are split across micro-batches")
    unequal = 0
    if equal_size and bins:
        sizes = {len(items) for items in bins}
        unequal = 0 if len(sizes) == 1 else len(bins)
        if unequal:
            msgs.append(f"micro-batch sizes differ ({min(sizes)}..{max(sizes)}) with equal_size")
    return Violations(
        messages=msgs,
        wrong_bin_count=wrong_k,
        missing=missing,
        duplicated=duplicated,
        out_of_range=out_of_range,
        empty_bins=len(empty),
        over_cap_bins=len(over),
        split_groups=split,
        unequal_bins=unequal,
    )


def _agrees(bins: Sequence[Sequence[int]], flat: np.ndarray) -> bool:
    """Whether ``flat`` can be the entries of ``bins`` in order: the sizes agree and every
    bin's first entry is the plain int where the bin starts in ``flat``."""
    sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
    if flat.dtype != np.int64 or int(sizes.sum()) != len(flat) or not sizes.all():
        return False
    firsts = [b[0] for b in bins]  # one entry per bin: at n=10^6 each read is a cache miss
    if not set(map(type, firsts)) <= {int}:
        return False
    return bool((np.asarray(firsts, dtype=np.int64) == flat[np.cumsum(sizes) - sizes]).all())


def _bin_tokens(
    bins: Sequence[Sequence[int]], tokens: np.ndarray, idx: np.ndarray | None
) -> list[int]:
    """Token sum per bin, counting only entries that are valid indices (``idx``: the flat
    entries as an array, given when all of them are)."""
    n = len(tokens)
    if idx is not None and n and int(tokens.max()) * n < 2**62:  # exact int64 prefix sums
        sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
        prefix = np.concatenate(([0], np.cumsum(tokens[idx])))
        ends = np.cumsum(sizes)
        return (prefix[ends] - prefix[ends - sizes]).tolist()
    out = []
    for items in bins:
        valid = [int(i) for i in items if isinstance(i, (int, np.integer))
                 and not isinstance(i, (bool, np.bool_)) and 0 <= i < n]
        out.append(int(tokens[valid].sum()) if valid else 0)
    return out


def check_plan(
    bins: Sequence[Sequence[int]],
    lengths: Any,
    k: int,
    cap: int | None = None,
    *,
    oversize: Sequence[int] = (),
    groups: Sequence[Sequence[int]] = (),
    equal_size: bool = False,
    scratch: dict[str, Any] | None = None,
    flat: np.ndarray | None = None,
) -> None:
    """Raise :class:`InvalidPlanError` unless ``bins`` is a valid plan (see find_violations)."""
    found = find_violations(
        bins, lengths, k, cap, oversize=oversize, groups=groups, equal_size=equal_size,
        scratch=scratch, flat=flat,
    )
    if not found.ok:
        raise InvalidPlanError(found.messages)


#: Why a search ended (``Plan.stopped_by``, ``StepPlan.stopped_by``), one of:
#:
#: - ``"proof"``: the plan meets a proven lower bound (and with ``k=None`` the count is proven
#:   smallest): nothing better exists, so nothing was left to search.
#: - ``"work"``: the counted work budget ran out (repeatable timings): a step was stopped, or not
#:   begun, because the estimated work left did not pay for it. A longer ``time_limit`` searches
#:   further; the same input and limit give the same plan on any machine.
#: - ``"clock"``: the wall clock, which is the budget in clock timing (``plan_step``: unless
#:   ``deterministic``), ended the search. The plan can differ from run to run.
#: - ``"safety_net"``: in "work" timing the wall clock stopped a step before its counted work ran
#:   out (a loaded or slow machine). Reported whatever else happened, a proof included: this
#:   plan may differ from another run's.
#: - ``"interrupt"``: a Ctrl-C stopped a CP-SAT solve and the caller's handler did not raise.
#: - ``"complete"``: every step ended on its own (converged, searched out, or not applicable)
#:   before the budget ran out, without a proof: a longer limit gives the same plan.
StopReason = Literal["proof", "work", "clock", "safety_net", "interrupt", "complete"]
STOP_REASONS: tuple[StopReason, ...] = (
    "proof", "work", "clock", "safety_net", "interrupt", "complete")


def stop_reason(proven: bool, *, interrupted: bool = False, safety_net: bool = False,
                clock: bool = False, work: bool = False) -> StopReason:
    """The one :data:`StopReason` for what a search knows of its end, in this order: a Ctrl-C,
    the safety net (either may change the plan, whatever else happened), a proof, the clock
    running out, the counted work running out, else "complete"."""
    if interrupted:
        return "interrupt"
    if safety_net:
        return "safety_net"
    if proven:
        return "proof"
    if clock:
        return "clock"
    return "work" if work else "complete"

#: Which bound gave ``Plan.lower_bound`` (``Plan.bound_source``), one of:
#:
#: - ``"load"``: the counting bounds: the mean load, the heaviest sequence (or group), the k-th
#:   and (k+1)-th heaviest together, and with equal sizes the heaviest with the lightest others.
#: - ``"token_room"``: a cost other than tokens under a cap with little room: the heaviest
#:   sequences cannot share full micro-batches (token-room and full-pair bounds).
#: - ``"packing"``: the bin-packing bound (Martello-Toth L2) searched over the loads.
#: - ``"fluid_lp"``: the fluid LP (the heaviest sequences whole, the others split).
#: - ``"lp"``: the Gilmore-Gomory LP relaxation.
#: - ``"load_search"``: the waste-limited LP of the load search.
#: - ``"exact"``: the exact search refuted every lower load.
#: - ``"cpsat"``: CP-SAT's bound (or its proof of optimality).
#: - ``"oversize"``: a sequence over the cap, alone in its micro-batch, costs that much.
BoundSource = Literal["load", "token_room", "packing", "fluid_lp", "lp", "load_search", "exact",
                      "cpsat", "oversize"]
BOUND_SOURCES: tuple[BoundSource, ...] = (
    "load", "token_room", "packing", "fluid_lp", "lp", "load_search", "exact", "cpsat", "oversize")
#: Which bound gave ``StepPlan.lower_bound`` (``StepPlan.bound_source``): ``"step_bound"``, the
#: step lower bound (:func:`~seqpart.solver.step.step_lower_bound`: the load terms and the
#: pipeline bubble at every count), or ``"cpsat"``, CP-SAT's proofs on a tiny instance (pp = 1).
StepBoundSource = Literal["step_bound", "cpsat"]


class _Solved(Protocol):
    """What every result reports after its own figures (:class:`Plan`, ``StepPlan``)."""

    @property
    def gap(self) -> float: ...

    @property
    def status(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def seconds(self) -> float: ...


def log_line(figures: str, result: _Solved) -> str:
    """A result's one line for logs (its ``summary()``): its own ``figures``, then the gap, the
    status, the method and the time, written alike for every kind of result."""
    return (f"{figures} gap={result.gap:.4%} status={result.status} method={result.method} "
            f"time={result.seconds * 1000:.1f}ms")


@dataclass(frozen=True)
class Plan:
    """A checked micro-batch plan, with everything a caller or a study needs about it.

    ``bins[b]`` lists the sequence indices of micro-batch b, ascending; micro-batches are ordered
    by their first index. ``loads`` are per micro-batch in the balancing cost (tokens unless a
    cost was chosen), ``tokens`` the token sums the cap applies to. ``status`` is "optimal" only
    when ``max_load`` equals a proven ``lower_bound``; ``gap`` is (max_load - lower_bound) /
    lower_bound. ``method`` names the engine that produced the bins, ``notes`` why (fallbacks,
    skipped models), for people to read. ``k_status`` is "given", "optimal" (proven smallest
    count) or "upper_bound". ``stopped_by`` says why the search ended (:data:`StopReason`) and
    ``bound_source`` which bound gave ``lower_bound`` (:data:`BoundSource`): decide from these
    fields, never from ``notes``.
    """

    bins: list[list[int]]
    loads: list[int]
    tokens: list[int]
    max_load: int
    lower_bound: int
    status: str
    method: str
    seconds: float
    k: int
    cap: int | None
    cost: Cost
    k_status: str = "given"
    k_lower_bound: int | None = None
    oversize: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped_by: StopReason = "complete"
    bound_source: BoundSource = "load"

    @property
    def gap(self) -> float:
        return (self.max_load - self.lower_bound) / self.lower_bound

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    @property
    def sizes(self) -> list[int]:
        """Sequences per micro-batch."""
        return [len(b) for b in self.bins]

    def __len__(self) -> int:
        return len(self.bins)

    def summary(self) -> str:
        """One line for logs."""
        k_note = "" if self.k_status == "given" else f" ({self.k_status})"
        return log_line(f"k={self.k}{k_note} max_load={self.max_load} bound={self.lower_bound}", self)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields (the CLI's and studies' record)."""
        return {
            "k": self.k,
            "cap": self.cap,
            "bins": self.bins,
            "loads": self.loads,
            "tokens": self.tokens,
            "max_load": self.max_load,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "status": self.status,
            "method": self.method,
            "seconds": self.seconds,
            "cost": self.cost.as_dict(),
            "k_status": self.k_status,
            "k_lower_bound": self.k_lower_bound,
            "oversize": self.oversize,
            "notes": self.notes,
            "stopped_by": self.stopped_by,
            "bound_source": self.bound_source,
        }
