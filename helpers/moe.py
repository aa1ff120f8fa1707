r"""A mixture-of-experts (MoE) layer whose experts are the course's ``helpers.ffn.FFN``.

A router scores every token against every expert; each token is sent to a few
experts, and the layer's output is their outputs weighted by the router:

    logits = x · W_rᵀ                    (N, E), computed in float32 (Switch's selective precision)
    p      = softmax(logits)             (N, E)
    top-k  : expert_index (N, k), weight = p of the chosen experts
             (renormalised to sum to 1 over the k chosen when k ≥ 2, as in Mixtral)
    y[n]   = Σ_j kept[n, j] · weight[n, j] · expert_{expert_index[n, j]}(x[n])

Capacity (Switch, GShard). With ``capacity_factor`` ``c`` every expert takes at
most ``capacity = ceil(c · N · k / E)`` token slots (**ceil**, everywhere in the
course; the product is rounded to 6 decimals first so that 1.1 · 100 / 10 gives
11, not 12). Slots are served first come, first served: all first choices in
token order, then all second choices in token order, and so on (GShard's
priority). A slot that finds its expert full is *dropped*: it contributes 0, and
a token whose every slot is dropped passes through the residual connection
around the layer unchanged. ``capacity_factor=None`` means no limit (dropless,
as in Mixtral and MegaBlocks).

Auxiliary losses, returned in the record of every forward pass:

* load balancing (Switch): ``E · Σ_i f_i · P_i`` with ``f_i`` the share of the
  N·k routed slots that chose expert i (counted before capacity drops) and
  ``P_i`` the mean router probability of expert i. It is 1 when the slots are
  spread evenly (whatever P is) and E when every token picks the same expert
  with probability 1. The layer's ``balance_coef`` (Switch's α = 1e-2) scales it.
  Hugging Face's Mixtral version counts the k choices without dividing by k, so
  it equals k at perfect balance (``mixtral_balance_loss``).
* router z-loss (ST-MoE): ``mean_n (logsumexp_i logits[n, i])²``, coefficient 1e-3.

A second router, ``router="expert"`` (expert choice, Zhou et al. 2022), turns
the choice around: every expert takes its ``capacity`` highest-scoring tokens.
Loads are equal by construction; a token may be taken by several experts or by none.

Dispatch: ``MoE.forward`` sorts the kept slots by expert, gathers the tokens into
one contiguous block per expert, runs each expert once on its block and adds the
weighted results back with ``index_add_`` (a grouped computation in the spirit
of MegaBlocks). ``moe_forward_loop`` is the readable reference: one boolean mask
per (expert, choice) pair. Both give the same output to float rounding.
Top-1 and top-2 are chosen by ``max`` passes rather than ``torch.topk`` (the same
experts and weights; equal scores go to the lower expert index).
Without autograd (inference) a token-choice layer runs every routed expert as a
``PreparedFFN`` (when no expert applies dropout; the shared expert and expert
choice keep the plain modules): a copy of its weights made once and cached (a
second copy of all expert weights, 135 MB for 64 SwiGLU experts at d = 256), with
the activation and the gate product done in place. The copy differs from the
module in two ways that leave the output unchanged. Its hidden width is
zero-padded to a multiple of 16 elements (64 bytes in float32): widths such as
682 = 2·341 or 1364 = 4·341 ran 5–20 % slower per FLOP on the course's CPU than
their neighbours (the padded rows and columns are zeros). And its matrices are
stored transposed, so every product is a plain ``block @ W`` rather than
``nn.Linear``'s ``block @ Wᵀ``: for blocks of about 128 tokens the two expanding
products run 5–8 % faster that way, the contraction about the same. The cache is
rebuilt when a parameter is replaced or changed in place by an operation that
bumps its version counter (for-loop and foreach optimizer steps,
``load_state_dict``, in-place ops under ``no_grad``). Two kinds of write are not
detected: writes through ``.data``, and fused optimizers (``fused=True``), which
leave the counter alone. After those, call ``refresh_prepared()``. In inference
(the same path) the experts also write their outputs into one buffer that a single ``index_add_``
adds into the tokens' rows (instead of one ``index_add_`` per expert; same sums,
same order); in eval mode the ``MoEStats`` record of token-choice routing
then computes its numbers when first read.

Configurations of today's MoE layers (same class, keyword arguments):

* ``granularity=m`` (DeepSeekMoE, Dai et al. 2024): every expert is cut into m
  experts of width ``d_ff / m``; the layer has ``m · n_experts`` of them and each
  token visits ``m · top_k``: the same active parameters and FLOPs, many more
  ways to combine experts. ``m = 1`` is the plain layer.
* ``n_shared=s`` (DeepSeekMoE): s of those ``m · n_experts`` fine experts are always
  on for every token (built as one FFN of width ``s · d_ff / m``, as DeepSeek-V3's
  code does); the router picks ``m · top_k − s`` of the other ``m · n_experts − s``,
  so active compute is unchanged.
* ``score="sigmoid"`` (DeepSeek-V3): affinities ``sigmoid(logits)`` instead of a
  softmax; the combine weights are the chosen affinities normalised to sum to 1
  when k ≥ 2. At k = 1 the course keeps the affinity ``sigmoid(logit)`` itself:
  DeepSeek-V3's ``Gate`` normalises at every k (its k is 8), which at k = 1 would
  make every weight 1 and leave the router without a gradient. Also left out:
  the ``route_scale`` factor on the weights and group-limited (node-limited) routing.
* ``bias_update=γ`` (DeepSeek-V3's auxiliary-loss-free balancing): a per-expert
  ``selection_bias`` is added to the scores for choosing the top k only; the
  combine weights are the unbiased scores. After each optimizer step,
  ``update_selection_bias()`` (or ``update_selection_biases(model)``) moves the bias
  of every over-loaded expert down by γ and of every under-loaded one up by γ.
* ``noisy=True`` (noisy top-k gating, Shazeer et al. 2017): during training the
  logits are ``x W_gᵀ + ε · softplus(x W_noiseᵀ)`` with ε ~ N(0, 1) per token and
  expert; ``W_noise`` starts at zero, as in the paper (noise of std softplus(0) ≈ 0.69).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.ffn import FFN, VARIANTS, ffn_param_count, matched_gated_width

ROUTERS = ("token", "expert")
SCORES = ("softmax", "sigmoid")
#: the hidden width is zero-padded to a multiple of this many elements for inference
PAD_MULTIPLE = 16


# --------------------------------------------------------------------------- an FFN prepared for inference
#: activations that can overwrite their input (the rest run out of place)
_ACT_INPLACE = {
    "relu": lambda h: F.relu(h, inplace=True),
    "silu": lambda h: F.silu(h, inplace=True),
    "sigmoid": lambda h: h.sigmoid_(),
    "identity": lambda h: h,
}


class PreparedFFN:
    """An ``FFN``'s weights laid out for fast inference; ``prepared(x)`` equals ``ffn(x)`` to float rounding.

    Made by ``PreparedFFN(ffn)``: the hidden width zero-padded to a multiple of ``PAD_MULTIPLE`` and the
    matrices transposed, ``w1_t``, ``w3_t``: ``(d_model, d_ff_padded)``, ``w2_t``: ``(d_ff_padded, d_model)``
    (``w3_t`` is ``None`` for a dense FFN). A snapshot: it does not follow later changes to ``ffn``.
    Inference only: ``(..., d_model) -> (..., d_model)``, always without autograd (no gradient reaches
    ``ffn``'s weights), the activation in place, dropout not applied.
    """

    def __init__(self, ffn: FFN) -> None:
        if not isinstance(ffn, FFN):
            raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
        pad = (-ffn.d_ff) % PAD_MULTIPLE
        with torch.no_grad():
            def expand(linear: nn.Linear | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
                if linear is None:
                    return None, None
                bias = None if linear.bias is None else F.pad(linear.bias, (0, pad))
                return F.pad(linear.weight, (0, 0, 0, pad)).t().contiguous(), bias

            self.w1_t, self.b1 = expand(ffn.w1)
            self.w3_t, self.b3 = expand(ffn.w3)
            self.w2_t = F.pad(ffn.w2.weight, (0, pad)).t().contiguous()
            self.b2 = ffn.w2.bias.detach().clone() if ffn.w2.bias is not None else None
        self.d_model = ffn.d_model
        self.activation = ffn.activation_name
        self._act = _ACT_INPLACE.get(ffn.activation_name, ffn.act)

    @staticmethod
    def _matmul(x: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        if b is None:
            return torch.mm(x, w_t) if out is None else torch.mm(x, w_t, out=out)
        return torch.addmm(b, x, w_t) if out is None else torch.addmm(b, x, w_t, out=out)

    @staticmethod
    def key(ffn: FFN) -> tuple:
        """What identifies ``ffn``'s current weights: each parameter's data pointer, in-place version and dtype.

        Reads the parameters of ``ffn`` and of its direct submodules (its ``nn.Linear`` layers) straight from
        the modules' dictionaries: for 64 experts that took 0.4–0.6 ms from cold caches, against 0.8–1.3 ms
        through ``parameters()`` and 5 ms through attribute access (``ffn.w1.weight``), on the course's CPU.
        When a submodule has submodules of its own (a parametrised ``nn.Linear``, for example, keeps its
        parameters one level down) it uses ``parameters()``.
        """
        subs = [sub for sub in ffn._modules.values() if sub is not None]
        if any(sub._modules for sub in subs):
            params = list(ffn.parameters())
        else:
            params = [*ffn._parameters.values()]
            for sub in subs:
                params.extend(sub._parameters.values())
        return tuple((p.data_ptr(), p._version, p.dtype) for p in params if p is not None)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: ``(..., d_model)`` -> ``(..., d_model)``; ``out``, if given, a contiguous ``(N, d_model)``
        tensor of ``x``'s dtype (N = tokens in ``x``) that receives the result (and is returned, reshaped)."""
        validate.float_tensor("x", x, last_dim=self.d_model)
        flat = x.reshape(-1, self.d_model)
        if out is not None and (out.shape != flat.shape or out.dtype != x.dtype or not out.is_contiguous()):
            raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {tuple(flat.shape)}, "
                             f"got {out.dtype} {tuple(out.shape)}{'' if out.is_contiguous() else ' (not contiguous)'}")
        return self._forward(flat, out).reshape(x.shape)

    def _forward(self, flat: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``__call__`` without the checks: ``flat`` ``(N, d_model)`` -> ``(N, d_model)`` (into ``out`` if given)."""
        h = self._act(self._matmul(flat, self.w1_t, self.b1))
        if self.w3_t is not None:
            h.mul_(self._matmul(flat, self.w3_t, self.b3))
        return self._matmul(h, self.w2_t, self.b2, out)


# --------------------------------------------------------------------------- routing records
@dataclass
class Routing:
    """Token-choice routing of N tokens to E experts, k slots each.

    Attributes:
        expert_index: ``(N, k)`` long, the chosen experts, best first.
        weight: ``(N, k)`` float32, combine weights: the softmax probabilities of the chosen
            experts, renormalised over the k chosen when ``top_k >= 2`` and ``renormalise=True``.
        kept: ``(N, k)`` bool, False where the slot was dropped because its expert was full.
        probs: ``(N, E)`` float32, router softmax over all experts (``score="sigmoid"``: the
            sigmoid affinities divided by their sum over experts).
        logits: ``(N, E)`` float32, router logits.
        capacity: slots per expert, or ``None`` (dropless).
    """

    expert_index: torch.Tensor
    weight: torch.Tensor
    kept: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor
    capacity: int | None = None

    @property
    def n_experts(self) -> int:
        return self.probs.shape[-1]

    def tokens_per_expert(self, kept_only: bool = False) -> torch.Tensor:
        """``(E,)`` long: slots routed to each expert (``kept_only``: only the slots kept)."""
        index = self.expert_index[self.kept] if kept_only else self.expert_index.reshape(-1)
        return torch.bincount(index, minlength=self.n_experts)

    def detach(self) -> "Routing":
        """A copy without autograd history (for logging)."""
        return Routing(self.expert_index, self.weight.detach(), self.kept, self.probs.detach(),
                       self.logits.detach(), self.capacity)


@dataclass
class ExpertChoiceRouting:
    """Expert-choice routing (Zhou et al. 2022): each of E experts picks C tokens.

    Attributes:
        token_index: ``(E, C)`` long, the tokens each expert took, highest score first.
        weight: ``(E, C)`` float32, the router probability of (token, expert) used to combine.
        probs: ``(N, E)`` float32, router softmax over experts, per token.
        logits: ``(N, E)`` float32, router logits.
    """

    token_index: torch.Tensor
    weight: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor

    @property
    def capacity(self) -> int:
        return self.token_index.shape[1]

    def experts_per_token(self) -> torch.Tensor:
        """``(N,)`` long: how many experts took each token (0 means it skipped the layer)."""
        return torch.bincount(self.token_index.reshape(-1), minlength=self.probs.shape[0])

    def detach(self) -> "ExpertChoiceRouting":
        return ExpertChoiceRouting(self.token_index, self.weight.detach(), self.probs.detach(), self.logits.detach())


@dataclass
class MoEStats:
    """What one forward pass of an ``MoE`` layer did: the record it returns beside its output.

    Attributes:
        tokens_per_expert: ``(E,)`` long, slots the router sent to each expert (before capacity).
        kept_per_expert: ``(E,)`` long, slots each expert actually processed.
        dropped_share: share of the N·k slots dropped for lack of capacity (token choice), or
            share of tokens no expert took (expert choice).
        router_entropy: mean over tokens of the entropy of the router's distribution, in nats
            (log E = undecided, 0 = certain).
        balance_loss: Switch load-balancing loss ``E · Σ f_i P_i`` (unscaled; has gradients); 0 for
            expert choice, which is balanced by construction.
        z_loss: router z-loss ``mean (logsumexp logits)²`` (unscaled; has gradients).
        aux_loss: ``balance_coef · balance_loss + z_coef · z_loss``, to add to the training loss.
        capacity: slots per expert, ``None`` when dropless.
        routing: the (detached) ``Routing`` or ``ExpertChoiceRouting`` of this pass.
    """

    tokens_per_expert: torch.Tensor
    kept_per_expert: torch.Tensor
    dropped_share: float
    router_entropy: float
    balance_loss: torch.Tensor
    z_loss: torch.Tensor
    aux_loss: torch.Tensor
    capacity: int | None = None
    routing: Routing | ExpertChoiceRouting | None = field(default=None, repr=False)

    @property
    def n_experts(self) -> int:
        return self.tokens_per_expert.numel()

    @property
    def max_over_mean(self) -> float:
        """Load of the busiest expert over the mean load (1 = perfectly even, E = one expert takes all)."""
        return load_max_over_mean(self.tokens_per_expert)

    @property
    def load_entropy(self) -> float:
        """Entropy of the load distribution over experts divided by log E (1 = even, 0 = one expert)."""
        return load_entropy(self.tokens_per_expert)


class _DeferredMoEStats(MoEStats):
    """An ``MoEStats`` whose numbers are computed from its ``routing`` the first time one is read.

    ``MoE`` returns one in inference (autograd off, ``eval()``), where the record is often never read:
    the numbers are the ones an eager record would hold (the routing is fixed and the loss coefficients
    are taken at the forward pass), only their cost is paid when they are asked for. ``compute`` must not
    hold the layer (an unread record would keep its cached expert copies alive).
    """

    def __init__(self, compute: Callable[[], MoEStats], capacity: int | None,
                 routing: Routing | ExpertChoiceRouting) -> None:
        self.__dict__["_compute"] = compute
        self.capacity = capacity
        self.routing = routing

    def _materialise(self) -> MoEStats:
        """Compute the numbers; from then on the object is a plain ``MoEStats``. Fields set before the first
        read keep their values; if the computation is interrupted, the next read tries again."""
        compute = self.__dict__.get("_compute")
        if compute is not None:
            for name, value in vars(compute()).items():
                self.__dict__.setdefault(name, value)
            self.__dict__.pop("_compute", None)
            self.__class__ = MoEStats
        return self

    def __getattr__(self, name: str):                 # only called for attributes not set yet
        if name.startswith("__") or "_compute" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self._materialise(), name)

    def __repr__(self) -> str:
        return repr(self._materialise())

    def __eq__(self, other: object) -> bool:
        return self._materialise() == other

    __hash__ = None

    def __reduce_ex__(self, protocol):                # copy and pickle the computed record
        return self._materialise().__reduce_ex__(protocol)


# --------------------------------------------------------------------------- small functions
def expert_capacity(n_tokens: int, n_experts: int, top_k: int = 1, capacity_factor: float | None = 1.0) -> int | None:
    """Slots per expert: ``ceil(capacity_factor · n_tokens · top_k / n_experts)``; ``None`` if dropless.

    The product is rounded to 6 decimals before ``ceil`` so that binary rounding
    (1.1 · 100 / 10 = 11.000000000000002) does not add a slot.
    """
    validate.non_negative_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    if capacity_factor is None:
        return None
    validate.positive_float("capacity_factor", capacity_factor)
    return math.ceil(round(capacity_factor * n_tokens * top_k / n_experts, 6))


def _top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(scores, k, dim=-1)`` (values, indices), best first; ``scores``: ``(..., E)``.

    For ``k <= 2`` by one or two ``max`` passes, the second over a copy with the first choice set to −inf
    (3 ms → 1 ms at 4096 × 64 on the course's CPU; at E = 8 both take about 0.4 ms). There, equal values
    go to the lower expert index (``torch.max``'s documented rule), and a row with one finite score gets
    the lowest other index as its second choice (value −inf). For ``k > 2`` it is ``topk``, which leaves
    the order of equal values unspecified.
    """
    if k > 2:
        return torch.topk(scores, k, dim=-1)
    first, first_index = scores.max(-1, keepdim=True)
    if k == 1:
        return first, first_index
    second, second_index = scores.scatter(-1, first_index, float("-inf")).max(-1, keepdim=True)
    # the two can coincide only when every other score is −inf and the first choice is expert 0: take expert 1
    second_index = torch.where(second_index == first_index, (first_index == 0).long(), second_index)
    return torch.cat([first, second], -1), torch.cat([first_index, second_index], -1)


def top_k_routing(probs: torch.Tensor, top_k: int, renormalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose the ``top_k`` most probable experts per token.

    Args:
        probs: ``(N, E)`` router probabilities (rows sum to 1).
    Returns:
        ``(weight, expert_index)``, both ``(N, k)``, best first (for k ≤ 2, of equal probabilities the
        lower index first). With ``renormalise``
        and ``k >= 2`` the weights are divided by their sum (equal to a softmax over
        the chosen experts' logits); with ``k = 1`` the weight stays the probability (Switch).
    """
    validate.float_tensor("probs", probs, min_dims=2)
    validate.int_in_range("top_k", top_k, 1, probs.shape[-1])
    weight, index = _top_k(probs, top_k)
    if renormalise and top_k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    return weight, index


def biased_top_k(scores: torch.Tensor, bias: torch.Tensor, top_k: int,
                 renormalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose experts by ``scores + bias`` but weight them by ``scores`` (DeepSeek-V3).

    Args:
        scores: ``(N, E)`` affinities (softmax probabilities or sigmoid values).
        bias: ``(E,)`` per-expert selection bias; it changes *which* experts are chosen only.
    Returns:
        ``(weight, expert_index)``, both ``(N, k)``, ordered by biased score. ``weight`` is the
        unbiased score of each chosen expert, divided by their sum when ``renormalise`` and k ≥ 2.
    """
    validate.float_tensor("scores", scores, min_dims=2)
    validate.int_in_range("top_k", top_k, 1, scores.shape[-1])
    if not isinstance(bias, torch.Tensor) or bias.shape != scores.shape[-1:]:
        raise ValueError(f"bias must be a tensor of shape ({scores.shape[-1]},), got "
                         f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    index = _top_k(scores + bias.to(scores.dtype), top_k)[1]
    weight = scores.gather(-1, index)
    if renormalise and top_k >= 2:
        weight = weight / weight.sum(-1, keepdim=True)
    return weight, index


def bias_update_step(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    """One step of DeepSeek-V3's auxiliary-loss-free balancing: ``bias + γ · sign(mean load − load)``.

    ``bias``, ``load``: ``(E,)``. An expert above the mean load is pushed down by γ, one below
    it is pulled up by γ, one exactly at the mean keeps its bias. Returns a new tensor.
    """
    validate.non_negative_float("gamma", gamma)
    load = load.to(torch.float64)
    return bias + gamma * torch.sign(load.mean() - load).to(bias.dtype)


def arrival_rank(expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Position of every slot in its expert's queue, first come first served.

    Slots arrive choice by choice and, within a choice, in token order: all first
    choices of tokens 0..N-1, then all second choices, ... (GShard's priority).

    Args:
        expert_index: ``(N, k)`` long (or ``(N,)`` for top-1).
    Returns:
        Long tensor of the same shape: 0 for the first slot an expert receives, 1 for the next, ...
        A slot is kept when its rank is below the capacity.
    """
    squeeze = expert_index.dim() == 1
    index = expert_index[:, None] if squeeze else expert_index
    n, k = index.shape
    flat = index.t().reshape(-1)                          # (k·N,) choice-major arrival order
    order = torch.argsort(flat, stable=True)              # slots grouped by expert, arrival order kept
    counts = torch.bincount(flat, minlength=n_experts)
    starts = torch.cumsum(counts, 0) - counts             # where each expert's group begins
    rank = torch.empty_like(flat)
    rank[order] = torch.arange(flat.numel(), device=flat.device) - starts[flat[order]]
    rank = rank.view(k, n).t()
    return rank[:, 0] if squeeze else rank


def load_balancing_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    """Switch load-balancing loss ``E · Σ_i f_i · P_i`` (without the coefficient α).

    Args:
        probs: ``(N, E)`` router probabilities.
        expert_index: ``(N, k)`` or ``(N,)`` long, the routed experts (before capacity drops).
    Returns:
        A scalar: ``f_i`` = share of the N·k slots routed to expert i (counts: no gradient),
        ``P_i`` = mean router probability of expert i (the gradient flows through it).
        1 at perfect balance, E at full collapse.
    """
    n_experts = probs.shape[-1]
    counts = torch.bincount(expert_index.reshape(-1), minlength=n_experts)
    f = counts.to(probs.dtype) / expert_index.numel()
    return n_experts * torch.sum(f * probs.mean(0))


def mixtral_balance_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    """The load-balancing loss as Hugging Face ``transformers`` computes it for Mixtral (no α).

    Each of the k choices is counted as a separate one-hot and the shares are not
    divided by k, so the value is ``k`` at perfect balance (``k · E`` at collapse):
    ``k`` times ``load_balancing_loss``.
    """
    n_experts = probs.shape[-1]
    index = expert_index[:, None] if expert_index.dim() == 1 else expert_index
    tokens_per_expert = F.one_hot(index, n_experts).float().mean(0)     # (k, E): each row sums to 1
    return n_experts * torch.sum(tokens_per_expert * probs.mean(0)[None, :])


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE router z-loss: ``mean over tokens of (logsumexp over experts of logits)²``. ``logits``: ``(N, E)``."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def router_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of ``-Σ_i p_i log p_i`` (nats). ``probs``: ``(N, E)``."""
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1).mean()


def load_max_over_mean(counts: torch.Tensor) -> float:
    """Busiest expert's load over the mean load, from ``(E,)`` counts (1 = even, E = collapse)."""
    counts = counts.double()
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else float("nan")


def load_entropy(counts: torch.Tensor) -> float:
    """Entropy of the load shares over experts, divided by log E: 1 = even, 0 = all on one expert."""
    counts = counts.double()
    if counts.numel() < 2 or counts.sum() == 0:
        return float("nan") if counts.sum() == 0 else 1.0
    share = counts / counts.sum()
    nz = share[share > 0]
    return float(-(nz * nz.log()).sum() / math.log(counts.numel()))


def token_stats(r: Routing, balance_coef: float, z_coef: float) -> MoEStats:
    """The ``MoEStats`` record of a token-choice routing ``r``, with the layer's loss coefficients."""
    balance = load_balancing_loss(r.probs, r.expert_index)
    z = router_z_loss(r.logits)
    with torch.no_grad():
        routed = r.tokens_per_expert()
        kept = r.tokens_per_expert(kept_only=True)
        dropped = 1.0 - int(r.kept.sum()) / r.kept.numel() if r.kept.numel() else 0.0
        entropy = float(router_entropy(r.probs))
    return MoEStats(routed, kept, dropped, entropy, balance, z, balance_coef * balance + z_coef * z, r.capacity,
                    r.detach())


# --------------------------------------------------------------------------- the layer
class MoE(nn.Module):
    """Mixture-of-experts FFN: ``(..., d_model) -> ((..., d_model), MoEStats)``.

    Args:
        d_model: token width.
        n_experts: number of experts E (≥ 1), in units of full-width experts (see ``granularity``).
        top_k: experts per token k, 1 ≤ k ≤ E (token choice); for expert choice, the
            average number of experts per token used to size the capacity.
        d_ff: hidden width of each full-width expert (default: ``FFN.from_variant``'s default).
        variant: expert FFN variant (``helpers.ffn.VARIANTS``), e.g. ``"swiglu"`` (Mixtral) or ``"gelu"``.
        bias: biases in the experts.
        capacity_factor: ``None`` = dropless; else slots per expert
            ``ceil(capacity_factor · N · k / E)`` (expert choice: ``None`` means 1.0).
        router: ``"token"`` (each token picks its top-k experts) or ``"expert"`` (each expert
            picks its top-capacity tokens).
        jitter: Switch's multiplicative noise on the router input during training: x ·
            U(1 − jitter, 1 + jitter); 0 disables it. Off in ``eval()`` mode.
        renormalise: rescale the k chosen weights to sum to 1 (k ≥ 2).
        balance_coef: α, the weight of the load-balancing loss in ``aux_loss``.
        z_coef: the weight of the router z-loss in ``aux_loss``.
        granularity: m ≥ 1 (DeepSeekMoE's fine-grained experts): ``m · n_experts`` experts of width
            ``d_ff / m`` (``d_ff`` must be divisible by m), ``m · top_k`` per token.
        n_shared: s ≥ 0 of the ``m · n_experts`` fine experts are always on (shared); the router
            chooses ``m · top_k − s`` of the remaining ``m · n_experts − s``. Must leave at least one
            routed choice.
        score: ``"softmax"`` (default) or ``"sigmoid"`` (DeepSeek-V3's affinities).
        bias_update: γ ≥ 0 of the auxiliary-loss-free balancing; 0 leaves ``selection_bias`` alone.
        noisy: noisy top-k gating (Shazeer et al. 2017) during training.

    After construction ``n_experts``, ``top_k`` and ``d_ff`` describe the *routed* experts as built
    (``m · n_experts − s``, ``m · top_k − s``, ``d_ff / m``); the defaults give the plain layer, in
    which they equal the arguments. ``shared`` is the always-on FFN (``None`` when ``n_shared=0``).
    """

    def __init__(self, d_model: int, n_experts: int, top_k: int = 1, *, d_ff: int | None = None,
                 variant: str = "swiglu", bias: bool = False, capacity_factor: float | None = None,
                 router: str = "token", jitter: float = 0.0, renormalise: bool = True,
                 balance_coef: float = 0.01, z_coef: float = 0.001, granularity: int = 1, n_shared: int = 0,
                 score: str = "softmax", bias_update: float = 0.0, noisy: bool = False) -> None:
        super().__init__()
        self.d_model = validate.positive_int("d_model", d_model)
        validate.positive_int("n_experts", n_experts)
        validate.int_in_range("top_k", top_k, 1, n_experts)
        validate.one_of("variant", variant, VARIANTS)
        self.capacity_factor = None if capacity_factor is None else validate.positive_float(
            "capacity_factor", capacity_factor)
        self.router_type = validate.one_of("router", router, ROUTERS)
        self.jitter = validate.probability("jitter", jitter)
        for name, flag in (("renormalise", renormalise), ("noisy", noisy)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r} ({type(flag).__name__})")
        self.renormalise = renormalise
        self.balance_coef = validate.non_negative_float("balance_coef", balance_coef)
        self.z_coef = validate.non_negative_float("z_coef", z_coef)
        self.score = validate.one_of("score", score, SCORES)
        self.bias_update = validate.non_negative_float("bias_update", bias_update)
        self.noisy = noisy
        # ----- DeepSeekMoE's counting: fine-grained experts, some of them shared
        self.granularity = m = validate.positive_int("granularity", granularity)
        total = m * n_experts
        self.n_shared = validate.non_negative_int("n_shared", n_shared)
        if self.n_shared >= total:
            raise ValueError(f"n_shared={n_shared} leaves no routed expert: the layer has granularity · n_experts = "
                             f"{m} · {n_experts} = {total} experts in total, so n_shared must be at most {total - 1}")
        routed_k = m * top_k - self.n_shared
        if routed_k < 1:
            raise ValueError(f"n_shared={n_shared} leaves the router nothing to choose: each token uses granularity · "
                             f"top_k = {m} · {top_k} = {m * top_k} experts, so n_shared must be at most "
                             f"{m * top_k - 1}")
        if d_ff is None:
            activation, gated = VARIANTS[variant]
            d_ff = matched_gated_width(self.d_model) if gated else 4 * self.d_model
        validate.positive_int("d_ff", d_ff)
        if d_ff % m:
            raise ValueError(f"d_ff must be divisible by granularity={m} (experts of width d_ff / granularity), "
                             f"got d_ff={d_ff}")
        self.n_experts = total - self.n_shared
        self.top_k = routed_k
        self.router = nn.Linear(self.d_model, self.n_experts, bias=False)
        self.experts = nn.ModuleList(FFN.from_variant(variant, self.d_model, d_ff // m, bias=bias)
                                     for _ in range(self.n_experts))
        self.d_ff = self.experts[0].d_ff
        self.variant = variant
        self.shared = (FFN.from_variant(variant, self.d_model, self.n_shared * self.d_ff, bias=bias)
                       if self.n_shared else None)
        self.noise = None
        if noisy:                                   # Shazeer et al. 2017 start W_noise at zero
            self.noise = nn.Linear(self.d_model, self.n_experts, bias=False)
            nn.init.zeros_(self.noise.weight)
        self.register_buffer("selection_bias", torch.zeros(self.n_experts))
        self._load_since_update = torch.zeros(self.n_experts, dtype=torch.long)
        self._prepared_key: tuple | None = None
        self._prepared: list[PreparedFFN] = []

    @property
    def n_total_experts(self) -> int:
        """Routed plus shared experts (fine-grained ones when ``granularity > 1``)."""
        return self.n_experts + self.n_shared

    @property
    def active_experts(self) -> int:
        """Experts each token runs through: its ``top_k`` routed ones plus the shared ones."""
        return self.top_k + self.n_shared

    # ----- router
    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Router logits in float32 whatever the dtype of ``x`` or the module: ``(N, d) -> (N, E)``.

        In training mode, with ``jitter`` the input is scaled by U(1 − jitter, 1 + jitter), and with
        ``noisy`` the logits get ``ε · softplus(x W_noiseᵀ)``, ε ~ N(0, 1).
        """
        x32 = x.float()
        if self.training and self.jitter > 0:
            x32 = x32 * torch.empty_like(x32).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        logits = F.linear(x32, self.router.weight.float())
        if self.training and self.noise is not None:
            logits = logits + torch.randn_like(logits) * F.softplus(F.linear(x32, self.noise.weight.float()))
        return logits

    def router_scores(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores used to choose and weight, probs for the statistics)``, both ``(N, E)`` float32.

        Softmax: both are the softmax. Sigmoid: the affinities ``sigmoid(logits)``, and those
        affinities divided by their sum over experts.
        """
        if self.score == "softmax":
            probs = torch.softmax(logits, dim=-1)
            return probs, probs
        affinity = torch.sigmoid(logits)
        return affinity, affinity / affinity.sum(-1, keepdim=True)

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        validate.float_tensor("x", x, last_dim=self.d_model)
        return x.reshape(-1, self.d_model)

    def capacity(self, n_tokens: int) -> int | None:
        """Slots per expert for a batch of ``n_tokens`` tokens, for this layer's router.

        Token choice: ``ceil(capacity_factor · N · k / E)``, ``None`` when dropless. Expert choice:
        the same with ``capacity_factor=None`` read as 1.0, and at most N.
        """
        if self.router_type == "token":
            return expert_capacity(n_tokens, self.n_experts, self.top_k, self.capacity_factor)
        return self._expert_choice_capacity(n_tokens)

    def _expert_choice_capacity(self, n_tokens: int) -> int:
        factor = 1.0 if self.capacity_factor is None else self.capacity_factor
        return min(expert_capacity(n_tokens, self.n_experts, self.top_k, factor), n_tokens)

    def route(self, x: torch.Tensor) -> Routing:
        """Token-choice routing of ``x``: ``(N, d_model)`` (leading dimensions are flattened).

        Always token choice, whatever ``router`` the layer was built with (see ``route_expert_choice``).
        With ``jitter=0``, ``noisy=False`` or in ``eval()`` mode it is deterministic. A nonzero
        ``selection_bias`` changes which experts are chosen, not their weights.
        """
        x = self._flat(x)
        logits = self.router_logits(x)
        scores, probs = self.router_scores(logits)
        if bool(self.selection_bias.any()):
            weight, index = biased_top_k(scores, self.selection_bias, self.top_k, self.renormalise)
        else:
            weight, index = top_k_routing(scores, self.top_k, self.renormalise)
        cap = expert_capacity(x.shape[0], self.n_experts, self.top_k, self.capacity_factor)
        if cap is None:
            kept = torch.ones_like(index, dtype=torch.bool)
        else:
            kept = arrival_rank(index, self.n_experts) < cap
        return Routing(index, weight, kept, probs, logits, cap)

    def route_expert_choice(self, x: torch.Tensor) -> ExpertChoiceRouting:
        """Expert-choice routing of ``x`` ``(N, d_model)``: each expert takes its ``capacity`` best tokens."""
        x = self._flat(x)
        logits = self.router_logits(x)
        scores, probs = self.router_scores(logits)
        cap = self._expert_choice_capacity(x.shape[0])
        weight, token_index = torch.topk(scores.t(), cap, dim=-1)       # (E, C)
        return ExpertChoiceRouting(token_index, weight, probs, logits)

    # ----- auxiliary-loss-free balancing
    def update_selection_bias(self) -> torch.Tensor | None:
        """Call after the optimizer step: ``selection_bias += γ · sign(mean load − load)``.

        The load is the number of routed slots each expert received in the training forward passes
        since the last update. Returns that ``(E,)`` load (``None`` when ``bias_update`` is 0 or no
        training pass was made), and starts counting afresh.
        """
        load = self._load_since_update
        self._load_since_update = torch.zeros_like(load)
        if self.bias_update == 0 or int(load.sum()) == 0:
            return None
        with torch.no_grad():
            self.selection_bias.copy_(bias_update_step(self.selection_bias, load, self.bias_update))
        return load

    # ----- forward
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, MoEStats]:
        """``x``: ``(..., d_model)`` -> output of the same shape, and the ``MoEStats`` record."""
        shape = x.shape
        flat = self._flat(x)
        if self.router_type == "token":
            routing = self.route(flat)
            if self._needs_autograd(flat):
                y = dispatch(flat, routing, self.experts)
            else:
                y = self._dispatch_inference(flat, routing)
            if torch.is_grad_enabled() or self.training:
                stats = self._token_stats(routing)
            else:                                       # inference: the statistics cost only when read
                stats = _DeferredMoEStats(functools.partial(token_stats, routing, self.balance_coef, self.z_coef),
                                          routing.capacity, routing.detach())
            if self.training:
                self._load_since_update = self._load_since_update + stats.tokens_per_expert.cpu()
        else:
            ec = self.route_expert_choice(flat)
            y = dispatch_expert_choice(flat, ec, self.experts)
            stats = self._expert_choice_stats(ec)
        if self.shared is not None:
            y = y + self.shared(flat).to(y.dtype)
        return y.reshape(shape), stats

    def _needs_autograd(self, x: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.experts.parameters()))

    def refresh_prepared(self) -> None:
        """Drop the cached ``PreparedFFN`` copies; call after writing expert weights through ``.data`` or a
        fused optimizer (changes the version counter does not see)."""
        self._prepared, self._prepared_key = [], None

    def _prepared_experts(self) -> list[PreparedFFN]:
        """Every expert as a ``PreparedFFN``, cached until a weight changes (data pointer or in-place version)."""
        key = tuple(PreparedFFN.key(ffn) for ffn in self.experts)
        if key != self._prepared_key:
            self._prepared, self._prepared_key = [PreparedFFN(ffn) for ffn in self.experts], key
        return self._prepared

    def _dispatch_inference(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        """``dispatch`` without autograd: the experts run as cached ``PreparedFFN``s."""
        if not all(isinstance(e, FFN) and (e.dropout.p == 0 or not e.training) for e in self.experts):
            return dispatch(x, routing, self.experts)
        return _grouped_prepared(x, routing, self._prepared_experts())

    def _token_stats(self, r: Routing) -> MoEStats:
        return token_stats(r, self.balance_coef, self.z_coef)

    def _expert_choice_stats(self, r: ExpertChoiceRouting) -> MoEStats:
        z = router_z_loss(r.logits)
        with torch.no_grad():
            loads = torch.full((self.n_experts,), r.capacity, dtype=torch.long)
            skipped = float((r.experts_per_token() == 0).float().mean())
            entropy = float(router_entropy(r.probs))
        zero = z.new_zeros(())
        return MoEStats(loads, loads.clone(), skipped, entropy, zero, z, self.z_coef * z, r.capacity, r.detach())

    def extra_repr(self) -> str:
        text = (f"d_model={self.d_model}, n_experts={self.n_experts}, top_k={self.top_k}, router={self.router_type}, "
                f"capacity_factor={self.capacity_factor}")
        extras = [(name, value, default) for name, value, default in (
            ("granularity", self.granularity, 1), ("n_shared", self.n_shared, 0), ("score", self.score, "softmax"),
            ("bias_update", self.bias_update, 0.0), ("noisy", self.noisy, False)) if value != default]
        return text + "".join(f", {name}={value}" for name, value, _ in extras)


def update_selection_biases(model: nn.Module) -> int:
    """Call ``update_selection_bias()`` on every ``MoE`` inside ``model`` (after the optimizer step).

    Returns how many layers updated their bias (those with ``bias_update > 0`` that saw training tokens).
    """
    return sum(m.update_selection_bias() is not None for m in model.modules() if isinstance(m, MoE))


# --------------------------------------------------------------------------- dispatch
def _combine_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate the weighted sum in at least float32."""
    return torch.promote_types(dtype, torch.float32)


def dispatch(x: torch.Tensor, routing: Routing, experts: Sequence[nn.Module]) -> torch.Tensor:
    """Vectorised token-choice dispatch: ``x`` ``(N, d)`` -> ``(N, d)``.

    Sort the kept slots by expert (a stable sort keeps token order inside an
    expert), gather the tokens into one contiguous block per expert, run every
    expert once on its block, and add each weighted result straight into its
    tokens' rows with ``index_add_``. No per-token Python work; the Python loop
    runs over experts only.
    """
    return _grouped(x, routing, lambda e, block: experts[e](block), len(experts))


def _slot_order(x: torch.Tensor, routing: Routing, n_experts: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The kept slots sorted by expert (stably): ``(token, weight, counts)``; ``token``, ``weight``: ``(S,)``,
    ``counts``: slots per expert."""
    k = routing.expert_index.shape[1]
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)   # (N·k,) token of each slot
    expert = routing.expert_index.reshape(-1)
    weight = routing.weight.reshape(-1)
    if routing.capacity is not None:                                     # drop the slots that found no room
        keep = routing.kept.reshape(-1)
        token, expert, weight = token[keep], expert[keep], weight[keep]
    order = torch.argsort(expert, stable=True)
    return token[order], weight[order], torch.bincount(expert, minlength=n_experts).tolist()


def _grouped(x: torch.Tensor, routing: Routing, run, n_experts: int) -> torch.Tensor:
    """The sorted, grouped dispatch with ``run(e, block) -> expert e's output`` for a block of tokens
    (autograd-safe: nothing is written in place into a tensor the graph needs)."""
    n, d = x.shape
    token, weight, counts = _slot_order(x, routing, n_experts)
    gathered = x.index_select(0, token)                                  # expert blocks, one after another
    acc = _combine_dtype(x.dtype)
    y = torch.zeros(n, d, dtype=acc, device=x.device)
    start = 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        rows = slice(start, start + count)
        out = run(e, gathered[rows]).to(acc)
        w = weight[rows, None].to(acc)
        y.index_add_(0, token[rows], out * w)
        start += count
    return y.to(x.dtype)


def _grouped_prepared(x: torch.Tensor, routing: Routing, prepared: Sequence[PreparedFFN]) -> torch.Tensor:
    """``_grouped`` for inference: every expert writes its block's output into one ``(S, d)`` buffer, and the
    weighted outputs are added into their tokens' rows by a single ``index_add_`` (rows in the same order as
    ``_grouped``'s one call per expert, so the sums are the same). Training keeps ``_grouped``: its outputs
    would have to be concatenated first, which made a training step 2–9 % slower at E = 4–64."""
    n, d = x.shape
    token, weight, counts = _slot_order(x, routing, len(prepared))
    gathered = x.index_select(0, token)                                  # expert blocks, one after another
    out = torch.empty_like(gathered)
    start = 0
    for e, count in enumerate(counts):
        if count:
            prepared[e]._forward(gathered[start:start + count], out[start:start + count])
            start += count
    acc = _combine_dtype(x.dtype)
    out = out.to(acc).mul_(weight[:, None].to(acc))
    return torch.zeros(n, d, dtype=acc, device=x.device).index_add_(0, token, out).to(x.dtype)


def dispatch_expert_choice(x: torch.Tensor, routing: ExpertChoiceRouting, experts: Sequence[nn.Module]) -> torch.Tensor:
    """Expert-choice dispatch: every expert runs on its C chosen tokens; ``(N, d) -> (N, d)``."""
    n, d = x.shape
    n_experts, cap = routing.token_index.shape
    token = routing.token_index.reshape(-1)
    blocks = x.index_select(0, token).view(n_experts, cap, d)
    acc = _combine_dtype(x.dtype)
    out = torch.cat([experts[e](blocks[e]) for e in range(n_experts)]).to(acc)
    y = torch.zeros(n, d, dtype=acc, device=x.device)
    y.index_add_(0, token, out * routing.weight.reshape(-1, 1).to(acc))
    return y.to(x.dtype)


def moe_forward_loop(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The readable reference for ``MoE.forward`` (token choice): one boolean mask per (expert, choice).

    ``x``: ``(..., d_model)`` -> ``(..., d_model)``. Slow for many experts: it scans every
    token once per expert and per choice. Use it to check ``dispatch``, not to train.
    """
    if moe.router_type != "token":
        raise ValueError(f"moe_forward_loop is the reference for token-choice routing; got a layer with "
                         f"router={moe.router_type!r}")
    shape = x.shape
    flat = moe._flat(x)
    routing = moe.route(flat)
    acc = _combine_dtype(flat.dtype)
    y = torch.zeros(flat.shape, dtype=acc, device=flat.device)
    for e, expert in enumerate(moe.experts):
        for j in range(moe.top_k):
            mine = (routing.expert_index[:, j] == e) & routing.kept[:, j]   # tokens whose j-th choice is e
            if mine.any():
                y[mine] += routing.weight[mine, j, None].to(acc) * expert(flat[mine]).to(acc)
    return y.to(flat.dtype).reshape(shape)


# --------------------------------------------------------------------------- training helpers
def moe_layers_stats(model: nn.Module) -> list[MoEStats]:
    """The ``MoEStats`` of every MoE block of a ``TinyGPT`` after its last forward, bottom layer first."""
    return [r for r in model.ffn_records() if isinstance(r, MoEStats)]


def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    """Sum over the model's MoE layers of their ``aux_loss`` (pass as ``train_lm(extra_loss=...)``)."""
    stats = moe_layers_stats(model)
    if not stats:
        raise ValueError("model has no MoE layer records: run a forward pass through a model with MoE FFNs first")
    return torch.stack([s.aux_loss for s in stats]).sum()


class RoutingLog:
    """Records routing per training step; pass as ``train_lm(..., on_step=log)``.

    After training: ``counts`` ``(steps, layers, E)`` long, slots routed per expert;
    ``dropped`` ``(steps, layers)``; ``balance`` ``(steps, layers)`` unscaled balance loss;
    ``loss`` ``(steps,)`` training loss (with the auxiliary losses, as ``train_lm`` reports it);
    ``aux`` ``(steps,)`` the auxiliary part summed over layers; ``lm_loss`` = ``loss - aux``.
    """

    def __init__(self) -> None:
        self._counts: list[torch.Tensor] = []
        self._dropped: list[list[float]] = []
        self._balance: list[list[float]] = []
        self._loss: list[float] = []
        self._aux: list[float] = []

    def __call__(self, step: int, model: nn.Module, loss: float) -> None:
        stats = moe_layers_stats(model)
        self._counts.append(torch.stack([s.tokens_per_expert for s in stats]))
        self._dropped.append([s.dropped_share for s in stats])
        self._balance.append([float(s.balance_loss.detach()) for s in stats])
        self._loss.append(loss)
        self._aux.append(sum(float(s.aux_loss.detach()) for s in stats))

    @property
    def counts(self) -> torch.Tensor:
        return torch.stack(self._counts)

    @property
    def dropped(self) -> torch.Tensor:
        return torch.tensor(self._dropped)

    @property
    def balance(self) -> torch.Tensor:
        return torch.tensor(self._balance)

    @property
    def loss(self) -> torch.Tensor:
        return torch.tensor(self._loss, dtype=torch.float64)

    @property
    def aux(self) -> torch.Tensor:
        return torch.tensor(self._aux, dtype=torch.float64)

    @property
    def lm_loss(self) -> torch.Tensor:
        """``(steps,)`` the next-token cross-entropy alone (training loss minus the auxiliary losses)."""
        return self.loss - self.aux

    def max_over_mean(self) -> torch.Tensor:
        """``(steps, layers)`` busiest expert's load over the mean."""
        c = self.counts.double()
        return c.max(-1).values / c.mean(-1)

    def load_entropy(self) -> torch.Tensor:
        """``(steps, layers)`` normalised entropy of the load over experts."""
        c = self.counts.double()
        share = c / c.sum(-1, keepdim=True)
        ent = -(share * share.clamp_min(1e-300).log()).sum(-1)
        return ent / math.log(c.shape[-1])


# --------------------------------------------------------------------------- accounting
@dataclass
class MoECost:
    """Parameters and forward FLOPs per token of one MoE layer (router + experts).

    ``expert_total_params`` / ``expert_active_params``: the same without the router (and the noise
    router), the part that granularity and shared experts leave unchanged for the active count.
    """

    total_params: int
    active_params: int
    flops_per_token: int
    expert_total_params: int = 0
    expert_active_params: int = 0


def moe_layer_cost(d_model: int, n_experts: int, top_k: int, d_ff: int | None = None, *, gated: bool = True,
                   bias: bool = False, granularity: int = 1, n_shared: int = 0, noisy: bool = False) -> MoECost:
    """Total vs active parameters and forward FLOPs per token of an MoE layer (as ``MoE`` builds it).

    Plain layer: total = E · expert + router (d·E); active = k · expert + router;
    FLOPs/token = 2·d·E (router) + k · (6 d d_ff gated, 4 d d_ff dense). Biases and softmax ignored in FLOPs.
    With ``granularity=m`` and ``n_shared=s`` (DeepSeekMoE): ``m·E − s`` routed experts of width
    ``d_ff/m``, ``m·k − s`` of them per token, plus one shared FFN of width ``s·d_ff/m``; the router has
    ``m·E − s`` rows (twice as many with ``noisy``).
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    m = validate.positive_int("granularity", granularity)
    s = validate.non_negative_int("n_shared", n_shared)
    if s >= m * n_experts or s >= m * top_k:
        raise ValueError(f"n_shared={s} must leave routed experts: at most {min(m * n_experts, m * top_k) - 1} "
                         f"for granularity={m}, n_experts={n_experts}, top_k={top_k}")
    if d_ff is None:
        d_ff = matched_gated_width(d_model) if gated else 4 * d_model
    validate.positive_int("d_ff", d_ff)
    if d_ff % m:
        raise ValueError(f"d_ff must be divisible by granularity={m}, got d_ff={d_ff}")
    width = d_ff // m
    routed, routed_k = m * n_experts - s, m * top_k - s
    expert = ffn_param_count(d_model, width, gated=gated, bias=bias)
    shared = ffn_param_count(d_model, s * width, gated=gated, bias=bias) if s else 0
    router = d_model * routed * (2 if noisy else 1)
    flops_expert = 2 * (3 if gated else 2) * d_model * width
    flops = 2 * d_model * routed + (routed_k + s) * flops_expert
    experts_total, experts_active = routed * expert + shared, routed_k * expert + shared
    return MoECost(experts_total + router, experts_active + router, flops, experts_total, experts_active)


def moe_model_params(*, vocab_size: int, d_model: int, n_layers: int, d_ff: int, n_experts: int, top_k: int,
                     n_heads: int, n_kv_heads: int, head_dim: int, tied_embeddings: bool = False) -> dict[str, int]:
    """Total and active parameters of a decoder-only MoE transformer (Mixtral layout: SwiGLU experts,
    grouped-query attention, RMSNorm, no biases).

    Returns a dict with ``total``, ``active`` and the parts: ``embeddings`` (input + output),
    ``attention``, ``norms``, ``routers``, ``experts_total``, ``experts_active`` (all layers).
    """
    for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("n_layers", n_layers), ("d_ff", d_ff),
                        ("n_experts", n_experts), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads),
                        ("head_dim", head_dim)):
        validate.positive_int(name, value)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    embeddings = vocab_size * d_model * (1 if tied_embeddings else 2)
    q_and_o = 2 * d_model * n_heads * head_dim
    k_and_v = 2 * d_model * n_kv_heads * head_dim
    attention = n_layers * (q_and_o + k_and_v)
    norms = n_layers * 2 * d_model + d_model
    routers = n_layers * d_model * n_experts
    expert = ffn_param_count(d_model, d_ff, gated=True, bias=False)
    experts_total = n_layers * n_experts * expert
    experts_active = n_layers * top_k * expert
    shared = embeddings + attention + norms + routers
    return {"embeddings": embeddings, "attention": attention, "norms": norms, "routers": routers,
            "experts_total": experts_total, "experts_active": experts_active,
            "total": shared + experts_total, "active": shared + experts_active}
