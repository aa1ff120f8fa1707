"""helpers.planted_count: section 6.1's count on planted superposition (notebook 09)."""

import torch

from helpers.planted_count import BUDGETS, CONTROLS, SETS, load, planted_rows, run, summary_lines


def test_planted_rows_hold_more_directions_than_dimensions_with_the_strong_ones_larger():
    X, T = planted_rows(288, 48, 5.0, seed=0)
    assert X.shape == (1681, 192) and T.shape == (192, 288) and X.dtype == torch.float64
    torch.testing.assert_close(T.norm(dim=0), torch.ones(288, dtype=torch.float64))
    assert torch.linalg.matrix_rank(T) == 192                  # 288 directions span the 192 dimensions
    on = X.norm(dim=1) > 0
    assert 0.95 < on.float().mean() < 1.0                     # about 4 directions on per row, few rows empty
    X2, _ = planted_rows(288, 48, 5.0, seed=0)
    assert torch.equal(X, X2)


def test_a_small_run_has_the_shipped_format():
    small = run(seeds=[0], budgets=[(3, 0.03)])
    entry = small["strong and weak"]["3"][0]
    assert set(entry) == {"used", "recovered", "strong", "held_out"} and small["uniform"]["3"][0]["strong"] is None
    assert 0 <= entry["strong"] <= entry["recovered"] <= 288 and 0 < entry["used"] <= 256
    controls = run(seeds=[0], budgets=[(3, 0.03)], center=True, sets=CONTROLS)
    assert set(controls) == set(CONTROLS) and controls["uniform 96"]["3"][0]["recovered"] <= 96


def test_the_shipped_file_shows_the_count_stays_below_192_with_more_planted():
    record = load()
    assert record["command"] == "python -m helpers.planted_count" and record["seeds"] == list(range(5))
    for key in ("runs", "runs_centred"):
        for name in SETS:
            runs = record[key][name]["1000"]
            assert len(runs) == 5 and all(r["used"] < 192 for r in runs)   # the notebook's point, at 6.1's recipe
    strong = record["runs"]["strong and weak"]["10000"]
    assert all(r["strong"] >= 40 and r["recovered"] - r["strong"] <= 6 for r in strong)
    assert len(summary_lines(record)) == 4 and len(summary_lines(record, centred=True)) == 8   # + the controls
    assert summary_lines(record, centred=True)[0].startswith("  96 planted in 192 dims, uniform, centred")


def test_the_shipped_controls_show_the_count_saturates_without_superposition():
    record = load()
    used = {name: [r["used"] for r in record["runs_centred_controls"][name]["10000"]] for name in CONTROLS}
    superposed = [r["used"] for r in record["runs_centred"]["uniform"]["10000"]]
    assert all(len(v) == 5 for v in used.values())
    # half as many directions as dimensions already use more than 120 features; 192 -> 256 adds little
    assert min(used["uniform 96"]) > 120 and max(used["uniform 192"]) < 192
    assert min(superposed) - max(used["uniform 192"]) < 20
    fits = [r["recovered"] for r in record["runs_centred_controls"]["uniform 96"]["10000"]]
    assert min(fits) >= 90                                       # the 96 set is learned: its count is not noise


def test_the_count_table_sets_the_neurons_beside_the_planted_sets_at_both_budgets():
    from helpers.planted_count import count_table
    neurons = {"models": {"0": [{"used": 90}, {"used": 100}], "1": [{"used": 95}, {"used": 99}]}}
    table = count_table(load(), [neurons, neurons]).splitlines()
    assert len(table) == 2 + len(CONTROLS) + len(SETS)
    assert "1,000 steps at 0.03" in table[0] and "10,000 steps at 0.01" in table[0]
    assert "90–100 (2×2)" in table[1]
    assert table[2].lstrip().startswith("96 planted, uniform") and "127–136" in table[2]   # no superposition
    assert table[3].lstrip().startswith("192 planted, uniform") and "177–186" in table[3]
    assert "185–199" in table[4]                      # the shipped uniform set, centred, 10× longer


def test_the_count_line_reads_the_longer_budget_in_one_line():
    from helpers.planted_count import count_line
    neurons = {"models": {"0": [{"used": 74}], "1": [{"used": 109}]}}
    line = count_line(load(), neurons)
    assert "\n" not in line and "10,000 steps at 0.01" in line
    assert "real neurons 74–109" in line and "96: 127–136" in line and "256: 185–199" in line
