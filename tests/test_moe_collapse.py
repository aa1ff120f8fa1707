"""helpers.moe_collapse: the collapse-and-recovery runs of notebook 05 and how the notebook reads them."""

import torch

from helpers.facts import load_facts, make_dataset
from helpers.moe_collapse import ARMS, SWITCH, busiest_share_run, family, live_gap, load_collapse, shares, summary


def _study(off: float, on_end: float, n_seeds: int = 5, steps: int = 2 * SWITCH) -> dict:
    runs = {arm: {} for arm in ARMS}
    for seed in range(n_seeds):
        base = [[off + 0.01 * seed, 0.2]] * steps
        runs[ARMS[0]][str(seed)] = base
        runs[ARMS[1]][str(seed)] = base[:SWITCH] + [[on_end + 0.01 * seed, 0.2]] * (steps - SWITCH)
    return {"settings": {"window": 10}, "runs": runs}


def test_a_run_records_the_busiest_share_of_every_step_and_layer():
    data = make_dataset(load_facts())
    share = busiest_share_run(0, data, steps=3)
    assert share.shape == (3, 2) and share.dtype == torch.float64
    assert bool(((share >= 1 / 8 - 1e-12) & (share <= 1)).all())


def test_summary_reads_the_larger_layer_before_the_switch_and_at_the_end():
    study = _study(off=0.8, on_end=0.3)
    before, end = summary(study, ARMS[1])
    torch.testing.assert_close(before, torch.tensor([0.8, 0.81, 0.82, 0.83, 0.84], dtype=torch.float64))
    torch.testing.assert_close(end, torch.tensor([0.3, 0.31, 0.32, 0.33, 0.34], dtype=torch.float64))
    assert shares(study, ARMS[0]).shape == (5, 2 * SWITCH, 2)


def test_family_compares_the_switched_arm_with_itself_and_with_alpha_zero():
    study = _study(off=0.8, on_end=0.3)
    rows = family(study)
    assert set(rows) == {"α on: end − before the switch", "end: α on − α = 0 throughout"}
    assert all(abs(r.mean + 0.5) < 1e-9 for r in rows.values())


def test_the_shipped_file_has_both_arms_and_the_same_seeds():
    study = load_collapse()
    assert set(study["runs"]) == set(ARMS)
    assert sorted(study["runs"][ARMS[0]]) == sorted(study["runs"][ARMS[1]]) and len(study["runs"][ARMS[0]]) >= 5
    first = torch.tensor(study["runs"][ARMS[1]]["0"], dtype=torch.float64)
    assert live_gap(first, study) == 0.0
    # the arms share every step before the switch
    torch.testing.assert_close(shares(study, ARMS[0])[:, :SWITCH], shares(study, ARMS[1])[:, :SWITCH])
