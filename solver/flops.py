"""Forward FLOPs of one sequence as ``a*l + b*l^2``: the cost coefficients from a model's shape.

The accounting is the usual one for decoder-only transformers (the one Megatron-LM's and slime's
FLOPs counters use; written here from the formula, not their code). A matrix multiply of
``(x, y) @ (y, z)`` costs ``2*x*y*z`` FLOPs (a multiply and an add). Per layer and per token,
with hidden size ``h``, ``q = heads * head_dim`` and ``kv = kv_heads * head_dim``:

* attention projections: ``2*h*q`` (Q) + ``2 * 2*h*kv`` (K and V) + ``2*q*h`` (output);
* MLP, dense: ``2 * 3*h*f`` with a gated MLP (SwiGLU: gate, up, down) or ``2 * 2*h*f`` without;
* MLP, mixture of experts: ``top_k`` routed experts and the shared experts, each like a dense
  MLP of its own FFN size, plus the router ``2*h*num_experts``;
* and once per token, the output layer (logits): ``2*h*vocab``.

Per layer and per (query, key) pair, attention scores ``Q K^T`` and their product with ``V``
cost ``2*q + 2*q = 4*q``. A causal sequence of length ``l`` has ``l*(l+1)/2`` such pairs, so the
quadratic term is ``b = 2*q*layers`` and it adds ``2*q*layers`` to ``a``; without the causal mask
there are ``l^2`` pairs and ``b = 4*q*layers``.

Everything is an exact Python int. Backward costs about twice the forward for every term, so the
ratio ``a/b``, which is all the balancing sees, is the same for a training step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HF_NAMES",
    "ModelShape",
    "cost_coefficients",
    "forward_flops",
    "forward_flops_coefficients",
    "model_shape",
    "shape_from_hf_config",
]

_GATED_ACTIVATIONS = {"silu", "swish", "swiglu", "geglu", "gelu_glu", "reglu"}


def _positive(value: Any, name: str, *, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise ValueError(f"{name} must be an int >= {0 if zero else 1}, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelShape:
    """The dimensions the FLOPs depend on (Hugging Face names in brackets).

    ``num_kv_heads`` defaults to ``num_heads`` (multi-head attention), ``head_dim`` to
    ``hidden_size // num_heads``, ``ffn_size`` to ``4 * hidden_size``. With ``moe_top_k > 0``
    the MLP of ``num_layers - dense_layers`` layers is a mixture of experts: ``moe_top_k``
    routed experts of ``moe_ffn_size`` plus shared experts of ``shared_ffn_size`` in all, and a
    router over ``num_experts``.
    """

    hidden_size: int  # hidden_size
    num_layers: int  # num_hidden_layers
    num_heads: int  # num_attention_heads
    num_kv_heads: int | None = None  # num_key_value_heads
    head_dim: int | None = None  # head_dim
    ffn_size: int | None = None  # intermediate_size
    vocab_size: int = 0  # vocab_size (0: leave the output layer out)
    gated_mlp: bool = True  # SwiGLU-style gate (hidden_act silu)
    moe_top_k: int = 0  # num_experts_per_tok
    moe_ffn_size: int | None = None  # moe_intermediate_size
    num_experts: int = 0  # num_experts / num_local_experts / n_routed_experts
    shared_ffn_size: int = 0  # shared_expert_intermediate_size, or n_shared_experts * moe size
    dense_layers: int = 0  # first_k_dense_replace: leading layers with a dense MLP
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads"):
            _positive(getattr(self, name), name)
        for name in ("num_kv_heads", "head_dim", "ffn_size", "moe_ffn_size"):
            if getattr(self, name) is not None:
                _positive(getattr(self, name), name)
        for name in ("vocab_size", "moe_top_k", "num_experts", "shared_ffn_size", "dense_layers"):
            _positive(getattr(self, name), name, zero=True)
        if self.moe_top_k and self.moe_ffn_size is None:
            raise ValueError("moe_top_k > 0 needs moe_ffn_size (the routed experts' FFN size)")
        if self.dense_layers > self.num_layers:
            raise ValueError(f"dense_layers={self.dense_layers} exceeds num_layers={self.num_layers}")


#: Hugging Face ``config.json`` names -> :class:`ModelShape` fields, so that
#: ``Cost.from_model(**config)``-style calls work with the names every HF config uses.
HF_NAMES = {
    "num_hidden_layers": "num_layers", "n_layer": "num_layers",
    "num_attention_heads": "num_heads", "n_head": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "intermediate_size": "ffn_size", "n_inner": "ffn_size",
    "num_experts_per_tok": "moe_top_k",
    "moe_intermediate_size": "moe_ffn_size",
    "num_local_experts": "num_experts", "n_routed_experts": "num_experts",
    "shared_expert_intermediate_size": "shared_ffn_size",
    "first_k_dense_replace": "dense_layers",
    "n_embd": "hidden_size",
}


def model_shape(**names: Any) -> ModelShape:
    """A :class:`ModelShape` from keyword sizes under either its own names or the Hugging Face
    ones (:data:`HF_NAMES`, e.g. ``intermediate_size``; ``hidden_act`` sets ``gated_mlp``).
    None values are left out; the same size under two names is refused, as is an unknown name
    (a typo would otherwise silently fall back to a default size)."""
    fields = {f.name for f in dataclasses.fields(ModelShape)}
    given: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, value in names.items():
        if value is None:
            continue
        if name == "hidden_act":
            target, value = "gated_mlp", str(value).lower() in _GATED_ACTIVATIONS
        else:
            target = HF_NAMES.get(name, name)
        if target not in fields:
            raise TypeError(f"unknown model size {name!r}: use ModelShape's names "
                            f"({', '.join(sorted(fields))}) or Hugging Face's "
                            f"({', '.join(sorted(HF_NAMES))}, hidden_act)")
        if target in given:
            raise TypeError(f"{source[target]}= and {name}= both give {target}: pass one")
        given[target], source[target] = value, name
    missing = [n for n in ("hidden_size", "num_layers", "num_heads") if n not in given]
    if missing:
        raise TypeError(f"model_shape needs {', '.join(missing)} (Hugging Face: hidden_size, "
                        "num_hidden_layers, num_attention_heads)")
    return ModelShape(**given)


def forward_flops_coefficients(shape: ModelShape) -> tuple[int, int]:
    """``(a, b)``: a sequence of length ``l`` costs ``a*l + b*l^2`` forward FLOPs (exact ints)."""
    h, layers = shape.hidden_size, shape.num_layers
    head_dim = shape.head_dim or h // shape.num_heads
    q = shape.num_heads * head_dim
    kv = (shape.num_kv_heads or shape.num_heads) * head_dim
    mats = 3 if shape.gated_mlp else 2

    def mlp(ffn: int) -> int:
        return 2 * mats * h * ffn

    attention = 2 * h * q + 2 * 2 * h * kv + 2 * q * h
    dense = mlp(shape.ffn_size if shape.ffn_size is not None else 4 * h)
    if shape.moe_top_k:
        assert shape.moe_ffn_size is not None
        moe = shape.moe_top_k * mlp(shape.moe_ffn_size) + 2 * h * shape.num_experts
        if shape.shared_ffn_size:
            moe += mlp(shape.shared_ffn_size)
        mlp_total = shape.dense_layers * dense + (layers - shape.dense_layers) * moe
    else:
        mlp_total = layers * dense
    pair = 4 * q * layers  # scores and their product with V, per (query, key) pair
    if shape.causal:  # l*(l+1)/2 pairs
        a_pairs, b = pair // 2, pair // 2
    else:
        a_pairs, b = 0, pair
    a = layers * attention + mlp_total + 2 * h * shape.vocab_size + a_pairs
    return a, b


def forward_flops(shape: ModelShape, length: int) -> int:
    """Forward FLOPs of one sequence of ``length`` tokens."""
    a, b = forward_flops_coefficients(shape)
    return a * length + b * length * length


def cost_coefficients(shape: ModelShape, unit: int | None = None) -> tuple[int, int]:
    """Integer ``(linear, quadratic)`` for :class:`~seqpart.solver.problem.Cost`.

    ``unit=None`` divides by the quadratic coefficient, so ``quadratic == 1`` and ``linear`` is
    ``round(a / b)``: the same convention as ``Cost.attention`` (only the ratio matters to the
    balance, and small coefficients keep every sum far from int64). An int ``unit`` gives FLOPs
    divided by ``unit``, rounded to the nearest int (``unit=1`` for raw FLOPs, exact; the
    planners handle their large sums exactly). A unit that would round a non-zero coefficient
    to 0 is refused: dropping the attention term silently changes what is balanced. The
    quadratic coefficient is per token pair, far smaller than the linear one (``2*q*layers``,
    about 2.6e5 for a 4096-wide, 32-layer model), so ``unit=10**9`` (GFLOPs) is refused for
    such a model; the message names the largest unit that keeps both terms.
    """
    a, b = forward_flops_coefficients(shape)
    if unit is None:
        if b == 0:
            return a, 0
        return max(1, (2 * a + b) // (2 * b)), 1
    unit = _positive(unit, "unit")
    linear, quadratic = (2 * a + unit) // (2 * unit), (2 * b + unit) // (2 * unit)
    dropped = [(name, v) for name, v, r in (("linear", a, linear), ("quadratic", b, quadratic))
               if v and not r]
    if dropped:
        # round(v / unit) >= 1 exactly when unit <= 2*v.
        largest = 2 * min(v for v in (a, b) if v)
        raise ValueError(
            f"unit={unit} rounds the {dropped[0][0]} coefficient ({dropped[0][1]} FLOPs) to 0, "
            f"dropping that term from the cost: use unit <= {largest}, or unit=None (the "
            "ratio, which is all the balance uses)")
    return linear, quadratic


def _first(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def shape_from_hf_config(config: Mapping[str, Any], *, causal: bool = True) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face style ``config.json`` dict (Llama, Mistral,
    Qwen2/3 and their MoE variants, Mixtral, DeepSeek-V2/V3 routed experts, GPT-2 names).

    A nested ``text_config`` (multimodal configs) is used when present. Multi-head latent
    attention (DeepSeek's ``kv_lora_rank``) is counted as ordinary attention with its head
    sizes, an approximation.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    if isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "num_attention_heads", "n_head", "num_heads")
    missing = [name for name, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                                    ("num_attention_heads", heads)) if v is None]
    if missing:
        raise ValueError(f"config lacks {', '.join(missing)}: pass a decoder's config.json")
    head_dim = _first(config, "head_dim")
    if head_dim is None and config.get("qk_nope_head_dim") is not None:  # DeepSeek MLA
        head_dim = config["qk_nope_head_dim"] + config.get("qk_rope_head_dim", 0)
    act = str(_first(config, "hidden_act", "activation_function", default="silu")).lower()
    top_k = _first(config, "num_experts_per_tok", "moe_topk", default=0) or 0
    experts = _first(config, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0
    moe_ffn = _first(config, "moe_intermediate_size")
    ffn = _first(config, "intermediate_size", "n_inner", "ffn_dim")
    if top_k and moe_ffn is None:
        moe_ffn = ffn  # Mixtral: the experts use intermediate_size
    shared = config.get("shared_expert_intermediate_size") or 0
    if not shared and config.get("n_shared_experts") and moe_ffn:
        shared = config["n_shared_experts"] * moe_ffn
    return ModelShape(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=_first(config, "num_key_value_heads"),
        head_dim=head_dim,
        ffn_size=ffn,
        vocab_size=config.get("vocab_size") or 0,
        gated_mlp=act in _GATED_ACTIVATIONS,
        moe_top_k=top_k,
        moe_ffn_size=moe_ffn if top_k else None,
        num_experts=experts if top_k else 0,
        shared_ffn_size=shared if top_k else 0,
        dense_layers=(config.get("first_k_dense_replace") or 0) if top_k else 0,
        causal=causal,
    )
