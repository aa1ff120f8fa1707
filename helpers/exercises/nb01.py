"""Checkers for the exercises of notebook 01 (activations).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_gelu_exact(gelu_exact)``, and it prints one line (not attempted /
passed / what is wrong, with the likely mistake). The hidden cases come from
seeded generators with varied shapes, so a function that only handles the
example in the notebook will not pass.

=========================  =======================================  ==========================
checker                    your function                            returns
=========================  =======================================  ==========================
``check_gelu_exact``       ``gelu_exact(x)``                        ``x * Phi(x)``, shape of x
``check_gelu_tanh``        ``gelu_tanh(x)``                         tanh approximation
``check_swish``            ``swish(x, beta)``                       ``x * sigmoid(beta x)``
``check_gelu_derivative``  ``gelu_derivative(x)``                   ``Phi(x) + x Phi'(x)``
``check_dead_fraction``    ``dead_fraction(pre)``, pre ``(N, F)``   float in [0, 1]
``check_collapse``         ``collapse(W1, b1, W2, b2)``             ``(W, b)``
=========================  =======================================  ==========================
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import Case, Exercise

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_shape(g: torch.Generator, n_dims: int, low: int = 2, high: int = 9) -> tuple[int, ...]:
    return tuple(int(v) for v in torch.randint(low, high, (n_dims,), generator=g))


def _inputs(seed: int, scale: float = 2.5) -> list[Case]:
    """Float64 inputs of 1, 2 and 3 dimensions, plus a grid that crosses the interesting region [-4, 4]."""
    g = _generator(seed)
    cases = [Case((torch.linspace(-4, 4, 81, dtype=torch.float64),), note="input linspace(-4, 4, 81)")]
    for n_dims in (1, 2, 3):
        shape = _random_shape(g, n_dims)
        cases.append(Case((scale * torch.randn(shape, generator=g, dtype=torch.float64),)))
    return cases


def _normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1.0 + torch.erf(x / _SQRT2))


def _normal_pdf(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


# ---------------------------------------------------------------- exercise 1: exact GELU
def _gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return x * _normal_cdf(x)


def _gelu_tanh_form(x: torch.Tensor, coeff: float = 0.044715, scale: float = _SQRT_2_OVER_PI) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(scale * (x + coeff * x ** 3)))


check_gelu_exact = Exercise(
    "Exercise 1 (exact GELU)",
    _gelu_exact,
    lambda: _inputs(101),
    [
        ("you used the tanh approximation; this exercise wants the exact x·Φ(x), with Φ(x) = ½(1 + erf(x/√2)).",
         _gelu_tanh_form),
        ("you returned ReLU, max(0, x); GELU weights x by Φ(x) instead of cutting it at 0.", torch.relu),
        ("you forgot the ½ in Φ(x) = ½(1 + erf(x/√2)), so the output is twice too large.",
         lambda x: x * (1.0 + torch.erf(x / _SQRT2))),
        ("you computed x·σ(x) (SiLU); GELU uses the normal CDF Φ, not the logistic sigmoid σ.",
         lambda x: x * torch.sigmoid(x)),
        ("erf needs x/√2, not x: Φ(x) = ½(1 + erf(x/√2)).", lambda x: 0.5 * x * (1.0 + torch.erf(x))),
    ],
    atol=1e-6, rtol=1e-5,
)


# ---------------------------------------------------------------- exercise 2: tanh-approximate GELU
check_gelu_tanh = Exercise(
    "Exercise 2 (tanh-approximate GELU)",
    _gelu_tanh_form,
    lambda: _inputs(202),
    [
        ("the cubic coefficient is 0.044715, not 0.0447 (the checker is strict enough to see the difference).",
         lambda x: _gelu_tanh_form(x, coeff=0.0447)),
        ("the x³ term is missing: the argument of tanh is √(2/π)·(x + 0.044715·x³).",
         lambda x: _gelu_tanh_form(x, coeff=0.0)),
        ("the scale is √(2/π) ≈ 0.798, not √(π/2) ≈ 1.253.",
         lambda x: _gelu_tanh_form(x, scale=math.sqrt(math.pi / 2.0))),
        ("you returned the exact GELU (erf); this exercise asks for the tanh approximation.", _gelu_exact),
        ("you forgot the leading ½: GELU ≈ ½·x·(1 + tanh(…)).", lambda x: 2.0 * _gelu_tanh_form(x)),
    ],
    atol=1e-9, rtol=1e-6,
)


# ---------------------------------------------------------------- exercise 3: Swish with beta
def _swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    return x * torch.sigmoid(beta * x)


def _swish_cases() -> list[Case]:
    g = _generator(303)
    cases = []
    for beta in (2.0, 0.5, 1.702, 5.0, 0.0):
        shape = _random_shape(g, int(torch.randint(1, 4, (1,), generator=g)))
        x = 3.0 * torch.randn(shape, generator=g, dtype=torch.float64)
        cases.append(Case((x, beta), note=f"x of shape {shape}, beta={beta}"))
    return cases


check_swish = Exercise(
    "Exercise 3 (Swish with β)",
    _swish,
    _swish_cases,
    [
        ("β is ignored: you computed x·σ(x) (SiLU); scale the sigmoid's input, σ(β·x).",
         lambda x, beta: x * torch.sigmoid(x)),
        ("you divided by β instead of putting β inside the sigmoid: the formula is x·σ(β·x).",
         lambda x, beta: x * torch.sigmoid(x) / beta),
        ("β multiplies the whole output; it belongs inside the sigmoid: x·σ(β·x), not β·x·σ(x).",
         lambda x, beta: beta * x * torch.sigmoid(x)),
        ("you returned the gate σ(β·x) alone; Swish multiplies it by x.", lambda x, beta: torch.sigmoid(beta * x)),
    ],
)


# ---------------------------------------------------------------- exercise 4: GELU's derivative
def _gelu_derivative(x: torch.Tensor) -> torch.Tensor:
    return _normal_cdf(x) + x * _normal_pdf(x)


def _tanh_form_derivative(x: torch.Tensor) -> torch.Tensor:
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
    t = torch.tanh(inner)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x ** 2)


check_gelu_derivative = Exercise(
    "Exercise 4 (GELU's derivative)",
    _gelu_derivative,
    lambda: _inputs(404),
    [
        ("you kept only Φ(x); the product rule on x·Φ(x) also gives x·Φ'(x), with Φ'(x) = e^(−x²/2)/√(2π) the normal "
          "density.",
         _normal_cdf),
        ("sign error: d/dx [x·Φ(x)] = Φ(x) + x·Φ'(x), a plus, because Φ'(x) > 0.",
         lambda x: _normal_cdf(x) - x * _normal_pdf(x)),
        ("that is the derivative of the tanh approximation; differentiate the exact x·Φ(x) instead.",
         _tanh_form_derivative),
        ("you returned Φ'(x), the normal density alone; GELU's derivative is Φ(x) + x·Φ'(x).", _normal_pdf),
        ("the normal density needs the ½ in its exponent: Φ'(x) = e^(−x²/2)/√(2π), not e^(−x²)/√(2π).",
         lambda x: _normal_cdf(x) + x * torch.exp(-x * x) / math.sqrt(2.0 * math.pi)),
    ],
    atol=1e-6, rtol=1e-5,
)


# ---------------------------------------------------------------- exercise 5: dead ReLU units
def _dead_fraction(pre: torch.Tensor) -> float:
    return (pre <= 0).all(dim=0).double().mean().item()


def _dead_cases() -> list[Case]:
    """Pre-activation matrices (N examples, F units) with a known set of dead units.

    Some dead units are negative everywhere, some are exactly 0 everywhere (a unit whose
    weights and bias are all zero: ReLU gives 0 and passes no gradient), and every live unit
    is positive on at least one example, not necessarily on most.
    """
    g = _generator(505)
    cases = []
    for n, f in ((6, 10), (32, 20), (9, 50), (64, 7)):
        pre = torch.randn(n, f, generator=g, dtype=torch.float64)
        n_dead = int(torch.randint(1, f, (1,), generator=g))
        dead = torch.randperm(f, generator=g)[:n_dead]
        pre[:, dead] = -pre[:, dead].abs()
        pre[:, dead[: max(1, n_dead // 3)]] = 0.0
        alive = torch.ones(f, dtype=torch.bool)
        alive[dead] = False
        rows = torch.randint(0, n, (f,), generator=g)
        cols = torch.arange(f)[alive]
        pre[rows[alive], cols] = pre[rows[alive], cols].abs() + 0.1  # each live unit fires at least once
        cases.append(Case((pre,), note=f"pre-activations of shape ({n}, {f}) with {n_dead} dead units"))
    return cases


check_dead_fraction = Exercise(
    "Exercise 5 (fraction of dead ReLU units)",
    _dead_fraction,
    _dead_cases,
    [
        ("you counted (example, unit) pairs that are ≤ 0; a unit is dead only when it is ≤ 0 on EVERY example "
         "(reduce over the example axis first, with .all(dim=0)).", lambda pre: (pre <= 0).double().mean().item()),
        ("you returned the fraction of units that are alive; the question asks for the dead ones.",
         lambda pre: 1.0 - (pre <= 0).all(dim=0).double().mean().item()),
        ("wrong axis: rows are examples and columns are units, so reduce over dim=0 (examples), not dim=1.",
         lambda pre: (pre <= 0).all(dim=1).double().mean().item()),
        ("use ≤ 0, not < 0: a pre-activation of exactly 0 gives ReLU output 0 and gradient 0, so the unit is dead.",
         lambda pre: (pre < 0).all(dim=0).double().mean().item()),
        ("you used .any() where .all() is needed: a unit that is off on SOME examples is still alive.",
         lambda pre: (pre <= 0).any(dim=0).double().mean().item()),
        ("you returned the NUMBER of dead units; divide by the number of units (or take .mean()) to get a fraction.",
         lambda pre: int((pre <= 0).all(dim=0).sum())),
    ],
)


# ---------------------------------------------------------------- exercise 6: collapse two linear layers
def _collapse(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    return w2 @ w1, w2 @ b1 + b2


def _collapse_cases() -> list[Case]:
    g = _generator(606)
    cases = []
    for d_in, d_hidden, d_out in ((5, 5, 5), (3, 7, 4), (6, 2, 9), (8, 12, 8)):
        w1 = torch.randn(d_hidden, d_in, generator=g, dtype=torch.float64)
        b1 = torch.randn(d_hidden, generator=g, dtype=torch.float64)
        w2 = torch.randn(d_out, d_hidden, generator=g, dtype=torch.float64)
        b2 = torch.randn(d_out, generator=g, dtype=torch.float64)
        cases.append(Case((w1, b1, w2, b2), note=f"W1 ({d_hidden}, {d_in}), W2 ({d_out}, {d_hidden})"))
    return cases


check_collapse = Exercise(
    "Exercise 6 (collapse two linear layers)",
    _collapse,
    _collapse_cases,
    [
        ("wrong order: the layer applied first stands on the right, so W = W2 @ W1, not W1 @ W2.",
         lambda w1, b1, w2, b2: (w1 @ w2, w2 @ b1 + b2)),
        ("the first layer's bias is missing: b1 passes through W2, so b = W2 @ b1 + b2.",
         lambda w1, b1, w2, b2: (w2 @ w1, b2)),
        ("the second layer's bias b2 is missing: b = W2 @ b1 + b2.",
         lambda w1, b1, w2, b2: (w2 @ w1, w2 @ b1)),
        ("b1 cannot be added as it is: it goes through the second layer first, so b = W2 @ b1 + b2.",
         lambda w1, b1, w2, b2: (w2 @ w1, b1 + b2)),
        ("W is transposed: it maps D inputs to O outputs, so its shape is (O, D), like W2 @ W1 (not W1.T @ W2.T).",
         lambda w1, b1, w2, b2: (w1.T @ w2.T, w2 @ b1 + b2)),
    ],
)

#: every checker of this notebook, in order
EXERCISES = [check_gelu_exact, check_gelu_tanh, check_swish, check_gelu_derivative, check_dead_fraction,
             check_collapse]
