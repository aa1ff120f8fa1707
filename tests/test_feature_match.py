"""helpers.feature_match: notebook 09's quick check 2, another seed's transcoder features (shipped)."""

from helpers.feature_match import load, match_line


def test_the_shipped_file_matches_seed_0_against_four_other_seeds():
    record = load()
    assert record["command"] == "python -m helpers.feature_match" and record["seeds"] == [0, 1, 2, 3, 4]
    assert len(record["used"]) == len(record["held_out"]) == 5
    assert record["used"][0] == 122 and round(record["held_out"][0], 4) == 0.0066   # the notebook's live transcoder
    for key in ("above_0.9", "above_0.99", "median_best"):
        assert len(record[key]) == 4
    assert all(a99 <= a9 < record["used"][0] for a9, a99 in zip(record["above_0.9"], record["above_0.99"]))
    # the quick check's reading: most of seed 0's features have no close match in another seed
    assert max(record["above_0.9"]) < record["used"][0] / 2 and max(record["median_best"]) < 0.9


def test_the_line_names_the_counts_per_seed():
    lines = match_line(load()).splitlines()
    assert len(lines) == 2 and "seeds 0-4" in lines[0]
    assert "of seed 0's 122 features that fire on some prefix" in lines[1] and "in seed 1, 2, 3, 4" in lines[1]
