"""helpers.moe_capacity_cost: a trained MoE evaluated at each capacity factor, the shipped file and its family."""
import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe_capacity_cost import (ARMS, FACTORS, SEEDS, capacity_cost, cost_family, cost_table, cost_values,
                                       largest_cost_difference, load_cost, main)
from helpers.moe_runs import train_run


@pytest.fixture(scope="module")
def data():
    return make_dataset(load_facts())


def test_capacity_cost_restores_the_model_and_dropless_matches_evaluate(data):
    run = train_run("MoE, α = 0.1", 0, data, steps=3, lr=1e-2)
    ce = capacity_cost(run.model, data, (None, 1.0, 0.25))
    assert ce[0] == pytest.approx(run.ce, abs=1e-6)
    assert ce[2] > ce[0]                                   # a quarter of the even load drops most slots
    assert all(m.capacity_factor is None for m in run.model.modules() if hasattr(m, "capacity_factor"))
    with pytest.raises(ValueError, match="MoE"):
        capacity_cost(torch.nn.Linear(2, 2), data)


def test_a_small_file_round_trips_and_reads_as_a_family(tmp_path):
    out = tmp_path / "cost.json"
    assert main(["--results", "--seeds", "0", "1", "--out", str(out)]) == 0
    cost = load_cost(out)
    assert cost["factors"] == list(FACTORS) and list(cost["ce"]) == list(ARMS)
    assert cost_values(cost, "MoE, α = 0", None).shape == (2,)
    assert len(cost_table(cost).splitlines()) == 1 + len(ARMS)
    family = cost_family(cost)
    assert len(family) == 6 and "extra CE at c = 1.25: α = 0.1 − α = 0" in family
    live = {("MoE, α = 0", 0): cost["ce"]["MoE, α = 0"]["0"]}
    assert largest_cost_difference(live, cost) == 0


def test_the_shipped_file_holds_ten_seeds_of_both_arms():
    cost = load_cost()
    assert all(list(cost["ce"][arm]) == [str(s) for s in SEEDS] for arm in ARMS)
    assert cost["made_by"] == "python -m helpers.moe_capacity_cost --results"


def test_load_cost_names_the_command_when_the_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="helpers.moe_capacity_cost --results"):
        load_cost(tmp_path / "none.json")
