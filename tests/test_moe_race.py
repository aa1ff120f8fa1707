"""helpers.moe_race: arms over seeds, the learning-rate sweep, the race file and its command, the figures, and the
verdicts notebook 07 states from the shipped race."""
import json

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers.fact_lookup import build_lookup, lookup_data, lookup_loss_and_accuracy, train_lookup
from helpers.facts import load_facts
from helpers.moe import bias_trajectory
from helpers.moe_race import (ARMS, BALANCE_PAIRS, FRESH_SEEDS_PATH, RACE_FRESH_SEEDS_PATH, GRANULARITY_PAIRS, KERNEL_RERUN_PATH, LRS, RACE_PAIRS, SEEDS,
                              SETTINGS, SWEEP_SEEDS, TRAINABLE_ARMS, Sweep, balancing_figure, bias_figure, convergence_lines, load_family, load_race,
                              loss_family, main, rerun_lines, run_race, save_race, sweep_summary_lines,
                              sweep, train_arm)
from helpers.stats import holm


@pytest.fixture(scope="module")
def continent():
    return lookup_data(load_facts(relations=["continent"]))


def test_train_arm_trains_each_seed_as_a_single_run(continent):
    moe = train_arm("moe", ARMS["MoE"], continent, seeds=(0, 1, 2), d_model=8, steps=5, lr=2e-2, keep_loads=True)
    dense = train_arm("dense", ARMS["dense, width 11"], continent, seeds=(0, 1), d_model=8, steps=5, lr=2e-2)
    assert moe.eval_steps == [4, 5] and moe.steps == 5 and moe.loss.shape == moe.accuracy.shape == (2, 3)
    assert moe.curve.shape == (3, 5) and bool((moe.curve[1] <= moe.curve[0]).all() and (moe.curve[0] <= moe.curve[2]).all())
    assert moe.max_over_mean.shape == (5, 3) and bool((moe.max_over_mean >= 1).all())
    torch.testing.assert_close(moe.late_load, moe.max_over_mean[-10:].mean(0))
    assert moe.first_loads.shape == (5, 8) and bool((moe.first_loads.sum(-1) == 152).all())
    assert moe.params_total == 8 * 192 + 64 and moe.params_active == 192 + 64
    assert moe.settings == {"d_model": 8, "frozen": True} and moe.lr == 2e-2
    assert dense.late_load is None and dense.max_over_mean is None and dense.params_active == 3 * 8 * 11
    quiet = train_arm("moe", ARMS["MoE"], continent, seeds=(1,), d_model=8, steps=5, lr=2e-2)
    assert quiet.late_load.shape == (1,) and quiet.max_over_mean is None        # loads kept only when asked
    model = build_lookup(continent, ARMS["MoE"], 8, seed=1)            # seed 1 by hand: the same run
    train_lookup(model, continent, steps=5, lr=2e-2)
    assert lookup_loss_and_accuracy(model, continent)[0] == float(moe.final()[1]) == float(quiet.final()[0])
    with pytest.raises(ValueError, match="one of the scored steps"):
        moe.final(3)
    with pytest.raises(ValueError, match="at least one seed"):
        train_arm("x", ARMS["MoE"], continent, seeds=(), d_model=8, steps=1, lr=1e-2)


def test_the_bias_replayed_from_the_loads_is_the_layers(continent):
    """bias_trajectory rebuilds the selection bias from the loads train_lookup records: after every step it
    equals the bias the MoE moved itself (the notebook's bias figure rests on this)."""
    run = train_arm("bias", ARMS["bias, softmax"], continent, seeds=(0,), d_model=8, steps=12, lr=0.08,
                    keep_loads=True)
    model = build_lookup(continent, ARMS["bias, softmax"], 8, seed=0)
    _, loads, _ = train_lookup(model, continent, steps=12, lr=0.08)
    assert torch.equal(loads, run.first_loads)
    bias = bias_trajectory(loads, ARMS["bias, softmax"]["bias_update"])
    assert bias.shape == (13, 8) and bool((bias[0] == 0).all())
    torch.testing.assert_close(bias[-1], model.ffn.selection_bias.double(), rtol=0, atol=1e-6)
    assert bool(((bias[1:] - bias[:-1]).abs().round(decimals=9) <= 0.01).all())   # at most γ a step
    fig = bias_figure(run)
    assert len(fig.axes) == 2 and len(fig.axes[1].get_lines()) == 8 + 1            # 8 experts and the zero line
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_sweep_picks_the_rate_with_the_lowest_mean_loss(continent):
    s = sweep(["no FFN (control)"], continent, lrs=(0.01, 0.1), seeds=(5, 6), d_model=8, steps=5, progress=False)
    assert s.loss["no FFN (control)"].shape == (2, 2) and s.best_lr("no FFN (control)") == 0.1
    made = Sweep([0.1, 0.2, 0.4], [0, 1], 5, True, {"a": torch.tensor([[3.0, 1.0], [1.0, 1.0], [2.0, 2.0]])})
    assert made.best_lr("a") == 0.2
    head, row = made.lines()
    assert head.split() == ["arm", "0.1", "0.2", "0.4"] and row.split() == ["a", "2.000", "1.000*", "2.000"]


def test_race_save_load_and_the_results_command(tmp_path, capsys):
    out = tmp_path / "race.json"
    assert main(["--results", "--arms", "MoE", "dense, width 11", "--seeds", "0", "2", "--sweep-seeds", "7",
                 "--lrs", "0.02", "0.04", "--trainable-arms", "MoE", "--budgets", "4", "6", "--out", str(out)]) == 0
    assert "2 arms × 2 seeds × 2 budgets" in capsys.readouterr().out
    assert json.loads(out.read_text())["made_by"] == "python -m helpers.moe_race --results"
    race = load_race(out)
    assert race.budgets == [4, 6] and list(race.runs[4]) == ["MoE", "dense, width 11"]
    assert race.trainable.frozen is False and race.trainable.steps == 4 and race.sweeps[6].steps == 6
    r = race.runs[4]["MoE"]
    assert r.lr == race.sweeps[4].best_lr("MoE") and r.seeds == [0, 2] and r.eval_steps == [3, 4]
    assert r.max_over_mean.shape == (4, 2) and r.first_loads.shape == (4, 8) and r.curve.shape == (3, 4)
    assert race.runs[6]["MoE"].max_over_mean is None and race.runs[6]["MoE"].late_load.shape == (2,)
    direct = train_arm("MoE", ARMS["MoE"], lookup_data(), seeds=(0, 2), d_model=8, steps=4, lr=r.lr, keep_loads=True)
    torch.testing.assert_close(r.loss, direct.loss, atol=1e-5, rtol=0)
    assert torch.equal(r.first_loads, direct.first_loads)
    again = load_race(save_race(race, tmp_path / "again.json"))
    assert again.runs[6]["MoE"].spec == ARMS["MoE"] and torch.equal(again.runs[4]["MoE"].loss, r.loss)
    fam = loss_family(race, [("MoE", "dense, width 11")], n_seeds=2)
    assert list(fam) == ["  4 steps: MoE − dense, width 11", "  6 steps: MoE − dense, width 11"]
    assert list(load_family(race, [("MoE", "MoE")], [4])) == ["  4 steps, load: MoE − MoE"]
    lines = convergence_lines(race, ["MoE", "dense, width 11"])
    assert len(lines) == 3 and lines[0].count("last fifth") == 2
    # --rates-from: the seeds again at the rates the first race chose, its sweeps kept (none run)
    rerun = tmp_path / "rerun.json"
    assert main(["--results", "--arms", "MoE", "dense, width 11", "--seeds", "0", "2", "--budgets", "4", "6",
                 "--rates-from", str(out), "--out", str(rerun)]) == 0
    second = load_race(rerun)
    assert second.runs[6]["dense, width 11"].lr == race.runs[6]["dense, width 11"].lr
    assert torch.equal(second.sweeps[4].loss["MoE"], race.sweeps[4].loss["MoE"]) and not second.trainable.frozen
    torch.testing.assert_close(second.runs[4]["MoE"].loss, r.loss, atol=1e-5, rtol=0)
    # the fresh-seed control: other seeds at the same rates, a third column beside the two kernels
    fresh = tmp_path / "fresh.json"
    assert main(["--results", "--arms", "MoE", "dense, width 11", "--seeds", "5", "6", "--budgets", "4", "6",
                 "--rates-from", str(out), "--out", str(fresh)]) == 0
    third = load_race(fresh)
    assert third.runs[4]["MoE"].seeds == [5, 6] and third.runs[4]["MoE"].lr == r.lr
    pair = [("MoE", "dense, width 11")]
    assert rerun_lines(race, second, pair) == rerun_lines(race, second, pair, loads=False, fresh=None)
    lines = rerun_lines(race, second, pair, fresh=third)
    assert len(lines) == 2 + 2 and "seeds 5–6: mean, verdict" in lines[0] and lines[1].count("  ") > 3
    assert " of 2; single runs more than 0.01 nats apart: " in lines[-1] and "on the fresh seeds, same verdict in" in lines[-1]
    with pytest.raises(ValueError, match="rates_from has sweeps"):
        run_race(["MoE"], [0], rates_from=race, budgets=(5,))
    with pytest.raises(ValueError, match="unknown settings"):
        run_race(["MoE"], [0], width=3)
    with pytest.raises(FileNotFoundError, match="python -m helpers.moe_race --results"):
        load_race(tmp_path / "missing.json")


def test_figures(tmp_path):
    import matplotlib.pyplot as plt

    race = run_race(["MoE", "bias, sigmoid"], [0, 1], sweep_seeds=[3], lrs=[0.02], trainable_arms=(), budgets=(3, 5),
                    progress=False)
    assert race.trainable is None
    fig = balancing_figure([race.runs[3]["MoE"], race.runs[3]["bias, sigmoid"]], ["C0", "C1"])
    assert len(fig.axes) == 5                                         # 2 × 2 panels and the colour bar
    plt.close(fig)
    lines = rerun_lines(race, race, [("bias, sigmoid", "MoE")], loads=True, fresh=race)     # section 5's family
    assert len(lines) == 4 + 2 and "seeds 0–1: mean, verdict" in lines[0]
    assert [line.split(":")[0].strip() for line in lines[1:5]] == ["3 steps, load", "5 steps, load", "3 steps", "5 steps"]
    assert lines[-1].endswith("on the fresh seeds, same verdict in 4 of 4")


# ----------------------------------------------------------------------------- the shipped race
@pytest.fixture(scope="module")
def race():
    return load_race()


def test_the_shipped_race_is_the_notebooks(race):
    assert race.budgets == list(SETTINGS["budgets"])
    for steps in race.budgets:
        s = race.sweeps[steps]
        assert list(s.loss) == list(ARMS) and s.lrs == list(LRS) and s.seeds == list(SWEEP_SEEDS) and s.frozen
        assert list(race.runs[steps]) == list(ARMS)
        for name, r in race.runs[steps].items():
            assert r.spec == ARMS[name] and r.seeds == list(SEEDS) and r.steps == steps
            assert r.lr == s.best_lr(name) and LRS[0] < r.lr < LRS[-1]               # chosen inside the grid
            assert (r.late_load is None) == (ARMS[name]["ffn"] != "moe")
            assert (r.max_over_mean is not None) == (steps == race.budgets[0] and ARMS[name]["ffn"] == "moe")
    assert list(race.trainable.loss) == list(TRAINABLE_ARMS) and not race.trainable.frozen


def test_the_kernel_rerun_is_the_same_race_on_the_default_kernel(race):
    """Notebook 07's control: every seed again at the same rates, made with ATEN_CPU_CAPABILITY=default."""
    other = load_race(KERNEL_RERUN_PATH)
    assert other.environment["cpu_capability"] == "DEFAULT" and other.budgets == race.budgets
    for steps in race.budgets:
        assert list(other.runs[steps]) == list(race.runs[steps])
        for name, r in other.runs[steps].items():
            mine = race.runs[steps][name]
            assert (r.spec, r.lr, r.seeds, r.steps) == (mine.spec, mine.lr, mine.seeds, mine.steps)
    lines = rerun_lines(race, other, RACE_PAIRS)
    assert len(lines) == len(RACE_PAIRS) * len(race.budgets) + 2 and "DEFAULT kernel" in lines[0]
    # what the notebook says of it: 16 of 18 carry; the two that change are both at 100 steps
    mine, theirs = holm(loss_family(race, RACE_PAIRS)), holm(loss_family(other, RACE_PAIRS))
    changed = {a.name for a, b in zip(mine, theirs) if a.verdict != b.verdict}
    assert changed == {"100 steps: dense, width 11 − no FFN (control)", "100 steps: MoE − dense, width 64"}
    short = rerun_lines(race, other, RACE_PAIRS, changed_only=True)                # only the verdicts that move
    assert short[0] == lines[0] and short[-1] == lines[-1]
    assert {line.split(" |")[0].strip() for line in short[1:-1]} == changed
    assert max(abs(a.comparison.mean - b.comparison.mean) for a, b in zip(mine, theirs)) < 0.05


def _assert_rerun_of(race, fresh, pairs, seeds):
    """``fresh`` runs the arms of ``pairs`` at ``race``'s budgets, specs and rates, on ``seeds``."""
    assert fresh.budgets == race.budgets
    for steps in race.budgets:
        assert set(fresh.runs[steps]) == {arm for pair in pairs for arm in pair}
        for name, r in fresh.runs[steps].items():
            assert r.seeds == list(seeds) and (r.spec, r.lr) == (race.runs[steps][name].spec, race.runs[steps][name].lr)


def test_the_fresh_seeds_are_section_5_again_at_the_same_rates(race):
    """Notebook 07's fresh-seed control of section 5: its five arms at the race's rates on seeds used nowhere else;
    what the notebook says of it: the bias's load gain with softmax scores is not resolved at either budget."""
    fresh = load_race(FRESH_SEEDS_PATH)
    _assert_rerun_of(race, fresh, BALANCE_PAIRS, range(200, 220))
    assert not set(range(200, 220)) & (set(SEEDS) | set(SWEEP_SEEDS))
    v = {x.name: x.verdict for x in holm({**load_family(fresh, BALANCE_PAIRS), **loss_family(fresh, BALANCE_PAIRS)})}
    for s in (100, 300):
        assert v[f"{s:>3} steps, load: bias, softmax − MoE"] == "not resolved"
        assert v[f"{s:>3} steps: Switch loss, sigmoid − MoE"] == v[f"{s:>3} steps: bias, sigmoid − bias, softmax"] == "higher"
    assert v["100 steps, load: bias, sigmoid − Switch loss, sigmoid"] == "lower"


def test_the_fresh_seeds_are_section_4_again_at_the_same_rates(race):
    """Notebook 07's fresh-seed control of section 4: its eight arms at the race's rates on seeds 300-319, used
    nowhere else; what the notebook says of it: DeepSeekMoE's 300-step rate blows up (ends above the no-FFN
    control's mean) in 1 of 20 shipped and 3 of 20 fresh seeds, and its win over width 19 there does not carry."""
    fresh = load_race(RACE_FRESH_SEEDS_PATH)
    _assert_rerun_of(race, fresh, RACE_PAIRS, range(300, 320))
    assert not set(range(300, 320)) & (set(SEEDS) | set(SWEEP_SEEDS) | set(range(200, 220)))
    blown = [int((r.runs[300]["DeepSeekMoE"].final() > r.runs[300]["no FFN (control)"].final().mean()).sum())
             for r in (race, fresh)]
    assert blown == [1, 3]
    mine, theirs = holm(loss_family(race, RACE_PAIRS)), holm(loss_family(fresh, RACE_PAIRS))
    changed = {a.name for a, b in zip(mine, theirs) if a.verdict != b.verdict}
    assert changed == {"300 steps: DeepSeekMoE − dense, width 19", "100 steps: fine-grained − MoE, top-2",
                       "100 steps: DeepSeekMoE − fine-grained", "100 steps: MoE − dense, width 64"}


def test_the_live_seed_reproduces_the_file(race):
    """The notebook's live run (the top-2 MoE, seed 0, 100 steps at its rate) comes out as stored and routes
    every step as stored. It is a run that the default, AVX2 and AVX-512 kernels all reproduce (to 1e-4 nats);
    others, such as the top-1 MoE's seed 0, route differently after a few dozen steps on another kernel."""
    r = race.runs[100]["MoE, top-2"]
    again = train_arm("MoE, top-2", ARMS["MoE, top-2"], lookup_data(), seeds=(0,), d_model=8, steps=100, lr=r.lr,
                      keep_loads=True)
    assert abs(float(again.final()[0] - r.final()[0])) < 1e-3
    assert torch.equal(again.first_loads, r.first_loads)


def test_with_trainable_embeddings_every_arm_fits_the_facts(race):
    """The reason the race freezes the embeddings: trained, they fit every fact without any FFN."""
    best = {arm: float(race.trainable.loss[arm].mean(1).min()) for arm in TRAINABLE_ARMS}
    assert max(best.values()) < 0.01, best


def test_the_verdicts_notebook_07_states(race):
    """The sentences of notebook 07's "What this shows" notes, as verdicts of the shipped race."""
    v = {x.name: x.verdict for x in holm(loss_family(race, RACE_PAIRS))}
    for s in (100, 300):
        for a, b in [("MoE", "dense, width 11"), ("MoE, top-2", "dense, width 19"), ("fine-grained", "dense, width 19"),
                     ("DeepSeekMoE", "dense, width 19")]:
            assert v[f"{s:>3} steps: {a} − {b}"] == "lower"
        assert v[f"{s:>3} steps: fine-grained − MoE, top-2"] == "not resolved"
    assert v["100 steps: DeepSeekMoE − fine-grained"] == "higher"
    assert v["300 steps: DeepSeekMoE − fine-grained"] == "not resolved"
    assert v["100 steps: MoE − dense, width 64"] == "not resolved"
    assert v["300 steps: MoE − dense, width 64"] == "higher"
    for r in (race, load_race(KERNEL_RERUN_PATH)):      # granularity, both accountings, on both kernels
        g = {x.name: x.verdict for x in holm(loss_family(r, GRANULARITY_PAIRS))}
        assert g == {f"{s:>3} steps: fine-grained − {b}": v for s in (100, 300)
                     for b, v in (("MoE", "lower"), ("MoE, top-2", "not resolved"))}, g
    full, three = loss_family(race, RACE_PAIRS), loss_family(race, RACE_PAIRS, n_seeds=3)   # exercise 4's answer
    assert sum((full[n].mean > 0) != (three[n].mean > 0) for n in full) == 3
    b = {x.name: x.verdict for x in holm({**load_family(race, BALANCE_PAIRS), **loss_family(race, BALANCE_PAIRS)})}
    for s in (100, 300):
        assert b[f"{s:>3} steps: Switch loss, sigmoid − MoE"] == "higher"          # the scoring costs fit
        assert b[f"{s:>3} steps: bias, sigmoid − bias, softmax"] == "higher"
        assert b[f"{s:>3} steps, load: no balancing − MoE"] == "higher"
        assert b[f"{s:>3} steps, load: bias, softmax − MoE"] == "lower"
        assert b[f"{s:>3} steps: bias, softmax − MoE"] == "not resolved"
    assert b["100 steps, load: bias, sigmoid − Switch loss, sigmoid"] == "lower"
    assert b["300 steps, load: bias, sigmoid − Switch loss, sigmoid"] == "not resolved"
    assert b["100 steps: bias, sigmoid − Switch loss, sigmoid"] == "lower"
    assert b["300 steps: bias, sigmoid − Switch loss, sigmoid"] == "not resolved"
    assert b["100 steps: no balancing − MoE"] == "higher" and b["300 steps: no balancing − MoE"] == "not resolved"


def test_verdict_figure_draws_one_row_per_verdict_and_its_interval_crosses_zero_only_when_not_resolved(race):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.moe_race import top1_label, verdict_figure
    verdicts = holm(loss_family(race, RACE_PAIRS))
    fig = verdict_figure(verdicts)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [top1_label(v.name.strip()) for v in verdicts]
    assert "100 steps: top-1 MoE − dense, width 11" in labels and "100 steps: top-2 MoE − dense, width 19" in labels
    for v in verdicts:
        half = v.threshold * v.comparison.se
        assert (abs(v.comparison.mean) > half) == v.resolved, v.name
    plt.close(fig)


def test_the_alpha_points_file_reads_and_judges_the_bias_against_the_heaviest_alpha(race):
    from helpers.moe_race import ALPHAS, alpha_lines, load_alpha_points
    points = load_alpha_points()
    assert sorted(points) == sorted(ALPHAS)
    for p in points.values():
        assert p.seeds == race.runs[100]["MoE"].seeds and p.lr == race.runs[100]["MoE"].lr
        assert p.loss.shape == p.late_load.shape == (len(p.seeds),)
    lines = alpha_lines(race, points)
    assert len(lines) == 1 + len(ALPHAS) + 2 + 1 + 4 + 1
    assert "MaxVio: bias − α 0.3" in lines[-5] and "loss: α 0.1 − α 0.01" in lines[-2]
    assert "could resolve" in lines[-1] and "nats" in lines[-1]


def test_the_sweep_summary_counts_rates_at_the_grids_ends_and_reads_the_shared_rate():
    race = load_race()
    lines = sweep_summary_lines(race, list(ARMS)[:8])
    assert lines[0].endswith("chosen rates at an end of the grid: 0 of 16")
    s = race.sweeps[100]
    assert f"(mean {float(s.loss['MoE'].mean(1)[s.lrs.index(0.16)]):.3f})" in lines[1] and "own 0.08" in lines[1]
    assert "0.683, 0.596, 2.820 nats by seed" in lines[1]             # one seed diverges: the mean is not the story


def test_section_4_is_one_family_of_26_and_the_audit_judges_the_race_inside_it(race):
    """Notebook 07's section 4: ``section_family`` is the race's 18 then the 3,000-step runs' 4 (each MoE − its dense
    twin) and DeepSeekMoE's 4;
    judged inside it, the race resolves 13 of 18, the default kernel keeps 17 of 18, the fresh seeds 13 of 18."""
    from helpers.moe_long_run import DEEPSEEK_300_PATH, load_long_run, load_ten_seeds
    from helpers.moe_race import section_family

    long = load_ten_seeds()
    family = section_family(race, RACE_PAIRS, long, load_long_run(DEEPSEEK_300_PATH))
    race_rows = loss_family(race, RACE_PAIRS)
    assert len(family) == 26 and list(family)[:18] == list(race_rows)
    verdicts = holm(family)
    assert sum(v.verdict != "not resolved" for v in verdicts) == 17
    assert sum(v.verdict != "not resolved" for v in verdicts[:18]) == 13
    extra = {k: v for k, v in family.items() if k not in race_rows}
    lines = rerun_lines(race, load_race(KERNEL_RERUN_PATH), RACE_PAIRS, fresh=load_race(RACE_FRESH_SEEDS_PATH),
                        changed_only=True, extra=extra)
    assert lines[-1].startswith("same verdict in 17 of 18;") and lines[-1].endswith("same verdict in 13 of 18")
    assert rerun_lines(race, race, RACE_PAIRS, extra={}) == rerun_lines(race, race, RACE_PAIRS)


def test_section_5_display_names_rename_the_printed_arms_only():
    """``BALANCE_NAMES``: section 5 prints its "MoE" as what it is; the race's keys are unchanged."""
    from helpers.moe_race import BALANCE_NAMES, BALANCE_PAIRS, display, load_family, load_race, loss_family
    race = load_race()
    named = {**load_family(race, BALANCE_PAIRS, names=BALANCE_NAMES), **loss_family(race, BALANCE_PAIRS, names=BALANCE_NAMES)}
    plain = {**load_family(race, BALANCE_PAIRS), **loss_family(race, BALANCE_PAIRS)}
    assert list(named) == [k.replace("no balancing", "no balancing, softmax").replace("− MoE", "− Switch loss, softmax")
                           for k in plain]
    assert display("MoE", BALANCE_NAMES) == "Switch loss, softmax" and display("MoE") == "MoE" and "MoE" in race.runs[100]


def test_the_balance_table_prints_each_arms_rate_maxvio_and_loss_per_budget(race):
    from helpers.moe_race import BALANCE_NAMES, balance_table_lines
    lines = balance_table_lines(race, ["no balancing", "MoE", "bias, softmax"], names=BALANCE_NAMES)
    assert lines[0].startswith("run") and "100 steps: lr" in lines[0] and "MaxVio" in lines[0]
    assert lines[2].startswith("Switch loss, softmax") and lines[3].split()[-6:] == ["0.08", "0.15", "0.424", "0.04",
                                                                                     "0.09", "0.120"]
