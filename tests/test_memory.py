"""helpers.memory: the key-value reading of an FFN (keys, values, agreement), checked against brute force,
plus its error messages. Interventions are tested in test_interventions.py, the shipped models in
test_fact_model.py, the explorer in test_explorer.py."""
import pytest
import torch
from torch import nn

from helpers import memory
from helpers.memory import (agreement, answer_probability, collect, find_ffns, group_profile, mismatched_agreement,
                            pattern_neuron_share, pattern_share, peak_coefficients, prefix_mask, prefix_words, project_to_vocab,
                            token_positions, top_triggers, value_logits)
from helpers.transformer import GPTConfig, TinyGPT

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


def test_answer_probability():
    model, ids = tiny(), toy_ids()
    pos, ans = torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([2, 3, 4, 5, 6, 7])
    with torch.no_grad():
        probs = model(ids).softmax(-1)
    expected = probs[torch.arange(6), pos, ans]
    assert torch.allclose(answer_probability(model, ids, pos, ans), expected)


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


def test_mismatched_agreement_counts_every_pair_but_the_own_one():
    model, ids = tiny(), toy_ids()
    valid = prefix_mask(ids)
    a = agreement(model, ids, 1, valid, biases=False)
    top = value_logits(model, 1, biases=False).argmax(1)
    n = top.shape[0]
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    expected = sum(int(top[i] == a.next_tokens[j]) for i, j in pairs) / len(pairs)
    assert mismatched_agreement(model, 1, a, biases=False) == pytest.approx(expected)


def test_mismatched_agreement_of_a_layer_whose_values_all_name_one_token():
    """When every value's top token is the token after every trigger, the baseline is 1, like the rate."""
    model = tiny()
    ids = torch.tensor([[1, 4, 7, 0], [1, 5, 7, 0]])
    valid = torch.tensor([[False, True, False, False], [False, True, False, False]])   # every trigger -> 7
    with torch.no_grad():                                 # β dominates every full read-out and names token 7
        model.ln_f.bias.fill_(100.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[7] = 1.0
    a = agreement(model, ids, 1, valid)
    assert (a.next_tokens == 7).all()
    assert mismatched_agreement(model, 1, a) == pytest.approx(a.rate)


# --------------------------------------------------------------------------------------------
# The same readings on a (randomly initialised, small) Hugging Face GPT-2
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


def test_gpt2_values_triggers_and_agreement(gpt2):
    ids = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(1))
    logits = value_logits(gpt2, 2, [0, 5])
    with torch.no_grad():
        expected = gpt2.lm_head(gpt2.transformer.ln_f(gpt2.transformer.h[2].mlp.c_proj.weight[5]))
    assert torch.allclose(logits[1], expected)
    c = collect(gpt2, ids).coefficients[2]
    assert top_triggers(c, 3, prefix_mask(ids, pad_id=-1)).examples.shape == (128, 3)
    a = agreement(gpt2, ids, 2, prefix_mask(ids, pad_id=-1))
    assert 0.0 <= a.rate <= 1.0 and 0.0 <= mismatched_agreement(gpt2, 2, a) <= 1.0
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\], got 3"):
        value_logits(gpt2, 3)


def test_pattern_neuron_share_counts_neurons_whose_top_triggers_share_a_label():
    g = torch.Generator().manual_seed(4)
    coefficients = torch.randn(12, 3, 5, generator=g)
    labels = ["a"] * 6 + ["b"] * 6
    examples = top_triggers(coefficients, 4, None).examples                            # (5, 4)
    expected = (pattern_share(examples, labels) >= 0.75).float().mean().item()         # 3 of 4 share a label
    assert pattern_neuron_share(coefficients, None, labels, k=4, threshold=0.75) == expected
    coefficients[:6, :, 0] += 10.0                                                     # neuron 0: all four are "a"
    assert pattern_neuron_share(coefficients[..., :1], None, labels, k=4, threshold=1.0) == 1.0


def test_oriented_gives_each_direction_its_largest_excursion_positive():
    c = torch.tensor([[[3.0, -1.0], [-5.0, 0.5]], [[0.0, 2.0], [9.0, -4.0]]])      # (N=2, T=2, d=2)
    valid = torch.tensor([[True, True], [True, False]])                          # hides 9 and -4
    q = memory.oriented(c, torch.eye(2), valid)
    assert q.tolist() == [[-1.0, 0.0], [0.0, 1.0]]          # column 0's peak is -5 (flipped); column 1's is 2
    assert memory.oriented(c, torch.eye(2), None).tolist() == [[1.0, 0.0], [0.0, -1.0]]    # 9 and -4 count
    m = memory.random_orthonormal(2, torch.Generator().manual_seed(0))
    r = memory.oriented(c, m, valid)
    assert torch.equal(r.abs(), m.abs())
    projected = (c @ r)[valid]
    assert (projected.amax(0) >= -projected.amin(0)).all()


def test_rotated_agreement_in_the_identity_basis_is_the_agreement_rate():
    model, ids = tiny(), toy_ids()
    valid = prefix_mask(ids)
    c = collect(model, ids).coefficients[1]
    d_ff = c.shape[-1]
    same = memory.rotated_agreement(model, ids, 1, valid, c, torch.eye(d_ff), biases=False)
    assert same == pytest.approx(agreement(model, ids, 1, valid, c, biases=False).rate)
    q = memory.random_orthonormal(d_ff, torch.Generator().manual_seed(0))
    assert torch.allclose(q.T @ q, torch.eye(d_ff), atol=1e-5)
    rate = memory.rotated_agreement(model, ids, 1, valid, c, q, biases=False)
    assert 0.0 <= rate <= 1.0
    with pytest.raises(ValueError, match="basis must be"):
        memory.rotated_agreement(model, ids, 1, valid, c, torch.eye(d_ff - 1))
