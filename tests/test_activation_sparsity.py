"""helpers.activation_sparsity: silent shares, skipping rules, the predictor, batch unions, weights read, results."""
import json

import pytest
import torch

from helpers.activation_sparsity import (RESULTS_PATH, SKIP_RULES, TRAINED_ACTIVATIONS, ActivePredictor,
                                         batch_union, calibrate_threshold, country_positions, country_split,
                                         expected_union, fact_model_with, ffn_weights_read,
                                         layer_states, load_results, make_results, random_like, recall,
                                         position_matched_union, sentence_union, silent_share, skipping, table,
                                         threshold_sweep, top_k_mask, train_predictor, with_activation)
from helpers.activations import get_activation
from helpers.fact_model import untrained_fact_model
from helpers.facts import load_facts, make_dataset
from helpers.memory import logits_of, prefix_mask


@pytest.fixture(scope="module")
def data():
    return make_dataset(load_facts())


def test_squared_relu():
    x = torch.tensor([-2.0, -0.0, 0.5, 3.0])
    assert get_activation("relu2")(x).tolist() == [0.0, 0.0, 0.25, 9.0]


def test_silent_share():
    m = torch.tensor([[0.0, 0.5, -0.1, 2.0], [0.0, 0.0, 0.3, -2.0]])
    assert silent_share(m).tolist() == [0.25, 0.5]
    assert silent_share(m, 0.1).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="tau must be a non-negative number"):
        silent_share(m, -1.0)


def test_calibrated_threshold_skips_the_share_asked():
    m = torch.randn(200, 50, generator=torch.Generator().manual_seed(0))
    for skip in (0.0, 0.3, 0.9):
        tau = calibrate_threshold(m, skip)
        assert (m.abs() <= tau).double().mean().item() == pytest.approx(skip, abs=1e-9)


def test_top_k_and_random_masks():
    scores = torch.tensor([[1.0, 3.0, 3.0, 0.5], [0.0, -1.0, 2.0, 2.0]])
    assert top_k_mask(scores, 2).tolist() == [[False, True, True, False], [False, False, True, True]]
    assert not top_k_mask(scores, 0).any()
    keep = torch.rand(30, 40, generator=torch.Generator().manual_seed(1)) < 0.3
    rand = random_like(keep, torch.Generator().manual_seed(2))
    assert torch.equal(rand.sum(-1), keep.sum(-1)) and not torch.equal(rand, keep)


def test_fact_model_with_gelu_is_the_untrained_fact_model(data):
    ours, theirs = fact_model_with(data, "gelu", 3), untrained_fact_model(data, 3)
    for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert torch.equal(a, b), name
    swiglu = fact_model_with(data, "swiglu", 0)
    assert swiglu.blocks[0].ffn.gated and swiglu.blocks[0].ffn.d_ff == 128
    assert set(TRAINED_ACTIVATIONS) == {"relu", "relu2", "gelu", "silu", "swiglu"}


def test_with_activation_keeps_weights_and_swaps_phi(data):
    model = untrained_fact_model(data, 0)
    relu = with_activation(model, "relu")
    assert relu.blocks[1].ffn.activation_name == "relu" and model.blocks[1].ffn.activation_name == "gelu"
    assert torch.equal(relu.blocks[1].ffn.w2.weight, model.blocks[1].ffn.w2.weight)
    valid = prefix_mask(data.ids, data.vocab.pad_id)
    states = layer_states(relu, data.ids, valid)
    assert len(states) == 2 and states[0].m.shape == (int(valid.sum()), 192)
    assert torch.equal(states[0].m == 0, states[0].pre <= 0)


def test_skipping_exact_zeros_changes_nothing_and_random_does(data):
    model = with_activation(untrained_fact_model(data, 0), "relu")
    with torch.no_grad():
        dense = logits_of(model, data.ids)
        with skipping(model, [lambda x, m: m > 0] * 2):
            exact = logits_of(model, data.ids)
        with skipping(model, [None, lambda x, m: torch.zeros_like(m, dtype=torch.bool)]):
            removed = logits_of(model, data.ids)
    assert torch.equal(dense, exact)
    assert (dense - removed).abs().max() > 0.1


def test_predictor_learns_a_linear_rule():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=gen)
    keys = torch.randn(10, 6, generator=gen)
    active = x @ keys.T > 0.3
    predictor = train_predictor(x, active, rank=6, steps=300)
    assert isinstance(predictor, ActivePredictor) and predictor.weights() == 6 * 6 + 6 * 10 + 10
    assert recall(predictor.predict(x), active) > 0.9
    weak = train_predictor(x, active, rank=1, steps=300)
    assert recall(weak.predict(x), active) < recall(predictor.predict(x), active)


def test_recall_and_unions():
    active = torch.tensor([[True, False], [False, False]])
    assert recall(active, active) == 1.0 and recall(~active, active) == 0.0
    assert recall(active, torch.zeros_like(active)) == 1.0
    gen = torch.Generator().manual_seed(0)
    rates = torch.rand(64, generator=gen) ** 3
    samples = torch.rand(5000, 64, generator=gen) < rates
    for batch in (1, 4, 16):
        assert batch_union(samples, batch, n_batches=2000) == pytest.approx(expected_union(rates, batch), abs=0.01)
    assert expected_union(rates, 8) < 1 - (1 - rates.mean().item()) ** 8          # uneven rates: a smaller union


def test_weights_read():
    assert ffn_weights_read(4, 16, 0.25, how="dense") == 128
    assert ffn_weights_read(4, 16, 0.25, how="exact") == 64 + 16
    assert ffn_weights_read(4, 16, 0.25, how="exact", gated=True) == 64 + 32
    assert ffn_weights_read(4, 16, 0.25, how="predicted", predictor_weights=10) == 10 + 32
    with pytest.raises(ValueError, match="how must be one of"):
        ffn_weights_read(4, 16, 0.25, how="sparse")


def test_country_split_halves_the_countries(data):
    fit, test = country_split(data)
    assert len(fit) + len(test) == len(data) and not set(fit.tolist()) & set(test.tolist())
    assert {data.facts[i].subject for i in fit}.isdisjoint({data.facts[i].subject for i in test})


def test_threshold_sweep_counts_what_each_rule_keeps(data):
    model = untrained_fact_model(data, 0)
    valid = prefix_mask(data.ids, data.vocab.pad_id)
    sweep = threshold_sweep(model, data, valid, (0.0, 0.75))
    nothing, most = sweep["by_share"]["0"], sweep["by_share"]["0.75"]
    assert set(most["loss"]) == set(most["kept"]) == set(SKIP_RULES)
    assert nothing["kept"]["threshold"] == [192.0, 192.0] and nothing["loss"]["threshold"] == pytest.approx(sweep["dense"])
    assert most["kept"]["top_k"] == [48.0, 48.0]
    assert [round(k) for k in most["kept"]["threshold"]] == [round(k) for k in most["kept"]["matched"]]
    assert most["loss"]["random"] > most["loss"]["threshold"]
    assert nothing["kept"]["scored_tau"] == [192.0, 192.0]
    assert [round(k) for k in most["kept"]["scored_tau"]] == [48, 48]      # a quarter of the scored entries kept


def test_country_positions_start_at_the_subject(data):
    starts = country_positions(data).int().argmax(dim=1)
    for n in (0, 1, 2, 3):
        assert data.vocab.tokens[data.ids[n, starts[n]]] == data.facts[n].subject


def test_sentence_union_against_random_tokens():
    valid = torch.tensor([[True, True, False], [True, True, True]])
    same = torch.tensor([[True, False, False, False]] * 5)                 # every token fires neuron 0 only
    assert sentence_union(same, valid) == (0.25, 0.25)
    distinct = torch.eye(5, 4, dtype=torch.bool)                         # each token its own neuron (the last none)
    own, rand = sentence_union(distinct, valid, draws=200)
    assert own == pytest.approx((2 / 4 + 2 / 4) / 2) and rand < own
    assert position_matched_union(distinct, valid, draws=50) == pytest.approx(own)    # each position its neuron
    by_position = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]).bool()
    assert position_matched_union(by_position, valid) == pytest.approx((2 / 4 + 3 / 4) / 2)
    with pytest.raises(ValueError, match="draws"):
        position_matched_union(distinct, valid, draws=0)


def test_table_aligns_columns():
    assert table(["", "a", "bb"], [["x", 1, 2.5], ["long", 10, ""]]).splitlines() == [
        "       a   bb", "x      1  2.5", "long  10"]


def test_make_results_small_run_and_one_part_again(tmp_path):
    path = tmp_path / "runs.json"
    results = make_results([0], quick=True, path=path, progress=False)
    assert json.loads(path.read_text()) == json.loads(json.dumps(results))
    relu = results["training"]["by_activation"]["relu"]["runs"][0]
    assert len(relu["silent"]) == len(results["training"]["checkpoints"]) and len(relu["silent"][0]) == 2
    tuned = results["relufication"]["runs"][0]["relu_tuned"]
    assert set(results["relufication"]["runs"][0]) == {"seed", "gelu", "relu_swapped", "relu_tuned", "gelu_tuned"}
    assert len(tuned["sentence_union"]) == 2 and len(tuned["position_matched_union"]) == 2
    assert set(results["predictor"]["runs"][0]["by_rank"]) == {"1", "8"}
    assert set(results["thresholds"]["runs"][0]["by_share"]) == {"0.5", "0.9"}
    again = make_results([1], parts=["thresholds"], quick=True, path=path, progress=False)
    assert again["thresholds"]["seeds"] == [1] and again["training"] == results["training"]
    with pytest.raises(ValueError, match="parts"):
        make_results([0], parts=["nothing"], quick=True, path=path, progress=False)


def test_shipped_results_file():
    results = load_results()
    assert results["training"]["seeds"] == [0, 1, 2, 3, 4]
    assert set(results["training"]["by_activation"]) == set(TRAINED_ACTIVATIONS)
    assert [len(a["runs"]) for a in results["training"]["by_activation"].values()] == [5] * 5
    for part in ("thresholds", "relufication", "predictor"):
        assert results[part]["seeds"] == list(range(10)) and len(results[part]["runs"]) == 10
    with pytest.raises(FileNotFoundError, match="--make-results"):
        load_results(RESULTS_PATH.parent / "missing.json")
