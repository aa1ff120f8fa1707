"""helpers.moe_specialisation: the relation information of a routing, and the shipped probe of notebook 07."""

import pytest
import torch

from helpers.fact_lookup import build_lookup, lookup_data, lookup_loss_and_accuracy
from helpers.moe_race import ARMS
from helpers.moe_specialisation import (ARMS_PROBED, KNOCKOUT_ARMS, knockout, load, measure, relation_information,
                                        untrained_share)


def test_relation_information_is_one_when_the_expert_names_the_group_and_zero_when_independent():
    groups = torch.arange(8) % 4
    assert relation_information(groups + 10, groups) == pytest.approx(1.0)
    assert relation_information(torch.arange(8) // 4, groups) == pytest.approx(0.0, abs=1e-12)
    assert relation_information(torch.zeros(8, dtype=torch.long), groups) == pytest.approx(0.0, abs=1e-12)


def test_relation_information_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same non-empty"):
        relation_information(torch.zeros(3, dtype=torch.long), torch.zeros(4, dtype=torch.long))


def test_the_shipped_probe_reads_as_the_notebook_says():
    result = load()
    assert result.seeds == list(range(20)) and result.steps == 100 and set(result.trained) == set(ARMS_PROBED)
    lines = result.lines()
    assert lines[1].startswith("  top-1 MoE    untrained 0.30, trained 0.34 (relations shuffled: 0.01)")
    assert lines[2].startswith("  DeepSeekMoE  untrained 0.45, trained 0.48 (relations shuffled: 0.06)")
    assert [v.verdict for v in result.verdicts()] == ["higher", "higher", "not resolved"]
    assert lines[3].startswith("each fact's first routed expert switched off: the loss rises 5.68 nats in DeepSeekMoE, "
                               "5.85 in fine-grained")
    assert all(float(result.rise(arm).min()) > 3.0 for arm in KNOCKOUT_ARMS)


def test_the_knockout_reads_the_intact_loss_and_leaves_the_router_as_it_was():
    data = lookup_data()
    model = build_lookup(data, ARMS["DeepSeekMoE"], 8, 0)
    intact, knocked = knockout(model, data)
    assert intact == pytest.approx(lookup_loss_and_accuracy(model, data)[0], rel=1e-6)
    assert knocked != intact and torch.all(model.ffn.selection_bias == 0)


def test_a_small_run_measures_both_arms():
    result = measure(seeds=[0], steps=3, lrs={arm: 0.08 for arm in ARMS_PROBED + KNOCKOUT_ARMS})
    for arm in ARMS_PROBED:
        assert 0.0 <= float(result.untrained[arm][0]) <= 1.0 and 0.0 <= float(result.trained[arm][0]) <= 1.0
        assert float(result.shuffled[arm][0]) < float(result.untrained[arm][0])
    assert set(result.intact) == set(KNOCKOUT_ARMS) and all(len(result.rise(arm)) == 1 for arm in KNOCKOUT_ARMS)


def test_the_measure_grows_with_the_number_of_experts_before_training():
    eight, thirty_one = untrained_share(n_experts=8), untrained_share(n_experts=31)
    assert f"{eight:.2f}" == "0.30" and f"{thirty_one:.2f}" == "0.45"
