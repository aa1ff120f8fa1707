"""Chunking along the sequence, with and without checkpointing: same numbers, different saved memory."""
import pytest
import torch

from helpers.chunking import ActivationMemory, ChunkedFFN, activation_memory, chunked_apply, peak_saved_bytes
from helpers.ffn import FFN


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("n_chunks", [1, 3, 7, 19])
def test_outputs_and_gradients_equal_the_plain_ffn(n_chunks, checkpoint):
    torch.manual_seed(1)
    ffn = FFN.from_variant("swiglu", 24)
    x = torch.randn(2, 19, 24, requires_grad=True)
    g = torch.randn(2, 19, 24)
    (ffn(x) * g).sum().backward()
    ref_out = ffn(x).detach()
    ref = [x.grad.clone()] + [p.grad.clone() for p in ffn.parameters()]
    x.grad = None
    ffn.zero_grad()
    out = chunked_apply(ffn, x, n_chunks, checkpoint=checkpoint)
    (out * g).sum().backward()
    got = [x.grad] + [p.grad for p in ffn.parameters()]
    assert torch.allclose(out, ref_out, atol=1e-6, rtol=0)
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-6)


def test_chunking_alone_saves_as_much_as_plain_and_checkpointing_saves_less():
    torch.manual_seed(0)
    ffn = FFN.from_variant("gelu", 32)
    x = torch.randn(1, 512, 32)
    plain = activation_memory(ffn, x)
    chunked = activation_memory(ffn, x, 8)
    ckpt = activation_memory(ffn, x, 8, checkpoint=True)
    assert plain == chunked == ActivationMemory(512 * (32 + 2 * 128) * 4, 0)
    assert ckpt.kept_bytes == 512 * 32 * 4                      # only the inputs stay
    assert ckpt.recompute_bytes == 64 * 2 * 128 * 4              # one chunk's two hidden tensors
    assert ckpt.peak_bytes == peak_saved_bytes(512, 32, 128, "gelu", 8)


@pytest.mark.parametrize("variant", ["relu", "gelu", "swiglu"])
@pytest.mark.parametrize("n_tokens, n_chunks", [(100, 7), (64, 64), (50, 1)])
def test_peak_formula_matches_measurement(variant, n_tokens, n_chunks):
    torch.manual_seed(0)
    ffn = FFN.from_variant(variant, 8, 20)
    x = torch.randn(n_tokens, 8)
    for checkpoint in (False, True):
        measured = activation_memory(ffn, x, n_chunks, checkpoint=checkpoint).peak_bytes
        assert measured == peak_saved_bytes(n_tokens, 8, 20, variant, n_chunks, checkpoint=checkpoint)


def test_target_at_4096_tokens_is_a_quarter_or_less():
    assert peak_saved_bytes(4096, 64, 256, "gelu", 8) <= peak_saved_bytes(4096, 64, 256, "gelu", 1,
                                                                           checkpoint=False) / 4


def test_chunked_ffn_module_wraps_without_copying():
    ffn = FFN(8)
    wrapped = ChunkedFFN(ffn, 4)
    assert list(wrapped.parameters()) == list(ffn.parameters())
    x = torch.randn(3, 10, 8)
    assert torch.allclose(wrapped(x), ffn(x), atol=1e-6)
    assert torch.allclose(ChunkedFFN(ffn, 50)(x), ffn(x), atol=1e-6)     # more chunks than tokens: one per token
    assert "n_chunks=4" in repr(wrapped)


def test_other_token_axis():
    ffn = FFN(4)
    x = torch.randn(9, 2, 4)                                   # (T, B, d)
    assert torch.allclose(chunked_apply(ffn, x, 3, dim=0), ffn(x), atol=1e-6)


def test_bad_input_is_explained():
    ffn = FFN(4)
    x = torch.randn(5, 4)
    with pytest.raises(ValueError, match="n_chunks must be at most the sequence length 5"):
        chunked_apply(ffn, x, 6)
    with pytest.raises(ValueError, match="n_chunks must be a positive int, got 0"):
        chunked_apply(ffn, x, 0)
    with pytest.raises(TypeError, match="x must have a floating-point dtype"):
        chunked_apply(ffn, torch.ones(5, 4, dtype=torch.long), 2)
    with pytest.raises(TypeError, match="checkpoint must be a bool"):
        chunked_apply(ffn, x, 2, checkpoint="yes")
    with pytest.raises(ValueError, match="dim must index one of x's 2 dimensions, got 2"):
        chunked_apply(ffn, x, 2, dim=2)
    with pytest.raises(TypeError, match="ffn must be an nn.Module"):
        ChunkedFFN(lambda t: t, 2)
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        activation_memory(lambda t: t, x)
    with pytest.raises(ValueError, match="variant must be one of"):
        peak_saved_bytes(10, 4, 16, "tanh")
    with pytest.raises(ValueError, match=r"n_chunks must be an int in \[1, 10\], got 11"):
        peak_saved_bytes(10, 4, 16, "gelu", 11)
