"""Fixed-CP baselines: every step tiled by ``n/c`` groups of one degree ``c``.

* :func:`dp_balanced_schedule`: Megatron-LM's ``dp_balanced`` (re-implemented from its
  description): next fit in arrival order into bins of ``c*m`` tokens, the bin count raised to a
  multiple of ``dp = n/c`` by splitting single sequences off the last multi-sequence bins; step i
  gives replica d bin ``i*dp + d``.
* :func:`fixed_cp_schedule`: seqpart's own :func:`~seqpart.solver.plan_step` at degree c, on the
  cost the model charges there (``w/c + cp_comm*l*(c-1)/c + overhead`` per GPU, times c).
"""

from __future__ import annotations

from typing import Any

from ..errors import InfeasibleError
from ..options import SolverOptions
from ..step import plan_step
from ._model import CPInstance, Steps, find_cp_violations, make_cp_instance

__all__ = ["dp_balanced_schedule", "fixed_cp_schedule", "fixed_degrees"]


def fixed_degrees(inst: CPInstance) -> list[int]:
    """The allowed degrees that divide ``n_gpus`` and hold the longest sequence."""
    top = max(inst.lengths)
    return [c for c in inst.degrees if inst.n_gpus % c == 0 and top <= c * inst.m]


def dp_balanced_schedule(lengths: Any, n_gpus: int, max_tokens_per_gpu: int, cp: int) -> Steps:
    """Megatron-LM's fixed-CP ``dp_balanced`` schedule at degree ``cp``, validated."""
    inst = make_cp_instance(lengths, n_gpus, max_tokens_per_gpu, degrees=[cp] if n_gpus % cp == 0 else None)
    if n_gpus % cp:
        raise ValueError(f"cp={cp} does not divide n_gpus={n_gpus}: pick a divisor")
    dp = n_gpus // cp
    cap = cp * inst.m
    bins: list[list[int]] = []
    tok = 0
    for i, lo in enumerate(inst.lengths):
        if lo > cap:
            raise ValueError(f"lengths[{i}]={lo} is over cp*max_tokens_per_gpu={cap}: raise cp")
        if bins and tok + lo <= cap:
            bins[-1].append(i)
            tok += lo
        else:
            bins.append([i])
            tok = lo
    need = (-len(bins)) % dp
    k = len(bins) - 1
    while need:
        if k < 0:
            raise ValueError(f"{len(inst.lengths)} sequences cannot fill {dp} replicas of CP{cp}: "
                             "use a larger cp or more sequences")
        if len(bins[k]) > 1:
            bins.append([bins[k].pop()])
            need -= 1
        else:
            k -= 1
    steps: Steps = []
    for s in range(len(bins) // dp):
        steps.append([(tuple(range(d * cp, (d + 1) * cp)), tuple(bins[s * dp + d])) for d in range(dp)])
    bad = find_cp_violations(inst, steps)
    assert not bad, bad
    return steps


def fixed_cp_schedule(inst: CPInstance, c: int, time_limit: float,
                      options: SolverOptions | None = None) -> Steps | None:
    """seqpart's best step plan at degree c (None when n/c replicas cannot all be busy)."""
    dp = inst.n_gpus // c
    if len(inst.lengths) < dp:
        return None
    k = inst.cp_comm.denominator
    extra = inst.cp_comm.numerator * (c - 1)  # k * cp_comm * (c-1), per token
    cost = (k * inst.cost.linear + extra, k * inst.cost.quadratic, k * inst.cost.per_sequence)
    try:
        plan = plan_step(list(inst.lengths), dp, c * inst.m, cost=cost,
                         overhead=k * c * inst.overhead, time_limit=time_limit, options=options,
                         trainer_starts=False)
    except InfeasibleError:
        return None
    counts = {len(r) for r in plan.ranks}
    if len(counts) != 1:
        return None
    times = [[inst.group_time(c, mb) for mb in rank] for rank in plan.ranks]
    # Under a barrier the slowest micro-batches of every replica are best run in the same step.
    order = [sorted(range(len(rank)), key=lambda j, t=t: -t[j])
             for rank, t in zip(plan.ranks, times, strict=True)]
    steps: Steps = []
    for s in range(counts.pop()):
        steps.append([(tuple(range(d * c, (d + 1) * c)), tuple(plan.ranks[d][order[d][s]]))
                      for d in range(dp)])
    return steps
