"""helpers.moe_specialisation: the relation purity and its shipped file (notebook 07, section 4)."""
from __future__ import annotations

import pytest
import torch

from helpers import moe_specialisation as ms
from helpers.fact_lookup import lookup_data


def test_purity_by_hand():
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    assert ms.relation_purity(torch.tensor([2, 2, 2, 0, 1, 1]), groups) == pytest.approx(5 / 6)
    assert ms.relation_purity(torch.tensor([0, 0, 0, 0, 0, 0]), groups) == 1.0
    with pytest.raises(ValueError):
        ms.relation_purity(torch.tensor([0, 1]), groups)


def test_shipped_file_reads_as_the_notebook_prints():
    result = ms.load()
    assert result.seeds == list(ms.SEEDS)
    assert set(result.trained) == set(result.lrs) == {100, 300}
    assert result.untrained.shape == (len(ms.SEEDS),)
    for steps in result.trained:
        assert float(result.shuffled[steps].mean()) < float(result.trained[steps].mean())
    lines = result.lines()
    assert lines[0].startswith("relation purity") and len(lines) == 4
    assert {v.verdict for v in result.verdicts()} <= {"lower", "higher", "not resolved"}


def test_untrained_purity_is_deterministic_and_a_short_run_works():
    data = lookup_data()
    small = ms.measure(data, seeds=[0], lrs={3: 0.08})
    assert float(small.untrained[0]) == pytest.approx(float(ms.load().untrained[0]), abs=0.01)
    assert 0.0 < float(small.trained[3][0]) <= 1.0
