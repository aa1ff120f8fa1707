import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe_no_ffn import NoFFN, load_no_ffn, main, no_ffn_family, no_ffn_run, no_ffn_values
from helpers.moe_runs import load_runs


def test_the_no_ffn_slot_outputs_zeros():
    x = torch.randn(2, 3, 4)
    assert torch.equal(NoFFN()(x), torch.zeros_like(x))


def test_a_small_file_round_trips_and_matches_a_live_run(tmp_path):
    out = tmp_path / "no_ffn.json"
    assert main(["--results", "--seeds", "0", "1", "--out", str(out)]) == 0
    study = load_no_ffn(out)
    assert study["made_by"] == "python -m helpers.moe_no_ffn --results" and list(study["runs"]) == ["0", "1"]
    assert no_ffn_values(study).shape == (2,)
    assert abs(no_ffn_run(1, make_dataset(load_facts())) - study["runs"]["1"]) < 1e-4


def test_the_shipped_file_pairs_with_the_shipped_runs():
    no_ffn = load_no_ffn()
    assert list(no_ffn["runs"]) == [str(s) for s in range(10)]
    family = no_ffn_family(no_ffn, load_runs(), ["MoE, α = 0.1", "dense, width 96"])
    assert list(family) == ["CE: MoE α = 0.1 − no FFN", "CE: dense 96 − no FFN"]
    assert all(row.n == 10 for row in family.values())


def test_load_no_ffn_names_the_command_when_the_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="helpers.moe_no_ffn --results"):
        load_no_ffn(tmp_path / "missing.json")
