"""helpers.dictionary_study's k frontier: notebook 09's FVU against k and dead features (shipped)."""

from helpers.dictionary_study import (FRONTIER_KS as KS, frontier_family, frontier_means, frontier_runs as run,
                                      load_frontier as load)
from helpers.stats import holm


def test_the_shipped_file_holds_every_model_k_and_seed():
    record = load()
    assert record["command"] == "python -m helpers.dictionary_study --frontier --steps 3000" and record["steps"] == 3000
    assert record["ks"] == list(KS) and record["models"] == [0, 1, 2, 3, 4] and record["seeds"] == [0, 1]
    for runs in record["runs"].values():
        for k in KS:
            entry = runs[str(k)]
            assert len(entry["held_out"]) == len(entry["dead"]) == 2 and 0 < entry["pca"] < 1
            assert all(0 <= d < 256 for d in entry["dead"])


def test_the_notebook_reading_holds():
    means = frontier_means(load())
    fvu, pca, dead = means["held_out"], means["pca"], means["dead"]
    assert all(a > b for a, b in zip(fvu, fvu[1:])) and all(a > b for a, b in zip(dead, dead[1:]))
    assert all(f < p for f, p in zip(fvu[:3], pca[:3])) and all(f > p for f, p in zip(fvu[3:], pca[3:]))
    assert [round(100 * v, 2) for v in fvu[-2:]] == [0.27, 0.19]                # "k = 32 still gains"
    assert round(dead[0]) == 201 and round(dead[-1]) == 53
    assert dead[KS.index(8)] > 128                                      # over half idle at the recipe's k
    for i in range(3):                                                  # "each doubling up to 16 about halves it"
        assert 0.4 < fvu[i + 1] / fvu[i] < 0.6


def test_the_verdicts_the_notebook_reads():
    # per k, FVU / PCA-k's FVU − 1 paired over the 5 models, Holm over the 5 k: below up to k = 8, not resolved
    # at 16, above at 32
    verdicts = holm(frontier_family(load()))
    assert [v.verdict for v in verdicts] == ["lower"] * 3 + ["not resolved", "higher"]
    assert all(v.comparison.n == 5 for v in verdicts)
    assert verdicts[3].comparison.higher == 4 and verdicts[4].comparison.higher == 5


def test_a_small_run_has_the_format():
    record = run(models=[0], ks=[2, 8], seeds=[0], steps=5, progress=False)
    assert record["ks"] == [2, 8] and set(record["runs"]["0"]) == {"2", "8"}
    entry = record["runs"]["0"]["8"]
    assert len(entry["held_out"]) == 1 and isinstance(entry["dead"][0], int) and entry["pca"] < record["runs"]["0"]["2"]["pca"]
