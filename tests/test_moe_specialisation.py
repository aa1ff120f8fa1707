"""helpers.moe_specialisation: the relation information and its shipped file (notebook 07, section 4)."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_specialisation as ms
from helpers.fact_lookup import lookup_data


def test_information_by_hand():
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    assert ms.relation_information(torch.tensor([2, 2, 2, 0, 1, 1]), groups) == pytest.approx(1.0)
    assert ms.relation_information(torch.tensor([0, 0, 0, 0, 0, 0]), groups) == pytest.approx(0.0)
    assert ms.relation_information(torch.tensor([0, 1, 0, 1, 0, 1]), torch.tensor([0, 0, 1, 1, 2, 2])) \
        == pytest.approx(0.0, abs=1e-12)
    # one of two experts shared half-and-half: I = H(G) - H(G|E) = log 2 - (1/2) log 2
    assert ms.relation_information(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 0, 1])) \
        == pytest.approx(1 - (0.5 * torch.log(torch.tensor(2.0)).item())
                         / (-(0.75 * torch.log(torch.tensor(0.75)) + 0.25 * torch.log(torch.tensor(0.25)))).item())
    with pytest.raises(ValueError):
        ms.relation_information(torch.tensor([0, 1]), groups)


def test_an_even_load_does_not_cap_it():
    # 4 relations, 8 experts, each expert one relation: even load, information 1 (a top-relation share would be 0.5)
    groups = torch.arange(4).repeat_interleave(8)
    expert = torch.arange(8).repeat_interleave(4)
    assert ms.load_ratio(expert) == pytest.approx(1.0)
    assert ms.relation_information(expert, groups) == pytest.approx(1.0)


def test_shipped_file_reads_as_the_notebook_prints():
    result = ms.load()
    assert result.seeds == list(ms.SEEDS)
    assert set(result.trained) == set(result.lrs) == {100, 300}
    assert result.untrained.shape == (len(ms.SEEDS),)
    for steps in result.trained:
        assert float(result.shuffled[steps].mean()) < float(result.trained[steps].mean())
    lines = result.lines()
    assert "relation information" in lines[0] and len(lines) == 8
    assert set(result.load) == {0, 100, 300}
    assert {v.verdict for v in result.verdicts()} <= {"lower", "higher", "not resolved"}


def test_untrained_purity_is_deterministic_and_a_short_run_works():
    data = lookup_data()
    small = ms.measure(data, seeds=[0], lrs={3: 0.08})
    assert float(small.untrained[0]) == pytest.approx(float(ms.load().untrained[0]), abs=0.01)
    assert 0.0 < float(small.trained[3][0]) <= 1.0
