"""helpers.race_readout: notebook 04's short read-out of section 6.2 (shown lines, folded tables, kernel lines)."""
import torch

from helpers.gating import GROUP, load_race, race_arms, race_family_with_controls
from helpers.race_readout import (KERNEL_PATHS, Folded, group_verdicts, kernel_lines, kernel_move_line, kernel_note,
                                  tuning_summary)
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
    assert "all inside the sweep" in head and "gated (not GLU) 9 of 20, dense 0 of 15" in head
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
    assert "lr 0.02 (40 seeds): -0.077, 95 % CI -0.20 to +0.05 → not resolved" in r.verdict
    assert r.table.startswith("one Holm family of 27 rows, 5 resolved") and len(r.table.splitlines()) == 5
    assert len(r.folds) == 7 and all("\n" not in s for s, _ in r.folds)
    assert "dense alone ×1.05: +0.015 nats, not resolved; both ×1.05: -0.078 nats, lower" in r.folds[0][0]
    page, plain = r._repr_html_(), repr(r)
    assert page.count("<details>") == 7 and "12 of 90 tuned seeds" in page
    assert all(b in plain for _, b in r.folds) and "+0.108 nats" in plain and "over 9 comparisons" in plain
