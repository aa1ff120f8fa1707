import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe_runs import train_run
from helpers.moe_zloss import (CHECKPOINTS, KEYS, SEEDS, Z_COEFS, largest_live_difference, load_zloss, main,
                               router_stats, zloss_family, zloss_table, zloss_values)


@pytest.fixture(scope="module")
def data():
    return make_dataset(load_facts())


def test_a_small_file_round_trips_and_reads_as_a_family(tmp_path):
    out = tmp_path / "zloss.json"
    assert main(["--results", "--seeds", "0", "1", "--steps", "2", "3", "--out", str(out)]) == 0
    study = load_zloss(out)
    assert study["settings"]["checkpoints"] == [2, 3] and study["made_by"] == "python -m helpers.moe_zloss --results"
    for z in Z_COEFS:
        for key in KEYS:
            assert zloss_values(study, z, 3, key).shape == (2,)
    family = zloss_family(study)
    assert len(family) == 6 and all(row.n == 2 for row in family.values())
    assert "step 3, z_coef 0.001" in zloss_table(study)


def test_without_the_z_loss_coefficient_the_runs_differ_and_with_it_match_train_run(data, tmp_path):
    """The z-loss arm is section 8's 'MoE, α = 0.1' run: after 3 steps its router statistics are train_run's."""
    out = tmp_path / "zloss.json"
    main(["--results", "--seeds", "0", "--steps", "3", "--out", str(out)])
    study = load_zloss(out)
    live = router_stats(train_run("MoE, α = 0.1", 0, data, steps=3).final)
    assert largest_live_difference({0: live}, study, step=3) < 1e-4
    assert zloss_values(study, 0.0, 3, "z_loss")[0] != zloss_values(study, Z_COEFS[0], 3, "z_loss")[0]


def test_router_stats_reads_the_logits_of_every_layer():
    class Record:
        def __init__(self, logits):
            self.routing = type("R", (), {"logits": logits})()

    a, b = torch.zeros(4, 8, dtype=torch.float64), torch.full((4, 8), 2.0, dtype=torch.float64)
    stats = router_stats([Record(a), Record(b)])
    lse_a, lse_b = torch.logsumexp(a, -1)[0].item(), torch.logsumexp(b, -1)[0].item()
    assert stats["max_logit"] == 2.0 and abs(stats["mean_logit"] - 1.0) < 1e-12
    assert abs(stats["z_loss"] - (lse_a ** 2 + lse_b ** 2) / 2) < 1e-5 and abs(stats["lse"] - (lse_a + lse_b) / 2) < 1e-9


def test_the_shipped_file_holds_every_seed_and_checkpoint():
    study = load_zloss()
    assert study["settings"]["checkpoints"] == list(CHECKPOINTS)
    for z in Z_COEFS:
        for step in CHECKPOINTS:
            assert list(study["runs"][f"{z:g}"][str(step)]) == [str(s) for s in SEEDS]


def test_load_zloss_names_the_command_when_the_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="helpers.moe_zloss --results"):
        load_zloss(tmp_path / "missing.json")


def test_router_stats_reads_the_mean_top_probability():
    class Record:
        def __init__(self, logits):
            self.routing = type("R", (), {"logits": logits})()

    even, sure = torch.zeros(3, 4, dtype=torch.float64), torch.tensor([[10.0, 0, 0, 0]] * 3, dtype=torch.float64)
    stats = router_stats([Record(even), Record(sure)])
    assert abs(stats["top_prob"] - (0.25 + torch.softmax(sure[0], -1)[0].item()) / 2) < 1e-12
