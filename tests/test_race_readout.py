"""helpers.race_readout: notebook 04's short read-out of section 6.2 (shown lines, folded tables, kernel lines)."""
import torch

from helpers.gating import GROUP, load_race, race_arms, race_family_with_controls
from helpers.race_readout import (KERNEL_PATHS, Folded, full_readout, group_verdicts, kernel_lines, kernel_move_line,
                                  kernel_note, race_verdicts, tuning_summary)
from helpers.stats import holm, paired_difference


def test_folded_shows_the_first_lines_and_folds_the_rest():
    f = Folded(["a", "b", "c <d>"], shown=1, label="more")
    assert repr(f) == "a"
    page = f._repr_html_()
    assert page.startswith("<pre>a</pre>") and "<details><summary>more</summary>" in page and "c &lt;d&gt;" in page
    assert "<details>" not in Folded(["a"], shown=1)._repr_html_()


def test_group_verdicts_shows_the_group_rows_with_thresholds_and_folds_the_others():
    g = torch.Generator().manual_seed(0)
    family = {f"{GROUP}, x": paired_difference(torch.randn(10, generator=g) - 2.0, torch.zeros(10)),
              "SwiGLU − ReLU, x": paired_difference(torch.randn(10, generator=g), torch.zeros(10))}
    shown = repr(group_verdicts({v.name: v for v in holm(family)}))
    assert "one Holm family of 2 rows, 1 resolved" in shown and " vs " in shown and "of 10" in shown
    assert "SwiGLU − ReLU" not in shown


def test_the_stored_race_reads_as_the_notebook_says():
    race = load_race()
    head = repr(tuning_summary(race.lr_sweep))
    assert "all inside the sweep" in head and "\n" not in head
    assert "runs above" not in "\n".join(tuning_summary(race.lr_sweep).lines)  # no untested stall count (04-r43)
    verdicts = {v.name: v for v in holm(race_family_with_controls(race_arms(race)))}
    shown = repr(group_verdicts(verdicts))
    assert f"{GROUP}, tuned" in shown and "not resolved" in shown and "27 rows, 5 resolved" in shown


def test_kernel_lines():
    assert kernel_lines([("ReLU, tuned seed 2", 0.001)]) == ("ReLU, tuned seed 2, retrained here: largest gap to the "
                                                             "stored curve < 1e-02 nats")
    line = kernel_move_line()
    assert line.startswith("default vs avx2 CPU kernel") and "of 20 curves" in line
    assert set(KERNEL_PATHS) == {"default", "avx2"}


def test_kernel_note_shows_one_line_and_folds_the_kernel_lines():
    arms = race_arms(load_race())
    note = kernel_note([("ReLU, tuned seed 2", 0.001)], arms, race_family_with_controls)
    shown = repr(note)
    assert "\n" not in shown and "all within 0.01 nats" in shown and "0 of 27 verdicts change" in shown
    assert "CPU kernel" in note._repr_html_() and "retrained here: largest gap" in note._repr_html_()
    assert "not all within" in repr(kernel_note([("x", 0.5)], arms, race_family_with_controls))


def test_section_readout_shows_one_verdict_and_one_table_and_folds_every_check():
    from helpers.gating import init_rms_controls
    from helpers.race_readout import section_readout
    race = load_race()
    arms = race_arms(race)
    r = section_readout(race, arms, [("ReLU, tuned seed 2", 0.001)], init_rms_controls(), 0.001,
                        race_family_with_controls)
    assert len(r.verdict.splitlines()) == 5 and "+0.062 nats, not resolved" in r.verdict
    assert "gated -0.093, dense -0.089" in r.verdict
    assert "every variant but GLU at lr 0.02 (40 seeds): -0.077, 95 % CI -0.20 to +0.05 → not resolved" in r.verdict
    assert "every variant at lr 0.005 (60 seeds)" in r.verdict
    assert r.table.startswith("one Holm family of 27 rows, 5 resolved") and len(r.table.splitlines()) == 5
    assert len(r.folds) == 7 and all("\n" not in s for s, _ in r.folds)
    assert "dense alone ×1.05: +0.015 nats, not resolved; both ×1.05: -0.078 nats, lower" in r.folds[0][0]
    page, plain = r._repr_html_(), repr(r)
    assert page.count("<details>") == 7 and "12 of 90 tuned seeds" in page
    assert all(b in plain for _, b in r.folds) and "+0.108 nats" in plain and "over 9 comparisons" in plain


def test_race_verdicts_are_the_lines_and_points_the_notebook_reads():
    """Notebook 04, cells 47-48: six rows, the controls second and third (the print and the gap-against-rate figure);
    verdicts Holm's over 27 rows."""
    v = race_verdicts(race_arms(load_race()), race_family_with_controls)
    assert (v.family_size, v.resolved) == (27, 5)
    assert list(v.rows) == ["0.005", "dense ×1.05", "both ×1.05", "0.01", "0.02", "tuned"]        # checks=False: no post-hoc row
    got = {k: (round(r.mean, 3), round(r.lo, 2), round(r.hi, 2), r.n, r.verdict) for k, r in v.rows.items()}
    assert got == {"tuned": (0.062, -0.10, 0.23, 90, "not resolved"),
                   "0.005": (-0.074, -0.11, -0.03, 60, "lower"),
                   "dense ×1.05": (0.015, -0.03, 0.06, 60, "not resolved"),
                   "both ×1.05": (-0.078, -0.12, -0.04, 60, "lower"),
                   "0.01": (-0.098, -0.16, -0.04, 60, "lower"),
                   "0.02": (-0.077, -0.20, 0.05, 40, "not resolved")}
    assert [v.rows[k].lr for k in ("0.005", "0.01", "0.02")] == [0.005, 0.01, 0.02] and v.rows["tuned"].lr is None
    shown = repr(v)
    assert "every variant but GLU at lr 0.02" in shown and "every variant at lr 0.01" in shown
    assert "verdict (Holm over 27 rows)" in shown.splitlines()[0]
    assert "dense alone at 0.00525 (×1.05)" in shown
    assert "both at 0.00525 (×1.05)" in shown
    assert len(shown.splitlines()) == 7


def test_full_readout_keeps_every_check_the_notebook_used_to_print():
    """What cell 46's folds showed before review 04-r43 moved them behind ``full_readout``: the same numbers."""
    plain = repr(full_readout(retrain=True))
    for line in [
        "one Holm family of 27 rows, 5 resolved",
        "dense alone ×1.05: +0.015 nats, not resolved; both ×1.05: -0.078 nats, lower",
        "about what lr ×1.05 buys each group (gated -0.093, dense -0.089)",
        "the family's other 21 rows, each variant − ReLU per arm: 2 resolved",
        "best 0.028 (ReLU, Bilinear, ReGLU, GEGLU); 0.04 (GELU, Swish, GLU, SwiGLU), all inside the sweep",
        "gap       -0.11  -0.11  -0.09  -0.07  -0.02  -0.02  +0.08  +1.14  +0.70",
        "12 of 90 tuned seeds hold a run above 4 nats at step 100; without them +0.108 nats (post hoc, t +2.15)",
        "without those 3 seeds +0.012 nats (19 lower of 37; post hoc, t +0.33)",
        "gated still -0.137 nats, t -4.14 vs 3.00 → lower",
        "Holm's step-down over 9 comparisons (5 % two-sided): 8 resolved",
        "one matched run retrained here: largest gap to the stored curve < 1e-02 nats",
        "tuned gap per block of 30: +0.02, +0.27, -0.11 nats) and longer runs",
        "gap with each variant at its best rate -0.004 nats, with every variant at 0.005 -0.108 nats",
        "highest loss at the end ReLU 0.04, SwiGLU 0.02 nats; their first 100 steps as stored < 1e-02",
        "2 stored runs retrained here: all within 0.01 nats of their curves; with tuned seeds 0-14 from another CPU "
        "kernel, 0 of 27 verdicts change",
        "ReLU, tuned seed 2, retrained here: largest gap to the stored curve < 1e-02 nats",
        "GEGLU, tuned seed 2, retrained here: largest gap to the stored curve < 1e-02 nats",
        "10 of 20 curves differ by more than 0.01 nats, the most by 2.3 (SwiGLU seed 1); run means by up to 0.43",
        "tuned gated (not GLU) − dense +0.065 nats, 38 lower of 90, t +0.78 vs 2.84 → not resolved; 5 of 27 rows"]:
        assert line in plain, line
    assert "9 of 20" not in plain and "at 0.056, runs" not in plain


def test_race_checks_print_the_step_size_gains_and_the_stall_free_tuned_gap():
    """Notebook 04, section 6.2: the post-hoc row (tuned, stalled seeds left out) and the step-size line."""
    from helpers.race_readout import race_checks
    arms = race_arms(load_race())
    lines = race_checks(arms)
    assert lines == ["lr ×1.05 alone, at 0.005: gated -0.093 nats, dense -0.089 nats"]
    v = race_verdicts(arms, race_family_with_controls, checks=True)
    row = v.rows["tuned, no stalls"]
    assert (round(row.mean, 3), row.n, row.lo, row.verdict) == (0.108, 78, None, "post hoc: no test")
    assert "12 seeds with a stalled run left out" in repr(v)
    assert repr(v).splitlines()[-1:] == lines and len(repr(v).splitlines()) == 9


def test_seed_curves_draws_both_panels():
    import matplotlib
    matplotlib.use("Agg")
    from helpers.race_readout import seed_curves
    fig = seed_curves()
    assert len(fig.axes) == 2 and all(ax.get_legend() is not None for ax in fig.axes)


def test_gap_figure_draws_the_verdict_rows():
    """Notebook 04, cell 47: the figure is the helper's; its title names the family and the legend every arm."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.race_readout import gap_figure
    v = race_verdicts(race_arms(load_race()), race_family_with_controls)
    fig = gap_figure(v)
    ax = fig.axes[0]
    assert "Holm over 27 rows" in ax.get_title() and ax.get_xscale() == "log"
    assert "95 % CI, unadjusted" in ax.get_title()          # the bars are not the Holm verdicts (review r66)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 5 and "control: dense alone at 0.00525 (×1.05)" in labels
    plt.close(fig)
