"""helpers.dictionary_study: the runs behind notebook 09's verdicts over models, a small run of the command, and the
shipped file's shape and its agreement with the recipe the module states."""
import json

import pytest
import torch

from helpers.dictionary import TopKDictionary, fvu
from helpers.dictionary_study import (ARM_LR, CONTROL_STEPS, LAYERS, MODELS, RECIPE, STUDY_PATH, affine_fvu, at_rate,
                                      rate_runs, rate_table, slot_edge_family,
                                      control_lengths, convergence_table, floor_table, gaussian_like, load_study,
                                      longest, main, pca_fvu, pca_projection, slot_mixture_like,
                                      sparse_structure_family, sparse_structure_table, superposition_family,
                                      superposition_table, tracking_family, tracking_lengths, tracking_table)
from helpers.stats import holm


def test_dense_yardsticks():
    gen = torch.Generator().manual_seed(0)
    basis = torch.randn(3, 10, generator=gen, dtype=torch.float64)
    y = torch.randn(200, 3, generator=gen, dtype=torch.float64) @ basis + 5.0    # lies in a 3-dim affine subspace
    assert pca_fvu(y[:150], y[150:], 3) < 1e-20 and pca_fvu(y[:150], y[150:], 2) > 0.01
    assert pca_projection(y[:150], y[150:], 3).shape == (50, 10)
    x = torch.randn(200, 4, generator=gen, dtype=torch.float64)
    A = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    assert affine_fvu(x[:150], x[:150] @ A + 1.0, x[150:], x[150:] @ A + 1.0) < 1e-20
    assert affine_fvu(x[:150], torch.relu(x[:150] @ A), x[150:], torch.relu(x[150:] @ A)) > 0.05


def test_gaussian_like_has_the_moments_of_its_model():
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(3000, 4, generator=gen) @ torch.randn(4, 4, generator=gen) + torch.tensor([1.0, -2.0, 0.0, 3.0])
    g = gaussian_like(y, 20_000, seed=3)
    assert g.shape == (20_000, 4) and g.dtype == torch.float32
    torch.testing.assert_close(g.mean(0), y.mean(0), atol=0.1, rtol=0)
    torch.testing.assert_close(torch.cov(g.T), torch.cov(y.T), atol=0.15, rtol=0.05)
    assert torch.equal(g, gaussian_like(y, 20_000, seed=3))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "small.json"
    main(["--models", "0", "--layers", "1", "--seeds", "2", "--steps", "30", "--no-toy", "--out", str(out)])
    return json.loads(out.read_text())


def test_a_small_run_of_the_command_writes_every_field(small):
    entry = small["models"]["0"]["1"]
    assert small["recipe"]["steps"] == 30 and small["recipe"]["seeds"] == 2 and small["layers"] == [1]
    assert set(entry) == {"dense", "transcoder", "sae_x", "sae_y", "sae_gaussian", "splice", "tracking"}
    assert set(entry["transcoder"]["steps"]) == {"3", "10", "30", "90"}
    assert entry["transcoder"]["steps"]["30"] == entry["transcoder"]["held_out"]
    assert len(entry["transcoder"]["held_out"]) == 2 and len(entry["transcoder"]["near_copies"]) == 1
    assert set(entry["tracking"]) == {"transcoder", "neurons", "sae_x", "random", "untrained_neurons"}
    assert entry["tracking"]["neurons"][0]["judged"] == 192
    assert entry["splice"]["original"][0] == 1.0                      # the shipped model knows every fact
    d = entry["dense"]
    assert 0 < d["pca_fit"] <= d["pca"] < d["affine"] < 1               # 8 fixed dims fit y better than x's map
    assert longest(small) == "90"


def test_the_shipped_file_covers_five_models_with_the_stated_recipe():
    study = load_study()
    assert STUDY_PATH.name == "dictionary_study.json"
    assert study["recipe"] == RECIPE and study["arm_lr"] == ARM_LR
    assert list(study["models"]) == [str(s) for s in MODELS] and len(MODELS) >= 5 and study["layers"] == list(LAYERS)
    for entry in study["models"].values():
        for layer in map(str, LAYERS):
            runs = entry[layer]["transcoder"]
            assert len(runs["held_out"]) == RECIPE["seeds"] and set(runs["steps"]) == {"100", "333", "1000", "3000"}
    assert longest(study) == "3000"
    assert set(study["toy_3x"]) == {"0.0", "0.7", "0.9", "0.99", "recovery"}


def test_the_verdict_families_and_tables_read_the_file():
    study = load_study()
    family = superposition_family(study)
    assert len(family) == 3 * len(LAYERS) and all(d.n == len(MODELS) for d in family.values())
    assert len(holm(family)) == len(family)
    assert len(tracking_family(study, labels=("relation", "answer", "slot"))) == 9 * len(LAYERS)
    for table in (convergence_table(study), superposition_table(study), tracking_table(study)):
        assert table.count("\n") >= len(LAYERS) and "nan" not in table
    transcoder = [v for e in study["models"].values() for v in e["1"]["transcoder"]["held_out"]]
    assert all(0 < v < 1 for v in transcoder)


def test_the_control_is_in_the_file_at_every_longer_length_and_read_by_the_verdicts():
    study = load_study()
    for entry in study["models"].values():
        for layer in map(str, LAYERS):
            runs = entry[layer]["control_steps"]
            assert set(runs) == {"sae_y", "sae_gaussian", "sae_slots"} and 0 < entry[layer]["dense"]["pca_slots"]
            lengths = {arm: {str(n) for n in CONTROL_STEPS} for arm in runs}
            lengths["sae_slots"] |= {str(RECIPE["steps"])}
            assert all(set(r) == lengths[arm] and all(len(v) == RECIPE["seeds"] and 0 < min(v)
                       for v in r.values()) for arm, r in runs.items())
    assert superposition_family is sparse_structure_family and superposition_table is sparse_structure_table
    longer = sparse_structure_family(study, control_steps=str(CONTROL_STEPS[-1]))
    assert [d.n for d in longer.values()] == [len(MODELS)] * 3
    with_slots = sparse_structure_family(study, control_steps=str(CONTROL_STEPS[-1]), slots=True)
    assert list(with_slots)[:3] == list(longer) and len(with_slots) == 5
    assert len(sparse_structure_family(study, slots=True)) == 5                  # the slot arm at the recipe's length
    table = floor_table(study)
    assert table.count("\n") == 3 and "slot mixture" in table and f"{CONTROL_STEPS[-1]:,}" in table
    assert "nan" not in table
    assert "10,000 st." in sparse_structure_table(study, control_steps="10000")
    named = sparse_structure_table(study, control_steps="10000", rate="0.01")
    assert "10,000 st., lr 0.01" in named and len({len(line) for line in named.splitlines()}) == 1


def test_control_lengths_trains_both_autoencoders_at_each_length():
    from helpers.facts import load_facts, make_dataset
    from helpers.fact_model import load_fact_model
    data = make_dataset(load_facts())
    out = control_lengths(load_fact_model(data, seed=0)[0], data, 1, [0, 1], lengths=(5, 20))
    assert set(out) == {"sae_y", "sae_gaussian"} and all(set(r) == {"5", "20"} for r in out.values())
    assert all(len(v) == 2 and 0 < min(v) for r in out.values() for v in r.values())
    slots = control_lengths(load_fact_model(data, seed=0)[0], data, 1, [0], lengths=(5,), arms=("sae_slots",))
    assert set(slots) == {"sae_slots", "pca_slots"} and 0 < slots["pca_slots"] < 1 and len(slots["sae_slots"]["5"]) == 1
    with pytest.raises(ValueError, match="arm"):
        control_lengths(load_fact_model(data, seed=0)[0], data, 1, [0], lengths=(5,), arms=("sae_z",))


def test_tracking_lengths_and_the_longer_tracking_in_the_file():
    from helpers.facts import load_facts, make_dataset
    from helpers.fact_model import load_fact_model
    data = make_dataset(load_facts())
    out = tracking_lengths(load_fact_model(data, seed=0)[0], data, 1, [0, 1], steps=5)
    assert set(out) == {"transcoder", "sae_x"} and all(len(runs) == 2 for runs in out.values())
    assert all(set(r) == {"relation", "subject", "answer", "slot", "judged"} for runs in out.values() for r in runs)
    study = load_study()
    assert all(set(e[str(L)]["tracking_steps"]) == {str(3 * RECIPE["steps"])} for e in study["models"].values()
               for L in LAYERS)
    longer = tracking_family(study, labels=("relation", "answer", "slot"), steps=str(3 * RECIPE["steps"]))
    recipe = tracking_family(study, labels=("relation", "answer", "slot"))
    assert list(longer) == list(recipe) and len(longer) == 9
    name = "layer 1, relation: features − neurons"
    assert longer[name].mean != recipe[name].mean
    neurons = [d for n, d in longer.items() if "neurons" in n]
    assert all(d.n == len(MODELS) for d in neurons)


def test_slot_mixture_like_has_each_slots_moments():
    gen = torch.Generator().manual_seed(0)
    y = torch.cat([torch.randn(2000, 3, generator=gen) + 5, torch.randn(2000, 3, generator=gen) * 0.1,
                   torch.full((2, 3), 7.0)])
    slots = ["a"] * 2000 + ["b"] * 2000 + ["rare"] * 2
    sample = slot_mixture_like(y, slots, ["b"] * 3000 + ["a"] * 3000 + ["rare", "unseen"], seed=1)
    assert sample.shape == (6002, 3) and sample.dtype == torch.float32
    torch.testing.assert_close(sample[3000:6000].mean(0), torch.full((3,), 5.0), atol=0.1, rtol=0)
    torch.testing.assert_close(sample[:3000].std(0), torch.full((3,), 0.1), atol=0.01, rtol=0)
    torch.testing.assert_close(sample[6000], torch.full((3,), 7.0), atol=1e-3, rtol=0)      # too few rows: the mean
    torch.testing.assert_close(sample[6001], y.double().mean(0).float(), atol=1e-3, rtol=0)  # no rows: y's mean
    assert torch.equal(sample, slot_mixture_like(y, slots, ["b"] * 3000 + ["a"] * 3000 + ["rare", "unseen"], seed=1))
    with pytest.raises(ValueError, match="slots"):
        slot_mixture_like(y, slots[:-1], ["a"])


def test_a_topk_8_dictionary_of_16_atoms_is_pca_8_exactly():
    """The floor of section 4: atoms ±v_1..±v_8 (the principal directions), encoder = decoder transpose, biases
    centring on the mean: exactly 8 of the 16 pre-activations are positive, so TopK-8 returns the PCA-8 projection."""
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(300, 12, generator=gen, dtype=torch.float64) * torch.linspace(3, 0.2, 12, dtype=torch.float64) + 1.5
    mean = y.mean(0)
    v = torch.linalg.svd(y - mean, full_matrices=False).Vh[:8].T                        # (12, 8)
    atoms = torch.cat([v, -v], dim=1)                                                  # (12, 16)
    d = TopKDictionary(atoms.T.clone(), -(atoms.T @ mean), atoms.clone(), mean.clone(), 8)
    with torch.no_grad():
        assert fvu(y, d(y)) == pytest.approx(pca_fvu(y, y, 8), rel=1e-9)


def test_fvu_in_the_file_is_the_course_fvu():
    y = torch.randn(50, 3, dtype=torch.float64)
    assert pca_fvu(y, y, 3) == pytest.approx(0.0, abs=1e-20)
    assert pca_fvu(y, y, 1) == pytest.approx(fvu(y, pca_projection(y, y, 1)))


def test_toy_recovery_scores_the_data_start_before_training():
    from helpers.dictionary_study import toy_recovery
    from helpers.superposition import train_toy_models
    toys = train_toy_models(sparsities=(0.99,), seeds=(0, 1), steps=200, progress=False)
    out = toy_recovery(toys, 0.99, (0, 1), n_directions=40, steps=5, progress=False)
    assert list(out["recovered"]) == ["data start, untrained", "data start", "random start", "random directions"]
    for name, counts in out["recovered"].items():
        assert all(0 <= c <= r for c, r in zip(counts, out["represented"])), name
    again = toy_recovery(toys, 0.99, (0, 1), n_directions=40, steps=50, progress=False)
    assert again["recovered"]["data start, untrained"] == out["recovered"]["data start, untrained"]   # no training in it


def test_rate_runs_stack_the_models_and_match_each_dictionary_trained_alone():
    from helpers.facts import load_facts, make_dataset
    from helpers.fact_model import load_fact_model
    out = rate_runs([0, 1], 1, [0, 1], 0.01, [5], arms=("sae_y", "sae_slots"), progress=False)
    assert set(out) == {"0", "1"} and all(set(r) == {"sae_y", "sae_slots"} for r in out.values())
    assert all(len(v["5"]) == 2 and 0 < min(v["5"]) for r in out.values() for v in r.values())
    data = make_dataset(load_facts())
    alone = control_lengths(load_fact_model(data, seed=1)[0], data, 1, [1], lengths=(5,), arms=("sae_slots",))
    assert ARM_LR["sae_slots"] == 0.01                                  # the same rate: the same dictionary
    assert out["1"]["sae_slots"]["5"][1] == pytest.approx(alone["sae_slots"]["5"][0], rel=1e-3)
    with pytest.raises(ValueError, match="arm"):
        rate_runs([0], 1, [0], 0.01, [5], arms=("sae_z",), progress=False)


def test_the_rate_runs_in_the_file_are_read_by_at_rate_and_the_tables():
    study = load_study()
    for entry in study["models"].values():
        rates = entry["1"]["control_lr"]["0.01"]
        assert set(rates["sae_y"]) == {"10000", "30000"} and set(rates["sae_slots"]) == {"30000"}
        assert all(len(v) == RECIPE["seeds"] and 0 < min(v) for r in rates.values() for v in r.values())
    equal = at_rate(study, "0.01")
    assert set(equal["models"]["0"]["1"]["control_steps"]["sae_y"]) == {"10000", "30000"}
    assert study["models"]["0"]["1"]["control_steps"]["sae_y"]["10000"] != \
        equal["models"]["0"]["1"]["control_steps"]["sae_y"]["10000"]                # the file itself is untouched
    assert "30000" in equal["models"]["0"]["1"]["control_steps"]["sae_slots"]
    table = rate_table(study)
    assert "lr 0.03" in table and "lr 0.01" in table and "30,000" in table and table.count("\n") == 4
    family = slot_edge_family(study, 0.01, ["10000", "30000"])
    assert len(family) == 2 and all(d.n == len(MODELS) for d in family.values())
    (name, one), = slot_edge_family(study, 0.01, ["30000"]).items()
    assert name in sparse_structure_family(equal, control_steps="10000", slots=True) and one.mean < 0


def test_planted_recovery_counts_and_the_shipped_planted_check():
    from helpers.dictionary_study import planted_recovery
    out = planted_recovery((0,), steps=5, progress=False)
    assert list(out) == ["dictionary", "untrained", "random directions"]
    assert all(len(v) == 1 and 0 <= v[0] <= 96 for v in out.values())
    shipped = load_study()["planted"]
    assert shipped["untrained"][0] == out["untrained"][0]               # the start does not depend on the steps
    assert shipped["random directions"][0] == out["random directions"][0]
    assert len(shipped["dictionary"]) == 5 and min(shipped["dictionary"]) > max(shipped["untrained"])
    as_transcoder = planted_recovery((0,), steps=5, progress=False, transcoder=True)
    filed = load_study()["planted_transcoder"]
    assert filed["untrained"][0] == as_transcoder["untrained"][0] != out["untrained"][0]   # x -> y data, its own start
    assert len(filed["dictionary"]) == 5 and min(filed["dictionary"]) > max(filed["untrained"])


def test_structure_ratios_are_the_values_section_4_pairs():
    from helpers.dictionary_study import structure_ratios
    equal = at_rate(load_study(), "0.01")
    ratios = structure_ratios(equal, control_steps="10000")
    family = sparse_structure_family(equal, control_steps="10000", slots=True)
    assert list(ratios) == ["affine map from x", "transcoder x -> y", "SAE on a Gaussian like y",
                            "SAE on the slot mixture", "SAE on y"]
    assert all(len(v) == 5 for v in ratios.values())

    def mean(v):
        return sum(v) / len(v)
    assert abs(mean(ratios["transcoder x -> y"]) - 1 - family["layer 1: transcoder − PCA-8 of y"].mean) < 1e-12
    assert abs(mean(ratios["SAE on y"]) - mean(ratios["SAE on a Gaussian like y"])
               - family["layer 1: SAE on y − SAE on a Gaussian"].mean) < 1e-12
    assert round(mean(ratios["SAE on y"]), 2) == 0.29 and round(mean(ratios["SAE on a Gaussian like y"]), 2) == 0.65
