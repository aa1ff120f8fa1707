"""helpers.toy_runs and train_toy_models' train_seeds: the shipped toys of notebook 09 and their live check."""

import pytest
import torch

from helpers.superposition import feature_norms, train_toy_models
from helpers.toy_runs import TOY_RUNS, load_toy_runs, toy_models


def test_train_seeds_reproduce_the_full_run():
    kwargs = dict(n_features=8, n_hidden=3, sparsities=(0.0, 0.9), seeds=range(3), steps=20, progress=False)
    full, one = train_toy_models(**kwargs), train_toy_models(**kwargs, train_seeds=[1])
    assert one.W.shape[0] == 2
    for s in (0.0, 0.9):
        assert torch.allclose(one.W[one.index(s, 1)], full.W[full.index(s, 1)], atol=1e-12)
    with pytest.raises(ValueError):
        train_toy_models(**kwargs, train_seeds=[7])


def test_shipped_toys_match_their_config():
    runs = load_toy_runs()
    assert runs["config"] == TOY_RUNS
    toys = toy_models(runs)
    assert toys.W.shape == (20, 5, 20)
    at = toys.at(0.99)
    represented = (feature_norms(toys.W[at]) > 0.5).sum(1).tolist()
    assert represented == runs["recovery"]["represented"]
    assert set(runs["recovery"]["recovered"]) == {"data start, untrained", "data start", "random start",
                                                  "random directions"}
