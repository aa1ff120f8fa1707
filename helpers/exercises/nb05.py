"""Checkers for the exercises of notebook 05 (mixture of experts).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_top_k_route(top_k_route)``, and it prints one line (not attempted /
passed / what is wrong, with the likely mistake). The hidden cases come from
seeded generators with varied numbers of tokens, experts and k.

===========================  ==================================================  ==============================
checker                      your function                                       returns
===========================  ==================================================  ==============================
``check_top_k_route``        ``top_k_route(logits, k)``, logits ``(N, E)``       ``(weight, index)``, ``(N, k)``
``check_capacity_keep``      ``capacity_keep(expert_index, n_experts, factor)``  ``(N,)`` bool
``check_balance_loss``       ``balance_loss(probs, expert_index)``               scalar tensor
``check_z_loss``             ``z_loss(logits)``                                  scalar tensor
``check_routing_histogram``  ``routing_histogram(expert_index, n_experts)``      ``(E,)`` long counts
===========================  ==================================================  ==============================
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import Case, Exercise


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high] inclusive."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _skewed_choices(g: torch.Generator, n: int, n_experts: int) -> torch.Tensor:
    """``(N,)`` expert ids drawn with uneven popularity, so that some experts overflow."""
    popularity = torch.rand(n_experts, generator=g) ** 3 + 0.02
    return torch.multinomial(popularity, n, replacement=True, generator=g)


# ---------------------------------------------------------------- exercise 1: top-k routing
def _top_k_route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits, dim=-1)
    weight, index = torch.topk(probs, k, dim=-1)
    return weight / weight.sum(-1, keepdim=True), index


def _route_cases() -> list[Case]:
    g = _generator(501)
    cases = [Case((torch.tensor([[2.0, 0.5, 1.0, -1.0], [0.0, 3.0, 1.0, 2.5]]), 2),
                  note="the notebook's example (2 tokens, 4 experts, k=2)")]
    for n, e, k in [(7, 5, 2), (12, 8, 3), (5, 6, 2), (9, 3, 3)]:
        cases.append(Case((2.0 * torch.randn(n, e, generator=g), k),
                          note=f"logits of shape ({n}, {e}), k={k}"))
    return cases


def _route_not_renormalised(logits, k):
    return torch.topk(torch.softmax(logits, -1), k, dim=-1)


def _route_softmax_over_tokens(logits, k):
    weight, index = torch.topk(torch.softmax(logits, dim=0), k, dim=-1)
    return weight / weight.sum(-1, keepdim=True), index


def _route_worst_first(logits, k):
    weight, index = _top_k_route(logits, k)
    return weight.flip(-1), index.flip(-1)


def _route_logits_not_probs(logits, k):
    weight, index = torch.topk(logits, k, dim=-1)
    return weight / weight.sum(-1, keepdim=True), index


check_top_k_route = Exercise(
    "Exercise 1 (top-k routing)",
    _top_k_route,
    _route_cases,
    [
        ("you forgot to renormalise: divide the k chosen probabilities by their sum, so each token's "
         "weights add up to 1.", _route_not_renormalised),
        ("the softmax ran over the tokens (dim=0); each token needs a distribution over the experts (dim=-1).",
         _route_softmax_over_tokens),
        ("the experts come worst first; return them best first (torch.topk sorts them that way).",
         _route_worst_first),
        ("you normalised raw logits; turn them into probabilities with a softmax first (logits can be "
         "negative, probabilities cannot).", _route_logits_not_probs),
    ],
)


# ---------------------------------------------------------------- exercise 2: capacity
def _capacity_keep(expert_index: torch.Tensor, n_experts: int, capacity_factor: float) -> torch.Tensor:
    n = expert_index.shape[0]
    capacity = math.ceil(capacity_factor * n / n_experts)
    seen = torch.zeros(n_experts, dtype=torch.long)
    kept = torch.zeros(n, dtype=torch.bool)
    for t in range(n):
        e = int(expert_index[t])
        kept[t] = bool(seen[e] < capacity)
        seen[e] += 1
    return kept


def _capacity_cases() -> list[Case]:
    g = _generator(502)
    cases = [Case((torch.tensor([0, 1, 0, 0, 2, 0, 1, 1, 0, 2, 1, 0]), 3, 0.5),
                  note="the notebook's example (12 tokens, 3 experts, capacity_factor=0.5)")]
    # capacity factors whose products are exact in binary, with ceil != floor in most cases
    for n, e, factor in [(10, 4, 1.0), (20, 4, 1.25), (30, 4, 0.5), (17, 5, 1.5), (25, 8, 2.0), (13, 3, 0.75)]:
        cases.append(Case((_skewed_choices(g, n, e), e, factor),
                          note=f"{n} tokens, {e} experts, capacity_factor={factor}"))
    return cases


def _keep_with(capacity_of, order_reversed: bool = False, inclusive: bool = False):
    def wrong(expert_index, n_experts, capacity_factor):
        n = expert_index.shape[0]
        capacity = capacity_of(capacity_factor, n, n_experts)
        seen = [0] * n_experts
        kept = torch.zeros(n, dtype=torch.bool)
        tokens = range(n - 1, -1, -1) if order_reversed else range(n)
        for t in tokens:
            e = int(expert_index[t])
            kept[t] = seen[e] <= capacity if inclusive else seen[e] < capacity
            seen[e] += 1
        return kept
    return wrong


def _ceil_capacity(factor, n, e):
    return math.ceil(factor * n / e)


check_capacity_keep = Exercise(
    "Exercise 2 (capacity and dropped tokens)",
    _capacity_keep,
    _capacity_cases,
    [
        ("you kept the last arrivals; an expert serves tokens in order, so the first `capacity` tokens "
         "are kept and the later ones dropped.", _keep_with(_ceil_capacity, order_reversed=True)),
        ("off by one: a token is kept while its expert holds fewer than `capacity` tokens (count < capacity, "
         "not <=).", _keep_with(_ceil_capacity, inclusive=True)),
        ("you rounded the capacity down; this course uses ceil(capacity_factor · N / E).",
         _keep_with(lambda f, n, e: math.floor(f * n / e))),
        ("the capacity factor is missing: capacity = ceil(capacity_factor · N / E).",
         _keep_with(lambda f, n, e: math.ceil(n / e))),
    ],
)


# ---------------------------------------------------------------- exercise 3: load-balancing loss
def _balance_loss(probs: torch.Tensor, expert_index: torch.Tensor) -> torch.Tensor:
    n_experts = probs.shape[-1]
    f = torch.bincount(expert_index, minlength=n_experts).to(probs.dtype) / expert_index.shape[0]
    return n_experts * (f * probs.mean(0)).sum()


def _balance_cases() -> list[Case]:
    g = _generator(503)
    cases = []
    for n, e, sharp in [(16, 4, 1.0), (40, 8, 3.0), (9, 3, 0.5), (64, 6, 2.0)]:
        probs = torch.softmax(sharp * torch.randn(n, e, generator=g), -1)
        cases.append(Case((probs, probs.argmax(-1)), note=f"probs ({n}, {e}), each token's argmax expert"))
    probs = torch.softmax(torch.randn(30, 5, generator=g), -1)
    cases.append(Case((probs, torch.randint(0, 5, (30,), generator=g)), note="probs (30, 5), random experts"))
    return cases


def _f_from_probs(probs, expert_index):
    p = probs.mean(0)
    return probs.shape[-1] * (p * p).sum()


def _counts(probs, expert_index):
    return torch.bincount(expert_index, minlength=probs.shape[-1]).to(probs.dtype)


def _p_from_counts(probs, expert_index):
    f = _counts(probs, expert_index) / expert_index.shape[0]
    return probs.shape[-1] * (f * f).sum()


def _p_over_routed_tokens_only(probs, expert_index):
    n_experts = probs.shape[-1]
    counts = _counts(probs, expert_index)
    routed_sum = torch.zeros(n_experts, dtype=probs.dtype).index_add_(
        0, expert_index, probs.gather(1, expert_index[:, None])[:, 0])
    p = routed_sum / counts.clamp_min(1)
    return n_experts * (counts / expert_index.shape[0] * p).sum()


check_balance_loss = Exercise(
    "Exercise 3 (load-balancing loss)",
    _balance_loss,
    _balance_cases,
    [
        ("f came from the probabilities; f_i is the share of tokens actually routed to expert i (count "
         "the argmax choices), P_i is the mean probability.", _f_from_probs),
        ("the factor E (number of experts) is missing: without it the loss is 1/E at perfect balance instead of 1.",
         lambda probs, idx: (_counts(probs, idx) / idx.shape[0] * probs.mean(0)).sum()),
        ("f is a count, not a share: divide the number of tokens per expert by the number of tokens N.",
         lambda probs, idx: probs.shape[-1] * (_counts(probs, idx) * probs.mean(0)).sum()),
        ("P_i averaged only over the tokens routed to expert i; average expert i's probability over all N "
         "tokens.", _p_over_routed_tokens_only),
        ("P came from the counts too (Σ f_i·f_i); P_i is the mean router probability of expert i over the "
         "tokens, the differentiable part that carries the gradient.", _p_from_counts),
    ],
)


# ---------------------------------------------------------------- exercise 4: z-loss
def _z_loss(logits: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(logits, dim=-1).square().mean()


def _z_cases() -> list[Case]:
    g = _generator(504)
    cases = [Case((torch.tensor([[0.0, 0.0], [1.0, -1.0]]),), note="the notebook's example (2 tokens, 2 experts)")]
    for n, e, scale, shift in [(6, 4, 1.0, 0.0), (10, 8, 3.0, 2.0), (5, 3, 0.5, -1.0), (20, 16, 2.0, 5.0)]:
        cases.append(Case((scale * torch.randn(n, e, generator=g) + shift,),
                          note=f"logits of shape ({n}, {e})"))
    return cases


check_z_loss = Exercise(
    "Exercise 4 (router z-loss)",
    _z_loss,
    _z_cases,
    [
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
)


# ---------------------------------------------------------------- exercise 5: routing histogram
def _routing_histogram(expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    return torch.bincount(expert_index.reshape(-1), minlength=n_experts)


def _histogram_cases() -> list[Case]:
    g = _generator(505)
    cases = [Case((torch.tensor([[0, 2], [2, 1], [0, 1]]), 4), note="the notebook's example (3 tokens, k=2, 4 experts)")]
    for n, e, k in [(10, 5, 2), (25, 8, 2), (12, 6, 3), (30, 4, 2)]:
        # the last expert is never chosen, so it needs a bar of height 0
        index = torch.stack([torch.randperm(e - 1, generator=g)[:k] for _ in range(n)])
        cases.append(Case((index, e), note=f"expert_index ({n}, {k}), {e} experts"))
    return cases


check_routing_histogram = Exercise(
    "Exercise 5 (routing histogram)",
    _routing_histogram,
    _histogram_cases,
    [
        ("you counted only the first choice; every token sends k slots, count all of them.",
         lambda idx, e: torch.bincount(idx[:, 0], minlength=e)),
        ("the histogram is too short: experts nobody chose still get a bar of 0 (torch.bincount(..., "
         "minlength=n_experts)).", lambda idx, e: torch.bincount(idx.reshape(-1))),
        ("you returned shares; return the number of slots per expert (integers).",
         lambda idx, e: torch.bincount(idx.reshape(-1), minlength=e) / idx.numel()),
    ],
)

EXERCISES = [check_top_k_route, check_capacity_keep, check_balance_loss, check_z_loss, check_routing_histogram]
