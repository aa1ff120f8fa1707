"""What an FFN costs: FLOPs and activation memory, by formula and by measurement.

Formulas count one multiply-add as 2 FLOPs and ignore biases and the
activation function (they are O(d_ff) per token against O(d·d_ff) for the
matrix products). Measurements use PyTorch's own instruments:
``torch.utils.flop_counter.FlopCounterMode`` for FLOPs,
``torch.autograd.graph.saved_tensors_hooks`` for what autograd keeps for the
backward pass, and ``torch.utils.benchmark.Timer`` for time. ``saved_per_token`` is the formula for
what one FFN keeps for backward; ``torch_threads`` runs a block on a given number of threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import benchmark
from torch.utils.flop_counter import FlopCounterMode

from helpers import validate
from helpers.ffn import VARIANTS


def ffn_flops_per_token(d_model: int, d_ff: int, *, gated: bool = False, backward: bool = False) -> int:
    """FLOPs per token of one FFN: forward ``4·d·d_ff`` dense, ``6·d·d_ff`` gated.

    With ``backward=True`` the total for forward + backward, three times the
    forward (the backward pass needs two products per weight matrix: one for the
    input's gradient, one for the weight's): ``12·d·d_ff`` dense.
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("d_ff", d_ff)
    n_matrices = 3 if gated else 2
    forward = 2 * n_matrices * d_model * d_ff
    return 3 * forward if backward else forward


def measure_flops(fn: Callable[[], object]) -> int:
    """Total FLOPs PyTorch counts while running ``fn()`` (forward, and backward if ``fn`` calls it)."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


@dataclass
class SavedTensors:
    """What autograd kept for the backward pass during one forward.

    ``total_bytes`` counts each distinct storage once (a tensor saved by two
    operations, or a view of it, costs memory once); parameters are excluded.
    """

    total_bytes: int
    shapes: list[tuple[int, ...]] = field(default_factory=list)

    def per_token(self, n_tokens: int, bytes_per_element: int = 4) -> float:
        """Saved elements per token (``total_bytes / bytes_per_element / n_tokens``)."""
        validate.positive_int("n_tokens", n_tokens)
        return self.total_bytes / bytes_per_element / n_tokens


def measure_saved_tensors(fn: Callable[[], torch.Tensor], exclude: nn.Module | None = None) -> SavedTensors:
    """Run ``fn()`` (a forward pass) and record the tensors autograd saves for backward.

    Args:
        fn: runs the forward pass and returns its output.
        exclude: a module whose parameters (weights) are not counted as activations.
    """
    param_storages = set()
    if exclude is not None:
        param_storages = {p.untyped_storage().data_ptr() for p in exclude.parameters()}
    seen: dict[int, int] = {}
    shapes: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_storages and ptr not in seen:
            seen[ptr] = storage.nbytes()
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return SavedTensors(total_bytes=sum(seen.values()), shapes=shapes)


def median_seconds(fn: Callable[[], object], min_run_time: float = 0.2) -> float:
    """Median wall-clock seconds of one call to ``fn()`` (``torch.utils.benchmark``; warms up first)."""
    validate.positive_float("min_run_time", min_run_time)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn})
    return float(timer.blocked_autorange(min_run_time=min_run_time).median)


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
    ``measure_saved_tensors`` on ``helpers.ffn.FFN``, with or without biases.
    """
    validate.one_of("variant", variant, VARIANTS)
    validate.positive_int("d_model", d_model)
    validate.positive_int("d_ff", d_ff)
    return d_model + SAVED_D_FF_TENSORS[variant] * d_ff


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
