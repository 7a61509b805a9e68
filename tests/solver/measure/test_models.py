"""The built-in models: attention never crosses a packed micro-batch's sequences, and a tiny
reference calibration runs end to end on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from seqpart.solver.measure import calibrate, make_design  # noqa: E402
from seqpart.solver.measure.models import (  # noqa: E402
    ReferenceConfig,
    ReferenceDecoder,
    _hf_varlen_attention,
    varlen_attention,
)

TINY = ReferenceConfig(hidden=32, layers=1, heads=2, ffn=64, vocab=64)


def test_reference_packed_equals_separate_sequences() -> None:
    torch.manual_seed(0)
    model = ReferenceDecoder(TINY)
    a, b = torch.randint(0, 64, (1, 7)), torch.randint(0, 64, (1, 5))
    packed = model(torch.cat([a, b], dim=1), [0, 7, 12])
    assert torch.allclose(packed[:, :7], model(a, [0, 7]), atol=1e-5)
    assert torch.allclose(packed[:, 7:], model(b, [0, 5]), atol=1e-5)


def test_reference_decoder_runs_the_attention_it_is_given() -> None:
    torch.manual_seed(0)
    model = ReferenceDecoder(TINY)
    ids = torch.randint(0, 64, (1, 9))
    calls = []

    def recording(q, k, v, starts):  # type: ignore[no-untyped-def]
        calls.append(list(starts))
        return varlen_attention(q, k, v, starts)

    out = model(ids, [0, 4, 9], recording)
    assert calls == [[0, 4, 9]] * TINY.layers
    assert torch.equal(out, model(ids, [0, 4, 9]))


def test_varlen_attention_matches_a_block_diagonal_mask() -> None:
    q, k, v = (torch.randn(1, 2, 9, 4) for _ in range(3))
    mask = torch.zeros(9, 9, dtype=torch.bool)
    for s, e in ((0, 4), (4, 9)):
        mask[s:e, s:e] = torch.tril(torch.ones(e - s, e - s, dtype=torch.bool))
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(varlen_attention(q, k, v, [0, 4, 9]), dense, atol=1e-5)


def test_varlen_attention_gradients_match_the_masked_dense_ones() -> None:
    """The per-sequence split must pass gradients back exactly as the masked dense attention."""
    bounds = [0, 1, 4, 9, 10]
    mask = torch.zeros(10, 10, dtype=torch.bool)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        mask[s:e, s:e] = torch.tril(torch.ones(e - s, e - s, dtype=torch.bool))
    leaves = [torch.randn(1, 2, 10, 4, requires_grad=True) for _ in range(3)]
    grads = []
    for attend in (lambda q, k, v: varlen_attention(q, k, v, bounds),
                   lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)):
        xs = [x.detach().clone().requires_grad_(True) for x in leaves]
        (attend(*xs) * torch.arange(4.0)).sum().backward()
        grads.append([x.grad for x in xs])
    for split, dense in zip(*grads, strict=True):
        assert torch.allclose(split, dense, atol=1e-5)


def test_varlen_attention_refuses_starts_that_miss_tokens() -> None:
    q = torch.randn(1, 2, 9, 4)
    with pytest.raises(ValueError, match="starts must run from 0 to the 9"):
        varlen_attention(q, q, q, [0, 4, 8])


def test_hf_attention_function_splits_at_the_starts() -> None:
    q, k, v = (torch.randn(1, 2, 9, 4) for _ in range(3))
    out, _ = _hf_varlen_attention(torch.nn.Module(), q, k, v, None, cu_seq_lens_q=torch.tensor([0, 4, 9]))
    assert torch.allclose(out, varlen_attention(q, k, v, [0, 4, 9]).transpose(1, 2), atol=1e-6)


def test_hf_llama_packed_equals_separate_sequences() -> None:
    pytest.importorskip("transformers")
    from seqpart.solver.measure.models import hf_runner

    cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 64}
    run = hf_runner(cfg)
    model = run.model
    ids = torch.randint(0, 64, (1, 12))

    def logits(x: torch.Tensor, starts: list[int]) -> torch.Tensor:
        pos = torch.cat([torch.arange(e - s) for s, e in zip(starts, starts[1:], strict=False)])[None]
        cu = torch.tensor(starts, dtype=torch.int32)
        out = model(input_ids=x, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, use_cache=False)
        return out.logits

    packed = logits(ids, [0, 7, 12])
    assert torch.allclose(packed[:, :7], logits(ids[:, :7], [0, 7]), atol=1e-5)
    assert torch.allclose(packed[:, 7:], logits(ids[:, 7:], [0, 5]), atol=1e-5)
    run([3, 5])  # forward + backward through the runner
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_tiny_reference_calibration_on_cpu() -> None:
    # micro-batches long enough that tokens, not the fixed cost, dominate even on a loaded CPU
    design = make_design(max_tokens=2048, max_count=4, held_out=3, min_tokens=512)
    small = ReferenceConfig(hidden=64, layers=1, heads=2, ffn=128, vocab=64)
    p = calibrate(reference=small, design=design, repeats=1, warmup=1, progress=False, clock="cpu",
                  min_seconds=0.1)
    assert p.device == "cpu" and p.model["kind"] == "reference" and p.model["hidden_size"] == 64
    assert p.linear_s > 0 and p.fit_error["held_out"]["count"] == 3
    assert len(p.measurements) == len(design.all) and p.torch_version == torch.__version__
    assert p.memory["measured"] is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (peak memory per micro-batch)")
def test_cuda_calibration_records_memory() -> None:
    from seqpart.solver.measure.calibrate import largest_cap

    design = make_design(max_tokens=512, max_count=4, held_out=2)
    p = calibrate(reference=TINY, device="cuda", design=design, repeats=1, progress=False)
    assert p.memory["measured"] is True and p.memory["max_peak_bytes"] > 0
    assert largest_cap(p.memory, p.memory["max_peak_bytes"] * 4) >= 512

