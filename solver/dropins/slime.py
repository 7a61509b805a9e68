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

What it plans instead of first fit. Dynamic batch size (``use_dynamic_batch_size``): each step
is planned by :func:`seqpart.solver.step.plan_step`, which chooses the count per rank, the
micro-batches and the ranks together for the smallest step time of its model (per rank: the sum
of its micro-batch times plus the pipeline bubble ``(pp-1) * max / vpp``), with

* ``pp`` from ``train_parallel_config["pp_size"]`` or Megatron's
  ``args.pipeline_model_parallel_size`` (1 without either), ``vpp = vpp_size``, and the count per
  rank a multiple of ``microbatch_group_size_per_vp_stage`` when ``vpp_size > 1``
  (``multiple_of``);
* the cost of a sample slime's FLOPs estimate (:func:`workload_cost`) when ``balance_by_flops``
  or ``balance_data`` asks for FLOP balance, else its tokens;
* a fixed time per micro-batch of :data:`OVERHEAD_TOKENS` = 512 tokens of linear cost
  (``512 * cost.linear``). Why: slime packs as few micro-batches as the cap allows, because every
  micro-batch pays fixed work (kernel launches across all layers, the pipeline's send/receive,
  the loss reduction) whatever its length; at the ~10-20k tokens/s per GPU of a 7B training
  step that is a few milliseconds, a few hundred tokens. With 0 the model would split freely
  for balance; with 512 an extra micro-batch has to save more than 512 tokens on the slowest
  rank. Measured (below) it keeps the count of the fewest-count method at pp=1 (23.4 against 23.4
  per rank) and doubles it at pp=4, where smaller micro-batches shorten the bubble;
* :data:`STEP_TIME_LIMIT` = 0.02 s, as a deterministic work budget with the clock dropped
  (``SolverOptions(deterministic=True)``): the same input gives the same schedule on every call
  and machine, whatever the load (with the clock as a safety net, plans differed between calls
  on a loaded machine, which slime's own repeatability contract would not allow);
* ``oversize="alone"``: a sample over the cap gets a micro-batch of its own.

The cost and the overhead above are estimates. A calibrated profile (``seqpart calibrate``)
replaces both with measured ones: ``build_dp_schedule(..., cost_profile=profile)`` balances
``profile.cost`` and charges ``profile.overhead`` per micro-batch (``cost=``/``overhead=`` give
them by hand), so ``plan_step`` minimises the step time in the device's own seconds.

``plan_step`` starts from slime's own schedules too (``trainer_starts``, when they fit the
budget), and its result passes :func:`~seqpart.solver.step.check_schedule`; the assembled step
passes :func:`~seqpart.solver.plan.find_violations` again. Each rank's micro-batches are in
``plan_step``'s 1F1B order (lightest first and last). If ``plan_step`` finds no schedule in its
budget (never seen), the fewest-count method plans the step: the fewest micro-batches the cap allows
(``partition``, rounded up to the alignment), then an equal-size rank deal balanced in the cost.

Static batch size (``micro_batch_size``): the count and the size of every micro-batch are fixed
by slime's contract, so only balance is left: micro-batches by an equal-size ``partition`` of
the FLOPs estimate, dealt to ranks by an equal-size partition of their loads (FLOPs with
``balance_data``, else tokens). ``plan_step`` has no samples-per-micro-batch limit, so it is not
used here.

Measured against the fewest-count method (``_plan_fewest``, the ``plan_global`` shape) and slime's
own (first fit, ranks strided or by Karmarkar-Karp), ``python benchmarks/bench_trainers.py --part
slime --batches 500`` (100 long-tail steps, n 64..1024, dp 2..16, cap 2x the longest; load ~2.3
on 2 cores), step time of the model with the same cost and overhead, ratio other / new:

* pp=1: p50 1.000x against the fewest-count method; 6 of 50 steps slower by at most 0.05% (the
  0.02 s budget ends the search before it matches ``partition``'s balance; at n = 1024 the
  constructions alone use the budget); p50 1.026x (tokens) and 1.001x (FLOPs) against
  slime's own, never slower.
* pp=4: p50 1.081x (tokens) / 1.098x (FLOPs) against the fewest-count method, never slower;
  1.125x / 1.107x against slime's own.
* Wall time per call, one step of n samples (tokens, p50 of 3): n=64: 5.6-13 ms (previous
  3.3-5.0); n=256: 9.1-11 ms (previous 24-73); n=1024: 11-38 ms (previous 113-145; 38 ms at
  dp=2, where the constructions at ~100 micro-batches per rank outrun the budget).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._partition import partition
from ..batch_cost import MicroBatchCost
from ..errors import InfeasibleError, TrainerInputError
from ..plan import find_violations
from ..problem import Cost
from ..step import PipelineModel, plan_step, round_up
from ._values import CostChoice, as_count, as_flag, as_tokens, choose_cost
from .balance import ENGINE, OPTIONS, TIME_LIMIT, capped_fallback

__all__ = ["OVERHEAD_TOKENS", "STEP_TIME_LIMIT", "build_dp_schedule", "workload_cost"]


def workload_cost(args: Any) -> Cost:
    """The per-sample compute estimate slime balances (``balance_data``, ``balance_by_flops``),
    as a :class:`~seqpart.solver.problem.Cost` from :meth:`Cost.from_model
    <seqpart.solver.problem.Cost.from_model>` (the package's one FLOPs formula,
    :mod:`seqpart.solver.flops`), reduced to ``quadratic == 1`` (only the ratio matters).

    slime's Megatron argument names are mapped to :class:`~seqpart.solver.flops.ModelShape`:
    ``hidden_size``, ``num_layers``, ``num_attention_heads``, ``num_query_groups`` (kv heads),
    ``kv_channels`` (head size), ``ffn_hidden_size``, ``vocab_size``, ``swiglu`` (gated MLP,
    default on as slime assumes) and for a mixture of experts ``num_experts``,
    ``moe_router_topk``, ``moe_ffn_hidden_size``, ``moe_shared_expert_intermediate_size`` and
    ``moe_layer_freq`` (only the number of dense layers matters to the total, not where they
    are). Differences from slime's own counter (``slime/utils/flops_utils.py``), on purpose and
    small: causal attention is counted over ``l*(l+1)/2`` (query, key) pairs, so the linear term
    gains ``2*q*layers`` (slime: ``l**2/2``); the MoE router's ``2*h*num_experts`` per token is
    counted; multi-latent attention is approximated as ordinary attention with head size
    ``qk_head_dim + qk_pos_emb_head_dim``. For a 7B-class model each changes the ratio by well
    under 1%. Without the model sizes in ``args`` it is verl's ``24576*l + l^2`` (a 7B model).
    """
    try:
        h = int(args.hidden_size)
        layers = int(args.num_layers)
        heads = int(args.num_attention_heads)
        shape: dict[str, Any] = {
            "num_kv_heads": int(getattr(args, "num_query_groups", None) or heads),
            "head_dim": int(getattr(args, "kv_channels", None) or h // heads),
            "ffn_size": int(args.ffn_hidden_size),
            "vocab_size": int(getattr(args, "vocab_size", 0) or 0),
            "gated_mlp": bool(getattr(args, "swiglu", True)),
        }
        if getattr(args, "multi_latent_attention", False):
            shape["head_dim"] = int(args.qk_head_dim) + int(args.qk_pos_emb_head_dim)
        experts = getattr(args, "num_experts", None)
        if experts:
            freq = getattr(args, "moe_layer_freq", 1)
            if isinstance(freq, (list, tuple)):
                dense = sum(1 for f in freq if f == 0)
            else:
                dense = sum(1 for i in range(layers) if i % int(freq) != 0)
            shape.update(
                moe_top_k=int(args.moe_router_topk),
                moe_ffn_size=int(args.moe_ffn_hidden_size),
                num_experts=int(experts),
                shared_ffn_size=int(getattr(args, "moe_shared_expert_intermediate_size", 0) or 0),
                dense_layers=dense,
            )
        return Cost.from_model(h, layers, heads, **shape)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return Cost.attention()


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise TrainerInputError(message)


#: Seconds of ``plan_step`` per training step (its deterministic work budget; the clock is
#: only a safety net). See the module docstring for the measured wall time.
STEP_TIME_LIMIT = 0.02
#: The fixed cost of one micro-batch, in tokens of linear cost (times ``cost.linear``).
OVERHEAD_TOKENS = 512


def _plan_dynamic(
    tokens: np.ndarray,
    dp_size: int,
    m_multiple: int,
    pp: int,
    vpp: int,
    cap: int,
    cost: Cost,
    step_i: int,
    overhead: int | MicroBatchCost | None = None,
) -> list[list[list[int]]]:
    """One capped step by :func:`plan_step`: ``per_rank[r]`` = rank r's micro-batches;
    ``overhead`` per micro-batch in cost units (None: :data:`OVERHEAD_TOKENS` tokens of it)."""
    align = dp_size * m_multiple
    if overhead is None:
        overhead = OVERHEAD_TOKENS * int(cost.linear)
    try:
        # Megatron-LM's interleaved groups are of m_multiple micro-batches per chunk.
        pipeline = PipelineModel(group=m_multiple) if vpp > 1 and pp > 1 else None
        plan = plan_step(tokens, dp_size, cap, pp=pp, vpp=vpp, multiple_of=m_multiple, cost=cost,
                         overhead=overhead, time_limit=STEP_TIME_LIMIT, pipeline=pipeline,
                         oversize="alone", trainer_starts=None, engine=ENGINE, options=OPTIONS)
    except InfeasibleError as err:
        _assert(not err.proven, (
            f"step {step_i}: {len(tokens)} samples cannot fill a multiple of dp_size * mb_group "
            f"= {align} non-empty micro-batches under the cap of {cap} tokens: add samples to "
            f"the step (a larger global_batch_size) or raise max_tokens_per_gpu ({err})"
        ))
        # Not found in the budget (never seen): the plan_global-style split still is valid.
        return _plan_fewest(tokens, dp_size, align, cap, cost, cost, step_i)
    return [[sorted(mb) for mb in rank] for rank in plan.ranks]


def _plan_fewest(
    tokens: np.ndarray, dp_size: int, align: int, cap: int, mbs_cost: Cost, rank_cost: Cost,
    step_i: int,
) -> list[list[list[int]]]:
    """The fallback (and the method before ``plan_step``, kept for the benchmark): the fewest
    micro-batches the cap allows (rounded up to ``align``), balanced by ``partition`` in
    ``mbs_cost``, then dealt to ranks by an equal-size partition of their ``rank_cost`` loads."""
    n = len(tokens)
    smallest = partition(tokens, None, cap, time_limit=TIME_LIMIT, oversize="alone",
                         engine=ENGINE, options=OPTIONS).k
    k = round_up(max(smallest, align), align)
    _assert(k <= n, (
        f"step {step_i}: {n} samples cannot fill {k} non-empty micro-batches (the cap needs "
        f"{smallest}, rounded up to a multiple of dp_size * mb_group = {align}): add samples "
        "to the step (a larger global_batch_size) or raise max_tokens_per_gpu"
    ))
    try:
        mbs = partition(tokens, k, cap, time_limit=TIME_LIMIT, cost=mbs_cost, oversize="alone",
                        engine=ENGINE, options=OPTIONS).bins
    except InfeasibleError as err:  # not found by the heuristics for this cost
        if err.proven:
            raise
        mbs = capped_fallback(tokens, k, cap, mbs_cost)
    return _deal(tokens, mbs, dp_size, rank_cost)


def _deal(tokens: np.ndarray, mbs: list[list[int]], dp_size: int,
          cost: Cost) -> list[list[list[int]]]:
    """Micro-batches to ranks, the same number each, rank totals balanced in ``cost``; each
    rank's micro-batches in the order of their first sample."""
    if dp_size == 1:
        groups = [list(range(len(mbs)))]
    else:
        loads = [int(cost.of(tokens[b]).sum()) for b in mbs]
        groups = partition(loads, dp_size, None, time_limit=TIME_LIMIT, equal_size=True,
                           engine=ENGINE, options=OPTIONS).bins
    return [sorted((sorted(mbs[j]) for j in g), key=lambda b: b[0]) for g in groups]


def _plan_static(
    tokens: np.ndarray, dp_size: int, align: int, micro_batch_size: int, mbs_cost: Cost,
    rank_cost: Cost,
) -> list[list[list[int]]]:
    """``micro_batch_size`` samples per micro-batch: the count is fixed, only balance is left."""
    n = len(tokens)
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
    return _deal(tokens, mbs, dp_size, rank_cost)


def _checked(per_rank: list[list[list[int]]], tokens: np.ndarray, dp_size: int,
             cap: int | None) -> list[list[list[int]]]:
    """One validator over the whole step before anything is returned."""
    m = len(per_rank[0])
    flat = [b for rank in per_rank for b in rank]
    oversize = [] if cap is None else [int(i) for i in np.flatnonzero(tokens > cap)]
    found = find_violations(flat, tokens, dp_size * m, cap, oversize=oversize)
    if not found.ok or len(per_rank) != dp_size or any(len(rank) != m for rank in per_rank):
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
    cost: Any = None,
    overhead: Any = None,
    cost_profile: Any = None,
) -> tuple[list[list[int]], list[list[list[int]]], list[int], list[int]]:
    """slime's ``build_dp_schedule``: the per-rank sample partition and micro-batch schedule.

    Args:
        args: ``micro_batch_size``, ``use_dynamic_batch_size``, ``max_tokens_per_gpu``,
            ``balance_data``, ``balance_by_flops``, (optional) ``pipeline_model_parallel_size``
            and the model sizes for the workload estimate (:func:`workload_cost`).
        train_parallel_config: ``{"dp_size", "cp_size", "vpp_size",
            "microbatch_group_size_per_vp_stage"}`` (and optionally ``"pp_size"``).
        total_lengths: token count per sample (ints or integral floats, list/array/tensor).
        global_batch_size: rollouts per training step.
        rollout_indices: rollout id per sample; a rollout's samples stay in one step.
        group_indices: slime v0.3.0's name for ``rollout_indices`` (pass one of the two).
        cost: a :class:`~seqpart.solver.Cost` ("tokens", "attention") that replaces slime's
            choice (tokens, or FLOPs with ``balance_data``/``balance_by_flops``) everywhere
            the schedule balances or times a sample.
        overhead: the fixed cost of one micro-batch in the cost's units (default
            :data:`OVERHEAD_TOKENS` tokens of linear cost, ``512 * cost.linear``).
        cost_profile: a :class:`~seqpart.solver.CostProfile` (or the path of one, read on
            every call): its calibrated ``.cost`` and ``.overhead`` are the cost and the
            overhead. Not with ``cost`` or ``overhead``.

    Returns:
        ``(partitions, micro_batch_indices, num_microbatches, global_batch_sizes)`` as slime's:
        ``partitions[r]`` global sample indices of rank r, ``micro_batch_indices[r]`` its
        micro-batches as positions into ``partitions[r]``, ``num_microbatches[s]`` per rank for
        step s, ``global_batch_sizes[s] == global_batch_size``.

    Raises:
        TrainerInputError (a ValueError and an AssertionError, as slime asserts): fewer
            rollouts than one step, a step with fewer samples than ranks or than the micro-batch
            count needs, a static layout that cannot align, ``cost_profile`` with ``cost`` or
            ``overhead``.
        ValueError: a cost profile that cannot be read (the loader's message names the file).
    """
    layout = _layout(args, train_parallel_config, choose_cost(cost, cost_profile, overhead))
    dp_size, cap = layout.dp_size, layout.cap
    gbs = as_count(global_batch_size, "global_batch_size")
    tokens = as_tokens(total_lengths, "total_lengths")
    rollouts, samples_of = _rollouts(rollout_indices, group_indices, tokens, gbs)
    num_steps = len(rollouts) // gbs

    partitions: list[list[int]] = [[] for _ in range(dp_size)]
    micro_batch_indices: list[list[list[int]]] = [[] for _ in range(dp_size)]
    num_microbatches: list[int] = []
    for step_i in range(num_steps):
        step = [pos for rid in rollouts[step_i * gbs:(step_i + 1) * gbs] for pos in samples_of[rid]]
        _assert(len(step) >= dp_size, (
            f"step {step_i}: {len(step)} samples < dp_size {dp_size}: each step needs at least "
            "one sample per rank"
        ))
        step_tokens = tokens[step]
        if cap is not None:
            per_rank = _plan_dynamic(step_tokens, dp_size, layout.m_multiple, layout.pp, layout.vpp,
                                     cap, layout.step_cost, step_i, layout.overhead)
        else:
            assert layout.micro_batch_size is not None
            per_rank = _plan_static(step_tokens, dp_size, layout.align, layout.micro_batch_size,
                                    layout.mbs_cost, layout.rank_cost)
        per_rank = _checked(per_rank, step_tokens, dp_size, cap)
        num_microbatches.append(len(per_rank[0]))
        for r, rank_mbs in enumerate(per_rank):
            for mb in rank_mbs:
                start = len(partitions[r])
                partitions[r].extend(step[i] for i in mb)
                micro_batch_indices[r].append(list(range(start, start + len(mb))))
    return partitions, micro_batch_indices, num_microbatches, [gbs] * num_steps


@dataclass(frozen=True)
class _Layout:
    """What build_dp_schedule reads from slime's args and parallel config."""

    dp_size: int
    pp: int
    vpp: int
    m_multiple: int  # the per-rank count is a multiple of this (vpp > 1: the micro-batch group)
    align: int  # static layout: the step's micro-batch count is a multiple of this
    cap: int | None  # dynamic batch size: max_tokens_per_gpu * cp_size
    micro_batch_size: int | None  # static batch size
    step_cost: Cost  # dynamic: the step time's per-sequence cost
    mbs_cost: Cost  # static: slime's micro-batch weight
    rank_cost: Cost  # static: slime's rank weight
    overhead: int | MicroBatchCost | None  # dynamic, per micro-batch (None: OVERHEAD_TOKENS of it)


def _layout(args: Any, train_parallel_config: dict, chosen: CostChoice) -> _Layout:
    _assert(isinstance(train_parallel_config, Mapping), (
        "train_parallel_config must be a dict with dp_size (and cp_size, vpp_size, "
        f"microbatch_group_size_per_vp_stage), got {type(train_parallel_config).__name__}"
    ))
    _assert("dp_size" in train_parallel_config,
            "train_parallel_config has no dp_size: pass the data-parallel size, e.g. {'dp_size': 8}")
    dp_size = as_count(train_parallel_config["dp_size"], "dp_size")
    cp_size = as_count(train_parallel_config.get("cp_size", 1), "cp_size")
    vpp_size = as_count(train_parallel_config.get("vpp_size", 1) or 1, "vpp_size")
    pp = as_count(train_parallel_config.get("pp_size") or
                  getattr(args, "pipeline_model_parallel_size", None) or 1, "pp_size")
    # Megatron-LM's default group per chunk is pp; its interleaved schedule refuses one below it.
    mb_group = as_count(train_parallel_config.get("microbatch_group_size_per_vp_stage") or
                        (pp if vpp_size > 1 else 1), "microbatch_group_size_per_vp_stage")
    _assert(vpp_size == 1 or mb_group >= pp, (
        f"microbatch_group_size_per_vp_stage={mb_group} is below pp_size={pp}: Megatron-LM's "
        "interleaved schedule (vpp_size > 1) needs pp <= N; pass N >= pp (its default is pp)"
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
    m_multiple = mb_group if vpp_size > 1 else 1
    workload = workload_cost(args)
    by_flops = as_flag(getattr(args, "balance_by_flops", False) or False, "balance_by_flops")
    balance = as_flag(getattr(args, "balance_data", False) or False, "balance_data")
    # Dynamic: the step time is measured in FLOPs when either flag asks for FLOP balance.
    # Static: slime's micro-batch and rank weights. A given cost (or profile) replaces all three.
    step_cost = workload if by_flops or balance else Cost()
    mbs_cost, rank_cost = workload, workload if balance else Cost()
    if chosen.cost is not None:
        step_cost = mbs_cost = rank_cost = chosen.cost
    return _Layout(
        dp_size=dp_size, pp=pp, vpp=vpp_size, m_multiple=m_multiple, align=dp_size * m_multiple,
        cap=cap, micro_batch_size=micro_batch_size, step_cost=step_cost, mbs_cost=mbs_cost,
        rank_cost=rank_cost, overhead=chosen.overhead,
    )


def _rollouts(
    rollout_indices: Any, group_indices: Any, tokens: np.ndarray, gbs: int
) -> tuple[list[Any], dict[Any, list[int]]]:
    """Rollouts in first-occurrence order, each with its sample positions; at least one step."""
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
    samples_of: dict[Any, list[int]] = {}
    for pos, rid in enumerate(rollout_ids):
        try:
            samples_of.setdefault(rid, []).append(pos)
        except TypeError:
            raise TrainerInputError(
                f"rollout_indices[{pos}] is {rid!r} ({type(rid).__name__}), which cannot identify a "
                "rollout: pass one hashable id (an int) per sample"
            ) from None
    rollouts = list(samples_of)
    _assert(len(rollouts) // gbs >= 1, (
        f"num_{unit} ({len(rollouts)}) < global_batch_size ({gbs}): need at least one step's "
        f"worth of {unit}"
    ))
    return rollouts, samples_of
