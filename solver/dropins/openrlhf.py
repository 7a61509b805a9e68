"""OpenRLHF's signatures (``openrlhf/utils/seqlen_balancing.py``), where they differ.

OpenRLHF's counter takes the context- and tensor-parallel sizes and multiplies the cap by them
itself; its balancer has verl's signature and is re-exported unchanged.
"""

from __future__ import annotations

from typing import Any

from . import balance
from ._values import as_count
from .balance import get_seqlen_balanced_partitions

__all__ = ["get_minimum_num_micro_batch_size", "get_seqlen_balanced_partitions"]


def get_minimum_num_micro_batch_size(
    total_lengths: Any, max_tokens_per_gpu: Any, ring_attn_size: Any, ds_tensor_parallel_size: Any
) -> int:
    """OpenRLHF's 4-argument counter: the cap is ``max_tokens_per_gpu * ring_attn_size *
    ds_tensor_parallel_size`` (exact integers), then
    :func:`seqpart.solver.dropins.get_minimum_num_micro_batch_size`."""
    cap = (
        as_count(max_tokens_per_gpu, "max_tokens_per_gpu")
        * as_count(ring_attn_size, "ring_attn_size")
        * as_count(ds_tensor_parallel_size, "ds_tensor_parallel_size")
    )
    return balance.get_minimum_num_micro_batch_size(total_lengths, cap)
