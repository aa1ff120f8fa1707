"""Notebook 05's checkers: correct answers in a learner's own style (float32 and float64) pass; each named mistake
fails with its hint, and the natural slips of the learner trial get the right one; unlisted wrong answers fail
without a hint; answers right on some branches only fail; the hidden cases cover the extremes the statements allow
(the generic contract for every checker is in test_exercise_contract.py).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import moe
from helpers.exercises.engine import FAILED, HINT_PREFIX, NOT_ATTEMPTED, PASSED
from helpers.exercises.nb05 import (EXERCISES, check_balance_loss, check_capacity_keep, check_later_tokens,
                                    check_moe_forward, check_noisy_top_k, check_z_loss)

IDS = [ex.title for ex in EXERCISES]


def hint_of(ex, fn):
    result = ex.evaluate(fn)
    assert result.status == FAILED, result.message
    return result.hint or ""


# ---------------------------------------------------------------- correct answers in other styles
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
    for e in range(w_router.shape[0]):
        rows = expert == e
        xe = x[token[rows]]
        out = (F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T
        y.index_add_(0, token[rows], weight[rows, None] * out)
    return y


def moe_forward_other_tie_break_float64(x, w_router, w1, w3, w2, k):
    """Correct, computed in float64 (returned as float32), and on tied probabilities it picks the HIGHER expert id."""
    x, w_router, w1, w3, w2 = (t.double() for t in (x, w_router, w1, w3, w2))
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
    return y.float()


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


def capacity_keep_loops(expert_index, n_experts, capacity_factor):
    n, k = expert_index.shape
    cap = math.ceil(capacity_factor * n * k / n_experts)
    taken, kept = [0] * n_experts, torch.zeros(n, k, dtype=torch.bool)
    for j in range(k):
        for t in range(n):
            e = int(expert_index[t, j])
            kept[t, j] = taken[e] < cap
            taken[e] += 1
    return kept


def balance_loss_with_one_hot(probs, expert_index):
    n_experts = probs.shape[-1]
    f = F.one_hot(expert_index, n_experts).to(probs.dtype).sum((0, 1)) / expert_index.numel()
    return n_experts * torch.dot(f, probs.mean(0))


def balance_loss_float64(probs, expert_index):               # computed in float64, returned as float32
    probs = probs.double()
    f = torch.bincount(expert_index.reshape(-1), minlength=probs.shape[-1]).double() / expert_index.numel()
    return (probs.shape[-1] * (f * probs.mean(0)).sum()).float()


def test_balance_loss_in_float64_fails_naming_the_float32_the_statement_asks_for():
    result = check_balance_loss.evaluate(lambda p, i: balance_loss_float64(p, i).double())
    assert result.reason == "type" and "float32 tensor" in result.message, result.message


def z_grad_by_autograd(logits):
    logits = logits.detach().clone().requires_grad_(True)
    loss = torch.logsumexp(logits, -1).square().mean()
    return torch.autograd.grad(loss, logits)[0]


def z_grad_by_hand_float64(logits):
    logits = logits.double()
    top = logits.max(-1, keepdim=True).values
    e = torch.exp(logits - top)
    lse = top + torch.log(e.sum(-1, keepdim=True))
    return (2 * lse * (e / e.sum(-1, keepdim=True)) / logits.shape[0]).float()


def noisy_gates_masked_fill(x, w_gate, w_noise, noise, k):
    h = x @ w_gate.T + noise * F.softplus(x @ w_noise.T)
    kth = h.topk(k, dim=-1).values[:, -1:]
    return torch.softmax(h.masked_fill(h < kth, float("-inf")), dim=-1)


def noisy_gates_renormalised(x, w_gate, w_noise, noise, k):
    """Softmax over all experts, keep the top k, renormalise: the same gates as a softmax over the kept."""
    h = x @ w_gate.T + noise * torch.nn.functional.softplus(x @ w_noise.T)
    p = torch.softmax(h, dim=-1)
    value, index = p.topk(k, dim=-1)
    return torch.zeros_like(p).scatter(-1, index, value / value.sum(-1, keepdim=True))


def noisy_gates_float64(x, w_gate, w_noise, noise, k):
    x, w_gate, w_noise, noise = (t.double() for t in (x, w_gate, w_noise, noise))
    h = x @ w_gate.T + noise * F.softplus(x @ w_noise.T)
    index = h.topk(k, dim=-1).indices
    return torch.softmax(torch.full_like(h, -math.inf).scatter(-1, index, h.gather(-1, index)), dim=-1).float()


def changed_with_helpers(expert_index, n_experts, capacity_factor):
    n = expert_index.shape[0]
    full = capacity_keep_vectorised(expert_index, n_experts, capacity_factor)
    return torch.tensor([not torch.equal(capacity_keep_vectorised(expert_index[: t + 1], n_experts, capacity_factor)[t],
                                         full[t]) for t in range(n)])


def balance_loss_bincount_no_minlength(probs, expert_index):
    """Trial 2026-11-27 (P1): bincount without minlength; its counts are short when the last expert gets no slot."""
    f = torch.bincount(expert_index.reshape(-1)).float() / expert_index.numel()
    return probs.shape[-1] * (f * probs.mean(0)).sum()


def balance_loss_bincount_sliced(probs, expert_index):
    """Correct: bincount without minlength, P sliced to the experts counted (the rest have f = 0)."""
    f = torch.bincount(expert_index.reshape(-1)).float() / expert_index.numel()
    return probs.shape[-1] * (f * probs.mean(0)[: f.numel()]).sum()


FLOAT64_RETURNED = [  # trial learner 2026-11-27e (M1): right values, returned as float64 where the statement says float32
    (check_moe_forward, lambda *a: moe_forward_other_tie_break_float64(*a).double()),
    (check_z_loss, lambda logits: z_grad_by_hand_float64(logits).double()),
    (check_noisy_top_k, lambda *a: noisy_gates_float64(*a).double()),
]


@pytest.mark.parametrize("ex, fn", FLOAT64_RETURNED, ids=["moe_forward", "z_loss_grad", "noisy_top_k_gates"])
def test_a_float64_result_fails_naming_the_float32_the_statement_asks_for(ex, fn):
    result = ex.evaluate(fn)
    assert result.reason == "type" and "float32 tensor" in result.message, result.message


OTHER_CORRECT = [
    (check_moe_forward, moe_forward_sorted),
    (check_moe_forward, moe_forward_other_tie_break_float64),
    (check_capacity_keep, capacity_keep_loops),
    (check_balance_loss, balance_loss_with_one_hot),
    (check_balance_loss, balance_loss_float64),
    (check_balance_loss, balance_loss_bincount_sliced),
    (check_z_loss, z_grad_by_hand_float64),
    (check_noisy_top_k, noisy_gates_masked_fill),
    (check_noisy_top_k, noisy_gates_renormalised),
    (check_noisy_top_k, noisy_gates_float64),
    (check_later_tokens, changed_with_helpers),
]


def z_grad_by_backward(logits):
    logits = logits.detach().clone().requires_grad_(True)
    torch.logsumexp(logits, -1).square().mean().backward()
    return logits.grad


def z_grad_by_torch_func(logits):
    return torch.func.grad(lambda l: torch.logsumexp(l, -1).square().mean())(logits)


def z_grad_with_grad_enabled(logits):
    with torch.enable_grad():
        return z_grad_by_autograd(logits)


def z_grad_by_hand_in_place(logits):
    """Correct by hand: subtracts each row's maximum in place on a copy (runs under torch.no_grad too)."""
    top = logits.max(-1, keepdim=True).values
    e = logits.clone().sub_(top).exp_()
    return 2 / logits.shape[0] * (top + e.sum(-1, keepdim=True).log()) * e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("fn", [z_grad_by_autograd, z_grad_by_backward, z_grad_by_torch_func,
                                z_grad_with_grad_enabled],
                         ids=["autograd.grad", "backward", "torch.func.grad", "enable_grad"])
def test_a_z_loss_gradient_through_autograd_fails_naming_it(fn):
    """Exercise 4's statement asks for the formula: right values through autograd fail, with a message naming it."""
    result = check_z_loss.evaluate(fn)
    assert result.status == FAILED and "through autograd" in result.message, result.message


@pytest.mark.parametrize("fn", [z_grad_by_hand_float64, z_grad_by_hand_in_place])
def test_a_z_loss_gradient_by_hand_passes(fn):
    assert check_z_loss.evaluate(fn).passed


def test_a_capacity_keep_through_arrival_rank_fails_and_the_helper_is_restored():
    """Exercise 2 asks for the rule written out: right values through `arrival_rank` (the notebook imports it, so
    it is a natural shortcut) fail with a message naming it, under any name, and leave `arrival_rank` as it was."""
    original = moe.arrival_rank
    rank = moe.arrival_rank

    def renamed(expert_index, n_experts, capacity_factor):
        n, k = expert_index.shape
        return rank(expert_index, n_experts) < math.ceil(capacity_factor * n * k / n_experts)

    for fn in (capacity_keep_vectorised, renamed):
        result = check_capacity_keep.evaluate(fn)
        assert result.status == FAILED and "arrival_rank" in result.message, result.message
    assert moe.arrival_rank is original and rank is original and globals()["moe"].arrival_rank is original
    assert check_capacity_keep.evaluate(capacity_keep_loops).status == PASSED


def balance_loss_through_an_alias(probs, expert_index):
    loss = moe.load_balancing_loss                              # the notebook imports it under its own name
    return loss(probs, expert_index)


@pytest.mark.parametrize("ex, fn, named", [
    (check_moe_forward, moe_forward_with_the_course_layer, "MoE.forward"),
    (check_balance_loss, moe.load_balancing_loss, "load_balancing_loss"),
    (check_balance_loss, lambda p, i: moe.load_balancing_loss(p, i), "load_balancing_loss"),
    (check_balance_loss, balance_loss_through_an_alias, "load_balancing_loss"),
], ids=["MoE layer", "load_balancing_loss", "lambda", "alias"])
def test_exercises_1_and_3_through_helpers_moe_fail_naming_the_function(ex, fn, named):
    """Exercises 1 and 3 ask for the layer and the loss written from the input tensors: right values through
    helpers.moe fail, with a message naming what ran, and the profiler is removed afterwards."""
    import sys
    before = sys.getprofile()
    result = ex.evaluate(fn)
    assert result.status == FAILED and "through helpers.moe" in result.message and named in result.message, \
        result.message
    assert sys.getprofile() is before


@pytest.mark.parametrize("ex, fn", OTHER_CORRECT, ids=[fn.__name__ for _, fn in OTHER_CORRECT])
def test_other_correct_answers_pass(ex, fn):
    result = ex.evaluate(fn)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_references_pass_and_blank_stubs_are_not_attempted(ex):
    assert ex.evaluate(lambda *a, **k: ex.reference(*a, **k)).status == PASSED

    def stub(*args):
        raise NotImplementedError

    assert ex.evaluate(stub).status == NOT_ATTEMPTED


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_named_mistake_fails_with_its_own_hint(ex):
    for hint, wrong in ex.mistakes:
        result = ex.evaluate(wrong)
        assert result.status == FAILED, hint
        assert result.hint == hint, (hint, result.message)


# ---------------------------------------------------------------- the learner trial's slips get the right hint
def later_tokens_off_by_one(expert_index, n_experts, capacity_factor):
    """The trial's slip: the loop starts at t = 1, so token 0 is never compared."""
    n, k = expert_index.shape
    full = capacity_keep_vectorised(expert_index, n_experts, capacity_factor)
    changed = torch.zeros(n, dtype=torch.bool)
    for t in range(1, n):
        changed[t] = not torch.equal(capacity_keep_vectorised(expert_index[: t + 1], n_experts, capacity_factor)[t],
                                     full[t])
    return changed


def later_tokens_all_slots(expert_index, n_experts, capacity_factor):
    full = capacity_keep_vectorised(expert_index, n_experts, capacity_factor)
    return torch.stack([(capacity_keep_vectorised(expert_index[: t + 1], n_experts, capacity_factor)[t] != full[t]).all()
                        for t in range(expert_index.shape[0])])


def noisy_gates_softmax_over_tokens(x, w_gate, w_noise, noise, k):
    """The trial's slip: the softmax over dim 0."""
    h = x @ w_gate.T + noise * F.softplus(x @ w_noise.T)
    kth = h.topk(k, dim=-1).values[:, -1:]
    return torch.softmax(h.masked_fill(h < kth, float("-inf")), dim=0)


def balance_loss_first_choice(probs, expert_index):
    """The trial's slip: only each token's first choice counted."""
    n_experts = probs.shape[-1]
    f = torch.bincount(expert_index[:, 0], minlength=n_experts).float() / expert_index.shape[0]
    return n_experts * (f * probs.mean(0)).sum()


def z_grad_shift_not_added_back(logits):
    """The trial's z-loss slip, carried over: shifted by the row maximum, never added back."""
    shifted = logits - logits.max(-1, keepdim=True).values
    lse = torch.log(torch.exp(shifted).sum(-1, keepdim=True))
    return 2 * lse * torch.softmax(logits, -1) / logits.shape[0]


def z_grad_naive_exp(logits):
    e = torch.exp(logits)
    return 2 * torch.log(e.sum(-1, keepdim=True)) * e / e.sum(-1, keepdim=True) / logits.shape[0]


def moe_forward_naive_softmax(x, w_router, w1, w3, w2, k):
    logits = x @ w_router.T
    probs = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    weight, index = probs.topk(k, dim=-1)
    if k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for j in range(k):
        for e in range(w_router.shape[0]):
            mine = index[:, j] == e
            xe = x[mine]
            y[mine] += weight[mine, j, None] * ((F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T)
    return y


TRIAL_SLIPS = {
    "05 Ex6 off by one (loop from t = 1)": (check_later_tokens, later_tokens_off_by_one, "token 0 is never compared"),
    "05 Ex6 .all() over a token's slots": (check_later_tokens, later_tokens_all_slots, "ANY of its slots"),
    "05 Ex5 softmax over dim 0": (check_noisy_top_k, noisy_gates_softmax_over_tokens, "softmax ran over the tokens"),
    "05 Ex3 first choice only": (check_balance_loss, balance_loss_first_choice, "only each token's first choice"),
    "05 Ex3 bincount without minlength (trial 2026-11-27)": (check_balance_loss, balance_loss_bincount_no_minlength,
                                                             "minlength=E"),
    "05 Ex4 shifted by the max, never added back": (check_z_loss, z_grad_shift_not_added_back, "did not add it back"),
    "05 Ex4 exp overflows": (check_z_loss, z_grad_naive_exp, "subtract each row's maximum"),
    "05 Ex1 softmax by exp overflows": (check_moe_forward, moe_forward_naive_softmax, "overflows"),
}


@pytest.mark.parametrize("name", list(TRIAL_SLIPS))
def test_natural_slips_get_the_right_hint(name):
    ex, fn, words = TRIAL_SLIPS[name]
    assert words in hint_of(ex, fn), name


def test_the_off_by_one_is_not_blamed_on_the_first_choice():
    """Trial: the off-by-one was told "you compared only the first choice"; a case where a later token changes in
    its second choice only tells the two apart."""
    message = check_later_tokens.evaluate(later_tokens_off_by_one).message
    assert "first choice" not in message and HINT_PREFIX in message


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
    "capacity_keep never drops (C taken as N)": (check_capacity_keep, lambda idx, e, f: torch.ones(idx.shape, dtype=torch.bool)),
    "capacity_keep with C = round, not ceil": (check_capacity_keep, lambda idx, e, f: moe.arrival_rank(idx, e) < max(
        1, round(f * idx.numel() / e))),
    "balance_loss assumes k = 2": (check_balance_loss, lambda probs, idx: moe.load_balancing_loss(probs, idx[:, :2])),
    "z grad forgets the single-expert case": (check_z_loss, lambda logits: check_z_loss.reference(logits)
                                               if logits.shape[1] > 1 else torch.zeros_like(logits)),
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
    check_z_loss.title: lambda logits: 3 * z_grad_by_autograd(logits),
    check_noisy_top_k.title: lambda x, wg, wn, eps, k: torch.full_like(eps, 1.0 / eps.shape[-1]),
    check_later_tokens.title: lambda idx, e, f: torch.ones(idx.shape[0], dtype=torch.bool),
    "Exercise 7 (both losses in training)": lambda logits, idx, alpha, z_coef: (alpha + z_coef) * logits.sum(),
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


# ---------------------------------------------------------------- the hidden cases cover the extremes
def test_moe_forward_cases_cover_the_extremes():
    """k = 1 and k = E, a batch of one (also at k = E), an expert nobody picks, the last expert chosen, exact ties
    between identical experts, router logits in the hundreds."""
    cases = [case.args for case in check_moe_forward.cases()]
    assert any(k == 1 for *_, k in cases) and any(k == wr.shape[0] for _, wr, *_, k in cases)
    assert any(x.shape[0] == 1 and k == wr.shape[0] for x, wr, *_, k in cases)
    unused = last_chosen = ties = huge = False
    for x, w_router, *_, k in cases:
        logits = x @ w_router.T
        chosen = torch.softmax(logits, -1).topk(k, -1).indices
        used = torch.bincount(chosen.reshape(-1), minlength=w_router.shape[0])
        unused |= bool((used == 0).any())
        last_chosen |= bool(used[-1] > 0)
        ties |= bool((w_router[:, None] == w_router[None]).all(-1).sum() > w_router.shape[0])
        huge |= bool(logits.abs().max() > 100)
    assert unused and last_chosen and ties and huge


def test_capacity_cases_cover_the_extremes():
    cases = [case.args for case in check_capacity_keep.cases()]
    assert {idx.shape[1] for idx, *_ in cases} >= {1, 2, 3}
    assert any(idx.shape[0] == 1 for idx, *_ in cases)
    assert any(idx.shape[1] == e for idx, e, _ in cases)                                 # k = E
    assert any(bool((idx[:, 0] == e - 1).all()) for idx, e, _ in cases)                 # the last expert
    assert any(bool((torch.bincount(idx.reshape(-1), minlength=e) == 0).any()) for idx, e, _ in cases)
    exact = [f * idx.numel() / e for idx, e, f in cases]
    assert any(v == int(v) for v in exact) and any(v != int(v) for v in exact)           # whole and rounded-up C
    caps = [math.ceil(v) for v in exact]
    assert any(c <= idx.numel() / e / 2 for c, (idx, e, _) in zip(caps, cases))          # tiny capacity
    assert any(bool((moe.arrival_rank(idx, e) < c).all()) for c, (idx, e, _) in zip(caps, cases))   # nothing dropped
    for idx, e, f in cases:                                                              # factors exact in binary
        assert f * 4 == int(f * 4)
    # threshold neighbours: some expert gets exactly C slots, another C + 1
    assert any(c in torch.bincount(idx.reshape(-1), minlength=e).tolist() for c, (idx, e, _) in zip(caps, cases))
    assert any(c + 1 in torch.bincount(idx.reshape(-1), minlength=e).tolist() for c, (idx, e, _) in zip(caps, cases))


def test_balance_cases_cover_the_extremes():
    cases = [case.args for case in check_balance_loss.cases()]
    assert {idx.shape[1] for _, idx in cases} >= {1, 2, 3} and any(idx.shape[1] == p.shape[1] for p, idx in cases)
    assert any(p.shape[0] == 1 for p, _ in cases)
    assert any(bool((torch.bincount(idx.reshape(-1), minlength=p.shape[1]) == 0).any()) for p, idx in cases)
    assert any(bool(((p == 0) | (p == 1)).float().mean() > 0.5) for p, _ in cases)       # saturated probabilities
    assert all(p.dtype == torch.float32 and idx.dtype == torch.int64 for p, idx in cases)


def test_z_cases_cover_the_extremes():
    logits = [case.args[0] for case in check_z_loss.cases()]
    assert any(bool(torch.isinf(torch.exp(z.double()).sum(-1)).any()) for z in logits)  # overflows float64
    assert any(bool((torch.exp(z).sum(-1) == 0).any()) for z in logits)                 # underflows float32
    assert any(bool((z.max(-1).values - z.min(-1).values > 300).any()) for z in logits)  # rows spanning hundreds
    assert any(bool((torch.logsumexp(z, -1) < 0).any()) for z in logits)                # a negative logsumexp
    assert any(z.shape[1] == 1 for z in logits) and any(z.shape[0] == 1 for z in logits)
    assert any(bool((z[:, :, None] == z[:, None, :]).sum() > z.numel()) for z in logits)  # ties


def test_noisy_cases_cover_the_extremes():
    cases = [case.args for case in check_noisy_top_k.cases()]
    h = [x @ wg.T + eps * F.softplus(x @ wn.T) for x, wg, wn, eps, _ in cases]
    assert any(bool((v < 0).all()) for v in h) and any(bool(v.abs().max() > 100) for v in h)
    assert {k for *_, k in cases} >= {1, 2} and any(k == wg.shape[0] for _, wg, _, _, k in cases)
    assert any(bool((eps == 0).all()) for *_, eps, _ in cases) and any(x.shape[0] == 1 for x, *_ in cases)
    for v, (*_, k) in zip(h, cases):                  # no tie at the k-th place (the statement promises it) ...
        if k < v.shape[1]:
            top = v.topk(k + 1, -1).values
            assert bool((top[:, k - 1] > top[:, k]).all())
    assert any(bool((v.topk(2, -1).values[:, 0] == v.topk(2, -1).values[:, 1]).all()) for v in h)  # ... but inside


def test_later_token_cases_cover_the_extremes():
    cases = [case.args for case in check_later_tokens.cases()]
    assert {idx.shape[1] for idx, *_ in cases} >= {1, 2, 3} and any(idx.shape[1] == e for idx, e, _ in cases)
    assert any(idx.shape[0] == 1 for idx, *_ in cases)
    answers = [check_later_tokens.reference(*args) for args in cases]
    assert any(not a.any() for a in answers) and any(a[0] for a in answers)              # nothing changes; token 0 does
    assert any(bool((torch.bincount(idx.reshape(-1), minlength=e) == 0).any()) for idx, e, _ in cases)


def test_the_notebooks_two_token_example():
    """Token 0 keeps both slots alone, loses its second one when token 1 joins (capacity factor 0.5)."""
    pair = torch.tensor([[0, 1], [1, 0]])
    assert check_later_tokens.reference(pair, 2, 0.5).tolist() == [True, False]
    assert check_capacity_keep.reference(pair[:1], 2, 0.5).tolist() == [[True, True]]
    assert check_capacity_keep.reference(pair, 2, 0.5).tolist() == [[True, False], [True, False]]


def test_z_grad_reference_is_the_autograd_gradient_in_float64():
    logits = torch.randn(9, 5, dtype=torch.float64) * 3
    torch.testing.assert_close(check_z_loss.reference(logits), z_grad_by_autograd(logits))


def test_routing_plot_additions():
    """What notebook 05 uses from helpers.routing_plots: experts ordered by load, sorted heat maps, seed bands."""
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


# ---------------------------------------------------------------- checks made once every value passes
def test_an_integer_mask_fails_with_a_dtype_message():
    result = check_capacity_keep.evaluate(lambda *args: check_capacity_keep.reference(*args).long())
    assert result.status == FAILED and "bool" in result.message and "int64" in result.message


@pytest.mark.parametrize("cut", ["detach", "item"])
def test_a_balance_loss_without_its_gradient_through_p_fails(cut):
    def balance_loss(probs, expert_index):
        value = check_balance_loss.reference(probs.detach(), expert_index)
        return value if cut == "detach" else torch.tensor(value.item())

    result = check_balance_loss.evaluate(balance_loss)
    assert result.status == FAILED and "gradient" in result.message


def test_a_balance_loss_with_the_wrong_gradient_fails():
    """Right value, but the gradient also flows through a soft f (the value of f·P is unchanged by the trick)."""
    def balance_loss(probs, expert_index):
        value = check_balance_loss.reference(probs, expert_index)
        return value + 0.0 * probs.pow(2).sum() + (probs.sum() - probs.detach().sum())

    result = check_balance_loss.evaluate(balance_loss)
    assert result.status == FAILED and "gradient with respect to probs is wrong" in result.message


def test_the_float64_overflow_gets_its_own_hint():
    def z_loss_grad(logits):
        l = logits.double()
        return 2.0 / l.shape[0] * torch.log(torch.exp(l).sum(-1, keepdim=True)) * torch.exp(l) / torch.exp(l).sum(
            -1, keepdim=True)

    assert "float64 only moves the overflow" in hint_of(check_z_loss, z_loss_grad)


def test_a_naive_logsumexp_beside_torch_softmax_is_told_to_use_torch_logsumexp():
    def z_loss_grad(logits):
        lse = torch.log(torch.exp(logits).sum(-1, keepdim=True))
        return 2.0 / logits.shape[0] * lse * torch.softmax(logits, dim=-1)

    assert "torch.logsumexp" in hint_of(check_z_loss, z_loss_grad)


# ---------------------------------------------------------------- declared domains and the wrong answers tried at their corners
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_the_hidden_cases_reach_every_declared_corner(ex):
    assert ex.domain is not None and ex.uncovered() == []


def _every_expert(x, w1, w3, w2):
    h = F.silu(torch.einsum("nd,efd->enf", x, w1)) * torch.einsum("nd,efd->enf", x, w3)
    return torch.einsum("enf,edf->end", h, w2)


def moe_dense_mixture(x, w_router, w1, w3, w2, k):
    """Breaks "the top k": every expert runs, weighted by its probability."""
    probs = torch.softmax(x @ w_router.T, -1)
    return torch.einsum("ne,end->nd", probs, _every_expert(x, w1, w3, w2))


def moe_weights_from_logits(x, w_router, w1, w3, w2, k):
    """Breaks "the combine weights are the chosen probabilities": the chosen logits, divided by their sum."""
    logits = x @ w_router.T
    weight, index = logits.topk(k, -1)
    weight = weight / weight.sum(-1, keepdim=True) if k > 1 else torch.softmax(logits, -1).gather(-1, index)
    outs, tokens = _every_expert(x, w1, w3, w2), torch.arange(x.shape[0])
    return sum(weight[:, j, None] * outs[index[:, j], tokens] for j in range(k))


def capacity_rounded(expert_index, n_experts, capacity_factor):
    """Breaks "C = ceil(c · N k / E)": Python's round."""
    n, k = expert_index.shape
    return moe.arrival_rank(expert_index, n_experts) < round(capacity_factor * n * k / n_experts)


def capacity_first_choices_always_kept(expert_index, n_experts, capacity_factor):
    """Breaks "each expert takes at most C slots": first choices are never dropped."""
    n, k = expert_index.shape
    kept = moe.arrival_rank(expert_index, n_experts) < math.ceil(capacity_factor * n * k / n_experts)
    kept[:, 0] = True
    return kept


def z_grad_clamped_logits(logits):
    """Breaks "it must work for logits in the hundreds": clamps them below exp's overflow instead."""
    clamped = logits.clamp(max=80.0)
    e = torch.exp(clamped)
    return 2 / logits.shape[0] * torch.log(e.sum(-1, keepdim=True)) * e / e.sum(-1, keepdim=True)


def z_grad_of_the_mean_lse(logits):
    """Breaks "lse squared": the gradient of the mean logsumexp."""
    return torch.softmax(logits, -1) / logits.shape[0]


def noisy_gates_softplus_on_the_noise(x, w_gate, w_noise, noise, k):
    """Breaks "ε ⊙ softplus(x W_noiseᵀ)": the softplus lands on ε."""
    h = x @ w_gate.T + F.softplus(noise) * (x @ w_noise.T)
    index = h.topk(k, -1).indices
    return torch.softmax(torch.full_like(h, -math.inf).scatter(-1, index, h.gather(-1, index)), -1)


def later_tokens_one_direction(expert_index, n_experts, capacity_factor):
    """Breaks "differs in any slot": only slots lost once later tokens arrive count, not slots gained."""
    n, k = expert_index.shape
    full = moe.arrival_rank(expert_index, n_experts) < math.ceil(capacity_factor * n * k / n_experts)
    out = torch.zeros(n, dtype=torch.bool)
    for t in range(n):
        alone = (moe.arrival_rank(expert_index[: t + 1], n_experts)
                 < math.ceil(capacity_factor * (t + 1) * k / n_experts))[t]
        out[t] = bool((alone & ~full[t]).any())
    return out


def balance_loss_through_item(probs, expert_index):
    """Breaks "a 0-dim tensor that keeps its gradient through P": a new tensor from a Python float."""
    n_experts = probs.shape[-1]
    f = torch.bincount(expert_index.reshape(-1), minlength=n_experts).float() / expert_index.numel()
    return torch.tensor(float(n_experts * (f * probs.mean(0)).sum()))


DOMAIN_SLIPS = [(check_moe_forward, moe_dense_mixture), (check_moe_forward, moe_weights_from_logits),
                (check_capacity_keep, capacity_rounded), (check_capacity_keep, capacity_first_choices_always_kept),
                (check_z_loss, z_grad_clamped_logits), (check_z_loss, z_grad_of_the_mean_lse),
                (check_noisy_top_k, noisy_gates_softplus_on_the_noise), (check_later_tokens, later_tokens_one_direction),
                (check_balance_loss, balance_loss_through_item)]


@pytest.mark.parametrize("ex, fn", DOMAIN_SLIPS, ids=[fn.__name__ for _, fn in DOMAIN_SLIPS])
def test_natural_wrong_answers_at_the_corners_fail(ex, fn):
    assert ex.evaluate(fn).status == FAILED


def test_the_clamped_z_grad_fails_only_where_exp_would_overflow():
    result = check_z_loss.evaluate(z_grad_clamped_logits)
    assert "exp overflows" in result.message


def test_noisy_top_k_switch_weight_at_k_1_is_named():
    """Review 05-round8: Switch's weight p at k = 1 (right at k >= 2) fails with a hint naming it."""
    def gates(x, w_gate, w_noise, noise, k):
        h = x @ w_gate.T + noise * F.softplus(x @ w_noise.T)
        if k == 1:
            p = torch.softmax(h, -1)
            value, index = p.topk(1, -1)
            return torch.zeros_like(p).scatter(-1, index, value)
        return noisy_gates_masked_fill(x, w_gate, w_noise, noise, k)

    assert "Switch's weight" in hint_of(check_noisy_top_k, gates)


@pytest.mark.parametrize("per_column_capacity", ["N·k/E", "N/E"])
def test_capacity_keep_a_queue_per_choice_column_is_named(per_column_capacity):
    """Review 05-round9: each choice column given its own queue (and capacity) fails with a hint naming it."""
    def capacity_keep(expert_index, n_experts, capacity_factor):
        n, k = expert_index.shape
        cap = math.ceil(capacity_factor * n * (k if per_column_capacity == "N·k/E" else 1) / n_experts)
        kept = torch.zeros(n, k, dtype=torch.bool)
        for j in range(k):
            seen = [0] * n_experts
            for t in range(n):
                e = int(expert_index[t, j])
                kept[t, j] = seen[e] < cap
                seen[e] += 1
        return kept

    assert "its own queue" in hint_of(check_capacity_keep, capacity_keep)


def test_noisy_top_k_clean_gate_values_are_named():
    """Review 05-round14: experts chosen by the noisy H, gates from the clean logits."""
    import torch.nn.functional as F

    def clean_gates(x, wg, wn, eps, k):
        h = x @ wg.T + eps * F.softplus(x @ wn.T)
        index = h.topk(k, -1).indices
        clean = x @ wg.T
        return torch.softmax(torch.full_like(clean, float("-inf")).scatter(-1, index, clean.gather(-1, index)), -1)

    result = check_noisy_top_k.evaluate(clean_gates)
    assert result.status == "failed" and "clean logits" in result.message, result.message


def test_the_solutions_copy_of_section_5s_training_loop_is_the_notebooks():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "notebooks"
    cell = lambda path, cid: next("".join(c["source"]) for c in json.loads(path.read_text())["cells"]   # noqa: E731
                                   if c.get("id") == cid)
    lesson = cell(root / "05_mixture_of_experts.ipynb", "open-loop").split("\n\n\nloads =")[0]
    copy = cell(root / "solutions" / "05_mixture_of_experts.ipynb", "ex7-loop")
    assert "def train_small_moe" in lesson and copy.endswith(lesson)


def test_aux_loss_gradient_and_helpers_checks():
    from helpers.exercises.nb05 import check_aux_loss

    def right(logits, expert_index, alpha, z_coef):
        probs, n_experts = torch.softmax(logits, -1), logits.shape[-1]
        f = torch.bincount(expert_index.reshape(-1), minlength=n_experts) / expert_index.numel()
        return alpha * n_experts * (f * probs.mean(0)).sum() + z_coef * torch.logsumexp(logits, -1).square().mean()

    def no_gradient(logits, expert_index, alpha, z_coef):
        return right(logits, expert_index, alpha, z_coef).detach()

    def p_detached(logits, expert_index, alpha, z_coef):
        probs, n_experts = torch.softmax(logits, -1).detach(), logits.shape[-1]
        f = torch.bincount(expert_index.reshape(-1), minlength=n_experts) / expert_index.numel()
        return alpha * n_experts * (f * probs.mean(0)).sum() + z_coef * torch.logsumexp(logits, -1).square().mean()

    def through_helpers(logits, expert_index, alpha, z_coef):
        from helpers.moe import load_balancing_loss, router_z_loss
        return alpha * load_balancing_loss(torch.softmax(logits, -1), expert_index) + z_coef * router_z_loss(logits)

    assert check_aux_loss.evaluate(right).passed
    assert "carries no gradient" in check_aux_loss.evaluate(no_gradient).message
    assert "gradient with respect to the logits is wrong" in check_aux_loss.evaluate(p_detached).message
    assert "through helpers.moe" in check_aux_loss.evaluate(through_helpers).message


def test_aux_loss_names_a_missing_factor_e():
    from helpers.exercises.nb05 import check_aux_loss

    def without_e(logits, expert_index, alpha, z_coef):
        probs, n_experts = torch.softmax(logits, -1), logits.shape[-1]
        f = torch.bincount(expert_index.reshape(-1), minlength=n_experts) / expert_index.numel()
        return alpha * (f * probs.mean(0)).sum() + z_coef * torch.logsumexp(logits, -1).square().mean()

    result = check_aux_loss.evaluate(without_e)
    assert not result.passed and "the factor E" in result.message


def test_aux_loss_names_first_choices_only():
    """Review 05-r47: section 5's old loop copied into exercise 7 (f from each token's first choice) got no hint."""
    from helpers.exercises.nb05 import check_aux_loss

    def first_choice_only(logits, expert_index, alpha, z_coef):
        n, n_experts = logits.shape
        f = torch.bincount(expert_index[:, 0], minlength=n_experts) / n
        balance = n_experts * (f * torch.softmax(logits, -1).mean(0)).sum()
        return alpha * balance + z_coef * torch.logsumexp(logits, -1).square().mean()

    result = check_aux_loss.evaluate(first_choice_only)
    assert not result.passed and "only each token's first choice" in result.message, result.message


def test_aux_loss_names_a_summed_or_logit_z_loss():
    """Review 05-r48: a z-loss summed over the tokens, or the mean square of the logits, got no hint."""
    from helpers.exercises.nb05 import check_aux_loss

    def balance(logits, expert_index):
        n_experts = logits.shape[-1]
        f = torch.bincount(expert_index.reshape(-1), minlength=n_experts) / expert_index.numel()
        return n_experts * (f * torch.softmax(logits, -1).mean(0)).sum()

    def summed(logits, expert_index, alpha, z_coef):
        return alpha * balance(logits, expert_index) + z_coef * torch.logsumexp(logits, -1).square().sum()

    def logits_squared(logits, expert_index, alpha, z_coef):
        return alpha * balance(logits, expert_index) + z_coef * logits.square().mean()

    result = check_aux_loss.evaluate(summed)
    assert not result.passed and "1/N of the mean is missing" in result.message, result.message
    result = check_aux_loss.evaluate(logits_squared)
    assert not result.passed and "mean square of the logits" in result.message, result.message


def test_aux_loss_names_an_unsquared_z_loss():
    """Review 05-r50: a z-loss as the mean log-sum-exp, not its mean square, was caught by value only."""
    from helpers.exercises.nb05 import check_aux_loss

    def unsquared(logits, expert_index, alpha, z_coef):
        n_experts = logits.shape[-1]
        f = torch.bincount(expert_index.reshape(-1), minlength=n_experts) / expert_index.numel()
        balance = n_experts * (f * torch.softmax(logits, -1).mean(0)).sum()
        return alpha * balance + z_coef * torch.logsumexp(logits, -1).mean()

    result = check_aux_loss.evaluate(unsquared)
    assert not result.passed and "the z-loss is not squared" in result.message, result.message
