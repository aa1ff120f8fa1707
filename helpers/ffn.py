r"""The position-wise feed-forward network: expand, activate, contract.

One class covers the dense FFN of the original Transformer/GPT-2 and the gated
family of Shazeer (2020). With ``x`` a token vector of width ``d_model``:

dense:   FFN(x) = W2 · φ(W1 x + b1) + b2
gated:   FFN(x) = W2 · (φ(W1 x + b1) ⊙ (W3 x + b3)) + b2

``W1`` and ``W3`` are ``(d_ff, d_model)``, ``W2`` is ``(d_model, d_ff)`` (PyTorch's
``nn.Linear`` layout). Read as a key-value memory (Geva et al. 2021), row i of
``W1`` is key i, the hidden value ``m_i`` is its memory coefficient, and column
i of ``W2`` is value i: ``FFN(x) = Σ_i m_i · W2[:, i] + b2``.

Named variants (``FFN.from_variant``):

==========  ===========  =====  =======================================
variant     φ            gated  reference
==========  ===========  =====  =======================================
relu        ReLU         no     Vaswani et al. 2017
gelu        GELU         no     BERT, GPT-2
gelu_tanh   GELU (tanh)  no     GPT-2's code
swish       SiLU         no     Ramachandran et al. 2017
glu         sigmoid      yes    Dauphin et al. 2017
bilinear    identity     yes    Shazeer 2020
reglu       ReLU         yes    Shazeer 2020
geglu       GELU         yes    Shazeer 2020
swiglu      SiLU         yes    Shazeer 2020; PaLM, LLaMA
==========  ===========  =====  =======================================
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers import validate
from helpers.activations import ACTIVATIONS, get_activation

#: variant name -> (activation name, gated?)
VARIANTS: dict[str, tuple[str, bool]] = {
    "relu": ("relu", False),
    "gelu": ("gelu", False),
    "gelu_tanh": ("gelu_tanh", False),
    "swish": ("silu", False),
    "glu": ("sigmoid", True),
    "bilinear": ("identity", True),
    "reglu": ("relu", True),
    "geglu": ("gelu", True),
    "swiglu": ("silu", True),
}

#: variant name -> how the text writes it (Shazeer's names: ReGLU, GEGLU, SwiGLU, ...).
VARIANT_NAMES: dict[str, str] = {
    "relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh)", "swish": "Swish", "glu": "GLU",
    "bilinear": "Bilinear", "reglu": "ReGLU", "geglu": "GEGLU", "swiglu": "SwiGLU",
}


def matched_gated_width(d_model: int, expansion: int = 4, multiple_of: int | None = None) -> int:
    """Hidden width of a gated FFN with the parameters of a dense ``expansion·d_model`` FFN.

    A gated FFN has three weight matrices instead of two, so its width is
    ``2/3`` of the dense one: ``int(2 * expansion * d_model / 3)``, then
    rounded *up* to a multiple of ``multiple_of`` when given (LLaMA: d_model
    4096, multiple 256 -> 11008).
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("expansion", expansion)
    width = int(2 * expansion * d_model / 3)
    if multiple_of is not None:
        validate.positive_int("multiple_of", multiple_of)
        width = multiple_of * math.ceil(width / multiple_of)
    return width


def ffn_param_count(d_model: int, d_ff: int, *, gated: bool = False, bias: bool = True) -> int:
    """Number of parameters of an FFN, from the formula.

    dense: ``2·d·d_ff`` weights (+ ``d_ff + d`` biases); gated: ``3·d·d_ff``
    weights (+ ``2·d_ff + d`` biases). With ``d_ff = 4d`` and biases the dense
    count is ``8d² + 5d``.
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("d_ff", d_ff)
    n_in = 2 if gated else 1
    weights = (n_in + 1) * d_model * d_ff
    biases = (n_in * d_ff + d_model) if bias else 0
    return weights + biases


class FFN(nn.Module):
    """Position-wise FFN, dense or gated by configuration.

    Args:
        d_model: width of a token vector (input and output).
        d_ff: hidden width; defaults to ``4 * d_model``.
        activation: name of φ, one of ``helpers.activations.ACTIVATIONS``.
        gated: multiply φ(W1 x + b1) elementwise by a linear branch W3 x + b3.
        bias: give every linear map a bias.
        dropout: dropout probability on the output, in [0, 1).

    Shapes: ``forward``: ``(..., d_model) -> (..., d_model)``;
    ``hidden``: ``(..., d_model) -> (..., d_ff)``; ``contract``:
    ``(..., d_ff) -> (..., d_model)``. Any number of leading dimensions, e.g.
    ``(B, T, d_model)``: the same weights act on every position independently.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, activation: str = "gelu", *,
                 gated: bool = False, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = validate.positive_int("d_model", d_model)
        self.d_ff = validate.positive_int("d_ff", 4 * d_model if d_ff is None else d_ff)
        self.activation_name = validate.one_of("activation", activation, ACTIVATIONS)
        if not isinstance(gated, bool):
            raise TypeError(f"gated must be a bool, got {gated!r} ({type(gated).__name__})")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {bias!r} ({type(bias).__name__})")
        self.gated = gated
        self.act = get_activation(activation)
        self.w1 = nn.Linear(self.d_model, self.d_ff, bias=bias)   # expand (the gate when gated)
        self.w3 = nn.Linear(self.d_model, self.d_ff, bias=bias) if gated else None  # linear branch
        self.w2 = nn.Linear(self.d_ff, self.d_model, bias=bias)   # contract
        self.dropout = nn.Dropout(validate.probability("dropout", dropout))

    @classmethod
    def from_variant(cls, variant: str, d_model: int, d_ff: int | None = None, *, bias: bool = True,
                     dropout: float = 0.0, multiple_of: int | None = None) -> "FFN":
        """Build a named variant (see ``VARIANTS``).

        Without ``d_ff``, dense variants get ``4 * d_model`` and gated ones the
        parameter-matched width ``matched_gated_width(d_model, 4, multiple_of)``.
        """
        activation, gated = VARIANTS[validate.one_of("variant", variant, VARIANTS)]
        if d_ff is None:
            validate.positive_int("d_model", d_model)
            d_ff = matched_gated_width(d_model, 4, multiple_of) if gated else 4 * d_model
        return cls(d_model, d_ff, activation, gated=gated, bias=bias, dropout=dropout)

    @property
    def variant(self) -> str:
        """The variant's name if this configuration has one, else ``'activation[+gate]'``."""
        for name, config in VARIANTS.items():
            if config == (self.activation_name, self.gated):
                return name
        return self.activation_name + ("+gate" if self.gated else "")

    @property
    def has_bias(self) -> bool:
        return self.w1.bias is not None

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Memory coefficients ``m``: ``(..., d_model) -> (..., d_ff)``.

        Dense: ``φ(W1 x + b1)``. Gated: ``φ(W1 x + b1) ⊙ (W3 x + b3)``.
        """
        validate.float_tensor("x", x, last_dim=self.d_model)
        h = self.act(self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        return h

    def contract(self, h: torch.Tensor) -> torch.Tensor:
        """Write the hidden vector back to model width: ``(..., d_ff) -> (..., d_model)``."""
        validate.float_tensor("h", h, last_dim=self.d_ff, last_dim_name="d_ff")
        return self.dropout(self.w2(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_model) -> (..., d_model)``."""
        return self.contract(self.hidden(x))

    def param_count(self) -> int:
        """Number of parameters, counted from the module (compare ``ffn_param_count``)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        return (f"variant={self.variant}, d_model={self.d_model}, d_ff={self.d_ff}, "
                f"bias={self.has_bias}, dropout={self.dropout.p}")
