"""helpers.dead_units: the measures of notebook 01's sections 6-8, checked against independent computations."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.dead_units import (ADAM_SHOVE_PATH, adam, escape_step, escape_study, load_escape, deep_shove_study, load_deep_shove, main, save_deep_shove, dead_units, experiment_data, firing_rates, last_layer_lr_limit, negative_everywhere,
                                plot_firing_rates,
                                pre_activations, sgd, shove_below_zero_, shove_table, shoved_run,
                                stuck_fraction)
from helpers.ffn import FFN


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _model(seed=0, activation="relu", d=16, d_ff=256):
    torch.manual_seed(seed)
    return FFN(d, d_ff, activation=activation)


def test_experiment_data_is_seeded_float32_and_a_function_of_x():
    x, y = experiment_data()
    assert x.shape == y.shape == (256, 16) and x.dtype == y.dtype == torch.float32
    x2, y2 = experiment_data()
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(experiment_data(seed=2)[0], x)
    assert experiment_data(n=64, d=4)[0].shape == (64, 4)
    assert y.abs().max() <= 1


def test_sgd_is_plain_full_batch_sgd_on_the_mse():
    x, y = experiment_data(n=32)
    a, b = _model(), _model()
    losses = sgd(a, x, y, 0.1, 3)
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    expected = []
    for _ in range(3):
        loss = F.mse_loss(b(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        expected.append(loss.item())
    assert losses == expected
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert sgd(a, x, y, 0.1, 0) == []


def test_sgd_with_final_adds_the_loss_after_the_last_step():
    x, y = experiment_data(n=32)
    a, b = _model(), _model()
    losses = sgd(a, x, y, 0.1, 3, final=True)
    assert losses[:3] == sgd(b, x, y, 0.1, 3)
    assert losses[3] == F.mse_loss(b(x), y).item()
    assert sgd(a, x, y, 0.1, 0, final=True) == [F.mse_loss(a(x), y).item()]


def test_sgd_trains_with_autograd_switched_off_around_it():
    x, y = experiment_data(n=32)
    model = _model()
    before = model.w1.weight.clone()
    with torch.no_grad():
        sgd(model, x, y, 0.1, 1)
    assert not torch.equal(before, model.w1.weight)


def test_dead_stuck_and_negative_agree_for_relu_on_a_hand_made_layer():
    model = _model(d=2, d_ff=4)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    with torch.no_grad():
        model.w1.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [-1.0, -1.0]]))
        model.w1.bias.copy_(torch.tensor([0.0, -0.5, 0.0, 0.5]))
    # h per unit: u0 = (1, 0, -1) alive; u1 = (-1.5, -0.5, 0.5) alive; u2 = (0, 0, 0) dead; u3 = (-.5, -.5, 2.5) alive
    assert dead_units(model, x).tolist() == [False, False, True, False]
    assert stuck_fraction(model, "relu", x) == 0.25
    assert negative_everywhere(model, x) == 0.0              # unit 2 is 0, not < 0
    assert firing_rates(model, x).tolist() == pytest.approx([1 / 3, 1 / 3, 0.0, 1 / 3])


def test_gelu_and_silu_units_are_stuck_only_deep_in_the_tail():
    model = _model(activation="gelu", d=1, d_ff=3)
    x = torch.tensor([[1.0], [2.0]])
    with torch.no_grad():
        model.w1.weight.zero_()
        model.w1.bias.copy_(torch.tensor([-1.0, -3.0, -5.0]))   # GELU's slope: -0.08, -0.012, -1.5e-5
    assert stuck_fraction(model, "gelu", x) == pytest.approx(1 / 3)
    assert stuck_fraction(model, "relu", x) == 1.0
    assert negative_everywhere(model, x) == 1.0


def test_a_dead_relu_unit_gets_exactly_zero_gradient():
    x, y = experiment_data()
    model = _model()
    sgd(model, x, y, 2.0, 5)
    dead = dead_units(model, x)
    assert 0 < dead.sum() < 256
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    assert model.w1.weight.grad[dead].abs().max() == 0 and model.w1.bias.grad[dead].abs().max() == 0
    assert model.w1.weight.grad[~dead].abs().max() > 0
    assert stuck_fraction(model, "relu", x) == dead.double().mean().item()


def test_last_layer_lr_limit_is_where_sgd_on_the_last_layer_starts_to_diverge():
    """Freeze W1: SGD on (W2, b2) alone is a linear iteration; it converges below the limit and diverges above."""
    x, y = experiment_data(n=64)
    limit = last_layer_lr_limit(_model(), x)

    def last_layer_loss(lr, steps=300):
        model = _model()
        opt = torch.optim.SGD(model.w2.parameters(), lr=lr)
        for _ in range(steps):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss.item()
    start = F.mse_loss(_model()(x), y).item()
    assert last_layer_loss(0.95 * limit) < start
    assert last_layer_loss(1.05 * limit) > 10 * start


def test_last_layer_lr_limit_matches_the_notebook_ordering():
    x, _ = experiment_data()
    limits = {name: last_layer_lr_limit(_model(activation=name), x) for name in ("relu", "gelu", "silu")}
    assert limits["relu"] < 1.0 < 2.0 < limits["gelu"] < limits["silu"]


def test_shove_puts_every_unit_below_minus_the_margin_and_keeps_w1():
    x, _ = experiment_data(n=64)
    model = _model(activation="gelu")
    weight = model.w1.weight.clone()
    shove_below_zero_(model, x, margin=0.5)
    h = pre_activations(model, x)
    assert h.max() <= -0.5 + 1e-5 and (h.max(dim=0).values > -0.5 - 1e-5).all()
    assert torch.equal(weight, model.w1.weight)
    assert negative_everywhere(model, x) == 1.0


def test_bad_arguments_are_named():
    x, y = experiment_data(n=8)
    model = _model()
    with pytest.raises(ValueError, match="lr"):
        sgd(model, x, y, 0.0, 1)
    with pytest.raises(ValueError, match="y must have the shape of x"):
        sgd(model, x, y[:4], 0.1, 1)
    with pytest.raises(ValueError, match="last dimension"):
        dead_units(model, torch.zeros(3, 5))
    with pytest.raises(TypeError, match="model must be"):
        stuck_fraction(torch.nn.Linear(16, 16), "relu", x)
    with pytest.raises(ValueError, match="activation"):
        stuck_fraction(model, "tanh", x)
    with pytest.raises(ValueError, match="biases"):
        shove_below_zero_(FFN(16, 8, activation="relu", bias=False), x)


def test_firing_rates_and_dead_units_for_a_healthy_and_a_burst_network():
    """Section 7's numbers: 105 steps at lr 0.1 leave no dead unit and about half the units silent per example;
    5 steps at lr 2.0 first leave a quarter or more dead."""
    x, y = experiment_data()
    healthy, burst = _model(), _model()
    sgd(healthy, x, y, 0.1, 105)
    sgd(burst, x, y, 2.0, 5)
    sgd(burst, x, y, 0.1, 100)
    rates = firing_rates(healthy, x)
    assert dead_units(healthy, x).sum() == 0 and 0.4 < 1 - rates.mean() < 0.6
    assert dead_units(burst, x).double().mean() > 0.25
    never_on = (firing_rates(burst, x) == 0).double().mean().item()
    assert math.isclose(never_on, dead_units(burst, x).double().mean().item())


def test_sgd_warmup_rises_linearly_then_holds_lr():
    x, y = experiment_data(n=32)
    a, b = _model(), _model()
    losses = sgd(a, x, y, 0.3, 2, warmup=3)
    assert len(losses) == 5
    opt = torch.optim.SGD(b.parameters(), lr=1.0)
    for lr in [0.1, 0.2, 0.3, 0.3, 0.3]:
        opt.param_groups[0]["lr"] = lr
        opt.zero_grad()
        F.mse_loss(b(x), y).backward()
        opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="warmup"):
        sgd(_model(), x, y, 0.1, 1, warmup=-1)


def test_a_diverged_network_is_refused_not_counted_as_alive():
    x, _ = experiment_data(n=32)
    model = _model()
    with torch.no_grad():
        model.w1.weight[3, 0] = float("nan")
    for count in (lambda: stuck_fraction(model, "silu", x), lambda: negative_everywhere(model, x),
                  lambda: dead_units(model, x), lambda: firing_rates(model, x)):
        with pytest.raises(ValueError, match="not all finite"):
            count()


def test_centring_the_hidden_outputs_lifts_relus_last_layer_limit():
    x, _ = experiment_data()
    model = _model()
    plain, centred = last_layer_lr_limit(model, x), last_layer_lr_limit(model, x, centred=True)
    with torch.no_grad():
        m = model.hidden(x).double()
    m1 = torch.cat([m - m.mean(0), torch.ones(len(m), 1, dtype=torch.float64)], 1)
    expected = 2 / (2 / (256 * 16) * torch.linalg.eigvalsh(m1.T @ m1).max().item())
    assert centred == pytest.approx(expected, rel=1e-9)
    assert centred > 5 * plain
    with pytest.raises(TypeError, match="centred"):
        last_layer_lr_limit(model, x, centred=1)


def test_plot_firing_rates_draws_the_live_histogram_and_a_dead_bar_per_network():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = {"a": torch.tensor([0.0, 0.0, 0.5, 1.0]), "b": torch.tensor([0.25, 0.25, 0.75, 0.0])}
    ax = plot_firing_rates(rates, ["0.5", "C1"], bins=4)
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 2 * (4 + 1)                  # per network: 4 bins and the dead bar
    assert heights[:5] == [0, 0, 1, 1, 2] and heights[5:] == [0, 2, 0, 1, 1]
    assert [t.get_text() for t in ax.texts] == ["2", "1"]
    with pytest.raises(ValueError, match="colors"):
        plot_firing_rates(rates, ["0.5"])
    plt.close("all")


def test_a_slow_ramp_lowers_the_curvature_and_constant_small_steps_do_not():
    """Section 7's mechanism: after a 100-step ramp to lr 2.0 the last layer's limit is well above 2.0; after 100
    steps at a constant lr 0.1 it is still below 1."""
    x, y = experiment_data()
    ramp, const = _model(), _model()
    sgd(ramp, x, y, 2.0, 0, warmup=100)
    sgd(const, x, y, 0.1, 100)
    assert last_layer_lr_limit(ramp, x) > 4 and last_layer_lr_limit(const, x) < 1


def test_shoved_run_is_the_notebooks_loop_written_out():
    x, y = experiment_data(n=64)
    model = _model(seed=3, activation="silu", d_ff=32)
    shove_below_zero_(model, x, margin=0.5)
    F.mse_loss(model(x), y).backward()
    grad = model.w1.weight.grad.norm().item()
    losses = sgd(model, x, y, 1.0, 20)
    run = shoved_run("silu", x, y, seed=3, d_ff=32, steps=20)
    assert run.losses == losses and run.grad_w1 == grad
    assert run.units_up == int((firing_rates(model, x) > 0).sum())


def test_shoved_run_relu_gets_no_gradient_and_a_frozen_w1_keeps_every_unit_below_zero():
    x, y = experiment_data(n=64)
    relu = shoved_run("relu", x, y, seed=0, d_ff=32, steps=20)
    assert relu.grad_w1 == 0.0 and relu.stuck == 1.0 and relu.units_up == 0
    frozen = shoved_run("gelu", x, y, seed=0, d_ff=32, steps=20, freeze_w1=True)
    assert frozen.units_up == 0 and frozen.losses[-1] < frozen.losses[0]


def test_a_deep_gelu_unit_gets_far_less_gradient_than_a_silu_unit_though_neither_is_stuck():
    x, y = experiment_data(n=64)
    gelu = shoved_run("gelu", x, y, seed=0, d_ff=32, margin=3.0, steps=1)
    silu = shoved_run("silu", x, y, seed=0, d_ff=32, margin=3.0, steps=1)
    assert gelu.stuck == 0.0 and silu.stuck == 0.0
    assert gelu.grad_w1 < silu.grad_w1 / 10


def test_shoved_run_names_its_bad_arguments():
    x, y = experiment_data(n=8)
    with pytest.raises(ValueError, match="seed"):
        shoved_run("gelu", x, y, seed=-1)
    with pytest.raises(TypeError, match="freeze_w1"):
        shoved_run("gelu", x, y, seed=0, freeze_w1=1)
    with pytest.raises(ValueError, match="margin"):
        shoved_run("gelu", x, y, seed=0, margin=0.0)


def test_the_deep_shove_study_round_trips_through_its_file(tmp_path):
    record = deep_shove_study(seeds=[0, 1], steps=3, d_ff=8)
    settings, runs = load_deep_shove(save_deep_shove(record, tmp_path / "deep.json"))
    assert settings == {"margin": 3.0, "steps": 3, "d_ff": 8, "seeds": [0, 1]}
    assert sorted(runs) == ["gelu", "silu"] and len(runs["gelu"]) == 2 and len(runs["silu"][1].losses) == 3
    x, y = experiment_data()
    assert runs["silu"][1].losses == pytest.approx(shoved_run("silu", x, y, 1, margin=3.0, steps=3, d_ff=8).losses,
                                                   abs=1e-6)
    assert main(["--deep-shove", "--seeds", "0", "--steps", "2", "--out", str(tmp_path / "cli.json")]) == 0
    assert load_deep_shove(tmp_path / "cli.json")[0]["seeds"] == [0]


def test_the_stored_deep_shove_starts_where_a_live_run_does():
    settings, runs = load_deep_shove()
    assert settings["margin"] == 3.0 and settings["steps"] == 300 and settings["seeds"] == [0, 1, 2, 3, 4]
    x, y = experiment_data()
    for name in ("gelu", "silu"):
        live = shoved_run(name, x, y, 0, margin=3.0, steps=5)
        assert live.losses == pytest.approx(runs[name][0].losses[:5], abs=1e-5)
        assert runs[name][0].stuck == 0.0


def test_adam_is_plain_full_batch_adam_and_skips_frozen_weights():
    x, y = experiment_data(n=32)
    torch.manual_seed(0)
    model = FFN(16, 8, activation="gelu")
    twin = FFN(16, 8, activation="gelu")
    twin.load_state_dict(model.state_dict())
    losses = adam(model, x, y, 1e-2, 3)
    opt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    for k in range(3):
        loss = F.mse_loss(twin(x), y)
        assert losses[k] == pytest.approx(loss.item(), abs=1e-6)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with pytest.raises(ValueError, match="optimizer"):
        shoved_run("gelu", x, y, 0, optimizer="adamw")


def test_under_adam_a_deep_gelu_unit_climbs_back_and_a_relu_unit_does_not():
    x, y = experiment_data(n=64)
    relu = shoved_run("relu", x, y, 0, margin=3.0, lr=1e-2, steps=60, d_ff=64, optimizer="adam")
    gelu = shoved_run("gelu", x, y, 0, margin=3.0, lr=1e-2, steps=60, d_ff=64, optimizer="adam")
    assert relu.grad_w1 == 0.0 and relu.units_up == 0
    assert gelu.units_up > 0 and gelu.losses[-1] < relu.losses[-1]


def test_the_adam_study_round_trips_and_the_stored_file_starts_where_a_live_run_does(tmp_path):
    assert main(["--deep-shove", "--adam", "--seeds", "0", "--steps", "2", "--out", str(tmp_path / "a.json")]) == 0
    settings, runs = load_deep_shove(tmp_path / "a.json")
    assert settings["optimizer"] == "adam" and settings["lr"] == 1e-3 and sorted(runs) == ["gelu", "relu"]
    settings, runs = load_deep_shove(ADAM_SHOVE_PATH)
    assert settings["margin"] == 3.0 and settings["steps"] == 300 and settings["seeds"] == [0, 1, 2, 3, 4]
    x, y = experiment_data()
    live = shoved_run("gelu", x, y, 0, margin=3.0, lr=1e-3, steps=5, optimizer="adam")
    assert live.losses == pytest.approx(runs["gelu"][0].losses[:5], abs=1e-5)
    assert [r.units_up for r in runs["relu"]] == [0] * 5 and min(r.units_up for r in runs["gelu"]) > 50


def test_escape_step_is_the_number_of_steps_after_which_the_loss_is_below_the_level():
    assert escape_step([0.5, 0.49, 0.44, 0.46, 0.3], 0.45) == 2
    assert escape_step([0.5, 0.49], 0.45) is None
    assert escape_step([0.4], 0.45) == 0


def test_the_escape_study_round_trips_through_its_cli_and_matches_shoved_run(tmp_path):
    out = tmp_path / "escape.json"
    assert main(["--escape", "--seeds", "0", "1", "--escape-steps", "25", "12", "--out", str(out)]) == 0
    record = load_escape(out)
    assert record["steps"] == {"1.0": 25, "4.0": 12} and record["seeds"] == [0, 1] and record["every"] == 10
    x, y = experiment_data()
    live = shoved_run("gelu", x, y, 1, margin=3.0, lr=4.0, steps=12)
    run = record["runs"]["4.0"][1]
    assert run["losses"] == pytest.approx(live.losses[::10], abs=1e-6) and len(run["losses"]) == 2
    assert run["escape"] is None and run["units_up"] == live.units_up
    assert escape_study({1.0: 3}, seeds=[0], level=10.0, d_ff=8)["runs"]["1.0"][0]["escape"] == 0


def test_the_stored_escape_runs_start_where_a_live_run_does_and_gelu_comes_back():
    record = load_escape()
    assert record["steps"] == {"1.0": 10_000, "4.0": 3_000} and record["seeds"] == [0, 1, 2, 3, 4]
    x, y = experiment_data()
    live = shoved_run("gelu", x, y, 0, margin=3.0, lr=4.0, steps=21)
    assert live.losses[::10] == pytest.approx(record["runs"]["4.0"][0]["losses"][:3], abs=1e-5)
    for lr, runs in record["runs"].items():
        assert all(r["escape"] is not None and r["escape"] > 300 and r["units_up"] > 0 for r in runs), lr


def test_shove_table_prints_one_row_per_arm_with_ranges_over_seeds():
    from helpers.dead_units import ShovedRun
    runs = {("relu", "shoved"): [ShovedRun([0.6, 0.5], 0.0, 1.0, 0), ShovedRun([0.6, 0.49], 0.0, 1.0, 0)],
            ("gelu", "shoved"): [ShovedRun([0.6, 0.3], 2e-3, 0.0, 5), ShovedRun([0.6, 0.2], 4e-3, 0.0, 7)],
            ("gelu", "W1 frozen"): [ShovedRun([0.6, 0.4], 2e-3, 0.0, 0)]}
    text = shove_table(runs, list(runs), {"relu": "ReLU", "gelu": "GELU"}, best_affine=0.35, question="Q?")
    lines = text.splitlines()
    assert lines[0] == "Q?" and "final loss" in lines[1] and len(lines) == 5
    assert "0 in every seed" in lines[2] and "0.490 to 0.500" in lines[2] and "0 of 2 seeds" in lines[2]
    assert "2.0e-03 to 4.0e-03" in lines[3] and " 5 to 7" in lines[3] and "2 of 2 seeds" in lines[3]
    assert "frozen" in lines[4] and "0 of 1 seeds" in lines[4]
    with pytest.raises(ValueError, match="runs"):
        shove_table({("relu", "x"): []}, [("relu", "x")], {"relu": "ReLU"}, 0.3)


def test_recheck_stored_recomputes_seed_0_of_every_file_in_one_line():
    from helpers.dead_units import recheck_stored
    x, y = experiment_data()
    line = recheck_stored(x, y, escape_steps=21)
    assert "\n" not in line and "every loss within 1e-4" in line
    assert "passes 0.45 not within 21 steps (file: 1,624)" in line
