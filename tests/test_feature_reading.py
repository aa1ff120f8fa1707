"""helpers.feature_reading: the rule that picks notebook 09's featured feature, and its figure."""
import matplotlib

matplotlib.use("Agg")
import pytest
import torch

from helpers.feature_reading import clean_answer_features, draw_feature, featured_feature


def _codes():
    # 12 rows: rows 0-7 lead to "africa" at an answer, rows 8-11 to "located" (not an answer)
    words = ["africa"] * 8 + ["located"] * 4
    at_answer = torch.tensor([True] * 8 + [False] * 4)
    codes = torch.zeros(12, 4)
    codes[:, 0] = torch.tensor([9.0] * 8 + [1.0] * 4)          # clean, active on 12
    codes[:8, 1] = 5.0                                           # clean, active on 8 only
    codes[:, 2] = torch.tensor([1.0] * 8 + [9.0] * 4)          # top 8 mixed
    codes[:10, 3] = torch.tensor([4.0] * 8 + [0.5] * 2)         # clean, active on 10
    return codes, words, at_answer


def test_clean_features_and_the_featured_one():
    codes, words, at_answer = _codes()
    clean, active = clean_answer_features(codes, words, at_answer, q=8, min_active=10)
    assert clean.tolist() == [True, False, False, True] and active.tolist() == [12, 8, 12, 10]
    assert featured_feature(codes, words, at_answer, q=8, min_active=10) == 0
    assert featured_feature(codes[:, 1:], words, at_answer, q=8, min_active=10) == 2
    with pytest.raises(ValueError, match="no feature"):
        featured_feature(codes[:, 1:3], words, at_answer, q=8, min_active=10)
    with pytest.raises(ValueError, match="at_answer"):
        clean_answer_features(codes, words, at_answer[:5])


def test_draw_feature_makes_two_panels(monkeypatch):
    import matplotlib.pyplot as plt
    monkeypatch.setattr(plt, "show", lambda: None)
    codes, words, _ = _codes()
    draw_feature(codes, torch.randn(4, 20), words, lambda ids: [f"w{int(i)}" for i in ids], 0, title="test, ")
    fig = plt.gcf()
    assert len(fig.axes) == 2 and "feature 0: active on 12 of 12" in fig._suptitle.get_text()
    plt.close(fig)
