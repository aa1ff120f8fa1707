"""Checkers for the exercises of notebook 04 (gated FFNs at matched parameters).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_llama_width(llama_ffn_width)``, and it prints one line (not attempted /
passed / what is wrong, with the likely mistake). Each exercise declares the domain its
statement allows (``Domain``), and its seeded hidden cases reach every corner of it (every
variant, biases present and absent, a 0-dim or 1-D input, d_model = 1 and d_ff = 1, exact zeros
where a derivative has a kink, a = ±30, the multiplier's ends 0.5 and 2, a multiple larger than the
width, a width that already is a multiple), so a function that only handles the notebook's example
will not pass.

Dtypes, as each statement says: exercises 1, 4 and 5 take and return Python ints (a float,
even a whole one, fails once the values are right: ``returns=python_int()``); exercises 2 and 3 take float64 tensors and want
float64 answers, compared to about 1e-9 (a float32 answer gets a dtype note, not a pass).

=========================  ======  ===========================================================  ================
checker                    kind    your function                                                returns
=========================  ======  ===========================================================  ================
``check_llama_width``      build   ``llama_ffn_width(d_model, multiple_of, ffn_dim_multiplier)``  int
``check_gate_gradients``   build   ``gated_unit_gradients(a, b, grad_h, variant)``               ``(grad_a, grad_b)``
``check_fused_ffn``        build   ``fused_gated_ffn(x, w13, b13, w2, b2, variant)``             ``(..., d_model)``
``check_frozen_saved``     invest. ``saved_when_frozen(variant, d_model, d_ff)``                 int
``check_fused_saved``      invest. ``saved_with_fused_gate(variant, d_model, d_ff)``             int
=========================  ======  ===========================================================  ================

Weights follow ``nn.Linear``'s layout: ``W1``, ``W3`` are ``(d_ff, d_model)``, ``W2`` is
``(d_model, d_ff)``; a batch of row vectors ``X`` maps to ``X W1ᵀ``. The fused matrix of
exercise 3 stacks the rows of ``W1`` (gate) on top of the rows of ``W3`` (content):
``(2·d_ff, d_model)``. No reference here uses autograd, so a kernel with autograd
switched off (``torch.set_grad_enabled(False)``) judges the same; no reference changes its inputs.
``attempted(exercise, fn)`` says whether the learner has written ``fn`` (for a measurement cell that
should wait for a prediction).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from fractions import Fraction
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from helpers.exercises.engine import FAILED, HINT_PREFIX, NOT_ATTEMPTED, PASSED, Case, Corner, Domain, Exercise, \
    Result, compare
from helpers.exercises.sandbox import checking_state
from helpers.exercises.timelimit import CheckTimeout, TimeLimit
from helpers.exercises.returns import python_int

GATED = ("glu", "bilinear", "reglu", "geglu", "swiglu")
ALL_VARIANTS = ("relu", "gelu", "swish") + GATED


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high)."""
    return int(torch.randint(low, high, (1,), generator=g))


# ---------------------------------------------------------------- exercise 1: LLaMA's width rule
def _round_up(width: int, m: int) -> int:
    return m * ((width + m - 1) // m)


def _llama_width(d_model: int, multiple_of: int, ffn_dim_multiplier: float | None = None) -> int:
    width = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        width = int(ffn_dim_multiplier * width)
    return _round_up(width, multiple_of)


def _ambiguous(d_model: int, multiplier: float | None) -> bool:
    """True when multiplier·width is a whole number that float arithmetic may land just below
    (1.2 * 170 = 203.99999999999997): a case whose answer depends on how the product is written. Also
    true when the ways of writing the slip "multiplier × 8d/3, untruncated" truncate to different ints,
    so that slip is named whichever way a learner writes it."""
    if multiplier is None:
        return False
    width = int(2 * 4 * d_model / 3)
    exact = Fraction(str(multiplier)) * width
    k, d = multiplier, d_model
    slips = {int(k * 8 * d / 3), int(k * (8 * d / 3)), int(8 * d * k / 3), int(k * (2 * 4 * d / 3)),
             int(k * 2 * 4 * d / 3), int(Fraction(str(k)) * Fraction(8 * d, 3))}
    return (exact.denominator == 1 and multiplier * width != exact) or len(slips) > 1


def _width_args(case: Case) -> tuple[int, int, float | None]:
    d, m, *rest = case.args
    return d, m, rest[0] if rest else None


def _width_before_rounding(case: Case) -> int:
    d, _, k = _width_args(case)
    width = int(2 * 4 * d / 3)
    return width if k is None else int(k * width)


LLAMA_WIDTH_DOMAIN = Domain(
    allows="d_model and multiple_of: Python ints >= 1 (d_model up to 9000, multiple_of up to 4096); "
           "ffn_dim_multiplier: None or a Python float in [0.5, 2], the product computed in floating point; "
           "returns a Python int",
    corners=(
        Corner("d_model = 1 (the smallest width, 2)", lambda c: _width_args(c)[0] == 1),
        Corner("multiple_of = 1 (nothing to round)", lambda c: _width_args(c)[1] == 1),
        Corner("multiple_of larger than the width", lambda c: _width_args(c)[1] > _width_before_rounding(c)),
        Corner("a width that already is a multiple (it stays)",
               lambda c: _width_args(c)[1] > 1 and _width_before_rounding(c) % _width_args(c)[1] == 0),
        Corner("ffn_dim_multiplier = None", lambda c: _width_args(c)[2] is None),
        Corner("ffn_dim_multiplier = 0.5 (the smallest)", lambda c: _width_args(c)[2] == 0.5),
        Corner("ffn_dim_multiplier = 2.0 (the largest)", lambda c: _width_args(c)[2] == 2.0),
        Corner("3 divides d_model (8d/3 whole)", lambda c: _width_args(c)[0] % 3 == 0),
        Corner("multiplier × width not whole (truncate, do not round)",
               lambda c: _width_args(c)[2] is not None
               and round(_width_args(c)[2] * int(8 * _width_args(c)[0] / 3)) != _width_before_rounding(c)),
        Corner("multiplying before the first truncation changes the answer",
               lambda c: _width_args(c)[2] is not None
               and _llama_width(*_width_args(c)) != _width_mistake("multiplier before truncation")(*_width_args(c))),
        Corner("rounding to the nearest multiple would round down",
               lambda c: _llama_width(*_width_args(c)) != _width_mistake("round to nearest multiple")(*_width_args(c))),
        Corner("a product that floating point puts just below a whole number (0.57 · 200 -> 113)",
               lambda c: _width_args(c)[2] is not None and _llama_width(*_width_args(c))
               != _width_mistake("exact product")(*_width_args(c))),
        Corner("a released size (d_model 8192, multiple_of 4096)", lambda c: _width_args(c)[:2] == (8192, 4096)),
    ),
)


def _llama_width_cases() -> list[Case]:
    # Released configurations first (LLaMA-1 7B, LLaMA-3 8B, LLaMA-2 70B, Llama 3.2 1B), then the edges the
    # statement allows: 768 (8d/3 is already a multiple: it stays), 2 (8d/3 = 5.33 truncates to 5), 10 with 1.3
    # (26·1.3 = 33.8: truncate, do not round; 6 with 1.3: 16·1.3 = 20.8, where scaling 4d first happens to give
    # the right answer), d = 1 (the smallest width, 2) with multiples 1, 2 and 4 (a multiple above the width),
    # d = 1 with the smallest multiplier 0.5 (width 1), 2 with multiple 64, 48 with multiple 64 and 3 with 2.0
    # (already a multiple after the multiplier), 7 with 0.8 (the multiplier shrinks the width), 8 with 0.8 (scaling
    # 4d first is right by luck, scaling the untruncated 8d/3 is not: it tells those two slips apart).
    fixed = [(4096, 256, None), (4096, 1024, 1.3), (8192, 4096, 1.3), (2048, 256, 1.5), (768, 256, None),
             (2, 1, None), (10, 1, 1.3), (6, 1, 1.3), (1, 2, None), (1, 1, None), (1, 4, None), (1, 1, 0.5),
             (2, 64, None), (100, 8, 1.5), (48, 64, 1.5), (3, 8, 2.0), (7, 4, 0.8), (8, 1, 0.8)]
    g = _generator(401)
    multipliers = [None, None, 0.8, 1.0, 1.2, 1.3, 1.5, 2.0]
    multiples = [1, 2, 8, 32, 64, 128, 256, 1024]
    while len(fixed) < 26:
        d = _randint(g, 1, 9000)
        m = multiples[_randint(g, 0, len(multiples))]
        k = multipliers[_randint(g, 0, len(multipliers))]
        if not _ambiguous(d, k):
            fixed.append((d, m, k))
    assert not any(_ambiguous(d, k) for d, _, k in fixed)
    # The statement's "in floating point": 0.57 · 200 is 113.99999999999999 there (113), 114 exactly.
    fixed.append((75, 1, 0.57))
    return [Case((d, m, k), note=f"d_model={d}, multiple_of={m}, ffn_dim_multiplier={k}") for d, m, k in fixed]


def _width_mistake(order: str):
    def wrong(d: int, m: int, k: float | None = None) -> int:
        width = int(2 * 4 * d / 3)
        if order == "ignore multiplier":
            return _round_up(width, m)
        if order == "multiplier after rounding":
            width = _round_up(width, m)
            return int(k * width) if k is not None else width
        if order == "multiplier on 4d":
            width = int(2 * int(k * 4 * d) / 3) if k is not None else width
            return _round_up(width, m)
        if order == "round the product":
            width = round(k * width) if k is not None else width
            return _round_up(width, m)
        if order == "round down":
            width = int(k * width) if k is not None else width
            return m * (width // m)
        if order == "ceil width":
            width = math.ceil(8 * d / 3)
            width = int(k * width) if k is not None else width
            return _round_up(width, m)
        if order == "no truncation":
            exact = 8 * d / 3 * (k if k is not None else 1)
            return m * math.ceil(exact / m)
        if order == "exact product":
            width = int(Fraction(str(k)) * width) if k is not None else width
            return _round_up(width, m)
        if order == "ignore multiple":
            return int(k * width) if k is not None else width
        if order == "always one more multiple":
            width = int(k * width) if k is not None else width
            return m * (width // m + 1)
        if order == "multiplier before truncation":
            width = int(k * (2 * 4 * d / 3)) if k is not None else width
            return _round_up(width, m)
        if order == "round to nearest multiple":
            width = int(k * width) if k is not None else width
            return m * round(width / m)
        raise AssertionError(order)
    return wrong


check_llama_width = Exercise(
    "Exercise 1 (LLaMA's FFN width rule)",
    _llama_width,
    _llama_width_cases,
    [
        ("ffn_dim_multiplier was ignored: when it is given (not None), multiply the 2/3 width by it, truncate to "
         "an int, and only then round up (LLaMA-3 8B: 10922 -> 14198 -> 14336).", _width_mistake("ignore multiplier")),
        ("you applied ffn_dim_multiplier after rounding to the multiple; the released code scales int(2·4·d/3) "
         "first, truncates, and rounds the result up to the multiple last.", _width_mistake("multiplier after rounding")),
        ("you scaled 4·d_model by the multiplier before taking 2/3; the rule takes int(2·4·d/3) first and "
         "multiplies that width.", _width_mistake("multiplier on 4d")),
        ("multiplier × width was not truncated: the rule takes int() of it (26 × 1.3 = 33.8 -> 33) and only then "
         "rounds up to the multiple; rounding 33.8, or rounding it up to the multiple directly, gives 34.",
         _width_mistake("round the product")),
        ("you rounded *down* to the multiple; LLaMA rounds up (10922 -> 11008 with multiple 256), so the width "
         "never drops below the scaled 2/3 width.", _width_mistake("round down")),
        ("you rounded the fraction up without truncating it first: take int(2·4·d/3) (d_model = 2 gives 5, "
         "not 6), apply the multiplier and int() again, then round up to the multiple.",
         _width_mistake("no truncation")),
        ("you rounded 2·4·d_model/3 up (ceil); the rule truncates it with int() (d_model = 2 gives 5, not 6), "
         "applies the multiplier and int() again, and only the last step rounds up, to the multiple.",
         _width_mistake("ceil width")),
        ("you computed multiplier × width exactly (Fraction or Decimal); the statement, like the released code, "
         "multiplies in floating point, int(ffn_dim_multiplier * width), where 0.57 × 200 is 113.99999999999999: "
         "113, not 114.", _width_mistake("exact product")),
        ("multiple_of was ignored: round the width up to the next multiple of multiple_of.",
         _width_mistake("ignore multiple")),
        ("a width that already is a multiple of multiple_of must stay as it is (768 -> 2048 with multiple 256); "
         "(width // multiple_of + 1) · multiple_of adds a whole multiple there. Round up with "
         "multiple_of · ceil(width / multiple_of).", _width_mistake("always one more multiple")),
        ("you multiplied the untruncated 8·d/3 by ffn_dim_multiplier; the rule truncates twice: "
         "int(2·4·d/3) first, then int(multiplier × that width) (d_model = 10, 1.3: int(26 × 1.3) = 33, "
         "not int(26.67 × 1.3) = 34).", _width_mistake("multiplier before truncation")),
        ("you rounded to the *nearest* multiple; LLaMA rounds up, so the width never drops below the scaled "
         "2/3 width (multiple_of · ceil(width / multiple_of)).", _width_mistake("round to nearest multiple")),
    ],
    kind="build",
    domain=LLAMA_WIDTH_DOMAIN,
    returns=python_int(),
)


# ---------------------------------------------------------------- exercise 2: gradients through any gate
def _phi_and_slope(a: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """φ(a) and φ'(a) in closed form (ReLU'(0) = 0, as PyTorch's autograd; exact erf GELU)."""
    if variant == "glu":
        s = torch.sigmoid(a)
        return s, s * (1 - s)
    if variant == "bilinear":
        return a, torch.ones_like(a)
    if variant == "reglu":
        return torch.relu(a), (a > 0).to(a.dtype)
    if variant == "geglu":
        cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
        return a * cdf, cdf + a * pdf
    if variant == "swiglu":
        s = torch.sigmoid(a)
        return a * s, s * (1 + a * (1 - s))
    raise ValueError(f"variant must be one of {list(GATED)}, got {variant!r}")


def _gate_gradients(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor,
                    variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    phi, slope = _phi_and_slope(a, variant)
    return grad_h * slope * b, grad_h * phi


GATE_GRADIENTS_DOMAIN = Domain(
    allows="variant: one of 'glu', 'bilinear', 'reglu', 'geglu', 'swiglu'; a, b, grad_h: float64 tensors of one "
           "shape (0-d to 3-d); a in [-30, 30] with exact zeros; b and grad_h of either sign, exact zeros included; "
           "returns two float64 tensors of that shape",
    corners=tuple(Corner(f"variant {v!r} with a exactly 0" + (" (ReLU's kink)" if v == "reglu" else ""),
                         lambda c, v=v: c.args[3] == v and bool((c.args[0] == 0).any())) for v in GATED) + (
        Corner("a = -30 (the lower end)", lambda c: bool((c.args[0] == -30).any())),
        Corner("a = 30 (the upper end)", lambda c: bool((c.args[0] == 30).any())),
        Corner("|a| tiny but not 0 (1e-8)", lambda c: bool(((c.args[0].abs() > 0) & (c.args[0].abs() < 1e-6)).any())),
        Corner("b exactly 0", lambda c: bool((c.args[1] == 0).any())),
        Corner("grad_h exactly 0", lambda c: bool((c.args[2] == 0).any())),
        Corner("negative b and grad_h", lambda c: bool((c.args[1] < 0).any() and (c.args[2] < 0).any())),
        Corner("0-dim tensors", lambda c: c.args[0].dim() == 0),
        Corner("a 1-element 1-D tensor", lambda c: c.args[0].dim() == 1 and c.args[0].numel() == 1),
        Corner("3-D tensors", lambda c: c.args[0].dim() == 3),
    ),
)


def _gate_gradient_cases() -> list[Case]:
    g = _generator(402)
    cases = []
    shapes = {"glu": (6,), "bilinear": (3, 5), "reglu": (2, 3, 4), "geglu": (1,), "swiglu": (4, 4)}
    for variant in GATED:
        a, b, gh = (2.0 * torch.randn(shapes[variant], generator=g, dtype=torch.float64) for _ in range(3))
        flat = a.view(-1)
        if variant == "reglu":                       # exact zeros: ReLU'(0) = 0 must be honoured
            flat[::3] = 0.0
        if variant in ("glu", "swiglu"):             # a far into both tails
            flat[0], flat[-1] = 30.0, -30.0
        if variant == "geglu":
            flat[0] = -1.5
        cases.append(Case((a, b, gh, variant), note=f"variant={variant!r}, a, b, grad_h of shape {tuple(a.shape)}"))
    # a second round: every variant on one shared batch with zeros in b and in grad_h
    a, b, gh = (2.0 * torch.randn(3, 7, generator=g, dtype=torch.float64) for _ in range(3))
    a[0, 0], b[1, :2], gh[2, 3] = 0.0, 0.0, 0.0
    for variant in GATED:
        cases.append(Case((a, b, gh, variant), note=f"variant={variant!r}, a, b, grad_h of shape (3, 7) with zeros"))
    # a third: the ends of the range the statement allows (|a| up to 30), tiny and exactly zero a
    a = torch.tensor([-30.0, -12.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 12.0, 30.0], dtype=torch.float64)
    b, gh = (1.0 + torch.rand(9, generator=g, dtype=torch.float64) for _ in range(2))
    for variant in GATED:
        cases.append(Case((a, b, gh, variant), note=f"variant={variant!r}, a from -30 to 30 (shape (9,))"))
    # one scalar (0-dim) tensor
    cases.append(Case((torch.tensor(-0.7, dtype=torch.float64), torch.tensor(1.3, dtype=torch.float64),
                       torch.tensor(0.9, dtype=torch.float64), "swiglu"), note="variant='swiglu', 0-dim tensors"))
    return cases


def _gate_mistake(kind: str):
    def wrong(a, b, gh, variant):
        phi, slope = _phi_and_slope(a, variant)
        if kind == "swapped":
            return gh * phi, gh * slope * b
        if kind == "no slope":
            return gh * b, gh * phi
        if kind == "phi for slope":
            return gh * phi * b, gh * phi
        if kind == "pre-activation":
            return gh * slope * b, gh * a
        if kind == "no upstream":
            return slope * b, phi
        if kind == "no content":
            return gh * slope, gh * phi
        if kind == "silu slope" and variant == "swiglu":
            return gh * torch.sigmoid(a) * b, gh * phi
        if kind == "gelu slope" and variant == "geglu":
            return gh * 0.5 * (1 + torch.erf(a / math.sqrt(2.0))) * b, gh * phi
        if kind == "sigmoid slope for silu" and variant == "swiglu":
            s = torch.sigmoid(a)
            return gh * s * (1 - s) * b, gh * phi
        if kind == "silu slope without a" and variant == "swiglu":
            s = torch.sigmoid(a)
            return gh * (s + s * (1 - s)) * b, gh * phi
        if kind == "sigmoid slope" and variant == "glu":
            return gh * torch.sigmoid(a) * b, gh * phi
        if kind == "relu at zero" and variant == "reglu":
            return gh * (a >= 0).to(a.dtype) * b, gh * phi
        if kind.startswith("gelu tanh") and variant == "geglu":
            with torch.enable_grad():
                t = a.detach().clone().requires_grad_(True)
                value = F.gelu(t, approximate="tanh")
                (slope_tanh,) = torch.autograd.grad(value.sum(), t)
            if kind == "gelu tanh value":        # the tanh GELU for φ(a), the exact derivative for φ'(a)
                return gh * slope * b, gh * value.detach()
            if kind == "gelu tanh slope":        # the exact GELU for φ(a), the tanh form's derivative for φ'(a)
                return gh * slope_tanh * b, gh * phi
            return gh * slope_tanh * b, gh * value.detach()
        return gh * slope * b, gh * phi
    return wrong


check_gate_gradients = Exercise(
    "Exercise 2 (gradients through any gate)",
    _gate_gradients,
    _gate_gradient_cases,
    [
        ("SwiGLU: SiLU'(a) is σ(a)·(1 + a·(1 − σ(a))), not σ(a): differentiate a·σ(a) with the product rule.",
         _gate_mistake("silu slope")),
        ("GEGLU: GELU'(a) = Φ(a) + a·φ_N(a) (φ_N the standard normal density), not Φ(a) alone: differentiate "
         "a·Φ(a) with the product rule.", _gate_mistake("gelu slope")),
        ("GLU: the sigmoid's derivative is σ(a)·(1 − σ(a)), not σ(a).", _gate_mistake("sigmoid slope")),
        ("ReGLU: at a = 0 exactly, ReLU'(0) = 0 here (as PyTorch's autograd has it): use a > 0, not a >= 0.",
         _gate_mistake("relu at zero")),
        ("GEGLU: this is the tanh approximation of GELU (F.gelu(..., approximate='tanh')), off by up to about 5e-4; "
         "the exercise uses the exact GELU, a·Φ(a) with Φ(a) = (1 + erf(a/√2))/2, and its exact derivative.",
         _gate_mistake("gelu tanh")),
        ("GEGLU: φ(a) here is the tanh approximation of GELU (F.gelu(..., approximate='tanh')), off by up to about "
         "5e-4, though φ'(a) is exact; the exercise uses the exact GELU, a·Φ(a) with Φ(a) = (1 + erf(a/√2))/2.",
         _gate_mistake("gelu tanh value")),
        ("GEGLU: φ'(a) here is the derivative of GELU's tanh approximation, though φ(a) is exact; use the exact "
         "GELU's derivative, Φ(a) + a·φ_N(a) (φ_N the standard normal density).", _gate_mistake("gelu tanh slope")),
        ("the two gradients are swapped: return (grad_a, grad_b), gate first, content second.",
         _gate_mistake("swapped")),
        ("φ'(a) is missing from grad_a: ∂h/∂a = φ'(a)·b, not b (b alone is right only for Bilinear, "
         "where φ is the identity).", _gate_mistake("no slope")),
        ("you used φ(a) where its derivative φ'(a) belongs: ∂h/∂a = φ'(a)·b.", _gate_mistake("phi for slope")),
        ("grad_b is the gate's *value* φ(a) times grad_h, not the pre-activation a.", _gate_mistake("pre-activation")),
        ("the upstream gradient grad_h is missing: by the chain rule multiply both local derivatives by grad_h.",
         _gate_mistake("no upstream")),
        ("grad_a lost the content factor b: ∂h/∂a = φ'(a)·b (the gate learns only when there is content).",
         _gate_mistake("no content")),
        ("SwiGLU: SiLU'(a) is σ(a)·(1 + a·(1 − σ(a))); σ(a)·(1 − σ(a)) is the sigmoid's own derivative, "
         "without the product rule for a·σ(a).", _gate_mistake("sigmoid slope for silu")),
        ("SwiGLU: the product rule's second term keeps the factor a: SiLU'(a) = σ(a) + a·σ(a)·(1 − σ(a)), "
         "not σ(a) + σ(a)·(1 − σ(a)).", _gate_mistake("silu slope without a")),
    ],
    kind="build",
    domain=GATE_GRADIENTS_DOMAIN,
)


# ---------------------------------------------------------------- exercise 3: one matrix for gate and content
def _fused_gated_ffn(x: torch.Tensor, w13: torch.Tensor, b13: torch.Tensor | None, w2: torch.Tensor,
                     b2: torch.Tensor | None, variant: str) -> torch.Tensor:
    """One product with w13, split on the last axis into the gate (W1's rows) and the content (W3's rows), then
    one with w2 (the checker's reference)."""
    gate, content = F.linear(x, w13, b13).chunk(2, dim=-1)
    phi, _ = _phi_and_slope(gate, variant)
    return F.linear(phi * content, w2, b2)


def _fused_sizes(case: Case) -> tuple[int, int]:
    """(d_model, d_ff) of a case."""
    return case.args[0].shape[-1], case.args[1].shape[0] // 2


FUSED_FFN_DOMAIN = Domain(
    allows="x: float64 (..., d_model), a 1-D token or any batch shape; w13: float64 (2·d_ff, d_model), W1's rows "
           "then W3's; b13: float64 (2·d_ff,) or None; w2: float64 (d_model, d_ff); b2: float64 (d_model,) or None; "
           "d_model, d_ff >= 1; variant one of the five gated names; returns float64 (..., d_model)",
    corners=tuple(Corner(f"variant {v!r}", lambda c, v=v: c.args[5] == v) for v in GATED) + (
        Corner("b13 and b2 given", lambda c: c.args[2] is not None and c.args[4] is not None),
        Corner("b13 given, b2 None", lambda c: c.args[2] is not None and c.args[4] is None),
        Corner("b13 None, b2 given", lambda c: c.args[2] is None and c.args[4] is not None),
        Corner("b13 and b2 None", lambda c: c.args[2] is None and c.args[4] is None),
        Corner("x one token as a 1-D vector", lambda c: c.args[0].dim() == 1),
        Corner("a batch of one token (1, d_model)", lambda c: c.args[0].dim() == 2 and c.args[0].shape[0] == 1),
        Corner("x 3-D", lambda c: c.args[0].dim() == 3),
        Corner("d_ff = 1", lambda c: _fused_sizes(c)[1] == 1),
        Corner("d_model = 1", lambda c: _fused_sizes(c)[0] == 1),
        Corner("d_ff = d_model", lambda c: _fused_sizes(c)[0] == _fused_sizes(c)[1]),
        Corner("d_ff < d_model", lambda c: _fused_sizes(c)[1] < _fused_sizes(c)[0]),
        Corner("d_ff > d_model", lambda c: _fused_sizes(c)[1] > _fused_sizes(c)[0]),
    ),
)


def _fused_cases() -> list[Case]:
    g = _generator(403)
    # (variant, x shape, d_ff, bias on w13, bias on w2): every variant, every bias combination,
    # one token as a 1-D vector, a batch of one, 3-D batches, d_model = 1, and d_ff below, equal to and above d_model.
    plan = [("swiglu", (4, 6), 5, True, True), ("geglu", (2, 3, 6), 6, False, True),
            ("glu", (6,), 7, True, False), ("bilinear", (1, 5), 4, False, False),
            ("reglu", (3, 4), 8, True, True), ("swiglu", (2, 2, 3), 3, False, False),
            ("geglu", (5, 4), 6, True, True), ("swiglu", (3, 4), 1, True, True), ("reglu", (1, 1, 5), 2, False, True),
            ("glu", (3, 1), 2, False, True), ("bilinear", (2, 4), 4, True, True)]
    cases = []
    for variant, shape, d_ff, has_b13, has_b2 in plan:
        d = shape[-1]
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        w13 = torch.randn(2 * d_ff, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        w2 = torch.randn(d, d_ff, generator=g, dtype=torch.float64) / math.sqrt(d_ff)
        b13 = torch.randn(2 * d_ff, generator=g, dtype=torch.float64) if has_b13 else None
        b2 = torch.randn(d, generator=g, dtype=torch.float64) if has_b2 else None
        note = (f"variant={variant!r}, x {tuple(shape)}, d_ff={d_ff}, b13 {'given' if has_b13 else 'None'}, "
                f"b2 {'given' if has_b2 else 'None'}")
        cases.append(Case((x, w13, b13, w2, b2, variant), note=note))
    return cases


def _fused_mistake(kind: str):
    def wrong(x, w13, b13, w2, b2, variant):
        both = F.linear(x, w13, b13 if kind != "no b13" else None)
        d_ff = w13.shape[0] // 2
        if kind == "interleaved":
            a, b = both[..., 0::2], both[..., 1::2]
        else:
            a, b = both[..., :d_ff], both[..., d_ff:]
        if kind == "swapped":
            a, b = b, a
        if kind == "silu always":
            phi = F.silu(a)
        elif kind == "gelu tanh" and variant == "geglu":
            phi = F.gelu(a, approximate="tanh")
        else:
            phi, _ = _phi_and_slope(a, variant)
        if kind == "phi on both":
            b = _phi_and_slope(b, variant)[0]
        return F.linear(phi * b, w2, b2 if kind != "no b2" else None)
    return wrong


def _split_tokens(x, w13, b13, w2, b2, variant):
    """The mistake ``chunk(2, dim=0)``: the fused output split along its first axis (the tokens for a batch)."""
    a, b = F.linear(x, w13, b13).chunk(2, dim=0)
    return F.linear(_phi_and_slope(a, variant)[0] * b, w2, b2)


def _split_axis1(x, w13, b13, w2, b2, variant):
    """The mistake ``chunk(2, dim=1)``: the fused output split along axis 1, the features only for a 2-D batch (a
    1-D token has no axis 1; for a 3-D batch it is the tokens)."""
    a, b = F.linear(x, w13, b13).chunk(2, dim=1)
    return F.linear(_phi_and_slope(a, variant)[0] * b, w2, b2)


def _axis1_split_probes() -> list[tuple]:
    """Inputs outside the statement on which splitting axis 1 of a 3-D batch runs: 2·d_ff tokens per sequence and
    w2 taking 2·d_ff inputs (the right split fails on them). With 2·d_ff tokens, ``u[:, :d_ff]`` and ``chunk``
    agree."""
    g = _generator(405)
    probes = []
    for variant, d, d_ff, biases in [("swiglu", 3, 2, True), ("reglu", 4, 1, False)]:
        x = torch.randn(2, 2 * d_ff, d, generator=g, dtype=torch.float64)
        w13 = torch.randn(2 * d_ff, d, generator=g, dtype=torch.float64)
        w2 = torch.randn(d, 2 * d_ff, generator=g, dtype=torch.float64)
        b13 = torch.randn(2 * d_ff, generator=g, dtype=torch.float64) if biases else None
        b2 = torch.randn(d, generator=g, dtype=torch.float64) if biases else None
        probes.append((x, w13, b13, w2, b2, variant))
    return probes


def _token_split_probes() -> list[tuple]:
    """Inputs outside the statement on which splitting the first axis runs: 2·d_ff tokens, and w2 taking
    2·d_ff inputs (the right split fails on them). With 2·d_ff tokens, ``u[:d_ff]`` and ``chunk`` agree."""
    g = _generator(404)
    probes = []
    for variant, d, d_ff, biases in [("geglu", 3, 2, True), ("glu", 5, 1, False)]:
        x = torch.randn(2 * d_ff, d, generator=g, dtype=torch.float64)
        w13 = torch.randn(2 * d_ff, d, generator=g, dtype=torch.float64)
        w2 = torch.randn(d, 2 * d_ff, generator=g, dtype=torch.float64)
        b13 = torch.randn(2 * d_ff, generator=g, dtype=torch.float64) if biases else None
        b2 = torch.randn(d, generator=g, dtype=torch.float64) if biases else None
        probes.append((x, w13, b13, w2, b2, variant))
    return probes


_TOKEN_SPLIT_HINT = ("the fused output was split along its first axis (as chunk(2, dim=0) or u[:d_ff] do): for a "
                     "batch that axis is the tokens, so the function raises. Split the last axis, the 2·d_ff "
                     "features: chunk(2, dim=-1).")
_AXIS1_SPLIT_HINT = ("the fused output was split along axis 1 (as chunk(2, dim=1) or u[:, :d_ff] do): that is the "
                     "features only for a 2-D batch, so a 1-D token or a 3-D batch raises. Split the last axis: "
                     "chunk(2, dim=-1).")


_PRODUCTS = frozenset({F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
                       torch.mm, torch.Tensor.mm, torch.bmm, torch.addmm, torch.einsum, torch.tensordot,
                       torch.mv, torch.Tensor.mv, torch.inner})


class _ProductCounter(TorchFunctionMode):
    """Counts the matrix products a function calls (F.linear, @, matmul, mm, einsum, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.products = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.products += func in _PRODUCTS
        return func(*args, **(kwargs or {}))


def _products_used(fn: Any, case: Case) -> int | None:
    """How many matrix products ``fn`` calls on one case (None when it cannot be counted)."""
    try:
        with checking_state(), TimeLimit(5.0, 10.0), _ProductCounter() as counter:
            fn(*copy.deepcopy(case.args))
        return counter.products
    except (Exception, CheckTimeout):
        return None


_TWO_PRODUCTS_HINT = ("the values are right, but the gate and the content come from separate products ({n} "
                      "matrix products in all): the exercise asks for one product with w13, split afterwards, "
                      "then one with w2.")


class _FusedFFNExercise(Exercise):
    """Adds the diagnosis the engine cannot make from outputs alone: ``chunk(2, dim=0)`` or ``chunk(2, dim=1)`` on
    the fused output.

    Such an answer is right on some inputs (dim 0: a 1-D token; dim 1: a 2-D batch) and raises on the others, so
    there is no wrong value to compare. When an answer fails, it is run again: a hint is given only when it raises
    on exactly the cases where that split's model raises, is right on the others, and returns the model's values
    on inputs (outside the statement) where that split runs.
    """

    def evaluate(self, fn: Any) -> Result:
        result = super().evaluate(fn)
        if result.status == PASSED:  # right values: were gate and content one product, as the statement asks?
            n = _products_used(fn, self.cases()[0])
            if n is not None and n > 2:
                hint = _TWO_PRODUCTS_HINT.format(n=n)
                return dataclasses.replace(result, status=FAILED, reason="wrong", hint=hint,
                                           message=f"{HINT_PREFIX}{hint}")
            return result
        if result.status != FAILED or HINT_PREFIX in result.message or result.reason != "error" or \
                not callable(fn):
            return result
        for model, probes, hint in [(_split_tokens, _token_split_probes, _TOKEN_SPLIT_HINT),
                                    (_split_axis1, _axis1_split_probes, _AXIS1_SPLIT_HINT)]:
            if self._splits_like(fn, model, probes):
                return dataclasses.replace(result, message=f"{result.message} {HINT_PREFIX}{hint}", hint=hint)
        return result

    def _splits_like(self, fn: Any, model_fn: Any, probes: Any) -> bool:
        """Does ``fn`` behave as the wrong split ``model_fn`` on every hidden case (raising where it raises,
        its values where it runs) and on ``probes()``, inputs outside the statement where that split runs?"""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for case in self.cases():
                    try:
                        model = model_fn(*copy.deepcopy(case.args))
                    except Exception:
                        model = None
                    try:
                        got = fn(*copy.deepcopy(case.args))
                    except Exception:
                        if model is None:
                            continue
                        return False
                    if model is None or got is None or compare(got, model, self.atol, self.rtol) is not None:
                        return False  # right where the wrong split runs, raising everywhere else
                for probe in probes():
                    got = fn(*copy.deepcopy(probe))
                    if got is None or compare(got, model_fn(*copy.deepcopy(probe)), self.atol, self.rtol) \
                            is not None:
                        return False
            return True
        except Exception:  # the re-run failing just means "not this mistake"
            return False


check_fused_ffn = _FusedFFNExercise(
    "Exercise 3 (one matrix for gate and content)",
    _fused_gated_ffn,
    _fused_cases,
    [
        ("the halves are swapped: the first d_ff outputs (rows 0..d_ff-1 of w13, the stacked W1) are the gate "
         "a that goes through φ; the last d_ff (W3's rows) are the content b.", _fused_mistake("swapped")),
        ("you took every other output (interleaved); w13 stacks W1's rows on top of W3's, so split the 2·d_ff "
         "outputs into two contiguous halves: [..., :d_ff] and [..., d_ff:].", _fused_mistake("interleaved")),
        ("the output bias b2 is missing: add it when it is given (it is None in some cases).",
         _fused_mistake("no b2")),
        ("the input bias b13 is missing: it belongs to the fused projection, b13[:d_ff] for the gate and "
         "b13[d_ff:] for the content.", _fused_mistake("no b13")),
        ("you used SiLU for every variant; φ depends on the variant: σ for GLU, none for Bilinear, ReLU for "
         "ReGLU, GELU for GEGLU, SiLU for SwiGLU.", _fused_mistake("silu always")),
        ("GEGLU uses the exact GELU, x·Φ(x) (F.gelu's default), not its tanh approximation.",
         _fused_mistake("gelu tanh")),
        ("φ went on both halves; only the gate half goes through φ, the content half stays linear.",
         _fused_mistake("phi on both")),
    ],
    kind="build",
    domain=FUSED_FFN_DOMAIN,
)


# ---------------------------------------------------------------- exercise 4: what a frozen FFN keeps
#: Tensors of width d_ff that autograd keeps when the FFN's weights are frozen (requires_grad=False) but its
#: input needs a gradient: only what the backward pass to x needs; no x, and no W2 input.
FROZEN_D_FF_TENSORS: dict[str, int] = {
    "relu": 1,       # ReLU's output (its backward reads the mask from it)
    "gelu": 1,       # a (GELU's derivative needs its input)
    "swish": 1,      # a (SiLU's derivative needs its input)
    "glu": 2,        # σ(a) (the sigmoid's derivative uses its output; the product needs it too) and b
    "bilinear": 2,   # a and b (each factor of the product)
    "reglu": 2,      # ReLU(a) (the mask and the product's factor) and b
    "geglu": 3,      # a, GELU(a) and b
    "swiglu": 3,     # a, SiLU(a) and b
}
_TRAINABLE_D_FF_TENSORS = {"relu": 1, "gelu": 2, "swish": 2, "glu": 3, "bilinear": 3, "reglu": 3,
                           "geglu": 4, "swiglu": 4}


def _saved_when_frozen(variant: str, d_model: int, d_ff: int) -> int:
    return FROZEN_D_FF_TENSORS[variant] * d_ff


def _variant_size_cases(seed: int, variants, fixed) -> list[Case]:
    """One case per variant at random sizes (d_ff != d_model), then the fixed (variant, d_model, d_ff) corners."""
    g = _generator(seed)
    sizes = []
    for variant in variants:
        d = _randint(g, 4, 300)
        f = _randint(g, 8, 900)
        while f == d:
            f = _randint(g, 8, 900)
        sizes.append((variant, d, f))
    return [Case((v, d, f), note=f"variant={v!r}, d_model={d}, d_ff={f}") for v, d, f in [*sizes, *fixed]]


def _variant_size_corners(variants) -> tuple[Corner, ...]:
    """Every variant, the smallest sizes, d_ff below, equal to and above d_model, LLaMA-7B's sizes."""
    return tuple(Corner(f"variant {v!r}", lambda c, v=v: c.args[0] == v) for v in variants) + (
        Corner("d_model = 1", lambda c: c.args[1] == 1),
        Corner("d_ff = 1", lambda c: c.args[2] == 1),
        Corner("d_ff < d_model", lambda c: c.args[2] < c.args[1]),
        Corner("d_ff = d_model", lambda c: c.args[2] == c.args[1]),
        Corner("d_ff > d_model", lambda c: c.args[2] > c.args[1]),
        Corner("LLaMA-7B's sizes (4096, 11008)", lambda c: c.args[1:] == (4096, 11008)),
    )


FROZEN_DOMAIN = Domain(
    allows="variant: one of the eight names of section 3; d_model, d_ff: Python ints >= 1 (up to 4096 and 11008); "
           "returns a Python int",
    corners=_variant_size_corners(ALL_VARIANTS),
)


def _frozen_cases() -> list[Case]:
    # the smallest sizes, a wide layer, d_ff below and equal to d_model
    return _variant_size_cases(404, ALL_VARIANTS, [("swiglu", 1, 3), ("relu", 2, 1), ("reglu", 4096, 11008),
                                                   ("gelu", 768, 64), ("glu", 1, 1), ("geglu", 40, 40)])


def _frozen_wrong(change):
    return lambda v, d, f: _saved_when_frozen(v, d, f) + change(v, d, f)


def _frozen_subset_mistakes(hint: str, sign: int, variants: tuple[str, ...],
                            parts: list[tuple[str, ...]]) -> list[tuple[str, object]]:
    """One named mistake (``sign`` · d_ff too many for ``variants``) and the same mistake made only for each of
    ``parts``: every one of them explains all its failing cases, so each gets the hint."""
    return [(hint if group == variants else f"for {', '.join(_NAMES[v] for v in group)}: {hint}",
             _frozen_wrong(lambda v, d, f, group=group: sign * f if v in group else 0))
            for group in [variants, *parts]]


_NAMES = {"relu": "ReLU", "gelu": "GELU", "swish": "Swish", "glu": "GLU", "bilinear": "Bilinear",
          "reglu": "ReGLU", "geglu": "GEGLU", "swiglu": "SwiGLU"}


check_frozen_saved = Exercise(
    "Exercise 4 (what a frozen FFN keeps)",
    _saved_when_frozen,
    _frozen_cases,
    [
        ("that is what a *trainable* FFN keeps (section 3). With frozen weights autograd computes no weight "
         "gradient, so neither x (kept for W1's and W3's gradients) nor W2's input is needed.",
         lambda v, d, f: d + _TRAINABLE_D_FF_TENSORS[v] * f),
        ("x is kept only to compute the weight gradients of W1 and W3; with frozen weights the gradient to x "
         "needs only the weights, so x (d per token) is not saved.", _frozen_wrong(lambda v, d, f: d)),
        ("d_ff for every variant is right for the three dense FFNs, but a gated unit is a product φ(a)·b, and "
         "the product's backward needs each factor to send a gradient through the other: count b, then what φ's "
         "own backward needs.", lambda v, d, f: f),
    ]
    + _frozen_subset_mistakes(
        "W2's input (φ(a)·b, or φ(a) in a dense FFN) is kept only for W2's own weight gradient. Frozen, it is "
        "saved only where another operation needs it (dense ReLU's backward reads its output).",
        +1, ("gelu", "swish") + GATED, [GATED, ("gelu", "swish")])
    + _frozen_subset_mistakes(
        "ReLU's backward needs to know where its input was positive, and it reads that from its output: "
        "ReLU(a) stays saved (1 tensor for dense ReLU, and it is the product's factor in ReGLU).",
        -1, ("relu", "reglu"), [("relu",), ("reglu",)])
    + _frozen_subset_mistakes(
        "GELU and SiLU compute their derivative from their *input* a, so a stays saved next to φ(a) and b "
        "(GEGLU, SwiGLU: 3 tensors; dense GELU, Swish: a only).",
        -1, ("gelu", "swish", "geglu", "swiglu"), [("gelu", "swish"), ("geglu", "swiglu")])
    + [("for GLU: σ's derivative comes from its output, σ(a)·(1 − σ(a)), so a is not needed: GLU keeps σ(a) and "
        "b (2 tensors of d_ff), as ReGLU keeps ReLU(a) and b.", _frozen_wrong(lambda v, d, f: f if v == "glu" else 0)),
       ("for Bilinear: the product a·b saves both its factors for its backward, a for b's gradient and b for a's, "
        "so a (which is φ(a) here) and b are 2 tensors of d_ff.",
        _frozen_wrong(lambda v, d, f: -f if v == "bilinear" else 0))],
    kind="investigate",
    domain=FROZEN_DOMAIN,
    returns=python_int(),
)


# ---------------------------------------------------------------- exercise 5: what a fused gate keeps
#: Tensors of width d_ff an unfused gated FFN keeps (section 3) and what a fused gate keeps: x, then a and b
#: (saved by the fused op, which recomputes φ(a) in backward), then W2's input h (for W2's weight gradient).
_FUSED_D_FF_TENSORS = 3


def _saved_with_fused_gate(variant: str, d_model: int, d_ff: int) -> int:
    return d_model + _FUSED_D_FF_TENSORS * d_ff


FUSED_SAVED_DOMAIN = Domain(
    allows="variant: one of 'glu', 'bilinear', 'reglu', 'geglu', 'swiglu'; d_model, d_ff: Python ints >= 1 (up to "
           "4096 and 11008); trainable weights, an input that needs a gradient; returns a Python int",
    corners=_variant_size_corners(GATED),
)


def _fused_saved_cases() -> list[Case]:
    return _variant_size_cases(405, GATED, [("swiglu", 1, 3), ("reglu", 2, 1), ("geglu", 4096, 11008),
                                            ("glu", 768, 64), ("bilinear", 1, 1), ("swiglu", 40, 40)])


_UNFUSED_GATED = {v: _TRAINABLE_D_FF_TENSORS[v] for v in GATED}

check_fused_saved = Exercise(
    "Exercise 5 (what a fused gate keeps)",
    _saved_with_fused_gate,
    _fused_saved_cases,
    [
        ("that is the unfused count of section 3. The fused operation keeps a and b and recomputes φ(a) in the "
         "backward pass, so GEGLU and SwiGLU no longer keep φ(a) next to a.",
         lambda v, d, f: d + _UNFUSED_GATED[v] * f),
        ("W2's input h = φ(a)·b is still kept: W2's weight gradient needs it, and the fused operation only "
         "replaces what happens *before* W2.", lambda v, d, f: d + 2 * f),
        ("x (d per token) is still kept: W1's and W3's weight gradients need it.", lambda v, d, f: 3 * f),
        ("fusing does not drop a tensor for GLU, Bilinear and ReGLU: their unfused product already kept two d_ff "
         "tensors (φ(a), or a itself, and b); the fused one keeps a in place of φ(a).",
         lambda v, d, f: d + (_UNFUSED_GATED[v] - 1) * f),
        ("the fused operation keeps a and b only; φ(a) is recomputed from a in the backward pass, not stored.",
         lambda v, d, f: d + 4 * f),
    ],
    kind="investigate",
    domain=FUSED_SAVED_DOMAIN,
    returns=python_int(),
)


def attempted(exercise: Exercise, fn) -> bool:
    """Has the learner written ``fn``, and does it run (its checker neither calls it "not attempted" nor saw it
    raise)? Right or wrong, a prediction that runs is measured against. Prints nothing."""
    result = exercise.evaluate(fn)
    return result.status != NOT_ATTEMPTED and result.reason != "error"


EXERCISES = [check_llama_width, check_gate_gradients, check_fused_ffn, check_frozen_saved, check_fused_saved]
