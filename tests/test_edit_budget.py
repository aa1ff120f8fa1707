"""helpers.edit_budget: the shipped budget runs are the notebook's edits, and the command reproduces them."""
import pytest

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
    assert all(set(r) == {"efficacy", "capitals_kept", "delta_ratio"} for runs in shipped.values() for r in runs.values())
    made = edit_budget.make([0], tmp_path / "budget.json")           # equal up to another CPU kernel's rounding
    assert all(abs(made["runs"]["0"][b][k] - v) < 1e-5 for b, run in shipped[0].items() for k, v in run.items())
    assert edit_budget.load(tmp_path / "budget.json") == {0: made["runs"]["0"]}


def test_budget_runs_measure_efficacy_and_kept_capitals():
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    out = edit_budget.budget_runs(model, data, {"5 steps": dict(steps=5, l2=0.0)})
    assert set(out) == {"5 steps"} and set(out["5 steps"]) == {"efficacy", "capitals_kept", "delta_ratio"}
    assert 0.0 <= out["5 steps"]["efficacy"] <= 1.0 and 0.0 <= out["5 steps"]["capitals_kept"] <= 1.0
    assert out["5 steps"]["delta_ratio"] > 0.0


def test_delta_ratio_is_the_size_of_the_optimised_delta():
    """For one edit, the median ratio is ||δ|| / ||W k*|| of the δ that optimise_deltas returns."""
    import torch
    from helpers.editing import edit_prompts, key_second_moment, mean_keys, optimise_deltas
    from helpers.memory import collect, token_positions
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    rows, new_ids = edit_budget.capital_edits(data, n_edits=1)
    subjects = sorted({f.subject for f in data.facts})
    subject_of = torch.tensor([subjects.index(f.subject) for f in data.facts])
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    keys = collect(model, data.ids).coefficients[0]
    C = key_second_moment(keys[data.ids != data.vocab.pad_id], ridge=1e-3)
    k = mean_keys(keys, (subject_of[:, None] == subject_of[None, :])[rows], subject_pos)
    delta = optimise_deltas(model, 0, edit_prompts(data.ids, data.answer_pos, keys, C, k, rows, new_ids),
                            n_edits=1, steps=5, lr=0.5)
    expected = (delta.norm() / (k @ model.blocks[0].ffn.w2.weight.T).norm()).item()
    old = edit_budget.capital_edits
    edit_budget.capital_edits = lambda d, n_edits=32: (rows, new_ids)
    try:
        got = edit_budget.budget_runs(model, data, {"5 steps": dict(steps=5, l2=0.0)})["5 steps"]["delta_ratio"]
    finally:
        edit_budget.capital_edits = old
    assert abs(got - expected) < 1e-4 * expected


def test_live_gap_reads_the_notebook_budget_and_the_fresh_rerun():
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    shipped = edit_budget.load()
    first = next(iter(edit_budget.BUDGETS))
    live = {s: {k: runs[first][k] for k in ("efficacy", "capitals_kept")} for s, runs in shipped.items()}
    assert edit_budget.live_gap(model, data, live) < 1e-5                  # up to another CPU kernel's rounding
    live[3]["efficacy"] += 0.25
    assert abs(edit_budget.live_gap(model, data, live) - 0.25) < 1e-5


def test_the_shipped_site_runs_hold_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = edit_budget.load_sites()
    assert sorted(shipped) == list(range(10))
    keys = {"country", "kept country", "paraphrase country", "is", "kept is", "paraphrase is", "alpha",
            "more paraphrases", "other prompts"}
    assert all(set(run) == keys for run in shipped.values())
    made = edit_budget.make_sites([0], tmp_path / "sites.json")
    assert edit_budget.sites_gap(made["runs"]["0"], shipped[0]) < 1e-5
    assert edit_budget.load_sites(tmp_path / "sites.json") == {0: made["runs"]["0"]}


def test_site_runs_at_the_country_are_the_budget_files_first_budget():
    shipped, budgets = edit_budget.load_sites(), edit_budget.load()
    first = next(iter(edit_budget.BUDGETS))
    assert all(abs(shipped[s]["country"] - budgets[s][first]["efficacy"]) < 1e-5
               and abs(shipped[s]["kept country"] - budgets[s][first]["capitals_kept"]) < 1e-5 for s in shipped)


def test_sites_gap_reads_nested_numbers_and_flags_missing_keys():
    run = {"country": 0.5, "paraphrase is": {"edited_after": 0.25}}
    assert edit_budget.sites_gap(run, {"country": 0.5, "paraphrase is": {"edited_after": 0.75}}) == 0.5
    assert edit_budget.sites_gap(run, {"country": 0.5}) == float("inf")
    deep = {"more paraphrases": {"t": {"is": {"edited_after": 0.5}}}}
    assert edit_budget.sites_gap(deep, {"more paraphrases": {"t": {"is": {"edited_after": 0.25}}}}) == 0.25


def test_the_shipped_keep_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = edit_budget.load_keep()
    assert sorted(shipped) == list(range(10))
    names = {"efficacy", "capitals_kept", "own continent", "own language", "own currency"}
    assert all(set(runs) == {"plain", "keep"} and all(set(r) == names for r in runs.values())
               for runs in shipped.values())
    made = edit_budget.make_keep([0], tmp_path / "keep.json")        # equal up to another CPU kernel's rounding
    assert all(abs(made["runs"]["0"][n][k] - v) < 1e-5 for n, run in shipped[0].items() for k, v in run.items())
    assert edit_budget.load_keep(tmp_path / "keep.json") == {0: made["runs"]["0"]}
    assert shipped[0]["keep"]["own currency"] > shipped[0]["plain"]["own currency"]   # seed 0: 100 % against 56 %


def test_the_live_site_check_leaves_out_only_the_control_prompts():
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    shipped = edit_budget.load_sites()[0]
    assert edit_budget.live_sites_gap(model, data, shipped) < 1e-5
    assert set(edit_budget.site_runs(model, data, controls=False)) == set(shipped) - {"other prompts"}


def test_the_paraphrase_answers_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = edit_budget.load_answers()
    assert sorted(shipped) == list(range(10))
    keys = {"language first", "P(true) before", "new first", "new first of capitals", "P(new) after"}
    assert all(set(r) == keys for r in shipped.values())
    assert sum(r["new first"] for r in shipped.values()) <= sum(r["new first of capitals"] for r in shipped.values())
    made = edit_budget.make_answers([0], tmp_path / "answers.json")["runs"]["0"]
    assert edit_budget.answers_gap(made) < 1e-3                         # counts equal, P up to kernel rounding


def test_spearman_null_is_exact_and_holm_steps_down():
    import itertools
    from collections import Counter
    n = 5
    seen = Counter(round(abs(1 - 6 * sum((i - p[i]) ** 2 for i in range(n)) / (n * (n * n - 1))), 12)
                   for p in itertools.permutations(range(n)))
    null = edit_budget.spearman_null(n)
    assert set(null) == set(seen)
    for r, p in null.items():
        assert p == pytest.approx(sum(c for q, c in seen.items() if q >= r) / 120)
    ten = edit_budget.spearman_null(10)
    assert min(r for r, p in ten.items() if p <= 0.05) == pytest.approx(0.6485, abs=1e-4)   # the tabled 5 % value
    verdicts = edit_budget.spearman_holm({"a": -0.96, "b": -0.43, "c": -0.92}, 10)
    assert list(verdicts) == ["a", "c", "b"]
    assert [v[1] for v in verdicts.values()] == [True, True, False]
    assert verdicts["a"][0] > verdicts["c"][0] > verdicts["b"][0]
    stopped = edit_budget.spearman_holm({"a": -0.70, "b": 0.69}, 10)        # 0.70 fails alpha/2: b is not judged
    assert [v[1] for v in stopped.values()] == [False, False]
    with pytest.raises(ValueError):
        edit_budget.spearman_null(2)


def test_keep_summary_reads_the_shipped_keep_runs_with_holm_over_five():
    line = edit_budget.keep_summary(edit_budget.load_keep(), range(10))
    assert line.startswith("10 seeds, 32 edits each: own currency kept 0.16–0.94 (below 1 in 10/10 seeds)")
    assert "Holm over 5" in line and len(line.splitlines()) == 7
    assert "own currency         +0.425  (0.55 → 0.97; higher in 10, lower in  0 of 10 seeds)  resolved" in line
    assert "own language         +0.219  (0.77 → 0.99;" in line
    assert "efficacy             -0.084  (0.46 → 0.38; higher in  0, lower in  6 of 10 seeds)  not resolved" in line


def test_trace_and_edits_reads_the_trace_beside_the_edits_with_holm_over_two():
    keep, sites = edit_budget.load_keep(), edit_budget.load_sites()
    efficacy = edit_budget.keep_values(keep, "plain", "efficacy", range(10))
    trace = {"country": [1 - e for e in efficacy], "is": [1 - sites[s]["kept is"] for s in range(10)]}   # ρ = +1
    text = edit_budget.trace_and_edits(trace, keep, sites, range(10))
    lines = text.splitlines()
    assert len(lines) == 10 and lines[0].split()[1:] == [str(s) for s in range(10)]
    assert "Holm over 2" in lines[7] and text.count("resolved") == 2 and "not resolved" not in text
    assert "ρ -1.00" in lines[8] and "ρ -1.00" in lines[9]
    flat = {"country": [0.5] * 9 + [0.6], "is": [0.5] * 9 + [0.6]}
    assert "not resolved" in edit_budget.trace_and_edits(flat, keep, sites, range(10))


def test_keep_summary_names_its_edit_count():
    runs = edit_budget.load_keep(edit_budget.keep_path(152))
    assert edit_budget.keep_summary(runs, range(10), n_edits=152).startswith("10 seeds, 152 edits each")
    assert "32 edits each" in edit_budget.keep_summary(edit_budget.load_keep(), range(10))


def test_the_shipped_152_edit_keep_file_holds_ten_seeds_and_its_command():
    import json
    path = edit_budget.keep_path(152)
    assert path.name == "edit_keep_152.json" and edit_budget.keep_path(32) == edit_budget.KEEP_PATH
    made_by = json.loads(path.read_text())["made_by"]
    assert made_by == "python -m helpers.edit_budget --keep --edits 152"
    runs = edit_budget.load_keep(path)
    assert sorted(runs) == list(range(10)) and set(runs[0]) == {"plain", "keep"}
    own = edit_budget.keep_values(runs, "keep", "own", range(10))
    assert len(own) == 10 and all(0.0 <= v <= 1.0 for v in own)
    rows, _ = edit_budget.capital_edits(make_dataset(load_facts()), n_edits=152)
    assert len(set(rows.tolist())) == 152


def test_the_shipped_freeze_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = edit_budget.load_freeze()
    assert sorted(shipped) == list(range(10))
    keep = edit_budget.load_keep()
    for s, run in shipped.items():                  # "as is" is section 8's plain edits, counted out of 32
        assert abs(run["as is"] / 32 - keep[s]["plain"]["efficacy"]) < 1e-9
        assert run["changed, layer 1 attention at 'is' held"] >= run["as is"] - run["layer 1 attention at 'is' held"]
    made = edit_budget.make_freeze([0], tmp_path / "freeze.json")
    assert edit_budget.load_freeze(tmp_path / "freeze.json") == {0: shipped[0]}
    assert made["runs"]["0"] == shipped[0]


def test_freeze_summary_prints_each_condition_and_the_most_changed():
    text = edit_budget.freeze_summary(edit_budget.load_freeze(), range(10))
    lines = text.splitlines()
    assert len(lines) == 4 and "layer 1's attention at 'is' held" in lines[2]
    assert lines[2].split()[-10:] == ["0"] * 10
    assert "at most 2 edits change per seed" in lines[3]


def test_freeze_runs_with_the_notebooks_edits_given_matches_the_shipped_seed_0():
    from helpers.editing import mean_keys, rome_edits
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    e = edit_budget._edits(model, data, 0)
    W_hats = rome_edits(model, 0, e.keys, e.C, mean_keys(e.keys, e.same_subject[e.edit_rows], e.subject_pos),
                        data.ids, data.answer_pos, e.edit_rows, e.new_ids)
    assert edit_budget.freeze_runs(model, data, W_hats=W_hats) == edit_budget.load_freeze()[0]
