r"""A mixture-of-experts (MoE) layer whose experts are the course's ``helpers.ffn.FFN``.

An MoE layer keeps E FFNs side by side, the *experts*, and a linear *router* that sends every token to k of
them: the parameters grow with E, the work per token with k. For N tokens x:

    logits = x W_rᵀ               (N, E), in float32 whatever the model's dtype (Switch)
    p      = softmax(logits)      (N, E)
    top-k  : expert_index (N, k), best first; weight = p of the chosen experts, renormalised to sum
             to 1 when k ≥ 2 (Mixtral), left as p when k = 1 (Switch: the router's path to a gradient)
    y[n]   = Σ_j kept[n, j] · weight[n, j] · FFN_{expert_index[n, j]}(x[n])

Capacity (GShard, Switch): with a capacity factor c an expert takes at most C = ceil(c · N · k / E) slots, first
come, first served: all first choices in token order, then all second choices, ... A slot that finds its expert
full is dropped (adds 0; a token that loses every slot leaves by the residual connection around the layer).
``capacity_factor=None`` means no limit (dropless, as in Mixtral).

``dispatch`` sorts the kept slots by expert, runs every expert once on the block of its tokens and adds the
weighted outputs back: exactly the matrix-product FLOPs of ``moe_layer_cost``. ``moe_forward_loop`` is the
readable reference. Each forward pass also returns an ``MoEStats`` record with Switch's balance loss
E · Σ_i f_i P_i (1 at an even load, E at collapse) and ST-MoE's z-loss, mean (logsumexp of the logits)².

Options of ``MoE``: ``router="expert"`` (each expert takes its C best tokens; Zhou et al. 2022); ``noisy``
top-k (Shazeer et al. 2017) and ``jitter`` (Switch), in training only; ``granularity`` m and ``n_shared`` s
(DeepSeekMoE: m·E experts of width d_ff / m, s always on, m·k − s routed; the same active compute);
``score="sigmoid"`` and ``bias_update`` γ (DeepSeek-V3; loss-free balancing, Wang et al. 2024: a per-expert
bias that changes which experts are chosen, not their weights). How fast it runs: helpers/tools/BENCHMARKS.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.costs import MoECost, moe_layer_cost, moe_model_params  # noqa: F401  (the layer's accounting)
from helpers.ffn import FFN, VARIANTS, matched_gated_width

ROUTERS, SCORES = ("token", "expert"), ("softmax", "sigmoid")
#: without autograd an expert takes its block at most this many rows at a time: the same FLOPs, a smaller
#: hidden tensor (rows × d_ff); faster at E = 8 on the course's CPU (helpers/tools/BENCHMARKS.md)
INFERENCE_ROWS = 256


# --------------------------------------------------------------------------- what a forward pass routed
@dataclass
class Routing:
    """Token choice: ``expert_index`` (N, k) long, best first; ``weight`` (N, k) float32 combine weights;
    ``kept`` (N, k) bool, False where the expert was full; ``probs`` (N, E) float32, the router's distribution
    (sigmoid scores divided by their sum); ``logits`` (N, E) float32; ``capacity`` (``None``: dropless)."""
    expert_index: torch.Tensor
    weight: torch.Tensor
    kept: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor
    capacity: int | None = None

    n_experts = property(lambda self: self.probs.shape[-1])

    def tokens_per_expert(self, kept_only: bool = False) -> torch.Tensor:
        """``(E,)`` long: slots routed to each expert (``kept_only``: the slots kept)."""
        index = self.expert_index[self.kept] if kept_only else self.expert_index.reshape(-1)
        return torch.bincount(index, minlength=self.n_experts)

    def detach(self) -> Routing:
        return Routing(self.expert_index, self.weight.detach(), self.kept, self.probs.detach(),
                       self.logits.detach(), self.capacity)


@dataclass
class ExpertChoiceRouting:
    """Expert choice: ``token_index`` (E, C) long, the tokens each expert took, best first; ``weight`` (E, C)
    float32, their router probabilities; ``probs``, ``logits`` (N, E) float32."""
    token_index: torch.Tensor
    weight: torch.Tensor
    probs: torch.Tensor
    logits: torch.Tensor

    capacity = property(lambda self: self.token_index.shape[1])

    def experts_per_token(self) -> torch.Tensor:
        """``(N,)`` long: how many experts took each token (0: it skips the layer)."""
        return torch.bincount(self.token_index.reshape(-1), minlength=self.probs.shape[0])

    def detach(self) -> ExpertChoiceRouting:
        return ExpertChoiceRouting(self.token_index, self.weight.detach(), self.probs.detach(), self.logits.detach())


@dataclass
class MoEStats:
    """One forward pass: ``tokens_per_expert`` (E,) slots routed (before capacity) and ``kept_per_expert``
    processed; ``dropped_share`` of the slots (expert choice: of the tokens no expert took); ``router_entropy``,
    the mean entropy of a token's router distribution in nats (log E: undecided); ``balance_loss`` and
    ``z_loss`` unscaled, with gradients (balance 0 for expert choice); ``aux_loss``; ``capacity``; ``routing``."""
    tokens_per_expert: torch.Tensor
    kept_per_expert: torch.Tensor
    dropped_share: float
    router_entropy: float
    balance_loss: torch.Tensor
    z_loss: torch.Tensor
    aux_loss: torch.Tensor
    capacity: int | None = None
    routing: Routing | ExpertChoiceRouting | None = field(default=None, repr=False)

    n_experts = property(lambda self: self.tokens_per_expert.numel())
    max_over_mean = property(lambda self: load_max_over_mean(self.tokens_per_expert))
    load_entropy = property(lambda self: load_entropy(self.tokens_per_expert))


# --------------------------------------------------------------------------- routing, capacity, losses
def expert_capacity(n_tokens: int, n_experts: int, top_k: int = 1, capacity_factor: float | None = 1.0) -> int | None:
    """Slots per expert, ``ceil(capacity_factor · n_tokens · top_k / n_experts)`` (``None``: dropless), the
    product rounded to 6 decimals first so that 1.1 · 100 / 10 gives 11, not 12."""
    validate.non_negative_int("n_tokens", n_tokens)
    validate.positive_int("n_experts", n_experts)
    validate.int_in_range("top_k", top_k, 1, n_experts)
    if capacity_factor is None:
        return None
    return math.ceil(round(validate.positive_float("capacity_factor", capacity_factor) * n_tokens * top_k
                           / n_experts, 6))


def biased_top_k(scores: torch.Tensor, bias: torch.Tensor, top_k: int,
                 renormalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3: choose the top k of ``scores + bias`` (``bias`` (E,)), weight them by the unbiased scores
    (divided by their sum when ``renormalise`` and k ≥ 2). ``(weight, expert_index)``, both ``(N, k)``."""
    validate.float_tensor("scores", scores, min_dims=2)
    validate.int_in_range("top_k", top_k, 1, scores.shape[-1])
    if not isinstance(bias, torch.Tensor) or bias.shape != scores.shape[-1:]:
        raise ValueError(f"bias must be a tensor of shape ({scores.shape[-1]},), got "
                         f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    index = torch.topk(scores + bias.to(scores.dtype), top_k, dim=-1).indices
    weight = scores.gather(-1, index)
    return (weight / weight.sum(-1, keepdim=True) if renormalise and top_k >= 2 else weight), index


def bias_update_step(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    """Loss-free balancing's step, ``bias + γ · sign(mean load − load)`` (both (E,)): an expert above the mean
    load goes down by γ, one below it up by γ, one at the mean stays. A new tensor."""
    load = load.to(torch.float64)
    return bias + validate.non_negative_float("gamma", gamma) * torch.sign(load.mean() - load).to(bias.dtype)


def bias_trajectory(loads: torch.Tensor, gamma: float) -> torch.Tensor:
    """Loss-free balancing replayed: ``loads`` ``(steps, E)``, the slots each expert got at every step, -> the
    bias ``(steps + 1, E)`` float64 before the first step (zeros) and after each ``bias_update_step``, as
    ``MoE.update_selection_bias`` moves it when it starts at zero."""
    bias = [torch.zeros(loads.shape[-1], dtype=torch.float64)]
    for load in loads:
        bias.append(bias_update_step(bias[-1], load, gamma))
    return torch.stack(bias)


def arrival_rank(expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Each slot's place in its expert's queue (0 = first); slots arrive choice by choice and, within a choice,
    in token order (GShard). ``expert_index`` (N, k) or (N,) long -> the same shape; kept if rank < capacity."""
    index = expert_index[:, None] if expert_index.dim() == 1 else expert_index
    n, k = index.shape
    flat = index.t().reshape(-1)                          # (k·N,) in arrival order
    order = torch.argsort(flat, stable=True)              # grouped by expert, arrival order kept
    counts = torch.bincount(flat, minlength=n_experts)
    starts = torch.cumsum(counts, 0) - counts             # where each expert's group begins
    rank = torch.empty_like(flat)
    rank[order] = torch.arange(flat.numel(), device=flat.device) - starts[flat[order]]
    rank = rank.view(k, n).t()
    return rank[:, 0] if expert_index.dim() == 1 else rank


def load_balancing_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    """Switch's ``E · Σ_i f_i P_i`` without α: f_i, the share of the routed slots (``expert_index`` (N, k) or
    (N,)) on expert i, is a count (no gradient); P_i, the mean of ``probs`` (N, E), carries the gradient."""
    n_experts = probs.shape[-1]
    f = torch.bincount(expert_index.reshape(-1), minlength=n_experts).to(probs.dtype) / expert_index.numel()
    return n_experts * torch.sum(f * probs.mean(0))


def mixtral_balance_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    """One layer's balance loss as Hugging Face computes it for Mixtral: the k choices counted as k one-hots,
    not divided by k, so it is k at an even load. (Its ``load_balancing_loss_func`` also pools all layers'
    tokens into one loss for the whole model, where the course sums one loss per layer.)"""
    index = expert_index[:, None] if expert_index.dim() == 1 else expert_index
    tokens_per_expert = F.one_hot(index, probs.shape[-1]).float().mean(0)     # (k, E), rows sum to 1
    return probs.shape[-1] * torch.sum(tokens_per_expert * probs.mean(0)[None, :])


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE's z-loss, the mean over tokens of ``(logsumexp over experts of logits)²``; ``logits`` (N, E)."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def router_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of ``-Σ_i p_i log p_i`` in nats; ``probs`` (N, E)."""
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1).mean()


def load_max_over_mean(counts: torch.Tensor) -> float:
    """The busiest expert's load over the mean load, from (E,) counts: 1 = even, E = one expert takes all."""
    counts = counts.double()
    return float(counts.max() / counts.mean()) if counts.mean() > 0 else float("nan")


def load_entropy(counts: torch.Tensor) -> float:
    """Entropy of the load shares over experts divided by log E: 1 = even, 0 = one expert takes all."""
    counts = counts.double()
    if counts.sum() == 0 or counts.numel() < 2:
        return float("nan") if counts.sum() == 0 else 1.0
    share = counts[counts > 0] / counts.sum()
    return float(-(share * share.log()).sum() / math.log(counts.numel()))


# --------------------------------------------------------------------------- the layer
class MoE(nn.Module):
    """Mixture-of-experts FFN: ``(..., d_model) -> ((..., d_model), MoEStats)``. ``n_experts`` E and ``top_k`` k
    count full-width experts (expert choice: k sizes C); ``d_ff``: an expert's width (default: the ``variant``'s);
    ``capacity_factor=None``: dropless (expert choice reads 1.0); ``balance_coef`` α (Switch: 1e-2); ``z_coef``
    (ST-MoE: 1e-3). Once built, ``n_experts``, ``top_k`` and ``d_ff`` describe the *routed* experts (m·E − s,
    m·k − s, d_ff / m); ``shared`` is the always-on FFN of the shared experts (``None`` without them)."""

    def __init__(self, d_model: int, n_experts: int, top_k: int = 1, *, d_ff: int | None = None,
                 variant: str = "swiglu", bias: bool = False, capacity_factor: float | None = None,
                 router: str = "token", jitter: float = 0.0, renormalise: bool = True,
                 balance_coef: float = 0.01, z_coef: float = 0.001, granularity: int = 1, n_shared: int = 0,
                 score: str = "softmax", bias_update: float = 0.0, noisy: bool = False) -> None:
        super().__init__()
        self.d_model = validate.positive_int("d_model", d_model)
        validate.int_in_range("top_k", top_k, 1, validate.positive_int("n_experts", n_experts))
        self.variant = validate.one_of("variant", variant, VARIANTS)
        self.capacity_factor = (None if capacity_factor is None
                                else validate.positive_float("capacity_factor", capacity_factor))
        self.router_type = validate.one_of("router", router, ROUTERS)
        self.jitter = validate.probability("jitter", jitter)
        for name, flag in (("renormalise", renormalise), ("noisy", noisy)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r} ({type(flag).__name__})")
        self.renormalise, self.noisy = renormalise, noisy
        self.balance_coef = validate.non_negative_float("balance_coef", balance_coef)
        self.z_coef = validate.non_negative_float("z_coef", z_coef)
        self.score = validate.one_of("score", score, SCORES)
        self.bias_update = validate.non_negative_float("bias_update", bias_update)
        # DeepSeekMoE's counting: m·E experts of width d_ff / m; s of them shared; m·k − s routed per token
        self.granularity = m = validate.positive_int("granularity", granularity)
        self.n_shared = s = validate.non_negative_int("n_shared", n_shared)
        if s >= m * n_experts or s >= m * top_k:
            raise ValueError(f"n_shared={s} leaves the router nothing to choose: with granularity={m} the layer has "
                             f"{m * n_experts} experts and a token uses {m * top_k}, so n_shared must be at most "
                             f"{min(m * n_experts, m * top_k) - 1}")
        if d_ff is None:
            d_ff = matched_gated_width(d_model) if VARIANTS[variant][1] else 4 * d_model
        validate.positive_int("d_ff", d_ff)
        if d_ff % m:
            raise ValueError(f"d_ff must be divisible by granularity={m} (experts of width d_ff / m), got d_ff={d_ff}")
        self.n_experts, self.top_k, self.d_ff = m * n_experts - s, m * top_k - s, d_ff // m
        self.router = nn.Linear(d_model, self.n_experts, bias=False)
        self.experts = nn.ModuleList(FFN.from_variant(variant, d_model, self.d_ff, bias=bias)
                                     for _ in range(self.n_experts))
        self.shared = FFN.from_variant(variant, d_model, s * self.d_ff, bias=bias) if s else None
        self.noise = nn.Linear(d_model, self.n_experts, bias=False) if noisy else None
        if noisy:                                           # zero at first (Shazeer et al. 2017): std softplus(0)
            nn.init.zeros_(self.noise.weight)
        self.register_buffer("selection_bias", torch.zeros(self.n_experts))
        self._load_since_update = torch.zeros(self.n_experts, dtype=torch.long)

    n_total_experts = property(lambda self: self.n_experts + self.n_shared, doc="routed plus shared experts")
    active_experts = property(lambda self: self.top_k + self.n_shared, doc="experts each token runs through")

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, d) -> (N, E)`` in float32; in training mode with ``jitter`` on the input and ``noisy`` noise."""
        x32 = x.float()
        if self.training and self.jitter > 0:
            x32 = x32 * torch.empty_like(x32).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        logits = F.linear(x32, self.router.weight.float())
        if self.training and self.noise is not None:
            logits = logits + torch.randn_like(logits) * F.softplus(F.linear(x32, self.noise.weight.float()))
        return logits

    def _scores(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits, scores that choose and weight, probs for the statistics)``, all (N, E) float32."""
        logits = self.router_logits(self._flat(x))
        if self.score == "softmax":
            return logits, (probs := torch.softmax(logits, dim=-1)), probs
        affinity = torch.sigmoid(logits)
        return logits, affinity, affinity / affinity.sum(-1, keepdim=True)

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        return validate.float_tensor("x", x, last_dim=self.d_model).reshape(-1, self.d_model)

    def route(self, x: torch.Tensor) -> Routing:
        """Token-choice routing of ``x`` ``(N, d_model)`` (leading dimensions flattened), whatever ``router``."""
        logits, scores, probs = self._scores(x)
        weight, index = biased_top_k(scores, self.selection_bias, self.top_k, self.renormalise)
        cap = expert_capacity(index.shape[0], self.n_experts, self.top_k, self.capacity_factor)
        kept = torch.ones_like(index, dtype=torch.bool) if cap is None else arrival_rank(index, self.n_experts) < cap
        return Routing(index, weight, kept, probs, logits, cap)

    def route_expert_choice(self, x: torch.Tensor) -> ExpertChoiceRouting:
        """Expert choice: each expert takes the ``C = min(ceil(c · N · k / E), N)`` tokens it scores highest."""
        logits, scores, probs = self._scores(x)
        n = logits.shape[0]
        cap = min(expert_capacity(n, self.n_experts, self.top_k, self.capacity_factor or 1.0), n)
        weight, token_index = torch.topk(scores.t(), cap, dim=-1)                 # (E, C)
        return ExpertChoiceRouting(token_index, weight, probs, logits)

    def update_selection_bias(self) -> torch.Tensor | None:
        """After the optimizer step: ``selection_bias += γ · sign(mean load − load)`` with the slots routed in
        training since the last call; returns that (E,) load (``None``: γ = 0 or no training pass)."""
        load, self._load_since_update = self._load_since_update, torch.zeros_like(self._load_since_update)
        if self.bias_update == 0 or int(load.sum()) == 0:
            return None
        with torch.no_grad():
            self.selection_bias.copy_(bias_update_step(self.selection_bias, load, self.bias_update))
        return load

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, MoEStats]:
        """``x`` ``(..., d_model)`` -> the output, same shape, and the ``MoEStats`` record."""
        flat, rows = self._flat(x), None if torch.is_grad_enabled() else INFERENCE_ROWS
        if self.router_type == "token":
            r = self.route(flat)
            y = dispatch(flat, r, self.experts, rows)
            balance, z, loads = load_balancing_loss(r.probs, r.expert_index), router_z_loss(r.logits), None
            dropped = 1.0 - int(r.kept.sum()) / r.kept.numel() if r.kept.numel() else 0.0
            if self.training:
                self._load_since_update = self._load_since_update + r.tokens_per_expert().cpu()
        else:
            r = self.route_expert_choice(flat)
            loads = torch.full((self.n_experts,), r.capacity, dtype=torch.long)      # each expert's C tokens
            y = _run_blocks(flat, r.token_index.reshape(-1), r.weight.reshape(-1), loads, self.experts, rows)
            balance, z = torch.zeros((), device=flat.device), router_z_loss(r.logits)
            dropped = float((r.experts_per_token() == 0).float().mean())
        with torch.no_grad():
            routed = r.tokens_per_expert() if loads is None else loads
            kept = r.tokens_per_expert(kept_only=True) if loads is None else loads.clone()
            entropy = float(router_entropy(r.probs))
        if self.shared is not None:
            y = y + self.shared(flat).to(y.dtype)
        return y.reshape(x.shape), MoEStats(routed, kept, dropped, entropy, balance, z,
                                            self.balance_coef * balance + self.z_coef * z, r.capacity, r.detach())

    def extra_repr(self) -> str:
        options = {"granularity": 1, "n_shared": 0, "score": "softmax", "bias_update": 0.0, "noisy": False}
        return (f"d_model={self.d_model}, n_experts={self.n_experts}, top_k={self.top_k}, router={self.router_type}, "
                f"capacity_factor={self.capacity_factor}"
                + "".join(f", {k}={getattr(self, k)}" for k, v in options.items() if getattr(self, k) != v))


def update_selection_biases(model: nn.Module) -> int:
    """``update_selection_bias()`` on every ``MoE`` in ``model``; returns how many layers moved their bias."""
    return sum(m.update_selection_bias() is not None for m in model.modules() if isinstance(m, MoE))


# --------------------------------------------------------------------------- dispatch
def dispatch(x: torch.Tensor, routing: Routing, experts: Sequence[nn.Module],
             rows_per_call: int | None = None) -> torch.Tensor:
    """Sort, gather, run, combine: ``x`` (N, d) -> (N, d) for a token-choice ``routing``. The kept slots are
    sorted by expert (stably: token order survives inside an expert), each expert runs once on the block of its
    tokens (``rows_per_call`` rows at a time, if given), and its weighted outputs are added into their tokens'
    rows (in at least float32). The Python loop runs over the experts, never over tokens."""
    n, k = routing.expert_index.shape
    token = torch.arange(n, device=x.device).repeat_interleave(k)       # (N·k,) the token of each slot
    expert, weight = routing.expert_index.reshape(-1), routing.weight.reshape(-1)
    if routing.capacity is not None:                                    # drop the slots that found no room
        keep = routing.kept.reshape(-1)
        token, expert, weight = token[keep], expert[keep], weight[keep]
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=len(experts))
    return _run_blocks(x, token[order], weight[order], counts, experts, rows_per_call)


def _run_blocks(x: torch.Tensor, token: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor,
                experts: Sequence[nn.Module], rows_per_call: int | None = None) -> torch.Tensor:
    """``y[token[i]] += weight[i] · expert(x[token[i]])`` for slots ``i`` sorted by expert, ``counts[e]`` each."""
    gathered = x.index_select(0, token)                                 # the experts' blocks, one after another
    acc = torch.promote_types(x.dtype, torch.float32)
    y = torch.zeros(x.shape, dtype=acc, device=x.device)
    start = 0
    for e, end in enumerate(torch.cumsum(counts, 0).tolist()):
        for first in range(start, end, rows_per_call or end - start or 1):
            rows = slice(first, min(end, first + (rows_per_call or end)))
            y.index_add_(0, token[rows], experts[e](gathered[rows]).to(acc) * weight[rows, None].to(acc))
        start = end
    return y.to(x.dtype)


def moe_forward_loop(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The readable reference for a token-choice ``MoE`` without shared experts: one boolean mask per (expert,
    choice), scanning all N tokens E·k times. ``(..., d_model) -> (..., d_model)``."""
    if moe.router_type != "token":
        raise ValueError(f"moe_forward_loop is the reference for token-choice routing; got a layer with "
                         f"router={moe.router_type!r}")
    flat = moe._flat(x)
    routing = moe.route(flat)
    acc = torch.promote_types(flat.dtype, torch.float32)
    y = torch.zeros(flat.shape, dtype=acc, device=flat.device)
    for e, expert in enumerate(moe.experts):
        for j in range(moe.top_k):
            mine = (routing.expert_index[:, j] == e) & routing.kept[:, j]   # tokens whose j-th choice is e
            if mine.any():
                y[mine] += routing.weight[mine, j, None].to(acc) * expert(flat[mine]).to(acc)
    return y.to(flat.dtype).reshape(x.shape)


# --------------------------------------------------------------------------- training helpers
def moe_layers_stats(model: nn.Module) -> list[MoEStats]:
    """The ``MoEStats`` of every MoE block of a ``TinyGPT`` after its last forward, bottom layer first."""
    return [r for r in model.ffn_records() if isinstance(r, MoEStats)]


def moe_aux_loss(model: nn.Module) -> torch.Tensor:
    """The sum of the model's MoE layers' ``aux_loss`` (pass as ``train_lm(extra_loss=...)``)."""
    stats = moe_layers_stats(model)
    if not stats:
        raise ValueError("model has no MoE layer records: run a forward pass through a model with MoE FFNs first")
    return torch.stack([s.aux_loss for s in stats]).sum()


class RoutingLog:
    """Routing per training step; pass as ``train_lm(..., on_step=log)``. Then ``counts`` (steps, layers, E)
    slots routed per expert; ``dropped`` (steps, layers); ``loss`` (steps,) as ``train_lm`` reports
    it (with the auxiliary losses), ``aux`` their sum over layers, ``lm_loss`` = loss − aux."""

    def __init__(self) -> None:
        self._counts, self._dropped, self._loss, self._aux = [], [], [], []

    def __call__(self, step: int, model: nn.Module, loss: float) -> None:
        stats = moe_layers_stats(model)
        self._counts.append(torch.stack([s.tokens_per_expert for s in stats]))
        self._dropped.append([s.dropped_share for s in stats])
        self._loss.append(loss)
        self._aux.append(sum(float(s.aux_loss.detach()) for s in stats))

    counts = property(lambda self: torch.stack(self._counts))
    dropped = property(lambda self: torch.tensor(self._dropped))
    loss = property(lambda self: torch.tensor(self._loss, dtype=torch.float64))
    aux = property(lambda self: torch.tensor(self._aux, dtype=torch.float64))
    lm_loss = property(lambda self: self.loss - self.aux, doc="(steps,) the next-token cross-entropy alone")

    def max_over_mean(self) -> torch.Tensor:
        """``(steps, layers)`` the busiest expert's load over the mean."""
        c = self.counts.double()
        return c.max(-1).values / c.mean(-1)

    def load_entropy(self) -> torch.Tensor:
        """``(steps, layers)`` entropy of the load over experts divided by log E."""
        share = self.counts.double() / self.counts.double().sum(-1, keepdim=True)
        return -(share * share.clamp_min(1e-300).log()).sum(-1) / math.log(share.shape[-1])


@dataclass
class BFloat16Changes:
    """``bfloat16_changes``' counts over its seeds. ``changed``: tokens whose top expert differs when everything runs
    in bfloat16; ``reordered`` (one per seed): those whose bfloat16 logits already order the experts differently (a
    float32 softmax of them keeps the change); the rest are ties, two probabilities rounded to the same bfloat16
    number (8 significant bits), where ``argmax`` takes the lower id."""
    changed: int
    reordered: list[int]
    n_tokens: int

    @property
    def about(self) -> int:
        """``changed`` rounded to tens: a token or two sit on rounding boundaries that differ between CPU kernels."""
        return round(self.changed, -1)


def bfloat16_changes(seeds: Sequence[int], n_tokens: int = 4096, d_model: int = 64, n_experts: int = 8) -> BFloat16Changes:
    """For each seed a fresh ``MoE(d_model, n_experts, 1)`` in bfloat16 and ``n_tokens`` Gaussian tokens: the top-1
    choice of ``MoE.route`` (float32 router) against logits and softmax computed in bfloat16 throughout."""
    seeds, changed, reordered = list(seeds), 0, []
    for seed in seeds:
        torch.manual_seed(seed)
        layer = MoE(d_model, n_experts, 1, d_ff=32).to(torch.bfloat16)
        x = torch.randn(n_tokens, d_model).to(torch.bfloat16)
        exact = layer.route(x).expert_index[:, 0]
        logits = x @ layer.router.weight.T
        change = torch.softmax(logits, dim=-1).argmax(-1) != exact
        changed += int(change.sum())
        reordered.append(int((change & (torch.softmax(logits.float(), dim=-1).argmax(-1) != exact)).sum()))
    return BFloat16Changes(changed, reordered, n_tokens * len(seeds))
