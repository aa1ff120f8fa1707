import torch

from helpers.moe_expert_count import (DENSE_LRS, EXPERT_COUNTS, TOTAL_E, dense_losses, dense_run, dense_width,
                                      doubling_family, expert_count_run, figure, load_expert_count, losses, main,
                                      payoff_family, seed0_reference, kernel_line, total_line, total_losses,
                                      total_seed0, total_width)


def test_the_shipped_file_holds_ten_seeds_per_count_and_seed_0_reproduces():
    study = load_expert_count()
    assert study["made_by"] == "python -m helpers.moe_expert_count --results"
    assert [int(e) for e in study["loss"]] == list(EXPERT_COUNTS)
    assert all(losses(study, e).shape == (10,) for e in EXPERT_COUNTS)
    assert abs(expert_count_run(2, 0) - seed0_reference(study, 2)) < 1e-3
    assert study["seed0_by_kernel"]["AVX2"] == {e: study["loss"][e]["0"] for e in study["loss"]}
    assert list(doubling_family(study)) == ["E = 2 − E = 1", "E = 4 − E = 2", "E = 8 − E = 4", "E = 16 − E = 8"]


def test_a_small_file_round_trips(tmp_path, monkeypatch):
    import helpers.moe_expert_count as m
    monkeypatch.setattr(m, "EXPERT_COUNTS", (1, 2))
    monkeypatch.setattr(m, "STEPS", 5)
    out = tmp_path / "count.json"
    assert main(["--results", "--seeds", "0", "--out", str(out)]) == 0
    study = load_expert_count(out)
    assert list(study["loss"]) == ["1", "2"] and list(study["loss"]["1"]) == ["0"]


def test_the_dense_line_has_at_least_each_moes_active_parameters_and_seed_0_reproduces():
    """Width ceil(8 + E/3): 3·d·w >= 3·d·8 + d·E (one expert plus the router); ten seeds at both rates, on AVX2."""
    assert [dense_width(e) for e in EXPERT_COUNTS] == [9, 9, 10, 11, 14]
    assert all(3 * 8 * dense_width(e) >= 3 * 8 * 8 + 8 * e > 3 * 8 * (dense_width(e) - 1) for e in EXPERT_COUNTS)
    study = load_expert_count()
    assert sorted(study["dense"], key=int) == ["9", "10", "11", "14"]
    assert all(list(runs) == [f"{lr:g}" for lr in DENSE_LRS] and all(len(r) == 10 for r in runs.values())
               for runs in study["dense"].values())
    assert all(DENSE_LRS[0] < dense_losses(study, e)[1] < DENSE_LRS[-1] for e in EXPERT_COUNTS)   # inside the grid
    values, lr = dense_losses(study, 8)
    assert values.shape == (10,) and lr in DENSE_LRS
    assert abs(float(values.mean()) - min(sum(r.values()) / 10 for r in study["dense"]["11"].values())) < 1e-12
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert abs(dense_run(11, 0, lr) - study["dense"]["11"][f"{lr:g}"]["0"]) < 1e-3


def test_payoff_family_pairs_each_moe_with_its_dense_twin_then_the_doublings():
    study = load_expert_count()
    family = payoff_family(study)
    assert list(family)[:5] == [f"E = {e} − dense, width {dense_width(e)}" for e in EXPERT_COUNTS]
    assert list(family)[5] == "E = 8 − dense, width 67"
    assert list(family)[6:] == list(doubling_family(study))[:-1]          # 16 against 8: kernel_line, no verdict
    row = family["E = 8 − dense, width 11"]
    assert abs(row.mean - float((losses(study, 8) - dense_losses(study, 8)[0]).mean())) < 1e-12
    import matplotlib.pyplot as plt
    fig = figure(study)
    # a grey line per seed, the MoE mean to E = 8, its dotted step to 16 and the hollow E = 16 (not ranked), the dense
    # line, the total-parameter mark, the legend's grey (no kernel line)
    assert len(fig.axes[0].lines) == 10 + 6
    assert any("(not ranked against E = 8)" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    plt.close(fig)


def test_a_small_dense_file_round_trips(tmp_path, monkeypatch):
    import helpers.moe_expert_count as m
    monkeypatch.setattr(m, "EXPERT_COUNTS", (1, 4))
    monkeypatch.setattr(m, "STEPS", 3)
    out = tmp_path / "count.json"
    assert main(["--results", "--seeds", "0", "--out", str(out)]) == 0
    assert main(["--dense", "--seeds", "0", "--out", str(out)]) == 0
    study = load_expert_count(out)
    assert list(study["dense"]) == ["9", "10"] and list(study["dense"]["9"]["0.08"]) == ["0"]


def test_the_default_kernel_arms_and_the_total_parameter_line():
    """E = 8 and 16 retrained on the default kernel (ten seeds each); the dense FFN of E = 8's total parameters
    (width 67 >= 8 experts plus the router) at its best rate, inside the rate grid."""
    study = load_expert_count()
    assert total_width(8) == 67 and 3 * 8 * 67 >= 8 * 3 * 8 * 8 + 8 * 8 > 3 * 8 * 66
    assert sorted(study["loss_by_kernel"]["DEFAULT"], key=int) == ["8", "16"]
    assert all(len(runs) == 10 for runs in study["loss_by_kernel"]["DEFAULT"].values())
    assert {e: study["loss_by_kernel"]["DEFAULT"][e]["0"] for e in ("8", "16")} == {
        e: study["seed0_by_kernel"]["DEFAULT"][e] for e in ("8", "16")}
    line = kernel_line(study)
    assert "AVX2 kernel -0.064, lower in 7/10" in line and "DEFAULT kernel -0.159, lower in 10/10" in line
    values, lr = total_losses(study)
    assert values.shape == (10,) and DENSE_LRS[0] < lr < DENSE_LRS[-1]
    assert "closes" in total_line(study)
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert abs(dense_run(67, 0, lr) - study["dense_total"]["67"][f"{lr:g}"]["0"]) < 1e-3


def test_section_seed_0_reproduces_on_this_kernel_and_has_no_reference_elsewhere(monkeypatch):
    """Seed 0 of E = 4 and of the width-67 line reproduce the file on AVX2, DEFAULT and AVX512; on a kernel the
    file has no run for (here a made-up one) it has no reference run (``None``) instead of raising."""
    study = load_expert_count()
    assert set(study["seed0_by_kernel"]) == {"AVX2", "DEFAULT", "AVX512"}
    if torch.backends.cpu.get_cpu_capability() in study["seed0_by_kernel"]:
        assert abs(expert_count_run(4, 0) - seed0_reference(study, 4)) < 1e-3
        assert abs(dense_run(total_width(TOTAL_E), 0, total_losses(study)[1]) - total_seed0(study)) < 1e-3
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "SVE256")
    assert seed0_reference(study, 4) is None and total_seed0(study) is None


def test_the_300_step_file_reads_as_one_gap_line():
    """Review 05-r50: section 7's 79 % is a 100-step share; the 300-step runs give its longer-training value."""
    from helpers.moe_expert_count import LONG_STEPS, TOTAL_E, dense_width, load_long, long_gap_line, total_width

    study = load_long()
    assert study["settings"]["steps"] == LONG_STEPS == 300 and study["environment"]["cpu_capability"] == "AVX2"
    assert set(study["loss"]) == {str(TOTAL_E)} and set(study["dense"]) == {str(dense_width(TOTAL_E))}
    assert set(study["dense_total"]) == {str(total_width(TOTAL_E))}
    line = long_gap_line(study)
    assert line.startswith("after 300 steps, mean of 10 seeds") and line.endswith("the MoE closes 78% of the gap")
