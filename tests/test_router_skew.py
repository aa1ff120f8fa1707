"""helpers.router_skew: the controls behind notebook 05's section 6 (why a fresh router is uneven)."""
import math

import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe import MoE, load_max_over_mean
from helpers.router_skew import (CONTROLS, SKEW_PATH, distinct_rows, geometry_figure, input_geometry,
                                 largest_seed_difference, layer_controls, load_skew, main, matched_gaussian, moe_inputs,
                                 random_id_loads, run_skew, skew_controls, skew_table)
from helpers.transformer import GPTConfig, TinyGPT


def test_distinct_rows_keeps_each_row_once_in_first_seen_order():
    x = torch.tensor([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0], [3.0, 1.0], [0.0, 0.0]])
    assert torch.equal(distinct_rows(x), torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]]))
    assert torch.equal(distinct_rows(x + 1e-7), distinct_rows(x) + 1e-7)      # equal to 4 decimals counts as equal


def test_matched_gaussian_has_the_mean_and_covariance_even_when_singular():
    g = torch.Generator().manual_seed(0)
    basis = torch.randn(3, 6, generator=g)
    x = torch.randn(4000, 3, generator=g) @ basis + 2.0                       # rank 3 in 6 dimensions
    y = matched_gaussian(x, 20000, generator=torch.Generator().manual_seed(1))
    assert y.shape == (20000, 6) and y.dtype == torch.float32
    assert torch.allclose(y.mean(0), x.mean(0), atol=0.1)
    assert torch.allclose(torch.cov(y.T), torch.cov(x.T), atol=0.25)
    diagonal = matched_gaussian(x, 20000, generator=torch.Generator().manual_seed(1), covariance=False)
    assert torch.allclose(diagonal.std(0), x.std(0), rtol=0.05)
    assert torch.cov(diagonal.T)[0, 1].abs() < 0.2 < torch.cov(x.T)[0, 1].abs() + 0.2


def test_input_geometry_of_a_cloud_and_of_a_line():
    g = torch.Generator().manual_seed(0)
    cloud = input_geometry(torch.randn(20000, 16, generator=g))
    assert cloud.mean_ratio < 0.05 and 14 < cloud.participation <= 16 and cloud.d == 16
    line = input_geometry(torch.randn(500, 1, generator=g) * torch.ones(1, 16) + 3.0)
    assert math.isclose(line.participation, 1.0, rel_tol=1e-6) and line.mean_ratio > 0.9


def _tiny():
    data = make_dataset(load_facts()[:40])
    config = GPTConfig(vocab_size=len(data.vocab), d_model=16, n_layers=2, n_heads=2, max_len=data.ids.shape[1])
    return data, lambda: TinyGPT(config, ffn_factory=lambda layer: MoE(16, 4, 1, d_ff=8, noisy=True))


def test_moe_inputs_are_what_each_layer_routes():
    data, build = _tiny()
    torch.manual_seed(0)
    model = build().eval()
    inputs = moe_inputs(model, data.ids)
    assert len(inputs) == 2 and inputs[0].shape == (data.ids.numel(), 16)
    model(data.ids)
    routed = [b.ffn_record.routing.expert_index for b in model.blocks]
    assert all(torch.equal(b.ffn.route(x).expert_index, r) for b, x, r in zip(model.blocks, inputs, routed))
    with pytest.raises(ValueError, match="no MoE"):
        moe_inputs(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.zeros(1, 2, dtype=torch.long))


def test_layer_controls_restore_the_layer_and_need_noise():
    torch.manual_seed(0)
    layer = MoE(8, 4, 1, d_ff=8, noisy=True).eval()
    before = layer.router.weight.detach().clone()
    x = torch.randn(400, 8) + 2.0
    out = layer_controls(layer, x, generator=torch.Generator().manual_seed(0))
    assert list(out) == list(CONTROLS) and all(1.0 <= v <= 4.0 for v in out.values())
    assert torch.equal(layer.router.weight, before) and not layer.training
    assert out["W_g = 0, noise"] < 1.3                       # the noise alone decides: nearly even
    with pytest.raises(ValueError, match="noisy=True"):
        layer_controls(MoE(8, 4, 1, d_ff=8), x, generator=torch.Generator())


def test_skew_controls_shapes_table_and_determinism():
    data, build = _tiny()
    a = skew_controls(build, data.ids, seeds=[0, 1])
    b = skew_controls(build, data.ids, seeds=[0, 1])
    assert set(a.loads) == set(CONTROLS) and a.loads["all positions"].shape == (2, 2)
    assert all(torch.equal(a.loads[c], b.loads[c]) for c in CONTROLS)
    assert a.per_seed("mean removed").shape == (2,) and a.n_inputs == data.ids.numel()
    assert all(1 <= d <= a.n_inputs for d in a.distinct) and len(a.geometry) == 2
    lines = skew_table(a).splitlines()
    assert len(lines) == 1 + len(CONTROLS) and lines[1].startswith("all positions") and lines[1].endswith("100%")


def _tiny_moe_lm():
    config = GPTConfig(vocab_size=20, d_model=16, n_layers=2, n_heads=2, max_len=6)
    return TinyGPT(config, ffn_factory=lambda layer: MoE(16, 4, 1, d_ff=8, noisy=True))


def test_random_id_loads_routes_the_same_models_on_random_ids():
    loads = random_id_loads(_tiny_moe_lm, 20, (5, 6), seeds=[0, 1, 2])
    assert loads.shape == (3, 2) and loads.dtype == torch.float64
    assert (loads >= 1.0).all() and (loads <= 4.0).all()                     # busiest/mean lies in [1, E]
    assert torch.equal(loads, random_id_loads(_tiny_moe_lm, 20, (5, 6), seeds=[0, 1, 2]))


def test_geometry_figure_routes_each_panel_and_titles_its_load():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    torch.manual_seed(0)
    layer = MoE(16, 4, 1, d_ff=8, noisy=True)
    x = torch.randn(300, 16) + 2.0
    fig = geometry_figure(layer, {"inputs": x, "mean removed": x - x.mean(0)})
    titles = [ax.get_title() for ax in fig.axes[:2]]
    expected = load_max_over_mean(layer.eval().route(x).tokens_per_expert())
    assert titles[0].split("\n")[0] == f"inputs: busiest/mean {expected:.2f}" and len(fig.axes) == 3
    assert titles[0].split("\n")[1].startswith("std along x ")                # review 05-r52: spread shown and titles[1].startswith("mean removed")
    assert layer.training is False                                            # restored as it was
    plt.close(fig)


def test_the_command_writes_a_file_that_loads_back_and_matches_a_live_seed(tmp_path):
    out = tmp_path / "skew.json"
    assert main(["--results", "--seeds", "3", "1", "--out", str(out)]) == 0
    stored, stored_ids, seeds = load_skew(out)
    assert seeds == [3, 1] and stored.loads["all positions"].shape == (2, 2) and stored_ids.shape == (2, 2)
    live, live_ids = run_skew([1])
    assert largest_seed_difference(live, live_ids, stored, stored_ids, [1], seeds) < 1e-5
    assert stored.n_inputs == live.n_inputs and stored.distinct == [float(d) for d in stored.distinct]
    assert skew_table(stored).splitlines()[1].endswith("100%")
    with pytest.raises(FileNotFoundError, match="python -m helpers.router_skew --results"):
        load_skew(tmp_path / "missing.json")


def test_the_shipped_controls_cover_seeds_0_to_99():
    stored, stored_ids, seeds = load_skew()
    assert SKEW_PATH.name == "router_skew.json" and seeds == list(range(100))
    assert all(v.shape == (100, 2) for v in stored.loads.values()) and stored_ids.shape == (100, 2)
    assert (stored.loads["W_g = 0, noise"] < stored.loads["all positions"]).float().mean() > 0.9


def test_noisy_busiest_is_seeded_leaves_the_random_state_and_evens_a_smaller_router():
    from helpers.router_skew import noisy_busiest

    torch.manual_seed(0)
    layer = MoE(16, 8, 1, d_ff=8, noisy=True).eval()
    x = torch.randn(2000, 16) + 3.0                                           # a shared direction: uneven
    state = torch.get_rng_state()
    assert noisy_busiest(layer, x, seed=1) == noisy_busiest(layer, x, seed=1)
    assert torch.equal(torch.get_rng_state(), state) and not layer.training
    tiny = MoE(16, 8, 1, d_ff=8, noisy=True)
    tiny.load_state_dict(layer.state_dict())
    with torch.no_grad():
        tiny.router.weight /= 100
    assert noisy_busiest(tiny, x) < noisy_busiest(layer, x)
    with pytest.raises(ValueError, match="noisy=True"):
        noisy_busiest(MoE(16, 8, 1, d_ff=8), x)
