"""Checkers for the exercises of notebook 04 (gated FFNs at matched parameters).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_swiglu(swiglu)``, and it prints one line (not attempted / passed /
what is wrong, with the likely mistake). The hidden cases come from seeded
generators with varied shapes and sizes, not only the examples in the notebook.

==========================  ============================================  ===================================
checker                     your function                                 returns
==========================  ============================================  ===================================
``check_swiglu``            ``swiglu(x, w1, w3, w2)``                     ``(..., d_model)``
``check_gated_width``       ``gated_width(d_model, multiple_of)``         int
``check_gated_params``      ``gated_params(d_model, d_ff, bias)``         int
``check_gate_gradients``    ``gate_gradients(a, b, grad_h)``              ``(grad_a, grad_b)``
``check_saved_per_token``   ``saved_per_token(variant, d_model, d_ff)``   int
==========================  ============================================  ===================================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.exercises.engine import Case, Exercise
from helpers.ffn import ffn_param_count, matched_gated_width
from helpers.gating import gate_gradients as _gate_gradients
from helpers.gating import saved_per_token as _saved_per_token


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high)."""
    return int(torch.randint(low, high, (1,), generator=g))


# ---------------------------------------------------------------- exercise 1: SwiGLU forward
def _swiglu(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def _swiglu_cases() -> list[Case]:
    g = _generator(401)
    cases = []
    # (leading shape, d_model, d_ff): one square case (d_ff == d_model) so a missing transpose cannot hide
    # behind a shape error, and several rectangular ones.
    for lead, d, d_ff in [((2, 3), 6, 6), ((5,), 4, 6), ((7,), 3, 8), ((2, 4), 5, 9)]:
        x = torch.randn(*lead, d, generator=g, dtype=torch.float64)
        w1 = torch.randn(d_ff, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        w3 = torch.randn(d_ff, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        w2 = torch.randn(d, d_ff, generator=g, dtype=torch.float64) / math.sqrt(d_ff)
        cases.append(Case((x, w1, w3, w2), note=f"x {tuple(x.shape)}, d_ff={d_ff}"))
    return cases


check_swiglu = Exercise(
    "Exercise 1 (SwiGLU forward)",
    _swiglu,
    _swiglu_cases,
    [
        ("SiLU went on the wrong branch: in this course φ acts on x @ w1.T (the gate), and x @ w3.T stays linear.",
         lambda x, w1, w3, w2: ((x @ w1.T) * F.silu(x @ w3.T)) @ w2.T),
        ("you used the sigmoid σ(a) as the gate, which is GLU; SwiGLU uses SiLU(a) = a·σ(a).",
         lambda x, w1, w3, w2: (torch.sigmoid(x @ w1.T) * (x @ w3.T)) @ w2.T),
        ("you used GELU, which makes GEGLU; SwiGLU's gate is SiLU(a) = a·σ(a).",
         lambda x, w1, w3, w2: (F.gelu(x @ w1.T) * (x @ w3.T)) @ w2.T),
        ("you added the two branches; a gated FFN multiplies them elementwise: SiLU(x w1ᵀ) ⊙ (x w3ᵀ).",
         lambda x, w1, w3, w2: (F.silu(x @ w1.T) + (x @ w3.T)) @ w2.T),
        ("the output projection is missing: contract the hidden vector with w2 (h @ w2.T) back to d_model.",
         lambda x, w1, w3, w2: F.silu(x @ w1.T) * (x @ w3.T)),
        ("w2 is stored as (d_model, d_ff) like nn.Linear, so the contraction is h @ w2.T, not h @ w2.",
         lambda x, w1, w3, w2: (F.silu(x @ w1.T) * (x @ w3.T)) @ w2),
        ("you applied SiLU to the product as well (or instead): only the gate branch goes through SiLU.",
         lambda x, w1, w3, w2: F.silu((x @ w1.T) * (x @ w3.T)) @ w2.T),
    ],
    atol=1e-9, rtol=1e-7,
)


# ---------------------------------------------------------------- exercise 2: the matched width rule
def _gated_width(d_model: int, multiple_of: int) -> int:
    return matched_gated_width(d_model, 4, multiple_of)


def _round_up(width: float, m: int) -> int:
    return m * math.ceil(width / m)


def _gated_width_cases() -> list[Case]:
    # The first cases are chosen so that each listed mistake first fails on a case that tells it apart:
    # (4096, 256) LLaMA's rounding; (768, 256) 8d/3 is already a multiple; (2, 1) 8d/3 = 5.33 truncates to 5.
    fixed = [(4096, 256), (768, 256), (2, 1), (4096, 1), (5120, 256), (24, 1), (100, 8), (1, 2), (64, 64), (7, 4)]
    g = _generator(402)
    for _ in range(8):
        fixed.append((_randint(g, 1, 6000), [1, 2, 8, 32, 64, 128, 256][_randint(g, 0, 7)]))
    return [Case((d, m), note=f"d_model={d}, multiple_of={m}") for d, m in fixed]


check_gated_width = Exercise(
    "Exercise 2 (matched width rule)",
    _gated_width,
    _gated_width_cases,
    [
        ("you rounded *down* to the multiple; LLaMA rounds up (10922 -> 11008 with multiple 256), so the width "
         "never drops below 2/3·4d.", lambda d, m: m * (int(8 * d / 3) // m)),
        ("you took 2/3 of d_model; the dense FFN being matched has width 4·d_model, so the rule is int(2·4·d/3).",
         lambda d, m: _round_up(int(2 * d / 3), m)),
        ("you rounded 8d/3 to the nearest integer; the rule truncates first: int(2·4·d/3) (4096 -> 10922, "
         "not 10923), then rounds up to the multiple.", lambda d, m: _round_up(round(8 * d / 3), m)),
        ("you rounded 8d/3 up without truncating it first (math.ceil on the fraction): take int(2·4·d/3) first, "
         "then round *that* up to the multiple (d_model=2, multiple 1 gives 5, not 6).",
         lambda d, m: _round_up(8 * d / 3, m)),
        ("multiple_of was ignored: round int(2·4·d/3) up to the next multiple of multiple_of.",
         lambda d, m: int(8 * d / 3)),
        ("a width that is already a multiple must stay as it is; you always added one more multiple.",
         lambda d, m: m * (int(8 * d / 3) // m + 1)),
    ],
)


# ---------------------------------------------------------------- exercise 3: parameters of a gated FFN
def _gated_params(d_model: int, d_ff: int, bias: bool) -> int:
    return ffn_param_count(d_model, d_ff, gated=True, bias=bias)


def _gated_params_cases() -> list[Case]:
    fixed = [(24, 64, False), (768, 2048, True), (4096, 11008, False), (8, 12, True), (16, 16, True)]
    g = _generator(403)
    for i in range(6):
        fixed.append((_randint(g, 2, 300), _randint(g, 2, 900), bool(i % 2)))
    return [Case((d, f, b), note=f"d_model={d}, d_ff={f}, bias={b}") for d, f, b in fixed]


check_gated_params = Exercise(
    "Exercise 3 (parameters of a gated FFN)",
    _gated_params,
    _gated_params_cases,
    [
        ("you counted two weight matrices, like a dense FFN; a gated FFN has three: w1 (gate), w3 (content) and "
         "w2 (output), 3·d·d_ff weights.", lambda d, f, b: ffn_param_count(d, f, gated=False, bias=b)),
        ("one d_ff-sized bias is missing: with bias=True both input projections (w1 and w3) have a bias of "
         "size d_ff, plus d_model for w2.", lambda d, f, b: 3 * d * f + ((f + d) if b else 0)),
        ("the output bias has size d_model (w2 maps d_ff -> d_model), not d_ff.",
         lambda d, f, b: 3 * d * f + (3 * f if b else 0)),
        ("the output projection's bias (size d_model) is missing.", lambda d, f, b: 3 * d * f + (2 * f if b else 0)),
        ("with bias=False there are no biases at all: only 3·d·d_ff weights.",
         lambda d, f, b: 3 * d * f + 2 * f + d),
        ("the weights are d·d_ff each, three of them: you squared a width somewhere.",
         lambda d, f, b: 3 * d * d + ((2 * f + d) if b else 0)),
    ],
)


# ---------------------------------------------------------------- exercise 4: the gradient through the gate
def _silu_prime(a: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(a)
    return s * (1 + a * (1 - s))


def _gate_gradient_cases() -> list[Case]:
    g = _generator(404)
    cases = []
    for shape in [(6,), (3, 5), (2, 3, 4), (9,)]:
        a, b, gh = (2.0 * torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
        cases.append(Case((a, b, gh), note=f"a, b, grad_h of shape {shape}"))
    return cases


def _silu_gate_gradients(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _gate_gradients(a, b, grad_h, "silu")


check_gate_gradients = Exercise(
    "Exercise 4 (gradient through the gate)",
    _silu_gate_gradients,
    _gate_gradient_cases,
    [
        ("the two gradients are swapped: return (grad_a, grad_b), gate first, content second.",
         lambda a, b, gh: (gh * F.silu(a), gh * b * _silu_prime(a))),
        ("SiLU's derivative is missing from grad_a: ∂h/∂a = SiLU'(a)·b, not b (that would be the Bilinear "
         "variant, with no activation).", lambda a, b, gh: (gh * b, gh * F.silu(a))),
        ("SiLU'(a) is σ(a)·(1 + a·(1 − σ(a))), not σ(a): differentiate a·σ(a) with the product rule.",
         lambda a, b, gh: (gh * b * torch.sigmoid(a), gh * F.silu(a))),
        ("grad_b is the gate's *value* SiLU(a) times grad_h, not the pre-activation a.",
         lambda a, b, gh: (gh * b * _silu_prime(a), gh * a)),
        ("you used the content b where the gate value belongs: ∂h/∂b = SiLU(a), the gate, not b.",
         lambda a, b, gh: (gh * b * _silu_prime(a), gh * b)),
        ("the upstream gradient grad_h is missing: by the chain rule multiply both local derivatives by grad_h.",
         lambda a, b, gh: (b * _silu_prime(a), F.silu(a))),
        ("grad_a lost the content factor b: ∂h/∂a = SiLU'(a)·b (the gate learns only when there is content).",
         lambda a, b, gh: (gh * _silu_prime(a), gh * F.silu(a))),
    ],
    atol=1e-9, rtol=1e-7,
)


# ---------------------------------------------------------------- exercise 5: saved activations per token
_SAVED_CASE_VARIANTS = ["relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu"]


def _saved_cases() -> list[Case]:
    g = _generator(405)
    cases = []
    for variant in _SAVED_CASE_VARIANTS:
        d, f = _randint(g, 4, 200), _randint(g, 8, 800)
        cases.append(Case((variant, d, f), note=f"variant={variant!r}, d_model={d}, d_ff={f}"))
    return cases


def _saved_wrong(k: dict[str, int]):
    return lambda v, d, f: d + k[v] * f


check_saved_per_token = Exercise(
    "Exercise 5 (saved activations per token)",
    _saved_per_token,
    _saved_cases,
    [
        ("GELU and SiLU need their *input* for the backward pass, so they keep the pre-activation as well as their "
         "output: dense GELU/Swish save d + 2·d_ff, GEGLU/SwiGLU d + 4·d_ff.",
         _saved_wrong({"relu": 1, "gelu": 1, "swish": 1, "glu": 3, "bilinear": 3, "reglu": 3, "geglu": 3,
                       "swiglu": 3})),
        ("x is saved once, even though w1 and w3 both read it: the two matrix products keep the same tensor.",
         lambda v, d, f: _saved_per_token(v, d, f) + (d if v in ("glu", "bilinear", "reglu", "geglu", "swiglu")
                                                      else 0)),
        ("the product φ(a)·b is saved too: w2's backward needs its input to compute w2's gradient.",
         lambda v, d, f: _saved_per_token(v, d, f) - (f if v in ("glu", "bilinear", "reglu", "geglu", "swiglu")
                                                      else 0)),
        ("ReLU's output is all its backward needs (the mask is output > 0), and w2 reuses that same tensor: "
         "dense ReLU saves d + d_ff.", lambda v, d, f: _saved_per_token(v, d, f) + (f if v == "relu" else 0)),
        ("the input x (d per token) counts too: w1's gradient needs it.",
         lambda v, d, f: _saved_per_token(v, d, f) - d),
    ],
)
