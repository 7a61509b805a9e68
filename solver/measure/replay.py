"""Measured replay: execute one training step of each schedule on a real model and time it.

Data-parallel ranks are real processes in a gloo group (one torch thread each). In each trial
every rank waits at a barrier, runs its micro-batches' forward and backward in order, then
all-reduces its gradients (one flat buffer, as DDP's buckets do after the last micro-batch).
The step's time is the slowest rank's: ``max over ranks of (compute time) + the all-reduce time
of the rank that arrived last`` (the others wait for it inside the all-reduce). Trials are
paired and interleaved: every repeat runs each schedule once, in a fresh random order, so load
drifts on a shared machine hit all schedules alike, and ratios are taken within a repeat.

Two clocks are recorded per rank: wall time and the process's CPU time for the compute part.
On a CPU shared with other work the CPU clock leaves out time spent waiting for a core. Each
micro-batch is also timed on its own, on both clocks: at pp > 1 those times go through the
pipeline model (:mod:`.pipeline_replay`), since one machine cannot run a real pipeline.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import positive_int
from .cp.procs import rank_processes

Schedule = Sequence[Sequence[Sequence[int]]]


@dataclass(frozen=True)
class RunnerSpec:
    """What each rank builds (picklable): the reference decoder or a transformers config."""

    kind: str = "reference"  # "reference" or "hf"
    config: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    seed: int = 0

    def build(self) -> Any:
        from .models import ReferenceConfig, dtype_of, hf_runner, reference_runner

        if self.kind == "hf":
            return hf_runner(self.config, dtype=dtype_of(self.dtype), seed=self.seed)
        if self.kind == "reference":
            cfg = ReferenceConfig(**self.config) if self.config else None
            return reference_runner(cfg, dtype=dtype_of(self.dtype), seed=self.seed)
        raise ValueError(f"RunnerSpec.kind={self.kind!r}: use 'reference' or 'hf'")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _compute(run: Any, mbs: list[list[int]], micro_cpu: bool
             ) -> tuple[float, float, list[tuple[float, float]]]:
    """Run a rank's micro-batches in order: (wall, CPU) seconds in all and per micro-batch.

    Why the clocks are read in this order: reading a CPU clock is a system call, which on a
    loaded machine can stall for milliseconds (in a process with gloo's threads), while
    ``perf_counter`` is not. So no CPU read falls inside a wall-clock window: each micro-batch's
    CPU time runs from the read after the one before it to the read after it (the per-micro-batch
    CPU reads only with ``micro_cpu``; else those times are NaN)."""
    c0 = time.process_time()
    w0 = time.perf_counter()
    each = []
    cpu_prev = c0
    for lengths in mbs:
        a = time.perf_counter()
        run(lengths)
        b = time.perf_counter()
        cpu = float("nan")
        if micro_cpu:
            now = time.process_time()
            cpu, cpu_prev = now - cpu_prev, now
        each.append((b - a, cpu))
    w1 = time.perf_counter()
    return w1 - w0, time.process_time() - c0, each


def _worker(rank: int, world: int, port: int, spec: RunnerSpec, plan: list[tuple[int, list[list[int]]]],
            micro_cpu: bool, out: Any) -> None:
    """One rank: run every trial of ``plan`` (trial id, this rank's micro-batches of lengths)."""
    try:
        import torch
        import torch.distributed as dist

        from .allocator import keep_freed_memory

        torch.set_num_threads(1)
        keep_freed_memory()  # as calibration does: a micro-batch's time must not depend on the last one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        run = spec.build()
        params = [p for p in run.model.parameters() if p.requires_grad]
        rows, micro = [], []
        for trial, mbs in plan:
            dist.barrier()
            wall, cpu, each = _compute(run, mbs, micro_cpu)
            w1 = time.perf_counter()
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                              for p in params])
            dist.all_reduce(flat)
            w2 = time.perf_counter()
            for p in params:
                p.grad = None
            stats = torch.tensor([wall, cpu, w2 - w1], dtype=torch.float64)
            gathered = [torch.zeros(3, dtype=torch.float64) for _ in range(world)]
            dist.all_gather(gathered, stats)
            if trial >= 0:
                micro.append(each)
                if rank == 0:
                    rows.append((trial, [g.tolist() for g in gathered]))
        # Counts differ between ranks, so the micro-batch times travel once, as objects.
        every: list[Any] = [None] * world
        dist.all_gather_object(every, micro)
        dist.destroy_process_group()
        if rank == 0:
            out.put(("ok", [(tid, ranks, [rm[i] for rm in every]) for i, (tid, ranks) in enumerate(rows)]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises with context
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))


def _wait(out: Any, procs: list[Any], timeout: float) -> tuple[str, Any]:
    """The result from the queue; an error as soon as a rank dies without sending one."""
    import queue

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            dead = [i for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                return "error", f"rank {dead[0]} exited with code {procs[dead[0]].exitcode}"
    return "error", f"no result within {timeout:.0f} s"


@dataclass(frozen=True)
class Trial:
    """One measured step: per rank (compute wall, compute CPU, all-reduce wall) in seconds, and
    per rank the (wall, CPU) seconds of each micro-batch in the order run."""

    schedule: str
    repeat: int
    ranks: tuple[tuple[float, float, float], ...]
    micro: tuple[tuple[tuple[float, float], ...], ...] = ()

    @property
    def last(self) -> int:
        """The rank that arrived last at the all-reduce: its all-reduce time has no waiting."""
        return max(range(len(self.ranks)), key=lambda r: self.ranks[r][0])

    @property
    def allreduce(self) -> float:
        return self.ranks[self.last][2]

    def step(self, clock: str = "wall") -> float:
        """Slowest rank's compute, plus the all-reduce of the rank that arrived last."""
        col = 0 if clock == "wall" else 1
        return max(r[col] for r in self.ranks) + self.allreduce


def run_trials(schedules: dict[str, list[list[list[int]]]], spec: RunnerSpec, *, repeats: int = 5,
               warmup: int = 1, seed: int = 0, timeout: float = 600.0, micro_cpu: bool = False
               ) -> list[Trial]:
    """Run ``schedules`` (name -> [rank][micro-batch] = lengths) ``repeats`` times each, paired
    and interleaved, after ``warmup`` unrecorded rounds; one process per rank. Every micro-batch
    is timed on the wall clock; with ``micro_cpu`` on the CPU clock too (else NaN), which the
    pipeline combination needs and which costs a system call between micro-batches."""
    repeats = positive_int(repeats, "repeats")
    warmup = positive_int(warmup, "warmup", minimum=0)
    names = list(schedules)
    worlds = {len(s) for s in schedules.values()}
    if len(worlds) != 1:
        raise ValueError(f"schedules have different rank counts {sorted(worlds)}: "
                         "replay one dp size at a time")
    world = worlds.pop()
    rng = np.random.default_rng(seed)
    order: list[tuple[int, str, int]] = []  # (trial id or -1 for warm-up, name, repeat)
    for r in range(warmup + repeats):
        for i in rng.permutation(len(names)):
            order.append((-1 if r < warmup else len(order), names[i], r - warmup))
    ctx = rank_processes()
    out = ctx.Queue()
    port = _free_port()
    procs = []
    for rank in range(world):
        plan = [(tid, [list(mb) for mb in schedules[name][rank]]) for tid, name, _ in order]
        p = ctx.Process(target=_worker, args=(rank, world, port, spec, plan, micro_cpu, out), daemon=True)
        p.start()
        procs.append(p)
    try:
        status, payload = _wait(out, procs, timeout)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    if status != "ok":
        raise RuntimeError(f"replay failed: {payload}")
    by_id = {tid: (name, rep) for tid, name, rep in order if tid >= 0}
    return [Trial(by_id[tid][0], by_id[tid][1], tuple(tuple(x) for x in ranks),
                  tuple(tuple((float(w), float(c)) for w, c in rank) for rank in micro))
            for tid, ranks, micro in payload]


def schedule_lengths(schedule: Schedule, lengths: Sequence[int]) -> list[list[list[int]]]:
    """Indices -> lengths, per rank and micro-batch (what a rank runs)."""
    return [[[int(lengths[i]) for i in mb] for mb in rank] for rank in schedule]
