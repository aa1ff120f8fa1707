"""helpers.moe_granularity: notebook 07's fine-grained vs coarse experts with a cheap router (shipped JSON)."""

import dataclasses

import torch

from helpers.moe_granularity import (ARMS, COMPARISONS, GRANULARITY_300_PATH, GRANULARITY_PATH, LRS, LRS_300, load, multiply_adds, router_share, run,
                                     save, verdict_line, verdicts)
from helpers.fact_lookup import build_lookup, lookup_data, train_lookup


def test_the_arms_share_their_expert_parameters_and_the_router_is_a_small_share():
    data = lookup_data()
    experts = {}
    for arm, spec in ARMS.items():
        if arm not in ("coarse", "fine"):
            continue
        ffn = build_lookup(data, spec, d_model=8, seed=0).ffn
        experts[arm] = ffn.top_k * sum(p.numel() for p in ffn.experts[0].parameters())
    assert experts["coarse"] == experts["fine"] == 3 * 8 * 64
    assert round(router_share(ARMS["coarse"]), 3) == 0.04 and round(router_share(ARMS["fine"]), 3) == 0.143
    assert router_share({"n_experts": 8, "top_k": 1, "d_ff": 8, "granularity": 4}) > 0.57   # section 4's 32/56


def test_the_equal_flops_arms_match_their_fine_arm_in_multiply_adds():
    adds = {arm: multiply_adds(spec) for arm, spec in ARMS.items()}
    assert adds == {"coarse": 1600, "fine": 1792, "coarse, 1,792": 1792, "fine, narrow": 448, "coarse, 448": 448}
    assert round(router_share(ARMS["fine, narrow"]), 3) == 0.571
    assert [(a, b) for _, a, b in COMPARISONS] == [("fine", "coarse"), ("fine", "coarse, 1,792"),
                                                     ("fine, narrow", "coarse, 448")]


def test_a_small_run_round_trips_through_its_file(tmp_path):
    result = run(seeds=[0, 1], sweep_seeds=[100], lrs=(0.04, 0.08), steps=2)
    back = load(save(result, tmp_path / "g.json"))
    assert back.lr == result.lr and back.seeds == [0, 1]
    torch.testing.assert_close(back.loss["fine"], result.loss["fine"], atol=1e-6, rtol=0)
    assert "(2 steps)" in verdict_line(back) and len(verdicts(back)) == 3
    longer = dataclasses.replace(back, steps=3)                          # a second budget: six comparisons
    assert len(verdicts(back, longer)) == 6 and "Holm over these 6" in verdict_line(back, longer)


def test_the_shipped_file_has_ten_seeds_rates_inside_the_grid_and_seed_0_reproduces():
    shipped = load(GRANULARITY_PATH)
    assert shipped.seeds == list(range(10)) and set(shipped.lr.values()) <= set(LRS)
    data = lookup_data()
    for arm in ARMS:
        model = build_lookup(data, ARMS[arm], d_model=8, seed=0)
        _, _, evals = train_lookup(model, data, steps=shipped.steps, lr=shipped.lr[arm], eval_at=[shipped.steps])
        assert abs(evals[shipped.steps][0] - float(shipped.loss[arm][0])) < 0.01, arm
    wide, equal, narrow = verdicts(shipped)
    assert wide.verdict == equal.verdict == "lower" and narrow.verdict == "not resolved"


def test_the_300_step_file_has_its_rates_inside_its_grid_and_seed_0_reproduces():
    shipped = load(GRANULARITY_300_PATH)
    assert shipped.steps == 300 and shipped.seeds == list(range(10))
    assert set(shipped.lr.values()) <= set(LRS_300[1:-1])                 # never at an end of the grid
    data = lookup_data()
    for arm in ("fine", "coarse, 1,792"):
        model = build_lookup(data, ARMS[arm], d_model=8, seed=0)
        _, _, evals = train_lookup(model, data, steps=300, lr=shipped.lr[arm], eval_at=[300])
        assert abs(evals[300][0] - float(shipped.loss[arm][0])) < 0.01, arm
    by_name = {v.name: v.verdict for v in verdicts(load(GRANULARITY_PATH), shipped)}
    assert by_name["300 steps, wide, equal FLOPs: fine − coarse 8 × 72"] == "not resolved"
    assert by_name["100 steps, wide, equal FLOPs: fine − coarse 8 × 72"] == "lower"
