"""helpers.attention_knockout: one attention edge removed from TinyGPT's causal mask (notebook 03, section 5)."""

import pytest
import torch

from helpers.attention_knockout import (attention_patching_effect, blocked_attention, knockout_family,
                                        knockout_probabilities, mean_ablated_accuracy, mean_ablation_family, mean_ablation_report,
                                        other_word_positions)
from helpers.facts import load_facts, make_dataset
from helpers.facts import RELATIONS
from helpers.fact_model import FACT_MODEL_SEEDS, load_fact_model
from helpers.edit_budget import token_positions
from helpers.transformer import GPTConfig, TinyGPT


def _reference_attention(attn, x, query, key):
    """The block's attention written with an explicit softmax and -inf on the causal mask and the one edge."""
    b, T, w = x.shape
    h = attn.n_heads
    q, k, v = (t.view(b, T, h, w // h).transpose(1, 2) for t in attn.qkv(x).split(w, dim=-1))
    scores = q @ k.transpose(-1, -2) / (w // h) ** 0.5                          # (b, h, T, T)
    mask = torch.ones(T, T, dtype=torch.bool).tril().repeat(b, 1, 1)
    mask[torch.arange(b), query, key] = False
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, T, w))


def test_one_edge_is_removed_and_nothing_else_changes():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=20, d_model=16, n_heads=4)).eval()
    ids = torch.randint(0, 20, (3, 6))
    query, key = torch.tensor([5, 4, 3]), torch.tensor([1, 0, 3])
    x = torch.randn(3, 6, 16)
    attn = model.blocks[1].attn
    with torch.no_grad():
        plain = attn(x)
        with blocked_attention(model, 1, query, key):
            ours = attn(x)
        torch.testing.assert_close(ours, _reference_attention(attn, x, query, key), atol=1e-5, rtol=0)
        changed = (ours - plain).abs().amax(-1) > 1e-6                            # (3, 6): positions that moved
    assert changed.tolist() == [[i == q for i in range(6)] for q in query.tolist()]
    assert "forward" not in vars(attn)                                           # the class's forward is back
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(ids))


def test_bad_arguments_are_named():
    model = TinyGPT(GPTConfig(vocab_size=20, d_model=16, n_heads=4))
    with pytest.raises(ValueError, match="layer"):
        with blocked_attention(model, 2, torch.tensor([1]), torch.tensor([0])):
            pass
    with pytest.raises(ValueError, match="key_pos <= query_pos"):
        with blocked_attention(model, 0, torch.tensor([1]), torch.tensor([2])):
            pass


def test_the_fact_models_need_the_country_edge():
    data = make_dataset(load_facts())
    subject = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    other = other_word_positions(subject)
    assert bool((other != subject).all()) and bool((other < data.answer_pos).all()) and bool((other >= 1).all())
    seeds = FACT_MODEL_SEEDS[:5]
    found = {s: knockout_probabilities(load_fact_model(data, seed=s)[0], data.ids, data.answer_pos, data.answer_id,
                                       subject) for s in seeds}
    assert all(found[s]["nothing blocked"] > 0.98 for s in seeds)
    assert all(found[s]["subject, layer 0 and 1"] < 0.2 < found[s]["other word, layer 0 and 1"] for s in seeds)
    assert all(d.mean < -0.3 for d in knockout_family(found).values())


def test_mean_ablation_replaces_each_output_by_its_group_mean_and_restores_the_model():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=12, d_model=16, n_heads=4)).eval()
    ids = torch.randint(0, 12, (6, 5))
    pos, groups = torch.full((6,), 4), torch.tensor([0, 0, 0, 1, 1, 1])
    with torch.no_grad():
        clean = model(ids)
        answer = clean[:, 4].argmax(-1)
    # one example per group: its own output is the group mean, so nothing changes
    single = mean_ablated_accuracy(model, ids[[0, 3]], pos[:2], answer[[0, 3]], torch.tensor([0, 1]), "ffn")
    assert single.tolist() == [1.0, 1.0]
    # by hand for group 0: every block's FFN output replaced by its mean over the group's clean run
    rows = ids[:3]
    outs = {}
    hooks = [b.ffn.register_forward_hook(lambda m, i, o, l=l: outs.__setitem__(l, o.mean(0, keepdim=True)))
             for l, b in enumerate(model.blocks)]
    with torch.no_grad():
        model(rows)
    for h in hooks:
        h.remove()
    hooks = [b.ffn.register_forward_hook(lambda m, i, o, l=l: outs[l].expand_as(o)) for l, b in enumerate(model.blocks)]
    with torch.no_grad():
        by_hand = (model(rows)[:, 4].argmax(-1) == answer[:3]).float().mean()
    for h in hooks:
        h.remove()
    got = mean_ablated_accuracy(model, ids, pos, answer, groups, "ffn")
    assert got.shape == (2,) and float(got[0]) == float(by_hand)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), clean)                              # every hook removed
    with pytest.raises(ValueError, match="sublayer"):
        mean_ablated_accuracy(model, ids, pos, answer, groups, "mlp")


def test_attention_does_much_of_the_lookup_in_the_fact_models():
    data = make_dataset(load_facts())
    relation = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    seeds = FACT_MODEL_SEEDS[:5]
    ffn, attn = {}, {}
    for s in seeds:
        model = load_fact_model(data, seed=s)[0].eval()
        ffn[s] = mean_ablated_accuracy(model, data.ids, data.answer_pos, data.answer_id, relation, "ffn")
        attn[s] = mean_ablated_accuracy(model, data.ids, data.answer_pos, data.answer_id, relation, "attn")
    assert all(float(ffn[s].min()) > 0.2 for s in seeds)                     # far above chance (1/152 for capitals)
    assert all(float(attn[s][0]) < 0.05 for s in seeds)
    assert all(d.mean > 0.2 for d in mean_ablation_family(ffn, attn, list(RELATIONS)).values())
    report = mean_ablation_report(ffn, attn, list(RELATIONS))
    assert report.count("\n") == 1 and "floor" in report and "capital" in report


def _by_hand_patched(model, ids, donor_ids, layer, t):
    """TinyGPT's forward written out, with attention's output of ``layer`` at position t taken from the donor."""
    def run(x_ids, donor_out=None):
        x = model.tok_emb(x_ids) + model.pos_emb(torch.arange(x_ids.shape[1]))
        outs = []
        for l, block in enumerate(model.blocks):
            a = block.attn(block.ln1(x))
            outs.append(a)
            if donor_out is not None and l == layer:
                a = a.clone()
                a[:, t] = donor_out[l][:, t]
            x = x + a
            x = x + block.ffn(block.ln2(x))
        return model.lm_head(model.ln_f(x)), outs
    _, donor_out = run(donor_ids)
    return run(ids, donor_out)[0]


def test_attention_patching_matches_a_forward_written_by_hand():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=20, d_model=16, n_heads=4)).eval()
    ids, donor = torch.randint(0, 20, (5, 6)), torch.randint(0, 20, (5, 6))
    pos, answer = torch.full((5,), 5), torch.randint(0, 20, (5,))
    with torch.no_grad():
        got = attention_patching_effect(model, ids, pos, answer, donor, [1, 5])
        for layer in range(2):
            for t in (1, 5):
                p = _by_hand_patched(model, ids, donor, layer, t)[torch.arange(5), pos].softmax(-1)
                assert abs(float(got[layer, t]) - float(p[torch.arange(5), answer].mean())) < 1e-6
        intact = model(ids)[torch.arange(5), pos].softmax(-1)[torch.arange(5), answer].mean()
        assert abs(float(got[1, 1]) - float(intact)) < 1e-6          # the last layer before the answer: no reader
        same = attention_patching_effect(model, ids, pos, answer, ids, [0, 3])
    assert got[:, [0, 2, 3, 4]].isnan().all() and abs(float(same[0, 3]) - float(intact)) < 1e-6
    torch.testing.assert_close(model(ids), model(ids))                           # every hook removed
    assert not any(b.attn._forward_hooks for b in model.blocks)
    with pytest.raises(ValueError, match="donor_ids"):
        attention_patching_effect(model, ids, pos, answer, donor[:2], [1])


def test_seed_0_carries_the_country_with_layer_1_attention():
    data = make_dataset(load_facts())
    capital = torch.tensor([n for n, f in enumerate(data.facts) if f.relation == "capital"])
    subject = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    model = load_fact_model(data, seed=0)[0].eval()
    subj, last = int(subject[capital[0]]), int(data.answer_pos[capital[0]])
    effect = attention_patching_effect(model, data.ids[capital], data.answer_pos[capital], data.answer_id[capital],
                                       data.ids[capital.roll(1)], [subj, last])
    assert float(effect[1, last]) < 0.05 and float(effect[0, last]) > 0.9      # cell 37's reading
