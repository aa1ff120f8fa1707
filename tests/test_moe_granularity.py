"""helpers.moe_granularity: notebook 07's fine-grained vs coarse experts with a cheap router (shipped JSON)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

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
    from helpers.moe_granularity import equal_flops_lines, expert_weights
    shown = equal_flops_lines(back, longer)
    assert len(shown) == 2 and all(line.startswith("2 steps, ") and "(Holm over these 6)" in line for line in shown)
    assert shown[0].endswith(f"expert weights {expert_weights('fine'):,} vs {expert_weights('coarse, 1,792'):,}")
    assert (expert_weights("fine"), expert_weights("coarse, 1,792")) == (12_288, 13_824)


def _seed0_on_avx2(steps: int, lrs: dict) -> dict:
    """Seed 0's answer loss per arm after ``steps`` at ``lrs[arm]``, retrained in a process on the AVX2 kernel the
    shipped files were made on (a short run at these rates moves with the kernel: see the module's doc)."""
    code = ("import json, sys\n"
            "from helpers.moe_granularity import ARMS\n"
            "from helpers.fact_lookup import build_lookup, lookup_data, train_lookup\n"
            "steps, lrs = json.loads(sys.argv[1])\n"
            "data, out = lookup_data(), {}\n"
            "for arm, lr in lrs.items():\n"
            "    model = build_lookup(data, ARMS[arm], d_model=8, seed=0)\n"
            "    out[arm] = train_lookup(model, data, steps=steps, lr=lr, eval_at=[steps])[2][steps][0]\n"
            "print(json.dumps(out))\n")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, json.dumps([steps, lrs])], env=env, capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout)


def test_the_shipped_file_has_ten_seeds_rates_inside_the_grid_and_seed_0_reproduces():
    shipped = load(GRANULARITY_PATH)
    assert shipped.seeds == list(range(10)) and set(shipped.lr.values()) <= set(LRS)
    retrained = _seed0_on_avx2(shipped.steps, shipped.lr)
    for arm in ARMS:
        assert abs(retrained[arm] - float(shipped.loss[arm][0])) < 0.01, arm
    wide, equal, narrow = verdicts(shipped)
    assert wide.verdict == equal.verdict == "lower" and narrow.verdict == "not resolved"


def test_the_300_step_file_has_its_rates_inside_its_grid_and_seed_0_reproduces():
    shipped = load(GRANULARITY_300_PATH)
    assert shipped.steps == 300 and shipped.seeds == list(range(10))
    assert set(shipped.lr.values()) <= set(LRS_300[1:-1])                 # never at an end of the grid
    retrained = _seed0_on_avx2(300, {arm: shipped.lr[arm] for arm in ("fine", "coarse, 1,792")})
    for arm, loss in retrained.items():
        assert abs(loss - float(shipped.loss[arm][0])) < 0.01, arm
    by_name = {v.name: v.verdict for v in verdicts(load(GRANULARITY_PATH), shipped)}
    assert by_name["300 steps, wide, equal FLOPs: fine − coarse 8 × 72"] == "not resolved"
    assert by_name["100 steps, wide, equal FLOPs: fine − coarse 8 × 72"] == "lower"
