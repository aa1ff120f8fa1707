"""Checkers for the exercises of notebook 05 (mixture of experts).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_moe_forward(moe_forward)``, and it prints one line (not attempted /
passed / what is wrong, with the likely mistake when one explains every failing case).
The hidden cases come from seeded generators and cover every branch the task allows:
k = 1 and k = E, an expert nobody chooses, the last expert, a batch of one, ties that
any tie-break resolves to the same answer, all-negative logits, logits that overflow
``exp`` in float32.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): an expert's ``W1``
and ``W3`` are ``(d_ff, d_model)``, ``W2`` is ``(d_model, d_ff)``; the router (and the
noise projection of noisy gating) is ``(E, d_model)``; a batch of row vectors ``X``
``(N, d_model)`` gives logits ``X W_rᵀ`` ``(N, E)``.

===============================  ================================================================  =====================
checker                          your function                                                     returns
===============================  ================================================================  =====================
``check_moe_forward``            ``moe_forward(x, w_router, w1, w3, w2, k)``                         ``(N, d_model)``
``check_capacity_keep``          ``capacity_keep(expert_index, n_experts, capacity_factor)``         ``(N, k)`` bool
``check_balance_loss``           ``balance_loss(probs, expert_index)``                               scalar tensor
``check_z_loss``                 ``z_loss(logits)``                                                  scalar tensor
``check_noisy_top_k``            ``noisy_top_k_gates(x, w_gate, w_noise, noise, k)``                 ``(N, E)`` gates
``check_later_tokens``           ``changed_by_later_tokens(expert_index, n_experts, capacity_factor)``  ``(N,)`` bool
===============================  ================================================================  =====================

Shapes: ``x`` ``(N, d)``; ``w_router``, ``w_gate``, ``w_noise`` ``(E, d)``; ``w1``, ``w3``
``(E, d_ff, d)`` (one ``W1``/``W3`` per expert); ``w2`` ``(E, d, d_ff)``; ``expert_index``
``(N, k)`` long, best choice first; ``probs`` ``(N, E)``; ``logits`` ``(N, E)``; ``noise`` ``(N, E)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.exercises.engine import Case, Exercise

def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _skewed_choices(g: torch.Generator, n: int, n_experts: int, k: int) -> torch.Tensor:
    """``(N, k)`` distinct expert ids per row, drawn with uneven popularity, so that some experts overflow."""
    popularity = torch.rand(n_experts, generator=g) ** 3 + 0.02
    return torch.stack([torch.multinomial(popularity, k, replacement=False, generator=g) for _ in range(n)])


# ---------------------------------------------------------------- exercise 1: the MoE forward from scratch
def _swiglu_all(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Every expert on every token: ``(E, N, d)``, expert e's output ``W2_e (silu(W1_e x) ⊙ W3_e x)``."""
    h = F.silu(torch.einsum("nd,efd->enf", x, w1)) * torch.einsum("nd,efd->enf", x, w3)
    return torch.einsum("enf,edf->end", h, w2)


def _combine(x, w1, w3, w2, weight, index, skip_last=False):
    """``y[n] = Σ_j weight[n, j] · FFN_{index[n, j]}(x[n])`` computed densely (every expert on every token)."""
    outs = _swiglu_all(x, w1, w3, w2)                                 # (E, N, d)
    if skip_last:
        outs = outs.clone()
        outs[-1] = 0
    tokens = torch.arange(x.shape[0])
    return sum(weight[:, j, None] * outs[index[:, j], tokens] for j in range(index.shape[1]))


def _route(x, w_router, k, *, renormalise_k1=False, renormalise=True, dim=-1):
    probs = torch.softmax(x @ w_router.T, dim=dim)
    weight, index = torch.topk(probs, k, dim=-1)
    if renormalise and (k >= 2 or renormalise_k1):
        weight = weight / weight.sum(-1, keepdim=True)
    return weight, index


def _moe_forward(x: torch.Tensor, w_router: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
                 k: int) -> torch.Tensor:
    weight, index = _route(x, w_router, k)
    return _combine(x, w1, w3, w2, weight, index)


def _moe_case(g, n, d, n_experts, d_ff, k, *, starve=None, favour=None, duplicate=None, note):
    x = torch.randn(n, d, generator=g)
    w_router = torch.randn(n_experts, d, generator=g) / math.sqrt(d)
    w1 = torch.randn(n_experts, d_ff, d, generator=g) / math.sqrt(d)
    w3 = torch.randn(n_experts, d_ff, d, generator=g) / math.sqrt(d)
    w2 = torch.randn(n_experts, d, d_ff, generator=g) / math.sqrt(d_ff)
    if starve is not None or favour is not None:
        x[:, 0] = 1.0                                       # a constant feature the router can key on
        w_router[:, 0] = 0.0
        if starve is not None:
            w_router[starve, 0] = -20.0                     # this expert is never among the top k
        if favour is not None:
            w_router[favour, 0] = 20.0                      # this expert is everyone's first choice
    if duplicate is not None:                               # two identical experts: their logits tie exactly
        a, b = duplicate
        for w in (w_router, w1, w3, w2):
            w[b] = w[a]
    return Case((x, w_router, w1, w3, w2, k), note=note)


def _moe_cases() -> list[Case]:
    g = _generator(501)
    return [
        _moe_case(g, 6, 4, 4, 6, 2, note="6 tokens, d=4, 4 experts of width 6, k=2"),
        _moe_case(g, 10, 8, 5, 12, 1, note="10 tokens, 5 experts, k=1 (Switch: weight = p, not renormalised)"),
        _moe_case(g, 7, 6, 3, 10, 3, note="7 tokens, 3 experts, k=3 (every expert, k = E)"),
        _moe_case(g, 12, 8, 6, 16, 2, starve=2, note="12 tokens, 6 experts, k=2, expert 2 receives no token"),
        _moe_case(g, 9, 8, 5, 12, 2, favour=4, note="9 tokens, 5 experts, k=2, the last expert is everyone's first choice"),
        _moe_case(g, 1, 8, 4, 12, 2, note="a batch of one token, 4 experts, k=2"),
        _moe_case(g, 8, 6, 4, 10, 2, duplicate=(1, 2),
                  note="8 tokens, 4 experts, k=2, experts 1 and 2 identical (their logits tie)"),
        _moe_case(g, 8, 6, 4, 10, 1, duplicate=(0, 3),
                  note="8 tokens, 4 experts, k=1, experts 0 and 3 identical (their logits tie)"),
        _moe_case(g, 33, 8, 8, 12, 3, note="33 tokens, 8 experts, k=3"),
    ]


def _moe_renormalised_at_k1(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k, renormalise_k1=True)
    return _combine(x, w1, w3, w2, weight, index)


def _moe_never_renormalised(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k, renormalise=False)
    return _combine(x, w1, w3, w2, weight, index)


def _moe_unweighted(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k)
    return _combine(x, w1, w3, w2, torch.ones_like(weight), index)


def _moe_gate_on_w3(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k)
    return _combine(x, w3, w1, w2, weight, index)


def _moe_softmax_over_tokens(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k, dim=0)
    return _combine(x, w1, w3, w2, weight, index)


def _moe_skips_last_expert(x, w_router, w1, w3, w2, k):
    weight, index = _route(x, w_router, k)
    return _combine(x, w1, w3, w2, weight, index, skip_last=True)


check_moe_forward = Exercise(
    "Exercise 1 (the MoE forward)",
    _moe_forward,
    _moe_cases,
    [
        ("with k = 1 the weight stays the router probability p_j (Switch); you renormalised it to 1, which "
         "also cuts the router off from the gradient. Renormalise only when k >= 2.", _moe_renormalised_at_k1),
        ("with k >= 2 the k chosen probabilities must be renormalised to sum to 1 (divide by their sum).",
         _moe_never_renormalised),
        ("each expert's output must be multiplied by its combine weight before the sum.", _moe_unweighted),
        ("the gate is on W1: FFN(x) = W2 (silu(W1 x) ⊙ W3 x); you put the SiLU on W3 x.", _moe_gate_on_w3),
        ("the softmax ran over the tokens (dim=0); each token needs a distribution over the experts (dim=-1).",
         _moe_softmax_over_tokens),
        ("the last expert never runs (a loop over range(E - 1)?): tokens routed to it get nothing from it.",
         _moe_skips_last_expert),
    ],
    kind="build",
)


# ---------------------------------------------------------------- exercise 2: capacity with GShard's priority
def _capacity(capacity_factor: float, n: int, k: int, n_experts: int) -> int:
    return math.ceil(capacity_factor * n * k / n_experts)


def _keep(expert_index, n_experts, capacity, *, token_major=False, reverse=False, inclusive=False):
    n, k = expert_index.shape
    order = [(t, j) for t in range(n) for j in range(k)] if token_major else \
        [(t, j) for j in range(k) for t in range(n)]
    if reverse:
        order = order[::-1]
    seen = [0] * n_experts
    kept = torch.zeros(n, k, dtype=torch.bool)
    for t, j in order:
        e = int(expert_index[t, j])
        kept[t, j] = seen[e] <= capacity if inclusive else seen[e] < capacity
        seen[e] += 1
    return kept


def _capacity_keep(expert_index: torch.Tensor, n_experts: int, capacity_factor: float) -> torch.Tensor:
    n, k = expert_index.shape
    return _keep(expert_index, n_experts, _capacity(capacity_factor, n, k, n_experts))


def _capacity_cases() -> list[Case]:
    g = _generator(502)
    cases = [Case((torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0], [2, 0], [0, 2]]), 3, 1.0),
                  note="6 tokens, k=2, 3 experts, capacity_factor=1.0")]
    # capacity factors exact in binary; most products c·N·k/E are not whole numbers, so ceil != floor
    for n, e, k, factor in [(10, 4, 1, 1.0), (20, 4, 2, 1.25), (30, 4, 1, 0.5), (17, 5, 2, 1.5), (25, 8, 3, 2.0),
                            (13, 3, 2, 0.75), (14, 6, 2, 0.5)]:
        cases.append(Case((_skewed_choices(g, n, e, k), e, factor),
                          note=f"{n} tokens, k={k}, {e} experts, capacity_factor={factor}"))
    last = torch.stack([torch.tensor([4, int(i) % 4]) for i in range(9)])        # every first choice: the last expert
    cases.append(Case((last, 5, 1.0), note="9 tokens, k=2, 5 experts, the last expert everyone's first choice"))
    cases.append(Case((torch.tensor([[2, 0]]), 3, 0.5), note="a batch of one token, k=2, 3 experts"))
    return cases


check_capacity_keep = Exercise(
    "Exercise 2 (capacity and dropped slots)",
    _capacity_keep,
    _capacity_cases,
    [
        ("you served each token's choices together (token 0's first and second, then token 1's, ...); GShard's "
         "priority serves every token's first choice before any second choice.",
         lambda idx, e, f: _keep(idx, e, _capacity(f, *idx.shape, e), token_major=True)),
        ("you kept the last arrivals; an expert serves slots in arrival order, so the first `capacity` slots "
         "are kept and the later ones dropped.",
         lambda idx, e, f: _keep(idx, e, _capacity(f, *idx.shape, e), reverse=True)),
        ("off by one: a slot is kept while its expert holds fewer than `capacity` slots (count < capacity, "
         "not <=).", lambda idx, e, f: _keep(idx, e, _capacity(f, *idx.shape, e), inclusive=True)),
        ("you rounded the capacity down; this course uses ceil(capacity_factor · N · k / E).",
         lambda idx, e, f: _keep(idx, e, math.floor(f * idx.shape[0] * idx.shape[1] / e))),
        ("the capacity counts slots, N · k of them: capacity = ceil(capacity_factor · N · k / E); you left out k.",
         lambda idx, e, f: _keep(idx, e, _capacity(f, idx.shape[0], 1, e))),
        ("the capacity factor is missing: capacity = ceil(capacity_factor · N · k / E).",
         lambda idx, e, f: _keep(idx, e, _capacity(1.0, *idx.shape, e))),
    ],
    kind="build",
)


# ---------------------------------------------------------------- exercise 3: load-balancing loss
def _slot_counts(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    return torch.bincount(expert_index.reshape(-1), minlength=probs.shape[-1]).to(probs.dtype)


def _balance_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    f = _slot_counts(probs, expert_index) / expert_index.numel()
    return probs.shape[-1] * (f * probs.mean(0)).sum()


def _balance_cases() -> list[Case]:
    g = _generator(503)
    cases = []
    for n, e, k, sharp in [(40, 8, 2, 3.0), (16, 4, 1, 1.0), (9, 3, 1, 0.5), (64, 6, 2, 2.0), (30, 8, 3, 1.0)]:
        probs = torch.softmax(sharp * torch.randn(n, e, generator=g), -1)
        cases.append(Case((probs, probs.topk(k, dim=-1).indices),
                          note=f"probs ({n}, {e}), each token's top-{k} experts"))
    probs = torch.softmax(torch.randn(20, 5, generator=g), -1)
    probs[:, 4] += 2.0                                        # the last expert is everyone's favourite
    probs = probs / probs.sum(-1, keepdim=True)
    cases.append(Case((probs, probs.topk(2, dim=-1).indices), note="probs (20, 5), the last expert chosen by all"))
    probs = torch.softmax(torch.randn(1, 4, generator=g), -1)
    cases.append(Case((probs, probs.topk(2, dim=-1).indices), note="a batch of one token, 4 experts, k=2"))
    return cases


def _f_from_probs(probs, expert_index):
    p = probs.mean(0)
    return probs.shape[-1] * (p * p).sum()


def _p_over_routed_slots_only(probs, expert_index):
    n_experts = probs.shape[-1]
    counts = _slot_counts(probs, expert_index)
    routed = torch.zeros(n_experts, dtype=probs.dtype).index_add_(
        0, expert_index.reshape(-1), probs.gather(1, expert_index).reshape(-1))
    p = routed / counts.clamp_min(1)
    return n_experts * (counts / expert_index.numel() * p).sum()


def _p_from_counts(probs, expert_index):
    f = _slot_counts(probs, expert_index) / expert_index.numel()
    return probs.shape[-1] * (f * f).sum()


check_balance_loss = Exercise(
    "Exercise 3 (load-balancing loss)",
    _balance_loss,
    _balance_cases,
    [
        ("f came from the probabilities; f_i is the share of the routed slots that went to expert i (count "
         "the top-k choices), P_i is the mean probability.", _f_from_probs),
        ("the factor E (number of experts) is missing: without it the loss is 1/E at perfect balance instead of 1.",
         lambda probs, idx: (_slot_counts(probs, idx) / idx.numel() * probs.mean(0)).sum()),
        ("f is a count, not a share: divide the number of slots per expert by the number of slots N · k.",
         lambda probs, idx: probs.shape[-1] * (_slot_counts(probs, idx) * probs.mean(0)).sum()),
        ("P summed over the tokens; P_i is the MEAN router probability of expert i (divide by N).",
         lambda probs, idx: probs.shape[-1] * (_slot_counts(probs, idx) / idx.numel() * probs.sum(0)).sum()),
        ("you divided the counts by N, not by the N · k slots: that is Hugging Face's Mixtral variant, whose "
         "value at balance is k instead of 1.",
         lambda probs, idx: probs.shape[-1] * (_slot_counts(probs, idx) / idx.shape[0] * probs.mean(0)).sum()),
        ("P_i averaged only over the slots routed to expert i; average expert i's probability over all N "
         "tokens.", _p_over_routed_slots_only),
        ("P came from the counts too (Σ f_i·f_i); P_i is the mean router probability of expert i over the "
         "tokens, the differentiable part that carries the gradient.", _p_from_counts),
    ],
    kind="build",
)


# ---------------------------------------------------------------- exercise 4: z-loss
def _z_loss(logits: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, dim=-1).square().mean()


def _z_cases() -> list[Case]:
    g = _generator(504)
    cases = [Case((torch.tensor([[0.0, 0.0], [1.0, -1.0]]),), note="the notebook's example (2 tokens, 2 experts)")]
    for n, e, scale, shift in [(6, 4, 1.0, 0.0), (10, 8, 3.0, 2.0), (5, 3, 0.5, -1.0)]:
        cases.append(Case((scale * torch.randn(n, e, generator=g) + shift,),
                          note=f"logits of shape ({n}, {e})"))
    cases.append(Case((torch.randn(8, 4, generator=g) + 100.0,),
                      note="float32 logits near +100 (exp overflows to inf)"))
    cases.append(Case((torch.randn(6, 5, generator=g) - 120.0,),
                      note="float32 logits near -120 (exp underflows to 0)"))
    cases.append(Case((torch.randn(4, 3, generator=g) + 800.0,),
                      note="float32 logits near +800 (exp overflows even in float64)"))
    cases.append(Case((torch.randn(7, 1, generator=g),), note="logits of shape (7, 1): a single expert"))
    return cases


def _z_naive(logits):
    return torch.log(torch.exp(logits).sum(-1)).square().mean()


check_z_loss = Exercise(
    "Exercise 4 (router z-loss)",
    _z_loss,
    _z_cases,
    [
        ("exp over- or underflowed on large logits: subtract each row's maximum before exponentiating and add it "
         "back after the log (that is what torch.logsumexp does).", _z_naive),
        ("you used the largest logit; the z-loss uses logsumexp over the experts (a smooth maximum).",
         lambda logits: logits.max(-1).values.square().mean()),
        ("you forgot to square the logsumexp.", lambda logits: torch.logsumexp(logits, -1).mean()),
        ("you summed over tokens; average over them (mean), so the loss does not grow with the batch.",
         lambda logits: torch.logsumexp(logits, -1).square().sum()),
        ("you squared the mean; take the mean of the squares: mean over tokens of (logsumexp)².",
         lambda logits: torch.logsumexp(logits, -1).mean().square()),
        ("logsumexp ran over the tokens (dim=0); it goes over the experts of each token (dim=-1).",
         lambda logits: torch.logsumexp(logits, 0).square().mean()),
    ],
    kind="build",
)


# ---------------------------------------------------------------- exercise 5: noisy top-k gating (Shazeer 2017)
def _gates(h: torch.Tensor, k: int, *, fill: float = -math.inf, select: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the k largest entries of each row of ``h`` (chosen from ``select`` if given), 0 elsewhere."""
    index = (h if select is None else select).topk(k, dim=-1).indices
    masked = torch.full_like(h, fill).scatter(-1, index, h.gather(-1, index))
    return torch.softmax(masked, dim=-1)


def _noisy_logits(x, w_gate, w_noise, noise, spread=F.softplus):
    return x @ w_gate.T + noise * spread(x @ w_noise.T)


def _noisy_top_k(x: torch.Tensor, w_gate: torch.Tensor, w_noise: torch.Tensor, noise: torch.Tensor,
                 k: int) -> torch.Tensor:
    return _gates(_noisy_logits(x, w_gate, w_noise, noise), k)


def _noisy_softmax_then_zero(x, w_gate, w_noise, noise, k):
    h = _noisy_logits(x, w_gate, w_noise, noise)
    probs = torch.softmax(h, dim=-1)
    index = h.topk(k, dim=-1).indices
    return torch.zeros_like(probs).scatter(-1, index, probs.gather(-1, index))


def _noisy_cases() -> list[Case]:
    g = _generator(505)

    def case(n, d, e, k, *, shift=0.0, zero_noise=False, note):
        x = torch.randn(n, d, generator=g)
        w_gate = torch.randn(e, d, generator=g) / math.sqrt(d)
        w_noise = torch.randn(e, d, generator=g) / math.sqrt(d)
        if shift:                                   # a constant feature that shifts every logit
            x[:, 0] = 1.0
            w_gate[:, 0] = shift
        noise = torch.zeros(n, e) if zero_noise else torch.randn(n, e, generator=g)
        return Case((x, w_gate, w_noise, noise, k), note=note)

    return [
        case(6, 4, 4, 2, note="6 tokens, d=4, 4 experts, k=2"),
        case(10, 8, 6, 1, note="10 tokens, 6 experts, k=1"),
        case(7, 6, 3, 3, note="7 tokens, 3 experts, k=3 (k = E: nothing masked)"),
        case(9, 8, 8, 2, shift=-12.0, note="9 tokens, 8 experts, k=2, every noisy logit negative"),
        case(8, 6, 5, 2, zero_noise=True, note="8 tokens, 5 experts, k=2, noise = 0"),
        case(1, 8, 4, 2, note="a batch of one token, 4 experts, k=2"),
        case(20, 8, 8, 3, note="20 tokens, 8 experts, k=3"),
    ]


check_noisy_top_k = Exercise(
    "Exercise 5 (noisy top-k gating)",
    _noisy_top_k,
    _noisy_cases,
    [
        ("you set the experts outside the top k to 0 before the softmax; they must be -inf, so that they get "
         "exactly 0 weight (a logit of 0 still gets weight, and beats kept logits that are negative).",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps), k, fill=0.0)),
        ("you took the softmax over all E experts and then zeroed the others; the softmax runs over the k kept "
         "experts only, so the kept gates sum to 1.", _noisy_softmax_then_zero),
        ("the noise is missing: H = x W_gateᵀ + noise ⊙ softplus(x W_noiseᵀ).",
         lambda x, wg, wn, eps, k: _gates(x @ wg.T, k)),
        ("the noise scale needs the softplus: noise ⊙ softplus(x W_noiseᵀ), which keeps the scale positive.",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps, spread=lambda v: v), k)),
        ("the noise scale comes from its own matrix: softplus(x W_noiseᵀ), not softplus(x W_gateᵀ).",
         lambda x, wg, wn, eps, k: _gates(x @ wg.T + eps * F.softplus(x @ wg.T), k)),
        ("you chose the experts by the clean logits x W_gateᵀ; the noisy logits H decide which k are kept.",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps), k, select=x @ wg.T)),
    ],
    kind="investigate",
)


# ---------------------------------------------------------------- exercise 6: do later tokens change earlier ones?
def _changed(expert_index, n_experts, capacity_factor, *, fixed_capacity=False, first_only=False,
             full_batch_drops=False):
    n, k = expert_index.shape
    full = _keep(expert_index, n_experts, _capacity(capacity_factor, n, k, n_experts))
    if full_batch_drops:
        return ~full.all(-1)
    changed = torch.zeros(n, dtype=torch.bool)
    for t in range(n):
        prefix = expert_index[: t + 1]
        cap = _capacity(capacity_factor, n if fixed_capacity else t + 1, k, n_experts)
        alone = _keep(prefix, n_experts, cap)[t]
        a, b = (alone[:1], full[t, :1]) if first_only else (alone, full[t])
        changed[t] = bool((a != b).any())
    return changed


def _changed_by_later_tokens(expert_index: torch.Tensor, n_experts: int, capacity_factor: float) -> torch.Tensor:
    return _changed(expert_index, n_experts, capacity_factor)


def _later_cases() -> list[Case]:
    g = _generator(506)
    cases = [Case((torch.tensor([[0, 1], [1, 0]]), 2, 0.5), note="the notebook's two tokens, k=2, capacity_factor=0.5")]
    for n, e, k, factor in [(12, 4, 1, 1.0), (16, 4, 2, 1.0), (20, 5, 2, 1.25), (15, 3, 1, 0.75), (24, 6, 3, 1.5)]:
        cases.append(Case((_skewed_choices(g, n, e, k), e, factor),
                          note=f"{n} tokens, k={k}, {e} experts, capacity_factor={factor}"))
    cases.append(Case((torch.tensor([[1, 2]]), 3, 1.0), note="a batch of one token"))
    cases.append(Case((torch.arange(8).remainder(4)[:, None], 4, 2.0), note="8 tokens spread evenly, k=1, nothing dropped"))
    return cases


check_later_tokens = Exercise(
    "Exercise 6 (do later tokens matter?)",
    _changed_by_later_tokens,
    _later_cases,
    [
        ("the shorter batch has its own capacity: C = ceil(c · n · k / E) with n = t + 1 tokens, not the full "
         "batch's N.", lambda idx, e, f: _changed(idx, e, f, fixed_capacity=True)),
        ("you compared only the first choice; a token's later slots can change too (compare its whole row of "
         "the keep mask).", lambda idx, e, f: _changed(idx, e, f, first_only=True)),
        ("you returned the tokens that lose a slot in the full batch; the question is whether their slots "
         "differ from what they get in the batch that ends with them.",
         lambda idx, e, f: _changed(idx, e, f, full_batch_drops=True)),
    ],
    kind="investigate",
)

EXERCISES = [check_moe_forward, check_capacity_keep, check_balance_loss, check_z_loss, check_noisy_top_k,
             check_later_tokens]
