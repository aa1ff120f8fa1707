"""helpers.dictionary_sizes: notebook 09's F-sweep, a small run of the command and the shipped file."""
import matplotlib.pyplot as plt
import pytest
import torch

from helpers.dictionary import TopKDictionary
from helpers.dictionary_sizes import SIZES, SIZES_3X_PATH, SIZES_PATH, draw_sizes, load_sizes, main, size_family, \
    size_means, size_scores, size_table
from helpers.dictionary_study import MODELS


def test_size_scores_counts_dead_features_on_each_set():
    # 3 features in 2 dims: feature 0 fires on x[:, 0] > 0, feature 1 on x[:, 1] > 0, feature 2 never (key -x0 - x1)
    W_enc = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    d = TopKDictionary(W_enc, torch.zeros(3, dtype=torch.float64), torch.eye(2, 3, dtype=torch.float64),
                       torch.zeros(2, dtype=torch.float64), k=2)
    x_fit = torch.tensor([[1.0, 1.0], [2.0, 0.5]], dtype=torch.float64)
    x_test = torch.tensor([[1.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    s = size_scores(d, x_fit, x_test, x_test)
    assert (s["dead"], s["dead_fit"]) == (2, 1) and s["held_out"] < 1e-12


def test_a_small_run_writes_every_field_and_the_table_reads_it(tmp_path):
    out = main(["--models", "0", "--sizes", "8", "16", "--steps", "20", "--out", str(tmp_path / "s.json")])
    sweep = load_sizes(out)
    assert sweep["sizes"] == [8, 16] and set(sweep["models"]["0"]) == {"8", "16"}
    entry = sweep["models"]["0"]["16"]
    assert set(entry) == {"held_out", "dead", "dead_fit"} and len(entry["dead"]) == 2
    assert all(0 <= v <= 16 for v in entry["dead"] + entry["dead_fit"])
    assert "dead: held out / fitting" in size_table(sweep)
    with pytest.raises(ValueError, match="size"):
        main(["--models", "0", "--sizes", "4", "--steps", "2", "--out", str(tmp_path / "t.json")])


@pytest.mark.parametrize("path, steps", [(SIZES_PATH, 1000), (SIZES_3X_PATH, 3000)])
def test_the_shipped_files_cover_every_size_and_model(path, steps):
    sweep = load_sizes(path)
    assert path.is_file() and sweep["sizes"] == list(SIZES) and sweep["steps"] == steps
    assert set(sweep["models"]) == {str(m) for m in MODELS}
    for entry in sweep["models"].values():
        for F in SIZES:
            assert all(0 <= v <= F for v in entry[str(F)]["dead"]) and len(entry[str(F)]["held_out"]) == 2
    assert len(size_table(sweep).splitlines()) == 2 + len(SIZES)


def test_size_means_and_the_figure():
    sweep = {"steps": 10, "sizes": [16, 48],
             "models": {"0": {"16": {"held_out": [0.02, 0.02], "dead": [0, 2]}, "48": {"held_out": [0.01, 0.01], "dead": [4, 4]}},
                        "1": {"16": {"held_out": [0.04, 0.04], "dead": [0, 0]}, "48": {"held_out": [0.01, 0.03], "dead": [2, 2]}}}}
    means = size_means(sweep)
    assert means["held_out"] == pytest.approx([3.0, 1.5]) and means["used"] == pytest.approx([15.5, 45.0])
    fig = draw_sizes([sweep, sweep])
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel().startswith("features used")
    plt.close(fig)


def test_size_family_pairs_the_models_in_percentage_points():
    sweep = {"models": {"0": {"16": {"held_out": [0.02, 0.02]}, "48": {"held_out": [0.01, 0.012]}},
                        "1": {"16": {"held_out": [0.03, 0.03]}, "48": {"held_out": [0.02, 0.02]}}}}
    (name, diff), = size_family(sweep, pairs=[(48, 16)]).items()
    assert name == "held-out FVU, F = 48 − F = 16" and abs(diff.mean - (-0.95)) < 1e-9
