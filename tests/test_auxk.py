"""helpers.dead_features.train_auxk: AuxK on notebook 09's transcoders, and its shipped runs."""
import json

import pytest
import torch

from helpers.dead_features import (AUX_COEFS, RESAMPLE_AT, _resample, arm_means, arm_names, auxk_family, auxk_runs,
                                   load_auxk, train_auxk)
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


def test_hooks_that_do_nothing_leave_the_recipe_bit_for_bit():
    x, y = _data()
    calls = []
    quiet = train_dictionaries(x, y, 16, 2, [0, 1], steps=30, dtype=torch.float64, progress=False,
                               extra_loss=lambda *args: calls.append("loss") or None,
                               before_step=lambda t, params, opt: calls.append("step"))
    recipe = train_dictionaries(x, y, 16, 2, [0, 1], steps=30, dtype=torch.float64, progress=False)
    assert calls.count("loss") == calls.count("step") == 30
    for a, b in zip(quiet, recipe):
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_an_extra_loss_of_the_wrong_shape_is_refused():
    x, y = _data()
    with pytest.raises(ValueError, match="one value per seed"):
        train_dictionaries(x, y, 16, 2, [0, 1], steps=2, dtype=torch.float64, progress=False,
                           extra_loss=lambda pre, *rest: pre.new_zeros(()))


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
    assert record["aux_coefs"] == {"auxk": 1.0, "auxk_5": 5.0} == AUX_COEFS
    assert record["resample_at"] == list(RESAMPLE_AT)
    for runs in record["runs"].values():
        for arm in ("recipe", "auxk", "auxk_5", "resample"):
            assert len(runs[arm]["held_out"]) == 2 and all(0 <= d <= 256 for d in runs[arm]["dead"])
    assert set(auxk_family(record)) == {"dead features, AuxK 1 − recipe", "held-out FVU %, AuxK 1 − recipe",
                                        "dead features, AuxK 5 − recipe", "held-out FVU %, AuxK 5 − recipe",
                                        "dead features, resampling − recipe", "held-out FVU %, resampling − recipe"}
    assert list(arm_names(record)) == ["recipe", "auxk", "auxk_5", "resample"]
    dead, held_out = arm_means(record, "recipe")
    runs = record["runs"].values()
    assert dead == sum(sum(r["recipe"]["dead"]) / 2 for r in runs) / 5
    assert abs(held_out - sum(sum(r["recipe"]["held_out"]) / 2 for r in runs) / 5) < 1e-12


def test_the_shipped_coefficient_1_arm_is_the_one_shipped_before_the_move():
    # the runs of helpers/data/auxk.json as first made by `python -m helpers.dictionary_study --auxk` (before
    # AuxK moved to helpers.dead_features and the coefficient-5 arm was added): they must not change
    first = {"0": ([134, 128], [123, 113], [0.006607, 0.006435], [0.006025, 0.006122]),
             "1": ([151, 157], [142, 148], [0.00905, 0.008661], [0.0091, 0.008917]),
             "2": ([140, 138], [135, 145], [0.006963, 0.007208], [0.006568, 0.00696]),
             "3": ([140, 157], [151, 154], [0.005076, 0.005174], [0.005327, 0.005205]),
             "4": ([124, 124], [129, 130], [0.006937, 0.006841], [0.007614, 0.006592])}
    runs = load_auxk()["runs"]
    for m, (dead_recipe, dead_auxk, fvu_recipe, fvu_auxk) in first.items():
        assert runs[m]["recipe"] == {"held_out": fvu_recipe, "dead": dead_recipe}
        assert runs[m]["auxk"] == {"held_out": fvu_auxk, "dead": dead_auxk}


def test_a_small_run_has_the_shipped_format():
    record = json.loads(json.dumps(auxk_runs([0], seeds=(0,), steps=3, progress=False)))
    assert set(record["runs"]["0"]) == {"recipe", "auxk", "auxk_5", "resample"}
    assert set(auxk_family(record)) == set(auxk_family(load_auxk()))


def test_resampling_moves_only_dead_features_onto_the_worst_rows():
    x, y = _data(n=40)
    W_enc = torch.zeros(1, 5, 6, dtype=torch.float64)
    W_enc[0, :3] = torch.eye(6, dtype=torch.float64)[:3] * torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    b_enc = torch.zeros(1, 5, dtype=torch.float64)
    b_enc[0, 3:] = -1e6                                              # features 3 and 4 never fire: dead
    W_dec = torch.randn(1, 6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    b_dec = torch.zeros(1, 6, dtype=torch.float64)
    params = [p.clone().requires_grad_() for p in (W_enc, b_enc, W_dec, b_dec)]
    opt = torch.optim.Adam(params, lr=0.01)
    _resample(x, y, 1, params, opt)
    new_enc, new_b, new_dec, _ = (p.detach()[0] for p in params)
    assert torch.equal(new_enc[:3], W_enc[0, :3]) and torch.equal(new_dec[:, :3], W_dec[0][:, :3])
    codes = torch.zeros(40, 5, dtype=torch.float64)
    pre = x @ W_enc[0].T + b_enc[0]
    top = pre.topk(1, dim=-1)
    codes.scatter_(-1, top.indices, torch.relu(top.values))
    error = ((y - codes @ W_dec[0].T) ** 2).sum(-1)
    rows = error.sort(descending=True, stable=True).indices[:2]
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)
    assert torch.allclose(new_dec[:, 3:], unit(y[rows]).T) and torch.equal(new_b[3:], torch.zeros(2).double())
    assert torch.allclose(new_enc[3:], 2.0 * unit(x[rows]))       # the live keys' mean length: (1 + 2 + 3) / 3
