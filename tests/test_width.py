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


def test_tradeoff_figure_marks_the_selected_width_and_the_yardstick():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.width import width_tradeoff_figure

    sweep = memorisation_sweep([4, 8, 16], d_model=4, n_facts=16, seeds=(0, 1), steps=5, lr=3e-2, progress=False)
    fig = width_tradeoff_figure(sweep, 2, reference=1)
    title = fig._suptitle.get_text()
    assert "d_ff = 2d" in title and f"{sweep.params[8]:,} parameters for {sweep.targets:,} numbers" in title
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="selected must be one of the expansions"):
        width_tradeoff_figure(sweep, 3)
