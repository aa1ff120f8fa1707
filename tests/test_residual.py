"""helpers.residual: the six update rules, the trace, GPT-2's output scaling, the plot, argument errors."""
import math

import matplotlib
import pytest
import torch

from helpers.residual import (NORMS, block_step, make_stack, plot_stack_trace, residual_scale, scaled_output_init,
                              stack_forward, trace_stack)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def stack():
    ffns, norms = make_stack(4, 8, seed=3)
    with torch.no_grad():  # LayerNorms whose scale and shift are not 1 and 0
        for k, ln in enumerate(norms):
            ln.weight.fill_(1.0 + 0.1 * k)
            ln.bias.fill_(0.05 * k)
    return ffns, norms, torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("norm, residual, rule", [
    ("none", False, lambda x, f, ln: f(x)),
    ("none", True, lambda x, f, ln: x + f(x)),
    ("pre", True, lambda x, f, ln: x + f(ln(x))),
    ("pre", False, lambda x, f, ln: f(ln(x))),
    ("post", True, lambda x, f, ln: ln(x + f(x))),
    ("post", False, lambda x, f, ln: ln(f(x))),
])
def test_every_update_rule(stack, norm, residual, rule):
    ffns, norms, x = stack
    expected = x
    with torch.no_grad():
        for f, ln in zip(ffns, norms):
            expected = rule(expected, f, ln)
        assert torch.allclose(stack_forward(x, ffns, norms, norm=norm, residual=residual), expected)


def test_block_step_reports_what_the_ffn_received(stack):
    ffns, norms, x = stack
    with torch.no_grad():
        _, seen = block_step(x, ffns[0], norms[0], norm="pre")
        assert torch.allclose(seen, norms[0](x))
        _, seen = block_step(x, ffns[0], norms[0], norm="post")
        assert torch.equal(seen, x)


def test_make_stack_is_seeded_and_leaves_the_global_generator_alone():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    a, _ = make_stack(3, 6, seed=1)
    assert torch.equal(torch.rand(2), expected)
    b, _ = make_stack(3, 6, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert len(a) == 3 and a[0].d_ff == 24


def test_trace_lengths_and_values(stack):
    ffns, norms, x = stack
    trace = trace_stack(x, ffns, norms, norm="pre", residual=True)
    assert len(trace.stream_std) == len(trace.spread) == 5 and len(trace.input_std) == 4
    assert trace.stream_std[0] == pytest.approx(x.std().item())
    fresh_ffns, fresh_norms = make_stack(4, 8, seed=3)  # LayerNorms at their initial scale 1 and shift 0
    fresh = trace_stack(x, fresh_ffns, fresh_norms, norm="pre", residual=True)
    assert all(s == pytest.approx(1.0, abs=0.05) for s in fresh.input_std)
    assert trace.label == "pre-LN, residual"
    assert trace_stack(x, ffns, norms, norm="none", residual=False).label == "no LayerNorm, no residual"


def test_plain_stack_makes_tokens_identical():
    ffns, norms = make_stack(30, 16, seed=8)
    x = torch.randn(4, 32, 16, generator=torch.Generator().manual_seed(8))
    plain = trace_stack(x, ffns, norms, norm="none", residual=False)
    residual = trace_stack(x, ffns, norms, norm="none", residual=True)
    assert plain.spread[-1] < 1e-6 < 0.5 < residual.spread[-1]


def test_scaled_output_init_scales_w2_only_and_copies():
    ffns, _ = make_stack(2, 4, seed=0)
    scaled = scaled_output_init(ffns, residual_scale(4))
    assert residual_scale(4) == 0.5 and residual_scale(2) == pytest.approx(1 / math.sqrt(2))
    assert torch.allclose(scaled[1].w2.weight, 0.5 * ffns[1].w2.weight)
    assert torch.equal(scaled[1].w1.weight, ffns[1].w1.weight) and scaled[1].w2.weight is not ffns[1].w2.weight


def test_plot_stack_trace_draws_two_panels(stack):
    ffns, norms, x = stack
    fig = plot_stack_trace(trace_stack(x, ffns, norms, norm="none", residual=False))
    assert len(fig.axes) == 2 and "4 stacked FFNs" in fig._suptitle.get_text()
    matplotlib.pyplot.close(fig)


def test_plot_stack_trace_zooms_in_unless_the_curves_reach_rounding_noise():
    from helpers.residual import StackTrace

    flat = StackTrace("pre", True, [1.0, 1.1, 1.3], [1.0, 0.9, 0.8], [1.0, 1.0])
    fig = plot_stack_trace(flat)
    low, high = fig.axes[0].get_ylim()
    assert low == pytest.approx(0.8 / 3) and high == pytest.approx(3 * 1.3)
    matplotlib.pyplot.close(fig)
    collapsed = StackTrace("none", False, [1.0, 0.1, 0.1], [1.0, 1e-4, 1e-9], [1.0, 0.1])
    fig = plot_stack_trace(collapsed)
    assert fig.axes[0].get_ylim()[0] == pytest.approx(1e-8)
    assert "float32 rounding noise" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"norm": "layer"}, ValueError, "norm must be one of"),
    ({"residual": 1}, TypeError, "residual must be a bool"),
])
def test_bad_arguments_name_the_argument(stack, kwargs, error, words):
    ffns, norms, x = stack
    with pytest.raises(error, match=words):
        stack_forward(x, ffns, norms, **kwargs)


def test_mismatched_lists_and_bad_sizes():
    ffns, norms = make_stack(3, 4)
    with pytest.raises(ValueError, match="one LayerNorm per FFN"):
        trace_stack(torch.randn(2, 4), ffns, norms[:2])
    with pytest.raises(ValueError, match="depth must be a positive int"):
        make_stack(0, 4)
    with pytest.raises(ValueError, match="factor must be"):
        scaled_output_init(ffns, 0.0)
    assert set(NORMS) == {"none", "pre", "post"}
