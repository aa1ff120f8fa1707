import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from helpers.gate_plane import (CONTENT_ANGLE, GATE_ANGLE, draw_unit_maps, hidden_map, one_unit,  # noqa: E402
                                plane_grid, unit_checks, unit_vector)


def test_one_unit_has_the_chosen_directions():
    unit = one_unit("swiglu", 0.0, 90.0)
    torch.testing.assert_close(unit.w1.weight, torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(unit.w3.weight, torch.tensor([[0.0, 1.0]]), atol=1e-7, rtol=0)
    assert unit.d_ff == 1 and unit.d_model == 2 and not unit.has_bias
    assert one_unit("relu").w3 is None


def test_hidden_map_is_phi_a_times_b():
    _, _, grid = plane_grid(11)
    a = (grid @ unit_vector(GATE_ANGLE).T)[..., 0]
    b = (grid @ unit_vector(CONTENT_ANGLE).T)[..., 0]
    torch.testing.assert_close(hidden_map("swiglu", grid), F.silu(a) * b)
    torch.testing.assert_close(hidden_map("relu", grid), F.relu(a))
    assert hidden_map("bilinear", grid).shape == (11, 11)


def test_unit_checks_state_the_figure():
    for dense in ("relu", "gelu", "swish"):
        checks = unit_checks(dense)
        assert checks.spread_along_gate_line == pytest.approx(0.0, abs=1e-6)
        assert checks.on_content_zero is None and checks.closed_side is None
    reglu = unit_checks("reglu")
    assert reglu.closed_side == (0.0, 0.0) and reglu.on_content_zero < 1e-6
    swiglu = unit_checks("swiglu")
    assert swiglu.closed_side[0] < 0 < swiglu.closed_side[1]
    assert swiglu.spread_along_gate_line > 1


def test_draw_unit_maps_draws_one_panel_per_variant():
    fig, axes = plt.subplots(1, 2)
    image = draw_unit_maps(axes, ["relu", "swiglu"], points=21)
    assert image is not None
    assert [ax.get_title() for ax in axes] == ["ReLU: φ(a)", "SwiGLU: φ(a)·b"]
    assert len(axes[1].patches) == 2 and len(axes[0].patches) == 1      # gate and content arrows
    plt.close(fig)


def test_bad_input():
    with pytest.raises(ValueError, match="variant must be one of"):
        one_unit("tanh")
    with pytest.raises(ValueError, match="points"):
        plane_grid(0)


def test_every_variant_has_a_display_name():
    from helpers.ffn import VARIANT_NAMES, VARIANTS

    assert set(VARIANT_NAMES) == set(VARIANTS)


def test_one_gated_unit_fits_what_no_dense_unit_can():
    from helpers.gate_plane import best_one_direction, fit_unit, gated_target
    x = torch.randn(50, 2, dtype=torch.float64)
    torch.testing.assert_close(gated_target(x), one_unit("reglu").double().hidden(x)[:, 0])   # ReGLU's own map
    floor = best_one_direction(10.0, 20_000, 50)
    assert 0.4 < floor < 0.65                              # no function of one direction explains half of it
    assert fit_unit("swiglu", 2) < 0.1 and fit_unit("swish", 2) > 0.4    # one gated unit fits it, one dense cannot
    with pytest.raises(ValueError, match="variant"):
        fit_unit("nope", 0)
