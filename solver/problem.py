"""The problem: validated lengths, k, cap, cost and side constraints, and its reduction to items.

Groups that must share a micro-batch are merged into one item (token sum, cost sum, sample
count), and sequences placed alone because they exceed the cap are set aside, so every engine
solves the same plain problem: items into k bins.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..heuristics.inputs import as_lengths, as_positive_int

#: Hidden size behind the default attention-aware cost: per-token linear-layer work is about
#: 24*h^2 FLOPs and each attended pair about 4*h, so cost = 6*h*l + l*l in the same unit.
ATTENTION_HIDDEN = 4096


@dataclass(frozen=True)
class Cost:
    """Balancing cost of one sequence of length l: ``linear * l + quadratic * l * l +
    per_sequence``.

    The cap always applies to tokens (memory); the cost is what gets balanced (time). Tokens:
    ``Cost()``. Attention-aware: ``Cost.attention(hidden)`` = 6*hidden*l + l^2, which for
    hidden=4096 is 24576*l + l^2, the workload trainers use. ``per_sequence`` is a fixed cost
    each sequence pays whatever its length (e.g. a kernel launched per sequence); a calibration
    fills it in when the measurements show one (:func:`seqpart.solver.load_cost_profile`).
    """

    linear: int = 1
    quadratic: int = 0
    per_sequence: int = 0

    def __post_init__(self) -> None:
        for name in ("linear", "quadratic", "per_sequence"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"Cost.{name} must be an int >= 0, got {v!r} ({type(v).__name__})")
            if v < 0:
                raise ValueError(f"Cost.{name} must be an int >= 0, got {v!r}")
            # numpy integers wrap in int64 arithmetic; every cost is computed in Python ints.
            object.__setattr__(self, name, int(v))
        if self.linear == 0 and self.quadratic == 0:
            raise ValueError("Cost(linear=0, quadratic=0) makes every sequence cost the same "
                             "whatever its length: give linear or quadratic a value > 0")

    @classmethod
    def attention(cls, hidden: int = ATTENTION_HIDDEN) -> Cost:
        return cls(linear=6 * as_positive_int(hidden, "hidden"), quadratic=1)

    @classmethod
    def from_model(cls, hidden_size: int | None = None, num_layers: int | None = None,
                   num_heads: int | None = None, *, unit: int | None = None, **shape: Any) -> Cost:
        """Forward FLOPs per sequence from a model's shape (see :mod:`seqpart.solver.flops` for
        the formula); ``shape`` takes ModelShape's names or Hugging Face's (``intermediate_size``,
        ``num_hidden_layers``, ``num_key_value_heads``, ...). ``unit=None`` scales to
        ``quadratic == 1``; a unit that would round a term to 0 is refused."""
        from .flops import cost_coefficients, model_shape

        return cls(*cost_coefficients(model_shape(
            hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, **shape), unit))

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], *, unit: int | None = None) -> Cost:
        """:meth:`from_model` from a Hugging Face style ``config.json`` dict."""
        from .flops import cost_coefficients, shape_from_hf_config

        return cls(*cost_coefficients(shape_from_hf_config(config), unit))

    @classmethod
    def parse(cls, spec: str | Cost | tuple[int, ...]) -> Cost:
        """"tokens", "attention", a ``Cost``, a ``(linear, quadratic)`` pair or a
        ``(linear, quadratic, per_sequence)`` triple."""
        if isinstance(spec, Cost):
            return spec
        if spec == "tokens":
            return cls()
        if spec == "attention":
            return cls.attention()
        if isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
            return cls(*spec)
        raise ValueError(
            f"cost={spec!r} is not understood: use 'tokens', 'attention', "
            "Cost(linear=a, quadratic=b, per_sequence=c), a pair (a, b) or a triple (a, b, c)"
        )

    def of(self, tokens: np.ndarray) -> np.ndarray:
        """Per-sequence cost as int64; raises (never wraps) when the costs or their sum would
        not fit. :meth:`exact` is the variant without that limit."""
        out = self.exact(tokens)
        if out.dtype == object:
            raise ValueError(
                f"cost {self} on lengths up to {int(np.max(tokens))} sums beyond int64: use "
                "smaller cost coefficients (partition() itself handles such costs exactly)"
            )
        return out

    def exact(self, tokens: np.ndarray) -> np.ndarray:
        """Per-sequence cost: int64 when every partial sum fits below 2**62 (the fast path),
        else an object array of exact Python ints. The test is on the largest cost times n,
        done in Python ints before anything is computed, so nothing can wrap."""
        if len(tokens) == 0:
            return np.zeros(0, dtype=np.int64)
        top = int(np.max(tokens))
        a, b, c = self.linear, self.quadratic, self.per_sequence
        if (a * top + b * top * top + c) * len(tokens) < 2**62:
            t = tokens.astype(np.int64)
            out = a * t + b * t * t if b else a * t
            return out + c if c else out
        values = [a * x + b * x * x + c for x in tokens.tolist()]
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    def __str__(self) -> str:
        if self == Cost():
            return "tokens"
        text = f"{self.linear}*l + {self.quadratic}*l^2"
        return f"{text} + {self.per_sequence}" if self.per_sequence else text

    def as_dict(self) -> dict[str, int]:
        """The coefficients by name (for JSON output; ``per_sequence`` only when set)."""
        out = {"linear": self.linear, "quadratic": self.quadratic}
        return {**out, "per_sequence": self.per_sequence} if self.per_sequence else out


@dataclass(frozen=True)
class Problem:
    """A validated instance, in original sequence indices.

    ``cap`` is the cap the engines respect: None when the caller's cap is at least the total
    token count (such a cap binds nothing; ``given_cap`` keeps the caller's value). ``costs``
    is int64 when every sum of costs fits (the fast path), else exact Python ints.
    """

    tokens: np.ndarray
    costs: np.ndarray
    k: int | None
    cap: int | None
    cost: Cost
    equal_size: bool
    groups: tuple[tuple[int, ...], ...]
    oversize: tuple[int, ...]  # placed alone, outside the cap (only with oversize="alone")
    given_cap: int | None = None

    @property
    def n(self) -> int:
        return len(self.tokens)


#: Loads the heuristics balance stay below this when the exact costs are scaled down: every
#: sum is then exact in int64 and in float64 (local search and bincount rely on both).
WORK_TOTAL = 2**52


@dataclass(frozen=True)
class Items:
    """What the engines pack: merged groups, oversize sequences removed.

    ``costs`` are what the heuristics balance. When the exact costs sum beyond int64 they are
    the exact costs divided by ``2**shift``, rounded up (positive, int64-safe), and
    ``exact_costs`` holds the exact Python ints every reported load and bound is computed from.
    """

    members: list[list[int]] | None  # original indices behind each item; None: item i is i
    tokens: list[int]
    costs: list[int]
    counts: list[int]
    exact_costs: list[int] | None = None
    shift: int = 0
    #: Values computed once per call (e.g. the count bound for the cap).
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def exact(self) -> list[int]:
        """The exact per-item costs (Python ints)."""
        return self.costs if self.exact_costs is None else self.exact_costs

    @cached_property
    def token_array(self) -> np.ndarray:
        return np.asarray(self.tokens, dtype=np.int64)

    @cached_property
    def cost_array(self) -> np.ndarray:
        """The exact costs: int64 on the fast path, else exact Python ints (object)."""
        if self.exact_costs is None:
            return np.asarray(self.costs, dtype=np.int64)
        out = np.empty(len(self.exact_costs), dtype=object)
        out[:] = self.exact_costs
        return out

    @cached_property
    def count_array(self) -> np.ndarray:
        return np.asarray(self.counts, dtype=np.int64)

    def bin_sums(self, bins: Sequence[Sequence[int]], *values: np.ndarray) -> Any:
        """Per-bin sums of ``values`` (arrays above), without a loop over items."""
        return bin_sums(bins, *values)

    def expand_flat(
        self, bins: Sequence[Sequence[int]]
    ) -> tuple[list[list[int]], np.ndarray, np.ndarray] | None:
        """:meth:`expand` in one vectorised pass, for one item per sequence and no oversize
        ones: the plan's bins (each ascending, ordered by their smallest index), their entries
        flattened in that order, and the bins' ends in it. A stable sort of per-sequence bin
        labels orders every bin at once (sorting 10^4 bins one by one, then flattening them
        again to check and sum them, cost twice as much at n=10^6). None when the bins are
        not a partition of range(n) into non-empty bins (the caller's validator then says
        what is wrong) or items merge sequences."""
        n, k = len(self), len(bins)
        if self.members is not None or k == 0:
            return None
        sizes = np.fromiter(map(len, bins), dtype=np.int64, count=k)
        if int(sizes.sum()) != n or not sizes.all():
            return None
        flat = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64, count=n)
        if flat.min() < 0 or flat.max() >= n or np.bincount(flat, minlength=n).max() != 1:
            return None
        starts = np.cumsum(sizes) - sizes
        # Relabel the bins by their smallest index, so the sort below leaves them in order.
        rank = np.empty(k, dtype=np.int64)
        by_first = np.argsort(np.minimum.reduceat(flat, starts), kind="stable")
        rank[by_first] = np.arange(k)
        labels = np.empty(n, dtype=np.uint16 if k <= 2**16 else np.int64)  # uint16: radix sort
        labels[flat] = np.repeat(rank, sizes)
        order = np.argsort(labels, kind="stable")
        ends = np.cumsum(sizes[by_first])
        listed = order.tolist()
        out = [listed[lo:hi] for lo, hi in zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True)]
        return out, order, ends

    def expand(self, bins: Sequence[Sequence[int]]) -> list[list[int]]:
        """Item bins back to sorted original indices."""
        if self.members is None:
            return [sorted(b) for b in bins]
        members = self.members
        return [sorted(i for item in b for i in members[item]) for b in bins]


def bin_sums(bins: Sequence[Sequence[int]], *values: np.ndarray) -> Any:
    """Per-bin sums of ``values[i]`` over the indices of each bin: prefix sums over the
    flattened bins (exact: int64 inputs here sum below 2**62, object inputs are Python ints).
    One array in, one out; several in, a tuple out (the bins are flattened once)."""
    sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
    flat = np.fromiter(itertools.chain.from_iterable(bins), dtype=np.int64, count=int(sizes.sum()))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    done: dict[int, np.ndarray] = {}  # the same array twice (costs that are tokens): once
    out = []
    for v in values:
        if id(v) not in done:
            prefix = np.concatenate((np.zeros(1, dtype=v.dtype), np.cumsum(v[flat])))
            done[id(v)] = prefix[ends] - prefix[starts]
        out.append(done[id(v)])
    return out[0] if len(out) == 1 else tuple(out)


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
    if not isinstance(equal_size, (bool, np.bool_)):
        raise TypeError(f"equal_size must be True or False, got {equal_size!r}")
    if k is not None and k > n:
        raise ValueError(
            f"k={k} micro-batches cannot all be non-empty with only {n} sequences: "
            f"use k <= {n} (or k=None for the smallest feasible count)"
        )
    if oversize not in ("error", "alone"):
        raise ValueError(f"oversize={oversize!r}: use 'error' or 'alone'")
    total = int(tokens.sum()) if int(tokens.max()) * n < 2**62 else sum(tokens.tolist())
    if total >= 2**62:
        raise ValueError(
            f"lengths sum to {total} tokens, beyond 2**62: token counts that large are not "
            "supported (split the batch)"
        )
    given_cap = cap
    if cap is not None and cap >= total:
        cap = None  # binds nothing: every sum of lengths is at most the total
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
        over = tuple(too_long.tolist())
    if equal_size and over:
        raise ValueError("equal_size=True cannot place over-cap sequences alone: drop them first")
    norm_groups = check_groups(groups, n, set(over))
    if equal_size and k is not None and n % k:
        raise ValueError(
            f"equal_size=True needs len(lengths)={n} divisible by k={k}: "
            "pad or drop samples, or use equal_size=False"
        )
    # Token costs are the tokens themselves: one array, so per-bin sums of both are one pass.
    costs = tokens if spec == Cost() else spec.exact(tokens)
    return Problem(tokens, costs, k, cap, spec, bool(equal_size), norm_groups, over, given_cap)


def check_groups(groups: Any, n: int, over: set[int]) -> tuple[tuple[int, ...], ...]:
    """Groups must be a list of lists of distinct indices in ``range(n)``, none of them in
    ``over``; anything else is refused by name."""
    if groups is None:
        return ()
    if isinstance(groups, (str, bytes, dict)) or not isinstance(groups, (Sequence, np.ndarray)):
        raise TypeError(
            f"groups must be a list of index lists, e.g. [[0, 1], [5, 9]], got "
            f"{type(groups).__name__}"
        )
    if isinstance(groups, np.ndarray):
        raise TypeError(
            "groups must be a list of index lists (groups may differ in size), not a numpy "
            "array: pass [list(g) for g in groups]"
        )
    seen: set[int] = set()
    out = []
    for g, group in enumerate(groups):
        if isinstance(group, (str, bytes, dict)) or not isinstance(group, (Sequence, np.ndarray)):
            raise TypeError(
                f"groups[{g}] is {group!r} ({type(group).__name__}): groups is a list of index "
                "lists, e.g. [[0, 1], [5, 9]] (a flat list of indices is one group: [[0, 1, 2]])"
            )
        members = []
        for i in (group.tolist() if isinstance(group, np.ndarray) else group):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"groups[{g}] holds {i!r}: groups are lists of sequence indices")
            if not 0 <= i < n:
                raise ValueError(f"groups[{g}] holds index {i}, outside range(0, {n})")
            if i in members:
                raise ValueError(f"groups[{g}] lists index {i} twice: list each index once")
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
    cst = tok if problem.costs is problem.tokens else problem.costs.tolist()
    if not skip:  # the common case, kept cheap: one item per sequence
        # int64 costs already passed Cost.exact's test: their sum is below 2**62.
        items = _with_work_costs(None, tok, cst, [1] * problem.n, problem.costs.dtype == object)
        # The arrays exist already: seed the cached ones (two conversions of n ints saved).
        if problem.tokens.dtype == np.int64:
            items.__dict__["token_array"] = problem.tokens
        if problem.costs.dtype == np.int64 and items.exact_costs is None:
            items.__dict__["cost_array"] = problem.costs
        return items
    members = [list(g) for g in problem.groups]
    members += [[i] for i in range(problem.n) if i not in skip]
    members.sort(key=lambda m: m[0])
    return _with_work_costs(
        members,
        [sum(tok[i] for i in m) for m in members],
        [sum(cst[i] for i in m) for m in members],
        [len(m) for m in members],
    )


def _with_work_costs(
    members: list[list[int]] | None,
    tokens: list[int],
    costs: list[int],
    counts: list[int],
    exact_sum: bool = True,
) -> Items:
    """Items whose heuristic costs are int64-safe: the exact ones when their total is below
    2**62, else scaled down by a power of two (rounded up, so none becomes 0)."""
    total = sum(costs) if exact_sum else 0
    if total < 2**62:
        return Items(members, tokens, costs, counts)
    shift = total.bit_length() - WORK_TOTAL.bit_length() + 1
    step = (1 << shift) - 1
    work = [(c + step) >> shift for c in costs]
    return Items(members, tokens, work, counts, exact_costs=costs, shift=shift)


def measure_bins(
    bins: Sequence[Sequence[int]], k: int, items: Items, cap: int | None, max_count: int | None
) -> int | None:
    """The exact largest load when ``bins`` is valid, else None: a fast item-level check (the
    full validator runs once on the final plan), the bins flattened once."""
    if len(bins) != k or sum(map(len, bins)) != len(items) or not all(bins):
        return None
    arrays = [items.cost_array]
    if cap is not None:
        arrays.append(items.token_array)
    if max_count is not None:
        arrays.append(items.count_array)
    sums = items.bin_sums(bins, *arrays)
    sums = sums if isinstance(sums, tuple) else (sums,)
    if cap is not None and int(sums[1].max()) > cap:
        return None
    if max_count is not None and bool((sums[-1] != max_count).any()):
        return None
    return int(sums[0].max())
