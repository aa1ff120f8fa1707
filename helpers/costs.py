"""What an FFN costs: FLOPs and activation memory, by formula and by measurement.

Formulas count one multiply-add as 2 FLOPs and ignore biases and the
activation function (they are O(d_ff) per token against O(d·d_ff) for the
matrix products). Measurements use PyTorch's own instruments:
``torch.utils.flop_counter.FlopCounterMode`` for FLOPs and
``torch.autograd.graph.saved_tensors_hooks`` for what autograd keeps for the
backward pass. ``saved_per_token`` is the formula for
what one FFN keeps for backward and ``saved_activation_names`` names each tensor kept; ``torch_threads`` runs a
block on a given number of threads.
``moe_layer_cost`` and ``moe_model_params`` count an MoE layer's and an MoE model's parameters and FLOPs
(re-exported by ``helpers.moe``). ``count_ops`` counts the ATen operations a call dispatches and ``layer_cost``
what one forward of an FFN or MoE layer costs by instruments that do not move: FLOPs, weight bytes held and read,
separate matrix products, bytes moved to and from experts.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from helpers import validate
from helpers.ffn import FFN, VARIANTS, ffn_param_count, matched_gated_width


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


def saved_activation_names(ffn: FFN, x: torch.Tensor) -> list[str]:
    """Name every activation autograd keeps for the backward pass of ``ffn(x)``.

    Names: ``x`` (the input), ``a`` (``W1 x``), ``b`` (``W3 x``, gated only), ``φ(a)``,
    and ``h`` for the tensor entering ``W2`` when it is a new one (the product
    ``φ(a)·b`` of a gated FFN). A tensor saved by two operations is listed once;
    the weights are left out. For Bilinear, ``φ(a)`` is ``a`` itself.

    Args:
        ffn: a ``helpers.ffn.FFN``. x: ``(..., d_model)`` input (give it ``requires_grad``
            to see what flows back to earlier layers).
    """
    if not isinstance(ffn, FFN):
        raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    params = {p.untyped_storage().data_ptr() for p in ffn.parameters()}
    caught: dict[str, torch.Tensor] = {}
    saved: list[torch.Tensor] = []

    def keep_output(name: str):
        def hook(module, inputs, output):
            caught[name] = output
        return hook

    def keep_input(module, inputs):
        caught["h"] = inputs[0]

    handles = [ffn.w1.register_forward_hook(keep_output("a")), ffn.w2.register_forward_pre_hook(keep_input)]
    if ffn.w3 is not None:
        handles.append(ffn.w3.register_forward_hook(keep_output("b")))
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            ffn(x)
    finally:
        for handle in handles:
            handle.remove()
    ptr = {name: t.untyped_storage().data_ptr() for name, t in caught.items()}
    ptr["x"] = x.untyped_storage().data_ptr()
    names, seen = [], set()
    for t in saved:
        p = t.untyped_storage().data_ptr()
        if p in params or p in seen:
            continue
        seen.add(p)
        if p == ptr["x"]:
            names.append("x")
        elif p == ptr["a"]:
            names.append("a (= φ(a))" if ffn.activation_name == "identity" else "a")
        elif p == ptr.get("b"):
            names.append("b")
        elif p == ptr["h"]:
            names.append("h = φ(a)·b" if ffn.gated else "φ(a)")
        else:
            names.append("φ(a)")
    order = ["x", "a", "a (= φ(a))", "φ(a)", "b", "h = φ(a)·b"]
    return sorted(names, key=order.index)


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


# --------------------------------------------------------------------------- a mixture-of-experts layer's cost
@dataclass
class MoECost:
    """Parameters and forward FLOPs per token of one MoE layer; ``expert_*_params`` leave out the router."""

    total_params: int
    active_params: int
    flops_per_token: int
    expert_total_params: int = 0
    expert_active_params: int = 0


def moe_layer_cost(d_model: int, n_experts: int, top_k: int, d_ff: int | None = None, *, gated: bool = True,
                   bias: bool = False, granularity: int = 1, n_shared: int = 0, noisy: bool = False) -> MoECost:
    """Total and active parameters and forward FLOPs per token of an ``MoE`` as built (dropless).

    Plain layer: total = E · expert + d·E (router), active = k · expert + d·E, FLOPs per token = 2·d·E +
    k · (6·d·d_ff gated, 4·d·d_ff dense): matrix products only, a multiply-add counted as 2 (``FlopCounterMode``'s
    convention; biases, softmax and the combine are not counted). ``granularity=m``, ``n_shared=s``: m·E − s
    routed experts of width d_ff / m, m·k − s per token, and a shared FFN of width s·d_ff / m. ``noisy`` doubles
    the router's parameters; its noise projection runs only in training and is not in the FLOPs.
    """
    validate.int_in_range("top_k", top_k, 1, validate.positive_int("n_experts", n_experts))
    m = validate.positive_int("granularity", granularity)
    s = validate.non_negative_int("n_shared", n_shared)
    if s >= m * n_experts or s >= m * top_k:
        raise ValueError(f"n_shared={s} must leave routed experts: at most {min(m * n_experts, m * top_k) - 1} "
                         f"for granularity={m}, n_experts={n_experts}, top_k={top_k}")
    if d_ff is None:
        d_ff = matched_gated_width(validate.positive_int("d_model", d_model)) if gated else 4 * d_model
    validate.positive_int("d_ff", d_ff)
    if d_ff % m:
        raise ValueError(f"d_ff must be divisible by granularity={m}, got d_ff={d_ff}")
    width, routed, routed_k = d_ff // m, m * n_experts - s, m * top_k - s
    expert = ffn_param_count(validate.positive_int("d_model", d_model), width, gated=gated, bias=bias)
    shared = ffn_param_count(d_model, s * width, gated=gated, bias=bias) if s else 0
    router = d_model * routed * (2 if noisy else 1)
    flops = 2 * d_model * routed + (routed_k + s) * 2 * (3 if gated else 2) * d_model * width
    total, active = routed * expert + shared, routed_k * expert + shared
    return MoECost(total + router, active + router, flops, total, active)


def moe_model_params(*, vocab_size: int, d_model: int, n_layers: int, d_ff: int, n_experts: int, top_k: int,
                     n_heads: int, n_kv_heads: int, head_dim: int, tied_embeddings: bool = False) -> dict[str, int]:
    """Total and active parameters of a decoder-only MoE transformer laid out like Mixtral (SwiGLU experts,
    grouped-query attention, RMSNorm, no biases), with the parts ``embeddings`` (input + output), ``attention``,
    ``norms``, ``routers``, ``experts_total``, ``experts_active`` (all layers)."""
    for name, value in dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, d_ff=d_ff,
                            n_experts=n_experts, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim).items():
        validate.positive_int(name, value)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    parts = {"embeddings": vocab_size * d_model * (1 if tied_embeddings else 2),
             "attention": n_layers * 2 * d_model * head_dim * (n_heads + n_kv_heads),    # q and o, k and v
             "norms": n_layers * 2 * d_model + d_model, "routers": n_layers * d_model * n_experts}
    expert = ffn_param_count(d_model, d_ff, gated=True, bias=False)
    common = sum(parts.values())
    return {**parts, "experts_total": n_layers * n_experts * expert, "experts_active": n_layers * top_k * expert,
            "total": common + n_layers * n_experts * expert, "active": common + n_layers * top_k * expert}


# ----------------------------------------------------------------------------- what routing costs
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot"})
#: operations that only re-describe memory (no kernel runs): left out of ``OpCount.kernels``
VIEW_OPS = frozenset({"view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "alias", "slice",
                      "select", "unsqueeze", "squeeze", "as_strided", "reshape", "_reshape_alias", "split",
                      "unbind", "lift_fresh", "split_with_sizes", "chunk", "unflatten", "flatten"})


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@dataclass
class OpCount:
    """Operations one call dispatched to PyTorch's kernels.

    Attributes:
        matmuls: matrix multiplications (``mm``, ``addmm``, ``bmm``, ...). kernels: every operation that
            runs a kernel (views such as ``t`` or ``expand`` left out): about what a profiler lists.
        by_name: count per operation name, views included.
    """

    matmuls: int
    kernels: int
    by_name: dict[str, int]


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn()`` once and count the ATen operations it dispatches (a ``TorchDispatchMode``).

    The counts depend on the implementation (a loop over experts, a grouped kernel) and on how the
    torch version decomposes an operation: a measurement of this code, not a property of MoE layers.
    """
    with _OpCounter() as counter:
        fn()
    counts = dict(counter.counts)
    matmuls = sum(n for op, n in counts.items() if op in MATMUL_OPS)
    kernels = sum(n for op, n in counts.items() if op not in VIEW_OPS)
    return OpCount(matmuls, kernels, counts)


@dataclass
class LayerCost:
    """What one forward pass of an FFN or MoE layer over a batch costs, by instruments that do not move.

    Attributes:
        flops: floating-point operations of the forward pass (``torch.utils.flop_counter``: the matrix
            products, 2 per multiply-add).
        weight_bytes: every weight the layer holds, in bytes of its dtype.
        read_bytes: the weights this pass reads: the router, the shared expert and every routed expert that
            received at least one token (at a large batch, all of them).
        matmuls: separate matrix products when the experts run one after another (3 per SwiGLU expert that
            received a token, 1 for the router, 3 for the shared expert): the launches a grouped kernel merges.
        moved_bytes: token vectors copied to their experts and their outputs copied back (2 per routed slot,
            ``d_model`` numbers each); a dense layer moves none. Across devices this is the all-to-all.
        rows: tokens per expert matrix product, on average (a dense layer: every token).
    """

    flops: int
    weight_bytes: int
    read_bytes: int
    matmuls: int
    moved_bytes: int
    rows: float


@runtime_checkable
class RoutedLayer(Protocol):
    """What ``layer_cost`` reads of a mixture-of-experts layer: ``helpers.moe.MoE`` has all of it.

    Described here, not imported: the MoE is a later idea built on this module (``helpers.moe`` imports
    ``helpers.costs``), and the course's modules never import upward.
    """

    router: nn.Module
    experts: nn.ModuleList
    shared: nn.Module | None

    def route(self, x: torch.Tensor) -> Any: ...


@torch.no_grad()
def layer_cost(layer: nn.Module, x: torch.Tensor) -> LayerCost:
    """``LayerCost`` of ``layer`` (a bias-free gated ``FFN`` or a token-choice ``MoE``) on ``x`` ``(N, d_model)``.

    An MoE is recognised by what it has (``RoutedLayer``: ``route``, ``router``, ``experts``, ``shared``).
    """
    validate.float_tensor("x", x, min_dims=2)
    layer = layer.eval()
    size = x.element_size()
    flops = measure_flops(lambda: layer(x))
    weight_bytes = sum(p.numel() for p in layer.parameters()) * size
    n = x.shape[0]
    if isinstance(layer, FFN):
        matrices = 3 if layer.gated else 2
        return LayerCost(flops, weight_bytes, weight_bytes, matrices, 0, float(n))
    # hasattr, not isinstance(layer, RoutedLayer): from Python 3.12 a Protocol check looks attributes up
    # statically and misses an nn.Module's submodules (they live in its _modules dictionary)
    if not all(hasattr(layer, name) for name in ("route", "router", "experts", "shared")):
        raise TypeError(f"layer must be an FFN or an MoE, got {type(layer).__name__}")
    routing = layer.route(x)
    used = routing.tokens_per_expert() > 0
    expert = sum(p.numel() for p in layer.experts[0].parameters()) * size
    shared = sum(p.numel() for p in layer.shared.parameters()) * size if layer.shared is not None else 0
    router = layer.router.weight.numel() * size
    matrices = 3 if layer.experts[0].gated else 2
    hit = int(used.sum())
    slots = int(routing.expert_index.numel())
    return LayerCost(flops, weight_bytes, router + shared + hit * expert,
                     matrices * hit + 1 + (matrices if layer.shared is not None else 0),
                     2 * slots * x.shape[-1] * size, slots / max(hit, 1))
