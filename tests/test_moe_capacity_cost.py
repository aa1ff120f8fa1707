"""helpers.moe_capacity_cost: a trained MoE evaluated at each capacity factor, the shipped file and its family."""
import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe_capacity_cost import (ARMS, FACTORS, SEEDS, capacity_cost, cost_family, cost_table, cost_values,
                                       largest_cost_difference, load_cost, main, trained_scored_family)
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


def test_the_shipped_file_holds_twenty_seeds_of_both_arms():
    from helpers.moe_capacity_cost import COST_SEEDS
    cost = load_cost()
    assert COST_SEEDS == tuple(range(20))
    assert all(list(cost["ce"][arm]) == [str(s) for s in COST_SEEDS] for arm in ARMS)
    assert cost["made_by"] == "python -m helpers.moe_capacity_cost --results"


def test_load_cost_names_the_command_when_the_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="helpers.moe_capacity_cost --results"):
        load_cost(tmp_path / "none.json")


def test_a_small_trained_file_round_trips_and_joins_the_table_and_family(tmp_path, data):
    from helpers.moe_capacity_cost import TRAIN_FACTOR, dropped_in_training, trained_again, trained_family
    out = tmp_path / "trained.json"
    assert main(["--trained", "--seeds", "0", "--out", str(out)]) == 0
    trained = load_cost(out)
    assert trained["made_by"] == "python -m helpers.moe_capacity_cost --trained"
    assert trained["factor"] == TRAIN_FACTOR and list(trained["ce"]) == list(ARMS)
    steps = trained["dropped"]["MoE, α = 0"]["0"]
    assert len(steps) == 15 and all(0 < s < 1 for s in steps)     # c = 1 drops some slots at every step
    table = cost_table(load_cost(), trained).splitlines()
    assert len(table) == 1 + 2 * len(ARMS) and table[-1].startswith("MoE, α = 0.1, trained at c = 1")
    assert table[1].startswith("MoE, α = 0, trained dropless") and table[1][-30:] == cost_table(load_cost()).splitlines()[1][-30:]
    assert cost_table(load_cost()).splitlines()[0].startswith(" " * 16 + "  dropless")     # the old layout, unchanged
    shipped_seed_0 = {k: {a: {"0": v[a]["0"]} for a in v} if k in ("ce", "dropped") else v
                      for k, v in load_cost(trained=True).items()}
    assert trained_again("MoE, α = 0", 0, data, shipped_seed_0) < 1e-3
    family = trained_family(trained, load_cost())
    assert list(family) == ["α = 0, CE at c = 1: trained at c = 1 − dropless",
                            "α = 0.1, CE at c = 1: trained at c = 1 − dropless"]
    assert list(trained_family(trained, load_cost(), compare_arms=True))[2] == "trained at c = 1, CE at c = 1: α = 0.1 − α = 0"
    assert dropped_in_training(trained).splitlines()[0].startswith("  MoE, α = 0: step 1 0.")


def test_the_shipped_trained_file_holds_twenty_seeds_of_both_arms(tmp_path):
    from helpers.moe_capacity_cost import COST_SEEDS
    trained = load_cost(trained=True)
    assert all(list(trained[key][arm]) == [str(s) for s in COST_SEEDS] for key in ("ce", "dropped") for arm in ARMS)
    assert trained["made_by"] == "python -m helpers.moe_capacity_cost --trained"
    with pytest.raises(FileNotFoundError, match="--trained"):
        load_cost(tmp_path / "none.json", trained=True)


def test_train_run_with_a_capacity_starts_from_the_dropless_weights(data):
    from helpers.moe_runs import lm_config, make_model
    config = lm_config(data)
    dropless, capped = make_model("MoE, α = 0.1", 3, config), make_model("MoE, α = 0.1", 3, config, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(dropless.state_dict().values(), capped.state_dict().values()))
    with pytest.raises(ValueError, match="capacity_factor"):
        make_model("dense, width 96", 0, config, 1.0)
    run = train_run("MoE, α = 0", 0, data, steps=2, capacity_factor=0.5)
    assert run.log.dropped.shape == (2, 2) and bool((run.log.dropped >= 0.5).all())


def test_the_extra_ce_row_is_the_paired_t_by_hand():
    """Section 9's row 'extra CE at c = 1: α = 0.1 − α = 0': −0.176, t −5.89, as the plain paired t by hand."""
    cost = load_cost()
    extra = {a: cost_values(cost, f"MoE, α = {a}", 1.0) - cost_values(cost, f"MoE, α = {a}", None) for a in (0, 0.1)}
    d = extra[0.1] - extra[0]
    t = d.mean() / (d.std() / len(d) ** 0.5)
    assert f"{d.mean():+.3f}, t {t:+.2f}" == "-0.176, t -5.89"
    assert abs(cost_family(cost)["extra CE at c = 1: α = 0.1 − α = 0"].t - float(t)) < 1e-9


def test_the_trained_at_capacity_rows_pair_each_model_scored_at_its_factor_and_dropless():
    """Section 9's rows 'trained at c = 1: CE at c = 1 − dropless' (the same models): +0.007 each, not resolved."""
    trained = load_cost(trained=True)
    rows = trained_scored_family(trained)
    assert list(rows) == ["α = 0, trained at c = 1: CE at c = 1 − dropless",
                          "α = 0.1, trained at c = 1: CE at c = 1 − dropless"]
    for arm, row in zip(trained["ce"], rows.values()):
        by_hand = cost_values(trained, arm, 1.0) - cost_values(trained, arm, None)
        assert abs(row.mean - float(by_hand.mean())) < 1e-12 and row.n == 20
        assert f"{row.mean:+.3f}" == "+0.007"


def test_cost_table_prints_a_fixed_row_in_every_column():
    table = cost_table(load_cost(), None, {"no FFN at all": 1.9151}).splitlines()
    assert table[-1].startswith("no FFN at all") and table[-1].split()[-4:] == ["1.915"] * 4
