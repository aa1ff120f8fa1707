"""helpers.edit_budget: the shipped budget runs are the notebook's edits, and the command reproduces them."""
from helpers import edit_budget
from helpers.fact_model import load_fact_model
from helpers.facts import load_facts, make_dataset


def test_capital_edits_move_capitals_to_other_capitals():
    data = make_dataset(load_facts())
    rows, new_ids = edit_budget.capital_edits(data)
    assert rows.shape == new_ids.shape == (32,)
    assert all(data.facts[int(r)].relation == "capital" for r in rows)
    capitals = {data.vocab.stoi[f.obj] for f in data.facts if f.relation == "capital"}
    assert set(new_ids.tolist()) <= capitals and bool((new_ids != data.answer_id[rows]).all())


def test_the_shipped_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = edit_budget.load()
    assert sorted(shipped) == list(range(10))
    assert all(set(runs) == set(edit_budget.BUDGETS) for runs in shipped.values())
    made = edit_budget.make([0], tmp_path / "budget.json")
    assert made["runs"]["0"] == shipped[0]
    assert edit_budget.load(tmp_path / "budget.json") == {0: shipped[0]}


def test_budget_runs_measure_efficacy_and_kept_capitals():
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    out = edit_budget.budget_runs(model, data, {"5 steps": dict(steps=5, l2=0.0)})
    assert set(out) == {"5 steps"} and set(out["5 steps"]) == {"efficacy", "capitals_kept"}
    assert all(0.0 <= v <= 1.0 for v in out["5 steps"].values())
