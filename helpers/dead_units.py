r"""Dead and silent hidden units: when a unit of an FFN stops learning for good, and how to tell.

A hidden unit ``i`` of ``FFN(x) = W2 φ(W1 x + b1) + b2`` has the pre-activation ``h_i = w_i · x + b_i`` (``w_i`` is
row ``i`` of ``W1``). Its weights receive the gradient ``Σ_n δ_ni φ'(h_ni) x_n``: if ``φ'(h_ni) = 0`` on every
example ``n``, they receive exactly nothing. For ReLU that happens as soon as ``h_ni ≤ 0`` on every example: the
unit is **dead** (on that data). A unit that is ``≤ 0`` on *some* examples only is **silent** there and alive:
it learns from the others. GELU and SiLU have no flat side, so a unit is stuck only far out in their tails.

Notebook 01's experiments run on one small problem (``experiment_data``: 256 examples, ``d = 16``, a fixed
non-linear target) with the course's ``FFN(16, 256)`` trained by full-batch SGD (``sgd``):

* ``stuck_fraction``: the share of units whose slope ``|φ'(h)|`` is below ``1e-3`` on every example (for ReLU
  exactly the dead ones); ``dead_units`` and ``negative_everywhere`` count ``h ≤ 0`` / ``h < 0`` everywhere;
* ``last_layer_lr_limit``: the learning rate above which SGD on the last layer alone diverges at the current
  weights, ``2 / λ_max`` of that layer's curvature (the whole network's limit is no higher);
* ``shove_below_zero_``: lowers each unit's bias until it is ``≤ -margin`` on every example (the "same shove"
  control);
* ``firing_rates``: on what share of the examples each unit is on (``h > 0``): ``0`` for a dead unit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers import validate
from helpers.activations import get_activation, slope
from helpers.ffn import FFN

__all__ = ["experiment_data", "sgd", "pre_activations", "dead_units", "stuck_fraction", "negative_everywhere",
           "firing_rates", "last_layer_lr_limit", "shove_below_zero_"]


def experiment_data(seed: int = 1, n: int = 256, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Notebook 01's regression data: ``X (n, d)`` standard normal, ``Y = sin(2 X T) (n, d)`` for a fixed random
    ``T (d, d)`` with entries of size 1/4, both float32 and drawn from a generator seeded with ``seed``."""
    validate.non_negative_int("seed", seed)
    validate.positive_int("n", n)
    validate.positive_int("d", d)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    teacher = torch.randn(d, d, generator=gen) / 4
    return x, torch.sin(2 * x @ teacher)


def _check_data(model: FFN, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    if not isinstance(model, FFN):
        raise TypeError(f"model must be a helpers.ffn.FFN, got {type(model).__name__}")
    validate.float_tensor("x", x, last_dim=model.d_model)
    if x.dim() != 2:
        raise ValueError(f"x must be (N, d_model), got shape {tuple(x.shape)}")
    if y is not None:
        validate.float_tensor("y", y, last_dim=model.d_model)
        if y.shape != x.shape:
            raise ValueError(f"y must have the shape of x, {tuple(x.shape)}, got {tuple(y.shape)}")


def sgd(model: FFN, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int) -> list[float]:
    """Train ``model`` in place: ``steps`` full-batch SGD steps at ``lr`` (``torch.optim.SGD``, no momentum) on
    ``F.mse_loss(model(x), y)``; ``x, y`` are ``(N, d_model)``. Returns the loss before each step."""
    _check_data(model, x, y)
    validate.positive_float("lr", lr)
    validate.non_negative_int("steps", steps)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def pre_activations(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``h = W1 x + b1`` for every example: ``(N, d_model) -> (N, d_ff)``, without autograd."""
    _check_data(model, x)
    with torch.no_grad():
        return model.w1(x)


def dead_units(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(d_ff,)`` bool: the units whose pre-activation is ``≤ 0`` on every example of ``x`` (dead under ReLU)."""
    return (pre_activations(model, x) <= 0).all(dim=0)


def stuck_fraction(model: FFN, activation: str, x: torch.Tensor, tol: float = 1e-3) -> float:
    """Share of hidden units whose slope ``|φ'(h)|`` is below ``tol`` on every example of ``x`` (``(N, d_model)``).

    ``activation`` names ``φ`` (``helpers.activations``). For ReLU (slope 0 at ``h = 0`` in PyTorch) a unit is
    stuck exactly when it is dead; GELU and SiLU units are stuck only deep in their tails (or in the narrow band
    where the slope crosses zero)."""
    validate.positive_float("tol", tol)
    h = pre_activations(model, x)
    return (slope(get_activation(activation), h).abs() < tol).all(dim=0).double().mean().item()


def negative_everywhere(model: FFN, x: torch.Tensor) -> float:
    """Share of hidden units whose pre-activation is ``< 0`` on every example of ``x``."""
    return (pre_activations(model, x) < 0).all(dim=0).double().mean().item()


def firing_rates(model: FFN, x: torch.Tensor) -> torch.Tensor:
    """``(d_ff,)`` float64: for each unit, the share of the examples of ``x`` on which ``h > 0``."""
    return (pre_activations(model, x) > 0).double().mean(dim=0)


def last_layer_lr_limit(model: FFN, x: torch.Tensor) -> float:
    r"""The largest stable SGD learning rate for the last layer alone at the current weights.

    With the hidden outputs ``M = φ(W1 x + b1)`` fixed, ``F.mse_loss(M W2ᵀ + b2, y)`` (mean over ``N`` examples and
    ``d = d_model`` outputs) is quadratic in ``(W2, b2)`` with curvature ``(2 / (N d)) M₁ᵀM₁`` in every output row,
    ``M₁ = [M, 1]`` (the bias acts like a unit that is always 1). Gradient descent on a quadratic converges only
    for ``lr < 2 / λ_max``; the full network's curvature has a largest eigenvalue at least as large (a principal
    block of a symmetric matrix cannot have a larger one), so its limit is no higher. Computed in float64.
    """
    _check_data(model, x)
    with torch.no_grad():
        m = model.hidden(x).double()
    m1 = torch.cat([m, torch.ones(len(m), 1, dtype=torch.float64)], dim=1)
    lam = 2.0 / (x.shape[0] * model.d_model) * torch.linalg.eigvalsh(m1.T @ m1).max()
    return (2.0 / lam).item()


def shove_below_zero_(model: FFN, x: torch.Tensor, margin: float = 0.5) -> None:
    """Lower every hidden unit's bias, in place, until its pre-activation is at most ``-margin`` on every example
    of ``x``: after it every unit is negative everywhere (the weights ``W1`` are untouched)."""
    validate.positive_float("margin", margin)
    if model.w1.bias is None:
        raise ValueError("model must have biases (FFN(..., bias=True)) to be shoved below zero")
    h = pre_activations(model, x)
    with torch.no_grad():
        model.w1.bias -= h.max(dim=0).values + margin
