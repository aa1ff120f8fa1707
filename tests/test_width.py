"""helpers.width: batched training equals training each FFN alone; the sweep's tables, scores and shapes."""
import copy

import pytest
import torch

from helpers.width import init_ffn, memorisation_sweep, random_facts, score, train_together


def test_training_together_equals_training_alone():
    d, d_ff, steps, lr = 5, 12, 15, 1e-2
    tables = [random_facts(20, d, s) for s in (0, 1)]
    together = [init_ffn(d, d_ff, s) for s in (0, 1)]
    alone = copy.deepcopy(together)
    train_together(together, torch.stack([k for k, _ in tables]), torch.stack([v for _, v in tables]),
                   steps=steps, lr=lr)
    for ffn, (keys, values) in zip(alone, tables):
        opt = torch.optim.Adam(ffn.parameters(), lr=lr)
        for _ in range(steps):
            loss = ((ffn(keys) - values) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    for a, b in zip(together, alone):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.allclose(p, q, atol=1e-5)


def test_score_of_a_perfect_and_of_a_zero_ffn():
    keys, values = random_facts(10, 4, 0)
    ffn = init_ffn(4, 8, 0)
    with torch.no_grad():
        for p in ffn.parameters():
            p.zero_()
    error, recall = score(ffn, keys, values)
    assert error == pytest.approx(1.0) and recall <= 0.2


def test_sweep_shapes_and_that_width_helps():
    sweep = memorisation_sweep([4, 32], d_model=4, n_facts=32, seeds=(0, 1), steps=60, lr=3e-2, progress=False)
    assert sweep.widths == [4, 32] and sweep.params == {4: 40, 32: 292}
    assert len(sweep.error[4]) == len(sweep.recall[32]) == 2
    assert sweep.mean("error", 32) < sweep.mean("error", 4)
    assert 0.0 <= min(sweep.recall[4]) <= max(sweep.recall[32]) <= 1.0


def test_tables_are_seeded_and_bad_arguments_are_named():
    assert torch.equal(random_facts(3, 2, 7)[0], random_facts(3, 2, 7)[0])
    assert not torch.equal(random_facts(3, 2, 7)[0], random_facts(3, 2, 8)[0])
    with pytest.raises(ValueError, match="n_facts must be a positive int"):
        random_facts(0, 2, 0)
    with pytest.raises(ValueError, match="widths and seeds must be non-empty"):
        memorisation_sweep([], progress=False)
    with pytest.raises(ValueError, match="keys and values must be"):
        train_together([init_ffn(2, 3, 0)], torch.zeros(2, 4, 2), torch.zeros(2, 4, 2), steps=1, lr=0.1)


def test_sweep_keeps_the_trained_ffns_whose_scores_it_reports():
    sweep = memorisation_sweep([4, 8], d_model=4, n_facts=16, seeds=(0, 1), steps=20, lr=3e-2, progress=False)
    assert sweep.targets == 16 * 4
    for w in sweep.widths:
        assert [f.d_ff for f in sweep.ffns[w]] == [w, w] and not sweep.ffns[w][0].training
        for i, seed in enumerate(sweep.seeds):
            assert score(sweep.ffns[w][i], *random_facts(16, 4, seed)) == pytest.approx(
                (sweep.error[w][i], sweep.recall[w][i]))


def test_checkpoint_scores_are_the_scores_of_the_ffn_at_that_step():
    keys, values = random_facts(12, 4, 0)
    ffns = [init_ffn(4, 8, 0)]
    scores = train_together(ffns, keys[None], values[None], steps=7, lr=3e-2, checkpoints=[3, 7])
    assert sorted(scores) == [3, 7]
    assert scores[7][0] == pytest.approx(score(ffns[0], keys, values), abs=1e-6)
    shorter = [init_ffn(4, 8, 0)]
    train_together(shorter, keys[None], values[None], steps=3, lr=3e-2)
    assert scores[3][0] == pytest.approx(score(shorter[0], keys, values), abs=1e-6)
    assert train_together([init_ffn(4, 8, 0)], keys[None], values[None], steps=2, lr=3e-2) == {}
    with pytest.raises(ValueError, match="checkpoints must lie in 1..steps=2"):
        train_together([init_ffn(4, 8, 0)], keys[None], values[None], steps=2, lr=3e-2, checkpoints=[5])


def test_learning_curves_match_the_sweep_and_survive_a_round_trip_through_the_file(tmp_path):
    from helpers.width import learning_curves, load_curves, save_curves

    curves = learning_curves([(8, 3e-2), (4, 3e-2), (8, 1e-2)], checkpoints=[5, 10], seeds=[0, 1], d_model=4,
                             n_facts=16, progress=False)
    sweep = memorisation_sweep([8], d_model=4, n_facts=16, seeds=(0, 1), steps=10, lr=3e-2, progress=False)
    assert curves.at(8, 10, 3e-2) == pytest.approx(sweep.error[8], abs=1e-6)
    assert curves.at(8, 10, 3e-2, "recall") == pytest.approx(sweep.recall[8], abs=1e-6)
    loaded = load_curves(save_curves(curves, tmp_path / "curves.json"))
    assert loaded.arms == curves.arms and loaded.checkpoints == [5, 10] and loaded.seeds == [0, 1]
    assert loaded.at(4, 5, 3e-2) == pytest.approx(curves.at(4, 5, 3e-2), abs=1e-5)
    assert loaded.environment["cpu_capability"]
    with pytest.raises(ValueError, match="step must be one of the checkpoints"):
        loaded.at(8, 7, 3e-2)
    with pytest.raises(ValueError, match=r"\(d_ff, lr\) must be one of the arms"):
        loaded.at(16, 5, 3e-2)
    with pytest.raises(FileNotFoundError, match="python -m helpers.width --curves"):
        load_curves(tmp_path / "missing.json")


def test_the_stored_curves_cover_what_notebook_02_reads():
    from helpers.width import CURVE_ARMS, CURVE_CHECKPOINTS, load_curves

    curves = load_curves()
    assert curves.arms == list(CURVE_ARMS) and curves.checkpoints == list(CURVE_CHECKPOINTS)
    assert len(curves.seeds) == 10 and (curves.d_model, curves.n_facts) == (16, 256)
    sweep = memorisation_sweep([64], d_model=16, n_facts=256, seeds=(0,), steps=150, lr=1e-2, progress=False)
    assert curves.at(64, 150)[0] == pytest.approx(sweep.error[64][0], abs=2e-3)   # these runs (another CPU: 3rd digit)


def test_curves_figure_marks_the_selected_width_and_the_yardstick(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.width import learning_curves, width_curves_figure

    curves = learning_curves([(4, 3e-2), (8, 3e-2), (8, 1e-1)], checkpoints=[2, 4], seeds=[0, 1], d_model=4,
                             n_facts=16, progress=False)
    fig = width_curves_figure(curves, 2, lr=3e-2)
    title = fig._suptitle.get_text()
    assert "d_ff = 2d" in title and "76 parameters for 64 numbers to store" in title
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "2d at lr 0.1" in labels and "1d (mean of 2 seeds)" in labels
    plt.close(fig)
    with pytest.raises(ValueError, match="selected must be one of the expansions"):
        width_curves_figure(curves, 3, lr=3e-2)


def test_the_stored_ffns_are_the_8d_runs_the_curves_score():
    from helpers.width import load_curves, load_ffns

    ffns, seeds = load_ffns()
    curves = load_curves()
    assert seeds == curves.seeds and all((f.d_model, f.d_ff) == (16, 128) and not f.training for f in ffns)
    for ffn, seed in zip(ffns, seeds):
        assert score(ffn, *random_facts(256, 16, seed))[0] == pytest.approx(curves.at(128, 150)[seeds.index(seed)],
                                                                            abs=1e-4)
