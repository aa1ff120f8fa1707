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


def test_the_margin_is_answer_minus_rivals_and_the_same_against_either_reference():
    runs = promotion_runs.load()
    seeds = sorted(runs)
    margin = promotion_runs.margin_family(runs, seeds)
    assert list(margin) == [f"{r}: answer − rivals" for r in RELATIONS]
    for r in RELATIONS:
        by_ref = {ref: [runs[s][ref][r][0] - runs[s][ref][r][1] for s in seeds] for ref in promotion_runs.REFERENCES}
        assert max(abs(a - b) for a, b in zip(*by_ref.values())) < 1e-5      # a common shift cancels
        assert torch.allclose(margin[f"{r}: answer − rivals"].diffs.double(),
                              torch.tensor(by_ref["outside"], dtype=torch.float64), atol=1e-6)
