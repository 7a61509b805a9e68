"""The problem: validated lengths, k, cap, cost and side constraints, and its reduction to items.

Groups that must share a micro-batch are merged into one item (token sum, cost sum, sample
count), and sequences placed alone because they exceed the cap are set aside, so every engine
solves the same plain problem: items into k bins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpart.heuristics._inputs import as_lengths, as_positive_int

#: Hidden size behind the default attention-aware cost: per-token linear-layer work is about
#: 24*h^2 FLOPs and each attended pair about 4*h, so cost = 6*h*l + l*l in the same unit.
ATTENTION_HIDDEN = 4096


@dataclass(frozen=True)
class Cost:
    """Balancing cost of one sequence of length l: ``linear * l + quadratic * l * l``.

    The cap always applies to tokens (memory); the cost is what gets balanced (time). Tokens:
    ``Cost()``. Attention-aware: ``Cost.attention(hidden)`` = 6*hidden*l + l^2, which for
    hidden=4096 is 24576*l + l^2, the workload trainers use.
    """

    linear: int = 1
    quadratic: int = 0

    def __post_init__(self) -> None:
        for name in ("linear", "quadratic"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"Cost.{name} must be an int >= 0, got {v!r}")
        if self.linear == 0 and self.quadratic == 0:
            raise ValueError("Cost(linear=0, quadratic=0) gives every sequence zero cost")

    @classmethod
    def attention(cls, hidden: int = ATTENTION_HIDDEN) -> Cost:
        return cls(linear=6 * as_positive_int(hidden, "hidden"), quadratic=1)

    @classmethod
    def from_model(cls, hidden_size: int, num_layers: int, num_heads: int, *,
                   unit: int | None = None, **shape: Any) -> Cost:
        """Forward FLOPs per sequence from a model's shape (see :mod:`seqpart.solver.flops` for
        the formula and ``shape``'s names); ``unit=None`` scales to ``quadratic == 1``."""
        from .flops import ModelShape, cost_coefficients

        return cls(*cost_coefficients(ModelShape(hidden_size, num_layers, num_heads, **shape), unit))

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], *, unit: int | None = None) -> Cost:
        """:meth:`from_model` from a Hugging Face style ``config.json`` dict."""
        from .flops import cost_coefficients, shape_from_hf_config

        return cls(*cost_coefficients(shape_from_hf_config(config), unit))

    @classmethod
    def parse(cls, spec: str | Cost | tuple[int, int]) -> Cost:
        """"tokens", "attention", a ``Cost``, or a ``(linear, quadratic)`` pair."""
        if isinstance(spec, Cost):
            return spec
        if spec == "tokens":
            return cls()
        if spec == "attention":
            return cls.attention()
        if isinstance(spec, tuple) and len(spec) == 2:
            return cls(*spec)
        raise ValueError(
            f"cost={spec!r} is not understood: use 'tokens', 'attention', "
            "Cost(linear=a, quadratic=b) or a pair (a, b)"
        )

    def of(self, tokens: np.ndarray) -> np.ndarray:
        """Per-sequence cost, int64; raises rather than overflow silently."""
        t = tokens.astype(np.int64)
        if self.quadratic and int(t.max()) > 2**31:
            raise ValueError("lengths above 2**31 overflow the quadratic cost: use cost='tokens'")
        out = self.linear * t + self.quadratic * t * t
        if int(out.max()) * len(t) >= 2**62:
            raise ValueError("the summed cost overflows int64: use smaller cost coefficients")
        return out

    def __str__(self) -> str:
        if self == Cost():
            return "tokens"
        return f"{self.linear}*l + {self.quadratic}*l^2"


@dataclass(frozen=True)
class Problem:
    """A validated instance, in original sequence indices."""

    tokens: np.ndarray
    costs: np.ndarray
    k: int | None
    cap: int | None
    cost: Cost
    equal_size: bool
    groups: tuple[tuple[int, ...], ...]
    oversize: tuple[int, ...]  # placed alone, outside the cap (only with oversize="alone")

    @property
    def n(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Items:
    """What the engines pack: merged groups, oversize sequences removed."""

    members: list[list[int]]  # original indices behind each item
    tokens: list[int]
    costs: list[int]
    counts: list[int]

    def __len__(self) -> int:
        return len(self.members)

    def expand(self, bins: Sequence[Sequence[int]]) -> list[list[int]]:
        """Item bins back to sorted original indices."""
        return [sorted(i for item in b for i in self.members[item]) for b in bins]


def make_problem(
    lengths: Any,
    k: Any,
    cap: Any,
    *,
    cost: str | Cost | tuple[int, int] = "tokens",
    equal_size: bool = False,
    groups: Sequence[Sequence[int]] | None = None,
    oversize: str = "error",
) -> Problem:
    """Validate every argument up front, so nothing is half-done when one is wrong."""
    tokens = as_lengths(lengths)
    n = len(tokens)
    k = as_positive_int(k, "k", allow_none=True)
    cap = as_positive_int(cap, "cap", allow_none=True)
    spec = Cost.parse(cost)
    if k is not None and k > n:
        raise ValueError(
            f"k={k} micro-batches cannot all be non-empty with only {n} sequences: "
            f"use k <= {n} (or k=None for the smallest feasible count)"
        )
    if oversize not in ("error", "alone"):
        raise ValueError(f"oversize={oversize!r}: use 'error' or 'alone'")
    over: tuple[int, ...] = ()
    if cap is not None:
        too_long = np.flatnonzero(tokens > cap)
        if too_long.size and oversize == "error":
            i = int(too_long[0])
            more = f" (and {too_long.size - 1} more)" if too_long.size > 1 else ""
            raise ValueError(
                f"sequence {i} has {int(tokens[i])} tokens, over cap={cap}{more}: raise the cap, "
                "truncate or drop it, or pass oversize='alone' to give each such sequence "
                "a micro-batch of its own"
            )
        over = tuple(int(i) for i in too_long)
    if equal_size and over:
        raise ValueError("equal_size=True cannot place over-cap sequences alone: drop them first")
    norm_groups = _check_groups(groups, n, set(over))
    if equal_size and k is not None and n % k:
        raise ValueError(
            f"equal_size=True needs len(lengths)={n} divisible by k={k}: "
            "pad or drop samples, or use equal_size=False"
        )
    return Problem(tokens, spec.of(tokens), k, cap, spec, bool(equal_size), norm_groups, over)


def _check_groups(
    groups: Sequence[Sequence[int]] | None, n: int, over: set[int]
) -> tuple[tuple[int, ...], ...]:
    if not groups:
        return ()
    seen: set[int] = set()
    out = []
    for g, group in enumerate(groups):
        members = []
        for i in group:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"groups[{g}] holds {i!r}: groups are lists of sequence indices")
            if not 0 <= i < n:
                raise ValueError(f"groups[{g}] holds index {i}, outside range(0, {n})")
            if i in seen:
                raise ValueError(f"index {i} is in two groups: merge those groups into one")
            if i in over:
                raise ValueError(f"groups[{g}] holds sequence {i}, which is over the cap alone")
            seen.add(int(i))
            members.append(int(i))
        if len(members) > 1:
            out.append(tuple(sorted(members)))
    return tuple(out)


def make_items(problem: Problem) -> Items:
    """Merge groups; leave out the oversize sequences (they get bins of their own)."""
    grouped = {i for g in problem.groups for i in g}
    skip = set(problem.oversize) | grouped
    tok = problem.tokens.tolist()
    cst = problem.costs.tolist()
    if not skip:  # the common case, kept cheap: one item per sequence
        return Items([[i] for i in range(problem.n)], tok, cst, [1] * problem.n)
    members = [list(g) for g in problem.groups]
    members += [[i] for i in range(problem.n) if i not in skip]
    members.sort(key=lambda m: m[0])
    return Items(
        members=members,
        tokens=[sum(tok[i] for i in m) for m in members],
        costs=[sum(cst[i] for i in m) for m in members],
        counts=[len(m) for m in members],
    )
