"""helpers.memory: the key-value reading of an FFN, checked against brute force, plus its error messages."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import memory
from helpers.facts import RELATIONS, load_facts, make_dataset
from helpers.memory import (FACT_MODEL, NeuronExplorer, agreement, answer_probability, collect, fact_model_config,
                            fact_model_path, find_ffns, group_profile, knock_out, load_fact_model, pattern_share,
                            peak_coefficients, prefix_mask, prefix_words, project_to_vocab, save_fact_model,
                            sub_updates, token_positions, top_triggers, untrained_fact_model, value_logits)
from helpers.transformer import GPTConfig, TinyGPT, answer_accuracy

VOCAB = 13


def tiny(variant="gelu", seed=0):
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_len=8, variant=variant)).eval()


def toy_ids(n=6, t=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (n, t), generator=g)
    ids[0, 5:] = 0          # a padded row
    return ids


def ffn_inputs(model, ids):
    """The input of every block's FFN (LN2 of the residual), by hooks on the FFN modules."""
    inputs = {}
    handles = [b.ffn.register_forward_hook(lambda m, i, o, l=l: inputs.__setitem__(l, i[0]))
               for l, b in enumerate(model.blocks)]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return inputs


@pytest.mark.parametrize("variant", ["gelu", "relu", "swiglu"])
def test_collect_gives_memory_coefficients_and_outputs(variant):
    model, ids = tiny(variant), toy_ids()
    trace = collect(model, ids)
    xs = ffn_inputs(model, ids)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            assert torch.allclose(trace.coefficients[layer], block.ffn.hidden(xs[layer]), atol=1e-6)
            assert torch.allclose(trace.outputs[layer], block.ffn(xs[layer]), atol=1e-6)
        assert torch.allclose(trace.logits, model(ids))


def test_find_ffns_keys_and_values_are_rows_and_columns():
    model = tiny()
    memories = find_ffns(model)
    assert memories.n_layers == 2
    ffn = model.blocks[1].ffn
    layer = memories.layer(1)
    assert torch.equal(layer.keys, ffn.w1.weight)               # key i = row i of W1
    assert torch.equal(layer.values[3], ffn.w2.weight[:, 3])    # value i = column i of W2
    assert torch.equal(layer.value_matrix, ffn.w2.weight)
    assert layer.d_ff == ffn.d_ff


@pytest.mark.parametrize("bad", [nn.Linear(3, 3), "gpt2", nn.Sequential()])
def test_find_ffns_rejects_models_without_ffns(bad):
    with pytest.raises(TypeError, match="model must expose its FFNs as model.blocks"):
        find_ffns(bad)


def test_find_ffns_names_a_block_without_the_course_ffn():
    model = TinyGPT(GPTConfig(vocab_size=VOCAB, d_model=16, n_heads=2), ffn_factory=lambda i: nn.Linear(16, 16))
    with pytest.raises(TypeError, match=r"model.blocks\[0\].ffn must be a helpers.ffn.FFN, got Linear"):
        find_ffns(model)


def test_layer_out_of_range():
    model = tiny()
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 1\], got 2"):
        value_logits(model, 2)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 1\], got -1"):
        memory.memory_coefficients(model, toy_ids(), -1)


def test_bad_ids():
    with pytest.raises(TypeError, match="ids must be a"):
        collect(tiny(), torch.zeros(2, 3))


def test_prefix_mask_needs_a_real_next_token():
    ids = torch.tensor([[1, 5, 6, 0, 0], [1, 5, 6, 7, 8]])
    assert prefix_mask(ids).tolist() == [[True, True, False, False, False], [True, True, True, True, False]]


def brute_force_triggers(c, valid, neuron, k):
    per_example = []
    for n in range(c.shape[0]):
        best = max((c[n, t, neuron].item(), t) for t in range(c.shape[1]) if valid[n, t])
        per_example.append((best[0], n, best[1]))
    per_example.sort(reverse=True)
    return [n for _, n, _ in per_example[:k]], [t for _, _, t in per_example[:k]]


def test_top_triggers_match_brute_force():
    g = torch.Generator().manual_seed(0)
    c = torch.randn(9, 5, 4, generator=g)
    valid = torch.rand(9, 5, generator=g) > 0.4
    valid[:, 0] = True
    everything = top_triggers(c, 4, valid)
    assert everything.examples.shape == (4, 4)
    for neuron in range(4):
        one = top_triggers(c, 4, valid, neuron=neuron)
        examples, positions = brute_force_triggers(c, valid, neuron, 4)
        assert one.examples.tolist() == examples and one.positions.tolist() == positions
        assert torch.equal(everything.examples[neuron], one.examples)
        assert (one.coefficients[:-1] >= one.coefficients[1:]).all()


def test_top_triggers_errors():
    c = torch.randn(5, 4, 3)
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 5\], got 6"):
        top_triggers(c, 6)
    with pytest.raises(ValueError, match=r"neuron must be an int in \[0, 2\], got 3"):
        top_triggers(c, 2, neuron=3)
    with pytest.raises(ValueError, match="valid must be a bool tensor of shape"):
        top_triggers(c, 2, torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="valid has a row with no True position"):
        top_triggers(c, 2, torch.zeros(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"coefficients must be \(N, T, d_ff\)"):
        top_triggers(torch.randn(5, 4, 3, 2), 2)
    with pytest.raises(TypeError, match="coefficients must have a floating-point dtype"):
        top_triggers(torch.ones(5, 4, 3, dtype=torch.long), 2)


def test_prefix_words_and_token_positions():
    ids = torch.tensor([[1, 5, 6, 7, 0], [1, 7, 5, 6, 0]])
    words = ["<pad>", "<bos>", "a", "b", "c", "the", "capital", "x"]
    assert prefix_words(ids, 0, 2, lambda i: [words[j] for j in i]) == "the capital"
    assert token_positions(ids, torch.tensor([7, 7])).tolist() == [3, 1]
    with pytest.raises(ValueError, match="row 1 of ids does not contain token 4"):
        token_positions(ids, torch.tensor([7, 4]))


def test_pattern_share():
    examples = torch.tensor([[0, 1, 2, 3], [0, 4, 5, 2]])
    labels = ["a", "a", "a", "b", "b", "c"]
    assert pattern_share(examples, labels).tolist() == [0.75, 0.5]
    with pytest.raises(ValueError, match="labels has only 6 entries"):
        pattern_share(torch.tensor([[0, 6]]), labels)


def test_value_logits_read_values_through_ln_f_and_lm_head():
    model = tiny()
    with torch.no_grad():
        expected = model.lm_head(model.ln_f(model.blocks[0].ffn.w2.weight[:, 5]))
    assert torch.allclose(value_logits(model, 0, 5)[0], expected)
    assert value_logits(model, 1).shape == (model.blocks[1].ffn.d_ff, VOCAB)
    assert torch.allclose(project_to_vocab(model, model.blocks[0].ffn.w2.weight[:, 5].detach()), expected)
    with pytest.raises(ValueError, match=r"neuron must be an int in \[0, 63\], got 64"):
        value_logits(model, 0, 64)
    with pytest.raises(ValueError, match=r"neurons must be in \[0, 63\] \(d_ff=64\), got 70"):
        value_logits(model, 0, [1, 70])


def test_agreement_matches_a_loop_over_neurons():
    model, ids = tiny(), toy_ids()
    valid = prefix_mask(ids)
    result = agreement(model, ids, 1, valid)
    c = collect(model, ids).coefficients[1]
    logits = value_logits(model, 1)
    for i in range(0, c.shape[2], 7):
        examples, positions = brute_force_triggers(c, valid, i, 1)
        nxt = ids[examples[0], positions[0] + 1]
        assert int(result.next_tokens[i]) == int(nxt)
        assert int(result.ranks[i]) == int((logits[i] > logits[i, nxt]).sum()) + 1
    assert result.rate == pytest.approx((result.ranks == 1).float().mean().item())
    assert result.chance == pytest.approx(1 / VOCAB)
    assert torch.equal(result.top_tokens, logits.argmax(1))


def test_agreement_needs_a_next_token():
    model, ids = tiny(), toy_ids()
    with pytest.raises(ValueError, match="no next token"):
        agreement(model, ids, 0, torch.ones_like(ids, dtype=torch.bool))


def test_sub_updates_add_up_to_the_ffn_output():
    model, ids = tiny("swiglu"), toy_ids()
    su = sub_updates(model, ids, 1, position=3, example=2)
    assert torch.allclose(su.vectors.sum(0) + su.bias, su.output, atol=1e-5)
    assert (su.scores[su.order][:-1] >= su.scores[su.order][1:]).all()
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 6\], got 7"):
        sub_updates(model, ids, 1, position=7)
    with pytest.raises(ValueError, match=r"example must be an int in \[0, 5\], got 6"):
        sub_updates(model, ids, 1, position=0, example=6)


def test_knock_out_all_neurons_leaves_the_bias_and_restores_afterwards():
    model, ids = tiny(), toy_ids()
    d_ff = model.blocks[0].ffn.d_ff
    before = collect(model, ids)
    with knock_out(model, 0, list(range(d_ff))):
        silenced = collect(model, ids)
    bias = model.blocks[0].ffn.w2.bias.detach()
    assert torch.allclose(silenced.outputs[0], bias.expand_as(silenced.outputs[0]))
    assert torch.equal(collect(model, ids).logits, before.logits)      # the hook is gone


def test_knock_out_with_a_mask_per_row():
    model, ids = tiny(), toy_ids()
    d_ff = model.blocks[1].ffn.d_ff
    mask = torch.zeros(ids.shape[0], d_ff, dtype=torch.bool)
    mask[2, :10] = True
    with knock_out(model, 1, mask):
        masked = collect(model, ids).logits
    with knock_out(model, 1, list(range(10))):
        row_two = collect(model, ids[2:3]).logits
    unchanged = collect(model, ids).logits
    assert torch.allclose(masked[2], row_two[0], atol=1e-6)
    assert torch.allclose(masked[[0, 1, 3, 4, 5]], unchanged[[0, 1, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"a bool neurons mask must have shape \(N, d_ff=64\)"):
        with knock_out(model, 1, torch.zeros(3, 5, dtype=torch.bool)):
            pass
    with pytest.raises(ValueError, match=r"neurons must be in \[0, 63\]"):
        with knock_out(model, 1, [64]):
            pass


def test_answer_probability():
    model, ids = tiny(), toy_ids()
    pos, ans = torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([2, 3, 4, 5, 6, 7])
    with torch.no_grad():
        probs = model(ids).softmax(-1)
    expected = probs[torch.arange(6), pos, ans]
    assert torch.allclose(answer_probability(model, ids, pos, ans), expected)


def test_load_gpt2_without_transformers_says_why(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    model, tokenizer, why = memory.load_gpt2()
    assert model is None and tokenizer is None and "not installed" in why


def test_top_triggers_keep_exact_ties_in_row_order():
    """A saturated neuron gives many examples the same peak: which ten are "top" must not depend on the
    sorting algorithm (a stable sort keeps them in row order)."""
    c = torch.zeros(12, 3, 2)
    c[:, 1, 0] = 2.0                  # neuron 0: every example peaks at exactly 2.0
    c[5, 1, 0] = 3.0
    trig = top_triggers(c, 4, neuron=0)
    assert trig.examples.tolist() == [5, 0, 1, 2] and trig.positions.tolist() == [1, 1, 1, 1]


def test_peak_coefficients_mask_with_minus_infinity():
    c = torch.tensor([[[-0.1], [5.0], [-0.05]], [[0.3], [-0.2], [4.0]]])      # (2, 3, 1)
    valid = torch.tensor([[True, False, True], [True, True, False]])
    assert torch.allclose(peak_coefficients(c, valid)[:, 0], torch.tensor([-0.05, 0.3]))
    assert torch.allclose(peak_coefficients(c)[:, 0], torch.tensor([5.0, 4.0]))
    with pytest.raises(ValueError, match="valid has a row with no True position"):
        peak_coefficients(c, torch.zeros(2, 3, dtype=torch.bool))


def test_group_profile_is_the_mean_per_group_in_order_of_first_appearance():
    peaks = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0], [-1.0, 6.0]])
    profile, names = group_profile(peaks, ["b", "a", "b", "b"])
    assert names == ["b", "a"]
    assert torch.allclose(profile, torch.tensor([[5 / 3, 3.0], [10 / 3, 2.0]]))
    with pytest.raises(ValueError, match="one label per row"):
        group_profile(peaks, ["a", "b"])


def test_project_to_vocab_without_biases_leaves_out_exactly_the_shared_terms():
    model = tiny()
    with torch.no_grad():
        model.ln_f.bias.copy_(torch.randn(16, generator=torch.Generator().manual_seed(0)))
        model.ln_f.weight.mul_(1.5)
        v = model.blocks[0].ffn.w2.weight[:, 3].detach()
        full = project_to_vocab(model, v)
        bare = project_to_vocab(model, v, biases=False)
        z = (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + model.ln_f.eps)
        assert torch.allclose(bare, (model.ln_f.weight * z) @ model.lm_head.weight.T, atol=1e-5)
        assert torch.allclose(full - bare, model.lm_head(model.ln_f.bias), atol=1e-5)   # W_U β, the same for all
    assert torch.allclose(value_logits(model, 0, 3, biases=False)[0], bare)
    a_full = agreement(model, toy_ids(), 0, prefix_mask(toy_ids()))
    a_bare = agreement(model, toy_ids(), 0, prefix_mask(toy_ids()), biases=False)
    assert torch.equal(a_bare.top_tokens, value_logits(model, 0, biases=False).argmax(1))
    assert torch.equal(a_full.next_tokens, a_bare.next_tokens)        # the triggers do not depend on the read-out


def test_project_to_vocab_without_biases_drops_an_unembedding_bias_too():
    model = tiny()
    model.lm_head = nn.Linear(16, VOCAB, bias=True)
    v = torch.randn(16)
    with torch.no_grad():
        assert torch.allclose(project_to_vocab(model, v) - project_to_vocab(model, v, biases=False),
                              model.lm_head(model.ln_f.bias), atol=1e-5)


# --------------------------------------------------------------------------------------------
# Notebook 03's shipped models
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def facts_data():
    return make_dataset(load_facts())


@pytest.mark.parametrize("seed", [0, 1])
def test_shipped_checkpoint_loads_into_the_notebook_config_and_knows_every_fact(facts_data, seed):
    path = fact_model_path(seed)
    assert path.is_file() and path.stat().st_size < 600_000, "a small float32 checkpoint ships in helpers/data"
    model, losses = load_fact_model(facts_data, seed=seed)
    assert model.config == fact_model_config(facts_data)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert len(losses) == FACT_MODEL["steps"] and losses[-1] < 1.1
    assert answer_accuracy(model, facts_data.ids, facts_data.answer_pos, facts_data.answer_id) == 1.0
    assert not model.training


def test_shipped_checkpoint_was_trained_from_the_untrained_model(facts_data):
    """The recorded first loss is the untrained model's loss: the checkpoint and untrained_fact_model agree."""
    _, losses = load_fact_model(facts_data)
    untrained = untrained_fact_model(facts_data)
    with torch.no_grad():
        logits = untrained(facts_data.ids)
        first = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                  facts_data.targets.reshape(-1), ignore_index=-100)
    assert first.item() == pytest.approx(losses[0], abs=1e-4)


def test_untrained_fact_model_is_seeded_and_leaves_the_global_generator_alone(facts_data):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = untrained_fact_model(facts_data, seed=0), untrained_fact_model(facts_data, seed=0)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = untrained_fact_model(facts_data, seed=1)
    assert not torch.equal(a.blocks[0].ffn.w1.weight, c.blocks[0].ffn.w1.weight)


def test_load_fact_model_refuses_another_vocabulary_or_a_missing_file(facts_data, tmp_path):
    model, losses = load_fact_model(facts_data)
    path = save_fact_model(model, losses, facts_data, tmp_path / "copy.pt", seed=0)
    reloaded, _ = load_fact_model(facts_data, path=path)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    fewer = make_dataset(load_facts(relations=["capital"]))
    with pytest.raises(ValueError, match="trained on another vocabulary"):
        load_fact_model(fewer, path=path)
    with pytest.raises(FileNotFoundError, match="python -m helpers.memory --make-checkpoint --seed 7"):
        load_fact_model(facts_data, seed=7)


def test_neuron_explorer_shows_what_the_helpers_compute(facts_data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = facts_data
    model, _ = load_fact_model(data)
    facts = data.facts
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in facts]))
    valid = prefix_mask(data.ids) & (torch.arange(data.ids.shape[1]) >= subject_pos[:, None])
    explorer = NeuronExplorer(model, data.ids, valid, data.answer_pos, data.answer_id, data.vocab.tokens,
                              [f.relation for f in facts], [f.subject for f in facts], k=5, n_facts=4)
    assert explorer.group_names == list(RELATIONS)
    trace = collect(model, data.ids)
    profile, _ = group_profile(peak_coefficients(trace.coefficients[1], valid), [f.relation for f in facts])
    assert torch.allclose(explorer.profiles[1], profile)
    assert torch.equal(explorer.triggers[0].examples, top_triggers(trace.coefficients[0], 5, valid).examples)
    rows, before, after = explorer.knock_out_effect(1, 151)
    with knock_out(model, 1, [151]):
        expected = answer_probability(model, data.ids[rows], data.answer_pos[rows], data.answer_id[rows])
    assert torch.allclose(after, expected) and len(rows) == 4
    assert torch.equal(before, answer_probability(model, data.ids[rows], data.answer_pos[rows],
                                                  data.answer_id[rows]))
    fig = explorer.figure(0, 191)
    assert len(fig.axes) == 4 and "Layer 0, neuron 191" in fig.texts[0].get_text()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"neuron must be an int in \[0, 191\], got 192"):
        explorer.figure(1, 192)


# --------------------------------------------------------------------------------------------
# The same functions on a (randomly initialised, small) Hugging Face GPT-2
# --------------------------------------------------------------------------------------------


@pytest.fixture
def gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=3, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_layout_and_coefficients(gpt2):
    memories = find_ffns(gpt2)
    assert memories.n_layers == 3
    mlp = gpt2.transformer.h[1].mlp
    assert torch.equal(memories.layer(1).keys, mlp.c_fc.weight.T)       # Conv1D stores (in, out)
    assert torch.equal(memories.layer(1).values, mlp.c_proj.weight)
    ids = torch.randint(0, 50, (3, 6), generator=torch.Generator().manual_seed(0))
    captured = {}
    handle = mlp.register_forward_hook(lambda m, i, o: captured.update(x=i[0], out=o))
    trace = collect(gpt2, ids)
    handle.remove()
    with torch.no_grad():
        assert torch.allclose(trace.coefficients[1], mlp.act(mlp.c_fc(captured["x"])), atol=1e-6)
    assert trace.logits.shape == (3, 6, 50)


def test_gpt2_values_sub_updates_triggers_and_knock_out(gpt2):
    ids = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(1))
    logits = value_logits(gpt2, 2, [0, 5])
    with torch.no_grad():
        expected = gpt2.lm_head(gpt2.transformer.ln_f(gpt2.transformer.h[2].mlp.c_proj.weight[5]))
    assert torch.allclose(logits[1], expected)
    su = sub_updates(gpt2, ids, 0, position=4, example=1)
    assert torch.allclose(su.vectors.sum(0) + su.bias, su.output, atol=1e-5)
    c = collect(gpt2, ids).coefficients[2]
    assert top_triggers(c, 3, prefix_mask(ids, pad_id=-1)).examples.shape == (128, 3)
    rate = agreement(gpt2, ids, 2, prefix_mask(ids, pad_id=-1)).rate
    assert 0.0 <= rate <= 1.0
    base = answer_probability(gpt2, ids, torch.full((4,), 3), torch.tensor([1, 2, 3, 4]))
    with knock_out(gpt2, 1, list(range(128))):
        silenced = answer_probability(gpt2, ids, torch.full((4,), 3), torch.tensor([1, 2, 3, 4]))
    assert not torch.allclose(base, silenced)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\], got 3"):
        value_logits(gpt2, 3)


def test_gpt2_rank_one_edit(gpt2):
    from helpers.editing import edited, key_second_moment, rank_one_update

    ids = torch.randint(0, 50, (8, 6), generator=torch.Generator().manual_seed(2))
    keys = collect(gpt2, ids).coefficients[1]
    C = key_second_moment(keys.reshape(-1, keys.shape[-1]), ridge=1e-2)
    k_star = keys[0, 3]
    layer = find_ffns(gpt2).layer(1)
    W = layer.value_matrix.detach().clone()
    v_star = torch.randn(W.shape[0], generator=torch.Generator().manual_seed(3))
    W_hat = rank_one_update(W, C, k_star, v_star)
    with edited(gpt2, 1, W_hat):
        out = collect(gpt2, ids[:1]).outputs[1][0, 3]
    assert torch.allclose(out, v_star + layer.value_bias.detach(), atol=1e-4)
    assert torch.equal(layer.value_matrix, W)                          # restored
