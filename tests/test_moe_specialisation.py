"""helpers.moe_specialisation: the relation information of a routing, and the shipped probe of notebook 07."""

import pytest
import torch

from helpers.moe_specialisation import ARMS_PROBED, load, measure, relation_information, untrained_share


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
    assert [v.verdict for v in result.verdicts()] == ["higher", "higher"] and len(lines) == 3


def test_a_small_run_measures_both_arms():
    result = measure(seeds=[0], steps=3, lrs={arm: 0.08 for arm in ARMS_PROBED})
    for arm in ARMS_PROBED:
        assert 0.0 <= float(result.untrained[arm][0]) <= 1.0 and 0.0 <= float(result.trained[arm][0]) <= 1.0
        assert float(result.shuffled[arm][0]) < float(result.untrained[arm][0])


def test_the_measure_grows_with_the_number_of_experts_before_training():
    eight, thirty_one = untrained_share(n_experts=8), untrained_share(n_experts=31)
    assert f"{eight:.2f}" == "0.30" and f"{thirty_one:.2f}" == "0.45"
