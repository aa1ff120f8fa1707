"""helpers.moe_audit: notebook 07's short reading of the race (the lead-shrinks test, the one verdict line)."""

import torch

from helpers.moe_audit import (RaceAudit, equal_flops_line, lead_shrink_family, lead_shrink_lines, long_run_fold,
                               steps_saved_figure, steps_to_dense_loss)
from helpers.moe_long_run import DEEPSEEK_300_PATH, LongRun, load_long_run, load_ten_seeds
from helpers.moe_race import RACE_PAIRS, load_race, section_family
from helpers.stats import holm


def test_the_lead_change_is_the_paired_t_of_each_seeds_change():
    marks = [300, 3000]
    loss = {"MoE, lr 0.02": torch.tensor([[0.5, 0.4, 0.6], [0.1, 0.1, 0.2]], dtype=torch.float64),
            "dense, width 11, lr 0.04": torch.tensor([[1.0, 1.0, 1.1], [0.3, 0.5, 0.3]], dtype=torch.float64)}
    run = LongRun(3000, marks, [0.02], [], [0, 1, 2], {}, {}, loss, {})
    fam = lead_shrink_family(run, [("MoE, lr 0.02", "dense, width 11, lr 0.04")])
    (c,) = fam.values()
    # leads: 300 steps 0.5, 0.6, 0.5; 3,000 steps 0.2, 0.4, 0.1 -> changes -0.3, -0.2, -0.4
    torch.testing.assert_close(c.diffs, torch.tensor([-0.3, -0.2, -0.4], dtype=torch.float64))
    assert c.lower == 3


def test_the_shipped_lead_shrinks_in_three_of_four_pairings():
    lines = lead_shrink_lines(load_ten_seeds())
    assert len(lines) == 5 and sum(line.endswith("→ shrank") for line in lines) == 3
    assert lines[-1].endswith("→ not resolved") and "t  -0.93" in lines[-1]


def test_the_verdict_line_counts_the_eight_equal_flops_rows():
    race, long = load_race(), load_ten_seeds()
    verdicts = holm(section_family(race, RACE_PAIRS, long, load_long_run(DEEPSEEK_300_PATH)))
    assert "lower in 8 of 8" in equal_flops_line(verdicts) and "26 comparisons, 17 resolved" in equal_flops_line(verdicts)


def test_the_audit_shows_its_summary_and_folds_its_tables():
    audit = RaceAudit(["a & b"], ["table <1>"], deepseekmoe=None)
    assert repr(audit) == "a & b"
    page = audit._repr_html_()
    assert "a &amp; b" in page and "<details>" in page and "table &lt;1&gt;" in page


def test_the_long_run_fold_shows_two_verdict_lines_and_folds_the_unstable_width_19_seeds():
    race, long = load_race(), load_ten_seeds()
    verdicts = holm(section_family(race, RACE_PAIRS, long, load_long_run(DEEPSEEK_300_PATH)))
    fold = long_run_fold(verdicts, long)
    shown = repr(fold).splitlines()
    assert len(shown) == 2 and shown[0].endswith("10 of 10 seeds, resolved)") and "0.56" in shown[0]
    assert "losses 0.007 and 0.269" in shown[0] and "losses 0.006 and 0.033" in shown[1]
    assert shown[1].endswith("9 of 10 seeds, not resolved)") and "0.03 at 3,000" in shown[1]
    assert "<details>" in fold._repr_html_() and any("loss 1.377 0.454" in line for line in fold.lines)


def test_the_equal_flops_split_shows_the_eight_and_folds_the_other_eighteen():
    from helpers.moe_audit import equal_flops_split

    race, long = load_race(), load_ten_seeds()
    verdicts = holm(section_family(race, RACE_PAIRS, long, load_long_run(DEEPSEEK_300_PATH)))
    eight, others = equal_flops_split(verdicts)
    assert len(eight) == 8 and all(v.verdict == "lower" for v in eight)
    assert repr(others).startswith("the family's other 18 comparisons") and len(others.lines) == 20
    assert others.lines[1].startswith("the 26: the race's 18 (100 and 300 steps, 20 seeds), 4 at 3,000 steps")


def test_balance_verdicts_show_the_headline_and_the_rerun_line_and_fold_the_rest():
    from helpers.moe_audit import balance_verdicts
    from helpers.moe_race import FRESH_SEEDS_PATH, KERNEL_RERUN_PATH, load_race

    folded = balance_verdicts(load_race(), load_race(KERNEL_RERUN_PATH), load_race(FRESH_SEEDS_PATH))
    assert folded.shown == 2 and "20 comparisons" in folded.lines[0] and "14 resolved" in folded.lines[0]
    assert folded.lines[1] == ("verdicts unchanged on another CPU kernel: 18 of 20; on seeds 200–219: 17 of 20 "
                               "(which: folded)")
    assert any(line.startswith("the verdicts that moved (single runs") for line in folded.lines)
    assert len(folded.lines) > 2 + 20


def test_deepseekmoe_on_fresh_seeds_is_a_rate_instability():
    """At its tuned 0.16 DeepSeekMoE's lead over width 19 on seeds 300-319 is gone, with 4 runs diverged; at 0.08,
    fixed in advance, it leads in every seed (the shipped ``DEEPSEEK_300_FRESH_PATH``)."""
    from helpers.moe_audit import fresh_deepseekmoe_lines
    from helpers.moe_race import RACE_FRESH_SEEDS_PATH, load_race

    lines = fresh_deepseekmoe_lines(load_race(RACE_FRESH_SEEDS_PATH))
    assert lines[0].startswith("DeepSeekMoE − width 19 (lr 0.04) on seeds 300–319, 300 steps, Holm over these 2")
    assert lines[1].split()[:4] == ["at", "its", "tuned", "lr"] and lines[1].endswith("→ not resolved")
    assert "lower in 20 of 20" in lines[2] and lines[2].endswith("→ lower")
    assert lines[3].endswith("ending above 0.7 nats: 4 of 20 (at lr 0.08: 0)")
    from helpers.moe_audit import _fixed_rate_line
    assert _fixed_rate_line(lines) == ("  at lr 0.08, fixed in advance, DeepSeekMoE is lower than width 19 in 20 of 20 "
                                       "of those seeds (resolved; its t folded)")


def test_steps_saved_are_read_from_the_long_runs_curves_at_each_mark():
    import matplotlib.pyplot as plt
    import pytest

    from helpers.moe_long_run import load_curves

    ten, curves = load_ten_seeds(), load_curves()
    moe = curves["MoE, lr 0.02"][0]
    target = float(ten.loss["dense, width 11, lr 0.04"][-1].mean())          # width 11 after 3,000 steps
    hit = steps_to_dense_loss(moe, target)
    assert moe[hit - 1] <= target < moe[:hit - 1].min() and hit == 178
    assert steps_to_dense_loss(moe, -1.0) is None
    fig, line = steps_saved_figure(ten)
    assert len(fig.axes) == 2
    assert line.startswith("width 11's loss after 300, 1,000, 3,000 steps: the top-1 MoE reaches it in 2.8×, 6.9×, "
                           "16.9× fewer steps; dense width 64")
    control = curves["dense, width 64, lr 0.08"][0]
    wide = [steps_to_dense_loss(control, float(ten.loss["dense, width 11, lr 0.04"][i].mean())) for i in (1, 2, 3)]
    assert line.endswith("in " + ", ".join(f"{b / h:.1f}×" for b, h in zip((300, 1_000, 3_000), wide)) + " fewer")
    fig, line = steps_saved_figure(ten, {k: v for k, v in curves.items() if k != "dense, width 64, lr 0.08"})
    assert line.endswith("16.9× fewer steps")
    plt.close("all")
    plt.close(fig)
    with pytest.raises(ValueError, match="not the long run's"):
        steps_saved_figure(LongRun(**{**ten.__dict__, "seeds": [0]}))
