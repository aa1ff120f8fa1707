import pytest
import torch
import torch.nn.functional as F

from helpers.costs import measure_saved_tensors
from helpers.facts import load_facts, make_dataset
from helpers.ffn import FFN, VARIANTS
from helpers.gating import (SAVED_D_FF_TENSORS, SHAZEER_2020_65K, SHAZEER_2020_524K, answer_loss, compare_variants,
                            gate_gradients, rank_correlation, saved_per_token, torch_threads)
from helpers.transformer import GPTConfig, TinyGPT


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("bias", [True, False])
def test_saved_per_token_matches_the_hooks(variant, bias):
    d, d_ff, tokens = 8, 20, 15
    ffn = FFN.from_variant(variant, d, d_ff, bias=bias)
    x = torch.randn(3, 5, d, requires_grad=True)
    saved = measure_saved_tensors(lambda: ffn(x), exclude=ffn)
    assert saved.per_token(tokens) == saved_per_token(variant, d, d_ff)


def test_saved_table_covers_every_variant():
    assert set(SAVED_D_FF_TENSORS) == set(VARIANTS)
    assert saved_per_token("relu", 4, 16) == 20 and saved_per_token("swiglu", 4, 16) == 68


@pytest.mark.parametrize("activation", ["silu", "sigmoid", "identity", "relu", "gelu"])
def test_gate_gradients_match_the_closed_form(activation):
    torch.manual_seed(0)
    a, b, g = (torch.randn(4, 7, dtype=torch.float64) for _ in range(3))
    grad_a, grad_b = gate_gradients(a, b, g, activation)
    phi = {"silu": F.silu, "sigmoid": torch.sigmoid, "identity": lambda t: t, "relu": F.relu, "gelu": F.gelu}[activation]
    s = torch.sigmoid(a)
    phi_prime = {"silu": s * (1 + a * (1 - s)), "sigmoid": s * (1 - s), "identity": torch.ones_like(a),
                 "relu": (a > 0).double(),
                 "gelu": 0.5 * (1 + torch.erf(a / 2 ** 0.5)) + a * torch.exp(-a * a / 2) / (2 * torch.pi) ** 0.5}
    torch.testing.assert_close(grad_b, g * phi(a))
    torch.testing.assert_close(grad_a, g * b * phi_prime[activation])


def test_gate_gradients_agree_with_a_real_ffn():
    torch.manual_seed(1)
    ffn = FFN.from_variant("swiglu", 6, 10, bias=True).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    a = ffn.w1(x).detach().requires_grad_()
    b = ffn.w3(x).detach().requires_grad_()
    h = (F.silu(a) * b).detach().requires_grad_()
    ffn.w2(h).pow(2).sum().backward()
    y = ffn.w2(F.silu(a) * b).pow(2).sum()
    y.backward()
    grad_a, grad_b = gate_gradients(a, b, h.grad)
    torch.testing.assert_close(grad_a, a.grad)
    torch.testing.assert_close(grad_b, b.grad)


def test_gate_gradients_bad_input():
    t = torch.zeros(3)
    with pytest.raises(ValueError, match=r"a, b and grad_h must have the same shape, got \(3,\), \(4,\)"):
        gate_gradients(t, torch.zeros(4), t)
    with pytest.raises(ValueError, match=r"activation must be one of .*got 'tanh'"):
        gate_gradients(t, t, t, "tanh")
    with pytest.raises(TypeError, match="b must have a floating-point dtype"):
        gate_gradients(t, torch.zeros(3, dtype=torch.long), t)


def test_answer_loss_is_cross_entropy_at_the_answer():
    data = make_dataset(load_facts(relations=["continent"])[:20])
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(len(data.vocab), d_model=8, n_layers=1, n_heads=2, max_len=8))
    with torch.no_grad():
        logits = model(data.ids)
    expected = F.cross_entropy(logits[torch.arange(20), data.answer_pos], data.answer_id).item()
    assert answer_loss(model, data) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(TypeError, match="data must be a FactDataset, got list"):
        answer_loss(model, [])


def test_compare_variants_is_deterministic_and_matched():
    data = make_dataset(load_facts(relations=["continent"])[:24])
    kwargs = dict(d_model=12, n_heads=2, steps=6, eval_every=3, progress=False)
    one = compare_variants(data, ["relu", "swiglu"], [0, 1], **kwargs)
    two = compare_variants(data, ["relu", "swiglu"], [0, 1], **kwargs)
    assert one.eval_steps == [0, 3, 6]
    assert one.curves["relu"].shape == (2, 3)
    for v in ("relu", "swiglu"):
        assert torch.equal(one.curves[v], two.curves[v])
        assert one.final(v).shape == (2,)
    assert one.d_ff == {"relu": 48, "swiglu": 32}
    assert one.ffn_params["relu"] == one.ffn_params["swiglu"] == 1152      # 8·12² = 3·12·32, no biases
    assert one.curves["relu"][:, -1].mean() < one.curves["relu"][:, 0].mean()   # it learns
    assert torch.get_num_threads() >= 1


def test_compare_variants_bad_input():
    data = make_dataset(load_facts(relations=["continent"])[:8])
    with pytest.raises(ValueError, match=r"variants entry must be one of .*got 'swishglu'"):
        compare_variants(data, ["swishglu"], progress=False)
    with pytest.raises(ValueError, match="variants must be a non-empty list"):
        compare_variants(data, "relu", progress=False)
    with pytest.raises(ValueError, match="seeds must be a non-empty list"):
        compare_variants(data, ["relu"], seeds=[], progress=False)
    with pytest.raises(ValueError, match=r"eval_every must be an int in \[1, 10\], got 20"):
        compare_variants(data, ["relu"], steps=10, eval_every=20, progress=False)
    with pytest.raises(TypeError, match="data must be a FactDataset"):
        compare_variants(None, ["relu"], progress=False)


def test_torch_threads_restores():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        with torch_threads(0):
            pass


def test_rank_correlation():
    assert rank_correlation({"a": 1, "b": 2, "c": 3}, {"a": 10, "b": 20, "c": 30}) == pytest.approx(1.0)
    assert rank_correlation({"a": 1, "b": 2, "c": 3}, {"a": 3, "b": 2, "c": 1}) == pytest.approx(-1.0)
    assert rank_correlation(SHAZEER_2020_65K, SHAZEER_2020_65K) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="y lacks"):
        rank_correlation({"a": 1, "b": 2}, {"a": 1})


def test_shazeer_tables_cover_the_same_variants():
    assert set(SHAZEER_2020_65K) == set(SHAZEER_2020_524K) == set(VARIANTS) - {"gelu_tanh"}
    assert min(SHAZEER_2020_65K, key=SHAZEER_2020_65K.get) == "geglu"
    assert max(SHAZEER_2020_65K, key=SHAZEER_2020_65K.get) == "relu"
