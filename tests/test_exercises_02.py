"""Notebook 02's checkers: the weight layout of the hidden cases, unlisted wrong answers, other correct forms,
the transposed-weight and None-bias hints, branch coverage of the hidden cases (the generic contract for every
checker is in test_exercise_contract.py).
"""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.costs import measure_flops
from helpers.exercises import nb02 as ex
from helpers.exercises.engine import FAILED, PASSED
from helpers.ffn import FFN
from helpers.residual import NORMS, stack_forward

ROOT = Path(__file__).resolve().parent.parent

EXERCISES = {
    "forward": ex.check_ffn_forward,
    "flops": ex.check_step_flops,
    "stack": ex.check_stack_forward,
    "grads": ex.check_layer_grad_norms,
    "contributions": ex.check_contributions,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "forward": lambda x, W1, b1, W2, b2: F.linear(F.gelu(F.linear(x, W1, b1)), W2, None if b2 is None else 2 * b2),
    "flops": lambda n, d, d_ff, i, w: ex._step_flops(n, d, d_ff, i, w) + 1,
    "stack": lambda x, ffns, norms, norm, residual: stack_forward(x, ffns, norms, norm=norm, residual=residual) * 1.01,
    "grads": lambda *args: ex._grad_norms(*args) * 1.01,
    "contributions": lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.T * 1.01,
}

#: correct answers written differently from the reference
OTHER_CORRECT = {
    "forward": lambda x, W1, b1, W2, b2: (
        lambda m: m @ W2.T + (0 if b2 is None else b2))(
        0.5 * (h := x @ W1.T + (0 if b1 is None else b1)) * (1 + torch.erf(h / 2 ** 0.5))),
    "flops": lambda n, d, d_ff, i, w: 2 * n * d * d_ff * (2 + 2 * w + (i or w) + i),
    "stack": lambda x, ffns, norms, norm, residual: stack_forward(x, ffns, norms, norm=norm, residual=residual),
    "contributions": lambda f, x: torch.einsum("ti,di->tid", f.hidden(x), f.w2.weight),
}


def _grads_by_backward(x, target, ffns, norms, norm, residual):
    """A learner who uses .backward() and clears the gradients first."""
    for ffn in ffns:
        ffn.zero_grad()
    F.mse_loss(stack_forward(x, ffns, norms, norm=norm, residual=residual), target).backward()
    return torch.stack([ffn.w1.weight.grad.norm() for ffn in ffns])


OTHER_CORRECT["grads"] = _grads_by_backward


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


@pytest.mark.parametrize("name", OTHER_CORRECT)
def test_other_correct_forms_pass(name):
    result = EXERCISES[name].evaluate(OTHER_CORRECT[name])
    assert result.status == PASSED, result.message


def test_kinds_two_investigate_and_numbered_titles():
    assert [e.kind for e in ex.EXERCISES] == ["build", "investigate", "build", "investigate", "build"]
    assert [e.title.split(" (")[0] for e in ex.EXERCISES] == [f"Exercise {i}" for i in range(1, 6)]


# ---------------------------------------------------------------- the one weight layout (nn.Linear's)


def test_forward_hidden_cases_pass_weights_in_nn_linear_layout():
    """W1 is (d_ff, d_model) and W2 is (d_model, d_ff) in every hidden case, as ffn.w1.weight / ffn.w2.weight."""
    for case in ex.check_ffn_forward.cases():
        x, W1, b1, W2, b2 = case.args
        d_model, d_ff = x.shape[-1], W1.shape[0]
        assert W1.shape == (d_ff, d_model), case.note
        assert W2.shape == (d_model, d_ff), case.note
        if b1 is not None:
            assert b1.shape == (d_ff,) and b2.shape == (d_model,)
        reference = ex.check_ffn_forward.reference(x, W1, b1, W2, b2)
        ffn = FFN(d_model, d_ff, bias=b1 is not None)
        with torch.no_grad():
            ffn.w1.weight.copy_(W1)
            ffn.w2.weight.copy_(W2)
            if b1 is not None:
                ffn.w1.bias.copy_(b1)
                ffn.w2.bias.copy_(b2)
            assert torch.allclose(reference, ffn(x), atol=1e-5)


def test_contribution_values_are_columns_of_w2():
    for case in ex.check_contributions.cases():
        ffn, x = case.args
        out = ex.check_contributions.reference(ffn, x)
        m = ffn.hidden(x).detach()
        i = ffn.d_ff - 1
        assert torch.allclose(out[:, i], m[:, i:i + 1] * ffn.w2.weight[:, i].detach())


def test_learner_notebook_states_the_layout():
    cells = json.loads((ROOT / "notebooks" / "02_expand_activate_contract.ipynb").read_text(encoding="utf-8"))["cells"]
    stub = next("".join(c["source"]) for c in cells if "def ffn_forward" in "".join(c["source"]))
    assert "W1: (d_ff, d_model)" in stub and "W2: (d_model, d_ff)" in stub
    assert "(d_model, d_ff); b1" not in stub


@pytest.mark.parametrize("flips, words", [
    ((True, False), "W1 is used in the wrong orientation"),
    ((False, True), "W2 is used in the wrong orientation"),
    ((True, True), "both weights are used in the wrong orientation"),
])
def test_forward_says_which_weight_is_transposed(flips, words):
    def learner(x, W1, b1, W2, b2):  # expects (in, out) weights for the flipped ones
        h = F.linear(x, W1.T if flips[0] else W1, b1)
        return F.linear(F.gelu(h), W2.T if flips[1] else W2, b2)

    result = ex.check_ffn_forward.evaluate(learner)
    assert result.status == FAILED
    assert "raised RuntimeError" in result.message and words in result.message
    assert "None" not in result.message.split("Likely mistake")[1]


def test_forward_layout_hint_also_names_none_biases():
    result = ex.check_ffn_forward.evaluate(lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1) @ W2 + b2)
    assert "both weights are used in the wrong orientation" in result.message
    assert "None for an FFN without biases" in result.message


def test_forward_none_bias_hint():
    result = ex.check_ffn_forward.evaluate(lambda x, W1, b1, W2, b2: F.gelu(x @ W1.T + b1) @ W2.T + b2)
    assert result.status == FAILED and "None for an FFN without biases" in result.message


def test_forward_cases_cover_every_branch():
    cases = ex.check_ffn_forward.cases()
    assert any(c.args[2] is None for c in cases) and any(c.args[2] is not None for c in cases)
    assert any(c.args[0].dim() == 1 for c in cases), "one token vector (d_model,)"
    assert any(c.args[0].dim() == 3 for c in cases), "a batch of sequences"
    assert any(c.args[0].shape[:-1] == (1, 1) for c in cases), "batch size one"
    square = [c for c in cases if c.args[1].shape[0] == c.args[1].shape[1]]
    assert square and not torch.allclose(square[0].args[1], square[0].args[1].T), "a non-symmetric square W1"


def test_tanh_gelu_is_far_enough_from_exact_to_be_caught():
    x, W1, b1, W2, b2 = ex.check_ffn_forward.cases()[0].args
    exact = ex._ffn_forward(x, W1, b1, W2, b2)
    approx = F.linear(F.gelu(F.linear(x, W1, b1), approximate="tanh"), W2, b2)
    tolerance = ex.check_ffn_forward.atol + ex.check_ffn_forward.rtol * exact.abs()
    assert ((exact - approx).abs() / tolerance).max() > 5


# ---------------------------------------------------------------- exercise 2: what FlopCounterMode counts


@pytest.mark.parametrize("input_grad, weight_grad", [(True, True), (False, True), (True, False), (False, False)])
def test_step_flops_reference_matches_flop_counter(input_grad, weight_grad):
    n, d, d_ff = 6, 5, 11
    ffn = FFN(d, d_ff)
    for p in ffn.parameters():
        p.requires_grad_(weight_grad)
    x = torch.randn(n, d, requires_grad=input_grad)
    step = (lambda: ffn(x).sum().backward()) if (input_grad or weight_grad) else (lambda: ffn(x))
    assert measure_flops(step) == ex._step_flops(n, d, d_ff, input_grad, weight_grad)


def test_step_flops_cases_cover_every_flag_combination_one_token_and_square():
    cases = [c.args for c in ex.check_step_flops.cases()]
    assert {(i, w) for *_, i, w in cases} == {(True, True), (True, False), (False, True), (False, False)}
    assert any(n == 1 for n, *_ in cases) and any(d == d_ff for _, d, d_ff, *_ in cases)


# ---------------------------------------------------------------- exercises 3 and 4: the stack


@pytest.mark.parametrize("name", ["stack", "grads"])
def test_stack_cases_cover_every_setting_one_layer_and_batch_one(name):
    cases = EXERCISES[name].cases()
    settings = {tuple(c.args[-2:]) for c in cases}
    assert settings == {(norm, residual) for norm in NORMS for residual in (True, False)}
    assert any(len(c.args[-3]) == 1 for c in cases), "one layer"
    assert any(len(c.args[-3]) >= 2 for c in cases)
    assert any(c.args[0].shape[:-1] == (1, 1) for c in cases), "batch size one, one token"
    assert any(c.args[0].dim() == 2 for c in cases), "tokens as rows, no batch axis"


def test_stack_reference_matches_the_helper_and_the_residual_formulas():
    for case in ex.check_stack_forward.cases():
        x, ffns, norms, norm, residual = case.args
        assert torch.equal(ex._stack_forward(x, ffns, norms, norm, residual),
                           stack_forward(x, ffns, norms, norm=norm, residual=residual).detach())
    x, ffns, norms, *_ = ex.check_stack_forward.cases()[0].args
    f, ln = ffns[0], norms[0]
    with torch.no_grad():
        assert torch.allclose(stack_forward(x, ffns[:1], norms[:1], norm="pre"), x + f(ln(x)))
        assert torch.allclose(stack_forward(x, ffns[:1], norms[:1], norm="post"), ln(x + f(x)))
        assert torch.allclose(stack_forward(x, ffns[:1], norms[:1], norm="none", residual=False), f(x))


def test_some_grad_cases_hold_stale_gradients_that_survive_the_engines_copy():
    import copy

    stale = [c for c in ex.check_layer_grad_norms.cases() if isinstance(c.args[2], ex.StaleGrads)]
    assert stale and any(not isinstance(c.args[2], ex.StaleGrads) for c in ex.check_layer_grad_norms.cases())
    ffns = copy.deepcopy(stale[0].args[2])
    assert all(ffn.w1.weight.grad is not None and ffn.w1.weight.grad.abs().sum() > 0 for ffn in ffns)


def test_grad_reference_ignores_stale_gradients_and_autograd_state():
    case = next(c for c in ex.check_layer_grad_norms.cases() if isinstance(c.args[2], ex.StaleGrads))
    with torch.no_grad():
        inside = ex._grad_norms(*case.args)
    assert torch.allclose(inside, _grads_by_backward(*case.args))


# ---------------------------------------------------------------- exercise 5


def test_building_the_cases_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for exercise in ex.EXERCISES:
        exercise.cases()
    assert torch.equal(torch.rand(3), expected)


def test_contributions_sum_to_the_ffn_output():
    for case in ex.check_contributions.cases():
        ffn, x = case.args
        with torch.no_grad():
            total = ex.check_contributions.reference(ffn, x).sum(-2)
            if ffn.w2.bias is not None:
                total = total + ffn.w2.bias
            assert torch.allclose(total, ffn(x), atol=1e-5)


def test_contribution_cases_cover_activations_biases_one_token_and_square():
    cases = [c.args for c in ex.check_contributions.cases()]
    assert {f.activation_name for f, _ in cases} >= {"gelu", "relu", "silu", "sigmoid"}
    assert any(f.w2.bias is None for f, _ in cases) and any(f.w2.bias is not None for f, _ in cases)
    assert any(x.shape[0] == 1 for _, x in cases) and any(f.d_ff == f.d_model for f, _ in cases)
