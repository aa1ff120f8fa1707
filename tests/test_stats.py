import math

import pytest
import torch

from helpers.stats import holm, holm_table, null_verdict_rate, p_value, paired_difference, t_cdf, t_critical, welch


def test_paired_difference_and_its_verdict():
    d = paired_difference(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 3.5, 4.0]))
    assert d.diffs.tolist() == [-1.0, -1.5, -1.0] and d.lower == 3 and d.higher == 0 and d.n == 3
    assert d.mean == pytest.approx(-7 / 6)
    assert d.se == pytest.approx(torch.tensor([-1.0, -1.5, -1.0]).std().item() / 3 ** 0.5)
    assert d.verdict() == "lower" and d.df == 2 and d.critical() == pytest.approx(4.303, abs=1e-3)
    assert d.t == pytest.approx(d.mean / d.se) and d.p < 0.05
    near = paired_difference(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([0.54, 0.26, 0.23]))
    assert near.lower == 3 and -4.303 < near.t < -2 and near.verdict() == "not resolved"   # t ≈ -3.5, df 2
    assert near.verdict(threshold=2.0) == "lower"
    assert d.verdict(threshold=100.0) == "not resolved"
    worse = paired_difference(torch.tensor([2.0, 3.0, 4.1]), torch.tensor([1.0, 2.0, 3.0]))
    assert worse.lower == 0 and worse.higher == 3 and worse.verdict() == "higher"
    one = paired_difference(torch.tensor([1.0]), torch.tensor([2.0]))
    assert one.verdict() == "not resolved" and math.isnan(one.p)                 # no spread from one seed
    with pytest.raises(ValueError, match="one entry per seed"):
        paired_difference(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="threshold must be a positive number, got 0"):
        d.verdict(threshold=0)


def test_the_verdict_is_the_plain_paired_t_whatever_the_signs():
    # 9 of 10 seeds lower, t well past 2.262: resolved (one rule: no extra every-seed condition)
    diffs = torch.tensor([-1.0, -1.2, -0.8, -1.1, -0.9, -1.0, -1.3, -0.7, -1.0, 0.2], dtype=torch.float64)
    d = paired_difference(diffs, torch.zeros(10, dtype=torch.float64))
    assert d.lower == 9 and d.higher == 1 and d.t < -2.262 and d.verdict() == "lower"
    assert paired_difference(-diffs, torch.zeros(10, dtype=torch.float64)).verdict() == "higher"
    assert paired_difference(torch.tensor([0.1, -0.2, 0.05]), torch.zeros(3)).verdict() == "not resolved"


def test_null_verdict_rate_is_5_percent_at_every_seed_count():
    for n in (3, 10, 30):
        assert 0.04 < null_verdict_rate(n, draws=20_000) < 0.06
    with pytest.raises(ValueError, match="n_seeds"):
        null_verdict_rate(1)


def test_p_value_inverts_the_critical_value():
    for df in (2, 4, 9, 29, 7.3):
        assert p_value(t_critical(df), df) == pytest.approx(0.05, abs=1e-9)
        assert p_value(-t_critical(df, 0.01), df) == pytest.approx(0.01, abs=1e-9)
    assert p_value(0.0, 5) == pytest.approx(1.0) and math.isnan(p_value(float("nan"), 5))


def _with_t(t: float, n: int = 10):
    """A paired difference over n seeds whose t statistic is exactly t."""
    base = torch.linspace(-1, 1, n, dtype=torch.float64)
    base = base - base.mean()
    d = paired_difference(base + t * base.std().item() / math.sqrt(n), torch.zeros(n, dtype=torch.float64))
    assert d.t == pytest.approx(t)
    return d


def test_holm_is_the_step_down_over_p_values():
    # p-values 0.01, 0.04, 0.03, 0.005 at 4 comparisons: 0.005 < 0.0125, 0.01 < 0.0167, 0.03 > 0.025 stops
    ts = {name: -t_critical(9, p) for name, p in {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}.items()}
    verdicts = holm({name: _with_t(t) for name, t in ts.items()})
    assert [v.name for v in verdicts] == ["a", "b", "c", "d"]
    assert [v.rank for v in verdicts] == [2, 4, 3, 1]
    assert [v.verdict for v in verdicts] == ["lower", "not resolved", "not resolved", "lower"]
    assert verdicts[3].threshold == pytest.approx(t_critical(9, 0.05 / 4))
    assert verdicts[0].threshold == pytest.approx(t_critical(9, 0.05 / 3))
    # once a rank fails, later ranks are not resolved even past their own threshold
    stop = holm({"x": _with_t(-t_critical(9, 0.03)), "y": _with_t(-t_critical(9, 0.04))})
    assert [v.verdict for v in stop] == ["not resolved", "not resolved"]
    assert abs(stop[1].comparison.t) > stop[1].threshold          # y alone would pass at 5 %
    # a family of one is the plain t test
    one = _with_t(2.3)
    assert holm({"one": one})[0].verdict == one.verdict() == "higher"


def test_holm_agrees_with_holm_adjusted_p_values_on_random_families():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        m = int(torch.randint(1, 9, (1,), generator=g))
        family = {f"c{i}": paired_difference(torch.randn(6, generator=g, dtype=torch.float64) +
                                             float(torch.randn(1, generator=g)), torch.zeros(6, dtype=torch.float64))
                  for i in range(m)}
        ps = sorted((c.p, name) for name, c in family.items())
        adjusted, running = {}, 0.0
        for j, (p, name) in enumerate(ps):
            running = max(running, min(1.0, (m - j) * p))
            adjusted[name] = running
        got = {v.name: v.resolved for v in holm(family)}
        assert got == {name: adjusted[name] < 0.05 for name in family}


def test_holm_mixes_welch_and_paired_and_prints_every_part_of_the_rule():
    family = {"paired": _with_t(-5.0), "unpaired": welch([1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9, 2.2])}
    text = holm_table(family, unit=" nats", digits=2)
    lines = text.splitlines()
    assert lines[0] == "Holm's step-down over 2 comparisons (5 % two-sided): 2 resolved"
    assert "lower in 10/10, higher in  0/10" in lines[1] and "t  -5.00 (Holm threshold" in lines[1]
    assert "4 vs 4 runs" in lines[2] and lines[2].endswith("→ lower") and " nats" in lines[2]
    with pytest.raises(ValueError, match="at least one"):
        holm({})
    with pytest.raises(ValueError, match=r"comparisons\['x'\] must be a PairedDifference or Welch"):
        holm({"x": 1.0})


def test_t_critical_matches_the_tables():
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 9: 2.262, 10: 2.228, 30: 2.042}
    for df, value in table.items():
        assert t_critical(df) == pytest.approx(value, abs=6e-4)
    assert t_critical(1e7) == pytest.approx(1.960, abs=1e-3)
    assert t_critical(2.5) < t_critical(2) and t_critical(2.5) > t_critical(3)   # fractional df (Welch)
    assert t_critical(4, level=0.01) == pytest.approx(4.604, abs=1e-3)
    assert t_cdf(0.0, 3) == pytest.approx(0.5) and t_cdf(-t_critical(5), 5) == pytest.approx(0.025, abs=1e-9)
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="df"):
            t_critical(bad)
    with pytest.raises(TypeError, match="df"):
        t_critical(True)


def test_welch_matches_the_formula():
    a, b = [1.0, 2.0, 4.0], [3.0, 3.5, 5.0, 6.5]
    w = welch(a, b)
    va, vb = torch.tensor(a).var().item() / 3, torch.tensor(b).var().item() / 4
    assert w.diff == pytest.approx(7 / 3 - 4.5) and w.se == pytest.approx(math.sqrt(va + vb))
    assert w.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3))
    assert w.t == pytest.approx(w.diff / w.se) and w.verdict() == "not resolved"
    far = welch([0.10, 0.11, 0.12], [0.50, 0.52, 0.51])
    assert far.verdict() == "lower" and welch([0.50, 0.52, 0.51], [0.10, 0.11, 0.12]).verdict() == "higher"
    assert welch([1.0, 1.0], [1.0, 1.0]).verdict() == "not resolved"
    with pytest.raises(ValueError, match="at least two runs"):
        welch([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="one entry per run"):
        welch(torch.zeros(2, 2), [1.0, 2.0])


def test_holm_table_can_print_a_large_t_as_a_bound():
    """t_cap prints |t| above it as a bound (its later digits move with CPU rounding); the verdicts do not change."""
    family = {"big": paired_difference([1.0, 2.0, 3.1, 4.0, 5.0], [0.0, 1.1, 2.0, 3.0, 4.1]),
              "small": paired_difference([1.0, 2.0, 3.0, 4.0, 5.0], [1.1, 2.0, 3.2, 4.0, 5.0]),
              "down": paired_difference([0.0, 1.1, 2.0, 3.0, 4.1], [1.0, 2.0, 3.1, 4.0, 5.0])}
    plain, capped = holm_table(family), holm_table(family, t_cap=5)
    assert "> +5" in capped and "< -5" in capped and "-1.50" in capped
    assert [line.split("→")[-1] for line in plain.splitlines()[1:]] == \
        [line.split("→")[-1] for line in capped.splitlines()[1:]]
    assert holm_table(family, t_cap=None) == plain
    with pytest.raises(ValueError, match="t_cap"):
        holm_table(family, t_cap=-1)


def test_holm_table_compact_keeps_the_numbers_and_verdicts_in_shorter_lines():
    """compact=True prints the same means, t, thresholds and verdicts, each row shorter than the plain one."""
    family = {"up": paired_difference([1.0, 2.0, 3.1, 4.0, 5.0], [0.0, 1.1, 2.0, 3.0, 4.1]),
              "same": paired_difference([1.0, 2.0, 3.0, 4.0, 5.0], [1.1, 2.0, 3.2, 4.0, 5.0])}
    plain, compact = holm_table(family).splitlines(), holm_table(family, compact=True).splitlines()
    assert "t vs its Holm threshold" in compact[0] and len(compact) == len(plain)
    for verdict, p, c in zip(holm(family), plain[1:], compact[1:]):
        assert len(c) < len(p) and c.split("→")[-1] == p.split("→")[-1]
        assert f"{verdict.comparison.t:+6.2f}" in c and f"vs {verdict.threshold:.2f}" in c
    assert " 0 lower,  5 higher of 5" in compact[1]


def test_holm_table_units_name_each_comparisons_unit_in_a_mixed_family():
    """units= gives some rows their own unit; the others keep unit=, and the verdicts do not change."""
    family = {"loss": paired_difference([1.0, 2.0, 3.1, 4.0, 5.0], [0.0, 1.1, 2.0, 3.0, 4.1]),
              "share": paired_difference([10.0, 20.0, 30.0, 40.0, 52.0], [11.0, 20.0, 32.0, 40.0, 50.0])}
    mixed = holm_table(family, unit=" nats", units={"share": " points"}).splitlines()
    assert " nats" in mixed[1] and " points" not in mixed[1] and " points" in mixed[2]
    assert [line.split("→")[-1] for line in mixed] == \
        [line.split("→")[-1] for line in holm_table(family, unit=" nats").splitlines()]
    assert holm_table(family, units=None) == holm_table(family)


def test_spearman_is_pearson_of_ranks_with_tied_values_sharing_their_mean_rank():
    """ρ = 1 for any increasing map, -1 for a decreasing one; ties get their mean rank (scipy's convention)."""
    from helpers.stats import ranks, spearman
    x = [0.3, 1.0, 2.5, 7.0, 9.0]
    assert spearman(x, [v ** 3 for v in x]) == pytest.approx(1.0)
    assert spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    assert ranks([2.0, 1.0, 2.0, 5.0]).tolist() == [2.5, 1.0, 2.5, 4.0]
    # by hand: ranks (1, 2, 3, 4) and (1.5, 1.5, 4, 3), centred: r = 3.5 / sqrt(5 * 4.5)
    assert spearman([1, 2, 3, 4], [0.2, 0.2, 0.9, 0.5]) == pytest.approx(3.5 / (5 * 4.5) ** 0.5)
    with pytest.raises(ValueError, match="spread"):
        spearman([1, 2, 3], [4, 4, 4])
    with pytest.raises(ValueError, match="same number"):
        spearman([1, 2, 3], [1, 2, 3, 4])


def test_interval_is_the_paired_t_interval_and_excludes_zero_exactly_when_the_plain_t_resolves():
    from helpers.stats import interval
    c = paired_difference([0.3, 0.1, 0.5, 0.2, 0.4], [0.0] * 5)
    low, high = interval(c)
    half = t_critical(4) * c.se
    assert low == pytest.approx(c.mean - half) and high == pytest.approx(c.mean + half)
    for diffs in ([0.1, -0.05, 0.2, 0.0, 0.03], [0.1, 0.12, 0.09, 0.11, 0.1]):
        c = paired_difference(diffs, [0.0] * 5)
        low, high = interval(c)
        assert (low > 0 or high < 0) == (c.verdict() != "not resolved")
    assert all(math.isnan(x) for x in interval(paired_difference([1.0], [0.0])))
    w = welch([1.0, 2.0, 3.0, 2.5], [0.0, 0.5, 1.5])
    low, high = interval(w)
    assert low == pytest.approx(w.diff - t_critical(w.df) * w.se) and high == pytest.approx(w.diff + t_critical(w.df) * w.se)
    with pytest.raises(TypeError, match="PairedDifference"):
        interval((0.1, 0.2))


def test_bonferroni_intervals_contain_zero_for_every_comparison_holm_leaves_unresolved():
    from helpers.stats import interval
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        family = {f"c{j}": paired_difference(torch.randn(10, generator=gen, dtype=torch.float64) + 0.3 * j,
                                             [0.0] * 10) for j in range(6)}
        for v in holm(family):
            low, high = interval(v.comparison, 0.05 / len(family))
            assert v.resolved or low <= 0 <= high


def test_holm_table_says_where_the_step_down_stopped_only_when_a_later_row_clears_its_threshold():
    """A not-resolved row past its own threshold gets a last line naming the rank where the step-down stopped."""
    stopped = holm_table({"x": _with_t(-t_critical(9, 0.03)), "y": _with_t(-t_critical(9, 0.04))}).splitlines()
    assert len(stopped) == 5 and stopped[1].endswith("→ not resolved") and stopped[2].endswith("→ not resolved")
    assert stopped[3].startswith("  the step-down stops at rank 1 of 2 (x: |t| ")
    assert stopped[4] == "  rows after it stay not resolved even where t clears their threshold"
    # no such row: no line (all resolved, or the not-resolved rows stay below their thresholds)
    for family in ({"a": _with_t(-8.0), "b": _with_t(6.0)}, {"a": _with_t(-8.0), "b": _with_t(0.5)}):
        text = holm_table(family)
        assert "step-down stops" not in text and len(text.splitlines()) == 3
