import math
import pytest
import torch
import torch.nn.functional as F

from helpers.costs import measure_saved_tensors
from helpers.facts import load_facts, make_dataset
from helpers.ffn import FFN, VARIANTS
from helpers.costs import saved_per_token
from helpers.gating import (GROUP, RACE_LRS, RACE_RESULTS_PATH, RACE_SEEDS, RACE_SETTINGS, RACE_SHARED_LR,
                            RACE_VARIANTS, SHAZEER_2020_65K, SHAZEER_2020_65K_SD, SHAZEER_2020_524K, TUNING_SEEDS,
                            FusedGate, VariantComparison, answer_loss, compare_variants, fused_gate_forward,
                            gate_gradients, load_race, main, make_race, race_data, race_family, run_race,
                            saved_activation_names, save_race, shazeer_family, stalled, sweep_lr, sweep_table,
                            welch_from_summary, failed_runs, LrSweep, FRESH_TUNED_BLOCKS,
                            fresh_tuned_path, init_output_rms, pool_races)
from helpers.stats import holm, welch
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


def test_welch_from_summary_is_welch_on_the_runs():
    a = torch.tensor([1.0, 1.2, 0.9, 1.1], dtype=torch.float64)
    b = torch.tensor([2.0, 2.5, 1.7, 2.2, 2.1, 1.9][:4], dtype=torch.float64)
    direct = welch(a, b)
    summary = welch_from_summary(a.mean().item(), a.std().item(), b.mean().item(), b.std().item(), 4)
    for field in ("diff", "se", "df", "t", "p"):
        assert getattr(summary, field) == pytest.approx(getattr(direct, field), rel=1e-12)
    assert welch_from_summary(1.0, 0.1, 2.0, 0.1, 4).df == pytest.approx(6)      # equal spreads: 2·(n − 1)
    with pytest.raises(ValueError, match="n_runs"):
        welch_from_summary(1.0, 0.1, 2.0, 0.1, 1)
    with pytest.raises(ValueError, match="sd_b must be a positive number"):
        welch_from_summary(1.0, 0.1, 2.0, 0.0, 4)


def test_shazeer_family_every_pair_lower_first():
    family = shazeer_family({"a": 2.0, "b": 1.0, "c": 1.05}, {"a": 0.1, "b": 0.01, "c": 0.02})
    assert list(family) == [("b", "c"), ("b", "a"), ("c", "a")]
    assert all(w.diff < 0 for w in family.values())
    with pytest.raises(ValueError, match="at least two entries"):
        shazeer_family({"a": 1.0}, {"a": 0.1})
    with pytest.raises(ValueError, match="sds lacks"):
        shazeer_family({"a": 1.0, "b": 2.0}, {"a": 0.1})


def test_shazeer_65k_under_holm():
    """The paper's 65k column (four runs, sd in parentheses), all 28 pairs as Welch tests with Holm: every gated
    variant without a sigmoid is below every dense FFN and GLU; inside that group only GEGLU-Bilinear resolves."""
    assert set(SHAZEER_2020_65K_SD) == set(SHAZEER_2020_65K)
    family = shazeer_family()
    assert len(family) == 28
    t = {pair: round(w.t, 1) for pair, w in family.items()}
    assert t[("geglu", "reglu")] == -4.4 and t[("geglu", "swiglu")] == -0.4 and t[("glu", "relu")] == -3.8
    verdicts = dict(zip(family, holm({f"{a} - {b}": w for (a, b), w in family.items()})))
    resolved = {pair for pair, v in verdicts.items() if v.resolved}
    gated, others = ("bilinear", "reglu", "geglu", "swiglu"), ("relu", "gelu", "swish", "glu")
    assert resolved == {(g, o) for g in gated for o in others} | {("geglu", "bilinear")}
    assert all(verdicts[pair].verdict == "lower" for pair in resolved)


def test_race_settings_save_load_and_select(tmp_path):
    small = run_race(["relu", "swiglu"], [0, 1], lr={"relu": 0.01, "swiglu": 0.02}, steps=4, eval_every=2,
                     progress=False)
    assert small.settings == {**RACE_SETTINGS, "steps": 4, "eval_every": 2, "relation": "capital",
                              "lr": {"relu": 0.01, "swiglu": 0.02}}
    assert small.lr("swiglu") == 0.02 and small.lr_sweep is None
    path = save_race(small, tmp_path / "race.json")
    back = load_race(path)
    assert back.variants == ["relu", "swiglu"] and back.seeds == [0, 1] and back.eval_steps == [0, 2, 4]
    for v in back.variants:
        torch.testing.assert_close(back.curves[v], small.curves[v], atol=1e-5, rtol=0)
    assert back.d_ff == small.d_ff and back.ffn_params == small.ffn_params and back.lr("relu") == 0.01
    assert back.settings["environment"]["threads"] == 1
    one = back.select([1])
    assert one.seeds == [1] and torch.equal(one.curves["relu"], back.curves["relu"][1:])
    with pytest.raises(ValueError, match="seed 5 was not run"):
        back.select([5])
    with pytest.raises(ValueError, match="unknown settings"):
        run_race(["relu"], [0], lr=0.01, width=3)
    with pytest.raises(FileNotFoundError, match="python -m helpers.gating --race-results"):
        load_race(tmp_path / "missing.json")


def test_one_lr_per_variant_is_what_each_trains_at():
    data = make_dataset(load_facts(relations=["continent"])[:16])
    kwargs = dict(d_model=8, n_heads=2, steps=3, eval_every=3, progress=False)
    mixed = compare_variants(data, ["relu", "swiglu"], [0], lr={"relu": 0.01, "swiglu": 0.03}, **kwargs)
    for v, lr in (("relu", 0.01), ("swiglu", 0.03)):
        alone = compare_variants(data, [v], [0], lr=lr, **kwargs)
        assert torch.equal(mixed.curves[v], alone.curves[v])
    with pytest.raises(ValueError, match=r"lr gives no learning rate for \['swiglu'\]"):
        compare_variants(data, ["relu", "swiglu"], [0], lr={"relu": 0.01}, **kwargs)


def test_sweep_picks_the_lowest_mean_and_the_race_uses_it(tmp_path):
    race = make_race(["relu", "geglu"], [0, 1], lrs=[0.002, 0.02], tuning_seeds=[100], steps=6, eval_every=3,
                     progress=False)
    sweep = race.lr_sweep
    assert sweep.lrs == [0.002, 0.02] and sweep.seeds == [100] and sweep.run_mean["relu"].shape == (2, 1)
    for v in ("relu", "geglu"):
        assert race.lr(v) == sweep.best_lr(v) == sweep.lrs[int(sweep.mean(v).argmin())]
    again = sweep_lr(["relu"], [0.002, 0.02], [100], steps=6, eval_every=3, progress=False)
    assert torch.equal(again.run_mean["relu"], sweep.run_mean["relu"])
    assert race.at_shared_lr.lr("geglu") == RACE_SHARED_LR and race.at_shared_lr.seeds == [0, 1]
    loaded = load_race(save_race(race, tmp_path / "r.json"))
    back = loaded.lr_sweep
    torch.testing.assert_close(back.run_mean["geglu"], sweep.run_mean["geglu"], atol=1e-5, rtol=0)
    torch.testing.assert_close(loaded.at_shared_lr.curves["relu"], race.at_shared_lr.curves["relu"], atol=1e-5,
                               rtol=0)
    assert loaded.select([1]).at_shared_lr.seeds == [1]
    assert "0.002" in sweep_table(sweep) and sweep_table(sweep).count("*") == 2
    with pytest.raises(ValueError, match="tuning seeds must not be race seeds"):
        make_race(["relu"], [0, 100], lrs=[0.01], tuning_seeds=[100], steps=3, progress=False)


def test_race_command_on_a_small_run(tmp_path, capsys):
    out = tmp_path / "small.json"
    assert main(["--race-results", "--seeds", "0", "--tuning-seeds", "100", "--lrs", "0.01", "0.02",
                 "--variants", "relu", "geglu", "--steps", "3", "--out", str(out)]) == 0
    assert "wrote 2 variants × 1 seeds (lr swept over 2 rates on 1 seeds)" in capsys.readouterr().out
    made = load_race(out)
    direct = compare_variants(race_data(), ["relu", "geglu"], [0], progress=False,
                              lr={v: made.lr(v) for v in ("relu", "geglu")},
                              **{**RACE_SETTINGS, "steps": 3, "eval_every": 3})
    assert made.eval_steps == [0, 3]
    for v in ("relu", "geglu"):
        torch.testing.assert_close(made.curves[v], direct.curves[v], atol=1e-5, rtol=0)


def test_the_stored_race_is_the_notebooks_and_reproduces():
    """The file notebook 04 reads: a sweep of RACE_LRS on TUNING_SEEDS, then 8 variants × 30 seeds, each at its
    best rate; seed 0 of ReLU trains to the same curve here (another CPU kernel moves it by a few hundredths)."""
    race = load_race()
    assert race.variants == list(RACE_VARIANTS) and race.seeds == list(RACE_SEEDS)
    assert {k: race.settings[k] for k in RACE_SETTINGS} == RACE_SETTINGS and race.settings["relation"] == "capital"
    assert race.lr_sweep.lrs == list(RACE_LRS) and race.lr_sweep.seeds == list(TUNING_SEEDS)
    assert race.at_shared_lr.lr("relu") == RACE_SHARED_LR and race.at_shared_lr.seeds == race.seeds
    assert all(race.lr(v) == race.lr_sweep.best_lr(v) for v in RACE_VARIANTS)
    assert race.eval_steps == list(range(0, 101, 5))
    assert all(c.shape == (30, 21) for c in race.curves.values())
    assert len(set(race.ffn_params.values())) == 1 and len(set(race.model_params.values())) == 1
    again = run_race(["relu"], [0], lr=race.lr("relu"), progress=False)
    assert (again.curves["relu"] - race.curves["relu"][:1]).abs().max() < 0.1


def test_fused_gate_keeps_a_and_b_and_gives_the_same_gradients():
    torch.manual_seed(0)
    for variant in ("glu", "bilinear", "reglu", "geglu", "swiglu"):
        ffn = FFN.from_variant(variant, 6, 10, bias=True).double()
        x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
        fused = fused_gate_forward(ffn, x)
        torch.testing.assert_close(fused, ffn(x))
        grads = torch.autograd.grad(fused.pow(2).sum(), [x, *ffn.parameters()])
        plain = torch.autograd.grad(ffn(x).pow(2).sum(), [x, *ffn.parameters()])
        for g, p in zip(grads, plain):
            torch.testing.assert_close(g, p)
        saved = measure_saved_tensors(lambda: fused_gate_forward(ffn, x), exclude=ffn).per_token(4, 8)
        assert saved == 6 + 3 * 10                                    # x, a, b and W2's input h
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: FusedGate.apply(a, b, "silu"),
                                    (a.double().detach().requires_grad_(), b.double().detach().requires_grad_()))
    with pytest.raises(ValueError, match="gated"):
        fused_gate_forward(FFN.from_variant("relu", 4), torch.randn(2, 4))


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
    assert saved_activation_names(FFN.from_variant("bilinear", 4), x) == ["x", "a (= φ(a))", "b", "h = φ(a)·b"]
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


def test_race_family_reads_each_variant_against_relu_and_the_groups():
    curves = {v: torch.full((4, 3), float(i)) + torch.arange(4.0)[:, None] * 0.1 * (1 + (i % 2))
              for i, v in enumerate(RACE_VARIANTS)}
    race = VariantComparison(list(RACE_VARIANTS), [0, 1, 2, 3], [0, 5, 10], curves)
    family = race_family(race, suffix=", tuned")
    assert list(family)[0] == "GELU − ReLU, tuned" and list(family)[-1] == GROUP + ", tuned" and len(family) == 8
    assert family["GELU − ReLU, tuned"].mean == pytest.approx(1.0 + 0.15)
    group = torch.stack([race.run_mean(v) for v in ("bilinear", "reglu", "geglu", "swiglu")]).mean(0) - \
        torch.stack([race.run_mean(v) for v in ("relu", "gelu", "swish")]).mean(0)
    torch.testing.assert_close(family[GROUP + ", tuned"].diffs, group.double())
    assert len(race_family(race.select([0, 1]))) == 8
    assert stalled(race, threshold=4.15) == {v: (4 if i >= 5 else (2 if i == 4 else 0)) for i, v in
                                             enumerate(RACE_VARIANTS)}


def test_failed_runs_counts_run_means_above_the_threshold():
    sweep = LrSweep(["relu", "swiglu"], [0.01, 0.05], [0, 1, 2],
                    {"relu": torch.tensor([[5.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
                     "swiglu": torch.tensor([[1.0, 1.0, 1.0], [4.5, 1.0, 4.01]])})
    assert failed_runs(sweep, 0.05) == {"relu": 0, "swiglu": 2}
    assert failed_runs(sweep, 0.01) == {"relu": 1, "swiglu": 0}
    with pytest.raises(ValueError, match="lr"):
        failed_runs(sweep, 0.02)
    stored = failed_runs(load_race().lr_sweep, 0.056)
    assert sum(stored[v] for v in ("bilinear", "reglu", "geglu", "swiglu")) == 9
    assert sum(stored[v] for v in ("relu", "gelu", "swish")) == 0


def test_catch_gate_gradients_matches_the_closed_forms_and_removes_its_hooks():
    from helpers.gating import catch_gate_gradients
    torch.manual_seed(0)
    ffn = FFN.from_variant("swiglu", d_model=8, bias=True)
    x, target = torch.randn(5, 8), torch.randn(5, 8)
    caught = catch_gate_gradients(ffn, x, target)
    assert caught.a.shape == caught.grad_b.shape == caught.grad_hidden.shape == (5, ffn.d_ff)
    expected_a, expected_b = gate_gradients(caught.a, caught.b, caught.grad_hidden)
    torch.testing.assert_close(caught.grad_a, expected_a)
    torch.testing.assert_close(caught.grad_b, expected_b)
    assert not ffn.w1._forward_hooks and not ffn.w2._forward_hooks and not ffn.w3._forward_hooks
    with pytest.raises(ValueError, match="gated"):
        catch_gate_gradients(FFN.from_variant("relu", d_model=8), x, target)
    with pytest.raises((TypeError, ValueError), match="target"):
        catch_gate_gradients(ffn, x, torch.randn(5, 3))


def test_the_tuned_arm_on_fresh_seeds_command_and_pooling(tmp_path, capsys):
    out = tmp_path / "fresh.json"
    assert main(["--race-results", "--at-stored-rates", "--seeds", "30", "31", "--variants", "relu", "swiglu",
                 "--steps", "3", "--out", str(out)]) == 0
    assert "wrote 2 variants × 2 seeds at the stored tuned rates" in capsys.readouterr().out
    made, stored = load_race(out), load_race()
    assert made.lr_sweep is None and made.at_shared_lr is None and made.seeds == [30, 31]
    assert {v: made.lr(v) for v in made.variants} == {v: stored.lr(v) for v in ("relu", "swiglu")}
    direct = run_race(["relu", "swiglu"], [30, 31], lr={v: stored.lr(v) for v in ("relu", "swiglu")},
                      steps=3, eval_every=3, progress=False)
    for v in ("relu", "swiglu"):
        torch.testing.assert_close(made.curves[v], direct.curves[v], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="share seeds"):
        pool_races([direct, made])
    other = run_race(["relu", "swiglu"], [32], lr=0.01, steps=3, eval_every=3, progress=False)
    with pytest.raises(ValueError, match="same learning rate"):
        pool_races([direct, other])
    again = run_race(["relu", "swiglu"], [32], lr={v: stored.lr(v) for v in ("relu", "swiglu")},
                     steps=3, eval_every=3, progress=False)
    pooled = pool_races([direct, again])
    assert pooled.seeds == [30, 31, 32] and pooled.curves["relu"].shape == (3, 2)
    torch.testing.assert_close(pooled.curves["swiglu"][2], again.curves["swiglu"][0])
    assert fresh_tuned_path(range(30, 60)).name == "gating_race_tuned_seeds_30-59.json"


def test_the_stored_fresh_tuned_blocks():
    """The fresh tuned blocks notebook 04 reads: 8 variants × 30 seeds each at the stored race's tuned rates."""
    stored = load_race()
    for seeds in FRESH_TUNED_BLOCKS:
        block = load_race(fresh_tuned_path(seeds))
        assert block.seeds == list(seeds) and block.variants == stored.variants
        assert all(block.lr(v) == stored.lr(v) for v in stored.variants)
        assert block.eval_steps == stored.eval_steps


def test_the_shared_rate_command_on_a_small_run(tmp_path, capsys):
    from helpers.gating import shared_path
    out = tmp_path / "shared.json"
    assert main(["--race-results", "--at-shared-lr", "0.01", "--seeds", "30", "31", "--variants", "relu", "swiglu",
                 "--steps", "3", "--out", str(out)]) == 0
    assert "wrote 2 variants × 2 seeds at lr 0.01" in capsys.readouterr().out
    made = load_race(out)
    assert made.lr_sweep is None and made.at_shared_lr is None and made.seeds == [30, 31]
    assert made.lr("relu") == made.lr("swiglu") == 0.01
    direct = run_race(["relu", "swiglu"], [30, 31], lr=0.01, steps=3, eval_every=3, progress=False)
    for v in ("relu", "swiglu"):
        torch.testing.assert_close(made.curves[v], direct.curves[v], atol=1e-5, rtol=0)
    with pytest.raises(SystemExit):
        main(["--race-results", "--at-shared-lr", "0.01", "--at-stored-rates", "--seeds", "30", "--steps", "3"])
    assert shared_path(0.005, range(30, 60)).name == "gating_race_shared_lr_0.005_seeds_30-59.json"


def test_the_stored_shared_blocks_pool_to_60_seeds_at_each_slow_rate():
    """The shared-rate control notebook 04 reads: seeds 0-59 at lr 0.005 and at lr 0.01, every variant."""
    from helpers.gating import shared_pools
    stored = load_race()
    pools = shared_pools(stored)
    assert sorted(pools) == [0.005, 0.01]
    for lr, pooled in pools.items():
        assert pooled.seeds == list(range(60)) and pooled.variants == stored.variants
        assert all(pooled.lr(v) == lr for v in pooled.variants) and pooled.eval_steps == stored.eval_steps
    torch.testing.assert_close(pools[0.005].select(list(range(30))).curves["relu"], stored.at_shared_lr.curves["relu"])


def test_closed_gate_ratios_repeat_the_notebook_cell_per_seed():
    from helpers.gating import closed_gate_ratios, catch_gate_gradients
    ratios = closed_gate_ratios([1, 2])
    assert len(ratios["content"]) == len(ratios["gate"]) == 2
    torch.manual_seed(1)
    ffn = FFN.from_variant("swiglu", d_model=16, bias=True)
    with torch.no_grad():
        ffn.w1.bias[:6] -= 5.0
    caught = catch_gate_gradients(ffn, torch.randn(6, 16), target=torch.randn(6, 16))
    closed = caught.a < -3
    expected = caught.grad_a[~closed].abs().mean() / caught.grad_a[closed].abs().mean()
    assert ratios["gate"][0] == pytest.approx(expected.item(), rel=1e-5)
    assert all(g > c > 1 for g, c in zip(ratios["gate"], ratios["content"]))   # both starved, the gate more


def test_sweep_group_gaps_are_the_group_mean_differences_per_rate():
    from helpers.gating import DENSE, GATED_NO_SIGMOID, LrSweep, sweep_gap_lines, sweep_group_gaps
    seeds, lrs = [0, 1, 2], [0.01, 0.02]
    run_mean = {v: torch.full((2, 3), 2.0) for v in DENSE}
    run_mean.update({v: torch.tensor([[1.5, 1.5, 2.5], [3.0, 3.0, 3.0]]) for v in GATED_NO_SIGMOID})
    sweep = LrSweep(list(DENSE + GATED_NO_SIGMOID), lrs, seeds, run_mean)
    gaps = sweep_group_gaps(sweep)
    assert list(gaps) == lrs
    assert gaps[0.01].mean == pytest.approx(-1 / 6) and gaps[0.01].lower == 2
    assert gaps[0.02].mean == pytest.approx(1.0) and gaps[0.02].lower == 0
    assert sweep_gap_lines(sweep).splitlines() == ["gap       -0.17  +1.00 ", "lower in    2/3    0/3 "]
    with pytest.raises(ValueError, match="swiglu"):
        sweep_group_gaps(LrSweep(list(DENSE), lrs, seeds, {v: run_mean[v] for v in DENSE}))


def test_the_stored_sweeps_gap_row():
    from helpers.gating import load_race, sweep_group_gaps
    gaps = sweep_group_gaps(load_race().lr_sweep)
    assert [round(g.mean, 2) for g in gaps.values()] == [-0.11, -0.11, -0.09, -0.07, -0.02, -0.02, 0.08, 1.14, 0.7]


def test_the_step_size_control_on_a_small_run(tmp_path, capsys):
    """The control's command (dense variants only, at 1.05 × the slow rate) and its family, on 2 seeds × 3 steps."""
    from helpers.gating import DENSE, GATED_NO_SIGMOID, dense_faster_gaps, step_control_lr
    assert (step_control_lr(1.05), step_control_lr(1.1)) == (0.00525, 0.0055)
    out = tmp_path / "control.json"
    assert main(["--race-results", "--at-shared-lr", str(step_control_lr(1.05)), "--variants", *DENSE,
                 "--seeds", "0", "1", "--steps", "3", "--out", str(out)]) == 0
    assert "wrote 3 variants × 2 seeds at lr 0.00525" in capsys.readouterr().out
    control = load_race(out)
    slow = run_race(RACE_VARIANTS, [0, 1], lr=RACE_SHARED_LR, steps=3, eval_every=3, progress=False)
    family = dense_faster_gaps(slow, {1.05: control})
    assert list(family) == ["gated (not GLU) − dense, dense alone ×1.05"]
    gated = torch.stack([slow.run_mean(v) for v in GATED_NO_SIGMOID]).mean(dim=0)
    dense = torch.stack([control.run_mean(v) for v in DENSE]).mean(dim=0)
    assert family["gated (not GLU) − dense, dense alone ×1.05"].mean == pytest.approx(float((gated - dense).mean()), abs=1e-5)
    with pytest.raises(ValueError, match="seeds"):
        dense_faster_gaps(slow.select([1, 0]), {1.05: control})


def test_the_stored_step_size_control():
    """Seeds 0-59, dense variants at 0.00525 and 0.0055; read against the gated group at 0.005 on the same seeds."""
    from helpers.gating import DENSE, shared_pools, dense_faster_gaps, dense_at_faster_rates
    controls = dense_at_faster_rates()
    assert sorted(controls) == [1.05, 1.1]
    for m, c in controls.items():
        assert c.seeds == list(range(60)) and c.variants == list(DENSE)
        assert all(c.lr(v) == round(0.005 * m, 10) for v in DENSE)
    family = dense_faster_gaps(shared_pools()[0.005], controls)
    assert [p.mean for p in family.values()] == pytest.approx([0.015, 0.101], abs=0.001)
    assert [p.lower for p in family.values()] == [25, 14]


def _flat_race(variants, seeds, lr, level):
    """A made-up race: every run of ``variants`` at ``lr`` flat at ``level[v]`` + the seed / 10."""
    from helpers.gating import VariantComparison
    curves = {v: torch.tensor([[level[v] + s / 10] * 2 for s in seeds], dtype=torch.float64) for v in variants}
    return VariantComparison(list(variants), list(seeds), [0, 5], curves, settings={"lr": lr})


def test_both_faster_gap_and_faster_rate_gains_pair_the_groups_by_seed():
    from helpers.gating import DENSE, GATED_NO_SIGMOID, both_faster_gap, faster_rate_gains
    seeds = [0, 1, 2]
    slow = _flat_race(DENSE + GATED_NO_SIGMOID, seeds, 0.005, {**dict.fromkeys(DENSE, 3.0),
                                                               **dict.fromkeys(GATED_NO_SIGMOID, 2.9)})
    dense_fast = _flat_race(DENSE, seeds, 0.00525, dict.fromkeys(DENSE, 2.9))
    gated_fast = _flat_race(GATED_NO_SIGMOID, seeds, 0.00525, dict.fromkeys(GATED_NO_SIGMOID, 2.8))
    family = both_faster_gap(slow, dense_fast, gated_fast)
    assert list(family) == ["gated (not GLU) − dense, both ×1.05"]
    assert family["gated (not GLU) − dense, both ×1.05"].mean == pytest.approx(-0.1)
    gains = faster_rate_gains(slow, dense_fast, gated_fast)
    assert list(gains) == ["gated (not GLU): 0.00525 − 0.005", "dense: 0.00525 − 0.005"]
    assert all(g.mean == pytest.approx(-0.1) for g in gains.values())
    with pytest.raises(ValueError, match="seeds"):
        both_faster_gap(slow, dense_fast, _flat_race(GATED_NO_SIGMOID, [0, 1], 0.00525,
                                                       dict.fromkeys(GATED_NO_SIGMOID, 2.8)))
    with pytest.raises(ValueError, match="rate"):
        both_faster_gap(slow, dense_fast, _flat_race(GATED_NO_SIGMOID, seeds, 0.0055,
                                                       dict.fromkeys(GATED_NO_SIGMOID, 2.8)))


def test_block_gaps_split_an_arm_into_blocks_of_seeds():
    from helpers.gating import DENSE, GATED_NO_SIGMOID, GROUP, block_gaps
    arm = _flat_race(DENSE + GATED_NO_SIGMOID, list(range(6)), 0.005,
                     {**dict.fromkeys(DENSE, 3.0), **dict.fromkeys(GATED_NO_SIGMOID, 2.5)})
    gaps = block_gaps({"slow": arm}, size=3)
    assert len(gaps["slow"]) == 2 and all(g.mean == pytest.approx(-0.5) and g.n == 3 for g in gaps["slow"])
    assert GROUP in race_family(arm)


def test_retrain_check_reproduces_a_stored_curve(tmp_path):
    from helpers.gating import retrain_check
    stored = run_race(["relu"], [3, 4], lr=0.01, steps=3, eval_every=3, progress=False)
    live, gap = retrain_check(stored, 4)
    assert live.shape == stored.curves["relu"][1].shape and gap == 0.0


def test_the_stored_gated_step_control():
    """The symmetric arm of notebook 04's step-size control: the gated (not GLU) variants at 0.00525 on seeds 0-59,
    beside the stored dense ones at the same rate."""
    from helpers.gating import GATED_NO_SIGMOID, gated_at_faster_rate, dense_at_faster_rates
    gated, dense = gated_at_faster_rate(), dense_at_faster_rates()[1.05]
    assert gated.variants == list(GATED_NO_SIGMOID) and gated.seeds == dense.seeds == list(range(60))
    assert all(gated.lr(v) == 0.00525 == dense.lr("relu") for v in gated.variants)
    assert gated.eval_steps == dense.eval_steps


def test_shazeer_table_figure_draws_every_variant():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from helpers.gating import shazeer_table_figure
    fig = shazeer_table_figure()
    left, right = fig.axes[:2]
    assert len(left.get_yticks()) == len(SHAZEER_2020_65K) == len(right.lines)
    assert sorted(line.get_xdata()[0] for line in right.lines) == sorted(SHAZEER_2020_524K.values())
    plt.close(fig)


def test_init_output_rms_is_the_ffn_output_of_the_race_model_before_any_step():
    rms = init_output_rms(["relu", "swiglu"], [0, 3])
    assert set(rms) == {"relu", "swiglu"} and all(r.shape == (2,) for r in rms.values())
    data = race_data()
    torch.manual_seed(3)
    config = GPTConfig(len(data.vocab), max_len=data.ids.shape[1], variant="swiglu",
                       **{k: RACE_SETTINGS[k] for k in ("d_model", "n_layers", "n_heads", "bias")})
    model = TinyGPT(config).eval()
    with torch.no_grad():                     # the block's own path: embeddings, attention, then ln2 into the FFN
        x = model.tok_emb(data.ids) + model.pos_emb(torch.arange(data.ids.shape[1]))
        block = model.blocks[0]
        x = x + block.attn(block.ln1(x))
        out = block.ffn(block.ln2(x))
    assert rms["swiglu"][1].item() == pytest.approx(out.pow(2).mean().sqrt().item(), rel=1e-6)
    assert (rms["swiglu"] < rms["relu"]).all()          # the gated product starts smaller (default nn.Linear init)
    with pytest.raises(ValueError):
        init_output_rms(["nope"], [0])


def test_rounding_t_range_brackets_the_printed_t():
    """Notebook 04, cells 37-38: GEGLU − ReGLU's |t| within Table 1's rounding (review 04-round25, CONFUSING 3)."""
    from helpers.gating import rounding_t_range, shazeer_family
    low, high = rounding_t_range("geglu", "reglu")
    t = abs(shazeer_family()["geglu", "reglu"].t)
    assert low < t < high
    assert (round(low, 1), round(high, 1)) == (3.5, 5.6)


def test_final_loss_gap_reads_the_last_step():
    """The tuned race scored at step 100 (review 04-round25, WRONG 1): the same runs, another score."""
    from helpers.gating import DENSE, GATED_NO_SIGMOID, final_loss_gap, load_race, race_arms
    tuned = race_arms(load_race())["tuned"]
    gap = final_loss_gap(tuned)
    by_hand = (torch.stack([tuned.curves[v][:, -1] for v in GATED_NO_SIGMOID]).mean(0)
               - torch.stack([tuned.curves[v][:, -1] for v in DENSE]).mean(0))
    torch.testing.assert_close(gap.diffs, by_hand.double())
    assert len(gap.diffs) == 90 and round(gap.mean, 3) == -0.049


def test_takeoff_split_counts_stalled_runs_and_drops_their_seeds():
    from helpers.gating import DENSE, GATED_NO_SIGMOID, FRESH_TUNED_BLOCKS, fresh_tuned_path, pool_races, split_stalled_seeds
    tuned = pool_races([load_race(), *(load_race(fresh_tuned_path(s)) for s in FRESH_TUNED_BLOCKS)])
    split = split_stalled_seeds(tuned)
    assert split.stuck == {v: int((tuned.final(v) > 4.0).sum()) for v in tuned.variants}
    assert split.stuck == {"relu": 3, "gelu": 4, "swish": 4, "glu": 1, "bilinear": 2, "reglu": 2, "geglu": 1,
                           "swiglu": 6}
    assert split.seeds == 12 and split.rest_gap.n == split.all_gap.n - 12 == 78
    assert split.seeds_any == 13       # GLU's stalled run sits on a seed of its own (review 04-round31, WRONG 1)
    every = torch.stack([tuned.final(v) > 4.0 for v in tuned.variants]).any(dim=0)
    assert split.seeds_any == int(every.sum())
    assert split.all_gap.mean == pytest.approx(race_family(tuned)[GROUP].mean)
    assert split.rest_gap.mean == pytest.approx(0.108, abs=5e-4) and abs(split.rest_final.mean) < 5e-4
    assert split.sd_stuck > 4 * split.sd_rest
    none = split_stalled_seeds(tuned, threshold=100.0)
    assert none.seeds == 0 and none.rest_gap.n == len(tuned.seeds) and set(DENSE + GATED_NO_SIGMOID) <= set(none.stuck)
    assert math.isnan(none.sd_stuck) and none.seeds_any == 0      # no stalled seed: no sd, and no warning


def test_finetune_group_gaps_from_shazeer_tables():
    from helpers.gating import FINETUNE_SCORES, SHAZEER_2020_FINETUNE, finetune_group_gaps
    gaps = finetune_group_gaps()
    assert list(gaps) == list(FINETUNE_SCORES) and len(SHAZEER_2020_FINETUNE) == 8
    assert gaps["GLUE"] == pytest.approx((84.12 + 83.79 + 84.36 + 84.67) / 4 - (83.80 + 83.86 + 83.60) / 3)
    flat = {v: (1.0, 2.0, 3.0, 4.0) for v in SHAZEER_2020_FINETUNE}
    assert all(g == pytest.approx(0.0) for g in finetune_group_gaps(flat).values())


def test_w2_scale_multiplies_the_ffn_output_at_initialisation():
    from helpers.gating import run_race
    plain = run_race(["swiglu"], [0], lr=0.005, steps=5, eval_every=5, progress=False)
    scaled = run_race(["swiglu"], [0], lr=0.005, steps=5, eval_every=5, progress=False, w2_scale={"swiglu": 2.0})
    assert scaled.settings["w2_scale"] == {"swiglu": 2.0} and "w2_scale" not in plain.settings
    assert float((scaled.curves["swiglu"][0] - plain.curves["swiglu"][0]).abs().max()) > 1e-4
    with pytest.raises(ValueError):
        run_race(["swiglu"], [0], lr=0.005, steps=5, eval_every=5, progress=False, w2_scale={"swiglu": -1.0})


def test_the_stored_init_rms_control_and_its_family():
    from helpers.gating import (GATED_NO_SIGMOID, init_rms_control, init_rms_controls, init_rms_scale,
                                output_size_family, race_arms, load_race)
    matched = init_rms_control()
    assert matched.variants == ["swiglu"] and matched.seeds == list(range(30)) and matched.lr("swiglu") == 0.005
    assert matched.settings["w2_scale"]["swiglu"] == pytest.approx(init_rms_scale("swiglu"), rel=1e-3)
    slow = race_arms(load_race())["lr 0.005"]
    family = output_size_family(slow, matched)
    assert list(family) == ["matched SwiGLU − SwiGLU", "matched SwiGLU − ReLU"]
    assert all(p.n == 30 for p in family.values())
    expected = (matched.run_mean("swiglu") - slow.select(matched.seeds).run_mean("swiglu")).mean()
    assert family["matched SwiGLU − SwiGLU"].mean == pytest.approx(float(expected))


def test_the_init_rms_control_covers_every_gated_variant():
    """Review 04-round31, CONFUSING 2: Bilinear, ReGLU and GEGLU matched too; the group row."""
    from helpers.gating import (DENSE, GATED_NO_SIGMOID, GROUP, init_rms_controls, init_rms_scale,
                                output_size_family, race_arms, load_race)
    from helpers.stats import holm
    matched = init_rms_controls()
    assert list(matched) == list(GATED_NO_SIGMOID)
    for v, runs in matched.items():
        assert runs.seeds == list(range(30)) and runs.lr(v) == 0.005
        assert runs.settings["w2_scale"][v] == pytest.approx(init_rms_scale(v), rel=1e-3)
    slow = race_arms(load_race())["lr 0.005"]
    family = output_size_family(slow, matched)
    assert len(family) == 9 and list(family)[-1] == f"matched {GROUP}"
    same = slow.select(list(range(30)))
    gated = torch.stack([matched[v].run_mean(v) for v in GATED_NO_SIGMOID]).mean(0)
    dense = torch.stack([same.run_mean(v) for v in DENSE]).mean(0)
    assert family[f"matched {GROUP}"].mean == pytest.approx(float((gated - dense).mean()))
    verdicts = {v.name: v for v in holm(family)}
    assert all(verdicts[f"matched {n} − ReLU"].resolved and verdicts[f"matched {n} − ReLU"].comparison.mean < 0
               for n in ("Bilinear", "ReGLU", "GEGLU", "SwiGLU"))
    assert verdicts[f"matched {GROUP}"].resolved and round(family[f"matched {GROUP}"].mean, 3) == -0.137


def test_the_stored_long_runs_start_as_the_race_does():
    from helpers.gating import long_runs, race_arms, load_race
    long = long_runs()
    assert long.eval_steps[-1] == 300 and long.seeds == [0, 1, 2, 3, 4] and long.lr("relu") == 0.005
    same = race_arms(load_race())["lr 0.005"].select(long.seeds)
    k = long.eval_steps.index(100) + 1
    for v in long.variants:
        assert float((long.curves[v][:, :k] - same.curves[v]).abs().max()) < 0.05


def test_race_family_with_controls_is_the_27_row_family_and_the_gains():
    """Notebook 04, cells 48-49 (review 04-round31, CONFUSING 4): one helper builds the family the cell prints."""
    from helpers.gating import (GROUP, both_faster_gap, dense_at_faster_rates, dense_faster_gaps,
                                faster_rate_gains, gated_at_faster_rate, race_arms, race_family_with_controls,
                                step_size_gains)
    arms = race_arms(load_race())
    family = race_family_with_controls(arms)
    assert len(family) == 27 and list(family)[:8] == [f"{row}, lr 0.005" for row in race_family(arms["lr 0.005"])]
    controls = dense_at_faster_rates()
    expected = {**dense_faster_gaps(arms["lr 0.005"], {1.05: controls[1.05]}),
                **both_faster_gap(arms["lr 0.005"], controls[1.05], gated_at_faster_rate())}
    assert list(family)[-2:] == list(expected)
    fast = family[f"{GROUP}, lr 0.02"]                      # review 04-r42: the fast shared-rate arm, seeds 0-39
    assert list(family)[-3] == f"{GROUP}, lr 0.02" and fast.n == 40 and fast.lower == 22
    assert fast.mean == pytest.approx(-0.0767, abs=5e-4)
    assert all(family[k].mean == pytest.approx(p.mean) for k, p in expected.items())
    assert family[f"{GROUP}, tuned"].n == 90
    gains = step_size_gains(arms["lr 0.005"])
    full = faster_rate_gains(arms["lr 0.005"], controls[1.05], gated_at_faster_rate())
    assert list(gains) == ["gated (not GLU)", "dense"]
    assert [p.mean for p in gains.values()] == pytest.approx([p.mean for p in full.values()])


def test_fast_shared_arm_is_every_variant_but_glu_at_0_02_on_seeds_0_to_39():
    """Review 04-r42: the shared-rate control near the tuned rates, stored in two blocks of 20 seeds."""
    from helpers.gating import FAST_SHARED_LR, fast_shared_arm, load_race
    fast = fast_shared_arm()
    assert FAST_SHARED_LR == 0.02 and fast.seeds == list(range(40)) and "glu" not in fast.variants
    assert all(fast.lr(v) == 0.02 for v in fast.variants)
    assert sorted(set(fast.d_ff.values())) == sorted(set(load_race().d_ff[v] for v in fast.variants))
