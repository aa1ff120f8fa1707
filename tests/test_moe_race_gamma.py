"""helpers.moe_race's γ sweep: the γ sweep behind notebook 07's Exercise 2 (a tiny run, the shipped file, the verdicts)."""
import torch

from helpers.fact_lookup import lookup_data
from helpers.moe_race import (ARMS, GAMMA_ARM, GAMMA_LONG_PATH, GAMMA_LONG_STEPS, GAMMA_PATH, GAMMAS, GAMMAS_LONG,
                              LATE, SETTINGS, gamma_lines, gamma_run, gamma_runs, gamma_verdicts, load_gamma_sweep,
                              max_vio, max_vio_reference, save_gamma_sweep, train_arm)


def test_max_vio_is_the_busiest_load_over_the_mean_minus_one():
    assert torch.allclose(max_vio_reference(torch.tensor([[10, 2, 4, 4], [5, 5, 5, 5]])),
                          torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(max_vio(torch.tensor([[10, 2, 4, 4], [5, 5, 5, 5]])), torch.tensor(0.5, dtype=torch.float64))


def test_exercise_2_and_section_5_measure_maxvio_the_same_way():
    sweep = gamma_runs([0.01], [0, 1], steps=12)
    runs = train_arm("x", ARMS[GAMMA_ARM], lookup_data(), seeds=[0, 1], d_model=SETTINGS["d_model"], steps=12,
                     lr=sweep.lr)
    assert torch.allclose(max_vio(sweep.loads[0.01]), runs.late_load - 1)


def test_a_small_sweep_round_trips_through_its_file(tmp_path):
    out = tmp_path / "gamma.json"
    save_gamma_sweep(gamma_runs([0.0, 0.01], [0, 1], steps=3), out)
    sweep = load_gamma_sweep(out)
    assert sweep.gammas == [0.0, 0.01] and sweep.seeds == [0, 1] and sweep.steps == 3
    assert sweep.loss[0.01].shape == (2,) and sweep.loads[0.01].shape == (2, min(3, LATE), 8)
    again = gamma_runs([0.01], [1], steps=3)
    assert torch.equal(again.loads[0.01][0], sweep.loads[0.01][1])     # the same seed trains the same run
    loss, vio = gamma_run(0.01, seed=1, steps=3)
    assert abs(loss - float(sweep.loss[0.01][1])) < 1e-6 and vio == float(max_vio(sweep.loads[0.01][1]))


def test_the_shipped_sweep_and_its_verdicts():
    sweep = load_gamma_sweep(GAMMA_PATH)
    assert sweep.gammas == list(GAMMAS) and len(sweep.seeds) == 10 and sweep.steps == 100
    lines = gamma_lines(sweep)
    assert len(lines) == 3 + len(GAMMAS) and "(DeepSeek-V3's)" in lines[4]
    table = gamma_verdicts(sweep)
    assert "over 6 comparisons" in table and table.count("→ higher") == 6     # the notebook's answer reads this
    long = load_gamma_sweep(GAMMA_LONG_PATH)
    assert long.gammas == list(GAMMAS_LONG) and len(long.seeds) == 10 and long.steps == GAMMA_LONG_STEPS
    assert "1,000 steps" in gamma_lines(sweep, long)[1]
    both = gamma_verdicts(sweep, long)
    assert "over 8 comparisons" in both and both.count("→ higher") == 5 and both.count("→ not resolved") == 3
