"""helpers.moe_lesson: notebook 05's one-line verdicts, balance table, fit line and live-check line."""

import torch

from helpers.moe_expert_count import load_expert_count
from helpers.moe_lesson import LIVE_ORDER, balance_table, fit_line, kernel_gap_line, live_checks_line, main, verdict_line
from helpers.moe_no_ffn import load_no_ffn
from helpers.moe_runs import load_runs
from helpers.stats import holm, paired_difference


def test_verdict_line_is_one_line_with_holms_verdicts_and_seed_counts():
    family = {"a − b": paired_difference(torch.tensor([-1.0, -1.2, -0.9, -1.1, -1.0]), torch.zeros(5)),
              "c − d": paired_difference(torch.tensor([0.1, -0.2, 0.3, -0.1, 0.0]), torch.zeros(5))}
    line = verdict_line(family, "five seeds")
    assert "\n" not in line and "Holm over 2" in line and "1 resolved" in line
    assert "a − b -1.04 lower 5/5" in line and "c − d +0.02 not resolved" in line
    assert [v.verdict for v in holm(family)] == ["lower", "not resolved"]


def test_balance_table_has_one_row_per_alpha_and_ten_seeds_of_starved_experts():
    lines = balance_table(load_runs(), 1e-2).splitlines()
    assert len(lines) == 4 and lines[1].startswith("α = 0 ") and lines[3].startswith("α = 0.1")
    assert lines[1].split()[-1].count(",") == 9


def test_fit_line_names_the_three_controls_and_the_command():
    line = fit_line(load_runs(), load_no_ffn(), 1e-2)
    assert "\n" not in line and "Holm over 8" in line and "python -m helpers.moe_lesson --fit" in line
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


def test_purity_line_reads_the_shipped_ten_seeds():
    from helpers.moe_lesson import load_purity, purity_line
    line = purity_line(load_purity())
    assert "\n" not in line and "0.68 (0.62–0.73)" in line and "0.42 (0.38–0.49)" in line and "higher 10/10" in line
