"""helpers.moe_race's γ sweep: the γ sweep behind notebook 07's Exercise 2 (a tiny run, the shipped file, the verdicts)."""
import torch

from helpers.moe_race import (GAMMA_PATH, GAMMAS, gamma_lines, gamma_run, gamma_runs, gamma_verdicts,
                              load_gamma_sweep, max_vio_reference, save_gamma_sweep)


def test_max_vio_is_the_busiest_load_over_the_mean_minus_one():
    assert torch.allclose(max_vio_reference(torch.tensor([[10, 2, 4, 4], [5, 5, 5, 5]])),
                          torch.tensor([1.0, 0.0], dtype=torch.float64))


def test_a_small_sweep_round_trips_through_its_file(tmp_path):
    out = tmp_path / "gamma.json"
    save_gamma_sweep(gamma_runs([0.0, 0.01], [0, 1], steps=3), out)
    sweep = load_gamma_sweep(out)
    assert sweep.gammas == [0.0, 0.01] and sweep.seeds == [0, 1] and sweep.steps == 3
    assert sweep.loss[0.01].shape == (2,) and sweep.loads[0.01].shape == (2, 8)
    again = gamma_runs([0.01], [1], steps=3)
    assert torch.equal(again.loads[0.01][0], sweep.loads[0.01][1])     # the same seed trains the same run
    loss, vio = gamma_run(0.01, seed=1, steps=3)
    assert abs(loss - float(sweep.loss[0.01][1])) < 1e-6 and vio == float(max_vio_reference(sweep.loads[0.01][1]))


def test_the_shipped_sweep_and_its_verdicts():
    sweep = load_gamma_sweep(GAMMA_PATH)
    assert sweep.gammas == list(GAMMAS) and len(sweep.seeds) == 10 and sweep.steps == 100
    lines = gamma_lines(sweep)
    assert len(lines) == 2 + len(GAMMAS) and "(DeepSeek-V3's)" in lines[3]
    table = gamma_verdicts(sweep)
    assert "over 6 comparisons" in table and table.count("→ higher") == 6     # the notebook's answer reads this
