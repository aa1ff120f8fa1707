"""helpers.dictionary_study.train_auxk: AuxK on notebook 09's transcoders, and its shipped runs."""
import torch

from helpers.dictionary_study import auxk_family, load_auxk, train_auxk
from helpers.dictionary import firing_counts, train_dictionaries


def _data(n=120, d=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return x, torch.tanh(x @ torch.randn(d, d, generator=gen, dtype=torch.float64))


def test_without_the_aux_term_it_is_the_recipe():
    x, y = _data()
    ours = train_auxk(x, y, 16, 2, [0, 1], steps=40, aux_coef=0.0, k_aux=4)
    recipe = train_dictionaries(x, y, 16, 2, [0, 1], steps=40, dtype=torch.float64, progress=False)
    for a, b in zip(ours, recipe):
        assert torch.allclose(a.W_dec, b.W_dec, atol=1e-10) and torch.allclose(a.W_enc, b.W_enc, atol=1e-10)


def test_the_aux_term_moves_only_features_dead_in_training():
    x, y = _data()
    plain = train_auxk(x, y, 32, 1, [0], steps=60, aux_coef=0.0, dead_window=5)[0]
    aux = train_auxk(x, y, 32, 1, [0], steps=60, aux_coef=1.0, dead_window=5)[0]
    assert not torch.allclose(plain.W_enc, aux.W_enc)
    with torch.no_grad():
        assert int((firing_counts(aux.encode(x)) == 0).sum()) <= 32


def test_the_shipped_runs_and_their_family():
    record = load_auxk()
    assert record["models"] == [0, 1, 2, 3, 4] and record["seeds"] == [0, 1] and record["steps"] == 1000
    for runs in record["runs"].values():
        for arm in ("recipe", "auxk"):
            assert len(runs[arm]["held_out"]) == 2 and all(0 <= d <= 256 for d in runs[arm]["dead"])
    assert set(auxk_family(record)) == {"dead features, AuxK − recipe", "held-out FVU %, AuxK − recipe"}
