"""Checkers for notebook 02 (expand, activate, contract).

Each ``check_*`` is an ``helpers.exercises.engine.Exercise``: call it on your function,
``check_ffn_forward(my_ffn_forward)``, and it prints one line (not attempted /
passed / what is wrong and the likely mistake). The hidden cases are drawn from
seeded ``torch.Generator`` s with shapes the notebook never shows.

Layout used by the exercises (the notebook's section 1): token vectors are
rows, so ``W1`` is ``(d_model, d_ff)`` and ``W2`` is ``(d_ff, d_model)``:
``FFN(x) = GELU(x @ W1 + b1) @ W2 + b2``. ``nn.Linear`` (and therefore
``helpers.ffn.FFN``) stores the transposes: ``ffn.w1.weight`` is ``(d_ff, d_model)``.

========================  ===================================================
checker                   the learner writes
========================  ===================================================
``check_ffn_forward``     ``ffn_forward(x, W1, b1, W2, b2)`` -> ``(..., d_model)``
``check_param_count``     ``ffn_params(d_model, d_ff, bias)`` -> int
``check_forward_flops``   ``ffn_forward_flops(n_tokens, d_model, d_ff)`` -> int
``check_contributions``   ``neuron_contributions(ffn, x)`` -> ``(T, d_ff, d_model)``
``check_pre_ln_step``     ``pre_ln_step(x, ffn, ln)`` -> ``(B, T, d_model)``
========================  ===================================================
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises.engine import FAILED, Case, Exercise, Result, compare
from helpers.ffn import FFN, ffn_param_count

# --------------------------------------------------------------------------------------------
# Exercise 1: the FFN forward pass from explicit weights
# --------------------------------------------------------------------------------------------


def _ffn_forward(x: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor, W2: torch.Tensor,
                 b2: torch.Tensor) -> torch.Tensor:
    """``(..., d) -> (..., d)``: exact-GELU FFN, W1 ``(d, d_ff)``, W2 ``(d_ff, d)``."""
    return F.gelu(x @ W1 + b1) @ W2 + b2


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """One int in [low, high] from ``gen``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def _distinct_sizes(gen: torch.Generator) -> tuple[int, int, int]:
    """Random (T, d_model, d_ff), all three different, so a weight in the wrong orientation cannot fit."""
    while True:
        T, d, d_ff = _randint(gen, 2, 7), _randint(gen, 3, 9), _randint(gen, 10, 24)
        if len({T, d, d_ff}) == 3:
            return T, d, d_ff


def _forward_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2021)
    cases = []
    for k in range(4):
        T, d, d_ff = _distinct_sizes(gen)
        lead = (_randint(gen, 2, 3), T) if k == 2 else (T,)     # one batched (B, T, d) input
        x = torch.randn(*lead, d, generator=gen)
        W1 = torch.randn(d, d_ff, generator=gen)          # pre-activations of std ≈ sqrt(d): GELU's curved part
        b1 = torch.randn(d_ff, generator=gen)
        W2 = torch.randn(d_ff, d, generator=gen) / 2
        b2 = torch.randn(d, generator=gen)
        note = (f"x {tuple(x.shape)}, W1 {tuple(W1.shape)}, b1 {tuple(b1.shape)}, "
                f"W2 {tuple(W2.shape)}, b2 {tuple(b2.shape)}")
        cases.append(Case((x, W1, b1, W2, b2), note=note))
    return cases


class _ForwardExercise(Exercise):
    """Adds one diagnosis the engine cannot make from outputs alone: a weight used transposed.

    With non-square weights a transposed weight makes the learner's code *raise* (shapes do
    not multiply), so there is no wrong output to compare. Instead, when the answer fails,
    re-run the learner's function with W1 and/or W2 handed over transposed: if that makes
    it right on every case, the learner's code expects the other orientation.
    """

    _LAYOUT_HINTS = {
        (True, False): "W1 is used in the wrong orientation: your code treats it as (d_ff, d_model) "
                       "(nn.Linear's layout, x @ W1.T or F.linear); here W1 is (d_model, d_ff), "
                       "so the expand step is x @ W1 + b1.",
        (False, True): "W2 is used in the wrong orientation: your code treats it as (d_model, d_ff) "
                       "(nn.Linear's layout, m @ W2.T or F.linear); here W2 is (d_ff, d_model), "
                       "so the contract step is m @ W2 + b2.",
        (True, True): "both weights are used in the wrong orientation: your code expects nn.Linear's "
                      "(out, in) layout; here W1 is (d_model, d_ff) and W2 is (d_ff, d_model), "
                      "so FFN(x) = GELU(x @ W1 + b1) @ W2 + b2.",
    }

    def evaluate(self, fn: Any) -> Result:
        result = super().evaluate(fn)
        if result.status != FAILED or "Likely mistake" in result.message or not callable(fn):
            return result
        for flips, hint in self._LAYOUT_HINTS.items():
            if self._right_when_flipped(fn, flips):
                return Result(FAILED, f"{result.message} Likely mistake: {hint}", self.title)
        return result

    def _right_when_flipped(self, fn: Callable[..., Any], flips: tuple[bool, bool]) -> bool:
        try:
            for case in self.cases():
                x, W1, b1, W2, b2 = copy.deepcopy(case.args)
                expected = self.reference(x.clone(), W1.clone(), b1, W2.clone(), b2)
                W1 = W1.T.contiguous() if flips[0] else W1
                W2 = W2.T.contiguous() if flips[1] else W2
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = fn(x, W1, b1, W2, b2)
                if got is None or compare(got, expected, self.atol, self.rtol) is not None:
                    return False
            return True
        except Exception:  # the flipped call failing just means "not this mistake"
            return False


check_ffn_forward = _ForwardExercise(
    "Exercise 1 (FFN forward from explicit weights)",
    _ffn_forward,
    _forward_cases,
    mistakes=[
        ("b1 is missing: add it before the activation, GELU(x @ W1 + b1).",
         lambda x, W1, b1, W2, b2: F.gelu(x @ W1) @ W2 + b2),
        ("b2 is missing: add it after the contraction, ... @ W2 + b2.",
         lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1) @ W2),
        ("both biases are missing: FFN(x) = GELU(x @ W1 + b1) @ W2 + b2.",
         lambda x, W1, b1, W2, b2: F.gelu(x @ W1) @ W2),
        ("you used ReLU; this FFN uses the exact GELU, x·Φ(x) (torch.nn.functional.gelu).",
         lambda x, W1, b1, W2, b2: torch.relu(x @ W1 + b1) @ W2 + b2),
        ("you used GELU's tanh approximation; the exercise asks for the exact GELU, x·Φ(x) = "
         "x/2·(1 + erf(x/√2)) (F.gelu without approximate='tanh').",
         lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1, approximate="tanh") @ W2 + b2),
        ("there is no activation: without φ the two matrices collapse into one linear map.",
         lambda x, W1, b1, W2, b2: (x @ W1 + b1) @ W2 + b2),
        ("b1 was added after the activation: it belongs inside, GELU(x @ W1 + b1).",
         lambda x, W1, b1, W2, b2: (F.gelu(x @ W1) + b1) @ W2 + b2),
    ],
    atol=1e-5, rtol=1e-5,
)

# --------------------------------------------------------------------------------------------
# Exercise 2: parameter count
# --------------------------------------------------------------------------------------------


def _param_count(d_model: int, d_ff: int, bias: bool = True) -> int:
    return ffn_param_count(d_model, d_ff, bias=bias)


def _param_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(148)
    sizes = [(6, 20, True), (10, 24, False), (16, 64, True)]
    for _ in range(3):
        d, d_ff = _randint(gen, 2, 200), _randint(gen, 3, 900)
        sizes.append((d, d_ff + (d_ff == 4 * d), bool(_randint(gen, 0, 1))))
    sizes.append((768, 3072, True))
    return [Case(s, note="d_model={}, d_ff={}, bias={}".format(*s)) for s in sizes]


check_param_count = Exercise(
    "Exercise 2 (parameter count)",
    _param_count,
    _param_cases,
    mistakes=[
        ("the biases are missing: with bias=True add b1 (d_ff numbers) and b2 (d_model numbers).",
         lambda d, d_ff, bias=True: 2 * d * d_ff),
        ("only b1 is counted: b2 adds d_model more numbers.",
         lambda d, d_ff, bias=True: 2 * d * d_ff + (d_ff if bias else 0)),
        ("only b2 is counted: b1 adds d_ff more numbers.",
         lambda d, d_ff, bias=True: 2 * d * d_ff + (d if bias else 0)),
        ("you used 8·d² + 5·d, which assumes d_ff = 4·d_model; count with the d_ff you are given: "
         "2·d_model·d_ff + d_ff + d_model.",
         lambda d, d_ff, bias=True: 8 * d * d + (5 * d if bias else 0)),
        ("you counted the biases even though bias=False.",
         lambda d, d_ff, bias=True: 2 * d * d_ff + d_ff + d),
        ("only the first layer (W1, b1) is counted: the contraction W2 has d_ff·d_model more weights.",
         lambda d, d_ff, bias=True: d * d_ff + (d_ff if bias else 0)),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 3: forward FLOPs
# --------------------------------------------------------------------------------------------


def _forward_flops(n_tokens: int, d_model: int, d_ff: int) -> int:
    return 4 * n_tokens * d_model * d_ff


def _flops_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(4)
    sizes = [(10, 6, 20), (128, 64, 256)]
    for _ in range(3):
        n, d, d_ff = _randint(gen, 2, 5000), _randint(gen, 2, 300), _randint(gen, 3, 1200)
        sizes.append((n, d, d_ff + (d_ff == 4 * d)))
    sizes.append((1024, 768, 3072))
    return [Case(s, note="n_tokens={}, d_model={}, d_ff={}".format(*s)) for s in sizes]


check_forward_flops = Exercise(
    "Exercise 3 (forward FLOPs)",
    _forward_flops,
    _flops_cases,
    mistakes=[
        ("your count is half the right one: either a multiply-add was counted as 1 FLOP instead of 2, "
         "or only one of the two matrix products (x·W1 and m·W2, each n·d_model·d_ff multiply-adds) was counted.",
         lambda n, d, d_ff: 2 * n * d * d_ff),
        ("you counted forward + backward (12·n·d·d_ff); the exercise asks for the forward pass only (4·n·d·d_ff).",
         lambda n, d, d_ff: 12 * n * d * d_ff),
        ("you gave the count for one token: multiply by n_tokens.",
         lambda n, d, d_ff: 4 * d * d_ff),
        ("you assumed d_ff = 4·d_model (16·n·d²); use the d_ff you are given.",
         lambda n, d, d_ff: 16 * n * d * d),
        ("you also counted the bias additions (and/or the activation); count only the two matrix "
         "products, as FlopCounterMode does.",
         lambda n, d, d_ff: 4 * n * d * d_ff + n * (d_ff + d)),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 4: per-neuron contributions m_i · v_i
# --------------------------------------------------------------------------------------------


def _contributions(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(T, d) -> (T, d_ff, d)``: ``out[t, i] = m[t, i] · w2.weight[:, i]``."""
    with torch.no_grad():
        return ffn.hidden(x).unsqueeze(-1) * ffn.w2.weight.T


def _contribution_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(3)
    cases = []
    for k, act in enumerate(["gelu", "gelu", "relu", "gelu"]):
        T, d, d_ff = _distinct_sizes(gen)
        with torch.random.fork_rng(devices=[]):  # FFN's init draws from the global generator: leave it untouched
            torch.manual_seed(1000 + k)
            ffn = FFN(d, d_ff, act).eval()
        with torch.no_grad():  # biases as large as the weights, so a missing b1 shows
            ffn.w1.bias.copy_(torch.randn(d_ff, generator=gen) * 0.5)
            ffn.w2.bias.copy_(torch.randn(d, generator=gen) * 0.5)
        x = torch.randn(T, d, generator=gen) * 2
        cases.append(Case((ffn, x), note=f"FFN(d_model={d}, d_ff={d_ff}, activation={act!r}), x {tuple(x.shape)}"))
    return cases


def _without_grad(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def wrapped(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return fn(ffn, x)
    return wrapped


check_contributions = Exercise(
    "Exercise 4 (per-neuron contributions)",
    _contributions,
    _contribution_cases,
    mistakes=[
        ("you weighted the values by the pre-activation h_i = k_i·x + b1_i; the memory coefficient is "
         "m_i = φ(h_i) (ffn.hidden(x) gives it).",
         _without_grad(lambda f, x: f.w1(x).unsqueeze(-1) * f.w2.weight.T)),
        ("you used the key k_i (row i of w1.weight) where the value belongs: value i is column i of "
         "w2.weight, i.e. w2.weight[:, i].",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w1.weight)),
        ("you reshaped w2.weight to (d_ff, d_model) with .view/.reshape: that reorders the numbers "
         "instead of transposing; the values are the rows of w2.weight.T.",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.reshape(f.d_ff, f.d_model))),
        ("b2 was added to every neuron's contribution: b2 is added once, after the sum over neurons.",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.T + f.w2.bias)),
        ("b1 is missing from m: m_i = φ(k_i·x + b1_i).",
         _without_grad(lambda f, x: f.act(x @ f.w1.weight.T).unsqueeze(-1) * f.w2.weight.T)),
        ("you hard-coded GELU: use the FFN's own activation (ffn.act, or ffn.hidden(x)); one hidden case uses ReLU.",
         _without_grad(lambda f, x: F.gelu(f.w1(x)).unsqueeze(-1) * f.w2.weight.T)),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 5: one pre-LayerNorm residual step
# --------------------------------------------------------------------------------------------


def _pre_ln_step(x: torch.Tensor, ffn: nn.Module, ln: nn.LayerNorm) -> torch.Tensor:
    """``(B, T, d) -> (B, T, d)``: ``x + FFN(LN(x))``."""
    with torch.no_grad():
        return x + ffn(ln(x))


def _pre_ln_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(5)
    cases = []
    for k in range(4):
        B, T, d = _randint(gen, 1, 3), _randint(gen, 2, 6), _randint(gen, 4, 12)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2000 + k)
            ffn = FFN(d).eval()
        ln = nn.LayerNorm(d)
        with torch.no_grad():  # a trained-looking LayerNorm: its scale and shift are not 1 and 0
            ln.weight.copy_(1 + 0.5 * torch.randn(d, generator=gen))
            ln.bias.copy_(0.5 * torch.randn(d, generator=gen))
        x = 3 * torch.randn(B, T, d, generator=gen) + 1
        cases.append(Case((x, ffn, ln), note=f"x {tuple(x.shape)}, FFN(d_model={d}), LayerNorm({d})"))
    return cases


def _no_grad3(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def wrapped(x: torch.Tensor, ffn: nn.Module, ln: nn.LayerNorm) -> torch.Tensor:
        with torch.no_grad():
            return fn(x, ffn, ln)
    return wrapped


check_pre_ln_step = Exercise(
    "Exercise 5 (pre-LN residual step)",
    _pre_ln_step,
    _pre_ln_cases,
    mistakes=[
        ("that is post-LN, LN(x + FFN(x)) (the original Transformer); pre-LN normalises only the "
         "FFN's input: x + FFN(LN(x)).",
         _no_grad3(lambda x, f, ln: ln(x + f(x)))),
        ("the residual is missing: add the input back, x + FFN(LN(x)).",
         _no_grad3(lambda x, f, ln: f(ln(x)))),
        ("the LayerNorm is missing: the FFN should see LN(x), x + FFN(LN(x)).",
         _no_grad3(lambda x, f, ln: x + f(x))),
        ("you added the normalised input LN(x) back; the residual carries the raw x: x + FFN(LN(x)).",
         _no_grad3(lambda x, f, ln: ln(x) + f(ln(x)))),
        ("you normalised without the LayerNorm's learned scale and shift (ln.weight, ln.bias): call ln(x).",
         _no_grad3(lambda x, f, ln: x + f(F.layer_norm(x, x.shape[-1:])))),
    ],
)

__all__ = ["check_ffn_forward", "check_param_count", "check_forward_flops", "check_contributions",
           "check_pre_ln_step"]
