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

from seqpart.solver.dropins._values import as_count, as_flag, as_tokens
from seqpart.solver.dropins.balance import _balance, get_minimum_num_micro_batch_size
from seqpart.solver.errors import TrainerInputError
from seqpart.solver.problem import Cost
from seqpart.solver.step import order_for_pipeline, round_up

__all__ = ["WORKLOAD", "rearrange_micro_batches"]

#: verl's ``calculate_workload``: 24576*l + l^2 (a 7B dense model).
WORKLOAD = Cost.attention()


def _effective_lengths(batch: Any) -> np.ndarray:
    input_ids = batch["input_ids"]
    if getattr(input_ids, "is_nested", False):
        lengths = input_ids.offsets().diff()
    else:
        lengths = batch["attention_mask"].sum(dim=1)
    return as_tokens(lengths, "sequence lengths (attention_mask.sum(dim=1))")


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


def _agree(count: int, failed: bool, dp_group: Any, device_hint: Any) -> tuple[int, bool]:
    """MAX of the counts and of the failure flags over ``dp_group``, in one all_reduce."""
    import torch
    import torch.distributed as dist

    from seqpart.solver.distributed.collective import _group_device

    device = _group_device(dp_group) if device_hint is None else device_hint
    both = torch.tensor([count, int(failed)], dtype=torch.int64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=dp_group)
    k, any_failed = both.cpu().tolist()
    return int(k), bool(any_failed)


def rearrange_micro_batches(
    batch: Any,
    max_token_len: Any,
    dp_group: Any = None,
    num_batches_divided_by: Any = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: Any = None,
    use_dynamic_bsz_balance: bool = True,
) -> tuple[list[Any], list[list[int]]]:
    """Split ``batch`` (a TensorDict with ``input_ids`` and ``attention_mask``, or nested
    ``input_ids``) into micro-batches of at most ``max_token_len`` tokens each.

    Returns ``(micro_batches, micro_bsz_idx)``: the micro-batch TensorDicts and, for each, the
    ascending row indices it holds (concatenating them in order and inverting the permutation
    restores ``batch``, as verl's ``restore_dynamic_batch`` does).

    Raises:
        TrainerInputError (a ValueError and an AssertionError, as verl asserts): a sequence
            longer than ``max_token_len``, or more micro-batches than sequences after the DP
            agreement. With an initialised process group and ``same_micro_num_in_dp``, raised on
            every rank when any rank's input is bad.
    """
    failure: Exception | None = None
    k_local = 0
    lengths = np.zeros(0, np.int64)
    try:
        cap = as_count(max_token_len, "max_token_len")
        lengths = _effective_lengths(batch)
        if lengths.size == 0:
            raise TrainerInputError("the batch is empty: nothing to split into micro-batches")
        over = np.flatnonzero(lengths > cap)
        if over.size:
            i = int(over[0])
            raise TrainerInputError(
                f"sequence {i} has {int(lengths[i])} tokens, over max_token_len={cap}: raise "
                "max_token_len (ppo_max_token_len_per_gpu) to at least the longest sequence"
            )
        k_local = get_minimum_num_micro_batch_size(lengths, cap)
        if min_num_micro_batch is not None:
            k_local = max(k_local, as_count(min_num_micro_batch, "min_num_micro_batch"))
    except Exception as err:  # reported through the collective below when there is one
        failure = err
    k = k_local
    sync = False
    try:
        import torch.distributed as dist

        sync = dist.is_available() and dist.is_initialized() and as_flag(
            same_micro_num_in_dp, "same_micro_num_in_dp")
    except ImportError:
        pass
    if sync:
        k, any_failed = _agree(k_local, failure is not None, dp_group, None)
        if failure is not None:
            raise failure
        if any_failed:
            raise TrainerInputError(
                "another data-parallel rank could not plan its micro-batches (see its error): "
                "every rank raises so none waits in a collective"
            )
    elif failure is not None:
        raise failure
    if num_batches_divided_by is not None:
        k = round_up(k, as_count(num_batches_divided_by, "num_batches_divided_by"))
    if k > len(lengths):
        raise TrainerInputError(
            f"{len(lengths)} sequences cannot fill {k} non-empty micro-batches (the count agreed "
            "across data-parallel ranks, min_num_micro_batch or num_batches_divided_by): give "
            "this rank more sequences or raise max_token_len"
        )
    parts = _balance(lengths, k, False, cap, cost=WORKLOAD)
    loads = [int(WORKLOAD.of(lengths[p]).sum()) for p in parts]
    parts = [sorted(p) for p in parts]
    if as_flag(use_dynamic_bsz_balance, "use_dynamic_bsz_balance"):
        order = order_for_pipeline(loads)
    else:
        order = sorted(range(len(parts)), key=lambda j: (-loads[j], parts[j][0]))
    micro_bsz_idx = [parts[j] for j in order]
    return [_select(batch, p) for p in micro_bsz_idx], micro_bsz_idx
