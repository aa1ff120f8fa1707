import pytest
import torch
import torch.nn.functional as F

from helpers.ffn import FFN, VARIANTS, ffn_param_count, matched_gated_width

PHI = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
       "sigmoid": torch.sigmoid, "identity": lambda t: t}


def direct_formula(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
    """FFN(x) written out with explicit matrices (row-vector convention, x @ W.T)."""
    w1, b1 = ffn.w1.weight, ffn.w1.bias
    w2, b2 = ffn.w2.weight, ffn.w2.bias
    h = x @ w1.T + (b1 if b1 is not None else 0)
    m = PHI[ffn.activation_name](h)
    if ffn.gated:
        w3, b3 = ffn.w3.weight, ffn.w3.bias
        m = m * (x @ w3.T + (b3 if b3 is not None else 0))
    return m @ w2.T + (b2 if b2 is not None else 0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("bias", [True, False])
def test_every_variant_matches_its_formula(variant, bias):
    torch.manual_seed(0)
    ffn = FFN.from_variant(variant, 8, 12, bias=bias)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    ffn = ffn.double()
    torch.testing.assert_close(ffn(x), direct_formula(ffn, x))
    assert ffn.variant == variant
    gated = VARIANTS[variant][1]
    assert ffn.param_count() == ffn_param_count(8, 12, gated=gated, bias=bias)


def test_parameter_counts_from_the_course():
    assert ffn_param_count(4, 16) == 148 == 8 * 4**2 + 5 * 4
    assert ffn_param_count(16, 64) == 2128
    assert ffn_param_count(768, 3072) == 4_722_432
    assert FFN(768).param_count() == 4_722_432


def test_matched_gated_width():
    assert matched_gated_width(4096, multiple_of=256) == 11008
    assert matched_gated_width(4096) == 10922
    for d in (64, 96, 512, 768):
        dense = ffn_param_count(d, 4 * d)
        gated = ffn_param_count(d, matched_gated_width(d), gated=True)
        assert abs(gated - dense) / dense < 0.01


def test_default_widths():
    assert FFN(16).d_ff == 64
    assert FFN.from_variant("swiglu", 96).d_ff == 256
    assert FFN.from_variant("gelu", 96).d_ff == 384


def test_position_wise():
    torch.manual_seed(0)
    ffn = FFN(8)
    x = torch.randn(3, 6, 8)
    perm = torch.randperm(6)
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm])


def test_hidden_and_contract_compose_to_forward():
    ffn = FFN.from_variant("geglu", 8)
    x = torch.randn(4, 8)
    assert ffn.hidden(x).shape == (4, ffn.d_ff)
    torch.testing.assert_close(ffn.contract(ffn.hidden(x)), ffn(x))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"d_model": 0}, ValueError, "d_model must be a positive int, got 0"),
    ({"d_model": -3}, ValueError, "d_model must be a positive int, got -3"),
    ({"d_model": 4.0}, TypeError, r"d_model must be a positive int, got 4.0 \(float\)"),
    ({"d_model": True}, TypeError, "d_model must be a positive int, got True"),
    ({"d_model": 4, "d_ff": 0}, ValueError, "d_ff must be a positive int, got 0"),
    ({"d_model": 4, "d_ff": "16"}, TypeError, "d_ff must be a positive int, got '16'"),
    ({"d_model": 4, "activation": "gelu2"}, ValueError, r"activation must be one of \[.*\], got 'gelu2'"),
    ({"d_model": 4, "dropout": -0.1}, ValueError, r"dropout must be a float in \[0, 1\), got -0.1"),
    ({"d_model": 4, "dropout": 1.0}, ValueError, r"dropout must be a float in \[0, 1\), got 1.0"),
    ({"d_model": 4, "gated": "yes"}, TypeError, "gated must be a bool"),
])
def test_bad_configuration_is_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        FFN(**kwargs)


def test_bad_variant_and_width_rule():
    with pytest.raises(ValueError, match=r"variant must be one of .*got 'swishglu'"):
        FFN.from_variant("swishglu", 8)
    with pytest.raises(ValueError, match="multiple_of must be a positive int, got 0"):
        matched_gated_width(64, multiple_of=0)
    with pytest.raises(ValueError, match="multiple_of must be a positive int, got -8"):
        FFN.from_variant("swiglu", 64, multiple_of=-8)


def test_bad_input_is_named():
    ffn = FFN(4)
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=4, got shape \(2, 5\)"):
        ffn(torch.randn(2, 5))
    with pytest.raises(TypeError, match="x must have a floating-point dtype.*torch.int64"):
        ffn(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        ffn([[0.0] * 4])
