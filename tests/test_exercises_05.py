"""Notebook 05's checkers: other correct forms pass, unlisted wrong answers fail without a wrong hint,
answers right on some branches only fail, and the course's helpers pass
(the generic contract for every checker is in test_exercise_contract.py).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import moe
from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb05 import (EXERCISES, check_balance_loss, check_capacity_keep, check_later_tokens,
                                    check_moe_forward, check_noisy_top_k, check_z_loss)

IDS = [ex.title for ex in EXERCISES]


# ---------------------------------------------------------------- other correct answers
def moe_forward_sorted(x, w_router, w1, w3, w2, k):
    """Route in float32, sort the slots by expert, run each expert once on its block, add back."""
    probs = torch.softmax(x.float() @ w_router.float().T, dim=-1)
    weight, expert = probs.topk(k, dim=-1)
    if k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    token = torch.arange(x.shape[0]).repeat_interleave(k)
    expert, weight = expert.reshape(-1), weight.reshape(-1)
    order = torch.argsort(expert, stable=True)
    token, expert, weight = token[order], expert[order], weight[order]
    y = torch.zeros_like(x)
    for e, block in enumerate(torch.bincount(expert, minlength=w_router.shape[0]).tolist()):
        rows = expert == e
        xe = x[token[rows]]
        out = (F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T
        y.index_add_(0, token[rows], weight[rows, None] * out)
    return y


def moe_forward_other_tie_break(x, w_router, w1, w3, w2, k):
    """Correct, but on tied probabilities it picks the HIGHER expert id (torch.topk's order is unspecified)."""
    probs = torch.softmax(x @ w_router.T, dim=-1)
    n_experts = probs.shape[-1]
    weight, flipped = probs.flip(-1).topk(k, dim=-1)
    index = n_experts - 1 - flipped
    if k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for j in range(k):
            e = int(index[n, j])
            y[n] += weight[n, j] * (w2[e] @ (F.silu(w1[e] @ x[n]) * (w3[e] @ x[n])))
    return y


def moe_forward_with_the_course_layer(x, w_router, w1, w3, w2, k):
    """helpers.moe.MoE with the same weights (its readable loop and its sorted dispatch)."""
    n_experts, d_ff, d = w1.shape
    layer = moe.MoE(d, n_experts, k, d_ff=d_ff)
    with torch.no_grad():
        layer.router.weight.copy_(w_router)
        for e, expert in enumerate(layer.experts):
            expert.w1.weight.copy_(w1[e])
            expert.w3.weight.copy_(w3[e])
            expert.w2.weight.copy_(w2[e])
    y, _ = layer(x)
    assert torch.allclose(y, moe.moe_forward_loop(layer, x), atol=1e-6)
    return y


def capacity_keep_vectorised(expert_index, n_experts, capacity_factor):
    n, k = expert_index.shape
    return moe.arrival_rank(expert_index, n_experts) < moe.expert_capacity(n, n_experts, k, capacity_factor)


def balance_loss_with_one_hot(probs, expert_index):
    n_experts = probs.shape[-1]
    f = F.one_hot(expert_index, n_experts).to(probs.dtype).sum((0, 1)) / expert_index.numel()
    return n_experts * torch.dot(f, probs.mean(0))


def z_loss_by_hand(logits):
    top = logits.max(-1, keepdim=True).values
    lse = top[:, 0] + torch.log(torch.exp(logits - top).sum(-1))
    return (lse * lse).mean()


def noisy_gates_masked_fill(x, w_gate, w_noise, noise, k):
    h = x @ w_gate.T + noise * F.softplus(x @ w_noise.T)
    kth = h.topk(k, dim=-1).values[:, -1:]
    return torch.softmax(h.masked_fill(h < kth, float("-inf")), dim=-1)


def noisy_gates_renormalised(x, w_gate, w_noise, noise, k):
    """Softmax over all experts, keep the top k, renormalise: the same gates as a softmax over the kept."""
    h = x @ w_gate.T + noise * torch.log1p(torch.exp(x @ w_noise.T))
    p = torch.softmax(h, dim=-1)
    value, index = p.topk(k, dim=-1)
    return torch.zeros_like(p).scatter(-1, index, value / value.sum(-1, keepdim=True))


def changed_with_helpers(expert_index, n_experts, capacity_factor):
    n = expert_index.shape[0]
    full = capacity_keep_vectorised(expert_index, n_experts, capacity_factor)
    return torch.tensor([not torch.equal(capacity_keep_vectorised(expert_index[: t + 1], n_experts, capacity_factor)[t],
                                         full[t]) for t in range(n)])


OTHER_CORRECT = [
    (check_moe_forward, moe_forward_sorted),
    (check_moe_forward, moe_forward_other_tie_break),
    (check_moe_forward, moe_forward_with_the_course_layer),
    (check_capacity_keep, capacity_keep_vectorised),
    (check_balance_loss, balance_loss_with_one_hot),
    (check_balance_loss, moe.load_balancing_loss),
    (check_z_loss, z_loss_by_hand),
    (check_z_loss, moe.router_z_loss),
    (check_noisy_top_k, noisy_gates_masked_fill),
    (check_noisy_top_k, noisy_gates_renormalised),
    (check_later_tokens, changed_with_helpers),
]


@pytest.mark.parametrize("ex, fn", OTHER_CORRECT, ids=[fn.__name__ for _, fn in OTHER_CORRECT])
def test_other_correct_answers_pass(ex, fn):
    result = ex.evaluate(fn)
    assert result.status == PASSED, result.message


# ---------------------------------------------------------------- answers right on some branches only
def _route_then_combine(x, w_router, w1, w3, w2, k, *, experts_seen):
    probs = torch.softmax(x @ w_router.T, dim=-1)
    weight, index = probs.topk(k, dim=-1)
    if k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in experts_seen(index, w_router.shape[0]):
        for j in range(k):
            mine = index[:, j] == e
            xe = x[mine]
            y[mine] += weight[mine, j, None] * ((F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T)
    return y


def moe_forward_needs_two_tokens(x, *args):
    if x.shape[0] < 2:
        raise ValueError("need at least two tokens")
    return check_moe_forward.reference(x, *args)


PARTLY_RIGHT = {
    "moe_forward skips the last expert": (check_moe_forward, lambda *a: _route_then_combine(
        *a, experts_seen=lambda index, e: range(e - 1))),
    "moe_forward visits only the experts of the first token": (check_moe_forward, lambda *a: _route_then_combine(
        *a, experts_seen=lambda index, e: index[0].tolist())),
    "moe_forward breaks on a batch of one": (check_moe_forward, moe_forward_needs_two_tokens),
    "capacity_keep assumes k = 1": (check_capacity_keep, lambda idx, e, f: (
        moe.arrival_rank(idx[:, 0], e) < math.ceil(f * idx.shape[0] / e))[:, None].expand(idx.shape).clone()),
    "balance_loss counts only the first choice": (check_balance_loss, lambda probs, idx: moe.load_balancing_loss(
        probs, idx[:, :1])),
    "z_loss computed in float32 by exp without a shift": (check_z_loss, lambda logits: torch.log(
        torch.exp(logits).sum(-1)).square().mean()),
    "noisy gates with 0 for the masked experts": (check_noisy_top_k, lambda x, wg, wn, eps, k: torch.softmax(
        torch.zeros_like(eps).scatter(-1, (h := x @ wg.T + eps * F.softplus(x @ wn.T)).topk(k, -1).indices,
                                      h.topk(k, -1).values), -1)),
    "later tokens: only the batch-size effect (k = 1 thinking)": (check_later_tokens, lambda idx, e, f:
        changed_with_helpers(idx[:, :1], e, f)),
}


@pytest.mark.parametrize("name", list(PARTLY_RIGHT))
def test_answers_right_on_some_branches_only_fail(name):
    ex, fn = PARTLY_RIGHT[name]
    assert ex.evaluate(fn).status == FAILED, name


# ---------------------------------------------------------------- unlisted wrong answers get no hint
UNLISTED = {
    check_moe_forward.title: lambda x, wr, w1, w3, w2, k: x.clone(),
    check_capacity_keep.title: lambda idx, e, f: torch.ones(idx.shape, dtype=torch.bool),
    check_balance_loss.title: lambda probs, idx: torch.tensor(1.0),
    check_z_loss.title: lambda logits: 3 * torch.logsumexp(logits, -1).square().mean(),
    check_noisy_top_k.title: lambda x, wg, wn, eps, k: torch.full_like(eps, 1.0 / eps.shape[-1]),
    check_later_tokens.title: lambda idx, e, f: torch.ones(idx.shape[0], dtype=torch.bool),
}


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_an_unlisted_wrong_answer_fails_without_a_wrong_hint(ex):
    result = ex.evaluate(UNLISTED[ex.title])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_summing_p_is_not_told_f_is_a_count():
    """With k = 1 a sum over P and a count for f give the same number; the k = 2 cases tell them apart."""
    result = check_balance_loss.evaluate(
        lambda probs, idx: probs.shape[-1] * (torch.bincount(idx.reshape(-1), minlength=probs.shape[-1])
                                              / idx.numel() * probs.sum(0)).sum())
    assert result.status == FAILED and "P summed over the tokens" in result.message
    assert "f is a count" not in result.message


def test_hidden_cases_cover_the_branches_the_tasks_allow():
    """k = 1 and k = E, an unused expert, the last expert chosen, a batch of one, exact ties, negative logits."""
    moe_cases = check_moe_forward.cases()
    ks = {case.args[5] for case in moe_cases}
    n_experts = {case.args[1].shape[0] for case in moe_cases}
    assert 1 in ks and any(case.args[5] == case.args[1].shape[0] for case in moe_cases)
    assert any(case.args[0].shape[0] == 1 for case in moe_cases) and len(n_experts) > 2
    unused = last_chosen = ties = False
    for x, w_router, *_, k in (case.args for case in moe_cases):
        chosen = torch.softmax(x @ w_router.T, -1).topk(k, -1).indices
        used = torch.bincount(chosen.reshape(-1), minlength=w_router.shape[0])
        unused |= bool((used == 0).any())
        last_chosen |= bool(used[-1] > 0)
        ties |= bool((w_router[:, None] == w_router[None]).all(-1).sum() > w_router.shape[0])
    assert unused and last_chosen and ties
    cap_cases = check_capacity_keep.cases()
    assert {case.args[0].shape[1] for case in cap_cases} >= {1, 2, 3}
    assert any(case.args[0].shape[0] == 1 for case in cap_cases)
    assert any(bool((case.args[0][:, 0] == case.args[1] - 1).all()) for case in cap_cases)
    noisy = check_noisy_top_k.cases()
    assert any(bool((case.args[0] @ case.args[1].T + case.args[3] * F.softplus(case.args[0] @ case.args[2].T)
                     < 0).all()) for case in noisy)
    assert {case.args[4] for case in noisy} >= {1, 2} and any(case.args[4] == case.args[1].shape[0] for case in noisy)
    assert any(bool((case.args[3] == 0).all()) for case in noisy)
    z_cases = [case.args[0] for case in check_z_loss.cases()]
    assert any(bool(torch.isinf(torch.exp(z.double()).sum(-1)).any()) for z in z_cases)
    assert any(z.shape[1] == 1 for z in z_cases)


def test_the_notebooks_two_token_example():
    """Token 0 keeps both slots alone, loses its second one when token 1 joins (capacity factor 0.5)."""
    pair = torch.tensor([[0, 1], [1, 0]])
    assert check_later_tokens.reference(pair, 2, 0.5).tolist() == [True, False]
    assert check_capacity_keep.reference(pair[:1], 2, 0.5).tolist() == [[True, True]]
    assert check_capacity_keep.reference(pair, 2, 0.5).tolist() == [[True, False], [True, False]]


def test_routing_plot_additions():
    """What notebook 05 adds to helpers.routing_plots: experts ordered by load, sorted heat maps, seed bands."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.routing_plots import experts_by_load, load_curves_figure, routing_over_training_figure
    from helpers.transformer import GPTConfig, TinyGPT

    assert experts_by_load(torch.tensor([3, 7, 7, 1])).tolist() == [1, 2, 0, 3]
    assert experts_by_load(torch.tensor([[1, 0, 0], [0, 0, 5]])).tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="counts must have at least 1 dimension"):
        experts_by_load(torch.tensor(3))
    logs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = TinyGPT(GPTConfig(vocab_size=7, d_model=8, n_heads=2), ffn_factory=lambda layer: moe.MoE(8, 3, 1, d_ff=8))
        log = moe.RoutingLog()
        for step in range(3):
            model(torch.randint(0, 7, (2, 5)))
            log(step, model, 1.0)
        logs.append(log)
    for figure in (routing_over_training_figure({"a": logs[0], "b": logs[1]}, layers=(0, 1), sort_experts=True),
                   load_curves_figure({"two seeds": logs, "one run": logs[0]})):
        plt.close(figure)
