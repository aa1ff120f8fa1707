"""Notebook 01's checkers: references checked independently, hidden cases that cover every branch the task
statements allow, unlisted wrong answers, other correct forms, specific messages
(the generic contract for every checker is in test_exercise_contract.py).
"""
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb01 import (BETA_RANGE, EXERCISES, _dead_after, _fit_beta, _fit_beta_gates, check_collapse,
                                    check_dead_after, check_dead_fraction, check_fit_beta,
                                    check_gelu_tanh_derivative, experiment_data)
from helpers.activations import gelu_tanh
from helpers.ffn import FFN

IDS = [ex.title for ex in EXERCISES]
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "01_activations.ipynb"


@pytest.fixture(autouse=True)
def one_thread():
    """As in the notebooks (helpers.env.setup): one CPU thread, so small trainings stay fast on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_two_investigate_exercises_and_the_rest_build():
    assert [ex.kind for ex in EXERCISES] == ["build", "build", "investigate", "build", "investigate"]


# ---------------------------------------------------------------- references, checked independently
def test_collapse_reference_reproduces_the_stack_for_every_case():
    for case in check_collapse.cases():
        (layers,) = case.args
        w, b = check_collapse.reference(layers)
        x = torch.randn(10, layers[0][0].shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        y = x
        for w_k, b_k in layers:
            y = y @ w_k.T + b_k
        torch.testing.assert_close(x @ w.T + b, y)


def test_collapse_cases_cover_one_layer_square_and_changing_widths():
    depths = [len(case.args[0]) for case in check_collapse.cases()]
    assert 1 in depths and max(depths) >= 4
    shapes = [tuple(w.shape) for case in check_collapse.cases() for w, _ in case.args[0]]
    assert any(o == i for o, i in shapes) and any(o != i for o, i in shapes)


def test_tanh_derivative_reference_matches_autograd():
    x = torch.linspace(-12, 12, 2401, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(F.gelu(x, approximate="tanh").sum(), x)
    torch.testing.assert_close(check_gelu_tanh_derivative.reference(x.detach()), grad, atol=1e-12, rtol=0)


def test_fit_beta_reference_is_the_least_squares_minimum():
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    beta = _fit_beta(x)

    def sse(b):
        return ((x * torch.sigmoid(b * x) - F.gelu(x)) ** 2).sum().item()
    assert sse(beta) < sse(beta - 1e-3) and sse(beta) < sse(beta + 1e-3)
    assert beta == pytest.approx(1.780, abs=1e-3)        # not 1.702: that constant fits the gates, not GELU


def test_fit_beta_hidden_cases_disagree_so_no_constant_passes():
    betas = [_fit_beta(*case.args) for case in check_fit_beta.cases()]
    assert max(betas) - min(betas) > 0.1
    for constant in (1.702, 1.78, sum(betas) / len(betas)):
        assert check_fit_beta.evaluate(lambda x, c=constant: c).status == FAILED


def test_dead_fraction_reference_on_a_small_example():
    pre = torch.tensor([[[0.7, 0.0, -0.2], [-1.0, -0.3, -0.5]],
                        [[-0.4, 0.0, -0.1], [2.0, 5.0, 3.0]]])
    mask = torch.tensor([[True, True], [True, False]])
    assert check_dead_fraction.reference(pre, mask) == pytest.approx(2 / 3)


def test_dead_fraction_cases_cover_every_branch_of_the_statement():
    """Zeros mixed with negatives, units firing only at padding, a batch of one sequence, a sequence that is all
    padding, no dead unit and no live unit: each must occur in the hidden cases."""
    seen = set()
    for case in check_dead_fraction.cases():
        pre, mask = case.args
        real = mask.unsqueeze(-1).expand_as(pre)
        dead = ((pre <= 0) | ~real).flatten(0, 1).all(dim=0)
        for unit in range(pre.shape[-1]):
            on_real = pre[..., unit][mask]
            if dead[unit] and (on_real == 0).any() and (on_real < 0).any():
                seen.add("zeros mixed with negatives")
            if dead[unit] and (pre[..., unit][~mask] > 0).any():
                seen.add("fires at padding only")
            if not dead[unit] and (on_real == 0).any():
                seen.add("a live unit that is also exactly 0 somewhere")
        seen.add(f"dead share {'0' if not dead.any() else '1' if dead.all() else 'between'}")
        if pre.shape[0] == 1:
            seen.add("one sequence")
        if (~mask).all(dim=1).any():
            seen.add("a sequence of padding only")
    assert seen >= {"zeros mixed with negatives", "fires at padding only", "a live unit that is also exactly 0 somewhere",
                    "dead share 0", "dead share 1", "dead share between", "one sequence", "a sequence of padding only"}


def test_dead_after_reference_reproduces_section_6_and_the_notebook_data():
    x, y = experiment_data()
    assert _dead_after(2.0, 5, x, y) == 50 / 256          # the notebook's 19.5 % after phase 1, seed 0
    # the notebook's section 6 trains on exactly this data
    code = "\n".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "code")
    assert "X, Y = experiment_data()" in code


def test_dead_after_cases_include_other_data_one_step_and_other_seeds():
    cases = check_dead_after.cases()
    sizes = {case.args[2].shape[0] for case in cases}
    assert {256, 64} <= sizes and len(sizes) >= 3
    assert 1 in {case.args[1] for case in cases}            # a single SGD step
    seeds = {case.args[4] for case in cases}
    assert 0 in seeds and len(seeds) >= 5
    values = {_dead_after(*case.args) for case in cases}
    assert len(values) >= 4                                 # the cases do not all give the same fraction
    # the seed matters: on some case the seed-0 answer is wrong, so ignoring the seed cannot pass
    assert any(_dead_after(*case.args[:4], 0) != _dead_after(*case.args) for case in cases)


def test_dead_after_domain_never_overflows():
    """The statement's domain (lr <= 2, steps <= 10, 64 <= N <= 256 of section 6's recipe) keeps training finite,
    so "pre <= 0 on every example" is well defined (with 8 examples, or lr 3, the recipe can overflow to inf)."""
    from helpers.dead_units import sgd
    worst = 0.0
    for n, data_seed in ((64, 3), (100, 5), (256, 2)):
        x, y = experiment_data(seed=data_seed, n=n)
        for seed in (0, 5, 9):
            torch.manual_seed(seed)
            model = FFN(16, 256, activation="relu")
            worst = max(worst, *sgd(model, x, y, 2.0, 10))
            assert torch.isfinite(model.w1(x)).all()
    assert worst < 1e3


def test_dead_after_seed_changes_the_answer_and_is_honoured():
    x, y = experiment_data()
    by_seed = [_dead_after(2.0, 10, x, y, seed) for seed in range(5)]
    assert len(set(by_seed)) == 5                           # five seeds, five different fractions
    assert by_seed[0] == _dead_after(2.0, 10, x, y)         # seed 0 is the default


def test_extreme_cases_are_in_the_hidden_sets():
    magnitudes = [w.abs().max().item() for case in check_collapse.cases() for w, _ in case.args[0]]
    assert max(magnitudes) > 100 and min(magnitudes) < 0.01
    tails = torch.cat([case.args[0].flatten() for case in check_gelu_tanh_derivative.cases()])
    assert tails.abs().max() == 100 and (tails == 0).any() and (tails.abs() == 1e-8).any()
    assert min(len(case.args[0]) for case in check_fit_beta.cases()) == 3
    pres = [case.args[0] for case in check_dead_fraction.cases()]
    assert {p.dtype for p in pres} == {torch.float32, torch.float64} and min(p.shape[1] for p in pres) == 1
    assert min(p.shape[2] for p in pres) == 1


def test_every_exercise_declares_a_domain_whose_corners_are_reached():
    for ex in EXERCISES:
        assert ex.domain is not None and ex.uncovered() == [], ex.title


def test_the_stated_beta_range_holds_for_every_allowed_input():
    """For one point the least-squares β solves σ(βx) = Φ(x): β*(x) = logit(Φ(x)) / x, which runs from
    4·φ(0) = 1.596 (x -> 0) to 3.456 (|x| = 6). Each squared error falls towards its own β* and rises after it,
    so the sum's minimum lies between the smallest and the largest β*: inside the stated [1.5, 3.5]."""
    x = torch.tensor([1e-4, 0.5, 3.0, 6.0], dtype=torch.float64)
    phi = 0.5 * torch.erfc(-x / math.sqrt(2))
    beta_star = (torch.log(phi) - torch.log1p(-phi)) / x
    assert BETA_RANGE[0] < beta_star.min() and beta_star.max() < BETA_RANGE[1]
    assert beta_star[0].item() == pytest.approx(4 / math.sqrt(2 * math.pi), abs=1e-3)
    assert beta_star[-1].item() == pytest.approx(3.456, abs=1e-3)


def test_fit_beta_reference_finds_the_global_minimum_on_random_allowed_inputs():
    """The sum of squares need not be unimodal; the reference searches a grid first. Against a brute-force grid
    of step 1e-4 on random inputs the statement allows (a band point, tails, repeats, points near 0)."""
    g = torch.Generator().manual_seed(7)
    betas = torch.arange(BETA_RANGE[0], BETA_RANGE[1], 1e-4, dtype=torch.float64)
    for trial in range(40):
        n = int(torch.randint(3, 40, (1,), generator=g))
        x = 12 * torch.rand(n, generator=g, dtype=torch.float64) - 6
        if trial % 3 == 0:
            x = torch.sign(x) * (4 + 2 * torch.rand(n, generator=g, dtype=torch.float64))   # tails only ...
        x[0] = 0.5 + 2.5 * torch.rand((), generator=g, dtype=torch.float64)                # ... and a band point
        sse = ((x * torch.sigmoid(betas[:, None] * x) - F.gelu(x)) ** 2).sum(dim=1)
        beta = _fit_beta(x)
        best = betas[sse.argmin()].item()
        assert abs(beta - best) < 2e-4, (x, beta, best)


# ---------------------------------------------------------------- other correct forms pass
def _collapse_reduce(layers):
    w = torch.eye(layers[0][0].shape[1], dtype=layers[0][0].dtype)
    b = torch.zeros(layers[0][0].shape[1], dtype=layers[0][0].dtype)
    for w_k, b_k in layers:
        w, b = w_k @ w, w_k @ b + b_k
    return w, b


def _collapse_by_probing(layers):
    """Reads the map off like section 1: b = f(0), columns of W = f(e_j) - f(0)."""
    d_in = layers[0][0].shape[1]

    def f(x):
        for w_k, b_k in layers:
            x = x @ w_k.T + b_k
        return x
    b = f(torch.zeros(d_in, dtype=torch.float64))
    return (f(torch.eye(d_in, dtype=torch.float64)) - b).T, b


def _tanh_derivative_sech(x):
    k = math.sqrt(2 / math.pi)
    u = k * (x + 0.044715 * x ** 3)
    return 0.5 * (1 + torch.tanh(u)) + 0.5 * x * k * (1 + 0.134145 * x ** 2) / torch.cosh(u) ** 2


def _tanh_derivative_autograd(x):
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.gelu(x, approximate="tanh").sum(), x)
    return g


def _fit_beta_newton(x):
    beta = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    for _ in range(30):
        loss = ((x * torch.sigmoid(beta * x) - F.gelu(x)) ** 2).sum()
        (g,) = torch.autograd.grad(loss, beta, create_graph=True)
        (h,) = torch.autograd.grad(g, beta)
        with torch.no_grad():
            beta -= g / h
    return beta.item()


def _fit_beta_adam(x, steps=300, schedule=False):
    beta = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([beta], lr=0.05)
    decay = torch.optim.lr_scheduler.ExponentialLR(opt, 0.99) if schedule else None
    target = F.gelu(x)
    for _ in range(steps):
        loss = ((x * torch.sigmoid(beta * x) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if decay:
            decay.step()
    return beta.item()


def _fit_beta_adam_then_newton(x):
    """Adam to get close, then Newton steps on the derivative: converged where the loss is flat."""
    beta = torch.tensor(_fit_beta_adam(x), dtype=torch.float64, requires_grad=True)
    for _ in range(50):
        loss = ((x * torch.sigmoid(beta * x) - F.gelu(x)) ** 2).sum()
        (g,) = torch.autograd.grad(loss, beta, create_graph=True)
        (h,) = torch.autograd.grad(g, beta)
        with torch.no_grad():
            if h > 0:
                beta -= g / h
    return beta.item()


def _fit_beta_fine_grid(x):
    betas = torch.arange(1.5, 3.5, 2e-4, dtype=torch.float64)    # the range the statement gives
    sse = torch.stack([((x * torch.sigmoid(b * x) - F.gelu(x)) ** 2).sum() for b in betas])
    return betas[sse.argmin()]                               # a 0-dimensional tensor is fine too


def _dead_fraction_float32_and_masked_fill(pre, mask):
    filled = pre.masked_fill(~mask.unsqueeze(-1), -1.0)
    return (filled.reshape(-1, pre.shape[-1]).max(dim=0).values <= 0).float().mean().item()


def _dead_fraction_loop(pre, mask):
    dead = 0
    for unit in range(pre.shape[-1]):
        dead += bool((pre[..., unit][mask] <= 0).all())
    return dead / pre.shape[-1]


def _dead_after_own_loss(lr, steps, x, y, seed, loss=F.mse_loss):
    torch.manual_seed(seed)
    model = FFN(x.shape[1], 256, activation="relu")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        h = x @ model.w1.weight.T + model.w1.bias
    return (h.max(dim=0).values <= 0).float().mean()        # a float32 tensor, not a Python float


@pytest.mark.parametrize("ex, correct", [
    (check_collapse, _collapse_reduce),
    (check_collapse, _collapse_by_probing),
    (check_gelu_tanh_derivative, _tanh_derivative_sech),
    (check_fit_beta, _fit_beta_newton),
    (check_fit_beta, _fit_beta_adam_then_newton),
    (check_fit_beta, _fit_beta_fine_grid),
    (check_dead_fraction, _dead_fraction_float32_and_masked_fill),
    (check_dead_fraction, _dead_fraction_loop),
    (check_dead_after, _dead_after_own_loss),
], ids=lambda v: getattr(v, "__name__", None) or getattr(v, "title", ""))
def test_other_correct_answers_pass(ex, correct):
    result = ex.evaluate(correct)
    assert result.status == PASSED, result.message


# ---------------------------------------------------------------- wrong answers that only some inputs expose
def _dead_fraction_zeros_or_negatives_separately(pre, mask):
    """Wrong: 'all zero' or 'all negative' on real tokens, missing units that mix zeros and negatives."""
    real = mask.unsqueeze(-1)
    all_neg = ((pre < 0) | ~real).flatten(0, 1).all(dim=0)
    all_zero = ((pre == 0) | ~real).flatten(0, 1).all(dim=0)
    return (all_neg | all_zero).double().mean().item()


def _dead_fraction_multiplies_by_mask_then_strict(pre, mask):
    """Wrong: zeroing padding then testing < 0 makes every padded unit look alive."""
    return ((pre * mask.unsqueeze(-1)) < 0).flatten(0, 1).all(dim=0).double().mean().item()


def _dead_fraction_first_sequence_only(pre, mask):
    return ((pre[0] <= 0) | ~mask[0].unsqueeze(-1)).all(dim=0).double().mean().item()


def _dead_after_global_data(lr, steps, x, y, seed):
    """Wrong: trains on the notebook's data whatever it is given."""
    return _dead_after(lr, steps, *experiment_data(), seed)


def _dead_after_seed_after_building(lr, steps, x, y, seed):
    """Wrong: the seed is set after the FFN is built, so the initial weights are seed 0's (as the notebook left
    the global generator) whatever the seed."""
    torch.manual_seed(0)
    model = FFN(x.shape[1], 256, activation="relu")
    torch.manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        return (model.w1(x) <= 0).all(dim=0).double().mean().item()


def _dead_fraction_mean_pre_activation(pre, mask):
    """Wrong: 'dead' as a mean pre-activation <= 0 over the real tokens (a unit on at some tokens is alive)."""
    real = mask.unsqueeze(-1).to(pre.dtype)
    return ((pre * real).sum(dim=(0, 1)) / real.sum(dim=(0, 1)) <= 0).double().mean().item()


def _dead_after_sgd_with(lr, steps, x, y, seed, make_opt):
    torch.manual_seed(seed)
    model = FFN(x.shape[1], 256, activation="relu")
    opt = make_opt(model.parameters(), lr)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        return (model.w1(x) <= 0).all(dim=0).double().mean().item()


def _dead_after_momentum(lr, steps, x, y, seed):
    """Wrong: SGD with momentum 0.9 (the statement says plain SGD)."""
    return _dead_after_sgd_with(lr, steps, x, y, seed, lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9))


def _dead_after_adam(lr, steps, x, y, seed):
    """Wrong: Adam at the same learning rate."""
    return _dead_after_sgd_with(lr, steps, x, y, seed, lambda p, lr: torch.optim.Adam(p, lr=lr))


def _dead_after_counted_before_the_last_step(lr, steps, x, y, seed):
    """Wrong: counts on the pre-activations of the last forward pass, before the last update."""
    torch.manual_seed(seed)
    model = FFN(x.shape[1], 256, activation="relu")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        h = model.w1(x)
        loss = F.mse_loss(model.w2(torch.relu(h)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (h.detach() <= 0).all(dim=0).double().mean().item()


def _fit_beta_coarse_range(x):
    """Wrong: a fine grid, but only over [1, 2.5] (the statement allows β up to 3.5)."""
    betas = torch.arange(1.0, 2.5, 2e-4, dtype=torch.float64)
    sse = ((x * torch.sigmoid(betas[:, None] * x) - F.gelu(x)) ** 2).sum(dim=1)
    return betas[sse.argmin()].item()


def _fit_beta_on_the_question_grid(x):
    """Wrong: fits on linspace(-6, 6, 1201) whatever points it is given."""
    return _fit_beta(torch.linspace(-6, 6, 1201, dtype=torch.float64))


def _collapse_two_layers_only(layers):
    (w1, b1), (w2, b2) = layers[0], layers[-1]
    return (w2 @ w1, w2 @ b1 + b2) if len(layers) > 1 else (w1, b1)


@pytest.mark.parametrize("ex, wrong", [
    (check_dead_fraction, _dead_fraction_zeros_or_negatives_separately),
    (check_dead_fraction, _dead_fraction_multiplies_by_mask_then_strict),
    (check_dead_fraction, _dead_fraction_first_sequence_only),
    (check_dead_after, _dead_after_global_data),
    (check_dead_after, _dead_after_seed_after_building),
    (check_collapse, _collapse_two_layers_only),
    (check_dead_fraction, _dead_fraction_mean_pre_activation),
    (check_dead_after, _dead_after_momentum),
    (check_dead_after, _dead_after_adam),
    (check_dead_after, _dead_after_counted_before_the_last_step),
    (check_fit_beta, _fit_beta_adam),                      # 300 Adam steps: unconverged where the loss is flat
    (check_fit_beta, _fit_beta_coarse_range),
    (check_fit_beta, _fit_beta_on_the_question_grid),
    (check_gelu_tanh_derivative, lambda x: _exact_tanh_slope(x).reshape(-1)),   # loses the shape of x
], ids=lambda v: getattr(v, "__name__", None) or getattr(v, "title", ""))
def test_wrong_on_some_inputs_only_still_fails(ex, wrong):
    """Natural wrong answers, each breaking one sentence of its statement, fail."""
    assert ex.evaluate(wrong).status == FAILED


# ---------------------------------------------------------------- unlisted wrong answers fail without a misleading hint
@pytest.mark.parametrize("ex, wrong", [
    (check_collapse, lambda layers: (layers[-1][0] @ layers[0][0], layers[-1][1])),
    (check_gelu_tanh_derivative, lambda x: 0.5 * (1 + torch.tanh(0.8 * (x + 0.044715 * x ** 3)))),
    (check_fit_beta, lambda x: 1.75),
    (check_dead_fraction, lambda pre, mask: ((pre <= -0.5) | ~mask.unsqueeze(-1)).flatten(0, 1).all(0).double().mean().item()),
    (check_dead_after, lambda lr, steps, x, y, seed: _dead_after(lr, steps + 1, x, y, seed)),
], ids=IDS)
def test_unlisted_wrong_answer_fails(ex, wrong):
    result = ex.evaluate(wrong)
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_messages_name_the_problem():
    transposed = check_collapse.evaluate(lambda layers: tuple(t.T if t.dim() == 2 else t
                                                              for t in _collapse_reduce(layers)))
    assert transposed.status == FAILED and "transposed" in transposed.message
    assert "expected a number" in check_dead_fraction.evaluate(lambda pre, mask: "half").message
    padding = check_dead_fraction.evaluate(lambda pre, mask: (pre <= 0).flatten(0, 1).all(0).double().mean().item())
    assert "padded positions must be ignored" in padding.message
    assert "fitted the gates" in check_fit_beta.evaluate(_fit_beta_gates).message


def test_float32_answers_to_the_float64_build_exercises_get_a_dtype_note():
    """Exercises 1 and 2 both state float64: a float32 answer fails with a note on the dtype, not a pass."""
    for ex, ref in [(check_collapse, lambda layers: tuple(t.float() for t in _collapse_reduce(layers))),
                    (check_gelu_tanh_derivative, lambda x: _exact_tanh_slope(x).float())]:
        result = ex.evaluate(ref)
        assert result.status == FAILED and "float32" in result.message and "Likely mistake" not in result.message


_LEARNER_CELL = """
import math, torch
import torch.nn.functional as F
from torch.func import grad as slope_of
C = math.sqrt(2 / math.pi)

def grad(u):                                   # the learner's own helper, named grad: the slope of tanh
    return 1 - torch.tanh(u) ** 2

def by_hand_with_own_grad(x):
    u = C * (x + 0.044715 * x ** 3)
    return 0.5 * (1 + torch.tanh(u)) + 0.5 * x * grad(u) * C * (1 + 3 * 0.044715 * x * x)

def by_hand_in_no_grad(x):
    with torch.no_grad():
        t = F.tanh(C * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C * (1 + 3 * 0.044715 * x * x)

def renamed_func_grad(x):
    return torch.vmap(slope_of(lambda t: F.gelu(t, approximate="tanh")))(x.reshape(-1)).reshape(x.shape)

def through_a_helper(x):
    return renamed_func_grad(x)

def torch_func_grad(x):
    return torch.vmap(torch.func.grad(lambda t: F.gelu(t, approximate="tanh")))(x.reshape(-1)).reshape(x.shape)

SLOPE = torch.vmap(torch.func.grad(lambda t: F.gelu(t, approximate="tanh")))   # a transform built beforehand
TOOLS = {"slope": torch.func.grad}

def prebuilt_transform(x):
    return x.clone() if x.numel() == 0 else SLOPE(x.reshape(-1)).reshape(x.shape)

def transform_from_a_dict(x):
    if x.numel() == 0:
        return x.clone()
    return torch.vmap(TOOLS["slope"](lambda t: F.gelu(t, approximate="tanh")))(x.reshape(-1)).reshape(x.shape)

def transform_as_a_default(x, slope=SLOPE):
    return x.clone() if x.numel() == 0 else slope(x.reshape(-1)).reshape(x.shape)

def by_hand_through_vmap(x):
    one = lambda v: 0.5 * (1 + torch.tanh(C * (v + 0.044715 * v ** 3))) + 0.5 * v * (
        1 - torch.tanh(C * (v + 0.044715 * v ** 3)) ** 2) * C * (1 + 3 * 0.044715 * v * v)
    return x.clone() if x.numel() == 0 else torch.vmap(one)(x.reshape(-1)).reshape(x.shape)

def inside_enable_grad(x):
    with torch.enable_grad():
        x = x.detach().clone().requires_grad_(True)
        F.gelu(x, approximate="tanh").sum().backward()
        return x.grad
"""


def test_tanh_slope_from_autograd_fails_the_by_hand_rule():
    """The statement asks for the slope without autograd: right values taken from torch.autograd or torch.func's
    transforms fail, named; by-hand answers pass, also with a helper of their own called grad, or inside no_grad."""
    cell = {}
    exec(compile(_LEARNER_CELL, "<ipython-input-7>", "exec"), cell)
    for name in ("by_hand_with_own_grad", "by_hand_in_no_grad", "by_hand_through_vmap"):
        result = check_gelu_tanh_derivative.evaluate(cell[name])
        assert result.status == PASSED, (name, result.message)
    for fn in (_tanh_derivative_autograd, _exact_tanh_slope, cell["renamed_func_grad"], cell["through_a_helper"],
               cell["torch_func_grad"], cell["inside_enable_grad"], cell["prebuilt_transform"],
               cell["transform_from_a_dict"], cell["transform_as_a_default"]):
        result = check_gelu_tanh_derivative.evaluate(fn)
        assert result.status == FAILED and "needs autograd" in result.message, result.message
    with torch.no_grad():                                   # a learner's own no_grad block changes nothing
        assert check_gelu_tanh_derivative.evaluate(_tanh_derivative_sech).status == PASSED


def _exact_tanh_slope(x):
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(gelu_tanh(x).sum(), x)
    return g


def test_tanh_written_with_exp_is_named_only_where_it_overflows():
    s = math.sqrt(2 / math.pi)

    def by_exp(x, sign):
        u = s * (x + 0.044715 * x ** 3)
        e = torch.exp(2 * sign * u)
        t = sign * (e - 1) / (e + 1)
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x ** 2)

    for sign in (1, -1):
        result = check_gelu_tanh_derivative.evaluate(lambda x: by_exp(x, sign))
        assert result.status == FAILED and "overflows" in result.message


def _dead_after_trained_with(lr, steps, x, y, seed, activation="relu", lr_used=None, zero_grad=True,
                             reduction="mean", bias=True):
    """Trains section 5's FFN with a chosen activation or learning rate (or a training-loop slip: no zero_grad, a
    summed loss, the bias left out of the count), then counts units <= 0 everywhere."""
    torch.manual_seed(seed)
    model = FFN(16, 256, activation=activation)
    opt = torch.optim.SGD(model.parameters(), lr=lr if lr_used is None else lr_used)
    for _ in range(steps):
        if zero_grad:
            opt.zero_grad()
        F.mse_loss(model(x), y, reduction=reduction).backward()
        opt.step()
    with torch.no_grad():
        pre = model.w1(x) if bias else x @ model.w1.weight.T
        return (pre <= 0).all(dim=0).double().mean().item()


@pytest.mark.parametrize("wrong", [
    lambda lr, steps, x, y, seed: _dead_after_trained_with(lr, steps, x, y, seed, activation="gelu"),  # FFN's default
    lambda lr, steps, x, y, seed: _dead_after_trained_with(lr, steps, x, y, seed, activation="silu"),
    lambda lr, steps, x, y, seed: _dead_after_trained_with(lr, steps, x, y, seed, lr_used=0.1),        # lr ignored
    lambda lr, steps, x, y, seed: _dead_after_trained_with(lr, 0, x, y, seed),                        # untrained
], ids=["gelu", "silu", "lr ignored", "untrained"])
def test_dead_after_no_death_hint_names_every_cause_it_can_have(wrong):
    """Answers that trained the wrong activation, ignored lr, or did not train all give 0 dead on every case: the
    hint names all three causes instead of telling a learner who did train to train (review 01-round1, E1)."""
    result = check_dead_after.evaluate(wrong)
    assert result.status == FAILED
    assert "activation=\"relu\"" in result.message and "`lr`" in result.message


def test_fit_beta_a_search_finer_than_needed_is_told_so_when_it_runs_out_of_time(monkeypatch):
    """Trial 2026-11-27 (P7): a correct, vectorised grid of step 1e-5 ran out of time and was told only to look
    for an endless loop or a Python loop over single elements; the message now also names a search finer than
    the tolerance needs, and the precision that is enough (here under a 1 s limit)."""
    from helpers.exercises.timelimit import TIME_LIMIT_ENV
    monkeypatch.setenv(TIME_LIMIT_ENV, "1")

    def fine_grid(x):
        target, best, best_loss = F.gelu(x), None, math.inf
        for betas in torch.arange(1.5, 3.5, 1e-5, dtype=torch.float64).split(20_000):
            loss = ((x * torch.sigmoid(betas[:, None] * x) - target) ** 2).sum(dim=1)
            i = int(loss.argmin())
            if float(loss[i]) < best_loss:
                best, best_loss = float(betas[i]), float(loss[i])
        return best

    result = check_fit_beta.evaluate(fine_grid)
    assert result.status == FAILED and "time limit" in result.message, result.message
    assert "finer than the answer needs" in result.message and "1e-4 is enough" in result.message, result.message


def test_dead_after_training_loop_slips_get_their_hints():
    assert check_dead_after.evaluate(lambda *a: _dead_after_trained_with(*a)).passed
    forgot = check_dead_after.evaluate(lambda *a: _dead_after_trained_with(*a, zero_grad=False))
    assert not forgot.passed and "zero_grad" in (forgot.hint or "")
    summed = check_dead_after.evaluate(lambda *a: _dead_after_trained_with(*a, reduction="sum"))
    assert not summed.passed and "diverged" in (summed.hint or "") and "mean" in summed.hint


def test_dead_after_without_the_bias_and_fit_to_tanh_gelu_get_their_hints():
    no_bias = check_dead_after.evaluate(lambda *a: _dead_after_trained_with(*a, bias=False))
    assert "bias" in (no_bias.hint or "")

    def tanh_fit(x):
        x = x.double()
        betas = torch.linspace(1.5, 3.5, 20001, dtype=torch.float64)[:, None]
        return betas[((x * torch.sigmoid(betas * x) - F.gelu(x, approximate="tanh")) ** 2).sum(1).argmin()].item()
    assert "tanh" in (check_fit_beta.evaluate(tanh_fit).hint or "")


def test_gelu_tanh_derivative_missing_half_on_the_second_term_is_named():
    """Reviews 01-round11 E1 and round 12: the ½ dropped from x·(1 − tanh²u)·u' only."""
    def slope(x):
        k = math.sqrt(2 / math.pi)
        t = torch.tanh(k * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + x * (1 - t * t) * k * (1 + 3 * 0.044715 * x ** 2)

    result = check_gelu_tanh_derivative.evaluate(slope)
    assert result.status == FAILED and "second term" in result.message, result.message


def test_dead_after_a_loss_summed_over_each_examples_outputs_is_named():
    """Review 01-round13: ((model(X) - Y) ** 2).sum(1).mean() is 16 times the mean squared error."""
    from helpers.exercises.nb01 import check_dead_after

    def dead_after(lr, steps, X, Y, seed):
        return _dead_after_own_loss(lr, steps, X, Y, seed, loss=lambda out, y: ((out - y) ** 2).sum(1).mean())

    result = check_dead_after.evaluate(dead_after)
    assert result.status == FAILED and "16 squared errors" in result.message, result.message


def test_dead_after_a_seed_set_after_building_gets_the_seed_hint():
    """Review 01-round17: seeding after the FFN is built takes its weights from whatever state came before."""
    from helpers.dead_units import sgd
    from helpers.exercises.nb01 import check_dead_after
    from helpers.ffn import FFN

    def seeded_after_building(lr, steps, x, y, seed):
        model = FFN(x.shape[1], 256, activation="relu")
        torch.manual_seed(seed)
        sgd(model, x, y, lr, steps)
        with torch.no_grad():
            return float((model.w1(x) <= 0).all(0).double().mean())

    torch.manual_seed(5)
    before = torch.get_rng_state()
    result = check_dead_after.evaluate(seeded_after_building)
    assert result.status == "failed" and "before you build the FFN" in result.message, result.message
    assert torch.equal(torch.get_rng_state(), before), "the check leaves the learner's random state as it was"
