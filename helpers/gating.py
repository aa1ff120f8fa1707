r"""Gated FFNs: the gate's gradient, what they save for backward, and a matched-parameter comparison.

A gated unit multiplies two projections of the same input,
``h = φ(a) · b`` with ``a = W1 x`` (the gate, through φ) and ``b = W3 x``
(the content, linear). Its derivatives couple the two branches::

    ∂h/∂b = φ(a)           the content branch learns only as much as the gate is open
    ∂h/∂a = φ'(a) · b      the gate learns only as much as there is content to pass

``compare_variants`` trains the course's ``TinyGPT`` once per (variant, seed)
with nothing else changed (same data, same full batch every step, same
optimiser, same seed → same attention and embedding initialisation) and
records the answer-token loss along the way, for a comparison in the spirit
of Shazeer (2020), Table 1 (``SHAZEER_2020_65K``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.activations import ACTIVATIONS, get_activation
from helpers.facts import FactDataset
from helpers.ffn import VARIANTS
from helpers.transformer import GPTConfig, TinyGPT, train_lm
from helpers.progress import progress as progress_bar

#: Shazeer (2020), Table 1: held-out log-perplexity on C4 (T5 base, d_model 768,
#: d_ff 3072 dense / 2048 gated, no biases) after 65,536 training steps.
SHAZEER_2020_65K: dict[str, float] = {
    "relu": 1.997, "gelu": 1.983, "swish": 1.994, "glu": 1.982,
    "bilinear": 1.960, "geglu": 1.942, "swiglu": 1.944, "reglu": 1.953,
}
#: The same table after 524,288 steps.
SHAZEER_2020_524K: dict[str, float] = {
    "relu": 1.677, "gelu": 1.679, "swish": 1.683, "glu": 1.663,
    "bilinear": 1.648, "geglu": 1.633, "swiglu": 1.636, "reglu": 1.645,
}

#: Tensors of width d_ff that autograd keeps per token for one FFN (besides the input x, width d):
#: dense φ = ReLU keeps only its output (W2 reuses it); GELU/SiLU also keep their input.
#: Gated: b = W3 x and the product φ(a)·b always; φ(a) (ReLU, sigmoid; for identity it *is* a),
#: plus a itself when φ needs its input for the derivative (GELU, SiLU).
SAVED_D_FF_TENSORS: dict[str, int] = {
    "relu": 1, "gelu": 2, "gelu_tanh": 2, "swish": 2,
    "glu": 3, "bilinear": 3, "reglu": 3, "geglu": 4, "swiglu": 4,
}


def saved_per_token(variant: str, d_model: int, d_ff: int) -> int:
    """Activation elements one FFN saves for backward, per token: ``d_model + k · d_ff``.

    ``k`` is 1 (ReLU), 2 (GELU, Swish), 3 (GLU, Bilinear, ReGLU) or 4 (GEGLU,
    SwiGLU): see ``SAVED_D_FF_TENSORS``. Matches
    ``helpers.costs.measure_saved_tensors`` on ``helpers.ffn.FFN``, with or without biases.
    """
    validate.one_of("variant", variant, VARIANTS)
    validate.positive_int("d_model", d_model)
    validate.positive_int("d_ff", d_ff)
    return d_model + SAVED_D_FF_TENSORS[variant] * d_ff


def gate_gradients(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor,
                   activation: str = "silu") -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients reaching the two branches of ``h = φ(a) · b`` (by autograd).

    Args:
        a: gate pre-activations ``W1 x``, shape ``(...)``.
        b: content values ``W3 x``, same shape.
        grad_h: the gradient arriving at ``h`` from above, same shape.
        activation: φ, a name from ``helpers.activations.ACTIVATIONS`` (``"silu"``: SwiGLU).

    Returns:
        ``(grad_a, grad_b) = (grad_h · φ'(a) · b, grad_h · φ(a))``, each of shape ``(...)``.
    """
    validate.float_tensor("a", a)
    validate.float_tensor("b", b)
    validate.float_tensor("grad_h", grad_h)
    if not a.shape == b.shape == grad_h.shape:
        raise ValueError(f"a, b and grad_h must have the same shape, got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(grad_h.shape)}")
    phi = get_activation(validate.one_of("activation", activation, ACTIVATIONS))
    a = a.detach().clone().requires_grad_(True)
    b = b.detach().clone().requires_grad_(True)
    h = phi(a) * b
    grad_a, grad_b = torch.autograd.grad(h, (a, b), grad_outputs=grad_h)
    return grad_a, grad_b


@torch.no_grad()
def answer_loss(model: nn.Module, data: FactDataset) -> float:
    """Mean cross-entropy (nats) of the answer token over every fact in ``data``.

    The prompt words are a template the model learns in a few steps; the answer
    (e.g. the capital) is the part that has to be *stored*. Leaves ``model`` in
    eval mode.
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    model.eval()
    device = next(model.parameters()).device
    logits = model(data.ids.to(device))                        # (N, T, vocab)
    rows = torch.arange(len(data), device=device)
    answer_logits = logits[rows, data.answer_pos.to(device)]   # (N, vocab)
    return F.cross_entropy(answer_logits, data.answer_id.to(device)).item()


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (``None``: leave it), then restore."""
    if n is None:
        yield
        return
    validate.positive_int("n", n)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class VariantComparison:
    """Results of ``compare_variants``.

    Attributes:
        variants, seeds: what was trained (every variant with every seed).
        eval_steps: the optimisation steps at which the answer loss was measured (0 = at initialisation).
        curves: variant -> ``(n_seeds, n_evals)`` answer loss at ``eval_steps``.
        ffn_params: variant -> parameters of one FFN block.
        model_params: variant -> parameters of the whole model.
        d_ff: variant -> hidden width.
    """

    variants: list[str]
    seeds: list[int]
    eval_steps: list[int]
    curves: dict[str, torch.Tensor] = field(default_factory=dict)
    ffn_params: dict[str, int] = field(default_factory=dict)
    model_params: dict[str, int] = field(default_factory=dict)
    d_ff: dict[str, int] = field(default_factory=dict)

    def final(self, variant: str) -> torch.Tensor:
        """``(n_seeds,)`` answer loss after the last step."""
        return self.curves[validate.one_of("variant", variant, self.variants)][:, -1]


def compare_variants(data: FactDataset, variants: Sequence[str], seeds: Sequence[int] = (0, 1, 2), *,
                     d_model: int = 24, n_layers: int = 1, n_heads: int = 2, bias: bool = False,
                     steps: int = 100, lr: float = 1e-2, eval_every: int = 5,
                     num_threads: int | None = 1, progress: bool = True) -> VariantComparison:
    """Train one ``TinyGPT`` per (variant, seed) on ``data`` and record the answer loss.

    Everything but the FFN variant is held fixed: full-batch AdamW on the same
    rows every step, ``steps`` steps at ``lr``; the model is built right after
    ``torch.manual_seed(seed)``. Dense variants get ``d_ff = 4·d_model``, gated
    ones the parameter-matched ``int(2·4·d_model/3)``.

    Args:
        data: the training facts (also the evaluation set: see ``answer_loss``).
        variants: names from ``helpers.ffn.VARIANTS``. seeds: one run per seed and variant.
        eval_every: measure the answer loss every this many steps (and at step 0).
        num_threads: torch threads while training (``None``: unchanged). These matrices
            are tiny, so one thread is as fast as two and gives the same numbers on any machine.
        progress: one tqdm bar over the runs.
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    if isinstance(variants, str) or len(variants) == 0:
        raise ValueError(f"variants must be a non-empty list of variant names, got {variants!r}")
    for v in variants:
        validate.one_of("variants entry", v, VARIANTS)
    if isinstance(seeds, (str, int)) or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    for s in seeds:
        validate.non_negative_int("seeds entry", s)
    validate.positive_int("steps", steps)
    validate.int_in_range("eval_every", eval_every, 1, steps)
    result = VariantComparison(list(variants), list(seeds), [0] + list(range(eval_every, steps + 1, eval_every)))
    runs = [(v, s) for v in variants for s in seeds]
    with torch_threads(num_threads):
        for variant, seed in progress_bar(runs, desc="variant × seed runs", disable=not progress):
            torch.manual_seed(seed)
            config = GPTConfig(len(data.vocab), d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                               max_len=data.ids.shape[1], variant=variant, bias=bias)
            model = TinyGPT(config)
            curve = [answer_loss(model, data)]

            def on_step(step: int, m: nn.Module, loss: float) -> None:
                if (step + 1) % eval_every == 0:
                    curve.append(answer_loss(m, data))
                    m.train()

            train_lm(model, data.ids, data.targets, steps=steps, lr=lr, seed=seed, progress=False,
                     on_step=on_step)
            result.curves.setdefault(variant, []).append(curve)
            ffn = model.blocks[0].ffn
            result.ffn_params[variant] = ffn.param_count()
            result.model_params[variant] = sum(p.numel() for p in model.parameters())
            result.d_ff[variant] = ffn.d_ff
    result.curves = {v: torch.tensor(c) for v, c in result.curves.items()}
    return result


def rank_correlation(x: dict[str, float], y: dict[str, float]) -> float:
    """Spearman's rank correlation between two scores of the same keys (no ties assumed).

    +1: same order, -1: reversed. Uses the keys of ``x``; each must be in ``y``.
    """
    keys = list(x)
    missing = [k for k in keys if k not in y]
    if missing or len(keys) < 2:
        raise ValueError(f"x and y must share at least two keys; y lacks {missing}")
    rx = torch.tensor([x[k] for k in keys], dtype=torch.float64).argsort().argsort().double()
    ry = torch.tensor([y[k] for k in keys], dtype=torch.float64).argsort().argsort().double()
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))

