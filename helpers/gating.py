r"""Gated FFNs: the gate's gradient, a fused gate, Shazeer's table as a family of tests, and a matched race.

A gated unit multiplies two projections of the same input, ``h = φ(a) · b`` with ``a = W1 x`` (the gate,
through φ) and ``b = W3 x`` (the content, linear). Its derivatives couple the two branches::

    ∂h/∂b = φ(a)           the content branch learns only as much as the gate is open
    ∂h/∂a = φ'(a) · b      the gate learns only as much as there is content to pass

``gate_gradients`` computes both by autograd; ``catch_gate_gradients`` catches what autograd delivers
inside a real gated ``FFN``. ``FusedGate`` is ``φ(a) · b`` as one operation that keeps only
``a`` and ``b`` for the backward pass and recomputes ``φ(a)`` there (what fused kernels such as Liger Kernel's
``LigerSiLUMulFunction`` do); ``fused_gate_forward`` runs a course ``FFN`` with it.

``shazeer_family`` turns Shazeer (2020), Table 1 (``SHAZEER_2020_65K``: the mean of four runs per variant at
65,536 steps, with their standard deviations ``SHAZEER_2020_65K_SD``) into the 28 pairwise Welch comparisons
``helpers.stats.holm`` judges together.

**The race** (notebook 04): the course's ``TinyGPT`` trained once per (variant, seed) with nothing else
changed (same data, same full batch every step, same optimiser, same seed → same attention and embedding
initialisation), the answer-token loss recorded along the way. Each variant trains at *its own* learning rate,
the best of a sweep (``RACE_LRS``) on seeds the race does not use (``TUNING_SEEDS``): a comparison of trained
things made where each is trained. The control runs every variant at one shared rate (``RACE_SHARED_LR``). The
sweep and both races (840 runs, about 10 min of CPU on one thread, far longer in wall time on a busy machine: too long
for a notebook) are stored in
``RACE_RESULTS_PATH`` and read back with ``load_race``::

    python -m helpers.gating --race-results    # sweep on seeds 100-104, then seeds 0-29 tuned and at 0.005

The tuned arm alone on fresh seeds, at the stored race's rates, one file per block of ``FRESH_TUNED_BLOCKS``
(``fresh_tuned_path``; ``pool_races`` joins blocks)::

    python -m helpers.gating --race-results --at-stored-rates --seeds 30 31 ... 59    # and 60 ... 89

The shared-rate blocks (``SHARED_BLOCKS``) and the step-size control (``STEP_CONTROL_MULTIPLIERS``: the dense
variants at 5 % and 10 % above the slow rate, and the gated ones without a sigmoid at 5 %: ``GATED_STEP_CONTROL_PATH``) come from
``--at-shared-lr LR`` with ``--variants``, ``--seeds`` and ``--out``.

(``--seeds``, ``--tuning-seeds``, ``--lrs``, ``--shared-lr``, ``--variants``, ``--steps`` and ``--out`` make a
smaller run; the tests make one). Take-off is chaotic: the same seed on another CPU kernel
(``ATEN_CPU_CAPABILITY``) can give a single tuned-rate run a curve up to a few nats away (2.8 measured, GELU), but
no verdict of the race changes (every tuned t moved by at most 0.3).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.activations import ACTIVATIONS, get_activation
from helpers.costs import saved_activation_names, torch_threads  # noqa: F401  (saved_activation_names: old home)
from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.ffn import FFN, VARIANT_NAMES, VARIANTS
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, Welch, paired_difference
from helpers.transformer import GPTConfig, TinyGPT, train_lm

#: Shazeer (2020), Table 1: held-out log-perplexity of T5's span-corruption objective on C4 (T5 base, d_model
#: 768, d_ff 3072 dense / 2048 gated, no biases) after 65,536 training steps: the mean of four runs per variant.
SHAZEER_2020_65K: dict[str, float] = {
    "relu": 1.997, "gelu": 1.983, "swish": 1.994, "glu": 1.982,
    "bilinear": 1.960, "geglu": 1.942, "swiglu": 1.944, "reglu": 1.953,
}
#: The spread between those four runs (the numbers in parentheses in Table 1), read as standard deviations.
SHAZEER_2020_65K_SD: dict[str, float] = {
    "relu": 0.005, "gelu": 0.005, "swish": 0.003, "glu": 0.006,
    "bilinear": 0.005, "geglu": 0.004, "swiglu": 0.010, "reglu": 0.003,
}
#: The same table after 524,288 steps: one run per variant, no spread given.
SHAZEER_2020_524K: dict[str, float] = {
    "relu": 1.677, "gelu": 1.679, "swish": 1.683, "glu": 1.663,
    "bilinear": 1.648, "geglu": 1.633, "swiglu": 1.636, "reglu": 1.645,
}

#: Shazeer (2020), Tables 2-4: each pre-trained model (524,288 steps) fine-tuned once on a mixture of GLUE,
#: SuperGLUE and SQuAD, best checkpoint per task, dev sets: variant -> (GLUE average, SuperGLUE average,
#: SQuAD v1.1 EM, SQuAD F1). ``SHAZEER_2020_FINETUNE_SD``: the inter-run standard deviations the paper lists,
#: measured by Raffel et al. (2019) for their own ReLU model.
SHAZEER_2020_FINETUNE: dict[str, tuple[float, float, float, float]] = {
    "relu": (83.80, 72.76, 83.18, 90.87), "gelu": (83.86, 72.98, 83.09, 90.79),
    "swish": (83.60, 72.40, 83.25, 90.76), "glu": (84.20, 73.95, 82.88, 90.69),
    "geglu": (84.12, 73.96, 83.55, 91.12), "bilinear": (83.79, 73.81, 83.82, 91.06),
    "swiglu": (84.36, 74.56, 83.42, 91.03), "reglu": (84.67, 73.66, 83.53, 91.18),
}
SHAZEER_2020_FINETUNE_SD: tuple[float, float, float, float] = (0.235, 0.416, 0.343, 0.226)
FINETUNE_SCORES: tuple[str, ...] = ("GLUE", "SuperGLUE", "SQuAD EM", "SQuAD F1")


def finetune_group_gaps(scores=None) -> dict[str, float]:
    """Shazeer's fine-tuning scores: score name -> mean of the gated variants without a sigmoid minus mean of the
    dense ones (points; > 0: the gated group scores higher). One run per variant, so a reading, not a test."""
    scores = SHAZEER_2020_FINETUNE if scores is None else scores
    return {name: sum(scores[v][i] for v in GATED_NO_SIGMOID) / len(GATED_NO_SIGMOID)
            - sum(scores[v][i] for v in DENSE) / len(DENSE) for i, name in enumerate(FINETUNE_SCORES)}


def table1_group_gap(table: Mapping[str, float]) -> float:
    """Shazeer's Table 1 column ``table`` (variant -> held-out log-perplexity): the mean of the gated variants
    without a sigmoid minus the mean of the dense ones (< 0: the gated group lower). A size, not a test."""
    return (sum(table[v] for v in GATED_NO_SIGMOID) / len(GATED_NO_SIGMOID)
            - sum(table[v] for v in DENSE) / len(DENSE))


def gate_gradients(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor,
                   activation: str = "silu") -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients reaching the two branches of ``h = φ(a) · b`` (by autograd).

    Args:
        a: gate pre-activations ``W1 x``, shape ``(...)`` (a 0-dim tensor too).
        b: content values ``W3 x``, same shape.
        grad_h: the gradient arriving at ``h`` from above, same shape.
        activation: φ, a name from ``helpers.activations.ACTIVATIONS`` (``"silu"``: SwiGLU).

    Returns:
        ``(grad_a, grad_b) = (grad_h · φ'(a) · b, grad_h · φ(a))``, each of shape ``(...)``.
        Works the same inside ``torch.no_grad()`` or with autograd switched off.
    """
    validate.float_tensor("a", a, min_dims=0)
    validate.float_tensor("b", b, min_dims=0)
    validate.float_tensor("grad_h", grad_h, min_dims=0)
    if not a.shape == b.shape == grad_h.shape:
        raise ValueError(f"a, b and grad_h must have the same shape, got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(grad_h.shape)}")
    phi = get_activation(validate.one_of("activation", activation, ACTIVATIONS))
    with torch.inference_mode(False), torch.enable_grad():    # whatever the caller's autograd state
        a = a.detach().clone().requires_grad_(True)
        b = b.detach().clone().requires_grad_(True)
        h = phi(a) * b
        grad_a, grad_b = torch.autograd.grad(h, (a, b), grad_outputs=grad_h.detach())
    return grad_a, grad_b


@dataclass(frozen=True)
class GateCatch:
    """What one backward pass delivered inside a gated FFN: values and gradients, each ``(..., d_ff)``."""
    a: torch.Tensor              # W1 x, the gate's pre-activation
    b: torch.Tensor              # W3 x, the content
    grad_a: torch.Tensor         # ∂L/∂a, as autograd computed it
    grad_b: torch.Tensor         # ∂L/∂b
    grad_hidden: torch.Tensor    # ∂L/∂h at the hidden vector entering W2


def catch_gate_gradients(ffn: FFN, x: torch.Tensor, target: torch.Tensor) -> GateCatch:
    """Run ``F.mse_loss(ffn(x), target).backward()`` with forward hooks on ``w1``, ``w3`` and ``w2``'s input.

    ``ffn``: a gated course ``FFN``; ``x``, ``target``: ``(..., d_model)``. The hooks keep ``a``, ``b`` and the
    hidden vector ``h = φ(a) · b`` and ask autograd to retain their gradients, so the gradients autograd really
    delivered can be compared with the closed forms of ``gate_gradients``. The hooks are removed afterwards.
    """
    if not isinstance(ffn, FFN) or not ffn.gated:
        raise ValueError("ffn must be a gated helpers.ffn.FFN (e.g. FFN.from_variant('swiglu', d))")
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    validate.float_tensor("target", target, last_dim=ffn.d_model)
    caught: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module, inputs, output):
            tensor = inputs[0] if name == "hidden" else output
            tensor.retain_grad()
            caught[name] = tensor
        return hook

    handles = [ffn.w1.register_forward_hook(keep("a")), ffn.w3.register_forward_hook(keep("b")),
               ffn.w2.register_forward_hook(keep("hidden"))]
    try:
        F.mse_loss(ffn(x), target).backward()
    finally:
        for handle in handles:
            handle.remove()
    return GateCatch(caught["a"].detach(), caught["b"].detach(), caught["a"].grad, caught["b"].grad,
                     caught["hidden"].grad)


def closed_gate_ratios(seeds: Sequence[int], *, d_model: int = 16, n_tokens: int = 6, closed_units: int = 6,
                       shift: float = 5.0, threshold: float = -3.0) -> dict[str, list[float]]:
    """Notebook 04's closed-gate demonstration repeated per seed: a SwiGLU ``FFN(d_model, bias=True)`` whose first
    ``closed_units`` gate biases are lowered by ``shift``, one MSE backward on ``(n_tokens, d_model)`` Gaussian
    inputs and targets (``catch_gate_gradients``). Returns ``{"content": [...], "gate": [...]}``: per seed, the mean
    |gradient| at ``b`` (resp. ``a``) over open (token, unit) pairs divided by the mean over closed ones
    (``a < threshold``): how many times less a closed gate's content and gate rows learn."""
    ratios: dict[str, list[float]] = {"content": [], "gate": []}
    for seed in seeds:
        torch.manual_seed(seed)
        ffn = FFN.from_variant("swiglu", d_model=d_model, bias=True)
        with torch.no_grad():
            ffn.w1.bias[:closed_units] -= shift
        caught = catch_gate_gradients(ffn, torch.randn(n_tokens, d_model), target=torch.randn(n_tokens, d_model))
        closed = caught.a < threshold
        if not closed.any() or closed.all():
            raise ValueError(f"seed {seed}: no open or no closed (token, unit) pair; change shift or threshold")
        for key, grad in (("content", caught.grad_b), ("gate", caught.grad_a)):
            ratios[key].append(grad[~closed].abs().mean().item() / grad[closed].abs().mean().item())
    return ratios


# ---------------------------------------------------------------- a fused gate: keep a and b, recompute φ(a)
class FusedGate(torch.autograd.Function):
    """``h = φ(a) · b`` as one operation: saves ``a`` and ``b`` only, recomputes ``φ(a)`` and ``φ'(a)`` in backward.

    ``FusedGate.apply(a, b, activation)``; ``a``, ``b``: ``(..., d_ff)``; ``activation``: a name from
    ``helpers.activations.ACTIVATIONS``. The unfused ``φ(a) * b`` keeps ``φ(a)`` too (and ``a`` when φ's
    derivative needs its input): fusing trades that memory for recomputing φ, O(d_ff) FLOPs per token.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, activation: str) -> torch.Tensor:
        ctx.activation = activation
        ctx.save_for_backward(a, b)
        return get_activation(activation)(a) * b

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):
        a, b = ctx.saved_tensors
        grad_a, grad_b = gate_gradients(a, b, grad_h, ctx.activation)
        return grad_a, grad_b, None


def fused_gate_forward(ffn: FFN, x: torch.Tensor) -> torch.Tensor:
    """``ffn(x)`` for a gated ``FFN``, with its gate and product computed by ``FusedGate``: ``(..., d) -> (..., d)``."""
    if not isinstance(ffn, FFN) or not ffn.gated:
        raise ValueError("ffn must be a gated helpers.ffn.FFN (e.g. FFN.from_variant('swiglu', d))")
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    return ffn.contract(FusedGate.apply(ffn.w1(x), ffn.w3(x), ffn.activation_name))


# ---------------------------------------------------------------- Shazeer's table as a family of Welch tests
def welch_from_summary(mean_a: float, sd_a: float, mean_b: float, sd_b: float, n_runs: int) -> Welch:
    """Welch's comparison ``a - b`` of two groups of ``n_runs`` runs each, given only their means and sds."""
    if not isinstance(n_runs, int) or isinstance(n_runs, bool) or n_runs < 2:
        raise ValueError(f"n_runs must be an int of at least 2, got {n_runs!r}")
    for name, sd in (("sd_a", sd_a), ("sd_b", sd_b)):
        if not (isinstance(sd, (int, float)) and sd > 0):
            raise ValueError(f"{name} must be a positive number, got {sd!r}")
    va, vb = sd_a ** 2 / n_runs, sd_b ** 2 / n_runs
    df = (va + vb) ** 2 / ((va * va + vb * vb) / (n_runs - 1))
    return Welch(mean_a - mean_b, math.sqrt(va + vb), df, n_runs, n_runs)


def shazeer_family(means: Mapping[str, float] = SHAZEER_2020_65K, sds: Mapping[str, float] = SHAZEER_2020_65K_SD,
                   n_runs: int = 4) -> dict[tuple[str, str], Welch]:
    """Every pair of variants as a Welch comparison ``lower − higher`` (by mean), keyed ``(lower, higher)``.

    ``means`` are means of ``n_runs`` runs and ``sds`` the spread between them (Shazeer's 65k column: four
    runs). Judge the whole family with ``helpers.stats.holm``: every pair, not a chain of neighbours (two
    neighbours can each be unresolved while the ends of the chain are far apart), and with the count of pairs.
    """
    keys = list(means)
    if len(keys) < 2:
        raise ValueError(f"means must have at least two entries, got {len(keys)}")
    missing = [k for k in keys if k not in sds]
    if missing:
        raise ValueError(f"sds lacks {missing}")
    order = sorted(keys, key=lambda k: means[k])
    return {(a, b): welch_from_summary(means[a], sds[a], means[b], sds[b], n_runs)
            for i, a in enumerate(order) for b in order[i + 1:]}


# ---------------------------------------------------------------- training runs, variant against variant
@torch.no_grad()
def answer_loss(model: nn.Module, data: FactDataset) -> float:
    """Mean cross-entropy (nats) of the answer token over every fact in ``data``.

    The prompt words are a template the model learns in a few steps; the answer (e.g. the capital) is the part
    that has to be *stored*. Leaves ``model`` in eval mode.
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    model.eval()
    device = next(model.parameters()).device
    logits = model(data.ids.to(device))                        # (N, T, vocab)
    rows = torch.arange(len(data), device=device)
    answer_logits = logits[rows, data.answer_pos.to(device)]   # (N, vocab)
    return F.cross_entropy(answer_logits, data.answer_id.to(device)).item()


@dataclass
class LrSweep:
    """A learning-rate sweep: every variant at every learning rate, on a few seeds.

    Attributes:
        variants, lrs, seeds: what was trained. run_mean: variant -> ``(n_lrs, n_seeds)`` answer loss averaged
        over each run. final: variant -> ``(n_lrs, n_seeds)`` answer loss after the last step.
    """

    variants: list[str]
    lrs: list[float]
    seeds: list[int]
    run_mean: dict[str, torch.Tensor] = field(default_factory=dict)
    final: dict[str, torch.Tensor] = field(default_factory=dict)

    def mean(self, variant: str) -> torch.Tensor:
        """``(n_lrs,)`` the run-mean loss at each learning rate, averaged over the seeds."""
        return self.run_mean[validate.one_of("variant", variant, self.variants)].mean(dim=1)

    def best_lr(self, variant: str) -> float:
        """The learning rate with the lowest mean run-mean loss."""
        return self.lrs[int(self.mean(variant).argmin())]


@dataclass
class VariantComparison:
    """Results of ``compare_variants`` (and of the stored race).

    Attributes:
        variants, seeds: what was trained (every variant with every seed).
        eval_steps: the optimisation steps at which the answer loss was measured (0 = at initialisation).
        curves: variant -> ``(n_seeds, n_evals)`` answer loss at ``eval_steps``.
        ffn_params, model_params, d_ff: variant -> parameters of one FFN block, of the whole model, hidden width.
        settings: how the runs were made (``compare_variants``' keyword arguments, ``lr`` per variant, the
            relation trained on, the machine); empty when not recorded.
        lr_sweep: the sweep that chose each variant's learning rate (``None`` when the lr was given).
        at_shared_lr: the same race with one learning rate for every variant (``None`` when not run): the
            control that shows what an untuned rate does to the verdicts.
    Use ``final`` or ``run_mean`` per variant, and ``helpers.stats.paired_difference`` to compare two variants
    seed by seed.
    """

    variants: list[str]
    seeds: list[int]
    eval_steps: list[int]
    curves: dict[str, torch.Tensor] = field(default_factory=dict)
    ffn_params: dict[str, int] = field(default_factory=dict)
    model_params: dict[str, int] = field(default_factory=dict)
    d_ff: dict[str, int] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    lr_sweep: LrSweep | None = None
    at_shared_lr: VariantComparison | None = None

    def select(self, seeds: Sequence[int]) -> "VariantComparison":
        """The same comparison restricted to ``seeds`` (in that order), e.g. the first three of ten."""
        if isinstance(seeds, (str, int)) or len(seeds) == 0:
            raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
        rows = []
        for s in seeds:
            if s not in self.seeds:
                raise ValueError(f"seed {s!r} was not run; seeds run: {self.seeds}")
            rows.append(self.seeds.index(s))
        index = torch.tensor(rows)
        return VariantComparison(list(self.variants), list(seeds), list(self.eval_steps),
                                 {v: c[index] for v, c in self.curves.items()}, dict(self.ffn_params),
                                 dict(self.model_params), dict(self.d_ff), dict(self.settings), self.lr_sweep,
                                 None if self.at_shared_lr is None else self.at_shared_lr.select(seeds))

    def lr(self, variant: str) -> float:
        """The learning rate ``variant`` trained at."""
        lr = self.settings["lr"]
        return lr[validate.one_of("variant", variant, self.variants)] if isinstance(lr, Mapping) else lr

    def final(self, variant: str) -> torch.Tensor:
        """``(n_seeds,)`` answer loss after the last step."""
        return self.curves[validate.one_of("variant", variant, self.variants)][:, -1]

    def run_mean(self, variant: str) -> torch.Tensor:
        """``(n_seeds,)`` answer loss averaged over every evaluation of the run (the area under the curve)."""
        return self.curves[validate.one_of("variant", variant, self.variants)].mean(dim=1)


def compare_variants(data: FactDataset, variants: Sequence[str], seeds: Sequence[int] = (0, 1, 2), *,
                     d_model: int = 24, n_layers: int = 1, n_heads: int = 2, bias: bool = False,
                     steps: int = 100, lr: float | Mapping[str, float] = 1e-2, eval_every: int = 5,
                     num_threads: int | None = 1, progress: bool = True,
                     w2_scale: Mapping[str, float] | None = None) -> VariantComparison:
    """Train one ``TinyGPT`` per (variant, seed) on ``data`` and record the answer loss.

    Everything but the FFN variant (and, if ``lr`` maps variants to rates, its learning rate) is held fixed:
    full-batch AdamW on the same rows every step, ``steps`` steps; the model is built right after
    ``torch.manual_seed(seed)``. Dense variants get ``d_ff = 4·d_model``, gated ones the parameter-matched
    ``int(2·4·d_model/3)``.

    Args:
        data: the training facts (also the evaluation set: see ``answer_loss``).
        variants: names from ``helpers.ffn.VARIANTS``. seeds: one run per seed and variant.
        lr: one learning rate for every variant, or a mapping variant -> learning rate.
        eval_every: measure the answer loss every this many steps (and at step 0).
        num_threads: torch threads while training (``None``: unchanged). These matrices
            are tiny, so one thread is as fast as two and gives the same numbers on any machine.
        progress: one tqdm bar over the runs.
        w2_scale: variant -> factor applied to every block's FFN ``w2`` right after initialisation (a control
            on the FFN's output size at the start; ``None``: no rescaling).
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
    if isinstance(lr, Mapping):
        missing = [v for v in variants if v not in lr]
        if missing:
            raise ValueError(f"lr gives no learning rate for {missing}")
        lrs = {v: validate.positive_float(f"lr[{v!r}]", lr[v]) for v in variants}
    else:
        lrs = dict.fromkeys(variants, validate.positive_float("lr", lr))
    result = VariantComparison(list(variants), list(seeds), [0] + list(range(eval_every, steps + 1, eval_every)))
    scales = {v: validate.positive_float(f"w2_scale[{v!r}]", x) for v, x in (w2_scale or {}).items()}
    result.settings = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, bias=bias, steps=steps,
                           lr=dict(lrs) if isinstance(lr, Mapping) else lr, eval_every=eval_every)
    if scales:
        result.settings["w2_scale"] = scales
    runs = [(v, s) for v in variants for s in seeds]
    with torch_threads(num_threads):
        for variant, seed in progress_bar(runs, desc="variant × seed runs", disable=not progress):
            torch.manual_seed(seed)
            config = GPTConfig(len(data.vocab), d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                               max_len=data.ids.shape[1], variant=variant, bias=bias)
            model = TinyGPT(config)
            if variant in scales:
                with torch.no_grad():
                    for block in model.blocks:
                        block.ffn.w2.weight.mul_(scales[variant])
            curve = [answer_loss(model, data)]

            def on_step(step: int, m: nn.Module, loss: float) -> None:
                if (step + 1) % eval_every == 0:
                    curve.append(answer_loss(m, data))
                    m.train()

            train_lm(model, data.ids, data.targets, steps=steps, lr=lrs[variant], seed=seed, progress=False,
                     on_step=on_step)
            result.curves.setdefault(variant, []).append(curve)
            ffn = model.blocks[0].ffn
            result.ffn_params[variant] = ffn.param_count()
            result.model_params[variant] = sum(p.numel() for p in model.parameters())
            result.d_ff[variant] = ffn.d_ff
    result.curves = {v: torch.tensor(c, dtype=torch.float64) for v, c in result.curves.items()}
    return result


# ---------------------------------------------------------------- notebook 04's race, stored
#: The race of notebook 04: the capital facts, a one-block model, 100 full-batch AdamW steps.
RACE_RELATION = "capital"
RACE_SETTINGS: dict = dict(d_model=24, n_layers=1, n_heads=2, bias=False, steps=100, eval_every=5)
RACE_VARIANTS: tuple[str, ...] = ("relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu")
RACE_SEEDS: tuple[int, ...] = tuple(range(30))
#: The learning rates swept for each variant (steps of about √2), and the seeds the sweep uses (not the race's).
RACE_LRS: tuple[float, ...] = (0.005, 0.007, 0.01, 0.014, 0.02, 0.028, 0.04, 0.056, 0.08)
TUNING_SEEDS: tuple[int, ...] = tuple(range(100, 105))
#: The control: every variant at one learning rate, the smallest of the sweep (the race's old setting).
RACE_SHARED_LR = 0.005
#: Where ``python -m helpers.gating --race-results`` writes the race and ``load_race`` reads it.
RACE_RESULTS_PATH = Path(__file__).parent / "data" / "gating_race.json"
#: Fresh seeds for the tuned arm alone, in blocks of 30 (one file per block, ``fresh_tuned_path``).
FRESH_TUNED_BLOCKS: tuple[tuple[int, ...], ...] = (tuple(range(30, 60)), tuple(range(60, 90)))
FRESH_TUNED_PATH = Path(__file__).parent / "data" / "gating_race_tuned_seeds_{first}-{last}.json"


def fresh_tuned_path(seeds: Sequence[int]) -> Path:
    """Where the tuned arm on ``seeds`` is stored (``python -m helpers.gating --race-results --at-stored-rates``)."""
    return Path(str(FRESH_TUNED_PATH).format(first=min(seeds), last=max(seeds)))


#: The shared-rate control on more seeds and at a second slow rate: (rate, seeds) blocks stored beside the race
#: (whose own control is lr 0.005 on seeds 0-29). Both rates are on the slow side of every variant's best rate.
SHARED_BLOCKS: tuple[tuple[float, tuple[int, ...]], ...] = (
    (0.005, tuple(range(30, 60))), (0.01, tuple(range(0, 30))), (0.01, tuple(range(30, 60))))
SHARED_PATH = Path(__file__).parent / "data" / "gating_race_shared_lr_{lr:g}_seeds_{first}-{last}.json"


def shared_path(lr: float, seeds: Sequence[int]) -> Path:
    """Where every variant at one rate ``lr`` on ``seeds`` is stored
    (``python -m helpers.gating --race-results --at-shared-lr LR --seeds ...``)."""
    return Path(str(SHARED_PATH).format(lr=lr, first=min(seeds), last=max(seeds)))


def shared_pools(race: "VariantComparison | None" = None) -> dict[float, "VariantComparison"]:
    """rate -> the shared-rate control pooled over every stored block at that rate (``SHARED_BLOCKS``, plus
    ``race.at_shared_lr``, default the stored race's): seeds 0-59 at 0.005 and at 0.01."""
    race = load_race() if race is None else race
    blocks: dict[float, list] = {race.at_shared_lr.lr(race.variants[0]): [race.at_shared_lr]}
    for lr, seeds in SHARED_BLOCKS:
        blocks.setdefault(lr, []).append(load_race(shared_path(lr, seeds)))
    return {lr: pool_races(results) for lr, results in blocks.items()}


#: The step-size control of the slow-rate lead: the dense variants alone at ``RACE_SHARED_LR`` × each multiplier,
#: on the shared arm's seeds 0-59, one file per rate (``shared_path``), made by
#: ``python -m helpers.gating --race-results --at-shared-lr 0.00525 --variants relu gelu swish --seeds 0 ... 59``
#: (and ``0.0055``).
STEP_CONTROL_MULTIPLIERS: tuple[float, ...] = (1.05, 1.1)
STEP_CONTROL_SEEDS: tuple[int, ...] = tuple(range(60))


def step_control_lr(multiplier: float) -> float:
    """The dense arm's rate in the step-size control: ``RACE_SHARED_LR × multiplier`` (0.00525, 0.0055)."""
    return round(RACE_SHARED_LR * validate.positive_float("multiplier", multiplier), 10)


def dense_at_faster_rates() -> dict[float, VariantComparison]:
    """multiplier -> the stored dense runs at ``step_control_lr(multiplier)`` on ``STEP_CONTROL_SEEDS``."""
    return {m: load_race(shared_path(step_control_lr(m), STEP_CONTROL_SEEDS)) for m in STEP_CONTROL_MULTIPLIERS}


def dense_faster_gaps(slow: VariantComparison,
                        controls: Mapping[float, VariantComparison]) -> dict[str, PairedDifference]:
    """Is the gated group's lead at a slow shared rate worth a slightly larger step for the dense group?

    ``slow``: every variant at one rate (e.g. ``shared_pools()[0.005]``); ``controls``: multiplier -> the dense
    variants on the same seeds at a higher rate. Returns ``"<GROUP>, dense alone ×<multiplier>"`` -> the
    gated (not GLU) group's mean run-mean loss at ``slow``'s rate minus the dense group's at the control's, paired by seed
    (< 0: the gated group is still lower)."""
    gated = torch.stack([slow.run_mean(v) for v in GATED_NO_SIGMOID]).mean(dim=0)
    family = {}
    for multiplier, control in controls.items():
        if control.seeds != slow.seeds:
            raise ValueError(f"each control must use slow's seeds {slow.seeds}, got {control.seeds}")
        dense = torch.stack([control.run_mean(v) for v in DENSE]).mean(dim=0)
        family[f"{GROUP}, dense alone ×{multiplier:g}"] = paired_difference(gated, dense)
    return family


#: The control's other arm: the gated (not GLU) variants at 0.00525 (×1.05) on the same seeds 0-59, made by
#: ``python -m helpers.gating --race-results --at-shared-lr 0.00525 --variants bilinear reglu geglu swiglu
#: --seeds 0 ... 59 --out helpers/data/gating_race_gated_lr_0.00525_seeds_0-59.json``.
GATED_STEP_CONTROL_PATH = Path(__file__).parent / "data" / "gating_race_gated_lr_0.00525_seeds_0-59.json"


def gated_at_faster_rate() -> VariantComparison:
    """The stored gated (not GLU) runs at ``step_control_lr(1.05)`` on ``STEP_CONTROL_SEEDS`` (``GATED_STEP_CONTROL_PATH``)."""
    return load_race(GATED_STEP_CONTROL_PATH)


#: The output-size control of the slow-rate lead: each gated (not GLU) variant at ``RACE_SHARED_LR`` with its FFN's
#: ``w2`` multiplied at initialisation so that its output RMS matches ReLU's (``init_rms_scale``), on seeds 0-29.
#: SwiGLU's runs were made by ``python -m helpers.gating --race-results --at-shared-lr 0.005 --variants swiglu
#: --match-init-rms relu --seeds 0 ... 29 --out helpers/data/gating_race_swiglu_init_rms_matched_lr_0.005_seeds_0-29.json``,
#: the other three's (review 04-round31) by ``python -m helpers.gating --race-results --at-shared-lr 0.005
#: --variants bilinear reglu geglu --match-init-rms relu --seeds 0 ... 29
#: --out helpers/data/gating_race_gated_init_rms_matched_lr_0.005_seeds_0-29.json`` (about 90 s).
INIT_RMS_SEEDS: tuple[int, ...] = tuple(range(5))
INIT_RMS_CONTROL_PATH = Path(__file__).parent / "data" / "gating_race_swiglu_init_rms_matched_lr_0.005_seeds_0-29.json"
INIT_RMS_OTHERS_PATH = Path(__file__).parent / "data" / "gating_race_gated_init_rms_matched_lr_0.005_seeds_0-29.json"


def init_rms_scale(variant: str, reference: str = "relu", seeds: Sequence[int] = INIT_RMS_SEEDS) -> float:
    """The factor on ``variant``'s ``w2`` that gives its FFN output, at initialisation, ``reference``'s RMS
    (ratio of the two mean RMS over ``seeds``, ``init_output_rms``)."""
    rms = init_output_rms((reference, variant), seeds)
    return float(rms[reference].mean() / rms[variant].mean())


def init_rms_control() -> VariantComparison:
    """The stored SwiGLU runs whose output RMS at initialisation was matched to ReLU's (``INIT_RMS_CONTROL_PATH``)."""
    return load_race(INIT_RMS_CONTROL_PATH)


def init_rms_controls() -> dict[str, VariantComparison]:
    """Every gated (not GLU) variant's stored output-matched runs: variant -> the stored comparison holding it
    (``INIT_RMS_OTHERS_PATH`` for Bilinear, ReGLU and GEGLU, ``INIT_RMS_CONTROL_PATH`` for SwiGLU), in
    ``GATED_NO_SIGMOID`` order. Each one's ``settings["w2_scale"][variant]`` is the factor it trained with."""
    others, swiglu = load_race(INIT_RMS_OTHERS_PATH), init_rms_control()
    return {v: swiglu if v == "swiglu" else others for v in GATED_NO_SIGMOID}


def output_size_family(slow: VariantComparison,
                       matched: VariantComparison | Mapping[str, VariantComparison]) -> dict[str, PairedDifference]:
    """Does the gated group's lead at a slow rate come from its smaller output at initialisation? ``slow``: every
    variant at one rate; ``matched``: variant -> runs at that rate with the variant's initial output RMS matched to
    ReLU's (``init_rms_controls()``; one comparison stands for all its variants), on some of ``slow``'s seeds.
    Returns the run-mean loss, paired by seed (``(n_seeds,)`` each): per matched variant X, ``"matched X − X"`` and
    ``"matched X − ReLU"``; when every gated (not GLU) variant is matched, also ``"matched <group> − dense"``
    (their mean minus the dense variants' mean at ``slow``)."""
    if isinstance(matched, VariantComparison):
        matched = {v: matched for v in matched.variants}
    family, outs = {}, {}
    for variant, runs in matched.items():
        if runs.lr(variant) != slow.lr(variant):
            raise ValueError(f"matched must train at slow's rate {slow.lr(variant)}, got {runs.lr(variant)}")
        same, name = slow.select(runs.seeds), VARIANT_NAMES[variant]
        outs[variant] = runs.run_mean(variant)
        family[f"matched {name} − {name}"] = paired_difference(outs[variant], same.run_mean(variant))
        family[f"matched {name} − ReLU"] = paired_difference(outs[variant], same.run_mean("relu"))
    if set(GATED_NO_SIGMOID) <= set(outs):
        seeds = matched[GATED_NO_SIGMOID[0]].seeds
        if any(matched[v].seeds != seeds for v in GATED_NO_SIGMOID):
            raise ValueError("every matched gated (not GLU) variant must use the same seeds for the group row")
        gated = torch.stack([outs[v] for v in GATED_NO_SIGMOID]).mean(dim=0)
        family[f"matched {GROUP}"] = paired_difference(gated, group_mean(slow.select(seeds), DENSE))
    return family


#: Seeds 0-4 at ``RACE_SHARED_LR`` trained three times as long (300 steps), made by ``python -m helpers.gating
#: --race-results --at-shared-lr 0.005 --variants relu swiglu --steps 300 --seeds 0 1 2 3 4 --out
#: helpers/data/gating_race_lr_0.005_300_steps_seeds_0-4.json``.
LONG_RUN_PATH = Path(__file__).parent / "data" / "gating_race_lr_0.005_300_steps_seeds_0-4.json"


def long_runs() -> VariantComparison:
    """The stored 300-step runs at the slow shared rate (``LONG_RUN_PATH``)."""
    return load_race(LONG_RUN_PATH)


def group_mean(result: VariantComparison, variants: Sequence[str]) -> torch.Tensor:
    """``(n_seeds,)`` the mean over ``variants`` of each seed's run-mean loss."""
    return torch.stack([result.run_mean(v) for v in variants]).mean(dim=0)


def both_faster_gap(slow: VariantComparison, dense_fast: VariantComparison,
                      gated_fast: VariantComparison) -> dict[str, PairedDifference]:
    """The step-size control with one change for both arms: ``"<GROUP>, both ×<rate / slow's rate>"``, the
    gated (not GLU) group minus the dense group with both at the faster rate, paired by seed (``dense_fast``: the dense variants,
    ``gated_fast``: the gated ones, at one rate, on ``slow``'s seeds)."""
    if not (dense_fast.seeds == gated_fast.seeds == slow.seeds):
        raise ValueError(f"dense_fast and gated_fast must use slow's seeds {slow.seeds}")
    rate = dense_fast.lr(DENSE[0])
    if gated_fast.lr(GATED_NO_SIGMOID[0]) != rate:
        raise ValueError(f"gated_fast must train at dense_fast's rate {rate}, got {gated_fast.lr(GATED_NO_SIGMOID[0])}")
    name = f"{GROUP}, both ×{round(rate / slow.lr(DENSE[0]), 6):g}"
    return {name: paired_difference(group_mean(gated_fast, GATED_NO_SIGMOID), group_mean(dense_fast, DENSE))}


def faster_rate_gains(slow: VariantComparison, dense_fast: VariantComparison,
               gated_fast: VariantComparison) -> dict[str, PairedDifference]:
    """What the faster rate buys each group: ``"<group>: <fast> − <slow>"`` -> its run-mean loss at the faster
    rate minus at ``slow``'s, paired by seed (< 0: the larger step helps)."""
    out = {}
    for group, variants, fast in [("gated (not GLU)", GATED_NO_SIGMOID, gated_fast), ("dense", DENSE, dense_fast)]:
        out[f"{group}: {fast.lr(variants[0]):g} − {slow.lr(variants[0]):g}"] = paired_difference(
            group_mean(fast, variants), group_mean(slow, variants))
    return out


#: A fast shared rate, one or two sweep steps below each variant's best (0.028 or 0.04): every variant but GLU at
#: 0.02 on seeds 0-39, two files of 20 seeds (review 04-r42), made by ``python -m helpers.gating --race-results
#: --at-shared-lr 0.02 --variants relu gelu swish bilinear reglu geglu swiglu --seeds 0 ... 19`` (and 20 ... 39).
FAST_SHARED_LR = 0.02
FAST_SHARED_BLOCKS: tuple[tuple[int, ...], ...] = (tuple(range(0, 20)), tuple(range(20, 40)))


def fast_shared_arm() -> VariantComparison:
    """Every variant but GLU at ``FAST_SHARED_LR`` on seeds 0-39 (the stored blocks ``FAST_SHARED_BLOCKS``)."""
    return pool_races([load_race(shared_path(FAST_SHARED_LR, seeds)) for seeds in FAST_SHARED_BLOCKS])


def race_arms(race: VariantComparison) -> dict[str, VariantComparison]:
    """The race's pooled arms: ``"lr 0.005"`` and ``"lr 0.01"`` (every variant at one rate, ``shared_pools``) and
    ``"tuned"`` (the stored race and ``FRESH_TUNED_BLOCKS``, each variant at its own rate)."""
    tuned = pool_races([race, *(load_race(fresh_tuned_path(seeds)) for seeds in FRESH_TUNED_BLOCKS)])
    return {**{f"lr {lr:g}": pool for lr, pool in shared_pools(race).items()}, "tuned": tuned}


def race_family_with_controls(arms: Mapping[str, VariantComparison]) -> dict[str, PairedDifference]:
    """Section 6.2's one Holm family: ``race_family`` on every arm of ``race_arms`` (``"<row>, <arm>"``, 8 rows per
    arm), the group row at the fast shared rate (``"<GROUP>, lr 0.02"``, ``fast_shared_arm``, seeds 0-39), then two
    step-size controls on the ``"lr 0.005"`` arm (stored runs, seeds 0-59): the dense group alone at ×1.05
    (``dense_faster_gaps``) and both groups at ×1.05 (``both_faster_gap``). Each value holds ``(n_seeds,)``
    per-seed differences in run-mean loss (nats). (The dense-alone ×1.1 control, stored too, left the family
    when the fast arm joined it: it showed again that the step size matters.)"""
    controls, slow = dense_at_faster_rates(), arms["lr 0.005"]
    family = {f"{name}, {arm}": p for arm, result in arms.items() for name, p in race_family(result).items()}
    family[f"{GROUP}, lr {FAST_SHARED_LR:g}"] = race_family(fast_shared_arm())[GROUP]
    return {**family, **dense_faster_gaps(slow, {1.05: controls[1.05]}),
            **both_faster_gap(slow, controls[1.05], gated_at_faster_rate())}


def step_size_gains(slow: VariantComparison) -> dict[str, PairedDifference]:
    """What ×1.05 on the rate buys each group at ``slow``'s rate (the ``"lr 0.005"`` arm, seeds 0-59):
    ``faster_rate_gains`` against the stored runs at 0.00525, keyed ``"gated (not GLU)"`` and ``"dense"``."""
    gains = faster_rate_gains(slow, dense_at_faster_rates()[1.05], gated_at_faster_rate())
    return {name.split(":")[0]: p for name, p in gains.items()}


def retrain_check(stored: VariantComparison, seed: int, variant: str = "relu") -> tuple[torch.Tensor, float]:
    """Retrain ``variant`` on ``seed`` at ``stored``'s rate and settings (its ``w2_scale`` too, if any):
    ``(n_evals,)`` the live curve, and its
    largest absolute gap (nats) to the stored curve."""
    same = {k: v for k, v in stored.settings.items() if k in RACE_SETTINGS or k == "w2_scale"}
    live = run_race([variant], [seed], lr=stored.lr(variant), progress=False, **same).curves[variant][0]
    return live, float((live - stored.curves[variant][stored.seeds.index(seed)]).abs().max())


def block_gaps(arms: Mapping[str, VariantComparison], size: int = 30) -> dict[str, list[PairedDifference]]:
    """arm -> ``GROUP``'s paired difference in each consecutive block of ``size`` seeds."""
    return {arm: [race_family(result.select(result.seeds[k:k + size]))[GROUP]
                  for k in range(0, len(result.seeds), size)] for arm, result in arms.items()}


_DIGITS = 5       # losses are stored to 1e-5 nats: far below what another CPU kernel changes (up to nats)


def race_data(relation: str = RACE_RELATION) -> FactDataset:
    """The facts the race trains on (and scores): one relation of the course's fact table."""
    return make_dataset(load_facts(relations=[relation]))


def init_output_rms(variants: Sequence[str] = RACE_VARIANTS, seeds: Sequence[int] = RACE_SEEDS,
                    relation: str = RACE_RELATION) -> dict[str, torch.Tensor]:
    """The FFN's output scale at initialisation in the race: variant -> ``(n_seeds,)`` root mean square of the FFN
    block's output over every token of ``race_data(relation)``, for the model ``run_race`` builds with that seed
    (before any step). PyTorch's default ``nn.Linear`` initialisation gives a gated product of two projections a
    smaller output than a dense activation of one at the matched width."""
    data = race_data(relation)
    rms: dict[str, list[float]] = {}
    for variant in variants:
        validate.one_of("variants entry", variant, VARIANTS)
        for seed in seeds:
            torch.manual_seed(seed)
            config = GPTConfig(len(data.vocab), max_len=data.ids.shape[1], variant=variant,
                               **{k: RACE_SETTINGS[k] for k in ("d_model", "n_layers", "n_heads", "bias")})
            model, caught = TinyGPT(config).eval(), []
            handle = model.blocks[0].ffn.register_forward_hook(lambda m, i, out: caught.append(out))
            with torch.no_grad():
                model(data.ids)
            handle.remove()
            rms.setdefault(variant, []).append(caught[0].pow(2).mean().sqrt().item())
    return {v: torch.tensor(r, dtype=torch.float64) for v, r in rms.items()}


def run_race(variants: Sequence[str] = RACE_VARIANTS, seeds: Sequence[int] = RACE_SEEDS, *,
             lr: float | Mapping[str, float], relation: str = RACE_RELATION, progress: bool = True,
             **overrides) -> VariantComparison:
    """``compare_variants`` on ``race_data(relation)`` with ``RACE_SETTINGS`` (``overrides`` replace some) at ``lr``
    (one rate, or variant -> rate: the stored race's are ``load_race().lr(variant)``)."""
    unknown = set(overrides) - set(RACE_SETTINGS) - {"w2_scale"}
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(RACE_SETTINGS)}")
    result = compare_variants(race_data(relation), variants, seeds, lr=lr, progress=progress,
                              **{**RACE_SETTINGS, **overrides})
    result.settings["relation"] = relation
    return result


def sweep_lr(variants: Sequence[str] = RACE_VARIANTS, lrs: Sequence[float] = RACE_LRS,
             seeds: Sequence[int] = TUNING_SEEDS, *, progress: bool = True, **overrides) -> LrSweep:
    """Run the race's settings at every learning rate of ``lrs`` on ``seeds`` (the tuning seeds)."""
    if isinstance(lrs, (str, int, float)) or len(lrs) == 0:
        raise ValueError(f"lrs must be a non-empty list of learning rates, got {lrs!r}")
    sweep = LrSweep(list(variants), [validate.positive_float("lrs entry", x) for x in lrs], list(seeds))
    runs = [run_race(variants, seeds, lr=x, progress=False, **overrides) for x in progress_bar(
        sweep.lrs, desc="learning rates", disable=not progress)]
    for v in variants:
        sweep.run_mean[v] = torch.stack([r.run_mean(v) for r in runs])
        sweep.final[v] = torch.stack([r.final(v) for r in runs])
    return sweep


def make_race(variants: Sequence[str] = RACE_VARIANTS, seeds: Sequence[int] = RACE_SEEDS, *,
              lrs: Sequence[float] = RACE_LRS, tuning_seeds: Sequence[int] = TUNING_SEEDS,
              shared_lr: float | None = RACE_SHARED_LR, progress: bool = True, **overrides) -> VariantComparison:
    """The race: ``sweep_lr`` on ``tuning_seeds``, then every variant on ``seeds`` at its best learning rate,
    and (unless ``shared_lr`` is ``None``) every variant on the same seeds at ``shared_lr`` (``at_shared_lr``)."""
    overlap = sorted(set(seeds) & set(tuning_seeds))
    if overlap:
        raise ValueError(f"the tuning seeds must not be race seeds; both contain {overlap}")
    sweep = sweep_lr(variants, lrs, tuning_seeds, progress=progress, **overrides)
    race = run_race(variants, seeds, lr={v: sweep.best_lr(v) for v in variants}, progress=progress, **overrides)
    race.lr_sweep = sweep
    if shared_lr is not None:
        race.at_shared_lr = run_race(variants, seeds, lr=shared_lr, progress=progress, **overrides)
    return race


# ---------------------------------------------------------------- reading the race
#: The race's two groups: the dense FFNs, and the gated ones without a sigmoid (Shazeer's better group).
DENSE: tuple[str, ...] = ("relu", "gelu", "swish")
GATED_NO_SIGMOID: tuple[str, ...] = ("bilinear", "reglu", "geglu", "swiglu")
GROUP = "gated (not GLU) − dense"


def race_family(result: VariantComparison, suffix: str = "") -> dict[str, PairedDifference]:
    """The race's comparisons on the loss averaged over each run, paired by seed: every other variant minus ReLU,
    and the mean of the gated variants without a sigmoid minus the mean of the dense ones (``GROUP``).
    ``suffix`` is appended to every name (to tell two races apart in one family)."""
    metric = result.run_mean
    family = {f"{VARIANT_NAMES[v]} − ReLU{suffix}": paired_difference(metric(v), metric("relu"))
              for v in result.variants if v != "relu"}
    if set(DENSE + GATED_NO_SIGMOID) <= set(result.variants):
        family[GROUP + suffix] = paired_difference(torch.stack([metric(v) for v in GATED_NO_SIGMOID]).mean(dim=0),
                                                   torch.stack([metric(v) for v in DENSE]).mean(dim=0))
    return family


def final_loss_gap(result: VariantComparison) -> PairedDifference:
    """``GROUP`` scored by the answer loss at the last evaluated step instead of the run mean, paired by seed: the
    same runs read with another score (the run mean rewards an early take-off, the final loss only the end)."""
    final = {v: result.curves[v][:, -1].double() for v in DENSE + GATED_NO_SIGMOID}
    return paired_difference(torch.stack([final[v] for v in GATED_NO_SIGMOID]).mean(dim=0),
                             torch.stack([final[v] for v in DENSE]).mean(dim=0))


def rounding_t_range(a: str, b: str, n_runs: int = 4, half_unit: float = 5e-4) -> tuple[float, float]:
    """Smallest and largest Welch |t| of Table 1's pair ``(a, b)`` when each printed mean and sd may be off by up to
    ``half_unit`` (the paper prints 3 decimals): every corner of that box, 16 comparisons."""
    m, s, r = SHAZEER_2020_65K, SHAZEER_2020_65K_SD, (-half_unit, half_unit)
    ts = [abs(welch_from_summary(m[a] + i, s[a] + j, m[b] + k, s[b] + l, n_runs).t)
          for i in r for j in r for k in r for l in r]
    return min(ts), max(ts)


def pool_races(results: Sequence[VariantComparison]) -> VariantComparison:
    """One comparison holding the seeds of every result in ``results`` (in that order): blocks of seeds trained
    with the same variants, learning rates and evaluation steps (e.g. the stored race and the fresh tuned blocks
    of ``FRESH_TUNED_BLOCKS``). No sweep or control is carried over."""
    if isinstance(results, VariantComparison) or len(results) == 0:
        raise ValueError("results must be a non-empty list of VariantComparison")
    first = results[0]
    for r in results[1:]:
        for what in ("variants", "eval_steps"):
            if getattr(r, what) != getattr(first, what):
                raise ValueError(f"every result must have the same {what}: {getattr(r, what)} != "
                                 f"{getattr(first, what)}")
        if any(r.lr(v) != first.lr(v) for v in first.variants):
            raise ValueError("every result must train each variant at the same learning rate")
    seeds = [s for r in results for s in r.seeds]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"the results share seeds: {sorted({s for s in seeds if seeds.count(s) > 1})}")
    settings = {k: v for k, v in first.settings.items() if k != "environment"}
    return VariantComparison(list(first.variants), seeds, list(first.eval_steps),
                             {v: torch.cat([r.curves[v] for r in results]) for v in first.variants},
                             dict(first.ffn_params), dict(first.model_params), dict(first.d_ff), settings)


def failed_runs(sweep: LrSweep, lr: float, threshold: float = 4.0) -> dict[str, int]:
    """Per variant, how many tuning runs at ``lr`` average above ``threshold`` nats over the run (near the
    plateau of ln 152 ≈ 5.0: a run that stalls, bounces back or takes off late)."""
    if lr not in sweep.lrs:
        raise ValueError(f"lr must be one of the sweep's rates {sweep.lrs}, got {lr!r}")
    column = sweep.lrs.index(lr)
    return {v: int((sweep.run_mean[v][column] > threshold).sum()) for v in sweep.variants}


def sweep_table(sweep: LrSweep) -> str:
    """The sweep as printable lines: per variant the run-mean loss at each rate (mean over the tuning seeds),
    its best rate marked with ``*``."""
    head = f"{'lr':<9}" + "".join(f"{lr:>7g}" for lr in sweep.lrs)
    lines = [head]
    for v in sweep.variants:
        best = sweep.lrs.index(sweep.best_lr(v))
        lines.append(f"{VARIANT_NAMES[v]:<9}" + "".join(f"{x:>6.2f}{'*' if i == best else ' '}"
                                                       for i, x in enumerate(sweep.mean(v).tolist())))
    return "\n".join(lines)


def sweep_group_gaps(sweep: LrSweep) -> dict[float, PairedDifference]:
    """rate -> ``GROUP`` on the sweep's tuning seeds at that rate: the mean run-mean loss of the gated variants
    without a sigmoid minus that of the dense ones, paired by seed (how the group's gap moves with the step size)."""
    missing = set(DENSE + GATED_NO_SIGMOID) - set(sweep.variants)
    if missing:
        raise ValueError(f"sweep must hold every dense and gated (not GLU) variant; missing {sorted(missing)}")
    return {lr: paired_difference(torch.stack([sweep.run_mean[v][i] for v in GATED_NO_SIGMOID]).mean(dim=0),
                                  torch.stack([sweep.run_mean[v][i] for v in DENSE]).mean(dim=0))
            for i, lr in enumerate(sweep.lrs)}


def sweep_gap_lines(sweep: LrSweep) -> str:
    """``sweep_group_gaps`` as two printable rows aligned with ``sweep_table``: the mean gap (nats) at each rate,
    and in how many tuning seeds the gated group is lower."""
    gaps = sweep_group_gaps(sweep)
    return "\n".join([f"{'gap':<9}" + "".join(f"{g.mean:>+6.2f} " for g in gaps.values()),
                      f"{'lower in':<9}" + "".join(f"{f'{g.lower}/{g.n}':>6} " for g in gaps.values())])


def shazeer_table_figure(means: Mapping[str, float] = SHAZEER_2020_65K,
                         sds: Mapping[str, float] = SHAZEER_2020_65K_SD,
                         long_runs: Mapping[str, float] = SHAZEER_2020_524K):
    """Shazeer (2020), Table 1 as a picture: per variant (lowest 65k mean at the top) the 65,536-step mean ± sd of
    four runs (left) and the single 524,288-step run (right, its own x range); gated variants without a sigmoid in
    one colour, dense FFNs and GLU in another. The bars are spreads, not tests: bars that part can still be a pair
    Holm does not resolve. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    order = sorted(means, key=means.get)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for i, v in enumerate(order):
        color = "#332288" if v in GATED_NO_SIGMOID else "#CC6677"
        y = len(order) - 1 - i
        left.errorbar(means[v], y, xerr=sds[v], fmt="o", color=color, ms=5, capsize=3)
        right.plot(long_runs[v], y, "D", color=color, ms=5)
    left.set_yticks(range(len(order)), [VARIANT_NAMES[v] for v in order[::-1]])
    left.set_title("65,536 steps: mean ± (sd?) of 4 runs (not a test)")
    right.set_title("524,288 steps: 1 run")
    for ax in (left, right):
        ax.set_xlabel("held-out log-perplexity (lower is better)")
    left.plot([], [], "o", color="#332288", label="gated without σ")
    left.plot([], [], "o", color="#CC6677", label="dense, and GLU")
    left.legend(fontsize=9, loc="upper right")
    fig.suptitle("Shazeer (2020), Table 1 (verdicts: the |t| table)")
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class StalledSeedSplit:
    """The tuned race split by runs not yet taken off (answer loss still above the threshold at the last step).
    ``stuck``: variant -> such runs; ``seeds``: seeds holding one among the seven variants of ``GROUP`` (the dense
    and gated (not GLU) ones; GLU's runs are left out); ``seeds_any``: seeds holding one among every variant of
    ``result``; ``all_gap``/``rest_gap``: ``GROUP`` on the run mean over all seeds / without the ``seeds`` ones;
    ``all_final``/``rest_final``: the same on the loss at the last step; ``sd_stuck``/``sd_rest``: sd of the
    per-seed run-mean gaps on those seeds / the others (nats; NaN where fewer than 2 seeds)."""
    stuck: dict[str, int]
    seeds: int
    seeds_any: int
    all_gap: PairedDifference
    rest_gap: PairedDifference
    all_final: PairedDifference
    rest_final: PairedDifference
    sd_stuck: float
    sd_rest: float


def split_stalled_seeds(result: VariantComparison, threshold: float = 4.0) -> StalledSeedSplit:
    """Count the runs of ``result`` still above ``threshold`` nats at the last step (near the plateau ln 152 ≈ 5.0:
    they had not taken off) and read ``GROUP`` with and without the seeds that hold one: a post-hoc look at where
    the spread comes from, not a verdict."""
    stuck = torch.stack([result.final(v) > threshold for v in DENSE + GATED_NO_SIGMOID]).any(dim=0)
    stuck_any = torch.stack([result.final(v) > threshold for v in result.variants]).any(dim=0)
    rest = result.select([s for s, m in zip(result.seeds, stuck.tolist()) if not m])
    gaps = race_family(result)[GROUP].diffs
    return StalledSeedSplit({v: int((result.final(v) > threshold).sum()) for v in result.variants}, int(stuck.sum()),
                            int(stuck_any.sum()), race_family(result)[GROUP], race_family(rest)[GROUP],
                            final_loss_gap(result), final_loss_gap(rest), _sd(gaps[stuck]), _sd(gaps[~stuck]))


def _sd(values: torch.Tensor) -> float:
    """Sample sd (n − 1) of ``(n,)`` values; NaN when n < 2 (where ``Tensor.std`` warns about degrees of freedom)."""
    return float(values.std()) if values.numel() >= 2 else float("nan")


def stalled(result: VariantComparison, threshold: float = 1.0) -> dict[str, int]:
    """Per variant, how many runs end above ``threshold`` nats (a run that has not memorised the facts by its
    last step: still descending at a small rate, or stuck after a spike at a large one)."""
    return {v: int((result.final(v) > threshold).sum()) for v in result.variants}


def _rounded(rows: torch.Tensor) -> list:
    return [[round(float(x), _DIGITS) for x in row] for row in rows.tolist()]


def save_race(result: VariantComparison, path: str | Path,
              made_by: str = "python -m helpers.gating --race-results") -> Path:
    """Write ``result`` (and its sweep) as JSON (losses rounded to 1e-5 nats), with the machine it ran on and the
    command that made it (``made_by``)."""
    if not isinstance(result, VariantComparison):
        raise TypeError(f"result must be a VariantComparison, got {type(result).__name__}")
    path = Path(path)
    sweep = result.lr_sweep
    record = {
        "made_by": made_by,
        "settings": {k: v for k, v in result.settings.items() if k != "environment"},
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": 1},
        "variants": result.variants, "seeds": result.seeds, "eval_steps": result.eval_steps,
        "d_ff": result.d_ff, "ffn_params": result.ffn_params, "model_params": result.model_params,
        "answer_loss": {v: _rounded(result.curves[v]) for v in result.variants},
        "at_shared_lr": None if result.at_shared_lr is None else {
            "lr": result.at_shared_lr.settings["lr"],
            "answer_loss": {v: _rounded(result.at_shared_lr.curves[v]) for v in result.variants}},
        "lr_sweep": None if sweep is None else {
            "lrs": sweep.lrs, "seeds": sweep.seeds,
            "run_mean": {v: _rounded(sweep.run_mean[v]) for v in sweep.variants},
            "final": {v: _rounded(sweep.final[v]) for v in sweep.variants}},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_race(path: str | Path | None = None) -> VariantComparison:
    """Read a race written by ``save_race`` (default: the stored race of notebook 04, ``RACE_RESULTS_PATH``)."""
    path = RACE_RESULTS_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no race results at {path}; make them with python -m helpers.gating --race-results")
    record = json.loads(path.read_text(encoding="utf-8"))
    curves = {v: torch.tensor(record["answer_loss"][v], dtype=torch.float64) for v in record["variants"]}
    sweep = record.get("lr_sweep")
    if sweep is not None:
        sweep = LrSweep(list(sweep["run_mean"]), sweep["lrs"], sweep["seeds"],
                        {v: torch.tensor(r, dtype=torch.float64) for v, r in sweep["run_mean"].items()},
                        {v: torch.tensor(r, dtype=torch.float64) for v, r in sweep["final"].items()})
    settings = {**record["settings"], "environment": record["environment"]}
    shared = record.get("at_shared_lr")
    if shared is not None:
        shared = VariantComparison(record["variants"], record["seeds"], record["eval_steps"],
                                   {v: torch.tensor(c, dtype=torch.float64) for v, c in shared["answer_loss"].items()},
                                   record["ffn_params"], record["model_params"], record["d_ff"],
                                   {**settings, "lr": shared["lr"]})
    return VariantComparison(record["variants"], record["seeds"], record["eval_steps"], curves,
                             record["ffn_params"], record["model_params"], record["d_ff"], settings, sweep, shared)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.gating --race-results``: sweep each variant's learning rate, run the race, store both."""
    parser = argparse.ArgumentParser(prog="python -m helpers.gating", description=main.__doc__)
    parser.add_argument("--race-results", action="store_true", required=True,
                        help="sweep, then train every (variant, seed) of the race, and write the answer-loss curves")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(RACE_SEEDS), help="default: 0 to 29")
    parser.add_argument("--tuning-seeds", type=int, nargs="+", default=list(TUNING_SEEDS),
                        help="seeds of the learning-rate sweep (default: 100 to 104)")
    parser.add_argument("--shared-lr", type=float, default=RACE_SHARED_LR,
                        help=f"the control: every variant at this rate (default {RACE_SHARED_LR})")
    parser.add_argument("--lrs", type=float, nargs="+", default=list(RACE_LRS),
                        help=f"learning rates swept (default: {' '.join(map(str, RACE_LRS))})")
    parser.add_argument("--variants", nargs="+", default=list(RACE_VARIANTS), choices=sorted(VARIANTS),
                        help="default: the 8 variants of the notebook")
    parser.add_argument("--steps", type=int, default=RACE_SETTINGS["steps"],
                        help=f"training steps per run (default {RACE_SETTINGS['steps']})")
    parser.add_argument("--at-stored-rates", action="store_true",
                        help="no sweep, no control: train --seeds at the tuned rates of the stored race "
                             f"({RACE_RESULTS_PATH.name}); fresh seeds for the tuned arm, e.g. --seeds 30 ... 89 "
                             f"--out {FRESH_TUNED_PATH}")
    parser.add_argument("--at-shared-lr", type=float, default=None, metavar="LR",
                        help="no sweep: train --seeds with every variant at LR (more seeds or another rate for the "
                             f"control), written to {SHARED_PATH.name}")
    parser.add_argument("--match-init-rms", default=None, metavar="REFERENCE", choices=sorted(VARIANTS),
                        help="with --at-shared-lr: multiply each other variant's w2 at initialisation so its FFN "
                             "output RMS matches REFERENCE's (init_rms_scale, seeds 0-4)")
    parser.add_argument("--out", default=None, help=f"default: {RACE_RESULTS_PATH}, or with --at-stored-rates "
                                                    f"{FRESH_TUNED_PATH}")
    args = parser.parse_args(argv)
    if args.match_init_rms is not None and args.at_shared_lr is None:
        raise SystemExit("--match-init-rms needs --at-shared-lr")
    overrides: dict = {"steps": args.steps}
    if args.steps < RACE_SETTINGS["eval_every"]:
        overrides["eval_every"] = args.steps
    if args.at_shared_lr is not None:
        if args.at_stored_rates:
            raise SystemExit("--at-shared-lr and --at-stored-rates exclude each other")
        lr = validate.positive_float("--at-shared-lr", args.at_shared_lr)
        made_by = f"python -m helpers.gating --race-results --at-shared-lr {lr:g}"
        if args.match_init_rms is not None:
            overrides["w2_scale"] = {v: init_rms_scale(v, args.match_init_rms) for v in args.variants
                                     if v != args.match_init_rms}
            made_by += f" --match-init-rms {args.match_init_rms}"
        result = run_race(args.variants, args.seeds, lr=lr, **overrides)
        out = save_race(result, args.out or shared_path(lr, args.seeds), made_by=made_by)
        print(f"wrote {len(args.variants)} variants × {len(args.seeds)} seeds at lr {lr:g} to {out}")
        return 0
    if args.at_stored_rates:
        stored = load_race()
        result = run_race(args.variants, args.seeds, lr={v: stored.lr(v) for v in args.variants}, **overrides)
        out = save_race(result, args.out or fresh_tuned_path(args.seeds),
                        made_by="python -m helpers.gating --race-results --at-stored-rates")
        print(f"wrote {len(args.variants)} variants × {len(args.seeds)} seeds at the stored tuned rates to {out}")
        return 0
    args.out = args.out or str(RACE_RESULTS_PATH)
    result = make_race(args.variants, args.seeds, lrs=args.lrs, tuning_seeds=args.tuning_seeds,
                       shared_lr=args.shared_lr, **overrides)
    print(f"wrote {len(args.variants)} variants × {len(args.seeds)} seeds (lr swept over {len(args.lrs)} rates on "
          f"{len(args.tuning_seeds)} seeds) to {save_race(result, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
