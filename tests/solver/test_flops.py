"""Forward FLOPs per sequence, and the Cost built from a model's shape or a HF config."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.solver import Cost
from seqpart.solver.flops import (
    ModelShape,
    cost_coefficients,
    forward_flops,
    forward_flops_coefficients,
    shape_from_hf_config,
)
from seqpart.solver.step import plan_step

LLAMA3_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "hidden_act": "silu",
}


def matmul_count(shape: ModelShape, length: int) -> int:
    """Forward FLOPs of one sequence, counted matrix multiply by matrix multiply (2*x*y*z for
    an (x, y) @ (y, z) product), independently of the closed form."""
    h, layers = shape.hidden_size, shape.num_layers
    hd = shape.head_dim or h // shape.num_heads
    q, kv = shape.num_heads * hd, (shape.num_kv_heads or shape.num_heads) * hd
    ffn = shape.ffn_size or 4 * h

    def mm(x: int, y: int, z: int) -> int:
        return 2 * x * y * z

    def mlp(f: int) -> int:
        return mm(length, h, f) * (3 if shape.gated_mlp else 2)

    total = 0
    for layer in range(layers):
        total += mm(length, h, q) + 2 * mm(length, h, kv) + mm(length, q, h)
        for pos in range(length):  # query pos attends to pos+1 keys (causal) or all
            keys = pos + 1 if shape.causal else length
            for _ in range(shape.num_heads):
                total += mm(1, hd, keys) + mm(1, keys, hd)  # scores, then weights @ V
        if shape.moe_top_k and layer >= shape.dense_layers:
            total += shape.moe_top_k * mlp(shape.moe_ffn_size or 0)
            total += mm(length, h, shape.num_experts)  # router
            if shape.shared_ffn_size:
                total += mlp(shape.shared_ffn_size)
        else:
            total += mlp(ffn)
    return total + mm(length, h, shape.vocab_size)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 6),  # heads
    st.sampled_from([1, 2]),  # kv groups divisor
    st.integers(1, 3),  # head dim
    st.integers(1, 3),  # layers
    st.integers(0, 9),  # ffn
    st.integers(0, 7),  # vocab
    st.booleans(),  # gated
    st.booleans(),  # causal
    st.integers(0, 2),  # moe top-k
    st.integers(1, 9),  # length
)
def test_closed_form_matches_a_matmul_count(
    heads: int, div: int, hd: int, layers: int, ffn: int, vocab: int, gated: bool, causal: bool,
    top_k: int, length: int,
) -> None:
    kv_heads = heads // div if heads % div == 0 else heads
    shape = ModelShape(
        hidden_size=heads * hd + 1, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=hd, ffn_size=ffn or None, vocab_size=vocab, gated_mlp=gated, causal=causal,
        moe_top_k=top_k, moe_ffn_size=3 if top_k else None, num_experts=4 if top_k else 0,
        shared_ffn_size=2 if top_k else 0, dense_layers=1 if top_k and layers > 1 else 0,
    )
    assert forward_flops(shape, length) == matmul_count(shape, length)


def test_small_model_by_hand() -> None:
    shape = ModelShape(hidden_size=4, num_layers=1, num_heads=2, ffn_size=8, vocab_size=10,
                       gated_mlp=False, causal=False)
    # projections 2*4*4 (Q) + 2*2*4*4 (K, V) + 2*4*4 (out) = 128; MLP 2*2*4*8 = 128;
    # logits 2*4*10 = 80; per pair 4*q = 16, all l^2 pairs.
    assert forward_flops_coefficients(shape) == (336, 16)
    causal = ModelShape(hidden_size=4, num_layers=1, num_heads=2, ffn_size=8, vocab_size=10,
                        gated_mlp=False)
    assert forward_flops_coefficients(causal) == (336 + 8, 8)  # l(l+1)/2 pairs


def test_llama3_8b_is_about_15_gflops_per_token() -> None:
    shape = shape_from_hf_config(LLAMA3_8B)
    a, b = forward_flops_coefficients(shape)
    assert 14.5e9 < a < 15.5e9  # ~2 x 7.5B parameters
    assert b == 2 * 4096 * 32
    cost = Cost.from_hf_config(LLAMA3_8B)
    assert cost.quadratic == 1 and cost.linear == round(a / b)
    assert Cost.from_model(4096, 32, 32, num_kv_heads=8, ffn_size=14336, vocab_size=128256) == cost
    assert Cost.from_hf_config(LLAMA3_8B, unit=1) == Cost(a, b)


@pytest.mark.parametrize("unit", [10**9, 10**6, 2 * 4096 * 32 * 2 + 1])
def test_a_unit_that_drops_the_attention_term_is_refused(unit: int) -> None:
    # GFLOPs used to give Cost(15, 0): the l^2 term silently gone, the balance on tokens.
    with pytest.raises(ValueError, match=r"rounds the quadratic coefficient \(262144 FLOPs\) to "
                                         r"0.*use unit <= 524288"):
        Cost.from_hf_config(LLAMA3_8B, unit=unit)
    with pytest.raises(ValueError, match="quadratic"):
        Cost.from_model(4096, 32, 32, num_kv_heads=8, ffn_size=14336, unit=unit)


def test_the_largest_unit_named_keeps_both_terms() -> None:
    a, b = forward_flops_coefficients(shape_from_hf_config(LLAMA3_8B))
    cost = Cost.from_hf_config(LLAMA3_8B, unit=2 * b)
    assert cost.quadratic == 1 and cost.linear == (2 * a + 2 * b) // (4 * b)


def test_from_model_takes_hugging_face_names() -> None:
    hf = {k: LLAMA3_8B[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "num_key_value_heads", "intermediate_size", "vocab_size",
                                   "hidden_act")}
    assert Cost.from_model(**hf) == Cost.from_hf_config(LLAMA3_8B)
    assert Cost.from_model(4096, 32, 32, num_key_value_heads=8, intermediate_size=14336,
                           vocab_size=128256) == Cost.from_hf_config(LLAMA3_8B)
    with pytest.raises(TypeError, match="ffn_size= and intermediate_size= both"):
        Cost.from_model(4096, 32, 32, ffn_size=1, intermediate_size=2)
    with pytest.raises(TypeError, match="unknown model size 'intermediate_sise'"):
        Cost.from_model(4096, 32, 32, intermediate_sise=14336)
    with pytest.raises(TypeError, match="num_hidden_layers"):
        Cost.from_model(hidden_size=4096, num_attention_heads=32)


def test_gqa_and_moe_count_what_runs() -> None:
    mha = forward_flops_coefficients(ModelShape(1024, 2, 16, ffn_size=4096))
    gqa = forward_flops_coefficients(ModelShape(1024, 2, 16, num_kv_heads=4, ffn_size=4096))
    assert gqa[0] < mha[0] and gqa[1] == mha[1]
    # MoE: only the top-k experts' FFN runs per token, whatever the number of experts.
    few = ModelShape(1024, 2, 16, moe_top_k=2, moe_ffn_size=512, num_experts=8)
    many = ModelShape(1024, 2, 16, moe_top_k=2, moe_ffn_size=512, num_experts=64)
    a_few, a_many = forward_flops_coefficients(few)[0], forward_flops_coefficients(many)[0]
    assert a_many - a_few == 2 * 2 * 1024 * (64 - 8)  # only the router grows


def test_hf_config_variants() -> None:
    gpt2 = {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
            "activation_function": "gelu_new"}
    shape = shape_from_hf_config(gpt2)
    assert not shape.gated_mlp and shape.ffn_size is None  # 4*h by default
    nested = {"model_type": "llava", "text_config": LLAMA3_8B}
    assert shape_from_hf_config(nested) == shape_from_hf_config(LLAMA3_8B)
    mixtral = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8,
               "num_experts_per_tok": 2, "vocab_size": 32000}
    s = shape_from_hf_config(mixtral)
    assert (s.moe_top_k, s.moe_ffn_size, s.num_experts) == (2, 14336, 8)
    qwen3_moe = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                 "vocab_size": 151936}
    s = shape_from_hf_config(qwen3_moe)
    assert s.head_dim == 128 and s.moe_ffn_size == 768
    deepseek = {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
                "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "vocab_size": 129280}
    s = shape_from_hf_config(deepseek)
    assert (s.dense_layers, s.shared_ffn_size, s.head_dim) == (3, 2048, 192)


def test_bad_shapes_and_configs() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        ModelShape(0, 1, 1)
    with pytest.raises(ValueError, match="moe_ffn_size"):
        ModelShape(8, 1, 1, moe_top_k=2)
    with pytest.raises(ValueError, match="dense_layers"):
        ModelShape(8, 1, 1, moe_top_k=1, moe_ffn_size=4, dense_layers=2)
    with pytest.raises(ValueError, match="num_attention_heads"):
        shape_from_hf_config({"hidden_size": 8, "num_hidden_layers": 2})
    with pytest.raises(TypeError, match="dict"):
        shape_from_hf_config("config.json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit"):
        cost_coefficients(ModelShape(8, 1, 1), unit=0)
    with pytest.raises(ValueError, match="use unit <="):
        cost_coefficients(ModelShape(8, 1, 1), unit=10**12)


def test_model_cost_plans_a_step() -> None:
    cost = Cost.from_hf_config(LLAMA3_8B)
    lengths = [4000, 300, 2500, 800, 1200, 50, 3900, 700]
    plan = plan_step(lengths, 2, 4096, pp=2, cost=cost, overhead=cost.linear * 512)
    assert plan.cost == cost
    assert sorted(i for mb in plan.micro_batches for i in mb) == list(range(len(lengths)))
