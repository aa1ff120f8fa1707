"""helpers.dictionary_k: notebook 09's k sweep, a small run of the command and the shipped file."""
from helpers.dictionary_k import K_PATH, KS, STEPS, k_family, k_table, load_k, main, pca_k
from helpers.dictionary_study import MODELS


def test_a_small_run_writes_every_field_and_the_table_reads_it(tmp_path):
    out = main(["--models", "0", "--ks", "1", "3", "--steps", "5", "10", "--out", str(tmp_path / "k.json")])
    study = load_k(out)
    assert study["ks"] == [1, 3] and study["steps"] == [5, 10] and set(study["models"]) == {"0"}
    for n in ("5", "10"):
        for k in (1, 3):
            entry = study["models"]["0"][n][str(k)]
            assert len(entry["held_out"]) == 2 and all(0 < v <= k for v in entry["l0"])
    lines = k_table(study).splitlines()
    assert len(lines) == 4 and "5 steps" in lines[1] and "10 steps" in lines[1] and lines[3].split()[0] == "3"


def test_the_shipped_file_covers_every_model_length_and_k():
    study = load_k(K_PATH)
    assert study["ks"] == list(KS) and study["steps"] == list(STEPS)
    assert set(study["models"]) == {str(m) for m in MODELS}
    for entry in study["models"].values():
        assert all(len(entry[str(n)][str(k)]["held_out"]) == 2 for n in STEPS for k in KS)
    assert len(k_table(study).splitlines()) == 2 + len(KS)


def test_pca_k_falls_with_k_and_adds_a_column():
    pca = pca_k(models=(0,), ks=(1, 8, 48))
    assert pca[1][0] > pca[8][0] > 0 and abs(pca[48][0]) < 1e-9
    study = load_k(K_PATH)
    lines = k_table(study, pca_k(models=(0,), ks=study["ks"])).splitlines()
    assert "PCA-k of y" in lines[1] and lines[2].endswith("%")


def test_k_family_measures_the_transcoders_in_units_of_pca_k():
    study = {"ks": [8], "steps": [1000], "models": {"0": {"1000": {"8": {"held_out": [0.01, 0.03]}}},
                                                    "1": {"1000": {"8": {"held_out": [0.02, 0.02]}}}}}
    (name, diff), = k_family(study, {8: [0.04, 0.01]}).items()
    assert name == "transcoder − PCA-8" and [round(v, 12) for v in diff.diffs.tolist()] == [-0.5, 1.0]
