"""helpers.promotion_runs: the shipped file holds 25 seeds, its family is the notebook's grid, and seed 0 reproduces."""
import torch

from helpers import promotion_runs
from helpers.facts import RELATIONS, load_facts, make_dataset


def test_shipped_file_holds_25_seeds_ten_of_them_the_shipped_models():
    runs = promotion_runs.load()
    assert sorted(runs) == list(range(25))
    assert [s for s, r in runs.items() if r["shipped"]] == list(range(10))
    for run in runs.values():
        assert set(run["outside"]) == set(RELATIONS) and all(len(v) == 2 for v in run["outside"].values())


def test_family_matches_promotion_by_group_on_live_models():
    from helpers.fact_model import load_fact_model
    from helpers.interventions import promotion_by_group, shifts_by_reference
    data = make_dataset(load_facts())
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    models = [load_fact_model(data, seed=s)[0] for s in (0, 1)]
    by_seed = [shifts_by_reference(m, 1, data.ids, data.answer_pos, data.answer_id, relation_of) for m in models]
    live = promotion_by_group(by_seed, relation_of, list(RELATIONS), with_gap=False)
    runs = {s: {"outside": promotion_runs.summarise(m, data)["outside"]} for s, m in enumerate(models)}
    stored = promotion_runs.family(runs, [0, 1])
    assert list(stored) == list(live)
    for name in live:
        assert torch.allclose(stored[name].diffs.double(), live[name].diffs.double(), atol=1e-5)
    assert promotion_runs.live_gap(models[0], data, promotion_runs.load()) < 1e-4
