"""One micro-batch's forward and backward on the reference decoder, alone or by a CP group.

Every rank builds the same model (same seed), and a micro-batch's token ids are a function of
its lengths only, so the ranks of a group, and a single process given the same lengths, run the
same tokens whatever ran before. The loss is the mean next-token cross-entropy over the
micro-batch's ``T`` tokens (as :func:`~seqpart.solver.measure.models.reference_runner`'s): a CP
rank contributes the sum over its own tokens divided by ``T``, so the group's losses and
parameter gradients, summed over the group, are the single process's.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..models import ReferenceConfig, ReferenceDecoder, hf_runner, resolve_device, sync
from .attention import CommClock, CPAttention
from .layout import CPLayout

#: The reference decoder the CP measurements run: small enough for a 2-core CPU.
SMALL = {"hidden": 64, "layers": 2, "heads": 4, "ffn": 172, "vocab": 256}


def token_ids(lengths: Sequence[int], vocab: int) -> torch.Tensor:
    """The micro-batch's ``T + 1`` token ids (inputs and next-token labels), seeded by its lengths."""
    seed = zlib.crc32(",".join(str(int(x)) for x in lengths).encode())
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (sum(int(x) for x in lengths) + 1,), generator=gen)


@dataclass
class MicroBatchRunner:
    """The model of one rank (the reference decoder, or a transformers model when the config
    has a ``model_type``), and the runs of a micro-batch on it."""

    model: Any
    vocab: int
    device: torch.device
    backend: str
    clock: CommClock
    hf: bool = False

    @classmethod
    def build(cls, config: dict[str, Any] | None, device: str, backend: str, seed: int = 0
              ) -> MicroBatchRunner:
        dev = resolve_device(device)
        if config is not None and "model_type" in config:
            model = hf_runner(config, device=device, seed=seed).model  # type: ignore[attr-defined]
            return cls(model, int(config["vocab_size"]), dev, backend, CommClock(), hf=True)
        cfg = ReferenceConfig(**(config if config is not None else SMALL))
        torch.manual_seed(seed)
        return cls(ReferenceDecoder(cfg).to(dev), cfg.vocab, dev, backend, CommClock())

    def _ids(self, lengths: Sequence[int]) -> torch.Tensor:
        return token_ids(lengths, self.vocab).to(self.device)

    def _logits(self, ids: torch.Tensor, starts: list[int], positions: list[int],
                attention: CPAttention | None) -> torch.Tensor:
        if not self.hf:
            return self.model(ids[None], starts, attention)[0]
        cu = torch.tensor(starts, dtype=torch.int32, device=self.device)
        extra = {} if attention is None else {"seqpart_attention": attention}
        out = self.model(input_ids=ids[None], position_ids=torch.tensor(positions, device=self.device)[None],
                         cu_seq_lens_q=cu, cu_seq_lens_k=cu, use_cache=False, **extra)
        return out.logits[0]

    def alone(self, lengths: Sequence[int]) -> torch.Tensor:
        """Forward and backward of the whole micro-batch on this process; the loss (detached)."""
        ids = self._ids(lengths)
        layout = CPLayout(tuple(int(x) for x in lengths), 1, 0)
        logits = self._logits(ids[:-1], layout.starts, layout.local_positions, None)
        loss = F.cross_entropy(logits, ids[1:])
        loss.backward()
        sync(self.device)
        return loss.detach()

    def in_group(self, lengths: Sequence[int], group: Any, degree: int, rank: int) -> torch.Tensor:
        """Forward and backward of this rank's zigzag slice with all-gather-KV attention over
        ``group`` (``degree`` ranks, this one ``rank`` in it); this rank's share of the loss."""
        layout = CPLayout(tuple(int(x) for x in lengths), degree, rank)
        ids = self._ids(lengths)
        index = torch.tensor(layout.local_index, dtype=torch.long, device=self.device)
        attention = CPAttention(layout, group, self.backend, self.clock)
        if self.hf and not layout.local_index:  # transformers cannot run zero tokens
            cfg = self.model.config
            head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
            attention.idle(cfg.num_hidden_layers, 2 * cfg.num_attention_heads * head_dim,
                           next(self.model.parameters()).dtype, self.device)
            return torch.zeros((), device=self.device)
        logits = self._logits(ids[:-1].index_select(0, index), layout.local_starts, layout.local_positions,
                              attention)
        loss = F.cross_entropy(logits, ids[1:].index_select(0, index), reduction="sum") / (len(ids) - 1)
        loss.backward()
        sync(self.device)
        return loss.detach()

    def run(self, lengths: Sequence[int], group: Any = None, degree: int = 1, rank: int = 0
            ) -> tuple[float, float]:
        """(wall, CPU) seconds of one micro-batch, alone (``degree`` 1) or in ``group``. The CPU
        clock (this process's) leaves out time spent waiting for a core on a shared machine, and
        also time blocked in a collective waiting for a peer; the wall clock counts both."""
        sync(self.device)
        c0, t0 = time.process_time(), time.perf_counter()
        if degree == 1:
            self.alone(lengths)
        else:
            self.in_group(lengths, group, degree, rank)
        t1 = time.perf_counter()
        return t1 - t0, time.process_time() - c0

    def zero_grad(self) -> None:
        for p in self.model.parameters():
            p.grad = None

    def grads(self) -> list[torch.Tensor]:
        return [torch.zeros_like(p) if p.grad is None else p.grad for p in self.model.parameters()]
