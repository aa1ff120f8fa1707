"""helpers.dictionary (TopK transcoders, their training and metrics) and helpers.superposition (the toy model)."""
import copy

import pytest
import torch

from helpers.dictionary import (TopKDictionary, answer_scores, distinct_prefixes, fact_labels, fact_prefixes, ffn_io,
                                firing_counts, firing_label_share, strongest_label_share, fvu, held_out_split, l0, level_table, random_dictionary,
                                replaced_ffn, top_label_share, topk_codes, tracking_rates, train_dictionaries,
                                without_features)
from helpers.facts import load_facts, make_dataset
from helpers.fact_model import fact_model_config
from helpers.memory import collect, find_ffns, prefix_mask
from helpers.superposition import (best_cosines, dimensions_per_feature, feature_norms, interference,
                                   random_cosine_median, toy_hidden, train_toy_models)
from helpers.transformer import TinyGPT


@pytest.fixture(scope="module")
def facts_and_model():
    data = make_dataset(load_facts())
    torch.manual_seed(0)
    return data, TinyGPT(fact_model_config(data)).eval()


# ---------------------------------------------------------------- the TopK activation and the module
def _by_stable_sort(pre, k):
    idx = pre.sort(dim=-1, descending=True, stable=True).indices[..., :k]
    keep = torch.zeros_like(pre, dtype=torch.bool).scatter(-1, idx, True)
    return torch.where(keep, pre.relu(), 0.0)


def test_topk_codes_keeps_the_k_largest_lower_index_first_among_ties():
    gen = torch.Generator().manual_seed(0)
    for shape, k in [((5, 9), 3), ((2, 3, 7), 1), ((4, 6), 6), ((1, 1), 1)]:
        pre = torch.randn(shape, generator=gen)
        torch.testing.assert_close(topk_codes(pre, k), _by_stable_sort(pre, k), rtol=0, atol=0)
    ties = torch.randint(0, 3, (50, 10), generator=gen).float() - 0.5
    for k in (1, 2, 5, 10):
        assert torch.equal(topk_codes(ties, k), _by_stable_sort(ties, k)), k
    assert torch.equal(topk_codes(torch.full((2, 4), 2.0), 2), torch.tensor([[2.0, 2, 0, 0], [2.0, 2, 0, 0]]))


def test_topk_codes_gradient_reaches_only_kept_positive_entries():
    pre = torch.tensor([[3.0, -1.0, 2.0, 0.5, -4.0]], requires_grad=True)
    topk_codes(pre, 3).sum().backward()
    assert pre.grad.tolist() == [[1.0, 0.0, 1.0, 1.0, 0.0]]
    with pytest.raises(ValueError):
        topk_codes(pre, 6)


def test_dictionary_module_shapes_and_layout():
    W_enc, b_enc = torch.randn(12, 5), torch.randn(12)
    W_dec, b_dec = torch.randn(3, 12), torch.randn(3)
    d = TopKDictionary(W_enc, b_enc, W_dec, b_dec, 4)
    x = torch.randn(2, 7, 5)
    codes = d.encode(x)
    assert codes.shape == (2, 7, 12) and ((codes != 0).sum(-1) <= 4).all()
    torch.testing.assert_close(d(x), codes @ W_dec.T + b_dec)
    torch.testing.assert_close(codes, topk_codes(x @ W_enc.T + b_enc, 4))
    with pytest.raises(ValueError):
        TopKDictionary(W_enc, b_enc, W_dec.T, b_dec, 4)


# ---------------------------------------------------------------- training and metrics
def _sparse_problem(n=300, d_in=10, d_out=6, n_true=20, seed=0):
    """y is a sum of 2 of n_true output directions, chosen by which of n_true input directions x is near."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.nn.functional.normalize(torch.randn(n_true, d_in, generator=gen), dim=1)
    values = torch.randn(d_out, n_true, generator=gen)
    which = torch.stack([torch.randperm(n_true, generator=gen)[:2] for _ in range(n)])
    codes = torch.zeros(n, n_true).scatter(1, which, 1.0 + torch.rand(n, 2, generator=gen))
    return codes @ keys, codes @ values.T


def test_training_reconstructs_a_sparse_map_and_is_deterministic():
    x, y = _sparse_problem()
    first = train_dictionaries(x, y, 40, 2, [0, 1], steps=150, batch_size=64, progress=False)
    again = train_dictionaries(x, y, 40, 2, [0, 1], steps=150, batch_size=64, progress=False)
    for a, b in zip(first, again):
        torch.testing.assert_close(a.W_enc, b.W_enc, rtol=0, atol=0)
    with torch.no_grad():
        start = fvu(y, random_dictionary(x, y, 40, 2, 0)(x))
        trained = [fvu(y, d(x)) for d in first]
    assert max(trained) < 0.35 < 1.0 < start, (trained, start)
    assert all(torch.allclose(d.W_dec.norm(dim=0), torch.ones(40)) for d in first)


def test_the_data_start_remembers_one_example_per_feature_and_beats_the_random_start():
    x, y = _sparse_problem()
    start = train_dictionaries(x, y, 40, 2, [0], steps=1, lr=1e-12, progress=False)[0]    # (almost) untrained
    keys = torch.nn.functional.normalize(x, dim=1)
    values = torch.nn.functional.normalize(y, dim=1)
    assert ((start.W_enc @ keys.T).max(1).values > 1 - 1e-5).all()          # every key is some x_r / ‖x_r‖
    assert ((start.W_dec.T @ values.T).max(1).values > 1 - 1e-5).all()      # every value is some y_r / ‖y_r‖
    assert start.b_enc.abs().max() < 1e-6 and start.b_dec.abs().max() < 1e-6
    with torch.no_grad():
        data = [fvu(y, d(x)) for d in train_dictionaries(x, y, 40, 2, [0, 1, 2], steps=150, progress=False)]
        rand = [fvu(y, d(x)) for d in train_dictionaries(x, y, 40, 2, [0, 1, 2], steps=150, start="random",
                                                             progress=False)]
    assert sum(data) < sum(rand), (data, rand)
    with pytest.raises(ValueError):
        train_dictionaries(x, y, 40, 2, [0], steps=1, start="zeros", progress=False)


def test_one_data_set_per_seed_trains_each_as_if_alone():
    x, y = _sparse_problem(n=120)
    x2, y2 = _sparse_problem(n=120, seed=1)
    alone = train_dictionaries(x2, y2, 16, 2, [4], steps=30, dtype=torch.float64, progress=False)[0]
    stacked = train_dictionaries(torch.stack([x, x2]), torch.stack([y, y2]), 16, 2, [3, 4], steps=30,
                                 dtype=torch.float64, progress=False)
    torch.testing.assert_close(stacked[1].W_dec, alone.W_dec, rtol=0, atol=1e-10)     # batched kernels: rounding only
    with pytest.raises(ValueError):
        train_dictionaries(torch.stack([x, x2]), y, 16, 2, [3], steps=1, progress=False)     # 2 data sets, 1 seed


def test_held_out_split_is_fixed_disjoint_and_complete():
    train, test = held_out_split(100, 0.2, seed=0)
    assert len(test) == 20 and len(train) == 80
    assert sorted(train.tolist() + test.tolist()) == list(range(100))
    again = held_out_split(100, 0.2, seed=0)
    assert torch.equal(again[0], train) and torch.equal(again[1], test)
    assert not torch.equal(held_out_split(100, 0.2, seed=1)[1], test)


def test_a_seed_trains_the_same_alone_or_beside_others_and_k_can_differ_per_seed():
    x, y = _sparse_problem(n=200)
    alone = train_dictionaries(x, y, 16, 3, [2], steps=40, progress=False)[0]
    together = train_dictionaries(x, y, 16, [1, 3], [5, 2], steps=40, progress=False)
    assert [d.k for d in together] == [1, 3]
    torch.testing.assert_close(alone.W_enc, together[1].W_enc, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        train_dictionaries(x, y, 16, [1, 2, 3], [0, 1], steps=1, progress=False)


def test_random_dictionary_is_the_starting_point():
    x, y = _sparse_problem(n=100)
    d = random_dictionary(x, y, 30, 4, seed=3)
    torch.testing.assert_close(d.W_enc.norm(dim=1), torch.ones(30))
    torch.testing.assert_close(d.b_enc, -(d.W_enc @ x.mean(0)))
    torch.testing.assert_close(d.b_dec, y.mean(0))


def test_metrics():
    y = torch.randn(30, 4, dtype=torch.float64) + 3.0
    assert fvu(y, y) == 0.0
    assert abs(fvu(y, y.mean(0).expand_as(y)) - 1.0) < 1e-12
    codes = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    assert l0(codes) == 1.5
    assert firing_counts(codes).tolist() == [0, 1, 2]


# ---------------------------------------------------------------- the fact model
def test_ffn_io_matches_collect_and_the_ffn(facts_and_model):
    data, model = facts_and_model
    inputs, outputs = ffn_io(model, data.ids[:20])
    trace = collect(model, data.ids[:20])
    for layer in range(len(inputs)):
        torch.testing.assert_close(outputs[layer], trace.outputs[layer])
        with torch.no_grad():
            torch.testing.assert_close(model.blocks[layer].ffn(inputs[layer]), outputs[layer])


def test_distinct_prefixes_and_labels(facts_and_model):
    data, _ = facts_and_model
    valid = prefix_mask(data.ids, data.vocab.pad_id)
    rows, positions = distinct_prefixes(data.ids, valid)
    keys = [tuple(data.ids[r, :t + 1].tolist()) for r, t in zip(rows.tolist(), positions.tolist())]
    everything = {tuple(data.ids[r, :t + 1].tolist()) for r, t in valid.nonzero().tolist()}
    assert len(keys) == len(set(keys)) == len(everything) == 1681
    labels = fact_labels(data, rows, positions)
    at_answer = positions == data.answer_pos[rows]
    assert all((s == "answer") == bool(a) for s, a in zip(labels["slot"], at_answer.tolist()))
    subject_pos = torch.tensor([data.ids[r].tolist().index(data.vocab.stoi[data.facts[r].subject])
                                for r in rows.tolist()])
    named = (positions >= subject_pos).tolist()
    assert {s for s, n in zip(labels["slot"], named) if n} == {"answer", "is", "located", "in", "the"}
    assert [labels["relation"][i] for i in range(3)] == [data.facts[r].relation for r in rows[:3].tolist()]


def test_replaced_ffn_and_answer_scores(facts_and_model):
    data, model = facts_and_model
    ids = data.ids[:40]
    before = model(ids)
    ffn = copy.deepcopy(find_ffns(model).layer(1).module)       # a copy: the hooked module itself would recurse
    with replaced_ffn(model, 1, ffn):
        torch.testing.assert_close(model(ids), before)
    with replaced_ffn(model, 1, lambda x: torch.zeros_like(x)):
        assert not torch.allclose(model(ids), before)
    torch.testing.assert_close(model(ids), before)        # the hook is gone
    accuracy, loss = answer_scores(model, ids, data.answer_pos[:40], data.answer_id[:40])
    logits = before[torch.arange(40), data.answer_pos[:40]]
    assert accuracy == (logits.argmax(-1) == data.answer_id[:40]).double().mean().item()
    assert abs(loss - torch.nn.functional.cross_entropy(logits.double(), data.answer_id[:40]).item()) < 1e-6


def test_label_shares_and_tracking_rates():
    acts = torch.tensor([[5.0, 0.0, 1.0], [4.0, 0.0, 2.0], [3.0, 1.0, 3.0], [0.0, 2.0, 4.0], [0.0, 3.0, 5.0]])
    labels = ["a", "a", "b", "b", "b"]
    share, positive = top_label_share(acts, labels, q=2)
    assert share.tolist() == [1.0, 1.0, 1.0] and positive.tolist() == [3, 3, 5]
    share3, _ = top_label_share(acts, labels, q=3)
    assert torch.allclose(share3, torch.tensor([2 / 3, 1.0, 1.0]))
    rates, judged = tracking_rates(acts, {"x": labels, "y": ["u", "v", "u", "v", "u"]}, q=3, threshold=0.8)
    assert judged == 3 and rates["x"] == pytest.approx(2 / 3) and rates["y"] == pytest.approx(0.0)
    whole, n = firing_label_share(acts, labels)              # every positive row counts, not only the top
    assert n.tolist() == [3, 3, 5]
    assert torch.allclose(whole, torch.tensor([2 / 3, 1.0, 3 / 5], dtype=whole.dtype))
    strongest = strongest_label_share(torch.cat([acts, torch.tensor([[5.0], [0.0], [1.0], [1.0], [1.0]])], 1), labels)
    assert torch.allclose(strongest, torch.tensor([2 / 3, 1.0, 3 / 5, 1 / 4], dtype=torch.float64))  # last: a, not b
    zero, none = firing_label_share(torch.zeros(5, 1), labels)
    assert zero.tolist() == [0.0] and none.tolist() == [0]


def test_without_features_zeroes_only_their_values():
    d = TopKDictionary(torch.randn(6, 4), torch.randn(6), torch.randn(3, 6), torch.randn(3), 2)
    cut = without_features(d, [1, 4])
    assert cut.W_dec[:, [1, 4]].abs().max() == 0 and torch.equal(cut.W_dec[:, [0, 2, 3, 5]], d.W_dec[:, [0, 2, 3, 5]])
    assert d.W_dec[:, 1].abs().max() > 0                                 # the original is untouched
    x = torch.randn(5, 4)
    with torch.no_grad():
        codes = d.encode(x)
        torch.testing.assert_close(cut(x), d(x) - codes[:, [1, 4]] @ d.W_dec[:, [1, 4]].T)
    with pytest.raises(ValueError):
        without_features(d, [6])


def test_fact_prefixes(facts_and_model):
    data, _ = facts_and_model
    p = fact_prefixes(data)
    assert len(p.rows) == 1681 and int(p.named.sum()) == 1672 and int(p.answer.sum()) == len(data.facts)
    assert len(p.labels["slot"]) == int(p.named.sum())
    assert sum(s == "answer" for s in p.labels["slot"]) == len(data.facts)



def test_toy_models_pack_more_features_when_sparse():
    toys = train_toy_models(8, 3, sparsities=(0.0, 0.95), seeds=[0, 1], steps=150, batch_size=64, progress=False)
    assert toys.W.shape == (4, 3, 8) and toys.b.shape == (4, 8)
    assert toys.sparsity.tolist() == pytest.approx([0.0, 0.0, 0.95, 0.95]) and toys.seed.tolist() == [0, 1, 0, 1]
    dense, sparse = toys.at(0.0), toys.at(0.95)
    assert toys.index(0.95, 1) == 3
    assert (dimensions_per_feature(toys.W[sparse]) < dimensions_per_feature(toys.W[dense])).all()
    assert (dimensions_per_feature(toys.W[dense]) > 0.9).all()
    with pytest.raises(ValueError):
        toys.index(0.5, 0)
    assert toys.losses.shape == (150, 4)


def test_toy_hidden_draws_the_toy_inputs_and_best_cosines_finds_planted_directions():
    W = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    h = toy_hidden(W, 0.9, n=500, seed=1)
    assert h.shape == (500, 3) and (h.norm(dim=1) > 0).all()          # inputs with no feature on are left out
    x = torch.linalg.lstsq(W, h.T).solution                             # not unique, but W x = h must hold
    torch.testing.assert_close(W @ x, h.T, rtol=1e-4, atol=1e-4)
    found = torch.cat([-W[:, :2], 3 * W[:, 2:5], torch.randn(3, 4)], dim=1)
    cos = best_cosines(W, found)
    assert cos.shape == (8,) and torch.allclose(cos[2:5], torch.ones(3))
    assert (cos[:2] < 1).all()                                          # opposite directions do not count
    with pytest.raises(ValueError):
        best_cosines(W, torch.randn(4, 2))


def test_strongest_label_share_above_a_level_and_the_level_table():
    acts = torch.tensor([[9.0], [8.0], [1.0], [1.0], [0.0]])
    labels = ["a", "a", "b", "b", "b"]
    assert strongest_label_share(acts, labels).tolist() == [0.5]                # 2 of 4 firings say a
    assert strongest_label_share(acts, labels, above=0.5).tolist() == [1.0]     # above 4.5: both say a
    with pytest.raises(ValueError, match="above"):
        strongest_label_share(acts, labels, above=1.0)
    table = level_table(acts[:, 0], labels, edges=[0, 2, 10])
    assert table.splitlines()[1].split() == ["(0,", "2]", "2", "b", "2"]
    assert table.splitlines()[2].split() == ["(2,", "10]", "2", "a", "2"]
    with pytest.raises(ValueError, match="labels"):
        level_table(acts[:, 0], labels[:3], edges=[0, 1])


def test_planted_features_builds_rows_from_known_unit_directions():
    from helpers.superposition import planted_features
    X, T = planted_features(n_true=12, d=6, n_rows=300, mean_on=2.0, seed=3)
    assert X.shape == (300, 6) and T.shape == (6, 12) and X.dtype == T.dtype == torch.float64
    torch.testing.assert_close(T.norm(dim=0), torch.ones(12, dtype=torch.float64))
    sizes = torch.linalg.lstsq(T, X.T).solution                        # not unique, but T s = x must hold
    torch.testing.assert_close(T @ sizes, X.T)
    again, _ = planted_features(n_true=12, d=6, n_rows=300, mean_on=2.0, seed=3)
    assert torch.equal(X, again)                                        # a seed fixes the data
    for bad in ({"mean_on": 13.0}, {"n_true": 0}, {"mean_on": -1.0}):
        with pytest.raises(ValueError):
            planted_features(n_true=bad.get("n_true", 12), d=6, mean_on=bad.get("mean_on", 2.0))


def test_planted_pairs_share_each_rows_feature_sizes_between_keys_and_values():
    from helpers.superposition import planted_pairs
    X, Y, V = planted_pairs(n_true=6, d=12, n_rows=200, mean_on=2.0, seed=1)
    assert X.shape == Y.shape == (200, 12) and V.shape == (12, 6) and X.dtype == Y.dtype == V.dtype == torch.float64
    torch.testing.assert_close(V.norm(dim=0), torch.ones(6, dtype=torch.float64))
    sizes = torch.linalg.lstsq(V, Y.T).solution                        # (6, 200), unique: d > n_true
    assert sizes.min() > -1e-9 and sizes.max() < 1 + 1e-9
    keys = torch.linalg.lstsq(sizes.T, X).solution                     # X = sizes.T @ K.T with unit keys
    torch.testing.assert_close(keys.norm(dim=1), torch.ones(6, dtype=torch.float64))
    assert torch.equal(X, planted_pairs(n_true=6, d=12, n_rows=200, mean_on=2.0, seed=1)[0])
    with pytest.raises(ValueError):
        planted_pairs(n_true=6, mean_on=7.0)


def test_random_cosine_median_matches_the_closed_forms():
    assert abs(random_cosine_median(2) - 2 ** -0.5) < 1e-3 and abs(random_cosine_median(3) - 0.5) < 1e-4
    assert abs(random_cosine_median(5) - 0.3473) < 1e-3                   # the root of m³ − 3m + 1 = 0
    g = torch.Generator().manual_seed(0)
    a, b = (torch.nn.functional.normalize(torch.randn(20000, 48, generator=g, dtype=torch.float64), dim=1)
            for _ in range(2))
    assert abs(float((a * b).sum(1).abs().median()) - random_cosine_median(48)) < 0.005


def test_frame_bound_is_met_by_a_tight_frame_and_beaten_by_no_random_set():
    from helpers.superposition import frame_bound, mean_squared_cosine
    assert frame_bound(5, 5) == 0 and abs(frame_bound(20, 5) - 15 / 95) < 1e-12
    angles = torch.arange(5, dtype=torch.float64) * torch.pi / 5                 # 5 lines at 36° in the plane
    frame = torch.stack([angles.cos(), angles.sin()])
    assert abs(mean_squared_cosine(frame) - frame_bound(5, 2)) < 1e-12
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        u = torch.randn(5, 17, generator=gen, dtype=torch.float64)
        assert mean_squared_cosine(u / u.norm(dim=0)) >= frame_bound(17, 5) - 1e-12


def test_feature_dimensionality_gives_the_sticky_fractions():
    import math
    from helpers.superposition import feature_dimensionality
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.allclose(feature_dimensionality(eye), torch.ones(3, dtype=torch.float64))
    pair = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)       # an antipodal pair, a zero
    assert torch.allclose(feature_dimensionality(pair), torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    angles = torch.arange(5, dtype=torch.float64) * 2 * math.pi / 5
    pentagon = torch.stack([angles.cos(), angles.sin()])                               # (2, 5)
    assert torch.allclose(feature_dimensionality(pentagon), torch.full((5,), 0.4, dtype=torch.float64))
    assert torch.allclose(feature_dimensionality(3 * pentagon), torch.full((5,), 0.4, dtype=torch.float64))
