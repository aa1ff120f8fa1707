"""helpers.editing: ROME's rank-one update, the exact choice of δ, and the edit metrics."""
import pytest
import torch

from helpers.editing import (EditPrompts, edit_effects, edit_outcomes, edit_prompts, edit_scales, edited,
                             key_second_moment, mean_keys, optimise_deltas, predictions, rank_one_update, rome_edits)
from helpers.memory import collect, find_ffns
from helpers.transformer import GPTConfig, TinyGPT

VOCAB = 13


def tiny(seed=0):
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_len=8)).eval()


def toy_ids(n=8, t=6, seed=1):
    return torch.randint(1, VOCAB, (n, t), generator=torch.Generator().manual_seed(seed))


def problem(seed=0, d_out=5, d_in=9, n_edits=None):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    keys = torch.randn(50, d_in, generator=g, dtype=torch.float64) + 0.3
    C = keys.T @ keys / 50
    shape = (d_in,) if n_edits is None else (n_edits, d_in)
    k = torch.randn(*shape, generator=g, dtype=torch.float64)
    v = torch.randn(*shape[:-1], d_out, generator=g, dtype=torch.float64)
    return W, C, k, v, keys


def test_key_second_moment():
    keys = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    C = key_second_moment(keys, ridge=0.0)
    assert torch.allclose(C, keys.T @ keys / 40, atol=1e-5)
    C_reg = key_second_moment(keys[:3], ridge=1e-2)      # 3 keys in 6 dimensions: singular without the ridge
    assert torch.linalg.matrix_rank(key_second_moment(keys[:3], ridge=0.0)) == 3
    assert torch.linalg.eigvalsh(C_reg).min() > 0
    with pytest.raises(ValueError, match="ridge must be a non-negative number, got -1"):
        key_second_moment(keys, ridge=-1)
    with pytest.raises(ValueError, match=r"keys must be \(M, d_ff\)"):
        key_second_moment(torch.randn(2, 3, 4))


def test_rank_one_update_stores_the_new_value_exactly():
    W, C, k, v, keys = problem()
    W_hat = rank_one_update(W, C, k, v)
    assert torch.allclose(W_hat @ k, v, atol=1e-10)
    assert torch.linalg.matrix_rank(W_hat - W) == 1
    # any other key receives (v* − W k*)·α(k)
    other = keys[0]
    alpha = edit_scales(C, k[None], other[None])[0]
    assert torch.allclose((W_hat - W) @ other, (v - W @ k) * alpha, atol=1e-10)
    assert torch.allclose(edit_scales(C, k[None], k[None])[0], torch.tensor(1.0, dtype=torch.float64))


def test_rank_one_update_is_minimal_in_the_metric_of_C():
    """Among updates with Ŵk* = v*, ROME's minimises E||ΔW k||² = tr(ΔW C ΔWᵀ)."""
    W, C, k, v, _ = problem(seed=3)
    delta = rank_one_update(W, C, k, v) - W
    cost = torch.trace(delta @ C @ delta.T)
    g = torch.Generator().manual_seed(4)
    for _ in range(5):   # perturb within the constraint: add N with N k* = 0
        N = torch.randn(*delta.shape, generator=g, dtype=torch.float64)
        N = N - torch.outer(N @ k, k) / (k @ k)
        assert torch.trace((delta + 0.1 * N) @ C @ (delta + 0.1 * N).T) >= cost


def test_rank_one_update_batched_equals_one_at_a_time():
    W, C, k, v, _ = problem(n_edits=4)
    batched = rank_one_update(W, C, k, v)
    assert batched.shape == (4, 5, 9)
    for e in range(4):
        assert torch.allclose(batched[e], rank_one_update(W, C, k[e], v[e]))


def test_rank_one_update_errors():
    W, C, k, v, _ = problem()
    with pytest.raises(ValueError, match="k_star must have last dimension d_in=9"):
        rank_one_update(W, C, k[:3], v)
    with pytest.raises(ValueError, match="v_star must have last dimension d_out=5"):
        rank_one_update(W, C, k, v[:2])
    with pytest.raises(ValueError, match="the same number of edits"):
        rank_one_update(W, C, k.expand(3, -1), v.expand(2, -1))
    with pytest.raises(TypeError, match="W must be a torch.Tensor"):
        rank_one_update(W.numpy(), C, k, v)


def test_edited_applies_and_restores():
    model = tiny()
    W = find_ffns(model).layer(0).value_matrix
    saved = W.detach().clone()
    with edited(model, 0, torch.zeros_like(saved)):
        assert W.abs().sum() == 0
    assert torch.equal(W, saved)
    with pytest.raises(ValueError, match=r"W_hat must have the shape of W2, \(16, 64\)"):
        with edited(model, 0, torch.zeros(3, 3)):
            pass


def test_optimise_deltas_sees_exactly_what_the_edit_does():
    """The model with α·δ added to layer 0's output equals the model with the rank-one edit applied."""
    model, ids = tiny(), toy_ids()
    keys = collect(model, ids).coefficients[0]
    C = key_second_moment(keys.reshape(-1, keys.shape[-1]), ridge=1e-2)
    answer_pos = torch.full((8,), 4)
    edit_rows, new_ids = torch.tensor([0, 3]), torch.tensor([5, 7])
    k_stars = keys[edit_rows, 4]                  # edit where the answer is read, so one layer-0 change suffices
    prompts = edit_prompts(ids, answer_pos, keys, C, k_stars, edit_rows, new_ids)
    deltas = optimise_deltas(model, 0, prompts, n_edits=2, steps=60, lr=0.3)
    W = find_ffns(model).layer(0).value_matrix.detach()
    W_hats = rank_one_update(W, C, k_stars, k_stars @ W.T + deltas)
    for e in range(2):
        with edited(model, 0, W_hats[e]):
            pred = predictions(model, ids[edit_rows[e]:edit_rows[e] + 1], answer_pos[:1])
        assert int(pred) == int(new_ids[e])
    # exactness: logits of the edited model == logits with the α-scaled δ injected
    ffn = model.blocks[0].ffn
    scales = prompts.scales[0]
    handle = ffn.register_forward_hook(lambda m, i, o: o + scales[None, :, None] * deltas[0])
    with torch.no_grad():
        injected = model(ids[:1])
    handle.remove()
    with edited(model, 0, W_hats[0]), torch.no_grad():
        real = model(ids[:1])
    assert torch.allclose(injected, real, atol=1e-4)
    assert all(p.requires_grad for p in model.parameters())        # left as it was


def test_keep_term_and_outcomes():
    model, ids = tiny(), toy_ids()
    keys = collect(model, ids).coefficients[0]
    C = key_second_moment(keys.reshape(-1, keys.shape[-1]), ridge=1e-2)
    answer_pos = torch.full((8,), 4)
    before = predictions(model, ids, answer_pos)
    edit_rows = torch.tensor([0])
    new_id = torch.tensor([(int(before[0]) + 1) % VOCAB])
    k_star = keys[edit_rows, 2]
    prompts = edit_prompts(ids, answer_pos, keys, C, k_star, edit_rows, new_id,
                           keep_rows=[torch.tensor([1, 2])], keep_ids=before, keep_weight=2.0)
    assert prompts.ids.shape == (3, 6) and prompts.weight.tolist() == [1.0, 2.0, 2.0]
    assert prompts.target.tolist() == [int(new_id), int(before[1]), int(before[2])]
    W = find_ffns(model).layer(0).value_matrix.detach()
    subject = torch.tensor([0, 0, 0, 1, 1, 2, 2, 3])
    unchanged = edit_outcomes(model, 0, W[None].clone(), ids, answer_pos, edit_rows, new_id, subject)[0]
    assert (unchanged.success, unchanged.kept_other_subjects, unchanged.kept_same_subject) == (False, 1.0, 1.0)
    with pytest.raises(ValueError, match="keep_rows needs one entry per edit"):
        edit_prompts(ids, answer_pos, keys, C, k_star, edit_rows, new_id, keep_rows=[torch.tensor([1])])
    with pytest.raises(ValueError, match="the same number of edits"):
        edit_prompts(ids, answer_pos, keys, C, keys[:2, 2], edit_rows, new_id)


def test_mean_keys_averages_each_edit_over_its_prompts():
    keys = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([1, 2, 0, 4])
    rows = torch.tensor([[True, False, True, False], [False, False, False, True]])
    k = mean_keys(keys, rows, positions)
    assert torch.allclose(k[0], (keys[0, 1] + keys[2, 0]) / 2) and torch.allclose(k[1], keys[3, 4])
    with pytest.raises(ValueError, match="at least one row per edit"):
        mean_keys(keys, torch.zeros(1, 4, dtype=torch.bool), positions)


def test_rome_edits_are_the_steps_of_the_docstring_and_edit_effects_measure_them():
    model, ids = tiny(), toy_ids()
    keys = collect(model, ids).coefficients[0]
    C = key_second_moment(keys.reshape(-1, keys.shape[-1]), ridge=1e-2)
    answer_pos = torch.full((8,), 4)
    before = predictions(model, ids, answer_pos)
    edit_rows, k_stars = torch.tensor([0, 3]), keys[[0, 3], 2]
    new_ids = (before[edit_rows] + 1) % VOCAB
    keep = torch.zeros(2, 8, dtype=torch.bool)
    keep[0, 1] = keep[1, 4] = True
    W_hats = rome_edits(model, 0, keys, C, k_stars, ids, answer_pos, edit_rows, new_ids, keep_rows=keep,
                        keep_ids=before, steps=5)
    prompts = edit_prompts(ids, answer_pos, keys, C, k_stars, edit_rows, new_ids,
                           keep_rows=[torch.tensor([1]), torch.tensor([4])], keep_ids=before)
    deltas = optimise_deltas(model, 0, prompts, n_edits=2, steps=5, lr=0.5, l2=3e-3)
    W = find_ffns(model).layer(0).value_matrix.detach()
    assert torch.allclose(W_hats, rank_one_update(W, C, k_stars, k_stars @ W.T + deltas), atol=1e-6)
    fx = edit_effects(model, 0, W_hats, ids, answer_pos, edit_rows, new_ids)
    old = edit_outcomes(model, 0, W_hats, ids, answer_pos, edit_rows, new_ids, torch.arange(8))
    assert fx.success.tolist() == [o.success for o in old]
    others = torch.arange(8)[None, :] != edit_rows[:, None]
    assert torch.allclose(fx.kept(others), torch.tensor([o.kept_other_subjects for o in old]))
    only = edit_effects(model, 0, W_hats, ids, answer_pos, edit_rows, new_ids, rows=edit_rows[:0])
    assert torch.equal(only.success, fx.success) and only.unchanged.shape == (2, 0)


def test_optimise_deltas_errors():
    model, ids = tiny(), toy_ids()
    prompts = EditPrompts(ids[:1], torch.tensor([1]), torch.tensor([3]), torch.tensor([2]), torch.tensor([1.0]),
                          torch.ones(1, 6))
    with pytest.raises(ValueError, match=r"prompts.edit must hold edit numbers in \[0, 0\]"):
        optimise_deltas(model, 0, prompts, n_edits=1)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 1\], got 5"):
        optimise_deltas(model, 5, prompts, n_edits=2)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        optimise_deltas(model, 0, prompts, n_edits=2, steps=0)


@pytest.fixture
def gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=3, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


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


def test_template_ids_builds_held_out_prompts():
    from helpers.editing import template_ids
    from helpers.facts import Vocab
    vocab = Vocab(["<pad>", "<bos>", "the", "capital", "of", "is", "official", "france", "italy"])
    ids = template_ids(vocab, ["france", "italy"], "the official capital of {} is")
    assert ids.tolist() == [[1, 2, 6, 3, 4, 7, 5], [1, 2, 6, 3, 4, 8, 5]]
    with pytest.raises(ValueError, match="'city'"):
        template_ids(vocab, ["france"], "the capital city of {} is")


def test_preferences_read_the_last_position_before_and_after_each_edit():
    from helpers.editing import preferences
    model, ids = tiny(), toy_ids(n=5, t=5)
    W = find_ffns(model).layer(0).value_matrix.detach()
    true_ids = torch.tensor([1, 2, 3, 4, 5])
    new_ids, edited_subjects = torch.tensor([7, 8]), torch.tensor([0, 3])
    W_hats = torch.stack([W, W + 0.5 * torch.randn(W.shape, generator=torch.Generator().manual_seed(0))])
    p = preferences(model, 0, W_hats, ids, true_ids, edited_subjects, new_ids)
    with torch.no_grad():
        base = model(ids)[:, -1]
        with edited(model, 0, W_hats[1]):
            late = model(ids)[:, -1]
    beats = lambda lg, new: lg[:, new] > lg[torch.arange(5), true_ids]      # noqa: E731
    assert p.edited_before.tolist() == [bool(beats(base, 7)[0]), bool(beats(base, 8)[3])]
    assert torch.equal(p.edited_before[:1], p.edited_after[:1])              # W_hats[0] is no edit
    assert bool(p.edited_after[1]) == bool(beats(late, 8)[3])
    others = torch.arange(5) != 3
    assert p.untouched_after[1].item() == pytest.approx(beats(late, 8)[others].float().mean().item())
    assert p.untouched_before[0].item() == pytest.approx(beats(base, 7)[1:].float().mean().item())
