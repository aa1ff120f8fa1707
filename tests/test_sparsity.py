"""helpers.sparsity: the fact-lookup model, its data, the seed runs and the figures."""
import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers.facts import load_facts
from helpers.ffn import FFN
from helpers.moe import MoE, RoutingLog, moe_aux_loss
from helpers.sparsity import (FactLookup, balancing_figure, curves_figure, lookup_data, lookup_loss_and_accuracy,
                              train_full_batch, train_seeds)


def test_lookup_data_packs_subject_and_relation():
    data = lookup_data()
    assert data.ids.shape == (608, 1) and data.targets.shape == (608, 1)
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


def test_training_lowers_the_loss_and_logs_routing():
    data = lookup_data(load_facts(relations=["capital"]))
    torch.manual_seed(0)
    model = FactLookup(len(data.subjects), 1, len(data.answers), 8, MoE(8, 4, 1, d_ff=8, balance_coef=0.1))
    before, _ = lookup_loss_and_accuracy(model, data)
    log = RoutingLog()
    losses = train_full_batch(model, data, steps=30, lr=3e-2, extra_loss=moe_aux_loss, on_step=log)
    after, acc = lookup_loss_and_accuracy(model, data)
    assert len(losses) == 30 and after < before and 0 <= acc <= 1
    assert log.counts.shape == (30, 1, 4) and (log.counts.sum(-1) == 152).all()


def test_train_seeds_records_and_figures():
    import matplotlib.pyplot as plt

    data = lookup_data(load_facts(relations=["continent"]))
    logs = []

    def factory():
        log = RoutingLog()
        logs.append(log)
        return log

    dense = train_seeds("dense", lambda: FFN.from_variant("swiglu", 8, 8, bias=False), data, d_model=8,
                        seeds=(0, 1), steps=5, progress=False)
    moe = train_seeds("moe", lambda: MoE(8, 4, 1, d_ff=8), data, d_model=8, seeds=(0, 1), steps=5,
                      params_active=192, extra_loss=moe_aux_loss, on_step_factory=factory, progress=False)
    assert dense.curves.shape == (2, 5) and dense.params_total == dense.params_active == 192
    assert moe.params_total == 4 * 192 + 32 and moe.params_active == 192 and len(moe.models) == 2
    mean, sd = dense.mean_sd()
    assert mean == pytest.approx(float(dense.final_loss.mean())) and sd >= 0
    # the curves hold the language-model part only (the auxiliary loss is taken out)
    assert (moe.curves > 0).all()
    for fig in (curves_figure([dense, moe]), balancing_figure({"a": logs[:1], "b": logs[1:]})):
        plt.close(fig)
    with pytest.raises(ValueError, match="seeds must list at least one seed"):
        train_seeds("x", lambda: FFN(8), data, d_model=8, seeds=())


def test_no_ffn_control_adds_nothing():
    from helpers.sparsity import NoFFN
    x = torch.randn(4, 8)
    assert torch.equal(NoFFN()(x), torch.zeros_like(x))
    assert sum(p.numel() for p in NoFFN().parameters()) == 0
