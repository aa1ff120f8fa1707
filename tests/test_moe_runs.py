"""helpers.moe_runs: notebook 05's training runs, the shipped file and the tables the notebook prints."""
import pytest
import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe import arrival_rank
from helpers.moe_runs import (ARMS, CAPACITY_FACTORS, LONG_ARMS, RUNS_PATH, answer_share, best_lr, busiest,
                              capacity_figure, capacity_summary, capacity_values, dropped_share, holm_groups, largest_difference, lm_config,
                              lm_families, load_runs, long_table, main, make_model, over_seeds, relation_prior, starved,
                              summaries, sweep_table, train_run, training_table, values)


@pytest.fixture(scope="module")
def data():
    return make_dataset(load_facts())


def test_arms_start_alike_and_match_compute_or_parameters(data):
    config = lm_config(data)
    a, b = make_model("MoE, α = 0", 3, config), make_model("MoE, α = 0.1", 3, config)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert a.blocks[0].ffn.balance_coef == 0 and b.blocks[0].ffn.balance_coef == 0.1
    moe_ffn = sum(p.numel() for p in a.blocks[0].ffn.parameters())
    wide = sum(p.numel() for p in make_model("dense, width 768", 0, config).blocks[0].ffn.parameters())
    narrow = sum(p.numel() for p in make_model("dense, width 96", 0, config).blocks[0].ffn.parameters())
    assert (moe_ffn, wide, narrow) == (147_968, 147_456, 18_432)
    with pytest.raises(ValueError, match="arm must be one of"):
        make_model("sparse", 0, config)


def test_a_run_is_deterministic_and_its_summary_matches_its_log(data):
    r1 = train_run("MoE, α = 0.1", 0, data, steps=3, lr=1e-2)
    r2 = train_run("MoE, α = 0.1", 0, data, steps=3, lr=1e-2, checkpoints=[2])
    assert r1.ce == r2.ce and r1.answer_ce == r2.answer_ce and 0 <= r1.accuracy <= 1
    s = r2.summary()
    assert set(s) == {"ce", "answer_ce", "accuracy", "curve", "max_over_mean", "last_counts", "capacity"}
    assert list(s["curve"]) == ["2"] and len(s["max_over_mean"]) == 3
    assert busiest(s) == pytest.approx(busiest(r2.log), abs=1e-4) and starved(s) == starved(r2.log)
    assert len(r2.final) == 2 and r2.final[0].routing.expert_index.shape == (data.ids.numel(), 1)
    dense = train_run("dense, width 96", 0, data, steps=2, keep_model=False)
    assert dense.log is None and dense.model is None and set(dense.summary()) == {"ce", "answer_ce", "accuracy"}


def test_capacity_summary_replays_a_routing_with_capacity():
    index = torch.tensor([[0], [0], [0], [1]])
    assert dropped_share(index, 4, 1.0) == 0.5                                  # C = 1: two of expert 0's three go
    assert dropped_share(index, 4, 1.0) == float((arrival_rank(index, 4) >= 1).double().mean())
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.5, 0.1, 0.4], [0.1, 0.8, 0.1]] * 3)
    summary = capacity_summary(probs)
    assert len(summary["top1"]) == len(summary["top2"]) == len(CAPACITY_FACTORS)
    assert summary["busiest_choice"][0] == pytest.approx(9 / 4)                # 9 of 12 first choices on expert 0
    assert all(a >= b for a, b in zip(summary["top1"], summary["top1"][1:]))  # more room, fewer drops


def test_prior_and_answer_share(data):
    assert 3.0 < relation_prior(data) < 4.0
    assert answer_share(data) == pytest.approx(len(data) / int((data.targets != -100).sum()))
    assert over_seeds([1.0, 2.0, 3.0], 1) == "2.0 (1.0–3.0)"


def test_a_small_study_round_trips_through_the_file(tmp_path, data):
    out = tmp_path / "runs.json"
    assert main(["--results", "--seeds", "0", "--lrs", "0.01", "0.03", "--long-steps", "4",
                 "--out", str(out)]) == 0
    study = load_runs(out)
    assert set(study["short"]) == set(ARMS) and set(study["long"]) == set(LONG_ARMS)
    assert study["settings"]["long_steps"] == 4 and list(study["short"]["MoE, α = 0"]) == ["0.01", "0.03"]
    assert values(study, "dense, width 96", "ce", 1e-2).shape == (1,)
    assert values(study, "dense, width 96", "ce").shape == (1,)                       # the long study
    assert len(summaries(study, "MoE, α = 0", 0.03, seeds=[0])) == 1
    assert capacity_values(study, "MoE, α = 0.1", 0.01, "top2", 1).shape == (1,)
    assert best_lr(study, "MoE, α = 0.1") in (0.01, 0.03)
    assert len(sweep_table(study).splitlines()) == 1 + len(ARMS) and "*" in sweep_table(study)
    table = long_table(study, floor=1.0).splitlines()
    assert len(table) == 1 + len(LONG_ARMS) and "4" in table[0].split()
    live = {(a, 0): train_run(a, 0, data, lr=1e-2, keep_model=False) for a in ("MoE, α = 0", "dense, width 96")}
    assert largest_difference(live, study) < 1e-4                          # same recipe, stored to 1e-5
    assert len(training_table(live, ["MoE, α = 0", "dense, width 96"], [0]).splitlines()) == 3


def test_only_one_study_is_retrained_and_the_other_kept(tmp_path):
    out = tmp_path / "runs.json"
    main(["--results", "--seeds", "0", "--lrs", "0.01", "--long-steps", "2", "--out", str(out)])
    before = load_runs(out)
    main(["--results", "--seeds", "1", "--lrs", "0.03", "--only", "short", "--out", str(out)])
    after = load_runs(out)
    assert after["long"] == before["long"] and after["settings"]["long_steps"] == 2
    assert list(after["short"]["dense, width 96"]) == ["0.03"] and after["settings"]["lrs"] == [0.03]


def test_the_shipped_file_holds_ten_seeds_of_every_arm_and_learning_rate():
    study = load_runs()
    assert RUNS_PATH.name == "moe_runs.json" and study["made_by"] == "python -m helpers.moe_runs --results"
    for arm in ARMS:
        assert [float(lr) for lr in study["short"][arm]] == study["settings"]["lrs"]
        assert all(list(seeds) == [str(s) for s in range(10)] for seeds in study["short"][arm].values())
    assert all(len(study["long"][arm]) == 10 for arm in LONG_ARMS)
    assert all("capacity" in s for arm in ARMS if arm.startswith("MoE") for s in summaries(study, arm, 1e-2))


def test_load_runs_names_the_command_when_the_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m helpers.moe_runs --results"):
        load_runs(tmp_path / "missing.json")


def test_the_long_table_prints_how_far_each_arm_still_fell_over_its_last_stretch():
    run = lambda c750, ce: {"ce": ce, "accuracy": 1.0, "curve": {"250": 3.0, "750": c750}}
    study = {"settings": {"long_steps": 1000},
             "long": {"MoE": {"0": run(1.5, 1.25), "1": run(1.25, 1.125)}, "dense": {"0": run(1.0, 1.0)}}}
    header, moe, dense = long_table(study, floor=1.0).splitlines()
    assert "fell 750–1,000" in header
    assert "0.188 (max 0.250)" in moe and "0.000 (max 0.000)" in dense


def test_lm_families_read_the_shipped_runs_seed_by_seed():
    study = load_runs()
    balance, ce = lm_families(study, 1e-2)
    assert list(balance) == ["busiest/mean: α = 0.1 − α = 0", "busiest/mean: α = 0.01 − α = 0",
                             "busiest/mean: α = 0.1 − α = 0.01", "busiest/mean, α = 0: end − first step",
                             "busiest/mean, α = 0.01: end − first step", "busiest/mean, α = 0.1: end − first step"]
    assert len(ce) == 6 and all(d.n == 10 for d in (*balance.values(), *ce.values()))
    moe, dense = values(study, "MoE, α = 0.1", "ce", 1e-2), values(study, "dense, width 96", "ce", 1e-2)
    assert abs(ce["CE: MoE α = 0.1 − dense 96"].mean - float((moe - dense).mean())) < 1e-12


def test_capacity_figure_draws_the_mean_over_seeds_per_factor():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = load_runs()
    fig = capacity_figure(study, 1e-2)
    line = fig.axes[1].get_lines()[0]                                      # α = 0.1, top-1
    mean = torch.stack([capacity_values(study, "MoE, α = 0.1", 1e-2, "top1", i)
                        for i in range(len(CAPACITY_FACTORS))]).mean(1)
    assert list(line.get_xdata()) == list(CAPACITY_FACTORS)
    assert torch.allclose(torch.as_tensor(line.get_ydata(), dtype=torch.float64), mean)
    plt.close(fig)


def test_holm_groups_is_one_family_printed_in_headed_groups():
    from helpers.stats import holm_table
    balance, ce = lm_families(load_runs(), 1e-2)
    grouped = holm_groups({"balance": balance, "fit": ce}).splitlines()
    plain = holm_table({**balance, **ce}).splitlines()
    assert grouped[0] == plain[0]                       # one family: the same header, thresholds and verdicts
    assert grouped[1] == "balance:" and grouped[2 + len(balance)] == "fit:"
    assert grouped[2:2 + len(balance)] + grouped[3 + len(balance):] == plain[1:]
    with pytest.raises(ValueError, match="repeat"):
        holm_groups({"a": balance, "b": balance})
    shown = holm_groups({"balance": balance, "fit": ce}, show=["fit"]).splitlines()
    assert shown[0] == plain[0] and shown[1] == "fit:" and shown[2:] == plain[1 + len(balance):]
    with pytest.raises(ValueError, match="show"):
        holm_groups({"balance": balance}, show=["fit"])


def test_the_printed_ce_row_is_the_paired_t_by_hand():
    """The row 'CE: MoE α = 0.1 − dense 96' of section 8: +0.049, t +1.97, as the plain paired t by hand; the
    notebook prints it as mean / standard error."""
    study = load_runs()
    d = values(study, "MoE, α = 0.1", "ce", 1e-2) - values(study, "dense, width 96", "ce", 1e-2)
    row = lm_families(study, 1e-2)[1]["CE: MoE α = 0.1 − dense 96"]
    t = d.mean() / (d.std() / len(d) ** 0.5)
    assert f"{d.mean():+.3f}, t {t:+.2f}" == "+0.049, t +1.97"
    assert abs(row.t - float(t)) < 1e-9 and abs(row.mean / row.se - float(t)) < 1e-9
