"""Run a task on ``world`` real processes in one process group, with every failure bounded.

Each process initialises torch.distributed (``backend`` on 127.0.0.1 and a free port, a
collective timeout), creates a group for every aligned block of ranks of each degree > 1 that a
schedule can use, runs ``task(ctx, *args)`` and sends its result back. A failure is collective:
a rank that raises reports it, its peers' collectives time out after ``collective_timeout``
seconds, and the parent, which waits at most ``timeout`` seconds in all, stops every process as
soon as one has failed or died and raises :class:`~seqpart.solver.errors.MeasureError` naming
the rank and the cause. No rank waits forever.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import MeasureError
from .layout import default_degrees


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_processes() -> Any:
    """How ranks start: fresh processes forked from one server that imported torch once
    ("forkserver"; safe with CUDA, unlike fork), where the platform has it, else spawned. Each
    spawned rank imports torch again, about 1 s of CPU."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed"])
    return ctx


@dataclass
class RankContext:
    """What a task sees on its rank: the distributed set-up and its runner's device."""

    rank: int
    world: int
    backend: str
    device: str
    #: ranks tuple -> process group, for every aligned block of each degree > 1
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)


def rank_device(device: str, rank: int) -> str:
    """CUDA ranks take one device each (``cuda:rank`` modulo the devices there); CPU stays CPU."""
    if device.startswith("cuda"):
        import torch

        return f"cuda:{rank % max(1, torch.cuda.device_count())}"
    return device


def _worker(rank: int, world: int, port: int, backend: str, device: str, degrees: tuple[int, ...],
            collective_timeout: float, task: Callable[..., Any], args: tuple[Any, ...], out: Any) -> None:
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dev = rank_device(device, rank)
        if dev.startswith("cuda"):
            torch.cuda.set_device(torch.device(dev))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=collective_timeout))
        ctx = RankContext(rank, world, backend, dev)
        for c in degrees:
            if c > 1:
                for first in range(0, world, c):
                    ranks = tuple(range(first, first + c))
                    ctx.groups[ranks] = dist.new_group(list(ranks)) if c < world else dist.group.WORLD
        result = task(ctx, *args)
        dist.barrier()
        dist.destroy_process_group()
        out.put(("ok", rank, result))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent, with its cause
        tb = traceback.format_exc(limit=4)
        out.put(("error", rank, f"{type(exc).__name__}: {exc}\n{tb}"))


def check_backend(backend: str | None, device: str, world: int) -> str:
    """The backend to use (None: nccl on CUDA, gloo on CPU), or a ValueError saying why it cannot run."""
    chosen = backend or ("nccl" if device.startswith("cuda") else "gloo")
    if chosen not in ("gloo", "nccl"):
        raise ValueError(f"backend={backend!r} is not supported: use 'gloo' or 'nccl'")
    if chosen == "nccl":
        if not device.startswith("cuda"):
            raise ValueError(f"backend='nccl' needs device='cuda', got device={device!r}: use backend='gloo'")
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < world:
            raise ValueError(f"backend='nccl' needs one CUDA device per rank ({world}), found {count}: "
                             "NCCL refuses two ranks on one device; use backend='gloo' (collectives "
                             "staged through the CPU) on this machine")
    return chosen


def run_ranks(task: Callable[..., Any], args: tuple[Any, ...] = (), *, world: int = 2,
              backend: str = "gloo", device: str = "cpu", degrees: tuple[int, ...] | None = None,
              timeout: float = 600.0, collective_timeout: float = 120.0) -> list[Any]:
    """``task(ctx, *args)`` on ``world`` new processes (:func:`rank_processes`); the results by
    rank. ``task`` and ``args`` must be picklable (a module-level function)."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an int >= 1 (the number of processes), got {world!r}")
    degs = tuple(default_degrees(world) if degrees is None else degrees)
    ctx = rank_processes()
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, backend, device, degs, collective_timeout,
                                               task, args, out), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    error = None
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world and error is None:
            if time.monotonic() > deadline:
                missing = sorted(set(range(world)) - set(results))
                error = f"no result within {timeout:.0f} s from ranks {missing}"
                break
            try:
                status, rank, payload = out.get(timeout=0.5)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
                if dead:
                    error = f"rank {dead[0]} exited with code {procs[dead[0]].exitcode} without a result"
                continue
            if status == "ok":
                results[rank] = payload
            else:
                error = f"rank {rank}: {payload}"
    finally:
        for p in procs:
            p.join(timeout=5 if error is None else 0.1)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if error is not None:
        raise MeasureError(f"the {world}-process {backend} run failed: {error}")
    return [results[r] for r in range(world)]
