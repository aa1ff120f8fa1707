"""helpers.fact_lookup: the fact-lookup model, its data, one run built and trained, the frozen embeddings."""
import pytest
import torch

from helpers.fact_lookup import (FactLookup, NoFFN, build_lookup, ffn_params, lookup_data, lookup_loss_and_accuracy,
                                 make_ffn, train_lookup)
from helpers.facts import load_facts
from helpers.ffn import FFN
from helpers.moe import MoE, bias_update_step

_MOE = {"ffn": "moe", "n_experts": 8, "top_k": 1, "d_ff": 8, "balance_coef": 0.1, "z_coef": 0.0}


def test_lookup_data_packs_subject_and_relation():
    data = lookup_data()
    assert data.ids.shape == (608, 1) and data.targets.shape == (608, 1) and len(data.answers) == 296
    n_rel = len(data.relations)
    for row in (0, 5, 607):
        f = data.facts[row]
        sid, rid = divmod(int(data.ids[row, 0]), n_rel)
        assert data.subjects[sid] == f.subject and data.relations[rid] == f.relation
        assert data.answers[int(data.answer_id[row])] == f.obj
    small = lookup_data(load_facts(relations=["capital"]))
    assert small.ids.shape == (152, 1) and small.relations == ["capital"]
    with pytest.raises(ValueError, match="facts is empty"):
        lookup_data([])


def test_fact_lookup_forward_and_inputs():
    data = lookup_data()
    torch.manual_seed(0)
    model = FactLookup(len(data.subjects), len(data.relations), len(data.answers), 8, MoE(8, 4, 1, d_ff=8))
    logits = model(data.ids[:10])
    assert logits.shape == (10, 1, len(data.answers))
    sid, rid = data.ids[:10, 0] // 4, data.ids[:10, 0] % 4
    torch.testing.assert_close(model.inputs(data.ids[:10]), model.embed.weight[sid] + model.embed.weight[152 + rid])
    assert len(model.ffn_records()) == 1
    with pytest.raises(ValueError, match=r"ids must have shape \(N, 1\)"):
        model(torch.zeros(3, 2, dtype=torch.long))


def test_no_ffn_control_adds_nothing():
    x = torch.randn(4, 8)
    assert torch.equal(NoFFN()(x), torch.zeros_like(x))
    assert sum(p.numel() for p in NoFFN().parameters()) == 0


def test_make_ffn_builds_the_course_modules_and_counts_their_parameters():
    none, dense, moe = make_ffn({"ffn": "none"}, 8), make_ffn({"ffn": "dense", "d_ff": 8}, 8), make_ffn(_MOE, 8)
    assert isinstance(none, NoFFN) and isinstance(dense, FFN) and isinstance(moe, MoE)
    assert ffn_params(none) == (0, 0) and ffn_params(dense) == (192, 192)
    assert ffn_params(moe) == (8 * 192 + 64, 192 + 64)                       # the router is used by every fact
    fine = make_ffn({**_MOE, "granularity": 4, "n_shared": 1}, 8)           # 1 shared + 31 routed of width 2
    assert fine.n_experts == 31 and fine.top_k == 3
    assert ffn_params(fine) == (32 * 48 + 31 * 8, 31 * 8 + 4 * 48)
    with pytest.raises(ValueError, match="an arm is"):
        make_ffn({"ffn": "dense"}, 8)


def test_build_lookup_shares_the_lookup_across_ffns_and_freezes_the_embeddings():
    data = lookup_data(load_facts(relations=["capital"]))
    a = build_lookup(data, {"ffn": "dense", "d_ff": 11}, 8, seed=3)
    b = build_lookup(data, _MOE, 8, seed=3)
    c = build_lookup(data, _MOE, 8, seed=4, frozen=False)
    for name in ("embed.weight", "ln.weight", "ln_f.weight", "unembed.weight"):     # same seed: the same lookup
        assert torch.equal(a.state_dict()[name], b.state_dict()[name])
    assert not torch.equal(a.embed.weight, c.embed.weight)
    assert not a.embed.weight.requires_grad and c.embed.weight.requires_grad
    start = a.embed.weight.clone()
    train_lookup(a, data, steps=3, lr=0.05)
    assert torch.equal(a.embed.weight, start)                                        # frozen: never moves


def test_train_lookup_lowers_the_loss_logs_the_load_and_scores_on_the_way():
    data = lookup_data(load_facts(relations=["capital"]))
    model = build_lookup(data, {**_MOE, "n_experts": 4}, 8, seed=0)
    before, _ = lookup_loss_and_accuracy(model, data)
    curve, loads, evals = train_lookup(model, data, steps=10, lr=3e-2, eval_at=(4, 10))
    after, acc = lookup_loss_and_accuracy(model, data)
    assert curve.shape == (10,) and curve.dtype == torch.float64 and after < before and 0 <= acc <= 1
    assert loads.shape == (10, 4) and (loads.sum(-1) == 152).all()
    assert abs(float(curve[0]) - before) < 1e-5                      # the answer loss alone, before the first step
    assert sorted(evals) == [4, 10] and evals[10] == (after, acc)
    again = build_lookup(data, {**_MOE, "n_experts": 4}, 8, seed=0)  # scoring on the way changes nothing
    curve2, loads2, _ = train_lookup(again, data, steps=10, lr=3e-2)
    assert torch.equal(curve, curve2) and torch.equal(loads, loads2)
    dense = build_lookup(data, {"ffn": "dense", "d_ff": 8}, 8, seed=0)
    curve, loads, evals = train_lookup(dense, data, steps=3, lr=3e-2)
    assert curve.shape == (3,) and loads is None and evals == {}


def test_the_bias_moves_by_gamma_against_the_load():
    data = lookup_data(load_facts(relations=["continent"]))
    model = build_lookup(data, {**_MOE, "n_experts": 4, "score": "sigmoid", "balance_coef": 0.0,
                                "bias_update": 0.01}, 8, seed=0)
    _, loads, _ = train_lookup(model, data, steps=1, lr=2e-2)
    torch.testing.assert_close(model.ffn.selection_bias, bias_update_step(torch.zeros(4), loads[0], 0.01))
