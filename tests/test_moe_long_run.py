"""helpers.moe_long_run: the long run of the MoEs' dense twins, its command, its file, and the numbers notebook 07
reads from the shipped run."""
import json

import pytest
import torch

from helpers.fact_lookup import build_lookup, lookup_data, lookup_loss_and_accuracy, train_lookup
from helpers.moe_long_run import (CURVES_PATH, DEEPSEEK_300_PATH, LONG_ARMS, LONG_RUN_PATH, LONG_SEEDS_5_9_PATH, LRS, MARKS,
                                  MOE_LONG_PATH, MOE_LONG_SEEDS_5_9_PATH, SEED_LRS, SEEDS, STEPS, combine, concat_seeds,
                                  load_curves, load_long_run, load_ten_seeds, main, merge_curves, run_long,
                                  save_long_run, speed_or_room_figure)
from helpers.moe_race import ARMS


def test_a_small_run_sweeps_trains_scores_and_round_trips(tmp_path):
    run = run_long(["dense, width 11"], [0, 1], steps=6, marks=(3, 100), lrs=(0.02, 0.04), sweep_seeds=(5,),
                   seed_lrs=(0.02,), progress=False)
    key = "dense, width 11, lr 0.02"
    assert run.marks == [3, 6] and list(run.loss) == [key]
    assert run.loss[key].shape == run.right[key].shape == (2, 2)
    best = min(range(2), key=run.sweep["dense, width 11"].__getitem__)
    assert run.lr["dense, width 11"] == [0.02, 0.04][best]
    data = lookup_data()                                    # seed 1 by hand at 0.02: the same run
    model = build_lookup(data, ARMS["dense, width 11"], 8, 1)
    train_lookup(model, data, steps=6, lr=0.02)
    assert lookup_loss_and_accuracy(model, data)[0] == pytest.approx(float(run.loss[key][1, 1]))
    back = load_long_run(save_long_run(run, tmp_path / "long.json"))
    torch.testing.assert_close(back.loss[key], run.loss[key], atol=1e-5, rtol=0)
    assert back.lr == run.lr and back.marks == run.marks and len(back.lines()) == len(back.sweep_lines()) == 2
    assert back.sweep_lines()[1].count("*") == 1


def test_the_command_writes_a_file_and_refuses_bad_steps(tmp_path):
    out = tmp_path / "cli.json"
    assert main(["--results", "--arms", "dense, width 19", "--seeds", "0", "--lrs", "0.04", "--seed-lrs", "0.04",
                 "--steps", "2", "--out", str(out)]) == 0
    assert load_long_run(out).seeds == [0] and list(load_long_run(out).loss) == ["dense, width 19, lr 0.04"]
    with pytest.raises(ValueError, match="--steps"):
        main(["--results", "--steps", "0", "--out", str(out)])
    with pytest.raises(FileNotFoundError, match="python -m helpers.moe_long_run"):
        load_long_run(tmp_path / "missing.json")


def test_reusing_a_smaller_run_gives_the_full_runs_file():
    settings = dict(steps=6, marks=(3,), sweep_seeds=(5,), progress=False)
    part = run_long(LONG_ARMS, [0, 1], lrs=(0.02,), seed_lrs=(0.02,), **settings)
    extended = run_long(LONG_ARMS, [0, 1], lrs=(0.02, 0.04), seed_lrs=(0.02, 0.04), reuse=part, **settings)
    full = run_long(LONG_ARMS, [0, 1], lrs=(0.02, 0.04), seed_lrs=(0.02, 0.04), **settings)
    assert extended.sweep == full.sweep and extended.lr == full.lr and list(extended.loss) == list(full.loss)
    for key in full.loss:
        torch.testing.assert_close(extended.loss[key], full.loss[key], atol=0, rtol=0)
    with pytest.raises(ValueError, match="reuse"):
        run_long(LONG_ARMS, [0], lrs=(0.02,), reuse=part, **settings)


def test_the_shipped_run_is_the_notebooks():
    run = load_long_run(LONG_RUN_PATH)
    assert list(run.loss) == [f"{arm}, lr {lr:g}" for arm in LONG_ARMS for lr in SEED_LRS]
    assert run.steps == STEPS and run.marks == list(MARKS) and run.lrs == list(LRS) and run.seeds == list(SEEDS)
    assert all(t.shape == (len(MARKS), len(SEEDS)) for t in run.right.values())
    assert run.lr == {"dense, width 11": 0.04, "dense, width 19": 0.08}      # the sweep's best, both in SEED_LRS


def test_the_deepseekmoe_command_trains_the_arm_at_each_fixed_rate(tmp_path):
    """The command of ``DEEPSEEK_300_PATH`` on a small run: each fixed rate's seeds are the runs made by hand."""
    out = tmp_path / "dsm.json"
    assert main(["--results", "--arms", "DeepSeekMoE", "--seeds", "0", "1", "--lrs", "0.02", "--sweep-seeds", "100",
                 "--seed-lrs", "0.08", "0.02", "--steps", "4", "--out", str(out)]) == 0
    run = load_long_run(out)
    assert list(run.loss) == ["DeepSeekMoE, lr 0.08", "DeepSeekMoE, lr 0.02"] and run.marks == [4]
    data = lookup_data()
    model = build_lookup(data, ARMS["DeepSeekMoE"], 8, 1)
    train_lookup(model, data, steps=4, lr=0.08)
    assert lookup_loss_and_accuracy(model, data)[0] == pytest.approx(float(run.loss["DeepSeekMoE, lr 0.08"][0, 1]),
                                                                     abs=1e-5)


def test_the_shipped_deepseekmoe_run_is_the_notebooks():
    run = load_long_run(DEEPSEEK_300_PATH)
    assert list(run.loss) == ["DeepSeekMoE, lr 0.08", "DeepSeekMoE, lr 0.02"]
    assert run.steps == 300 and run.marks == [100, 300] and run.seeds == list(range(20))
    assert all(t.shape == (2, 20) for t in run.loss.values())


def test_the_fresh_seed_deepseekmoe_run_pairs_with_the_fresh_race():
    from helpers.moe_long_run import DEEPSEEK_300_FRESH_PATH
    from helpers.moe_race import RACE_FRESH_SEEDS_PATH, load_race

    run = load_long_run(DEEPSEEK_300_FRESH_PATH)
    assert list(run.loss) == ["DeepSeekMoE, lr 0.08"] and run.sweep == {"DeepSeekMoE": []}
    assert run.steps == 300 and run.seeds == list(range(300, 320))
    assert run.seeds == load_race(RACE_FRESH_SEEDS_PATH).runs[300]["dense, width 19"].seeds


def test_the_speed_or_room_figure_draws_every_arm_and_each_moe():
    import matplotlib.pyplot as plt

    run = load_long_run(LONG_RUN_PATH)
    moes = {"width 11": ("MoE", torch.full((5,), 0.99, dtype=torch.float64), "#0072B2")}
    fig = speed_or_room_figure(run, moes, colors=["#D55E00"] * 4, styles=["-", "--"] * 2)
    ax = fig.axes[0]
    assert len(ax.get_lines()) >= len(run.right) and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1].startswith("MoE after 300 steps")
    plt.close(fig)


def test_arm_rates_without_a_sweep_train_each_arm_at_its_own_rate(tmp_path):
    """The command of ``MOE_LONG_PATH`` on a small run: no sweep, one fixed rate per arm, the runs made by hand."""
    out = tmp_path / "moes.json"
    assert main(["--results", "--arms", "MoE", "MoE, top-2", "--seeds", "1", "--sweep-seeds", "--arm-lrs", "0.02",
                 "0.04", "--steps", "3", "--out", str(out)]) == 0
    run = load_long_run(out)
    assert list(run.loss) == ["MoE, lr 0.02", "MoE, top-2, lr 0.04"] and run.lr == {"MoE": 0.02, "MoE, top-2": 0.04}
    assert run.sweep == {"MoE": [], "MoE, top-2": []} and run.sweep_lines()[1:] == []
    data = lookup_data()
    model = build_lookup(data, ARMS["MoE, top-2"], 8, 1)
    train_lookup(model, data, steps=3, lr=0.04)
    assert lookup_loss_and_accuracy(model, data)[0] == pytest.approx(float(run.loss["MoE, top-2, lr 0.04"][0, 0]),
                                                                     abs=1e-5)
    with pytest.raises(ValueError, match="--arm-lrs"):
        main(["--results", "--arms", "MoE", "--arm-lrs", "0.02", "0.04", "--out", str(out)])


def test_the_shipped_moe_run_matches_the_dense_twins_and_combines_with_them():
    moes, dense = load_long_run(MOE_LONG_PATH), load_long_run(LONG_RUN_PATH)
    assert list(moes.loss) == ["MoE, lr 0.02", "MoE, top-2, lr 0.04"]
    assert (moes.steps, moes.marks, moes.seeds) == (dense.steps, dense.marks, dense.seeds)
    both = combine(dense, moes)
    assert list(both.loss) == list(dense.loss) + list(moes.loss) and both.lr["MoE"] == 0.02
    assert both.sweep_lines() == dense.sweep_lines() and len(both.lines()) == 1 + 6
    with pytest.raises(ValueError, match="combine"):
        combine(dense, load_long_run(DEEPSEEK_300_PATH))


def test_the_figure_draws_without_stars_and_names_the_seeds():
    import matplotlib.pyplot as plt

    fig = speed_or_room_figure(load_long_run(LONG_RUN_PATH), None, colors=["#D55E00"] * 4, styles=["-"] * 4,
                               title="Long runs")
    assert fig.axes[0].get_title() == "Long runs (seeds 0–4)" and len(fig.axes[0].get_legend().get_texts()) == 4
    plt.close(fig)


def test_the_loss_panel_draws_every_arm_as_arithmetic_means_on_a_log_loss_axis():
    import matplotlib.pyplot as plt

    run = load_long_run(LONG_RUN_PATH)
    fig = speed_or_room_figure(run, None, colors=["#D55E00"] * 4, styles=["-"] * 4, loss_panel=True)
    right, loss = fig.axes[:2]
    assert right.get_ylabel().startswith("facts answered right") and len(loss.get_lines()) == len(run.loss)
    assert loss.get_xscale() == "log" and loss.get_yscale() == "log"   # review 07-round34: MoEs near 0 stay visible
    first = next(iter(run.loss.values()))
    assert torch.allclose(torch.as_tensor(loss.get_lines()[0].get_ydata(), dtype=torch.float64), first.mean(1))
    plt.close(fig)


def test_concat_seeds_is_one_run_over_all_the_seeds():
    settings = dict(steps=4, marks=(2,), sweep_seeds=(), seed_lrs=(0.02,), progress=False)
    whole = run_long(["dense, width 11"], [0, 1, 2], **settings)
    parts = concat_seeds(run_long(["dense, width 11"], [0, 1], **settings),
                         run_long(["dense, width 11"], [2], **settings))
    assert parts.seeds == [0, 1, 2] and list(parts.loss) == list(whole.loss)
    for key in whole.loss:
        torch.testing.assert_close(parts.loss[key], whole.loss[key], atol=0, rtol=0)
    with pytest.raises(ValueError, match="different seeds"):
        concat_seeds(whole, whole)


def test_the_shipped_ten_seeds_are_the_notebooks():
    """Seeds 5-9 at the rates of seeds 0-4, fixed in advance (no sweep): notebook 07's 3,000-step family."""
    more, moes = load_long_run(LONG_SEEDS_5_9_PATH), load_long_run(MOE_LONG_SEEDS_5_9_PATH)
    assert more.seeds == moes.seeds == [5, 6, 7, 8, 9] and more.sweep_seeds == moes.sweep_seeds == []
    assert list(more.loss) == list(load_long_run(LONG_RUN_PATH).loss)
    assert list(moes.loss) == list(load_long_run(MOE_LONG_PATH).loss) == ["MoE, lr 0.02", "MoE, top-2, lr 0.04"]
    ten = load_ten_seeds()
    assert ten.seeds == list(range(10)) and all(t.shape == (len(MARKS), 10) for t in ten.loss.values())
    assert ten.lr == {"dense, width 11": 0.04, "dense, width 19": 0.08, "MoE": 0.02, "MoE, top-2": 0.04}


def test_the_curves_command_writes_each_seeds_curve_and_merge_averages_them(tmp_path):
    for seeds, name in [(["0"], "a.json"), (["1"], "b.json")]:
        assert main(["--results", "--curves", "--arms", "dense, width 11", "--arm-lrs", "0.04", "--seeds", *seeds,
                     "--steps", "4", "--out", str(tmp_path / name)]) == 0
    with pytest.raises(ValueError, match="one arm"):
        main(["--results", "--curves", "--arms", "MoE", "dense, width 11", "--steps", "2", "--out", str(tmp_path / "x")])
    curves = load_curves(merge_curves([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "m.json"))
    assert main(["--results", "--curves", "--arms", "MoE", "--arm-lrs", "0.02", "--seeds", "0", "--steps", "4",
                 "--out", str(tmp_path / "c.json")]) == 0
    kept = merge_curves([tmp_path / "c.json"], tmp_path / "k.json", keep=tmp_path / "m.json")
    before, after = (json.loads((tmp_path / n).read_text(encoding="utf-8"))["curves"] for n in ("m.json", "k.json"))
    assert list(after) == ["dense, width 11, lr 0.04", "MoE, lr 0.02"] and after["dense, width 11, lr 0.04"] == before["dense, width 11, lr 0.04"]
    with pytest.raises(ValueError, match="already has"):
        merge_curves([tmp_path / "c.json"], tmp_path / "x.json", keep=kept)
    mean, seeds = curves["dense, width 11, lr 0.04"]
    data = lookup_data()
    by_hand = [train_lookup(build_lookup(data, ARMS["dense, width 11"], 8, s), data, steps=4, lr=0.04)[0] for s in (0, 1)]
    assert seeds == [0, 1] and mean.shape == (4,)
    torch.testing.assert_close(mean, (by_hand[0] + by_hand[1]) / 2, atol=2e-5, rtol=0)


def test_the_shipped_curves_are_the_long_runs_seeds_run_again():
    import json

    shipped = json.loads(CURVES_PATH.read_text(encoding="utf-8"))["curves"]
    ten = load_ten_seeds()
    assert list(shipped) == ["dense, width 11, lr 0.04", "MoE, lr 0.02", "dense, width 64, lr 0.08"]
    control = shipped.pop("dense, width 64, lr 0.08")          # the dense control: not in the long run's files
    assert control["seeds"] == ten.seeds and len(control["mean"]) == ten.steps and set(control["kernels"]) == {"AVX2"}
    for m in ten.marks[:-1]:      # the curve is each step's loss before its update: index m is the loss after m steps
        after = sum(marks[str(m)] for marks in control["marks"]) / len(control["marks"])
        assert abs(control["mean"][m] - after) < 2e-5
    for key, entry in shipped.items():
        assert entry["seeds"] == ten.seeds and len(entry["mean"]) == ten.steps
        marks = torch.tensor([[m[str(s)] for s in ten.marks] for m in entry["marks"]], dtype=torch.float64).T
        torch.testing.assert_close(marks, ten.loss[key], atol=1e-5, rtol=0)     # the same runs, mark by mark
