"""helpers.used_counts: notebook 09's Exercise 5 data, a small run of the command and the shipped file."""
from helpers.dictionary_study import MODELS
from helpers.used_counts import RUNS, USED_PATH, load_used, main, used_family, used_table


def test_a_small_run_writes_every_field_and_the_table_reads_it(tmp_path):
    out = main(["--models", "0", "--steps", "5", "10", "--out", str(tmp_path / "u.json")])
    study = load_used(out)
    assert study["runs"] == ["lr 0.01, 5 steps", "lr 0.01, 10 steps"] and set(study["models"]) == {"0"}
    for name in ("y", "gaussian"):
        for run in study["runs"]:
            entry = study["models"]["0"][name][run]
            assert len(entry["used"]) == 2 and all(8 <= u <= 256 for u in entry["used"])
            assert all(v > 0 for v in entry["held_out"])
    lines = used_table(study).splitlines()
    assert len(lines) == 4 and lines[2].strip().startswith("lr 0.01, 5 steps") and lines[2].endswith("of 2")


def test_the_shipped_file_covers_every_model_run_and_seed():
    study = load_used(USED_PATH)
    assert study["runs"] == [f"lr {lr:g}, {n} steps" for lr, n in RUNS]
    assert set(study["models"]) == {str(m) for m in MODELS}
    for entry in study["models"].values():
        for name in ("y", "gaussian"):
            assert all(len(entry[name][run]["used"]) == 2 for run in study["runs"])
    assert len(used_table(study).splitlines()) == 2 + len(RUNS)


def test_used_family_pairs_the_models_by_their_seed_means():
    study = {"runs": ["r"], "models": {"0": {"y": {"r": {"used": [10, 20]}}, "gaussian": {"r": {"used": [5, 5]}}},
                                       "1": {"y": {"r": {"used": [8, 8]}}, "gaussian": {"r": {"used": [9, 7]}}}}}
    (name, diff), = used_family(study).items()
    assert name == "used, y − Gaussian, r" and diff.diffs.tolist() == [10.0, 0.0]
