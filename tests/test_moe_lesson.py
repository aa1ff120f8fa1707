"""helpers.moe_lesson: notebook 05's one-line verdicts, balance table, fit line and live-check line."""

import torch

from helpers.moe_expert_count import load_expert_count
from helpers.moe_lesson import LIVE_ORDER, balance_table, fit_line, kernel_gap_line, live_checks_line, main, verdict_table
from helpers.moe_no_ffn import load_no_ffn
from helpers.moe_runs import load_runs
from helpers.stats import holm, paired_difference


def test_verdict_table_names_the_family_and_prints_one_short_row_per_comparison():
    family = {"a − b": paired_difference(torch.tensor([-1.0, -1.2, -0.9, -1.1, -1.0]), torch.zeros(5)),
              "c − d": paired_difference(torch.tensor([0.1, -0.2, 0.3, -0.1, 0.0]), torch.zeros(5))}
    lines = verdict_table(family, "five seeds").splitlines()
    assert lines[0] == "verdict, five seeds:" and "over 2 comparisons" in lines[1] and "1 resolved" in lines[1]
    assert "a − b" in lines[2] and "-1.04" in lines[2] and lines[2].endswith("→ lower")
    assert "c − d" in lines[3] and lines[3].endswith("→ not resolved") and max(map(len, lines)) < 120
    assert [v.verdict for v in holm(family)] == ["lower", "not resolved"]


def test_balance_table_has_one_row_per_alpha_and_ten_seeds_of_starved_experts():
    lines = balance_table(load_runs(), 1e-2).splitlines()
    assert len(lines) == 6 and lines[1].startswith("step 1, each α") and "2.22" in lines[1]
    assert lines[2].startswith("α = 0 ") and lines[4].startswith("α = 0.1")
    assert lines[5].startswith("random router") and "1.26" in lines[5]
    assert lines[2].split()[-1].count(",") == 9


def test_fit_line_names_the_three_controls():
    line = fit_line(load_runs(), load_no_ffn(), 1e-2)
    assert "over 9 comparisons" in line and len(line.splitlines()) == 11 and "python -m" not in line
    assert "CE at lr 1e-3: MoE α = 0.1 − MoE α = 0    +0.025   1 lower,  9 higher of 10" in line  # review 05-r62
    assert "+0.219" in line and "1,000 steps: MoE α = 0.1 − dense 768" in line
    for control in ("dense 96", "dense 768", "no FFN"):
        assert control in line


def test_live_checks_line_bounds_the_largest_gap_and_names_missing_files():
    assert live_checks_line({"section 6": 1e-5, "section 8": 2e-4}).endswith("< 1e-03")
    assert "0.05" in live_checks_line({"section 6": 0.05})
    line = live_checks_line({"section 6": 1e-5, "section 7": None})
    assert "section 7: the file has no run on this CPU kernel" in line
    assert set(LIVE_ORDER) >= {"section 6", "section 7", "section 8", "section 10"}


def test_main_prints_the_fit_controls(capsys):
    main(["--fit"])
    out = capsys.readouterr().out
    assert "no FFN, 10 seeds" in out and "long runs" in out and "Holm's step-down over 8" in out


def test_kernel_gap_line_reads_e8_from_both_kernels():
    line = kernel_gap_line(load_expert_count())
    assert "\n" not in line and "AVX2 -0.57 nats, 79% of the gap" in line and "DEFAULT -0.51 nats, 70% of the gap" in line


def test_purity_is_the_share_sent_to_each_groups_most_common_expert():
    from helpers.moe_lesson import purity
    expert = torch.tensor([0, 0, 1, 2, 2, 2])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    assert purity(expert, groups, n_experts=3) == 5 / 6
    assert purity(expert, torch.zeros(6, dtype=torch.long), n_experts=3) == 3 / 6


def test_purity_lines_read_the_shipped_ten_seeds_and_the_position_blind_baseline():
    from helpers.moe_lesson import load_purity, purity_lines
    text = purity_lines(load_purity())
    assert "'is' at positions 2, 5, 6" in text and "changes expert in 10/10 seeds" in text
    assert "changes expert in 9/10 seeds" in text and "router 0.68 (0.62–0.73)" in text
    assert "router − word only" in text and "higher in 10/10" in text


def test_purity_lines_carry_the_untrained_control_in_the_same_holm_family():
    from helpers.moe_lesson import load_purity, purity_lines
    study = load_purity()
    assert study["untrained"].keys() == study["runs"].keys()
    text = purity_lines(study)
    assert "untrained, the same seeds before step 1: router 0.70 (0.66–0.76), word only 0.63 (0.56–0.75)" in text
    assert "seed 0's position 6: 0.93 to one expert" in text
    assert "Holm's step-down over 2 comparisons" in text and "untrained: router − word only" in text


def test_untrained_purity_matches_the_shipped_seed_zero():
    from helpers.facts import load_facts, make_dataset
    from helpers.moe_lesson import load_purity, untrained_purity
    facts = load_facts()
    live = untrained_purity(0, make_dataset(facts), facts)
    ref = load_purity()["untrained"]["0"]
    assert live["is"] == ref["is"] and live["the"] == ref["the"]
    assert abs(live["position"] - ref["position"]) < 1e-3 and abs(live["row"] - ref["row"]) < 1e-3


def test_word_only_router_keeps_each_word_on_one_expert_and_never_beats_the_router_by_position():
    from helpers.moe_lesson import purity, word_only
    expert = torch.tensor([0, 1, 1, 2, 2, 0])
    words = torch.tensor([5, 5, 5, 7, 7, 7])
    position = torch.tensor([0, 1, 1, 0, 1, 0])
    blind = word_only(expert, words, n_experts=3)
    assert blind.tolist() == [1, 1, 1, 2, 2, 2]
    assert purity(blind, position, 3) <= purity(expert, position, 3)


def test_skew_readout_shows_one_small_table_and_one_verdict_line_and_folds_the_rest():
    from helpers.folded import Folded
    from helpers.moe_lesson import SKEW_IN_VIEW, SKEW_READ, skew_family, skew_readout
    from helpers.router_skew import load_skew

    skew, random_ids, seeds = load_skew()
    out = skew_readout(skew, random_ids)
    assert isinstance(out, Folded)
    shown = out.shown.splitlines()
    assert len(shown) == 2 + len(SKEW_IN_VIEW) + len(SKEW_READ) and shown[-4].startswith("verdict, 100 seeds")
    # review 05-r52: both causes in view, the mean alone (76 %) and the spread alone (67 %)
    assert "mean + isotropic" in out.shown and "mean removed" in out.shown and "mean + isotropic       " in out.folded
    assert shown[-1] == "  mean removed − isotropic Gaussian +0.68, higher in 100/100"   # one short line per verdict
    assert shown[1].split()[-1] == "100%"                          # the hidden states keep all of their own excess
    resolved = sum(v.resolved for v in holm(skew_family(skew, random_ids)))
    assert shown[-4].endswith(f"({resolved} of 8 resolved):") and "mean + isotropic − isotropic Gaussian" in out.folded
    assert "matched Gaussian − isotropic Gaussian +0.97, higher in 100/100" in shown[-3]   # the decisive control
    assert "Holm's step-down over 8 comparisons" in out.folded and "distinct inputs" not in out.folded


def test_fit_and_purity_readouts_show_one_line_per_verdict_read_and_fold_the_tables():
    """Review 05-r50: sections 8 and 9 printed their full verdict tables in view."""
    from helpers.moe_lesson import FIT_READ, fit_line, fit_readout, load_purity, purity_lines, purity_readout
    from helpers.moe_no_ffn import load_no_ffn
    from helpers.moe_runs import load_runs

    study, no_ffn = load_runs(), load_no_ffn()
    out = fit_readout(study, no_ffn, 1e-2)
    shown = out.shown.splitlines()                                 # review 05-r58: one line, the one verdict read
    assert len(shown) == 1 and FIT_READ == ("CE: dense 96 − no FFN",) and out.folded == fit_line(study, no_ffn, 1e-2)
    assert shown[0] == "fit verdict, ten seeds, Holm over 9 (5 resolved): CE: dense 96 − no FFN -0.065, lower in 9/10"
    assert "CE: MoE α = 0.1 − dense 96                +0.049   2 lower,  8 higher of 10" in out.folded
    purity = load_purity()
    out = purity_readout(purity)
    assert out.folded == purity_lines(purity) and len(out.shown.splitlines()) == 3
    assert "'is' in 10/10, 'the' in 9/10" in out.shown and "untrained 0.70 against 0.63" in out.shown


def test_capacity_readout_puts_the_no_ffn_row_beside_the_cost_table():
    from helpers.moe_capacity_cost import load_cost
    from helpers.moe_lesson import capacity_readout
    from helpers.moe_no_ffn import no_ffn_values

    no_ffn = load_no_ffn()
    out = capacity_readout(load_runs(), load_cost(), load_cost(trained=True), no_ffn, 1e-2)
    shown = out.shown.splitlines()
    assert shown[-2].startswith("no FFN at all (10 seeds)")
    assert shown[-2].split()[-1] == f"{float(no_ffn_values(no_ffn).mean()):.3f}"
    assert shown[-1].startswith("verdict, trained dropless, c = 1 − dropless (Holm over 6)")
    assert "Holm's step-down over 6 comparisons" in out.folded and "top-1 slots dropped at c = 1.25" in out.folded


def test_verdict_readout_shows_one_line_and_folds_the_table():
    from helpers.moe_lesson import verdict_readout
    from helpers.stats import paired_difference

    family = {"a − b": paired_difference(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.zeros(5)),
              "c − d": paired_difference(torch.tensor([0.1, -0.2, 0.1, -0.1, 0.05]), torch.zeros(5))}
    out = verdict_readout(family, "five seeds", "a table")
    assert out.shown == "a table\nverdict, five seeds, Holm over 2: 1 of 2 resolved; not resolved: c − d"
    assert out.folded.startswith("verdict, five seeds:") and "c − d" in out.folded


def test_expert_count_readout_names_the_control_and_folds_the_kernels():
    from helpers.moe_expert_count import load_expert_count
    from helpers.moe_lesson import expert_count_readout

    out = expert_count_readout(load_expert_count())
    assert out.shown.splitlines()[-1] == ("verdict, answer loss, ten seeds, paired, Holm over 9: 8 of 9 resolved; "
                                          "not resolved: E = 1 − dense, width 9")
    assert "DEFAULT" in out.folded and "E = 16 − E = 8" in out.folded


def test_rerun_seed_zero_from_reads_the_notebook_names(monkeypatch):
    """Review 05-r48: the reproducibility cell's 17-keyword call became rerun_seed_zero_from(globals())."""
    import inspect

    import helpers.moe_lesson as lesson

    params = set(inspect.signature(lesson.rerun_seed_zero).parameters)
    assert set(lesson.RERUN_NAMES) == params
    seen = {}
    monkeypatch.setattr(lesson, "rerun_seed_zero", lambda **kw: seen.update(kw) or "ok")
    namespace = {name: name.upper() for name in lesson.RERUN_NAMES.values()}
    assert lesson.rerun_seed_zero_from(namespace) == "ok" and seen["build_lm"] == "UNTRAINED_MOE_LM"
    assert "missing ARMS" in lesson.rerun_seed_zero_from({k: v for k, v in namespace.items() if k != "ARMS"})


def test_skew_summary_shows_the_three_rows_the_geometry_and_the_verdict_and_details_keep_the_rest():
    """Review 05-r51: section 6 in view is its table, the inputs' shape and one verdict line, with no fold."""
    from helpers.moe_lesson import SKEW_IN_VIEW, SKEW_READ, skew_details, skew_summary
    from helpers.router_skew import load_skew

    skew = load_skew()[0]
    lines = skew_summary(skew).splitlines()
    assert len(lines) == 3 + len(SKEW_IN_VIEW) + len(SKEW_READ)
    geometry = 1 + len(SKEW_IN_VIEW)
    assert "spread over an effective 11 of 64 directions (participation ratio)" in lines[geometry] and lines[geometry + 1].startswith("verdict, 100 seeds")
    assert "Holm's step-down over 8 comparisons" in skew_details(skew) and "W_g = 0, noise" in skew_details(skew)


def test_three_prices_reads_each_row_from_its_own_holm_family():
    """Review 05-r51: the lesson's three prices side by side, each with the verdict its section printed."""
    from helpers.moe_capacity_cost import load_cost
    from helpers.moe_lesson import three_prices
    from helpers.moe_no_ffn import load_no_ffn
    from helpers.moe_runs import load_runs

    lines = three_prices(load_runs(), load_cost(), load_cost(trained=True), load_no_ffn(), 1e-2).splitlines()
    assert len(lines) == 5
    assert "3.21     1.92   -1.29, lower in 10/10" in lines[1]
    assert "36%      14%   -0.22, lower in 10/10" in lines[2]
    assert lines[3].endswith("+0.005, not resolved (7 lower, 3 higher of 10)")
    assert "lr 1e-3" in lines[4] and lines[4].endswith("4.455    4.480   +0.025, higher in 9/10")  # review 05-r62: the slow start


def test_delay_study_seed_zero_recomputes_the_shipped_file_and_its_line_tests_only_the_later_steps():
    from helpers.moe_lesson import delay_line, delay_study, load_delay

    shipped = load_delay()
    live = delay_study(seeds=(0,))
    for arm, by_seed in live["runs"].items():
        for step, ce in by_seed["0"].items():
            assert abs(ce - shipped["runs"][arm]["0"][step]) < 2e-3, (arm, step)
    line = delay_line(shipped)
    # review 05-r66: step 15 is judged once, in the fit family (the same runs); the delay line tests steps 30 and 60
    assert "Holm over 2" in line and "(step 15: the row above)" in line and "step 15 +" not in line and "step 30 -0.004 not resolved, step 60 -0.011 not resolved" in line and "step 60" in line


def test_delay_files_step_fifteen_is_the_fit_familys_slow_start():
    """The delay file's step 15 is the study's lr 1e-3 run, so the fit family's verdict covers it."""
    from helpers.moe_lesson import SLOW_LR, load_delay
    from helpers.moe_runs import load_runs, values

    delay, study = load_delay(), load_runs()
    for arm in ("MoE, α = 0", "MoE, α = 0.1"):
        shipped = [delay["runs"][arm][str(s)]["15"] for s in delay["settings"]["seeds"]]
        assert max(abs(a - b) for a, b in zip(shipped, values(study, arm, "ce", SLOW_LR).tolist())) < 1e-4, arm


def test_three_prices_figure_draws_three_titled_panels_from_the_shipped_files():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.moe_lesson import load_delay, three_prices_figure
    from helpers.moe_runs import load_runs

    fig = three_prices_figure(load_runs(), load_delay(), 1e-2)
    axes = fig.axes
    assert len(axes) == 3
    assert [ax.get_title().split(":")[0] for ax in axes] == ["waiting", "drops", "fit"]
    assert all(ax.get_ylabel() for ax in axes)
    assert [t.get_text() for t in axes[2].get_xticklabels()] == ["15\n(lr 1e-2)", "15\n(lr 1e-3)", "30\n(lr 1e-3)",
                                                                "60\n(lr 1e-3)"]
    bars = [round(p.get_height(), 2) for p in axes[0].patches]
    assert bars == [3.21, 1.92]                            # the table's waiting row
    assert [round(p.get_height()) for p in axes[1].patches] == [36, 14]   # the table's drops row, in %
    # review 05-r67: the waiting title claims a cut, not an even load; a random router's level is drawn beside even
    from helpers.moe_lesson import chance_busiest
    assert axes[0].get_title() == "waiting: α = 0.1 cuts the busiest load"
    levels = {line.get_label(): line.get_ydata()[0] for line in axes[0].get_lines() if not line.get_label().startswith("_")}
    assert levels["even load"] == 1.0 and abs(levels["random router (chance)"] - chance_busiest()) < 1e-12
    assert round(levels["random router (chance)"], 2) == 1.26              # the balance table's last row
    assert "layer 1" in axes[1].get_ylabel() and "above 0: α = 0.1 fits worse" in axes[2].get_ylabel()
    plt.close(fig)
