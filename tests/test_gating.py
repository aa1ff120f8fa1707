import pytest
import torch
import torch.nn.functional as F

from helpers.costs import measure_saved_tensors
from helpers.facts import load_facts, make_dataset
from helpers.ffn import FFN, VARIANTS
from helpers.costs import saved_per_token
from helpers.gating import (RACE_RESULTS_PATH, RACE_SEEDS, RACE_SETTINGS, RACE_VARIANTS, SHAZEER_2020_65K,
                            SHAZEER_2020_65K_SD, SHAZEER_2020_524K, answer_loss, compare_variants, gate_gradients,
                            load_race, main, pairwise_gaps, race_data, run_race, saved_activation_names, save_race)
from helpers.transformer import GPTConfig, TinyGPT


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


def test_pairwise_gaps_every_pair_in_order_and_units():
    gaps = pairwise_gaps({"a": 2.0, "b": 1.0, "c": 1.05}, {"a": 0.1, "b": 0.01, "c": 0.02}, n_runs=4)
    assert [(g.better, g.worse) for g in gaps] == [("b", "c"), ("b", "a"), ("c", "a")]
    se0 = (0.01 ** 2 + 0.02 ** 2) ** 0.5 / 2
    assert gaps[0].gap == pytest.approx(0.05) and gaps[0].se == pytest.approx(se0) and gaps[0].df == 6
    assert gaps[0].t == pytest.approx(0.05 / se0) and gaps[0].resolved()
    assert gaps[0].critical() == pytest.approx(2.447, abs=1e-3)
    assert not gaps[2].resolved(threshold=100)
    assert pairwise_gaps({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.1}, n_runs=10)[0].df == 18
    with pytest.raises(ValueError, match="n_runs"):
        pairwise_gaps({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.1}, n_runs=1)
    with pytest.raises(ValueError, match="at least two entries"):
        pairwise_gaps({"a": 1.0}, {"a": 0.1})
    with pytest.raises(ValueError, match="sds lacks"):
        pairwise_gaps({"a": 1.0, "b": 2.0}, {"a": 0.1})
    with pytest.raises(ValueError, match="must be positive"):
        pairwise_gaps({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.0})


def test_shazeer_65k_all_pairs_in_standard_errors():
    """The paper's 65k column (four runs, sd in parentheses): all 28 pairs in standard errors of the difference."""
    assert set(SHAZEER_2020_65K_SD) == set(SHAZEER_2020_65K)
    gaps = pairwise_gaps(SHAZEER_2020_65K, SHAZEER_2020_65K_SD)
    assert len(gaps) == 28
    t = {(g.better, g.worse): round(g.t, 1) for g in gaps}
    # the chain of neighbours hides resolved pairs that are not neighbours (the review's items 3 and 4)
    assert t[("glu", "swish")] == 3.6 and t[("glu", "relu")] == 3.8 and t[("glu", "gelu")] == 0.3
    assert t[("geglu", "reglu")] == 4.4 and t[("geglu", "bilinear")] == 5.6 and t[("swiglu", "bilinear")] == 2.9
    assert t[("swiglu", "reglu")] == 1.7 and t[("reglu", "bilinear")] == 2.4 and t[("geglu", "swiglu")] == 0.4
    assert t[("gelu", "relu")] == 4.0
    gated, dense = ("bilinear", "reglu", "geglu", "swiglu"), ("relu", "gelu", "swish")
    assert all(g.resolved() for g in gaps if g.better in gated and g.worse in dense)
    assert sum(g.resolved() for g in gaps) == 23          # the 5 unresolved: GEGLU–SwiGLU, SwiGLU–ReGLU,
    assert {(g.better, g.worse) for g in gaps if not g.resolved()} == {     # ReGLU–Bilinear, GLU–GELU, Swish–ReLU
        ("geglu", "swiglu"), ("swiglu", "reglu"), ("reglu", "bilinear"), ("glu", "gelu"), ("swish", "relu")}


def test_race_settings_save_load_and_select(tmp_path):
    small = run_race(["relu", "swiglu"], [0, 1], steps=4, eval_every=2, progress=False)
    assert small.settings == {**RACE_SETTINGS, "steps": 4, "eval_every": 2, "relation": "capital"}
    path = save_race(small, tmp_path / "race.json")
    back = load_race(path)
    assert back.variants == ["relu", "swiglu"] and back.seeds == [0, 1] and back.eval_steps == [0, 2, 4]
    for v in back.variants:
        torch.testing.assert_close(back.curves[v], small.curves[v].double(), atol=1e-5, rtol=0)
    assert back.d_ff == small.d_ff and back.ffn_params == small.ffn_params
    assert back.settings["environment"]["threads"] == 1
    one = back.select([1])
    assert one.seeds == [1] and torch.equal(one.curves["relu"], back.curves["relu"][1:])
    with pytest.raises(ValueError, match="seed 5 was not run"):
        back.select([5])
    with pytest.raises(ValueError, match="unknown settings"):
        run_race(["relu"], [0], width=3)
    with pytest.raises(FileNotFoundError, match="python -m helpers.gating --race-results"):
        load_race(tmp_path / "missing.json")


def test_race_command_on_a_small_run(tmp_path, capsys):
    out = tmp_path / "small.json"
    assert main(["--race-results", "--seeds", "0", "--variants", "relu", "geglu", "--steps", "3",
                 "--out", str(out)]) == 0
    assert "wrote 2 variants × 1 seeds" in capsys.readouterr().out
    made = load_race(out)
    direct = compare_variants(race_data(), ["relu", "geglu"], [0], progress=False,
                              **{**RACE_SETTINGS, "steps": 3, "eval_every": 3})
    assert made.eval_steps == [0, 3]
    for v in ("relu", "geglu"):
        torch.testing.assert_close(made.curves[v], direct.curves[v].double(), atol=1e-5, rtol=0)


def test_the_stored_race_is_the_notebooks_and_reproduces():
    """The file notebook 04 reads: 8 variants × 30 seeds with RACE_SETTINGS; seed 0 of ReLU trains to the
    same curve here (another CPU kernel moves it by about 0.02 nats at most)."""
    race = load_race()
    assert race.variants == list(RACE_VARIANTS) and race.seeds == list(RACE_SEEDS)
    assert {k: race.settings[k] for k in RACE_SETTINGS} == RACE_SETTINGS and race.settings["relation"] == "capital"
    assert race.eval_steps == list(range(0, 101, 5))
    assert all(c.shape == (30, 21) for c in race.curves.values())
    assert len(set(race.ffn_params.values())) == 1 and len(set(race.model_params.values())) == 1
    again = run_race(["relu"], [0], progress=False)
    assert (again.curves["relu"].double() - race.curves["relu"][:1]).abs().max() < 0.1


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("frozen", [False, True])
def test_saved_activation_names_match_the_count(variant, frozen):
    d, d_ff = 6, 10
    ffn = FFN.from_variant(variant, d, d_ff, bias=True)
    ffn.requires_grad_(not frozen)
    x = torch.randn(4, d, requires_grad=True)
    names = saved_activation_names(ffn, x)
    saved = measure_saved_tensors(lambda: ffn(x), exclude=ffn).per_token(4)
    assert saved == sum(d if n == "x" else d_ff for n in names)
    if not frozen:
        assert saved == saved_per_token(variant, d, d_ff)
        assert names[0] == "x"
    else:
        assert "x" not in names and not any(n.startswith("h") for n in names)


def test_saved_activation_names_examples_and_bad_input():
    x = torch.randn(3, 4, requires_grad=True)
    assert saved_activation_names(FFN.from_variant("relu", 4), x) == ["x", "φ(a)"]
    assert saved_activation_names(FFN.from_variant("swiglu", 4), x) == ["x", "a", "φ(a)", "b", "h = φ(a)·b"]
    assert saved_activation_names(FFN.from_variant("bilinear", 4), x) == ["x", "a = φ(a)", "b", "h = φ(a)·b"]
    with pytest.raises(TypeError, match="ffn must be a helpers.ffn.FFN"):
        saved_activation_names(torch.nn.Linear(4, 4), x)


def test_gate_gradients_ignore_the_callers_autograd_state():
    a, b, g = (torch.randn(5, dtype=torch.float64) for _ in range(3))
    expected = gate_gradients(a, b, g)
    with torch.no_grad():
        assert all(torch.equal(u, v) for u, v in zip(gate_gradients(a, b, g), expected))
    with torch.inference_mode():
        ai, bi, gi = a.clone(), b.clone(), g.clone()
        assert all(torch.equal(u, v) for u, v in zip(gate_gradients(ai, bi, gi), expected))


def test_run_mean_is_the_mean_over_evaluations():
    data = make_dataset(load_facts(relations=["continent"])[:16])
    result = compare_variants(data, ["relu"], [0, 1], d_model=8, n_heads=2, steps=4, eval_every=2, progress=False)
    torch.testing.assert_close(result.run_mean("relu"), result.curves["relu"].mean(dim=1))
    assert result.run_mean("relu").shape == (2,)


def test_shazeer_tables_cover_the_same_variants():
    assert set(SHAZEER_2020_65K) == set(SHAZEER_2020_524K) == set(VARIANTS) - {"gelu_tanh"}
    assert min(SHAZEER_2020_65K, key=SHAZEER_2020_65K.get) == "geglu"
    assert max(SHAZEER_2020_65K, key=SHAZEER_2020_65K.get) == "relu"
