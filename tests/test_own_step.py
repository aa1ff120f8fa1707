"""helpers.dictionary_study.train_with_step: notebook 09's end-to-end run of the learner's Exercise 7 step."""

import pytest
import torch

from helpers.exercises.nb09 import _training_step
from helpers.dictionary_study import own_run_lines, train_with_step
from helpers.toy_runs import load_toy_runs, toy_models


def _toy():
    toys = toy_models(load_toy_runs())
    return toys.W[toys.index(0.99, seed=0)]


def test_the_reference_step_recovers_most_features_and_leaves_dead_directions():
    run = train_with_step(_training_step, _toy(), steps=2000)
    assert run["fvu"][0] > 1.0 and run["fvu"][2000] < 0.3                  # the random start, then a fit
    assert 8 <= run["recovered"] <= run["represented"] == 19 and run["random"] <= 3
    assert run["used"] + run["dead"] == 40 and run["dead"] > 10
    text = own_run_lines(run)
    assert "recovered at cosine > 0.95" in text and "dead" in text



def test_the_random_rows_control_restarts_dead_directions_at_random_inputs():
    from helpers.exercises.nb09 import _resample_dead
    chosen = {}

    def spy(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
        error = ((x - x_hat) ** 2).sum(-1)
        ranks = error.sqrt().sort().values
        chosen.setdefault(bool(torch.allclose(ranks, torch.arange(1, len(x) + 1).double(), atol=1e-6)), 0)
        chosen["rows"] = error.sort(descending=True, stable=True).indices[:int(dead.sum())].tolist()
        return _resample_dead(W_enc, b_enc, W_dec, x, x_hat, dead, scale)

    run = train_with_step(_training_step, _toy(), steps=600, resample=spy, resample_at=(500,), rows="random")
    assert True in chosen and chosen["rows"] and isinstance(run, dict)       # errors 1², ..., N², shuffled
    worst = train_with_step(_training_step, _toy(), steps=600, resample=spy, resample_at=(500,))
    assert isinstance(worst, dict) and worst != run
    with pytest.raises(ValueError):
        train_with_step(_training_step, _toy(), steps=5, rows="best")

def test_a_faulty_step_gets_a_sentence_not_an_exception():
    def raises(*args):
        raise ValueError("boom")

    def blows_up(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        return W_enc * float("inf"), b_enc, W_dec, b_dec, 0.0

    def wrong_shape(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        return W_enc.T, b_enc, W_dec, b_dec, 0.0

    for step, words in ((raises, "ValueError: boom"), (blows_up, "finite"), (wrong_shape, "shapes")):
        message = train_with_step(step, _toy(), steps=5, report_at=(0,))
        assert isinstance(message, str) and words in message and own_run_lines(message) == message


def test_the_learners_inputs_are_copies():
    seen = []

    def keeps(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        x.zero_()                                              # a step that changes its batch harms nothing
        seen.append(1)
        return _training_step(W_enc, b_enc, W_dec, b_dec, x, k, lr)

    run = train_with_step(keeps, _toy(), steps=3, report_at=(0, 3))
    assert len(seen) == 3 and set(run["fvu"]) == {0, 3} and torch.isfinite(torch.tensor(run["fvu"][3]))


def test_verdict_lines_give_one_short_line_per_verdict_in_order():
    from helpers.dictionary_study import verdict_lines
    from helpers.stats import holm, paired_difference
    family = {"layer 1: a − b": paired_difference([1.0, 2.0, 3.0, 2.5, 1.5], [0.0, 0.1, 0.2, 0.1, 0.0]),
              "layer 1: c − d": paired_difference([0.0, 0.1, -0.1, 0.2, -0.2], [0.0, 0.0, 0.0, 0.0, 0.0])}
    lines = verdict_lines(family, unit=" x", drop="layer 1: ").splitlines()
    verdicts = holm(family)
    assert len(lines) == 2 and lines[0].lstrip().startswith("a − b") and lines[1].lstrip().startswith("c − d")
    assert lines[0].endswith("→ " + verdicts[0].verdict) and "higher in 5 of 5 models" in lines[0]
    assert lines[1].endswith("→ not resolved")


def test_verdict_groups_count_each_groups_resolved_verdicts_in_the_whole_family():
    from helpers.dictionary_study import verdict_groups
    from helpers.stats import holm, paired_difference
    up = paired_difference([1.0, 2.0, 3.0, 2.5, 1.5], [0.0, 0.1, 0.2, 0.1, 0.0])
    flat = paired_difference([0.0, 0.1, -0.1, 0.2, -0.2], [0.0, 0.0, 0.0, 0.0, 0.0])
    family = {"layer 1, relation: features − neurons": up, "layer 1, slot: features − neurons": flat,
              "layer 1, relation: random-start features − neurons": up}
    lines = verdict_groups(family, {"vs neurons": "features − neurons"}, drop="layer 1, ").splitlines()
    assert len(lines) == 1 and "1 of 2 resolved" in lines[0]          # the random-start row is not in the group
    missed = holm(family)[1]
    assert f"slot +0.00 (" in lines[0] and f"< {missed.threshold:.2f}" in lines[0]
    with pytest.raises(ValueError):
        verdict_groups(family, {"none": "no such comparison"})


def test_structure_headline_reads_the_shipped_file():
    from helpers.dictionary_study import at_rate, load_study, sparse_structure_family, structure_headline
    study = load_study()
    verdicts = sparse_structure_family(at_rate(study, "0.01"), control_steps="10000", slots=True)
    text = structure_headline(study, verdicts)
    assert "on a Gaussian like y 0.65×, on the slot mixture 0.45×, on y 0.29×" in text
    assert "lower in 5 of 5 models" in text and text.endswith("→ lower")
