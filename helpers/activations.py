"""Activation functions used in transformer FFNs, looked up by name.

Every function maps a tensor of any shape ``(...)`` to a tensor of the same
shape, element by element.

==============  ===============================================  ======================================
name            formula                                          used in
==============  ===============================================  ======================================
``relu``        max(0, x)                                        original Transformer
``relu2``       max(0, x)^2  (squared ReLU)                      Primer (So et al. 2021)
``gelu``        x * Phi(x), Phi the standard normal CDF          BERT in Hugging Face (``"gelu"``)
``gelu_tanh``   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  GPT-2 (Hugging Face ``"gelu_new"``)
``silu``        x * sigmoid(x)  (Swish with beta = 1)            SwiGLU's gate
``sigmoid``     1 / (1 + exp(-x))                                GLU's gate
``identity``    x                                                Bilinear "gate"
==============  ===============================================  ======================================

``swish(x, beta)`` is the one-parameter family x * sigmoid(beta x): beta = 0
gives x / 2, beta = 1 gives SiLU, and beta -> infinity approaches ReLU.

``slope(fn, x)`` is an activation's derivative at every element of ``x``, by autograd.

``format_step(values, dtype)`` is the spacing of a low-precision float format at given values,
computed from the format's definition in float64 (no rounding kernel, so the same on every CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers import validate

Activation = Callable[[torch.Tensor], torch.Tensor]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_TANH_COEFF = 0.044715


def relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU: ``max(0, x)``. Shape ``(...)`` -> ``(...)``."""
    return torch.relu(x)


def relu2(x: torch.Tensor) -> torch.Tensor:
    """Squared ReLU: ``max(0, x)²`` (Primer, So et al. 2021); exactly 0 wherever ReLU is. Shape ``(...)`` -> ``(...)``."""
    return torch.relu(x).square()


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU: ``x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))``. Shape ``(...)`` -> ``(...)``."""
    return F.gelu(x, approximate="none")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016). Shape ``(...)`` -> ``(...)``."""
    return F.gelu(x, approximate="tanh")


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """Logistic sigmoid ``1 / (1 + exp(-x))``, values in (0, 1). Shape ``(...)`` -> ``(...)``."""
    return torch.sigmoid(x)


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU, i.e. Swish with beta = 1: ``x * sigmoid(x)``. Shape ``(...)`` -> ``(...)``."""
    return F.silu(x)


def identity(x: torch.Tensor) -> torch.Tensor:
    """No non-linearity (the Bilinear variant's "gate"). Shape ``(...)`` -> ``(...)``."""
    return x


def swish(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Swish ``x * sigmoid(beta * x)`` (Ramachandran et al. 2017). Shape ``(...)`` -> ``(...)``.

    beta = 0 gives ``x / 2``; beta = 1 gives SiLU; large beta approaches ReLU.
    """
    validate.non_negative_float("beta", beta)
    return x * torch.sigmoid(beta * x)


def slope(fn: Activation, x: torch.Tensor) -> torch.Tensor:
    """``φ'(x)`` by autograd, element by element: ``fn`` an activation, ``x`` a float tensor ``(...)`` -> ``(...)``.

    ``x`` is not changed and needs no ``requires_grad``; works with autograd or inference mode switched
    on around the call.
    """
    validate.float_tensor("x", x, min_dims=0)
    with torch.inference_mode(False), torch.enable_grad():     # whatever the caller's autograd state
        x = x.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(fn(x).sum(), x)
    return grad


#: bits of precision (the implicit leading 1 included) and smallest normal exponent of each float format
FORMATS: dict[torch.dtype, tuple[int, int]] = {
    torch.bfloat16: (8, -126),
    torch.float16: (11, -14),
    torch.float32: (24, -126),
}


def format_step(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One step of the float format ``dtype`` at each value: the distance from ``|value|`` to the next larger number.

    ``values``: a float64 tensor of any shape; returns float64 of the same shape. A number
    ``2^e·(1.f)`` with ``p`` bits of precision has the step ``2^(e - p + 1)``; below the smallest
    normal number ``2^e_min`` the step stays ``2^(e_min - p + 1)`` (subnormal spacing). Computed
    with ``torch.frexp`` and powers of two only, so it does not depend on how a CPU rounds or flushes
    small numbers. For a value that is itself a number of the format this equals
    ``torch.nextafter(v, inf) - v`` computed in that format.
    """
    if dtype not in FORMATS:
        raise ValueError(f"dtype must be one of {list(FORMATS)}, got {dtype!r}")
    bits, e_min = FORMATS[dtype]
    values = torch.as_tensor(values, dtype=torch.float64)
    _, exponent = torch.frexp(values.abs())                  # |v| = m * 2**exponent, 0.5 <= m < 1
    e = torch.clamp(exponent.to(torch.float64) - 1, min=e_min)
    return torch.exp2(e - (bits - 1))


ACTIVATIONS: dict[str, Activation] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
    "sigmoid": sigmoid,
    "identity": identity,
    "relu2": relu2,
}


def get_activation(name: str) -> Activation:
    """Return the activation function called ``name`` (one of ``ACTIVATIONS``)."""
    validate.one_of("activation", name, ACTIVATIONS)
    return ACTIVATIONS[name]
