"""helpers.tracking_starts: section 6's start control of notebook 09, a small run of the command and the shipped
file."""
import torch

from helpers.dictionary import STARTS
from helpers.dictionary_study import MODELS, load_study
from helpers.tracking_starts import (LABELS, STARTS_PATH, data_start, load_starts, main, start_family,
                                     start_table)


def test_a_small_run_writes_every_field(tmp_path):
    out = main(["--models", "0", "--seeds", "2", "--steps", "5", "--out", str(tmp_path / "s.json")])
    starts = load_starts(out)
    assert starts["seeds"] == [0, 1] and set(starts["models"]) == {"0"}
    entry = starts["models"]["0"]
    for unit in ("data_start", "random_start"):
        assert len(entry[unit]) == 2
        assert all(0 <= r[label] <= 1 for r in entry[unit] for label in LABELS)
        assert all(r["judged"] > 0 for r in entry[unit])
    assert len(entry["random_start_fvu"]) == 2 and all(v > 0 for v in entry["random_start_fvu"])


def test_the_data_start_is_the_recipes_start():
    x, y = torch.randn(30, 4, dtype=torch.float64), torch.randn(30, 3, dtype=torch.float64)
    d = data_start(x, y, seed=3)
    W_enc, b_enc, W_dec, b_dec = STARTS["data"](x, y, 256, 3)
    assert torch.equal(d.W_enc, W_enc) and torch.equal(d.W_dec, W_dec) and d.k == 8


def test_the_shipped_file_covers_every_model_and_the_family_pairs_them():
    starts, study = load_starts(STARTS_PATH), load_study()
    assert set(starts["models"]) == {str(m) for m in MODELS} and len(starts["seeds"]) >= 5
    assert all(len(e["random_start"]) == len(starts["seeds"]) for e in starts["models"].values())
    family = start_family(study, starts)
    assert len(family) == 6 and all(len(d.diffs) == len(MODELS) for d in family.values())
    lines = start_table(study, starts).splitlines()
    assert len(lines) == 6 and lines[1].strip().startswith("data start, untrained") and "FVU" in lines[-1]
