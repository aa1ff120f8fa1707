import torch

from helpers.moe_expert_count import (EXPERT_COUNTS, doubling_family, expert_count_run, live_check, load_expert_count,
                                      losses, main, seed0_reference)


def test_the_shipped_file_holds_ten_seeds_per_count_and_seed_0_reproduces():
    study = load_expert_count()
    assert study["made_by"] == "python -m helpers.moe_expert_count --results"
    assert [int(e) for e in study["loss"]] == list(EXPERT_COUNTS)
    assert all(losses(study, e).shape == (10,) for e in EXPERT_COUNTS)
    assert abs(expert_count_run(2, 0) - seed0_reference(study, 2)) < 1e-3
    assert study["seed0_by_kernel"]["AVX2"] == {e: study["loss"][e]["0"] for e in study["loss"]}
    assert list(doubling_family(study)) == ["E = 2 − E = 1", "E = 4 − E = 2", "E = 8 − E = 4", "E = 16 − E = 8"]


def test_a_small_file_round_trips(tmp_path, monkeypatch):
    import helpers.moe_expert_count as m
    monkeypatch.setattr(m, "EXPERT_COUNTS", (1, 2))
    monkeypatch.setattr(m, "STEPS", 5)
    out = tmp_path / "count.json"
    assert main(["--results", "--seeds", "0", "--out", str(out)]) == 0
    study = load_expert_count(out)
    assert list(study["loss"]) == ["1", "2"] and list(study["loss"]["1"]) == ["0"]


def test_live_check_on_a_kernel_the_file_does_not_store(monkeypatch):
    """On a kernel without a stored run (e.g. AVX512) the check says so instead of raising."""
    study = load_expert_count()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    line = live_check(study, 4, 0.61)
    assert "no run on this CPU kernel" in line and "0.610" in line
