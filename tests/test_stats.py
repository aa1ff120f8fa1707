import math

import pytest
import torch

from helpers.stats import null_verdict_rate, paired_difference, t_cdf, t_critical, welch


def test_paired_difference_and_its_verdict():
    d = paired_difference(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 3.5, 4.0]))
    assert d.diffs.tolist() == [-1.0, -1.5, -1.0] and d.lower == 3 and d.n == 3
    assert d.mean == pytest.approx(-7 / 6)
    assert d.se == pytest.approx(torch.tensor([-1.0, -1.5, -1.0]).std().item() / 3 ** 0.5)
    assert d.verdict() == "lower" and d.df == 2 and d.critical() == pytest.approx(4.303, abs=1e-3)
    assert d.t == pytest.approx(d.mean / d.se)
    near = paired_difference(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([0.54, 0.26, 0.23]))
    assert near.lower == 3 and -4.303 < near.t < -2 and near.verdict() == "not resolved"   # t ≈ -3.5, df 2
    assert near.verdict(threshold=2.0) == "lower"
    assert d.verdict(threshold=100.0) == "not resolved"
    mixed = paired_difference(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.5, 1.0, 3.5]))
    assert mixed.lower == 2 and mixed.verdict() == "not resolved"     # one seed the other way
    worse = paired_difference(torch.tensor([2.0, 3.0, 4.1]), torch.tensor([1.0, 2.0, 3.0]))
    assert worse.lower == 0 and worse.verdict() == "higher"
    tie = paired_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    assert tie.lower == 1 and tie.verdict() == "not resolved"         # a zero difference is not a win
    one = paired_difference(torch.tensor([1.0]), torch.tensor([2.0]))
    assert one.verdict() == "not resolved"                              # no spread from one seed
    with pytest.raises(ValueError, match="one entry per seed"):
        paired_difference(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="threshold must be a positive number, got 0"):
        d.verdict(threshold=0)


def test_the_plain_paired_t_drops_the_every_seed_condition():
    # 9 of 10 seeds lower, t well past 2.262: the every-seed rule refuses, the plain t resolves
    diffs = torch.tensor([-1.0, -1.2, -0.8, -1.1, -0.9, -1.0, -1.3, -0.7, -1.0, 0.2], dtype=torch.float64)
    d = paired_difference(diffs, torch.zeros(10, dtype=torch.float64))
    assert d.lower == 9 and d.t < -2.262
    assert d.verdict() == "not resolved" and d.verdict(every_seed=False) == "lower"
    up = paired_difference(-diffs, torch.zeros(10, dtype=torch.float64))
    assert up.verdict() == "not resolved" and up.verdict(every_seed=False) == "higher"
    small = paired_difference(torch.tensor([0.1, -0.2, 0.05]), torch.zeros(3))
    assert small.verdict(every_seed=False) == "not resolved"


def test_null_verdict_rate_is_5_percent_for_the_t_and_2_to_the_1_minus_n_at_most_with_signs():
    for n in (3, 10, 30):
        assert 0.04 < null_verdict_rate(n, every_seed=False, draws=20_000) < 0.06
    assert 0.04 < null_verdict_rate(3) < 0.065                       # at 3 seeds the sign rarely matters
    assert null_verdict_rate(10) <= 2 ** -9 + 0.002                  # the sign in all 10 seeds: 2 / 2**10
    assert null_verdict_rate(30) == 0.0
    with pytest.raises(ValueError, match="n_seeds"):
        null_verdict_rate(1)


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
