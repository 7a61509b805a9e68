"""A minimal data-parallel training-loop data path with seqpart: 2 gloo ranks on CPU.

Each rank holds its own rollout samples (lengths drawn from a long-tailed distribution with a
spike at the response cap, as RL rollouts have). The ranks agree on one micro-batch count with
``partition_across_ranks``, build every micro-batch with ``torch.cat`` (the call that crashes on
an empty micro-batch), and run a fake forward pass. Then the same step is planned globally.

    python examples/dp_training_loop.py
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seqpart.solver.distributed.planners import partition_across_ranks, plan_global_across_ranks

WORLD = 2
MAX_TOKENS_PER_GPU = 8192  # the cap: max tokens in one micro-batch
PROMPT_MAX, RESPONSE_CAP = 1024, 4096
VOCAB = 32_000


def rollout_lengths(rank: int, n: int = 48) -> list[int]:
    """Prompt + response lengths: log-normal responses, truncated at the response cap (the
    spike of unfinished generations). Ranks get different seeds, so they need different counts."""
    rng = np.random.default_rng(1234 + rank)
    prompts = rng.integers(64, PROMPT_MAX, size=n)
    responses = np.minimum(rng.lognormal(mean=6.5 + rank, sigma=1.0, size=n), RESPONSE_CAP)
    return (prompts + responses.astype(np.int64)).tolist()


def train_step(rank: int) -> None:
    lengths = rollout_lengths(rank)
    samples = [torch.randint(0, VOCAB, (n,)) for n in lengths]  # fake token ids

    plan = partition_across_ranks(lengths, MAX_TOKENS_PER_GPU, time_limit=0.1)
    losses = []
    for micro_batch in plan.bins:
        tokens = torch.cat([samples[i] for i in micro_batch])  # never empty, never over the cap
        losses.append(tokens.float().mean() / VOCAB)  # stands in for forward + loss
    loss = torch.stack(losses).mean()
    print(
        f"rank {rank}: {len(lengths)} samples, {sum(lengths)} tokens -> {plan.k} micro-batches "
        f"of {min(plan.tokens)}..{max(plan.tokens)} tokens, loss {loss.item():.4f}\n"
        f"  {plan.notes[-1]}",
        flush=True,
    )

    # The global form: plan the whole step once and see how the ranks would split it.
    step = plan_global_across_ranks(lengths, MAX_TOKENS_PER_GPU, time_limit=0.3)
    if rank == 0:
        for r, p in enumerate(step.plans):
            print(f"global plan, rank {r}: {p.k} micro-batches, total {sum(p.tokens)} tokens, "
                  f"largest {max(p.tokens)}", flush=True)


def worker(rank: int, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=WORLD)
    try:
        train_step(rank)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    # A file rendezvous: no port to pick, so no race with another process taking it.
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "rendezvous"),), nprocs=WORLD, join=True)
