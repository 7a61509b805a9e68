"""Central planning in a Ray single-controller trainer: the driver plans, the workers run.

Single-controller trainers (verl's driver, NeMo-RL, prime-rl's orchestrator) hold the whole
batch in one process and send each data-parallel worker its share. Here the driver gathers the
batch's lengths, calls ``plan_step`` once, and sends each worker actor its micro-batches with its
part of the schedule. Each worker checks that it received exactly that schedule (the samples
of every micro-batch, in order, and the step's count ``m``), then runs a toy training step whose
gradient all-reduce is a collective: every rank must take part in it the same number of times.

When planning fails (a sample over the cap, fewer samples than workers), the driver sends every
worker the same failure instead of micro-batches: each raises the same clear error at once, and
none enters the collective to wait for ranks that will never come. Every wait also has a
timeout, so even a bug cannot hang the step.

    pip install 'seqpart[ray]'
    python examples/ray_central_planning.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

# A local Ray on the loopback address (set before Ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402

from seqpart.solver.step import plan_step

DP = 2  # data-parallel workers
CAP = 4096  # max tokens in one micro-batch
VOCAB = 1000
TIMEOUT_S = 60.0  # no wait of the step lasts longer than this


@dataclass(frozen=True)
class Sample:
    index: int  # the sample's place in the step's batch: what the schedule lists
    tokens: np.ndarray


@dataclass(frozen=True)
class Assignment:
    """What a worker receives for one step: its micro-batches and the schedule they follow."""

    step: int
    rank: int
    m: int  # micro-batches per rank, the same on every rank
    plan_digest: str  # names the whole plan, so every rank can tell it runs the same one
    schedule: list[list[int]]  # this rank's micro-batches as sample indices, in order
    micro_batches: list[list[Sample]]
    cap: int


@dataclass(frozen=True)
class PlanFailure:
    """What every worker receives when the driver could not plan the step."""

    step: int
    message: str


class StepAborted(RuntimeError):
    """The step did not run: planning failed, or a worker found its assignment wrong.
    ``per_rank`` holds each worker's message (on the driver)."""

    def __init__(self, message: str, per_rank: list[str] | None = None) -> None:
        super().__init__(message)
        self.per_rank = per_rank or []


def rollout(step: int, n: int, longest: int = 3000) -> list[Sample]:
    """A batch of ``n`` samples with long-tailed lengths (token ids are random)."""
    rng = np.random.default_rng(step)
    lengths = np.minimum(rng.lognormal(6.5, 0.9, size=n).astype(np.int64) + 16, longest)
    return [Sample(i, rng.integers(0, VOCAB, size=int(n_tokens))) for i, n_tokens in enumerate(lengths)]


def digest(ranks: list[list[list[int]]]) -> str:
    return hashlib.sha256(json.dumps(ranks).encode()).hexdigest()[:16]


@ray.remote(num_cpus=0)
class Reducer:
    """A sum all-reduce over the workers: each call waits until every rank has joined, like a
    real collective, but only up to ``TIMEOUT_S``."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.rounds: dict[tuple[int, int], dict[str, Any]] = {}

    async def all_reduce(self, step: int, call: int, value: list[float]) -> list[float]:
        entry = self.rounds.setdefault((step, call), {"sum": None, "joined": 0,
                                                      "done": asyncio.Event()})
        entry["sum"] = np.add(entry["sum"], value) if entry["sum"] is not None else np.array(value)
        entry["joined"] += 1
        if entry["joined"] == self.world:
            entry["done"].set()
        await asyncio.wait_for(entry["done"].wait(), TIMEOUT_S)
        return list(entry["sum"])


class DPWorker:
    """One data-parallel rank: checks its assignment, then runs a toy step."""

    def __init__(self, rank: int, reducer: Any) -> None:
        self.rank = rank
        self.reducer = reducer
        self.weights = np.linspace(0.0, 1.0, VOCAB)  # the same start on every rank

    def run_step(self, order: Assignment | PlanFailure) -> dict[str, Any]:
        if isinstance(order, PlanFailure):
            raise StepAborted(order.message)  # at once: no collective is entered
        self.check(order)
        grad = np.zeros(VOCAB)
        loss = 0.0
        for micro_batch in order.micro_batches:
            tokens = np.concatenate([s.tokens for s in micro_batch])  # empty would raise here
            loss += float(self.weights[tokens].sum())  # stands in for forward + loss
            grad += np.bincount(tokens, minlength=VOCAB)  # and for backward
        n_tokens = sum(len(s.tokens) for mb in order.micro_batches for s in mb)
        # One collective per step: every rank's gradient, loss and token count, summed.
        total = ray.get(self.reducer.all_reduce.remote(order.step, 0, [*grad, loss, n_tokens]),
                        timeout=TIMEOUT_S)
        global_tokens = int(total[-1])
        self.weights -= 1e-6 * np.asarray(total[:VOCAB]) / global_tokens
        return {"rank": self.rank, "step": order.step, "m": len(order.micro_batches),
                "plan": order.plan_digest, "samples": [i for mb in order.schedule for i in mb],
                "tokens": [sum(len(s.tokens) for s in mb) for mb in order.micro_batches],
                "global_tokens": global_tokens, "loss": total[-2] / global_tokens}

    def check(self, order: Assignment) -> None:
        """Exactly this rank's schedule: the count, every micro-batch's samples in order, the cap."""
        problems = []
        if order.rank != self.rank:
            problems.append(f"assignment for rank {order.rank}")
        if len(order.schedule) != order.m or len(order.micro_batches) != order.m:
            problems.append(f"{len(order.micro_batches)} micro-batches for a schedule of "
                            f"{len(order.schedule)}, m = {order.m}")
        for b, (want, got) in enumerate(zip(order.schedule, order.micro_batches, strict=False)):
            if [s.index for s in got] != want or not got:
                problems.append(f"micro-batch {b} holds samples {[s.index for s in got]}, "
                                f"the schedule says {want}")
            elif len(got) > 1 and sum(len(s.tokens) for s in got) > order.cap:
                problems.append(f"micro-batch {b} is over the cap {order.cap}")
        if problems:
            raise StepAborted(f"rank {self.rank}, step {order.step}: " + "; ".join(problems))


def train_step(workers: list[Any], samples: list[Sample], step: int, cap: int = CAP) -> list[dict]:
    """The driver's step: plan once, send each worker its share (or the same failure to all),
    gather the results. Raises :class:`StepAborted` with the workers' common message."""
    try:
        plan = plan_step([len(s.tokens) for s in samples], len(workers), cap, time_limit=0.5)
        orders: list[Assignment | PlanFailure] = [
            Assignment(step, r, plan.m, digest(plan.ranks), plan.ranks[r],
                       [[samples[i] for i in mb] for mb in plan.ranks[r]], cap)
            for r in range(len(workers))]
    except ValueError as err:  # InfeasibleError is a ValueError too
        orders = [PlanFailure(step, f"step {step} not run: planning failed: {err}")] * len(workers)
    refs = [w.run_step.remote(order) for w, order in zip(workers, orders, strict=True)]
    results, errors = [], []
    for ref in refs:
        try:
            results.append(ray.get(ref, timeout=TIMEOUT_S))
        except ray.exceptions.RayTaskError as err:
            errors.append(str(err.cause) if isinstance(err.cause, StepAborted) else str(err))
    if errors:
        unique = sorted(set(errors))
        raise StepAborted(unique[0] if len(unique) == 1 else " | ".join(unique), errors)
    return results


def start_workers(dp: int = DP) -> list[Any]:
    reducer = Reducer.remote(dp)
    worker = ray.remote(num_cpus=1)(DPWorker)
    return [worker.remote(rank, reducer) for rank in range(dp)]


def main() -> None:
    ray.init(address="local", num_cpus=DP, include_dashboard=False, log_to_driver=False,
             logging_level="error")
    try:
        workers = start_workers()
        for step in range(2):
            samples = rollout(step, 64)
            for r in train_step(workers, samples, step):
                print(f"step {step} rank {r['rank']}: m={r['m']}, {len(r['samples'])} samples, "
                      f"micro-batches of {min(r['tokens'])}..{max(r['tokens'])} tokens "
                      f"(cap {CAP}), {r['global_tokens']} tokens in the step, loss {r['loss']:.4f}")
        oversized = rollout(2, 64)
        oversized[5] = Sample(5, np.zeros(CAP + 500, dtype=np.int64))
        for step, (name, samples) in enumerate((("a sample over the cap", oversized),
                                                ("fewer samples than workers", rollout(3, 1))), 2):
            try:
                train_step(workers, samples, step)
            except StepAborted as err:
                same = len(set(err.per_rank)) == 1 and len(err.per_rank) == DP
                print(f"{name}: {'every worker reported' if same else 'workers reported'}: {err}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
