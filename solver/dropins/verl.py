"""verl's ``rearrange_micro_batches`` (``verl/utils/seqlen_balancing.py``), with the cap held.

verl counts ``ceil(total tokens / max_token_len)`` micro-batches and balances the workload
``24576*l + l^2`` over them with Karmarkar-Karp, which can put more than ``max_token_len`` tokens
in one (the count ignores how the sequences pack). This drop-in keeps the signature and the
return value ``(micro_batches, micro_bsz_idx)`` and:

* counts the micro-batches the cap really needs (:func:`get_minimum_num_micro_batch_size`), then
  applies ``min_num_micro_batch``, the DP all-reduce MAX (``same_micro_num_in_dp``) and the
  rounding up to ``num_batches_divided_by`` as verl does;
* balances the same workload with ``partition`` under the cap: no micro-batch over
  ``max_token_len``, none empty;
* with ``use_dynamic_bsz_balance`` orders them light at both ends, heavy in the middle (fewer
  exposed pipeline bubbles), else heaviest first.

The DP agreement is collective-safe: each rank all-reduces ``(count, failed)`` together, so a
rank whose input is bad makes every rank raise instead of leaving the others in the collective.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..distributed.collective import OP_VERL_REARRANGE, agree_on_count
from ..errors import TrainerInputError
from ..problem import Cost
from ..step import order_for_pipeline, round_up
from ._values import as_count, as_flag, as_tokens, choose_cost
from .balance import _balance, get_minimum_num_micro_batch_size

__all__ = ["WORKLOAD", "rearrange_micro_batches"]

#: verl's ``calculate_workload``: 24576*l + l^2 (a 7B dense model).
WORKLOAD = Cost.attention()


def _effective_lengths(batch: Any) -> np.ndarray:
    if batch is None or not hasattr(batch, "__getitem__") or isinstance(batch, (str, bytes)):
        raise TrainerInputError(
            f"batch must be a TensorDict (or a dict of tensors) with input_ids and attention_mask, "
            f"got {type(batch).__name__}"
        )
    try:
        input_ids = batch["input_ids"]
    except (KeyError, IndexError, TypeError):
        raise TrainerInputError(
            "batch has no input_ids: pass the TensorDict verl builds (input_ids, attention_mask)"
        ) from None
    if getattr(input_ids, "is_nested", False):
        return as_tokens(input_ids.offsets().diff(), "sequence lengths (input_ids offsets)")
    try:
        mask = batch["attention_mask"]
    except (KeyError, IndexError, TypeError):
        raise TrainerInputError(
            "batch has no attention_mask: pass it (padded input_ids need it to count each "
            "sequence's tokens), or pass nested input_ids"
        ) from None
    if getattr(mask, "ndim", None) != 2:
        raise TrainerInputError(
            f"attention_mask must be 2-D (batch, sequence), got shape "
            f"{tuple(getattr(mask, 'shape', ()))}"
        )
    return as_tokens(mask.sum(dim=1), "sequence lengths (attention_mask.sum(dim=1))")


def _select(batch: Any, indices: list[int]) -> Any:
    """The rows ``indices`` of a TensorDict (verl's helper when present: nested tensors), or of
    a plain dict of tensors."""
    if isinstance(batch, dict):
        return {key: value[indices] for key, value in batch.items()}
    try:
        from verl.utils import tensordict_utils as tu

        return tu.index_select_tensor_dict(batch, indices)
    except ImportError:
        import torch

        return batch[torch.tensor(indices, dtype=torch.long)]


def rearrange_micro_batches(
    batch: Any,
    max_token_len: Any,
    dp_group: Any = None,
    num_batches_divided_by: Any = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: Any = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    timeout: float | None = None,
    cost: Any = None,
    cost_profile: Any = None,
) -> tuple[list[Any], list[list[int]]]:
    """Split ``batch`` (a TensorDict with ``input_ids`` and ``attention_mask``, or nested
    ``input_ids``) into micro-batches of at most ``max_token_len`` tokens each.

    Returns ``(micro_batches, micro_bsz_idx)``: the micro-batch TensorDicts and, for each, the
    ascending row indices it holds (concatenating them in order and inverting the permutation
    restores ``batch``, as verl's ``restore_dynamic_batch`` does).

    ``cost`` (a :class:`~seqpart.solver.Cost`, "tokens" or "attention") replaces verl's workload
    ``24576*l + l^2`` as what the micro-batches balance; ``cost_profile`` (a
    :class:`~seqpart.solver.CostProfile` or the path of one, read on every call: pass the loaded
    profile in a loop) balances its calibrated ``.cost``. Give one of the two. The count is the
    cap's either way, so ranks with different costs still agree on it.

    ``timeout`` (seconds, or None for the process group's own): with an initialised process
    group and ``same_micro_num_in_dp``, the ranks agree on one count in a bounded status
    exchange (the protocol of :mod:`seqpart.solver.distributed`), so a rank that fails, passes
    another ``max_token_len``, ``num_batches_divided_by`` or ``min_num_micro_batch``, or calls a
    different seqpart collective makes every rank raise the same error, and a rank that never
    calls makes the others raise within ``timeout``. A rank that passes
    ``same_micro_num_in_dp=False`` while the others pass True makes no exchange, so it returns
    and the others time out: pass the same value on every rank.

    Raises:
        TrainerInputError (a ValueError and an AssertionError, as verl asserts): bad input (no
            input_ids or attention_mask, a sequence longer than ``max_token_len``, more
            micro-batches than sequences), ``cost`` with ``cost_profile``, without a
            synchronised group.
        ValueError: a profile that cannot be read (the loader's message names the file and the
            fix), without a synchronised group.
        DistributedPlanError (a ValueError): the same on every rank, when the ranks agree on a
            count and any rank's input is bad, the ranks disagree, or a rank does not join.
    """
    found: dict[str, Any] = {}

    def local() -> tuple[int, int]:
        # In here, so a bad profile on one rank fails every rank (the status exchange).
        found["cost"] = choose_cost(cost, cost_profile).cost or WORKLOAD
        found["cap"] = cap = as_count(max_token_len, "max_token_len")
        found["lengths"] = lengths = _effective_lengths(batch)
        if lengths.size == 0:
            raise TrainerInputError("the batch is empty: nothing to split into micro-batches")
        over = np.flatnonzero(lengths > cap)
        if over.size:
            i = int(over[0])
            raise TrainerInputError(
                f"sequence {i} has {int(lengths[i])} tokens, over max_token_len={cap}: raise "
                "max_token_len (ppo_max_token_len_per_gpu) to at least the longest sequence"
            )
        need = get_minimum_num_micro_batch_size(lengths, cap)
        if min_num_micro_batch is not None:
            need = max(need, as_count(min_num_micro_batch, "min_num_micro_batch"))
        return len(lengths), need

    multiple = 1 if num_batches_divided_by is None else num_batches_divided_by
    if _synced(same_micro_num_in_dp):
        # Every rank's count, checks and failures travel in one bounded status exchange, so all
        # ranks raise the same error and none waits for a rank that failed.
        k = agree_on_count(
            dp_group, OP_VERL_REARRANGE, timeout, local, cap=max_token_len, multiple_of=multiple,
            min_k=1 if min_num_micro_batch is None else min_num_micro_batch,
        )
    else:
        k = round_up(local()[1], as_count(multiple, "num_batches_divided_by"))
    lengths, cap, workload = found["lengths"], found["cap"], found["cost"]
    if k > len(lengths):
        raise TrainerInputError(
            f"{len(lengths)} sequences cannot fill {k} non-empty micro-batches (min_num_micro_batch "
            "or num_batches_divided_by): give this rank more sequences or raise max_token_len"
        )
    parts = _balance(lengths, k, False, cap, cost=workload)
    loads = [int(workload.exact(lengths[p]).sum()) for p in parts]
    parts = [sorted(p) for p in parts]
    if as_flag(use_dynamic_bsz_balance, "use_dynamic_bsz_balance"):
        order = order_for_pipeline(loads)
    else:
        order = sorted(range(len(parts)), key=lambda j: (-loads[j], parts[j][0]))
    micro_bsz_idx = [parts[j] for j in order]
    return [_select(batch, p) for p in micro_bsz_idx], micro_bsz_idx


def _synced(same_micro_num_in_dp: Any) -> bool:
    """Whether the ranks agree on one count: asked for, and a process group is running."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return bool(dist.is_available() and dist.is_initialized()) and as_flag(
        same_micro_num_in_dp, "same_micro_num_in_dp")
