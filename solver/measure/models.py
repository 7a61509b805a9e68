"""What calibration and replay run: a small reference decoder written here in torch, and a
Hugging Face transformers model built from a config with random weights.

Both run a *packed* micro-batch (its sequences concatenated into one row of tokens) with
attention computed per sequence, as varlen attention kernels do, so a micro-batch's attention
costs ``sum l^2`` and not ``(sum l)^2``. A runner is a callable ``run(lengths)`` that does one
micro-batch's forward and backward and returns when the device is done; gradients accumulate
across calls, as under gradient accumulation. torch (and transformers) are imported here only,
so the rest of :mod:`seqpart.solver.measure` works without them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import MeasureError

Runner = Callable[[Sequence[int]], None]
#: Causal attention of ``(1, heads, T, d)`` tensors packed at ``starts``: ``(q, k, v, starts) -> out``.
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Sequence[int]], torch.Tensor]

#: Name under which the per-sequence attention is registered in transformers' AttentionInterface.
HF_ATTENTION = "seqpart_varlen"


@dataclass(frozen=True)
class ReferenceConfig:
    """Shape of the reference decoder (defaults: small enough to calibrate on a CPU in < 60 s)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 344
    vocab: int = 512

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "ffn", "vocab"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ReferenceConfig.{name} must be an int >= 1, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads}")

    def describe(self) -> dict[str, Any]:
        return {"kind": "reference", "hidden_size": self.hidden, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "intermediate_size": self.ffn,
                "vocab_size": self.vocab, "hidden_act": "silu"}


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device that exists here, else a ValueError saying what does."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device: use 'cpu' or 'cuda[:i]'") from exc
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device={device!r}: no CUDA device here (torch {torch.__version__}); "
                             "use device='cpu'")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device={device!r}: only {count} CUDA device(s), use cuda:0..cuda:{count - 1}")
    elif dev.type != "cpu":
        raise ValueError(f"device={device!r}: only 'cpu' and 'cuda[:i]' are supported")
    return dev


def sync(device: torch.device) -> None:
    """Wait for the device: CUDA runs asynchronously, so a timer must not stop before it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cu_seqlens(lengths: Sequence[int]) -> list[int]:
    out = [0]
    for x in lengths:
        out.append(out[-1] + int(x))
    return out


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     starts: Sequence[int], scale: float | None = None) -> torch.Tensor:
    """Causal attention of ``(1, heads, T, d)`` tensors, per sequence: ``starts`` are the
    cumulative lengths (``[0, l0, l0+l1, ..., T]``); no token attends across a boundary.

    Why ``split`` and not slicing: the backward of each slice writes a zero tensor of the whole
    micro-batch's size, so n slices cost n*T, a term no varlen kernel has (measured: 35 ms
    against 7 ms for 54 sequences in 2,643 tokens). ``split``'s backward is one concatenation."""
    if not starts or starts[0] != 0 or starts[-1] != q.shape[2]:
        raise ValueError(f"starts must run from 0 to the {q.shape[2]} packed tokens, "
                         f"got {list(starts)[:3]}...{list(starts)[-1:]}")
    lengths = [e - s for s, e in zip(starts[:-1], starts[1:], strict=True) if e > s]
    parts = [
        F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        for qs, ks, vs in zip(q.split(lengths, dim=2), k.split(lengths, dim=2), v.split(lengths, dim=2),
                              strict=True)
    ]
    return torch.cat(parts, dim=2)


class _Block(nn.Module):
    def __init__(self, cfg: ReferenceConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.heads = cfg.heads
        self.norm1 = nn.RMSNorm(h)
        self.qkv = nn.Linear(h, 3 * h, bias=False)
        self.out = nn.Linear(h, h, bias=False)
        self.norm2 = nn.RMSNorm(h)
        self.gate_up = nn.Linear(h, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, h, bias=False)

    def forward(self, x: torch.Tensor, starts: Sequence[int], attention: Attention | None = None
                ) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        att = (attention or varlen_attention)(q, k, v, starts).transpose(1, 2).reshape(b, t, h)
        x = x + self.out(att)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class ReferenceDecoder(nn.Module):
    """Decoder blocks (RMSNorm, causal attention per sequence, SiLU-gated MLP) and an LM head."""

    def __init__(self, cfg: ReferenceConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, ids: torch.Tensor, starts: Sequence[int], attention: Attention | None = None
                ) -> torch.Tensor:
        """Logits of ``ids`` (``(1, T)``, packed at ``starts``). ``attention`` replaces the
        per-sequence attention ``(q, k, v, starts) -> out``: context parallelism passes one that
        runs this rank's slice of the tokens against the whole group's keys."""
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, starts, attention)
        return self.head(self.norm(x))


def _train_step(model: nn.Module, logits_of: Callable[[torch.Tensor, list[int]], torch.Tensor],
                vocab: int, device: torch.device, gen: torch.Generator) -> Runner:
    """The runner: random token ids, forward, next-token loss, backward, then a device sync."""

    def run(lengths: Sequence[int]) -> None:
        starts = _cu_seqlens(lengths)
        total = starts[-1]
        ids = torch.randint(0, vocab, (1, total + 1), generator=gen).to(device)
        logits = logits_of(ids[:, :-1], starts)
        loss = F.cross_entropy(logits.view(total, -1), ids[0, 1:])
        loss.backward()
        sync(device)

    run.model = model  # type: ignore[attr-defined]  # replay all-reduces its gradients
    return run


def reference_runner(config: ReferenceConfig | None = None, *, device: str = "cpu",
                     dtype: torch.dtype = torch.float32, seed: int = 0) -> Runner:
    """A runner over a fresh :class:`ReferenceDecoder` (seeded random weights) on ``device``."""
    cfg = config or ReferenceConfig()
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = ReferenceDecoder(cfg).to(device=dev, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    run = _train_step(model, lambda ids, starts: model(ids, starts), cfg.vocab, dev, gen)
    run.model_config = cfg.describe()  # type: ignore[attr-defined]
    return run


def _hf_varlen_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, scaling: float | None = None,
                         dropout: float = 0.0, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: per-sequence causal SDPA, split at ``cu_seq_lens_q``;
    a ``seqpart_attention`` keyword (an :data:`Attention` taking ``scale=``, passed to the
    model's forward) replaces it, as context parallelism does."""
    starts = kwargs.get("cu_seq_lens_q")
    if starts is None:
        raise MeasureError("seqpart_varlen attention needs cu_seq_lens_q (the packed sequences' starts)")
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:  # grouped-query attention: repeat K/V heads to the query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    bounds = starts.tolist() if isinstance(starts, torch.Tensor) else list(starts)
    attend = kwargs.get("seqpart_attention") or varlen_attention
    out = attend(query, key, value, bounds, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """A config.json as a dict, with errors that name the file."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"hf_config={str(p)!r} does not exist: pass a model's config.json") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"hf_config={str(p)!r} is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"hf_config={str(p)!r} must hold a JSON object (a model's config.json)")
    return raw


def hf_runner(config: dict[str, Any], *, device: str = "cpu", dtype: torch.dtype = torch.float32,
              seed: int = 0) -> Runner:
    """A runner over a transformers causal LM built from ``config`` with random weights (nothing
    is downloaded). Attention goes through :data:`HF_ATTENTION`, registered in transformers'
    public ``AttentionInterface``: with no mask function registered for it, transformers builds
    no mask, and the function splits at the sequence starts, so the cost is ``sum l^2``."""
    try:
        import transformers
        from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM
    except ImportError as exc:
        raise ImportError("hf_config needs transformers: pip install 'seqpart[measure]'") from exc
    dev = resolve_device(device)
    AttentionInterface.register(HF_ATTENTION, _hf_varlen_attention)
    cfg_dict = dict(config)
    model_type = cfg_dict.pop("model_type", None)
    if model_type is None:
        raise ValueError("hf_config lacks model_type (e.g. \"llama\"): pass a model's config.json")
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    cfg._attn_implementation = HF_ATTENTION
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=HF_ATTENTION, dtype=dtype).to(dev)
    model.train()
    gen = torch.Generator().manual_seed(seed)

    def logits(ids: torch.Tensor, starts: list[int]) -> torch.Tensor:
        pos = torch.cat([torch.arange(e - s) for s, e in zip(starts[:-1], starts[1:], strict=True)])
        cu = torch.tensor(starts, dtype=torch.int32, device=dev)
        out = model(input_ids=ids, position_ids=pos.unsqueeze(0).to(dev), cu_seq_lens_q=cu,
                    cu_seq_lens_k=cu,
                    max_length_q=max(b - a for a, b in zip(starts, starts[1:], strict=False)),
                    use_cache=False)
        return out.logits

    run = _train_step(model, logits, int(cfg.vocab_size), dev, gen)
    run.transformers_version = transformers.__version__  # type: ignore[attr-defined]
    return run


def dtype_of(name: str) -> torch.dtype:
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype={name!r} is not supported: use one of {', '.join(table)}")
    return table[name]


def parameter_count(run: Runner) -> int:
    model = getattr(run, "model", None)
    return 0 if model is None else sum(p.numel() for p in model.parameters())

