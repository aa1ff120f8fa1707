import math

import pytest
import torch

from helpers.activations import ACTIVATIONS, format_step, get_activation, gelu, gelu_tanh, slope, swish

XS = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0], dtype=torch.float64)


def test_gelu_table_matches_published_values():
    exact = [-0.0455, -0.1587, -0.1543, 0.0, 0.3457, 0.8413, 1.9545]
    tanh = [-0.0454, -0.1588, -0.1543, 0.0, 0.3457, 0.8412, 1.9546]
    assert get_activation("gelu")(XS).tolist() == pytest.approx(exact, abs=5e-5)
    assert get_activation("gelu_tanh")(XS).tolist() == pytest.approx(tanh, abs=5e-5)


def test_gelu_is_x_times_normal_cdf():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    phi = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    torch.testing.assert_close(get_activation("gelu")(x), x * phi)


def test_largest_gap_between_gelu_forms():
    x = torch.linspace(-6, 6, 1_200_001, dtype=torch.float64)
    gap = (get_activation("gelu")(x) - get_activation("gelu_tanh")(x)).abs()
    assert gap.max().item() == pytest.approx(4.73e-4, abs=5e-6)
    assert abs(x[gap.argmax()].item()) == pytest.approx(2.70, abs=0.01)


def test_swish_limits():
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    torch.testing.assert_close(swish(x, 0.0), x / 2)
    torch.testing.assert_close(swish(x, 1.0), get_activation("silu")(x))
    torch.testing.assert_close(swish(x, 200.0), torch.relu(x), atol=1e-2, rtol=0)


def test_every_activation_keeps_shape():
    x = torch.randn(2, 3, 4)
    for fn in ACTIVATIONS.values():
        assert fn(x).shape == x.shape


def test_unknown_activation_names_the_argument():
    with pytest.raises(ValueError, match=r"activation must be one of .*'gelu'.*got 'gleu'"):
        get_activation("gleu")
    with pytest.raises(ValueError, match="beta must be a non-negative number, got -1"):
        swish(torch.zeros(1), -1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_format_step_is_the_distance_to_the_next_number_of_the_format(dtype):
    """format_step (float64 arithmetic) equals nextafter computed in the format, normal and subnormal numbers alike."""
    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(20_000, generator=gen, dtype=torch.float64) * torch.exp2(torch.randint(-40, 12, (20_000,), generator=gen).double())
    tiny = torch.finfo(dtype).tiny * torch.rand(2_000, generator=gen, dtype=torch.float64)   # subnormal range
    v = torch.cat([wide, tiny, -wide]).to(dtype)
    v = v[v != 0]
    ahead = torch.nextafter(v.abs(), torch.full_like(v, math.inf))
    torch.testing.assert_close(format_step(v.double(), dtype), (ahead - v.abs()).double(), rtol=0, atol=0)


def test_format_step_names_a_bad_dtype():
    with pytest.raises(ValueError, match="dtype must be one of"):
        format_step(torch.ones(2, dtype=torch.float64), torch.int8)


@pytest.mark.parametrize("dtype, edge", [(torch.bfloat16, -2.17), (torch.float16, -0.91)])
def test_low_precision_hides_the_gelu_gap_only_for_positive_inputs(dtype, edge):
    """Notebook 01, section 4's optional box: below one step of the format for x > 0; whole steps only below the edge it prints."""
    x = torch.linspace(-6, 6, 1_200_001, dtype=torch.float64)
    exact = get_activation("gelu")(x)
    steps = (exact - get_activation("gelu_tanh")(x)).abs() / format_step(exact, dtype)
    assert steps[x > 0].max() < 1
    assert steps[(x > -3) & (x < -2.5)].min() > 1
    assert x[steps >= 1].max().item() == pytest.approx(edge, abs=0.005)


def test_slope_is_the_derivative_and_leaves_x_alone():
    x = torch.linspace(-4, 4, 801, dtype=torch.float64)
    phi = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    exact = phi + x * torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(slope(get_activation("gelu"), x), exact)
    assert slope(get_activation("relu"), torch.tensor([-1.0, 0.0, 2.0])).tolist() == [0.0, 0.0, 1.0]
    assert not x.requires_grad
    with torch.inference_mode():
        inside = torch.tensor([-1.0, 1.0])
        assert slope(get_activation("silu"), inside).tolist() == pytest.approx([0.0723, 0.9277], abs=1e-4)
    assert slope(get_activation("gelu"), torch.tensor(0.0)).item() == 0.5


def test_gelu_forms_after_rounding_for_normal_pre_activations():
    """Notebook 01, section 4: for N(0, 1) pre-activations (1,000,001 quantiles), rounding both forms to bfloat16
    changes 13.8 % of the negative outputs and 1.6 % of the positive ones; float16: 49.8 % and 12.7 %."""
    n = 1_000_001
    x = math.sqrt(2) * torch.erfinv(2 * (torch.arange(n, dtype=torch.float64) + 0.5) / n - 1)
    shares = {}
    for dtype in (torch.bfloat16, torch.float16):
        changed = gelu(x).to(dtype) != gelu_tanh(x).to(dtype)
        shares[dtype] = (changed[x < 0].double().mean().item(), changed[x > 0].double().mean().item())
    assert shares[torch.bfloat16] == pytest.approx((0.138, 0.016), abs=1e-3)
    assert shares[torch.float16] == pytest.approx((0.498, 0.127), abs=1e-3)
