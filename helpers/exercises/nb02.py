"""Checkers for notebook 02 (expand, activate, contract).

Each ``check_*`` is an ``helpers.exercises.engine.Exercise``: call it on your function,
``check_gpt2_mlp(my_gpt2_mlp)``, and it prints one line (not attempted /
passed / what is wrong and the likely mistake). The hidden cases are drawn from
seeded ``torch.Generator`` s with shapes the notebook never shows, and cover every
branch the task statement allows (one token, d_ff = d_model, GPT-2 small's own shapes,
every LayerNorm placement with and without the residual, gradients left over from an
earlier backward pass, ...).

Weight layout (the course's one convention, PyTorch's ``nn.Linear``): ``W1`` is
``(d_ff, d_model)``, ``W2`` is ``(d_model, d_ff)``; for token rows ``x``:
``FFN(x) = GELU(x @ W1.T + b1) @ W2.T + b2``. ``ffn.w1.weight`` *is* ``W1``. Exercise 1 is the one
exception, on purpose: it reads weights stored the way GPT-2's checkpoints store them (input x output).

Dtypes: every tensor handed over is float32 and every answer is wanted in float32; as everywhere in the
engine, values are compared at the task's (float32) tolerance, so a float64 answer passes too (exercise 1's
statement says so), except in exercise 4, whose statement fixes "a float32 tensor" and whose checker holds it.

==========================  ===============  =========================================================
checker                     kind             the learner writes
==========================  ===============  =========================================================
``check_gpt2_mlp``          build            ``gpt2_mlp(x, c_fc_w, c_fc_b, c_proj_w, c_proj_b)`` -> ``(..., d_model)``
``check_step_flops``        investigate      ``step_flops(n_tokens, d_model, d_ff, input_grad, weight_grad)`` -> int
``check_stack_forward``     build            ``stack_forward(x, ffns, norms, norm, residual)`` -> ``(..., d_model)``
``check_layer_grad_norms``  investigate      ``layer_grad_norms(x, target, ffns, norms, norm, residual)`` -> ``(L,)``
``check_contributions``     build            ``neuron_contributions(ffn, x)`` -> ``(T, d_ff, d_model)``
==========================  ===============  =========================================================
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises import engine
from helpers.exercises.cases import randint
from helpers.exercises.engine import FAILED, Case, Corner, Domain, Exercise, Result, compare
from helpers.exercises.returns import tensor_dtype
from helpers.ffn import FFN
from helpers.residual import NORMS, block_step

HINT_PREFIX = getattr(engine, "HINT_PREFIX", "Likely mistake: ")


def _make(cls: type, *args: Any, kind: str, **kwargs: Any) -> Exercise:
    """Build an exercise and record its kind (``"build"`` / ``"investigate"``), whatever engine version runs."""
    if "kind" in inspect.signature(cls.__init__).parameters:
        return cls(*args, kind=kind, **kwargs)
    exercise = cls(*args, **kwargs)
    exercise.kind = kind
    return exercise


def _distinct_sizes(gen: torch.Generator) -> tuple[int, int, int]:
    """Random (T, d_model, d_ff), all three different, so a weight in the wrong orientation cannot fit."""
    while True:
        T, d, d_ff = randint(gen, 2, 7), randint(gen, 3, 9), randint(gen, 10, 24)
        if len({T, d, d_ff}) == 3:
            return T, d, d_ff


def _seeded_ffn(seed: int, *args: Any, **kwargs: Any) -> FFN:
    """``FFN(*args, **kwargs)`` initialised from ``seed``; the global generator is left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FFN(*args, **kwargs).eval()


# --------------------------------------------------------------------------------------------
# Exercise 1 (build): GPT-2's MLP from its stored weights (Conv1D layout: input x output), tanh GELU
# --------------------------------------------------------------------------------------------


def _gpt2_mlp(x: torch.Tensor, c_fc_w: torch.Tensor, c_fc_b: torch.Tensor, c_proj_w: torch.Tensor,
              c_proj_b: torch.Tensor) -> torch.Tensor:
    """``(..., d) -> (..., d)``: GPT-2's MLP. ``c_fc_w`` is ``(d, d_ff)``, ``c_proj_w`` ``(d_ff, d)`` (input x output,
    as Hugging Face's ``Conv1D`` stores them: it computes ``x @ weight + bias``); the activation is GELU's tanh form
    (``gelu_new``)."""
    return F.gelu(x @ c_fc_w + c_fc_b, approximate="tanh") @ c_proj_w + c_proj_b


def _gpt2_cases() -> list[Case]:
    """Float32 weights in GPT-2's layout; tokens as rows, a batch, one token vector, a batch of one, d_ff = d (where
    a transposed weight still fits), the smallest sizes (d = d_ff = 1), inputs at the stated bound of 10, and
    GPT-2 small's own shapes (768 -> 3072). Pre-activations fall in GELU's curved region, where the exact and the
    tanh form differ by more than the tolerance, and far out in both tails."""
    gen = torch.Generator().manual_seed(2019)
    layouts = [  # (leading shape of x as a function of T, sizes, what)
        (lambda T: (T,), "", "tokens as rows"),
        (lambda T: (randint(gen, 2, 3), T), "", "a batch of sequences"),
        (lambda T: (), "", "one token vector"),
        (lambda T: (1, 1), "", "batch size one, one token"),
        (lambda T: (T,), "square", "d_ff = d_model"),
        (lambda T: (T,), "one", "d_model = d_ff = 1"),
        (lambda T: (2, T), "bound", "inputs up to the stated bound |x| <= 10"),
    ]
    cases = []
    for lead, sizes, what in layouts:
        T, d, d_ff = _distinct_sizes(gen)
        d_ff = d if sizes == "square" else d_ff
        d, d_ff = (1, 1) if sizes == "one" else (d, d_ff)
        x = torch.randn(*lead(T), d, generator=gen)
        if sizes == "bound":  # every entry within [-10, 10], the largest ones at the bound
            x = (10 * torch.tanh(2 * x)).flatten()
            x[:2] = torch.tensor([10.0, -10.0])
            x = x.reshape(*lead(T), d)
        c_fc_w = torch.randn(d, d_ff, generator=gen)          # pre-activations of std ≈ sqrt(d): GELU's curved part
        c_fc_w = c_fc_w / d ** 0.5 if sizes == "bound" else c_fc_w
        c_fc_b = torch.randn(d_ff, generator=gen)
        c_proj_w = torch.randn(d_ff, d, generator=gen) / 2
        c_proj_b = torch.randn(d, generator=gen)
        if sizes == "one":  # one unit: walk its pre-activation through GELU's curved negative side
            x = torch.linspace(-3.5, 3.5, 7).unsqueeze(1)
            c_fc_w, c_fc_b, c_proj_b = torch.ones(1, 1), torch.zeros(1), 0.1 * c_proj_b
        note = (f"{what}: x {tuple(x.shape)}, c_fc_w {tuple(c_fc_w.shape)}, c_proj_w {tuple(c_proj_w.shape)}")
        cases.append(Case((x, c_fc_w, c_fc_b, c_proj_w, c_proj_b), note=note))
    d, d_ff = 768, 3072                                       # GPT-2 small
    x = torch.randn(2, d, generator=gen)
    c_fc_w = 1.5 * torch.randn(d, d_ff, generator=gen) / d ** 0.5
    c_proj_w = torch.randn(d_ff, d, generator=gen) / d_ff ** 0.5
    cases.append(Case((x, c_fc_w, 0.5 * torch.randn(d_ff, generator=gen), c_proj_w, 0.1 * torch.randn(d, generator=gen)),
                      note="GPT-2 small's shapes: x (2, 768), c_fc_w (768, 3072), c_proj_w (3072, 768)"))
    return cases


def _pre_activations(case: Case) -> torch.Tensor:
    x, c_fc_w, c_fc_b, *_ = case.args
    return x @ c_fc_w + c_fc_b


_GPT2_DOMAIN = Domain(
    allows="x float32 of shape (d,), (T, d) or (B, T, d), B, T >= 1; c_fc_w (d, d_ff), c_fc_b (d_ff,), c_proj_w "
           "(d_ff, d), c_proj_b (d,), float32; d, d_ff >= 1 (d_ff = d allowed); every entry of x within [-10, 10]; "
           "the answer: float32 (float64 passes) shaped like x",
    corners=(
        Corner("x is one token vector (d,)", lambda c: c.args[0].dim() == 1),
        Corner("x is a batch (B, T, d)", lambda c: c.args[0].dim() == 3),
        Corner("a batch of one sequence of one token (1, 1, d)", lambda c: tuple(c.args[0].shape[:-1]) == (1, 1)),
        Corner("d_ff = d > 1 (a weight read in the wrong layout still fits)",
               lambda c: c.args[1].shape[0] == c.args[1].shape[1] > 1),
        Corner("d = d_ff = 1 (the smallest sizes)", lambda c: tuple(c.args[1].shape) == (1, 1)),
        Corner("x at the bound: entries +10 and -10", lambda c: c.args[0].max() == 10 and c.args[0].min() == -10),
        Corner("GPT-2 small's sizes (d = 768, d_ff = 3072)", lambda c: tuple(c.args[1].shape) == (768, 3072)),
        Corner("pre-activations far in both tails (below -5 and above 5)",
               lambda c: bool((_pre_activations(c) < -5).any() and (_pre_activations(c) > 5).any())),
    ),
)


def _with_hint(result: Result, hint: str) -> Result:
    """``result`` with ``hint`` appended to its message (and stored as its ``hint`` where the engine has one)."""
    changes: dict[str, Any] = {"message": f"{result.message} {HINT_PREFIX}{hint}"}
    if "hint" in {f.name for f in dataclasses.fields(result)}:
        changes["hint"] = hint
    return dataclasses.replace(result, **changes)


def _plus(t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return t if b is None else t + b


class _Conv1DExercise(Exercise):
    """Adds the diagnosis the engine cannot make from outputs alone: a weight read in nn.Linear's layout.

    With non-square weights a learner who treats ``c_fc_w`` as ``(d_ff, d)`` (``x @ c_fc_w.T``, or
    ``F.linear(x, c_fc_w, ...)``) makes the function *raise*: there is no wrong output to compare.
    So when the answer fails, the learner's function is run again with ``c_fc_w`` and/or ``c_proj_w``
    handed over transposed: if that makes it right on every case, the learner's code expects the
    other layout, and the hint says which weight.
    """

    _LAYOUT_HINTS = {
        (True, False): "c_fc_w is read in nn.Linear's layout: GPT-2's Conv1D stores it input x output, (d_model, "
                       "d_ff), and computes x @ c_fc_w + c_fc_b, with no transpose (F.linear(x, W) would need "
                       "W = c_fc_w.T).",
        (False, True): "c_proj_w is read in nn.Linear's layout: GPT-2's Conv1D stores it input x output, (d_ff, "
                       "d_model), and computes m @ c_proj_w + c_proj_b, with no transpose.",
        (True, True): "both weights are read in nn.Linear's layout (out, in): GPT-2's Conv1D stores them input x "
                      "output, so the MLP is gelu_tanh(x @ c_fc_w + c_fc_b) @ c_proj_w + c_proj_b, with no transposes.",
    }

    def evaluate(self, fn: Any) -> Result:
        result = super().evaluate(fn)
        if (result.status != FAILED or HINT_PREFIX in result.message or not callable(fn)
                or getattr(result, "reason", "wrong") not in ("wrong", "error")):
            return result  # passed, already explained, not a function, or a time limit: nothing to add
        for flips, hint in self._LAYOUT_HINTS.items():
            if self._right_with(fn, flips):
                return _with_hint(result, hint)
        return result

    def _right_with(self, fn: Callable[..., Any], flips: tuple[bool, bool]) -> bool:
        """True when ``fn`` matches the reference on every case with the weights transposed as ``flips`` says."""
        try:
            for case in self.cases():
                x, w_fc, b_fc, w_proj, b_proj = copy.deepcopy(case.args)
                expected = self.reference(x.clone(), w_fc.clone(), b_fc, w_proj.clone(), b_proj)
                w_fc = w_fc.T.contiguous() if flips[0] else w_fc
                w_proj = w_proj.T.contiguous() if flips[1] else w_proj
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = fn(x, w_fc, b_fc, w_proj, b_proj)
                if got is None or compare(got, expected, self.atol, self.rtol) is not None:
                    return False
            return True
        except Exception:  # the re-run failing just means "not this mistake"
            return False


check_gpt2_mlp = _make(
    _Conv1DExercise,
    "Exercise 1 (GPT-2's MLP from its stored weights)",
    _gpt2_mlp,
    _gpt2_cases,
    kind="build",
    mistakes=[
        ("you used the exact GELU; GPT-2 was trained with GELU's tanh form (gelu_new): "
         "F.gelu(h, approximate='tanh'). The two differ by up to 4.7e-4 per unit (notebook 01).",
         lambda x, c_fc, b_fc, c_proj, b_proj: F.gelu(x @ c_fc + b_fc) @ c_proj + b_proj),
        ("you used ReLU; GPT-2's MLP uses GELU's tanh form (F.gelu(h, approximate='tanh')).",
         lambda x, c_fc, b_fc, c_proj, b_proj: torch.relu(x @ c_fc + b_fc) @ c_proj + b_proj),
        ("there is no activation: without it the two matrices collapse into one linear map.",
         lambda x, c_fc, b_fc, c_proj, b_proj: (x @ c_fc + b_fc) @ c_proj + b_proj),
        ("c_fc_b is missing: add it before the activation, gelu_tanh(x @ c_fc_w + c_fc_b).",
         lambda x, c_fc, b_fc, c_proj, b_proj: F.gelu(x @ c_fc, approximate="tanh") @ c_proj + b_proj),
        ("c_proj_b is missing: add it after the contraction, ... @ c_proj_w + c_proj_b.",
         lambda x, c_fc, b_fc, c_proj, b_proj: F.gelu(x @ c_fc + b_fc, approximate="tanh") @ c_proj),
        ("c_fc_b was added after the activation: it belongs inside, gelu_tanh(x @ c_fc_w + c_fc_b).",
         lambda x, c_fc, b_fc, c_proj, b_proj: (F.gelu(x @ c_fc, approximate="tanh") + b_fc) @ c_proj + b_proj),
    ],
    atol=1e-5, rtol=1e-4,
    domain=_GPT2_DOMAIN,
)


# --------------------------------------------------------------------------------------------
# Exercise 2 (investigate): FLOPs of a training step when not everything needs a gradient
# --------------------------------------------------------------------------------------------


def _step_flops(n_tokens: int, d_model: int, d_ff: int, input_grad: bool, weight_grad: bool) -> int:
    """Matmul FLOPs FlopCounterMode counts for forward (+ backward when anything needs a gradient).

    Forward: two products, 2·n·d·d_ff FLOPs each. Backward, per matrix: the weight's gradient
    (when the weights need one) and the gradient of the matrix's input. W2's input is the hidden
    layer: its gradient is needed whenever anything below it needs one (W1 or the input); W1's
    input is the FFN's input: its gradient only when ``input_grad``.
    """
    product = 2 * n_tokens * d_model * d_ff
    total = 2 * product                                             # forward: W1, then W2
    if weight_grad:
        total += 2 * product                                        # dW1 and dW2
    if weight_grad or input_grad:
        total += product                                            # d hidden (through W2)
    if input_grad:
        total += product                                            # d input (through W1)
    return total


def _flops_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(4)
    cases = []
    flags = [(True, True), (False, True), (True, False), (False, False)] * 2
    for k, (input_grad, weight_grad) in enumerate(flags):
        if k == 4:
            n, d, d_ff = 1, randint(gen, 2, 300), randint(gen, 3, 1200)              # one token
        elif k == 5:
            n = randint(gen, 2, 5000)
            d = d_ff = randint(gen, 2, 300)                                          # d_ff = d_model
        else:
            n, d, d_ff = randint(gen, 2, 5000), randint(gen, 2, 300), randint(gen, 3, 1200)
            d_ff += d_ff == 4 * d
        cases.append(Case((n, d, d_ff, input_grad, weight_grad),
                          note=f"n_tokens={n}, d_model={d}, d_ff={d_ff}, input_grad={input_grad}, "
                               f"weight_grad={weight_grad}"))
    cases.append(Case((1024, 768, 3072, False, True), note="GPT-2 small's MLP, 1024 tokens, input_grad=False, "
                                                           "weight_grad=True"))
    cases.append(Case((1, 1, 1, True, True), note="the smallest sizes allowed: n_tokens=1, d_model=1, d_ff=1, "
                                                  "input_grad=True, weight_grad=True"))
    cases.append(Case((30_000_001, 8191, 32767, True, True),
                      note="a count beyond 2**53, where a float loses its last digits: n_tokens=30000001, "
                           "d_model=8191, d_ff=32767, input_grad=True, weight_grad=True"))
    return cases


_FLOPS_DOMAIN = Domain(
    allows="n_tokens, d_model, d_ff: Python ints >= 1 (d_ff = d_model allowed, no upper bound); input_grad, "
           "weight_grad: bools, all four combinations; the answer: an int (exact, however large)",
    corners=tuple(
        Corner(f"input_grad={i}, weight_grad={w}", lambda c, i=i, w=w: tuple(c.args[3:]) == (i, w))
        for i in (True, False) for w in (True, False)
    ) + (
        Corner("one token (n_tokens = 1)", lambda c: c.args[0] == 1),
        Corner("d_model = 1", lambda c: c.args[1] == 1),
        Corner("d_ff = 1", lambda c: c.args[2] == 1),
        Corner("d_ff = d_model > 1", lambda c: c.args[1] == c.args[2] > 1),
        Corner("a count above 2**53 (a float would round it)", lambda c: _step_flops(*c.args) > 2 ** 53),
    ),
)


check_step_flops = _make(
    Exercise,
    "Exercise 2 (FLOPs of a training step)",
    _step_flops,
    _flops_cases,
    kind="investigate",
    mistakes=[
        ("you always counted the full 12·n·d·d_ff: which gradients are needed changes the backward pass "
         "(frozen weights need no weight gradients; an input that needs no gradient needs no product for it).",
         lambda n, d, f, i, w: 12 * n * d * f),
        ("\"backward = 2 × forward\" holds only when both the input and the weights need gradients: each matrix's "
         "backward has two products (its weight's gradient, its input's gradient), and a gradient nobody needs "
         "is not computed.",
         lambda n, d, f, i, w: 12 * n * d * f if (i or w) else 4 * n * d * f),
        ("with input_grad=False you dropped the backward through W2 as well; only W1's input gradient is "
         "skipped: the gradient of the hidden layer (through W2) is still needed to reach W1, so "
         "forward 4 + weights 4 + hidden 2 = 10·n·d·d_ff.",
         lambda n, d, f, i, w: 4 * n * d * f * (1 + int(i) + int(w))),
        ("with frozen weights (weight_grad=False) the input's gradient still needs a backward pass "
         "through both matrices: 4 (forward) + 2 + 2 = 8·n·d·d_ff when input_grad=True.",
         lambda n, d, f, i, w: _step_flops(n, d, f, False, w) if not w else _step_flops(n, d, f, i, w)),
        ("with nothing needing a gradient there is no backward pass, but the forward still costs "
         "4·n·d·d_ff.",
         lambda n, d, f, i, w: 0 if not (i or w) else _step_flops(n, d, f, i, w)),
        ("your count is per token: multiply by n_tokens.",
         lambda n, d, f, i, w: _step_flops(1, d, f, i, w)),
        ("a multiply-add is 2 FLOPs; you counted it as 1 (your count is half the right one).",
         lambda n, d, f, i, w: _step_flops(n, d, f, i, w) // 2),
        ("your count went through floating point (a float, or an int made from one): return an int (integer "
         "arithmetic; // rather than /). Above 2**53 a float cannot "
         "hold every integer, and the count is rounded.",
         lambda n, d, f, i, w: float(_step_flops(n, d, f, i, w))),
    ],
    atol=0, rtol=0,
    domain=_FLOPS_DOMAIN,
)

# --------------------------------------------------------------------------------------------
# Exercise 3 (build): a stack of FFNs with a chosen LayerNorm placement, with or without residuals
# --------------------------------------------------------------------------------------------


def _stack_forward(x: torch.Tensor, ffns, norms, norm: str = "pre", residual: bool = True) -> torch.Tensor:
    """``(..., d) -> (..., d)`` through every layer, the update rule chosen by ``norm`` and ``residual``."""
    with torch.no_grad():
        for ffn, ln in zip(ffns, norms):
            x, _ = block_step(x, ffn, ln, norm=norm, residual=residual)
    return x


def _stack(depth: int, d: int, seed: int, gen: torch.Generator) -> tuple[nn.ModuleList, nn.ModuleList]:
    """``depth`` seeded FFNs and LayerNorms whose scales and shifts are not 1 and 0 and differ per layer."""
    ffns = nn.ModuleList(_seeded_ffn(seed + layer, d, 2 * d + 1) for layer in range(depth))
    norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(depth))
    with torch.no_grad():
        for ln in norms:
            ln.weight.copy_(1 + 0.5 * torch.randn(d, generator=gen))
            ln.bias.copy_(0.5 * torch.randn(d, generator=gen))
    return ffns, norms


_SETTINGS = [(norm, residual) for norm in NORMS for residual in (True, False)]


def _stack_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(5)
    cases = []
    extra = [("pre", True), ("post", True), ("post", False), ("none", True), ("post", False)]
    for k, (norm, residual) in enumerate(_SETTINGS + extra):
        depth, d = (1, 6) if k == 6 else ((10, 5) if k == 10 else (randint(gen, 2, 4), randint(gen, 4, 9)))
        lead = {7: (1, 1), 8: (randint(gen, 2, 5),), 9: ()}.get(k, (randint(gen, 1, 3), randint(gen, 2, 5)))
        ffns, norms = _stack(depth, d, 3000 + 10 * k, gen)
        x = 2 * torch.randn(*lead, d, generator=gen) + 1
        what = "one layer, " if depth == 1 else ("batch size one, one token, " if lead == (1, 1) else "")
        what += "tokens as rows (no batch axis), " if len(lead) == 1 else ""
        what += "one token vector (d_model,), " if not lead else ""
        cases.append(Case((x, ffns, norms, norm, residual),
                          note=f"{what}x {tuple(x.shape)}, {depth} FFN(d_model={d}) layers, "
                               f"norm={norm!r}, residual={residual}"))
    return cases


def _stack_domain(x_at: int, ffns_at: int, answer: str = "float32 shaped like x") -> Domain:
    """The domain of exercises 3 and 4 (their stack arguments sit at different positions)."""
    settings = tuple(Corner(f"norm={norm!r}, residual={residual}",
                            lambda c, n=norm, r=residual: tuple(c.args[-2:]) == (n, r)) for norm, residual in _SETTINGS)
    return Domain(
        allows="x float32 of shape (..., d_model), from one token vector (d_model,) to (B, T, d_model); ffns, norms: "
               "L >= 1 dense FFNs and LayerNorms (learned scale and shift not 1 and 0); norm 'none', 'pre' or 'post'; "
               f"residual True or False; the answer: {answer}",
        corners=settings + (
            Corner("one layer (L = 1)", lambda c: len(c.args[ffns_at]) == 1),
            Corner("a deeper stack (L >= 10)", lambda c: len(c.args[ffns_at]) >= 10),
            Corner("x is one token vector (d_model,)", lambda c: c.args[x_at].dim() == 1),
            Corner("tokens as rows, no batch axis (T, d_model)", lambda c: c.args[x_at].dim() == 2),
            Corner("a batch of one sequence of one token (1, 1, d_model)",
                   lambda c: tuple(c.args[x_at].shape[:-1]) == (1, 1)),
        ),
    )


def _stack_with(rule: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A whole (wrong) learner answer from a per-layer ``rule(x, ffn, ln, layer, norms, norm, residual)``."""
    def stack_forward(x, ffns, norms, norm="pre", residual=True):
        with torch.no_grad():
            for layer, (ffn, ln) in enumerate(zip(ffns, norms)):
                x = rule(x, ffn, ln, layer, norms, norm, residual)
        return x
    return stack_forward


def _right(x, ffn, ln, layer, norms, norm, residual):
    return block_step(x, ffn, ln, norm=norm, residual=residual)[0]


check_stack_forward = _make(
    Exercise,
    "Exercise 3 (a stack of FFNs)",
    _stack_forward,
    _stack_cases,
    kind="build",
    mistakes=[
        ("post-LN normalises after the FFN and the residual addition, LN(x + FFN(x)); you normalised the FFN's "
         "input instead (that is pre-LN).",
         _stack_with(lambda x, f, ln, l, ns, norm, res: _right(x, f, ln, l, ns, "pre" if norm == "post" else norm,
                                                               res))),
        ("with pre-LN the residual carries the raw stream: x + FFN(LN(x)); you added LN(x) back.",
         _stack_with(lambda x, f, ln, l, ns, norm, res: ln(x) + f(ln(x)) if norm == "pre" and res
                     else _right(x, f, ln, l, ns, norm, res))),
        ("with post-LN the LayerNorm acts on the sum, LN(x + FFN(x)); you normalised only the FFN's output, "
         "x + LN(FFN(x)).",
         _stack_with(lambda x, f, ln, l, ns, norm, res: x + ln(f(x)) if norm == "post" and res
                     else _right(x, f, ln, l, ns, norm, res))),
        ("residual=False means no identity path: the FFN's output replaces the stream (then LN for post-LN); "
         "you added x back anyway.",
         _stack_with(lambda x, f, ln, l, ns, norm, res: _right(x, f, ln, l, ns, norm, True))),
        ("every layer has its own LayerNorm: use norms[l] with ffns[l]; you used norms[0] throughout.",
         _stack_with(lambda x, f, ln, l, ns, norm, res: _right(x, f, ns[0], l, ns, norm, res))),
        ("you normalised without the LayerNorm's learned scale and shift (ln.weight, ln.bias): call the "
         "LayerNorm module, ln(x).",
         _stack_with(lambda x, f, ln, l, ns, norm, res: _right(
             x, f, lambda t: F.layer_norm(t, t.shape[-1:]), l, ns, norm, res))),
        ("post-LN without the residual path still normalises what the FFN wrote: x <- LN(FFN(x)); you dropped the "
         "LayerNorm and returned FFN(x).",
         _stack_with(lambda x, f, ln, l, ns, norm, res: f(x) if norm == "post" and not res
                     else _right(x, f, ln, l, ns, norm, res))),
    ],
    domain=_stack_domain(x_at=0, ffns_at=1),
    returns=tensor_dtype(torch.float32, advice="Keep the inputs' dtype (float32)."),
)

# --------------------------------------------------------------------------------------------
# Exercise 4 (investigate): gradient norms per layer through the stack
# --------------------------------------------------------------------------------------------


class StaleGrads(nn.ModuleList):
    """A ``ModuleList`` of FFNs whose parameters hold gradients left over from an earlier backward pass.

    ``copy.deepcopy`` of a parameter drops its ``.grad``; this list keeps them, so a hidden case
    can hand the learner FFNs with stale gradients (as in a training loop without ``zero_grad``).
    """

    def __deepcopy__(self, memo: dict) -> StaleGrads:
        clone = StaleGrads(copy.deepcopy(module, memo) for module in self)
        for old, new in zip(self.parameters(), clone.parameters()):
            if old.grad is not None:
                new.grad = old.grad.detach().clone()
        return clone


def _grad_norms(x: torch.Tensor, target: torch.Tensor, ffns, norms, norm: str = "pre",
                residual: bool = True) -> torch.Tensor:
    """``(L,)``: Frobenius norm of d loss / d W1 of every layer, loss = mean squared error of the stack's output."""
    weights = [ffn.w1.weight for ffn in ffns]
    with torch.enable_grad():
        out = x
        for ffn, ln in zip(ffns, norms):
            out, _ = block_step(out, ffn, ln, norm=norm, residual=residual)
        grads = torch.autograd.grad(F.mse_loss(out, target), weights)
    return torch.stack([g.norm() for g in grads]).detach()


def _grad_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(6)
    cases = []
    extra = [("pre", True), ("none", True), ("post", True), ("post", False), ("none", False)]
    for k, (norm, residual) in enumerate(_SETTINGS + extra):
        depth = {6: 1, 10: 10}.get(k, randint(gen, 2, 5))
        d = randint(gen, 4, 9)
        lead = {7: (1, 1), 8: (randint(gen, 2, 5),), 9: ()}.get(k, (randint(gen, 1, 3), randint(gen, 2, 5)))
        ffns, norms = _stack(depth, d, 4000 + 10 * k, gen)
        x = torch.randn(*lead, d, generator=gen)
        target = torch.randn(*lead, d, generator=gen)
        stale = k in (1, 3, 7, 9)
        if stale:  # gradients from an earlier, unrelated backward pass
            ffns = StaleGrads(ffns)
            with torch.enable_grad():
                sum(ffn(torch.randn(3, d, generator=gen)).pow(2).sum() for ffn in ffns).backward()
        what = ("one layer, " if depth == 1 else "") + ("batch size one, one token, " if lead == (1, 1) else "")
        what += "FFNs holding stale gradients, " if stale else ""
        what += "tokens as rows (no batch axis), " if len(lead) == 1 else ""
        what += "one token vector (d_model,), " if not lead else ""
        cases.append(Case((x, target, ffns, norms, norm, residual),
                          note=f"{what}x {tuple(x.shape)}, {depth} FFN(d_model={d}) layers, norm={norm!r}, "
                               f"residual={residual}"))
    return cases


def _grad_domain() -> Domain:
    stack = _stack_domain(x_at=0, ffns_at=2, answer="float32 of shape (L,)")
    return Domain(
        allows=stack.allows.replace("x float32", "x and target float32") + "; the FFNs may hold gradients from an "
               "earlier backward pass",
        corners=stack.corners + (Corner("FFNs holding stale gradients", lambda c: isinstance(c.args[2], StaleGrads)),),
    )


def _backward_then(read: Callable[[nn.Module], torch.Tensor], *, loss: str = "mean",
                   zero: bool = True) -> Callable[..., torch.Tensor]:
    """A learner answer that calls ``.backward()`` and reads ``read(ffn)`` (a gradient) from every layer."""
    def layer_grad_norms(x, target, ffns, norms, norm="pre", residual=True):
        if zero:
            for ffn in ffns:
                ffn.zero_grad(set_to_none=True)
        with torch.enable_grad():
            out = x
            for ffn, ln in zip(ffns, norms):
                out, _ = block_step(out, ffn, ln, norm=norm, residual=residual)
            F.mse_loss(out, target, reduction=loss).backward()
        return torch.stack([read(ffn) for ffn in ffns]).detach()
    return layer_grad_norms


check_layer_grad_norms = _make(
    Exercise,
    "Exercise 4 (gradients through depth)",
    _grad_norms,
    _grad_cases,
    kind="investigate",
    mistakes=[
        ("your gradients include what the FFNs already held (.backward() adds to .grad): zero them first "
         "(ffn.zero_grad()) or use torch.autograd.grad, which returns fresh gradients.",
         _backward_then(lambda f: f.w1.weight.grad.norm(), zero=False)),
        ("you measured the gradient of W2 (ffn.w2.weight); the exercise asks for W1's (ffn.w1.weight).",
         _backward_then(lambda f: f.w2.weight.grad.norm())),
        ("you took the norm over all of the FFN's parameters; the exercise asks for W1's gradient only.",
         _backward_then(lambda f: torch.cat([p.grad.flatten() for p in f.parameters()]).norm())),
        ("the loss is the mean squared error (F.mse_loss, a mean over all entries); you summed the squared errors.",
         _backward_then(lambda f: f.w1.weight.grad.norm(), loss="sum")),
        ("you returned squared norms (sum of squares); return the Frobenius norm, its square root.",
         _backward_then(lambda f: f.w1.weight.grad.pow(2).sum())),
        ("the layers are in reverse order: index 0 must be the first layer (the one the input enters).",
         lambda *a, **k: _grad_norms(*a, **k).flip(0)),
    ],
    atol=1e-7, rtol=1e-4,
    domain=_grad_domain(),
    returns=tensor_dtype(torch.float32, advice="Keep x's dtype (or convert the result with .float())."),
)

# --------------------------------------------------------------------------------------------
# Exercise 5 (build): per-neuron contributions m_i · v_i
# --------------------------------------------------------------------------------------------


def _contributions(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(T, d) -> (T, d_ff, d)``: ``out[t, i] = m[t, i] · W2[:, i]`` (``W2 = ffn.w2.weight``)."""
    with torch.no_grad():
        return ffn.hidden(x).unsqueeze(-1) * ffn.w2.weight.T


def _contribution_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(3)
    cases = []
    settings = [("gelu", True, "", ""), ("relu", True, "", ""), ("silu", True, "", ""),
                ("gelu", False, "no biases, ", ""), ("gelu", True, "one token, ", ""),
                ("relu", True, "d_ff = d_model, ", "square"), ("sigmoid", True, "", ""),
                ("silu", True, "d_ff < d_model, ", "narrow"), ("gelu", False, "d_ff = 1, no biases, ", "one")]
    for k, (act, bias, what, sizes) in enumerate(settings):
        T, d, d_ff = _distinct_sizes(gen)
        T = 1 if what == "one token, " else T
        d_ff = {"square": d, "narrow": max(1, d - 2), "one": 1}.get(sizes, d_ff)
        ffn = _seeded_ffn(1000 + k, d, d_ff, act, bias=bias)
        if bias:
            with torch.no_grad():  # biases as large as the weights, so a missing b1 shows
                ffn.w1.bias.copy_(torch.randn(d_ff, generator=gen) * 0.5)
                ffn.w2.bias.copy_(torch.randn(d, generator=gen) * 0.5)
        x = torch.randn(T, d, generator=gen) * 2
        cases.append(Case((ffn, x), note=f"{what}FFN(d_model={d}, d_ff={d_ff}, activation={act!r}, bias={bias}), "
                                         f"x {tuple(x.shape)}"))
    return cases


_CONTRIBUTION_DOMAIN = Domain(
    allows="ffn: a dense helpers.ffn.FFN with activation GELU, ReLU, SiLU or sigmoid, with or without biases, any "
           "d_model, d_ff >= 1 (d_ff below, equal to or above d_model); x float32 (T, d_model), T >= 1; the answer: "
           "float32 (T, d_ff, d_model)",
    corners=tuple(Corner(f"activation {a}", lambda c, a=a: c.args[0].activation_name == a)
                  for a in ("gelu", "relu", "silu", "sigmoid")) + (
        Corner("no biases", lambda c: c.args[0].w2.bias is None),
        Corner("one token (T = 1)", lambda c: c.args[1].shape[0] == 1),
        Corner("d_ff = d_model (an untransposed W2 still fits)", lambda c: c.args[0].d_ff == c.args[0].d_model),
        Corner("d_ff < d_model", lambda c: 1 < c.args[0].d_ff < c.args[0].d_model),
        Corner("d_ff = 1 (one unit)", lambda c: c.args[0].d_ff == 1),
    ),
)


def _without_grad(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def wrapped(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return fn(ffn, x)
    return wrapped


check_contributions = _make(
    Exercise,
    "Exercise 5 (per-neuron contributions)",
    _contributions,
    _contribution_cases,
    kind="build",
    mistakes=[
        ("you weighted the values by the pre-activation h_i = k_i·x + b1_i; the memory coefficient is "
         "m_i = φ(h_i) (ffn.hidden(x) gives it).",
         _without_grad(lambda f, x: f.w1(x).unsqueeze(-1) * f.w2.weight.T)),
        ("you used the key k_i (row i of W1 = w1.weight) where the value belongs: value i is column i of "
         "W2 = w2.weight, i.e. w2.weight[:, i].",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w1.weight)),
        ("you reshaped w2.weight to (d_ff, d_model) with .view/.reshape: that reorders the numbers "
         "instead of transposing; the values are the columns of w2.weight, the rows of w2.weight.T.",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight.reshape(f.d_ff, f.d_model))),
        ("b2 was added to every neuron's contribution: b2 is added once, after the sum over neurons.",
         _without_grad(lambda f, x: _plus(f.hidden(x).unsqueeze(-1) * f.w2.weight.T, f.w2.bias))),
        ("b1 is missing from m: m_i = φ(k_i·x + b1_i).",
         _without_grad(lambda f, x: f.act(x @ f.w1.weight.T).unsqueeze(-1) * f.w2.weight.T)),
        ("you hard-coded GELU: use the FFN's own activation (ffn.act, or ffn.hidden(x) for m); hidden cases "
         "use ReLU, SiLU and sigmoid too.",
         _without_grad(lambda f, x: F.gelu(f.w1(x)).unsqueeze(-1) * f.w2.weight.T)),
        ("you multiplied by w2.weight as stored, (d_model, d_ff): value i is its column i, so the values are the "
         "rows of w2.weight.T, (d_ff, d_model). With d_ff = d_model the shapes fit and the numbers are wrong.",
         _without_grad(lambda f, x: f.hidden(x).unsqueeze(-1) * f.w2.weight)),
    ],
    domain=_CONTRIBUTION_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep x's dtype (or convert the result with .float())."),
)

#: every exercise of notebook 02, in the notebook's order
EXERCISES = [check_gpt2_mlp, check_step_flops, check_stack_forward, check_layer_grad_norms, check_contributions]

__all__ = ["check_gpt2_mlp", "check_step_flops", "check_stack_forward", "check_layer_grad_norms",
           "check_contributions", "EXERCISES"]
