"""All-gather-KV context-parallel attention: the simplest exact context parallelism.

Each of the ``c`` ranks of a group holds its zigzag slice of every sequence
(:class:`~seqpart.solver.measure.cp.layout.CPLayout`), computes Q, K and V for its own tokens,
all-gathers K and V over the group (one collective per layer, K and V in one buffer), puts the
gathered rows back in sequence order, and runs causal attention of its queries against the
whole sequence's keys: a query at position ``p`` of its sequence sees keys ``0..p`` (the
"lower-right" causal mask of a ``[chunk_start, chunk_end)`` query block against keys
``[0, chunk_end)``). The backward of the all-gather sums each rank's K/V gradients over the
group and hands each rank its own rows: a reduce-scatter (``reduce_scatter_tensor`` on NCCL;
gloo has none, so there it is an all-reduce of which each rank keeps its rows, same result).

Nothing is overlapped: every collective's time is exposed, which is what ``cp_comm`` measures.
Collectives run on the tensors' device, except on gloo with CUDA tensors, which stage through
the CPU (gloo's CUDA support is partial). The seconds spent inside the collectives (forward and
backward, device synchronised) are added to ``CommClock.seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .layout import CPLayout


@dataclass
class CommClock:
    """Seconds spent inside the CP collectives, and how many ran."""

    seconds: float = 0.0
    calls: int = 0


def _sync(t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


@dataclass(frozen=True)
class _Comm:
    group: Any
    degree: int
    rank: int
    backend: str
    clock: CommClock

    def staged(self, t: torch.Tensor) -> torch.Tensor:
        return t.cpu() if self.backend == "gloo" and t.device.type != "cpu" else t

    def all_gather(self, buf: torch.Tensor) -> torch.Tensor:
        _sync(buf)
        t0 = time.perf_counter()
        src = self.staged(buf).contiguous()
        parts = [torch.empty_like(src) for _ in range(self.degree)]
        dist.all_gather(parts, src, group=self.group)
        out = torch.cat(parts).to(buf.device)
        _sync(out)
        self.clock.seconds += time.perf_counter() - t0
        self.clock.calls += 1
        return out

    def reduce_scatter(self, grad: torch.Tensor, rows: int) -> torch.Tensor:
        """Sum ``grad`` (``[degree * rows, F]``) over the group; this rank's ``rows`` rows."""
        _sync(grad)
        t0 = time.perf_counter()
        src = self.staged(grad).contiguous()
        if self.backend == "nccl":
            out = torch.empty((rows, *src.shape[1:]), dtype=src.dtype, device=src.device)
            dist.reduce_scatter_tensor(out, src, group=self.group)
        else:
            src = src.clone()
            dist.all_reduce(src, group=self.group)
            out = src[self.rank * rows:(self.rank + 1) * rows]
        out = out.to(grad.device)
        _sync(out)
        self.clock.seconds += time.perf_counter() - t0
        self.clock.calls += 1
        return out


class _GatherRows(torch.autograd.Function):
    """``[n_local, F]`` rows of every rank -> ``[degree * padded, F]`` (rank r at ``r * padded``)."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, comm: _Comm, padded: int) -> torch.Tensor:
        ctx.comm, ctx.padded, ctx.n = comm, padded, local.shape[0]
        buf = local.new_zeros((padded, *local.shape[1:]))
        buf[: local.shape[0]] = local
        return comm.all_gather(buf)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        mine = ctx.comm.reduce_scatter(grad, ctx.padded)
        return mine[: ctx.n], None, None


def _lower_right_mask(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """Query ``i`` of the last ``q_len`` positions sees keys ``0 .. k_len - q_len + i``."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


class CPAttention:
    """The attention a rank of a CP group runs: ``(q, k, v, starts) -> out`` on its own tokens
    (``(1, heads, T_local, d)``, packed as ``layout.local_starts``), exact against the whole
    micro-batch's single-process attention. Pass it to ``ReferenceDecoder(..., attention=)``."""

    def __init__(self, layout: CPLayout, group: Any, backend: str, clock: CommClock | None = None) -> None:
        self.layout = layout
        self.clock = clock if clock is not None else CommClock()
        self.comm = _Comm(group, layout.degree, layout.rank, backend, self.clock)
        self._starts = layout.starts
        self._local_starts = layout.local_starts
        self._padded = layout.padded
        self._where = torch.tensor(layout.gather_index(), dtype=torch.long)

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole micro-batch's K and V, ``(1, heads, T, d)``, from every rank's slice."""
        _, h, t, d = k.shape
        rows = torch.stack([k, v]).permute(3, 0, 1, 2, 4).reshape(t, 2 * h * d)  # one row per token
        gathered = _GatherRows.apply(rows, self.comm, self._padded)
        full = gathered.index_select(0, self._where.to(rows.device))
        full = full.reshape(-1, 2, 1, h, d).permute(1, 2, 3, 0, 4)
        return full[0], full[1]

    def idle(self, layers: int, features: int, dtype: torch.dtype, device: torch.device) -> None:
        """The collectives of a rank that holds no token of the micro-batch, for a model that
        cannot run on zero tokens: each layer's gather, then each layer's gradient reduction,
        in the order its peers run them (``features``: K and V values per token)."""
        for _ in range(layers):
            self.comm.all_gather(torch.zeros(self._padded, features, dtype=dtype, device=device))
        for _ in range(layers):
            self.comm.reduce_scatter(torch.zeros(self.layout.degree * self._padded, features, dtype=dtype,
                                                 device=device), self._padded)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, starts: Sequence[int],
                 scale: float | None = None) -> torch.Tensor:
        if list(starts) != self._local_starts:
            raise ValueError(f"starts={list(starts)[:6]}... are not this rank's token counts "
                             f"{self._local_starts[:6]}...: run the model on layout.local_index's tokens")
        k_full, v_full = self.gather_kv(k, v)
        parts = []
        for s, chunks in enumerate(self.layout.chunks):
            row = self._local_starts[s]
            for a, b in chunks:
                qs = q[:, :, row:row + b - a]
                lo = self._starts[s]
                ks, vs = k_full[:, :, lo:lo + b], v_full[:, :, lo:lo + b]
                if a == 0:
                    parts.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale))
                else:
                    mask = _lower_right_mask(b - a, b, q.device)
                    parts.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale))
                row += b - a
        if not parts:
            # No query here, but the group's backward collectives must run on every rank: keep
            # the gathered K/V in the graph (a zero contribution) so autograd calls their backward.
            return q + 0.0 * (k_full.sum() + v_full.sum())
        return torch.cat(parts, dim=2)
