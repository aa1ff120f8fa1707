"""Notebook 02's checkers: the weight layout of the hidden cases, unlisted wrong answers, other correct forms,
the transposed-weight hints, branch coverage of the hidden cases, and the notebook's follow-up cells, which run a
learner's function only once its checker passed (the generic contract for every checker is in
test_exercise_contract.py).
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
from helpers.precision import bound
from helpers.residual import NORMS, stack_forward

ROOT = Path(__file__).resolve().parent.parent

EXERCISES = {
    "forward": ex.check_gpt2_mlp,
    "flops": ex.check_step_flops,
    "stack": ex.check_stack_forward,
    "grads": ex.check_layer_grad_norms,
    "contributions": ex.check_contributions,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "forward": lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + 2 * b2,
    "flops": lambda n, d, d_ff, i, w: ex._step_flops(n, d, d_ff, i, w) + 1,
    "stack": lambda x, ffns, norms, norm, residual: stack_forward(x, ffns, norms, norm=norm, residual=residual) * 1.01,
    "grads": lambda *args: ex._grad_norms(*args) * 1.01,
    "contributions": lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.T * 1.01,
}

#: correct answers written differently from the reference
OTHER_CORRECT = {
    "forward": lambda x, w1, b1, w2, b2: torch.einsum(
        "...f,fd->...d", 0.5 * (h := torch.einsum("...d,df->...f", x, w1) + b1)
        * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h ** 3))), w2) + b2,
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


#: a float64 answer to a float32 task passes (the statement of exercise 1 says so)
OTHER_CORRECT_FLOAT64 = lambda x, w1, b1, w2, b2: F.gelu(  # noqa: E731
    x.double() @ w1.double() + b1.double(), approximate="tanh") @ w2.double() + b2.double()


def test_float64_answer_to_the_float32_build_passes():
    result = EXERCISES["forward"].evaluate(OTHER_CORRECT_FLOAT64)
    assert result.status == PASSED, result.message


def test_hard_coded_gelu_hint_names_every_other_activation_and_ffn_hidden():
    result = EXERCISES["contributions"].evaluate(lambda f, x: F.gelu(f.w1(x)).unsqueeze(-1) * f.w2.weight.T)
    assert result.status == FAILED and "hard-coded GELU" in result.message, result.message
    for word in ("ReLU", "SiLU", "sigmoid", "ffn.hidden(x)"):
        assert word in result.message, word


@pytest.mark.parametrize("name", OTHER_CORRECT)
def test_other_correct_forms_pass(name):
    result = EXERCISES[name].evaluate(OTHER_CORRECT[name])
    assert result.status == PASSED, result.message


def test_kinds_two_investigate_and_numbered_titles():
    assert [e.kind for e in ex.EXERCISES] == ["build", "investigate", "build", "investigate", "build"]
    assert [e.title.split(" (")[0] for e in ex.EXERCISES] == [f"Exercise {i}" for i in range(1, 6)]


# ---------------------------------------------------------------- exercise 1: GPT-2's layout (input x output)


def test_gpt2_cases_store_weights_input_by_output_and_load_into_the_course_ffn_transposed():
    """c_fc_w is (d_model, d_ff) and c_proj_w (d_ff, d_model) in every hidden case; transposed, they are the course's
    FFN(activation='gelu_tanh')."""
    for case in ex.check_gpt2_mlp.cases():
        x, c_fc_w, c_fc_b, c_proj_w, c_proj_b = case.args
        d_model, d_ff = c_fc_w.shape
        assert x.shape[-1] == d_model and c_proj_w.shape == (d_ff, d_model), case.note
        assert c_fc_b.shape == (d_ff,) and c_proj_b.shape == (d_model,) and x.dtype == torch.float32
        ffn = FFN(d_model, d_ff, activation="gelu_tanh")
        with torch.no_grad():
            ffn.w1.weight.copy_(c_fc_w.T)
            ffn.w1.bias.copy_(c_fc_b)
            ffn.w2.weight.copy_(c_proj_w.T)
            ffn.w2.bias.copy_(c_proj_b)
            torch.testing.assert_close(ex.check_gpt2_mlp.reference(x, c_fc_w, c_fc_b, c_proj_w, c_proj_b), ffn(x),
                                       atol=1e-4, rtol=1e-4)


def test_learner_notebook_states_the_layout():
    cells = json.loads((ROOT / "notebooks" / "02_expand_activate_contract.ipynb").read_text(encoding="utf-8"))["cells"]
    stub = next("".join(c["source"]) for c in cells if "def gpt2_mlp" in "".join(c["source"]))
    assert "c_fc_w: (d_model, d_ff)" in stub and "c_proj_w: (d_ff, d_model)" in stub and "float32" in stub


@pytest.mark.parametrize("flips, words", [
    ((True, False), "c_fc_w is read in nn.Linear's layout"),
    ((False, True), "c_proj_w is read in nn.Linear's layout"),
    ((True, True), "both weights are read in nn.Linear's layout"),
])
def test_gpt2_mlp_says_which_weight_is_read_in_the_wrong_layout(flips, words):
    def learner(x, w1, b1, w2, b2):  # treats the flipped ones as nn.Linear weights (out, in)
        h = F.linear(x, w1, b1) if flips[0] else x @ w1 + b1
        m = F.gelu(h, approximate="tanh")
        return F.linear(m, w2, b2) if flips[1] else m @ w2 + b2

    result = ex.check_gpt2_mlp.evaluate(learner)
    assert result.status == FAILED
    assert "raised RuntimeError" in result.message and words in result.message


def test_gpt2_cases_cover_every_branch():
    cases = ex.check_gpt2_mlp.cases()
    assert any(c.args[0].dim() == 1 for c in cases), "one token vector (d_model,)"
    assert any(c.args[0].dim() == 3 for c in cases), "a batch of sequences"
    assert any(c.args[0].shape[:-1] == (1, 1) for c in cases), "batch size one"
    assert any(tuple(c.args[1].shape) == (768, 3072) for c in cases), "GPT-2 small's shapes"
    square = [c for c in cases if c.args[1].shape[0] == c.args[1].shape[1]]
    assert square and not torch.allclose(square[0].args[1], square[0].args[1].T), "a non-symmetric square c_fc_w"


def test_exact_gelu_is_far_enough_from_the_tanh_form_to_be_caught_on_every_case():
    for case in ex.check_gpt2_mlp.cases():
        x, w1, b1, w2, b2 = case.args
        tanh = ex._gpt2_mlp(x, w1, b1, w2, b2)
        exact = F.gelu(x @ w1 + b1) @ w2 + b2
        tolerance = ex.check_gpt2_mlp.atol + ex.check_gpt2_mlp.rtol * tanh.abs()
        assert ((exact - tanh).abs() / tolerance).max() > 3, case.note


# ---------------------------------------------------------------- the follow-up cells run only after the checker passed


def _follow_up(marker):
    """The learner notebook's cell that contains ``marker`` and is gated by a checker."""
    cells = json.loads((ROOT / "notebooks" / "02_expand_activate_contract.ipynb").read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and marker in "".join(c["source"]) and ".passed:" in "".join(c["source"]))


def _swapped_pre_post(x, target, ffns, norms, norm, residual):
    """The learner trial's wrong answer: pre-LN and post-LN swapped. Before the fix, section 9's table ran on it."""
    swap = {"pre": "post", "post": "pre"}.get(norm, norm)
    return ex._grad_norms(x, target, ffns, norms, swap, residual)


@pytest.mark.parametrize("marker, names, wrong, right", [
    ("compare_gradients(", {"check_layer_grad_norms": ex.check_layer_grad_norms}, {"layer_grad_norms": _swapped_pre_post},
     {"layer_grad_norms": lambda *a: ex._grad_norms(*a)}),
    ("measure_flops(", {"check_step_flops": ex.check_step_flops},
     {"step_flops": lambda n, d, f, i, w: 12 * n * d * f}, {"step_flops": lambda *a: ex._step_flops(*a)}),
    ("gelu_tanh", {"check_gpt2_mlp": ex.check_gpt2_mlp},
     {"gpt2_mlp": lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1) @ w2 + b2}, {"gpt2_mlp": lambda *a: ex._gpt2_mlp(*a)}),
])
def test_follow_up_cells_wait_for_the_checker(marker, names, wrong, right, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.residual import compare_gradients, make_stack

    source = _follow_up(marker)
    stack, norms = make_stack(30, 16, seed=8)
    namespace = {"torch": torch, "F": F, "FFN": FFN, "measure_flops": measure_flops, "compare_gradients": compare_gradients,
                 "bound": bound,
                 "x0": torch.randn(4, 32, 16, generator=torch.Generator().manual_seed(8)), "stack": stack,
                 "norms": norms, "d": 16, **names}
    exec(source, {**namespace, **wrong})
    printed = capsys.readouterr().out
    assert printed.strip().startswith("Make the checker above pass first") and len(printed.strip().splitlines()) == 1
    exec(source, {**namespace, **right})
    printed = capsys.readouterr().out
    assert "Make the checker above pass first" not in printed and len(printed.strip().splitlines()) >= 2


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
    assert (1, 1, 1) in {tuple(c[:3]) for c in cases}, "the smallest sizes the statement allows"


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


# ---------------------------------------------------------------- natural wrong answers, each breaking one sentence


def _post_ln_no_residual_as_plain(x, ffns, norms, norm, residual):
    """'No residual' read as 'plain stack': post-LN without the residual path returns FFN(x), its LayerNorm dropped."""
    for ffn, ln in zip(ffns, norms):
        if norm == "post" and not residual:
            x = ffn(x)
        else:
            update = ffn(ln(x) if norm == "pre" else x)
            x = x + update if residual else update
            x = ln(x) if norm == "post" else x
    return x


def _only_batched(x, ffns, norms, norm, residual):
    """Works for (B, T, d) and (T, d) but indexes x[0] as 'the first token' for a single vector: wrong on (d,)."""
    out = stack_forward(x if x.dim() > 1 else x[None], ffns, norms, norm=norm, residual=residual)
    return out if x.dim() > 1 else out[:1]


@pytest.mark.parametrize("name, answer, hint", [
    ("forward", lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1) @ w2 + b2, "tanh form"),
    ("forward", lambda x, w1, b1, w2, b2: F.gelu(x @ w1.T + b1, approximate="tanh") @ w2.T + b2,
     "both weights are read in nn.Linear's layout"),
    ("flops", lambda n, d, f, i, w: 2.0 * n * d * f * (2 + 2 * w + (i or w) + i), "your count went through floating point"),
    ("flops", lambda n, d, f, i, w: 4 * n * d * f * (1 + int(i) + int(w)), "dropped the backward through W2"),
    ("stack", _post_ln_no_residual_as_plain, "post-LN without the residual path"),
    ("stack", _only_batched, None),
    ("grads", lambda x, t, fs, ns, norm, res: ex._grad_norms(x, t, fs, ns, norm, res) ** 2, "squared norms"),
    ("contributions", lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight, "as stored, (d_model, d_ff)"),
    ("contributions", lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.reshape(f.d_ff, f.d_model),
     "reshaped w2.weight"),
])
def test_natural_wrong_answers_fail_with_the_hint_that_explains_them(name, answer, hint):
    result = EXERCISES[name].evaluate(answer)
    assert result.status == FAILED, result.message
    if hint is None:
        assert "Likely mistake" not in result.message, result.message
    else:
        assert hint in result.message, result.message


def test_float_flops_fail_only_where_a_float_cannot_hold_the_count():
    result = EXERCISES["flops"].evaluate(lambda n, d, f, i, w: float(ex._step_flops(n, d, f, i, w)))
    assert "1 of 11" in result.message or "beyond 2**53" in result.message, result.message


def test_untransposed_w2_fails_on_the_square_case_with_wrong_numbers_not_only_a_shape_error():
    square = [c for c in ex.check_contributions.cases() if c.args[0].d_ff == c.args[0].d_model]
    ffn, x = square[0].args
    with torch.no_grad():
        wrong = ffn.hidden(x).unsqueeze(-1) * ffn.w2.weight
    assert wrong.shape == ex.check_contributions.reference(ffn, x).shape
    assert not torch.allclose(wrong, ex.check_contributions.reference(ffn, x))


@pytest.mark.parametrize("exercise", ex.EXERCISES, ids=lambda e: e.title.split(" (")[0])
def test_every_exercise_declares_its_domain_and_reaches_every_corner(exercise):
    assert exercise.domain is not None and len(exercise.domain.corners) >= 5
    assert exercise.uncovered() == []


def _gpt2_mlp_zeroing_its_bias(x, c_fc_w, c_fc_b, c_proj_w, c_proj_b):
    out = F.gelu(x @ c_fc_w + c_fc_b, approximate="tanh") @ c_proj_w + c_proj_b
    c_fc_b.zero_()                                       # changes an input after using it
    return out


def _stack_adding_in_place(x, ffns, norms, norm, residual):
    for ffn, ln in zip(ffns, norms):
        update = ffn(ln(x) if norm == "pre" else x)
        if residual:
            x += update                                  # the caller's tensor, on the first layer
        else:
            x = update
        if norm == "post":
            x = ln(x)
    return x


def _contributions_zeroing_x(ffn, x):
    out = ffn.hidden(x).unsqueeze(-1) * ffn.w2.weight.T
    x.mul_(0)
    return out


@pytest.mark.parametrize("name, answer, argument", [("forward", _gpt2_mlp_zeroing_its_bias, "c_fc_b"),
                                                    ("stack", _stack_adding_in_place, "x"),
                                                    ("contributions", _contributions_zeroing_x, "x")])
def test_answers_that_change_their_inputs_fail_naming_the_argument(name, answer, argument):
    """The review's in-place answers (round 1): right values, but they change an input the caller still holds."""
    result = EXERCISES[name].evaluate(answer)
    assert result.status == FAILED
    assert argument in result.message


def test_layer_grad_norms_in_float64_fails_naming_float32():
    """Trial 2026-11-27 (P4): the statement says "return a float32 tensor of shape (L,)"; a float64 result with the
    right values fails once the values pass, naming the dtype wanted."""
    def in_float64(x, target, ffns, norms, norm, residual):
        weights = [ffn.w1.weight for ffn in ffns]
        with torch.enable_grad():
            out = stack_forward(x, ffns, norms, norm=norm, residual=residual)
            grads = torch.autograd.grad(F.mse_loss(out, target), weights)
        return torch.tensor([g.double().norm().item() for g in grads], dtype=torch.float64)

    result = ex.check_layer_grad_norms.evaluate(in_float64)
    assert result.status == FAILED and "float64 tensor" in result.message and "float32" in result.message, \
        result.message
