"""slime's step scheduler, ``build_dp_schedule``, planned by seqpart.

slime (``slime/utils/dp_schedule.py``, main as of 2026-08) packs each training step's samples into
micro-batches by first fit, splits bins until the count is a multiple of ``dp_size`` (times the
virtual-pipeline group), then deals them to ranks. This drop-in keeps its signature, its return
value and its invariants:

* every rank runs the same number of micro-batches per step (a multiple of
  ``microbatch_group_size_per_vp_stage`` when ``vpp_size > 1``);
* dynamic batches hold at most ``max_tokens_per_gpu * cp_size`` tokens, except a sample longer
  than that, which is alone in its micro-batch (with ``balance_by_flops`` too: seqpart never
  trades the cap for balance);
* every sample of the kept rollouts is placed exactly once (trailing rollouts that do not fill
  a step are dropped, and all samples of one rollout stay in one step);
* ``micro_batch_indices[r]`` tiles ``range(len(partitions[r]))`` in order.

What it plans instead of first fit: per step, the fewest micro-batches the cap allows (rounded
up to the alignment), balanced by ``partition``, then dealt to ranks in equal numbers with their
totals balanced (an equal-size ``partition`` of the micro-batch loads). Each rank's micro-batches
keep the order of their first sample. Deterministic (no clock decides).

Why this shape and not :func:`seqpart.solver.step.plan_step`: it is the step planning of
:func:`seqpart.solver.step.plan_global` (fewest micro-batches the cap allows first, then
rank balance), which matches what slime optimises (its micro-batch count, then its
``balance_data`` rank totals). ``plan_step`` models the step time itself and with an
``overhead`` per micro-batch also prefers fewer micro-batches, but it is too slow to run for
every step here: run deterministically (``SolverOptions(deterministic=True)``, engine
``"heuristics"``) on long-tail RL steps with a cap of 2x the longest sequence it took 75, 130 and
261 ms at n = 128 (dp 4), 256 and 512 (dp 8) with ``time_limit=1.0``, and 26-43 ms even with its
work budget cut to ``time_limit=0.02`` (2 busy cores, load ~3). Switch when it is under ~20 ms
at these sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..partition import partition
from ..plan import InfeasibleError, find_violations
from ..problem import Cost
from ..step import round_up
from ._values import as_count, as_flag, as_tokens
from .balance import ENGINE, OPTIONS, TIME_LIMIT, TrainerInputError, capped_fallback

__all__ = ["build_dp_schedule", "workload_cost"]


def workload_cost(args: Any) -> Cost:
    """The per-sample compute estimate slime balances (``balance_data``, ``balance_by_flops``),
    as ``linear * l + quadratic * l**2`` for a dense transformer described by ``args``.

    Per layer and token: the q/k/v and output projections and a gated MLP are linear in l;
    causal attention (QK^T over half the pairs, then AV) is ``2 * heads * head_dim`` per pair.
    Only the ratio matters for balancing, so it is reduced to ``Cost(round(linear/quadratic), 1)``.
    Without the model sizes in ``args`` it is verl's ``24576*l + l^2`` (a 7B model).
    """
    try:
        h = int(args.hidden_size)
        heads = int(args.num_attention_heads)
        groups = int(getattr(args, "num_query_groups", None) or heads)
        head_dim = int(getattr(args, "kv_channels", None) or h // heads)
        ffn = int(args.ffn_hidden_size)
        layers = int(args.num_layers)
        vocab = int(getattr(args, "vocab_size", 0) or 0)
    except (AttributeError, TypeError, ValueError):
        return Cost.attention()
    per_layer = 2 * h * heads * head_dim + 4 * h * groups * head_dim + 2 * heads * head_dim * h
    linear = layers * (per_layer + 6 * h * ffn) + 2 * h * vocab
    quadratic = layers * 2 * heads * head_dim
    if linear <= 0 or quadratic <= 0:
        return Cost.attention()
    return Cost(max(1, round(linear / quadratic)), 1)


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise TrainerInputError(message)


def _plan_step(
    tokens: np.ndarray,
    dp_size: int,
    align: int,
    cap: int | None,
    micro_batch_size: int | None,
    mbs_cost: Cost,
    rank_cost: Cost,
    step_i: int,
) -> list[list[list[int]]]:
    """One step: ``per_rank[r]`` = rank r's micro-batches, local indices into ``tokens``."""
    n = len(tokens)
    if cap is not None:
        # The fewest micro-batches under the cap, rounded up to the alignment.
        smallest = partition(tokens, None, cap, time_limit=TIME_LIMIT, oversize="alone",
                             engine=ENGINE, options=OPTIONS).k
        k = round_up(max(smallest, align), align)
        _assert(k <= n, (
            f"step {step_i}: {n} samples cannot fill {k} non-empty micro-batches (the cap needs "
            f"{smallest}, rounded up to a multiple of dp_size * mb_group = {align}): add samples "
            "to the step (a larger global_batch_size) or raise max_tokens_per_gpu"
        ))
        try:
            mbs = partition(tokens, k, cap, time_limit=TIME_LIMIT, cost=mbs_cost,
                            oversize="alone", engine=ENGINE, options=OPTIONS).bins
        except InfeasibleError as err:  # not found by the heuristics for this cost
            if err.proven:
                raise
            mbs = capped_fallback(tokens, k, cap, mbs_cost)
    else:
        assert micro_batch_size is not None
        k = -(-n // micro_batch_size)
        _assert(k % align == 0, (
            f"static path: num_mbs ({k}) is not a multiple of dp_size * mb_group ({align}); "
            f"step_size={n}, micro_batch_size={micro_batch_size}: make step_size a multiple of "
            "dp_size * micro_batch_size * mb_group"
        ))
        if n % micro_batch_size == 0 and k > 1:
            mbs = partition(tokens, k, None, time_limit=TIME_LIMIT, cost=mbs_cost,
                            equal_size=True, engine=ENGINE, options=OPTIONS).bins
        else:  # a short last micro-batch: equal sizes are impossible, keep contiguous chunks
            mbs = [list(range(i, min(i + micro_batch_size, n))) for i in range(0, n, micro_batch_size)]
    m = len(mbs) // dp_size
    if dp_size == 1:
        groups = [list(range(len(mbs)))]
    else:
        loads = [int(rank_cost.of(tokens[b]).sum()) for b in mbs]
        groups = partition(loads, dp_size, None, time_limit=TIME_LIMIT, equal_size=True,
                           engine=ENGINE, options=OPTIONS).bins
    per_rank = [sorted((sorted(mbs[j]) for j in g), key=lambda b: b[0]) for g in groups]
    # One validator over the whole step before anything is returned.
    flat = [b for rank in per_rank for b in rank]
    oversize = [i for i in range(n) if cap is not None and tokens[i] > cap]
    found = find_violations(flat, tokens, dp_size * m, cap, oversize=oversize)
    if not found.ok or any(len(rank) != m for rank in per_rank):
        raise RuntimeError(f"seqpart produced an invalid step schedule (please report): {found}")
    return per_rank


def build_dp_schedule(
    args: Any,
    train_parallel_config: dict,
    total_lengths: Any,
    *,
    global_batch_size: Any,
    rollout_indices: Any = None,
    group_indices: Any = None,
) -> tuple[list[list[int]], list[list[list[int]]], list[int], list[int]]:
    """slime's ``build_dp_schedule``: the per-rank sample partition and micro-batch schedule.

    Args:
        args: ``micro_batch_size``, ``use_dynamic_batch_size``, ``max_tokens_per_gpu``,
            ``balance_data``, ``balance_by_flops`` and (optional) the model sizes for the
            workload estimate (:func:`workload_cost`).
        train_parallel_config: ``{"dp_size", "cp_size", "vpp_size",
            "microbatch_group_size_per_vp_stage"}``.
        total_lengths: token count per sample (ints or integral floats, list/array/tensor).
        global_batch_size: rollouts per training step.
        rollout_indices: rollout id per sample; a rollout's samples stay in one step.
        group_indices: slime v0.3.0's name for ``rollout_indices`` (pass one of the two).

    Returns:
        ``(partitions, micro_batch_indices, num_microbatches, global_batch_sizes)`` as slime's:
        ``partitions[r]`` global sample indices of rank r, ``micro_batch_indices[r]`` its
        micro-batches as positions into ``partitions[r]``, ``num_microbatches[s]`` per rank for
        step s, ``global_batch_sizes[s] == global_batch_size``.

    Raises:
        TrainerInputError (a ValueError and an AssertionError, as slime asserts): fewer
            rollouts than one step, a step with fewer samples than ranks or than the micro-batch
            count needs, a static layout that cannot align.
    """
    dp_size = as_count(train_parallel_config["dp_size"], "dp_size")
    cp_size = as_count(train_parallel_config.get("cp_size", 1), "cp_size")
    vpp_size = as_count(train_parallel_config.get("vpp_size", 1) or 1, "vpp_size")
    mb_group = as_count(train_parallel_config.get("microbatch_group_size_per_vp_stage", 1) or 1,
                        "microbatch_group_size_per_vp_stage")
    gbs = as_count(global_batch_size, "global_batch_size")
    tokens = as_tokens(total_lengths, "total_lengths")
    _assert((rollout_indices is None) != (group_indices is None),
            "pass rollout_indices (slime main) or group_indices (slime v0.3.0), exactly one")
    unit = "rollouts" if group_indices is None else "groups"
    rollout_ids = list(rollout_indices if group_indices is None else group_indices)
    _assert(len(rollout_ids) == len(tokens), (
        f"rollout_indices has {len(rollout_ids)} entries for {len(tokens)} samples: one per sample"
    ))
    zero = np.flatnonzero(tokens == 0)
    _assert(zero.size == 0, (
        f"total_lengths[{int(zero[0]) if zero.size else 0}] is 0: drop empty samples first"
    ))
    dynamic = as_flag(getattr(args, "use_dynamic_batch_size", False), "use_dynamic_batch_size")
    cap = None
    micro_batch_size = None
    if dynamic:
        _assert(getattr(args, "max_tokens_per_gpu", None) is not None,
                "use_dynamic_batch_size needs args.max_tokens_per_gpu")
        cap = as_count(args.max_tokens_per_gpu, "max_tokens_per_gpu") * cp_size
    else:
        micro_batch_size = as_count(getattr(args, "micro_batch_size", None), "micro_batch_size")
    align = dp_size * (mb_group if vpp_size > 1 else 1)
    workload = workload_cost(args)
    by_flops = bool(getattr(args, "balance_by_flops", False))
    mbs_cost = workload if by_flops or not dynamic else Cost()
    rank_cost = workload if bool(getattr(args, "balance_data", False)) else Cost()

    # Rollouts in first-occurrence order, each with its sample positions.
    samples_of: dict[Any, list[int]] = {}
    for pos, rid in enumerate(rollout_ids):
        samples_of.setdefault(rid, []).append(pos)
    rollouts = list(samples_of)
    num_steps = len(rollouts) // gbs
    _assert(num_steps >= 1, (
        f"num_{unit} ({len(rollouts)}) < global_batch_size ({gbs}): need at least one step's "
        f"worth of {unit}"
    ))

    partitions: list[list[int]] = [[] for _ in range(dp_size)]
    micro_batch_indices: list[list[list[int]]] = [[] for _ in range(dp_size)]
    num_microbatches: list[int] = []
    for step_i in range(num_steps):
        step = [pos for rid in rollouts[step_i * gbs:(step_i + 1) * gbs] for pos in samples_of[rid]]
        _assert(len(step) >= dp_size, (
            f"step {step_i}: {len(step)} samples < dp_size {dp_size}: each step needs at least "
            "one sample per rank"
        ))
        per_rank = _plan_step(tokens[step], dp_size, align, cap, micro_batch_size, mbs_cost,
                              rank_cost, step_i)
        num_microbatches.append(len(per_rank[0]))
        for r, rank_mbs in enumerate(per_rank):
            for mb in rank_mbs:
                start = len(partitions[r])
                partitions[r].extend(step[i] for i in mb)
                micro_batch_indices[r].append(list(range(start, start + len(mb))))
    return partitions, micro_batch_indices, num_microbatches, [gbs] * num_steps
