"""helpers.used_counts: notebook 09's Exercise 5 data, a small run of the command and the shipped file."""
from helpers.dictionary_study import MODELS
from helpers.used_counts import (READ_RUN, RUNS, USED_PATH, count_family, count_line, load_used, main, slot_share,
                                 used_family, used_table)


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
    assert len(lines) == 5 and lines[3].strip().startswith("lr 0.01, 5 steps") and lines[3].endswith("%")


def test_the_shipped_file_covers_every_model_run_and_seed():
    study = load_used(USED_PATH)
    assert study["runs"] == [f"lr {lr:g}, {n} steps" for lr, n in RUNS]
    assert set(study["models"]) == {str(m) for m in MODELS}
    for entry in study["models"].values():
        for name in ("y", "gaussian"):
            assert all(len(entry[name][run]["used"]) == 2 for run in study["runs"])
    lines = used_table(study).splitlines()
    assert len(lines) == 3 + len(RUNS) and "slot mixture" in lines[2]
    assert all(len(e["slots"][READ_RUN]["used"]) == 2 for e in study["models"].values())
    assert "—" in lines[3] and "—" not in lines[3 + [str(r) for r in study["runs"]].index(READ_RUN)]
    assert set(count_family(study)) == {"used, y − Gaussian", "used, y − slot mixture", "used, slot mixture − Gaussian"}
    assert 0 < slot_share(study) < 1 and "slot mixture" in count_line(study)


def test_used_family_pairs_the_models_by_their_seed_means():
    study = {"runs": ["r"], "models": {"0": {"y": {"r": {"used": [10, 20]}}, "gaussian": {"r": {"used": [5, 5]}}},
                                       "1": {"y": {"r": {"used": [8, 8]}}, "gaussian": {"r": {"used": [9, 7]}}}}}
    (name, diff), = used_family(study).items()
    assert name == "used, y − Gaussian, r" and diff.diffs.tolist() == [10.0, 0.0]


def test_count_family_and_slot_share_pair_the_models_at_the_read_run():
    def entry(y, g, mix):
        return {name: {READ_RUN: {"used": v}} for name, v in (("y", y), ("gaussian", g), ("slots", mix))}
    study = {"runs": [READ_RUN], "seeds": [0, 1], "models": {"0": entry([60, 70], [30, 30], [50, 50]),
                                                             "1": entry([50, 50], [20, 30], [40, 40])}}
    family = count_family(study)
    assert family["used, y − slot mixture"].diffs.tolist() == [15.0, 10.0]
    assert family["used, slot mixture − Gaussian"].diffs.tolist() == [20.0, 15.0]
    assert abs(slot_share(study) - 35 / 60) < 1e-12
    assert count_line(study).endswith("y 50–70, Gaussian 20–30, slot mixture 40–50")
