"""Drop-ins with the signatures slime and verl use, backed by :func:`~seqpart.solver.partition`.

Swap one import in a trainer's data path (see the README section "Plugging seqpart into a
trainer"):

* :func:`get_seqlen_balanced_partitions` replaces the Karmarkar-Karp balancer of the same name:
  exactly ``k_partitions`` non-empty lists of sorted indices, best first-found balance within a
  small time limit.
* :func:`get_minimum_num_micro_batch_size` replaces slime's first-fit counter: never more
  micro-batches than first fit in arrival order, often fewer.
* :func:`get_capped_seqlen_balanced_partitions` is the balancer with the token cap the original
  cannot take: use it with the count above, and no micro-batch goes over the cap.

Time limits: each call runs inside a trainer's step, once per step (and per rank), so the
budget is small: :data:`TIME_LIMIT` (0.05 s) per call. The bounds usually prove the plan
optimal far sooner; when they do not, the best plan found in the budget is returned.

Differences from the originals, all deliberate: bad input raises ``ValueError`` naming the fix
instead of ``AssertionError``; zero-length entries (which the originals accept) are balanced as
if every value were one larger (``partition`` needs positive lengths), which changes nothing
with ``equal_size=True`` and little otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seqpart.heuristics._inputs import as_positive_int
from seqpart.heuristics.first_fit import first_fit_lists

from .partition import partition
from .plan import InfeasibleError

__all__ = [
    "TIME_LIMIT",
    "get_capped_seqlen_balanced_partitions",
    "get_minimum_num_micro_batch_size",
    "get_seqlen_balanced_partitions",
]

#: Seconds per drop-in call: small enough to run every step, large enough that the bounds and
#: heuristics settle typical batches (a few hundred sequences) and CP-SAT gets a short try.
TIME_LIMIT = 0.05


def _as_values(values: Any, name: str) -> np.ndarray:
    """Non-negative ints as int64 (the originals accept zeros; partition does not)."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # torch.Tensor, without torch
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat list of ints, got shape {arr.shape}: flatten it")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must hold ints, got dtype {arr.dtype}: convert, e.g. [int(x) for x in {name}]"
        )
    arr = arr.astype(np.int64)
    if arr.size and int(arr.min()) < 0:
        i = int(np.argmin(arr))
        raise ValueError(f"{name}[{i}] is {int(arr[i])}; lengths must be >= 0")
    return arr


def _by_load_desc(bins: list[list[int]], values: np.ndarray) -> list[list[int]]:
    # The originals hand partitions back heaviest first; callers that run them in order (slime's
    # classic path) keep today's heaviest-first schedule.
    return sorted(bins, key=lambda b: (-int(values[b].sum()), b[0]))


def get_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: int, equal_size: bool
) -> list[list[int]]:
    """Split ``seqlen_list`` into ``k_partitions`` non-empty lists with balanced sums.

    Same contract as slime's/verl's function: returns k lists of indices into ``seqlen_list``,
    indices ascending within a list, lists heaviest first; with ``equal_size`` every list has
    ``len(seqlen_list) // k_partitions`` items. The values are balanced as given (lengths, or
    workloads such as ``24576*l + l*l``). No cap: use
    :func:`get_capped_seqlen_balanced_partitions` for that.

    Raises:
        ValueError: fewer values than partitions, or ``equal_size`` with a length not divisible
            by ``k_partitions``.
    """
    values = _as_values(seqlen_list, "seqlen_list")
    k = as_positive_int(k_partitions, "k_partitions")
    if len(values) < k:
        raise ValueError(
            f"{len(values)} sequences cannot fill k_partitions={k} non-empty partitions: "
            f"use k_partitions <= {len(values)}"
        )
    shifted = values + 1 if values.size and int(values.min()) == 0 else values
    plan = partition(shifted, k, None, time_limit=TIME_LIMIT, equal_size=bool(equal_size))
    return _by_load_desc(plan.bins, values)


def get_minimum_num_micro_batch_size(total_lengths: Any, max_tokens_per_gpu: int) -> int:
    """How many micro-batches of at most ``max_tokens_per_gpu`` tokens ``total_lengths`` needs.

    Computes both slime's count (first fit in arrival order) and seqpart's (``partition`` with
    ``k=None``, which packs largest first and proves a floor) and returns the smaller, so it is
    never more than today and often fewer. Like the original, a sequence longer than the cap
    gets a micro-batch of its own instead of an error (the trainer's memory limit is its
    problem to flag), and an empty list needs 0 micro-batches.

    Pass ``max_tokens_per_gpu * cp_size`` as the cap on slime v0.2.x, as slime's caller does.
    """
    values = _as_values(total_lengths, "total_lengths")
    cap = as_positive_int(max_tokens_per_gpu, "max_tokens_per_gpu")
    if values.size == 0:
        return 0
    tokens = values.tolist()
    first_fit_count = len(first_fit_lists(tokens, [1] * len(tokens), None, cap, None,
                                          range(len(tokens))))
    positive = values[values > 0]
    if positive.size == 0:  # all zero-length: one micro-batch holds them, as first fit says
        return first_fit_count
    try:
        plan = partition(positive, None, cap, time_limit=TIME_LIMIT, oversize="alone")
    except InfeasibleError:  # nothing found in the budget: today's count stands
        return first_fit_count
    return min(first_fit_count, plan.k)


def get_capped_seqlen_balanced_partitions(
    seqlen_list: Any, k_partitions: int, max_tokens_per_gpu: int, equal_size: bool = False
) -> list[list[int]]:
    """:func:`get_seqlen_balanced_partitions` under a token cap: ``k_partitions`` non-empty
    lists, each summing to at most ``max_tokens_per_gpu`` tokens, the largest sum minimal.

    ``seqlen_list`` are token counts here (the cap applies to them). A sequence longer than the
    cap gets a partition of its own, as :func:`get_minimum_num_micro_batch_size` counts it.
    With ``k_partitions`` from that function (after any all-reduce MAX across ranks, as long as
    this rank has at least that many sequences), a plan always exists.

    Raises:
        ValueError: fewer sequences than partitions (the seed issue's empty micro-batch),
            ``equal_size`` with a length not divisible by ``k_partitions``.
        InfeasibleError (a ValueError): no split under the cap exists (``proven``) or none was
            found within :data:`TIME_LIMIT`; the message says what to change.
    """
    values = _as_values(seqlen_list, "seqlen_list")
    k = as_positive_int(k_partitions, "k_partitions")
    cap = as_positive_int(max_tokens_per_gpu, "max_tokens_per_gpu")
    if len(values) < k:
        raise ValueError(
            f"{len(values)} sequences cannot fill k_partitions={k} non-empty micro-batches: "
            f"use k_partitions <= {len(values)} (if k came from an all-reduce MAX across ranks, "
            "give this rank more samples or use seqpart.solver.distributed)"
        )
    # A zero-length sample takes no room: shifting by one could break a tight cap, so pack the
    # positive ones and let the zeros fill the lightest lists (or empty ones) afterwards.
    zero = np.flatnonzero(values == 0)
    if zero.size == 0:
        plan = partition(values, k, cap, time_limit=TIME_LIMIT, equal_size=bool(equal_size),
                         oversize="error" if equal_size else "alone")
        return _by_load_desc(plan.bins, values)
    if equal_size:
        raise ValueError("equal_size=True with zero-length samples: drop them first")
    positive = np.flatnonzero(values > 0)
    # As many lists as possible get positive samples (best balance); zeros fill the rest.
    k_positive = min(k, len(positive))
    bins: list[list[int]] = []
    if k_positive:
        plan = partition(values[positive], k_positive, cap, time_limit=TIME_LIMIT,
                         oversize="alone")
        bins = [[int(positive[i]) for i in b] for b in plan.bins]
    zeros = zero.tolist()
    while len(bins) < k:  # len(values) >= k guarantees enough zeros
        bins.append([zeros.pop()])
    tokens = [int(values[b].sum()) for b in bins]
    for i in zeros:  # to the lightest list, so never to an over-cap sequence's own unless all are
        bins[tokens.index(min(tokens))].append(i)
    return _by_load_desc([sorted(b) for b in bins], values)
