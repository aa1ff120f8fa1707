"""helpers.moe: routing, capacity, losses, dispatch (vs the loop, in float64, in every mode), FLOPs vs the cost
formula, expert choice, DeepSeek options, accounting, bad input."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.ffn import FFN
from helpers.moe import (MoE, MoEStats, Routing, RoutingLog, arrival_rank, bias_update_step, biased_top_k, dispatch,
                         expert_capacity, update_selection_biases,
                         load_balancing_loss, load_entropy, load_max_over_mean, mixtral_balance_loss, moe_aux_loss,
                         moe_forward_loop, moe_layer_cost, moe_model_params, router_entropy, router_z_loss)
from helpers.transformer import GPTConfig, TinyGPT, train_lm


def make(d=16, e=4, k=2, **kw):
    torch.manual_seed(0)
    kw.setdefault("d_ff", 24)
    return MoE(d, e, k, **kw).eval()


def explicit_output(moe, x, r):
    """y[n] = Σ_j kept · weight · expert(x[n]), token by token (the contract, literally)."""
    y = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(r.expert_index.shape[1]):
            if r.kept[n, j]:
                y[n] += r.weight[n, j] * moe.experts[int(r.expert_index[n, j])](x[n:n + 1])[0]
    return y


# ---------------------------------------------------------------- the contract
def test_contract_fields_shapes_and_dtypes():
    moe = make(e=5, k=2, capacity_factor=1.0)
    assert (moe.d_model, moe.n_experts, moe.top_k) == (16, 5, 2)
    assert isinstance(moe.router, torch.nn.Linear) and moe.router.bias is None
    assert moe.router.weight.shape == (5, 16)
    assert len(moe.experts) == 5 and all(isinstance(e, FFN) and e.variant == "swiglu" for e in moe.experts)
    r = moe.route(torch.randn(30, 16))
    assert isinstance(r, Routing)
    assert r.expert_index.shape == (30, 2) and r.expert_index.dtype == torch.long
    assert r.weight.shape == (30, 2) and r.weight.dtype == torch.float32
    assert r.kept.shape == (30, 2) and r.kept.dtype == torch.bool
    assert r.probs.shape == (30, 5) and r.probs.dtype == torch.float32
    assert r.logits.shape == (30, 5) and r.logits.dtype == torch.float32
    assert r.capacity == 12
    # best first, and the weights are the chosen experts' renormalised probabilities
    chosen = r.probs.gather(1, r.expert_index)
    assert (chosen[:, 0] >= chosen[:, 1]).all()
    torch.testing.assert_close(r.weight, chosen / chosen.sum(1, keepdim=True))
    torch.testing.assert_close(r.probs, torch.softmax(r.logits, -1))


def test_forward_is_the_contract_formula_and_route_is_deterministic():
    moe = make(e=4, k=2, capacity_factor=0.75, variant="gelu", bias=True)
    x = torch.randn(21, 16)
    r1, r2 = moe.route(x), moe.route(x)
    assert torch.equal(r1.expert_index, r2.expert_index) and torch.equal(r1.kept, r2.kept)
    assert not r1.kept.all()                       # some slots were dropped
    y, stats = moe(x)
    torch.testing.assert_close(y, explicit_output(moe, x, r1), atol=1e-6, rtol=0)
    assert isinstance(stats, MoEStats)


def test_fully_dropped_token_gets_zero_output():
    moe = make(e=2, k=1, capacity_factor=0.25)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = 10.0               # every token with x[:, 0] > 0 prefers expert 0
    x = torch.randn(16, 16)
    x[:, 0] = 1.0
    y, stats = moe(x)
    r = moe.route(x)
    assert r.capacity == 2 and r.kept[:, 0].tolist() == [True, True] + [False] * 14
    assert torch.equal(y[2:], torch.zeros(14, 16))
    assert stats.dropped_share == pytest.approx(14 / 16)


# ---------------------------------------------------------------- top-k
@pytest.mark.parametrize("k", [2, 3, 4])
def test_top_k_weights_sum_to_one(k):
    torch.manual_seed(1)
    probs = torch.softmax(torch.randn(50, 6), -1)
    w, idx = biased_top_k(probs, torch.zeros(6), k)
    torch.testing.assert_close(w.sum(-1), torch.ones(50))
    assert torch.equal(idx, probs.topk(k, -1).indices)


def test_top_1_weight_is_the_probability_and_softmax_over_chosen_logits_is_renormalising():
    torch.manual_seed(2)
    logits = torch.randn(40, 8)
    probs = torch.softmax(logits, -1)
    w1, i1 = biased_top_k(probs, torch.zeros(8), 1)
    torch.testing.assert_close(w1[:, 0], probs.max(-1).values)
    w2, i2 = biased_top_k(probs, torch.zeros(8), 2)
    torch.testing.assert_close(w2, torch.softmax(logits.gather(1, i2), -1))
    w_raw, _ = biased_top_k(probs, torch.zeros(8), 2, renormalise=False)
    torch.testing.assert_close(w_raw, probs.gather(1, i2))


# ---------------------------------------------------------------- capacity
def test_expert_capacity_formula_is_ceil():
    assert expert_capacity(100, 10, 1, 1.0) == 10
    assert expert_capacity(100, 10, 1, 1.1) == 11          # not 12 from 11.000000000000002
    assert expert_capacity(10, 4, 1, 1.0) == 3             # ceil(2.5)
    assert expert_capacity(10, 4, 2, 1.0) == 5
    assert expert_capacity(4096, 64, 2, 1.25) == 160
    assert expert_capacity(7, 3, 1, None) is None


def test_capacity_drops_exactly_the_overflow_tokens_in_order():
    # top-1, 3 experts, capacity 2: expert 0 is chosen by tokens 0, 2, 3, 5 -> keeps 0 and 2, drops 3 and 5
    index = torch.tensor([0, 1, 0, 0, 2, 0, 1, 1])
    rank = arrival_rank(index, 3)
    assert rank.tolist() == [0, 0, 1, 2, 0, 3, 1, 2]
    assert (rank < 2).tolist() == [True, True, True, False, True, False, True, False]
    # top-2: every first choice is served before any second choice
    index2 = torch.tensor([[0, 1], [1, 0], [0, 1], [0, 2]])
    assert arrival_rank(index2, 3).tolist() == [[0, 1], [0, 3], [1, 2], [2, 0]]


@pytest.mark.parametrize("seed", range(5))
def test_capacity_keeps_first_arrivals_fuzzed(seed):
    g = torch.Generator().manual_seed(seed)
    n, e, k = int(torch.randint(5, 60, (1,), generator=g)), int(torch.randint(2, 7, (1,), generator=g)), 2
    cf = [0.3, 0.5, 1.0, 1.5][seed % 4]
    torch.manual_seed(seed)
    moe = MoE(8, e, k, d_ff=8, capacity_factor=cf).eval()
    r = moe.route(torch.randn(n, 8))
    arrivals = [(j, t) for j in range(k) for t in range(n)]           # choice-major, token order
    seen = [0] * e
    for j, t in arrivals:
        ex = int(r.expert_index[t, j])
        assert bool(r.kept[t, j]) == (seen[ex] < r.capacity)
        seen[ex] += 1
    assert (r.tokens_per_expert(kept_only=True) <= r.capacity).all()


# ---------------------------------------------------------------- vectorised = loop
@pytest.mark.parametrize("seed", range(12))
def test_vectorised_dispatch_equals_loop_fuzzed(seed):
    g = torch.Generator().manual_seed(100 + seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    d, e = pick([4, 8, 12]), pick([1, 2, 3, 5, 8])
    k = pick(list(range(1, e + 1)))
    cf = pick([None, 0.25, 0.8, 1.0, 2.0])
    variant = pick(["swiglu", "gelu", "relu", "geglu"])
    lead = pick([(7,), (3, 5), (2, 3, 4), (1,), (33,)])
    torch.manual_seed(seed)
    moe = MoE(d, e, k, d_ff=pick([4, 8, 16]), variant=variant, bias=pick([True, False]), capacity_factor=cf).eval()
    x = torch.randn(*lead, d)
    y, _ = moe(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, moe_forward_loop(moe, x), atol=1e-6, rtol=0)


def test_dispatch_gradients_match_loop():
    moe = make(e=4, k=2, capacity_factor=1.0)
    x = torch.randn(19, 16, requires_grad=True)
    y, _ = moe(x)
    grads = torch.autograd.grad(y.square().sum(), [x, moe.router.weight, moe.experts[1].w1.weight])
    y_loop = moe_forward_loop(moe, x)
    grads_loop = torch.autograd.grad(y_loop.square().sum(), [x, moe.router.weight, moe.experts[1].w1.weight])
    for a, b in zip(grads, grads_loop):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_dispatch_function_matches_forward():
    moe = make(e=3, k=2)
    x = torch.randn(11, 16)
    torch.testing.assert_close(dispatch(x, moe.route(x), moe.experts), moe(x)[0])


# ---------------------------------------------------------------- losses and statistics
def test_balance_loss_is_one_at_perfect_balance_and_n_at_collapse():
    e, n = 8, 64
    index = torch.arange(n) % e                                  # every expert gets n / e tokens
    probs = torch.softmax(torch.randn(n, e), -1)                 # any probabilities
    assert load_balancing_loss(probs, index).item() == pytest.approx(1.0)
    collapse_probs = torch.zeros(n, e)
    collapse_probs[:, 3] = 1.0
    assert load_balancing_loss(collapse_probs, torch.full((n,), 3)).item() == pytest.approx(float(e))
    # top-2 balance is still 1; Hugging Face's Mixtral loss is k there
    index2 = torch.stack([torch.arange(n) % e, (torch.arange(n) + 1) % e], 1)
    uniform = torch.full((n, e), 1 / e)
    assert load_balancing_loss(uniform, index2).item() == pytest.approx(1.0)
    assert mixtral_balance_loss(uniform, index2).item() == pytest.approx(2.0)


def test_balance_loss_from_the_layer_at_collapse():
    moe = make(e=4, k=1, balance_coef=0.5, z_coef=0.0)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[2, 0] = 100.0
    x = torch.randn(32, 16)
    x[:, 0] = 1.0
    _, stats = moe(x)
    assert stats.tokens_per_expert.tolist() == [0, 0, 32, 0]
    assert stats.balance_loss.item() == pytest.approx(4.0)
    assert stats.aux_loss.item() == pytest.approx(2.0)
    assert stats.max_over_mean == pytest.approx(4.0) and stats.load_entropy == pytest.approx(0.0)


def test_z_loss_entropy_and_load_metrics():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    expected = (math.log(2.0) ** 2 + math.log(4.0) ** 2) / 2
    assert router_z_loss(logits).item() == pytest.approx(expected)
    assert router_entropy(torch.full((3, 4), 0.25)).item() == pytest.approx(math.log(4))
    assert load_max_over_mean(torch.tensor([5, 5, 5, 5])) == 1.0
    assert load_entropy(torch.tensor([5, 5, 5, 5])) == pytest.approx(1.0)
    assert load_entropy(torch.tensor([0, 9, 0, 0])) == 0.0


def test_stats_record_and_aux_loss_gradient():
    moe = make(e=4, k=2, capacity_factor=1.0)
    x = torch.randn(3, 10, 16)
    y, stats = moe(x)
    assert y.shape == (3, 10, 16)
    assert int(stats.tokens_per_expert.sum()) == 60 and int(stats.kept_per_expert.sum()) <= 60
    assert stats.dropped_share == pytest.approx(1 - int(stats.kept_per_expert.sum()) / 60)
    assert 0 <= stats.router_entropy <= math.log(4)
    stats.aux_loss.backward()
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0


def test_router_runs_in_float32_with_bfloat16_input():
    moe = make(e=4, k=2).to(torch.bfloat16)
    x = torch.randn(12, 16, dtype=torch.bfloat16)
    r = moe.route(x)
    assert r.logits.dtype == torch.float32 and r.probs.dtype == torch.float32 and r.weight.dtype == torch.float32
    torch.testing.assert_close(r.logits, x.float() @ moe.router.weight.float().t())
    y, stats = moe(x)
    assert y.dtype == torch.bfloat16 and stats.z_loss.dtype == torch.float32


def test_jitter_only_in_training():
    moe = make(e=4, k=1, jitter=0.5)
    x = torch.randn(40, 16)
    assert torch.equal(moe.route(x).logits, moe.route(x).logits)
    moe.train()
    assert not torch.equal(moe.route(x).logits, moe.route(x).logits)


# ---------------------------------------------------------------- expert choice
def test_expert_choice_router():
    moe = make(e=4, k=2, router="expert", capacity_factor=1.0)
    x = torch.randn(18, 16)
    ec = moe.route_expert_choice(x)
    assert ec.token_index.shape == (4, 9) and ec.capacity == 9
    for e in range(4):   # each expert takes its highest-probability tokens
        assert torch.equal(ec.token_index[e], ec.probs[:, e].topk(9).indices)
    y, stats = moe(x)
    expected = torch.zeros_like(x)
    for e in range(4):
        for c in range(9):
            t = int(ec.token_index[e, c])
            expected[t] += ec.weight[e, c] * moe.experts[e](x[t:t + 1])[0]
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=0)
    assert stats.tokens_per_expert.tolist() == [9, 9, 9, 9] and stats.max_over_mean == 1.0
    assert stats.dropped_share == pytest.approx(float((ec.experts_per_token() == 0).float().mean()))
    with pytest.raises(ValueError, match="moe_forward_loop is the reference for token-choice routing"):
        moe_forward_loop(moe, x)


# ---------------------------------------------------------------- inside the tiny transformer
def test_tiny_gpt_with_moe_trains_and_logs():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=2)
    model = TinyGPT(cfg, ffn_factory=lambda layer: MoE(16, 4, 1, d_ff=16, balance_coef=0.1))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 11, (24, 6), generator=g)
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100
    log = RoutingLog()
    losses = train_lm(model, ids, targets, steps=5, lr=1e-2, extra_loss=moe_aux_loss, on_step=log, progress=False)
    assert len(losses) == 5
    assert log.counts.shape == (5, 2, 4) and (log.counts.sum(-1) == 24 * 6).all()
    assert log.max_over_mean().shape == (5, 2) and log.load_entropy().shape == (5, 2)
    assert log.loss.tolist() == pytest.approx(losses)
    assert (log.aux > 0).all() and torch.allclose(log.lm_loss + log.aux, log.loss)
    with pytest.raises(ValueError, match="no MoE layer records"):
        moe_aux_loss(TinyGPT(cfg))


# ---------------------------------------------------------------- accounting
def test_layer_cost_and_mixtral_numbers():
    c = moe_layer_cost(64, 8, 2, 128, gated=True)
    assert c.total_params == 8 * 3 * 64 * 128 + 64 * 8
    assert c.active_params == 2 * 3 * 64 * 128 + 64 * 8
    assert c.flops_per_token == 2 * 64 * 8 + 2 * 6 * 64 * 128
    moe = MoE(64, 8, 2, d_ff=128)
    assert sum(p.numel() for p in moe.parameters()) == c.total_params
    p = moe_model_params(vocab_size=32000, d_model=4096, n_layers=32, d_ff=14336, n_experts=8, top_k=2,
                         n_heads=32, n_kv_heads=8, head_dim=128)
    assert round(p["total"] / 1e9, 1) == 46.7 and round(p["active"] / 1e9, 1) == 12.9


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, error, match", [
    ({"top_k": 0}, ValueError, r"top_k must be an int in \[1, 4\], got 0"),
    ({"top_k": 5}, ValueError, r"top_k must be an int in \[1, 4\], got 5"),
    ({"capacity_factor": 0.0}, ValueError, "capacity_factor must be a positive number, got 0.0"),
    ({"capacity_factor": -1}, ValueError, "capacity_factor must be a positive number, got -1"),
    ({"n_experts": 0}, ValueError, "n_experts must be a positive int, got 0"),
    ({"balance_coef": -0.1}, ValueError, "balance_coef must be a non-negative number, got -0.1"),
    ({"z_coef": -1e-3}, ValueError, "z_coef must be a non-negative number, got -0.001"),
    ({"router": "random"}, ValueError, "router must be one of"),
    ({"jitter": 1.5}, ValueError, "jitter must be a float in"),
    ({"variant": "mlp"}, ValueError, "variant must be one of"),
])
def test_bad_arguments(kwargs, error, match):
    args = {"d_model": 8, "n_experts": 4, "top_k": 1, **kwargs}
    with pytest.raises(error, match=match):
        MoE(args.pop("d_model"), args.pop("n_experts"), args.pop("top_k"), **args)


def test_bad_input_width_and_dtype():
    moe = make(d=16, e=4, k=1)
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got shape \(5, 12\)"):
        moe(torch.randn(5, 12))
    with pytest.raises(ValueError, match="x must have last dimension d_model=16"):
        moe.route(torch.randn(5, 8))
    with pytest.raises(TypeError, match="x must have a floating-point dtype"):
        moe(torch.ones(5, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 3\], got 4"):
        biased_top_k(torch.softmax(torch.randn(4, 3), -1), torch.zeros(3), 4)
    with pytest.raises(ValueError, match="capacity_factor must be a positive number"):
        expert_capacity(10, 2, 1, 0.0)


# ---------------------------------------------------------------- plots
def test_routing_plot_helpers():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.routing_plots import (load_curves_figure, load_shares, plot_expert_bars, plot_heatmap,
                                       routing_over_training_figure, token_type_by_expert)
    by_type = token_type_by_expert(torch.tensor([0, 1, 1, 2, 2, 2]), torch.tensor([0, 1, 0, 1, 1, 1]),
                                   ["a", "b", "c"], ["b", "c"], 2)
    torch.testing.assert_close(by_type, torch.tensor([[0.5, 0.5], [0.0, 1.0]], dtype=torch.float64))
    assert load_shares(torch.tensor([1, 3])).tolist() == [0.25, 0.75]
    log = RoutingLog()
    model = TinyGPT(GPTConfig(vocab_size=7, d_model=8, n_heads=2), ffn_factory=lambda layer: MoE(8, 3, 1, d_ff=8))
    model(torch.randint(0, 7, (2, 5)))
    log(0, model, 1.0)
    log(1, model, 1.0)
    fig, ax = plt.subplots()
    plot_expert_bars(ax, torch.tensor([3, 1, 0]), kept=torch.tensor([2, 1, 0]), capacity=2, title="t")
    plot_heatmap(ax, torch.rand(2, 3), xlabel="x", ylabel="y", annotate=True, yticklabels=["a", "b"])
    with pytest.raises(ValueError, match="matrix must be 2-D"):
        plot_heatmap(ax, torch.rand(3), xlabel="x", ylabel="y")
    for figure in (fig, routing_over_training_figure({"run": log}, layers=(0, 1)), load_curves_figure({"run": log})):
        plt.close(figure)


# ---------------------------------------------------------------- FLOPs, modes, float64
@pytest.mark.parametrize("d_ff", [48, 40, 682 // 8])
@pytest.mark.parametrize("config", [dict(), dict(k=1), dict(variant="gelu", bias=True), dict(granularity=2, n_shared=1),
                                    dict(score="sigmoid", k=3), dict(router="expert", capacity_factor=1.0)])
def test_flops_equal_the_cost_formula_in_every_mode(d_ff, config):
    """FlopCounterMode over one forward = moe_layer_cost(...).flops_per_token × tokens: train and eval mode, with
    and without autograd, widths that are and are not multiples of 16 (nothing padded, nothing extra)."""
    from torch.utils.flop_counter import FlopCounterMode
    config = dict(config)
    k, variant = config.pop("k", 2), config.get("variant", "swiglu")
    d_ff = d_ff - d_ff % config.get("granularity", 1)
    moe = make(d=32, e=4, k=k, d_ff=d_ff, **config)
    n_tokens = 64                                            # expert choice: 64 · 2 / 4 tokens per expert exactly
    cost = moe_layer_cost(32, 4, k, d_ff, gated=variant == "swiglu", bias=config.get("bias", False),
                          granularity=config.get("granularity", 1), n_shared=config.get("n_shared", 0))
    x = torch.randn(n_tokens, 32)
    for training in (True, False):
        moe.train(training)
        for grad in (True, False):
            with torch.set_grad_enabled(grad), FlopCounterMode(display=False) as counter:
                moe(x)
            assert counter.get_total_flops() == cost.flops_per_token * n_tokens, (training, grad)


def test_inference_path_equals_autograd_path_and_the_loop():
    """Without autograd the experts take their blocks INFERENCE_ROWS rows at a time: the same output."""
    from helpers.moe import INFERENCE_ROWS
    moe = make(d=16, e=2, k=2, d_ff=12, capacity_factor=1.5)
    x = torch.randn(3 * INFERENCE_ROWS + 5, 16)
    y_grad, stats_grad = moe(x)
    with torch.no_grad():
        y_fast, stats_fast = moe(x)
    torch.testing.assert_close(y_fast, y_grad.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(y_fast, moe_forward_loop(moe, x).detach(), atol=1e-6, rtol=1e-6)
    assert torch.equal(stats_fast.kept_per_expert, stats_grad.kept_per_expert)
    assert stats_fast.aux_loss.item() == stats_grad.aux_loss.item() and not stats_fast.aux_loss.requires_grad


@pytest.mark.parametrize("k, capacity_factor", [(1, None), (2, 0.75), (3, None), (4, 1.25)])
def test_dispatch_equals_loop_in_float64(k, capacity_factor):
    torch.manual_seed(k)
    moe = MoE(12, 4, k, d_ff=10, capacity_factor=capacity_factor).double().eval()
    x = torch.randn(37, 12, dtype=torch.float64)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            y, _ = moe(x)
            assert y.dtype == torch.float64
            assert (y - moe_forward_loop(moe, x)).abs().max() < 1e-12


def test_top_k_with_minus_infinity_never_repeats_an_expert():
    scores = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])
    bias = torch.tensor([0.0, -math.inf, -math.inf, -math.inf])          # only expert 0 left
    weight, index = biased_top_k(scores, bias, 2)
    assert all(len(set(row)) == 2 for row in index.tolist())


# ---------------------------------------------------------------- today's configurations
def test_fine_grained_at_m1_is_the_plain_layer():
    torch.manual_seed(3)
    plain = MoE(16, 4, 2, d_ff=24).eval()
    torch.manual_seed(3)
    fine = MoE(16, 4, 2, d_ff=24, granularity=1, n_shared=0).eval()
    x = torch.randn(30, 16)
    assert torch.equal(plain(x)[0], fine(x)[0])
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in fine.named_parameters()]


def test_fine_grained_counts_and_accounting():
    moe = MoE(16, 4, 2, d_ff=24, granularity=4, n_shared=2)
    assert (moe.n_experts, moe.top_k, moe.d_ff, moe.n_shared) == (14, 6, 6, 2)
    assert moe.n_total_experts == 16 and moe.active_experts == 8
    assert moe.shared.d_ff == 12 and moe.router.weight.shape == (14, 16)
    plain = moe_layer_cost(16, 4, 2, 24)
    fine = moe_layer_cost(16, 4, 2, 24, granularity=4, n_shared=2)
    assert fine.total_params == sum(p.numel() for p in moe.parameters())
    # the experts' active parameters and FLOPs are unchanged; only the router grows
    assert fine.active_params - 16 * 14 == plain.active_params - 16 * 4
    assert fine.flops_per_token - 2 * 16 * 14 == plain.flops_per_token - 2 * 16 * 4
    assert fine.expert_active_params == plain.expert_active_params == 2 * 3 * 16 * 24


def test_shared_experts_add_their_output_to_every_token():
    moe = make(d=16, e=4, k=2, d_ff=24, granularity=2, n_shared=1)
    x = torch.randn(25, 16)
    y, stats = moe(x)
    r = moe.route(x)
    expected = explicit_output(moe, x, r) + moe.shared(x)
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=1e-6)
    assert int(stats.tokens_per_expert.sum()) == 25 * moe.top_k        # the router only counts routed slots


def test_selection_bias_changes_choice_not_weights():
    moe = make(d=16, e=4, k=2, d_ff=24)
    x = torch.randn(50, 16)
    plain = moe.route(x)
    with torch.no_grad():
        moe.selection_bias.copy_(torch.tensor([0.0, 0.0, 0.0, 10.0]))   # expert 3 is always chosen
    biased = moe.route(x)
    assert (biased.expert_index == 3).any(1).all()
    torch.testing.assert_close(biased.probs, plain.probs)                 # scores unchanged
    chosen = plain.probs.gather(1, biased.expert_index)                   # weights: unbiased probs, renormalised
    torch.testing.assert_close(biased.weight, chosen / chosen.sum(1, keepdim=True))
    y, _ = moe(x)
    torch.testing.assert_close(y, explicit_output(moe, x, biased), atol=1e-6, rtol=1e-6)


def test_bias_update_rule_and_method():
    bias = torch.zeros(4)
    load = torch.tensor([10, 2, 4, 4])                                   # mean 5
    assert bias_update_step(bias, load, 0.1).tolist() == pytest.approx([-0.1, 0.1, 0.1, 0.1])
    assert bias_update_step(bias, torch.tensor([5, 5, 5, 5]), 0.1).tolist() == [0.0] * 4
    moe = make(d=16, e=4, k=1, d_ff=8, bias_update=0.05).train()
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[1, 0] = 5.0
    x = torch.randn(40, 16)
    x[:, 0] = 1.0                                                         # everyone prefers expert 1
    moe(x)
    load = moe.update_selection_bias()
    assert load.tolist() == [0, 40, 0, 0]
    assert moe.selection_bias.tolist() == pytest.approx([0.05, -0.05, 0.05, 0.05])
    assert moe.update_selection_bias() is None                            # nothing seen since
    plain = make(d=16, e=4, k=1, d_ff=8).train()
    plain(x)
    assert plain.update_selection_bias() is None and not plain.selection_bias.any()


def test_bias_balancing_in_training_evens_the_load():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1)
    model = TinyGPT(cfg, ffn_factory=lambda layer: MoE(16, 4, 1, d_ff=16, balance_coef=0.0, z_coef=0.0,
                                                       bias_update=0.05))
    with torch.no_grad():
        model.blocks[0].ffn.router.weight[2] += 3.0 * model.blocks[0].ffn.router.weight[2].sign()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 11, (24, 6), generator=g)
    targets = torch.roll(ids, -1, 1)
    log = RoutingLog()

    def on_step(step, m, loss):
        log(step, m, loss)
        update_selection_biases(m)

    train_lm(model, ids, targets, steps=40, lr=1e-3, on_step=on_step, progress=False)
    mom = log.max_over_mean()[:, 0]
    assert mom[-5:].mean() < mom[:5].mean()
    assert model.blocks[0].ffn.selection_bias.abs().sum() > 0


def test_sigmoid_scores_normalised_over_the_chosen():
    moe = make(d=16, e=6, k=3, d_ff=8, score="sigmoid")
    x = torch.randn(20, 16)
    r = moe.route(x)
    aff = torch.sigmoid(r.logits)
    assert torch.equal(r.expert_index, aff.topk(3, -1).indices)
    chosen = aff.gather(1, r.expert_index)
    torch.testing.assert_close(r.weight, chosen / chosen.sum(1, keepdim=True))
    torch.testing.assert_close(r.probs, aff / aff.sum(1, keepdim=True))
    y, _ = moe(x)
    torch.testing.assert_close(y, explicit_output(moe, x, r), atol=1e-6, rtol=1e-6)


def test_noisy_gating_formula_and_eval_equals_plain():
    torch.manual_seed(5)
    plain = MoE(16, 4, 2, d_ff=8).eval()
    torch.manual_seed(5)
    noisy = MoE(16, 4, 2, d_ff=8, noisy=True).eval()
    assert not noisy.noise.weight.any()                                   # W_noise starts at zero (Shazeer 2017)
    x = torch.randn(30, 16)
    assert torch.equal(plain(x)[0], noisy(x)[0])                          # eval: no noise
    noisy.train()
    with torch.no_grad():
        noisy.noise.weight.normal_()
    torch.manual_seed(9)
    logits = noisy.router_logits(x)
    torch.manual_seed(9)
    eps = torch.randn(30, 4)
    expected = x @ noisy.router.weight.t() + eps * F.softplus(x @ noisy.noise.weight.t())
    torch.testing.assert_close(logits, expected)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_shared": 8}, r"n_shared=8 leaves the router nothing to choose: with granularity=2 the layer has 8 experts "
                      r"and a token uses 4, so n_shared must be at most 3"),
    ({"n_shared": 5}, r"n_shared=5 leaves the router nothing to choose: .* so n_shared must be at most 3"),
    ({"n_shared": -1}, "n_shared must be a non-negative int, got -1"),
    ({"granularity": 0}, "granularity must be a positive int, got 0"),
    ({"d_ff": 25}, "d_ff must be divisible by granularity=2"),
    ({"bias_update": -0.01}, "bias_update must be a non-negative number, got -0.01"),
    ({"score": "tanh"}, "score must be one of"),
])
def test_impossible_configurations(kwargs, match):
    args = {"d_ff": 24, "granularity": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        MoE(8, 4, 2, **args)


def test_top_k_above_routed_and_noisy_type():
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 4\], got 5"):
        MoE(8, 4, 5, granularity=2, d_ff=8)
    with pytest.raises(TypeError, match="noisy must be a bool"):
        MoE(8, 4, 1, noisy=1)
    with pytest.raises(ValueError, match=r"bias must be a tensor of shape \(4,\)"):
        biased_top_k(torch.rand(3, 4), torch.zeros(3), 1)


def test_routing_plots_analysis_helpers():
    from helpers.routing_plots import busiest_first, favourite_expert_shares, shares_by_type_and_position
    counts = torch.tensor([5, 9, 0, 9])
    assert busiest_first(counts).tolist() == [2, 0, 3, 1]                  # ties: the lower id first
    ids = torch.tensor([0, 1, 2, 0, 1, 2])                                  # two rows of three positions
    experts = torch.tensor([1, 1, 0, 1, 0, 0])
    by_type, by_position = shares_by_type_and_position(ids, experts, ["a", "b", "c"], ["a", "b", "c"], 2, 3)
    assert by_type.shape == (3, 2) and by_position.shape == (3, 2)
    assert torch.allclose(by_type.sum(-1), torch.ones(3, dtype=torch.float64))
    assert by_position[0].tolist() == [0.0, 1.0] and by_position[2].tolist() == [1.0, 0.0]   # a tie: expert 0 first
    first = torch.tensor([3, 3, 1, 3, 2, 3])
    group = torch.tensor([True, True, True, False, False, False])
    assert favourite_expert_shares(first, group, ~group, 4) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


def test_plot_dispatch_puts_each_slot_where_arrival_rank_does():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.routing_plots import plot_dispatch
    index = torch.tensor([[2, 3], [3, 2], [2, 3], [0, 1], [2, 0], [2, 0]])   # top-2, 4 experts, C = 3
    fig, ax = plt.subplots()
    plot_dispatch(ax, index, 4, 3, title="t")
    slots = [t for t in ax.texts if t.get_text().isdigit()]
    assert len(slots) == index.numel()
    rows: dict[float, list[str]] = {}
    for t in slots:
        rows.setdefault(round(t.get_position()[1], 6), []).append(t.get_text())
    by_row = [sorted(rows[y]) for y in sorted(rows, reverse=True)]          # experts 0, 1, 2, 3, then dropped
    assert by_row == [["3", "4", "5"], ["3"], ["0", "2", "4"], ["0", "1", "2"], ["1", "5"]]
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        plot_dispatch(ax, index, 4, 0)
    with pytest.raises(ValueError, match="expert_index must be a non-empty"):
        plot_dispatch(ax, torch.zeros(0, 2, dtype=torch.long), 4, 3)
    plt.close(fig)


def test_bfloat16_changes_counts_reorderings_among_the_changes():
    from helpers.moe import bfloat16_changes
    c = bfloat16_changes(iter([0, 1]), n_tokens=2048)
    assert c.n_tokens == 4096 and len(c.reordered) == 2
    assert 0 <= sum(c.reordered) <= c.changed < c.n_tokens // 50     # a few per thousand
    assert c.about % 10 == 0 and abs(c.about - c.changed) <= 5
