"""Checkers for the exercises of notebook 07 (the FFN in today's LLMs).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_v3_gates(v3_gates)``; it prints one line (not attempted / passed / what is wrong, with
the likely mistake when one explains every failing case). The hidden cases are seeded and cover
every branch the task allows: k = 1 and k = E, a bias that flips the choice, a zero bias, negative
logits, an expert exactly at the mean load, all experts equally loaded, shared experts up to the
limit, one seed value per model.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): the router is ``(E, d_model)``
and a batch of row vectors ``X`` ``(N, d_model)`` gives logits ``X W_rᵀ`` ``(N, E)``.

==============================  =====================================================  ==================
checker                         your function                                          returns
==============================  =====================================================  ==================
``check_v3_gates``              ``v3_gates(logits, bias, k)``                          ``(N, E)`` gates
``check_bias_step``             ``bias_step(bias, load, gamma)``                       ``(E,)`` new bias
``check_expert_combinations``   ``expert_combinations(n_experts, top_k, m, n_shared)``  int
``check_gap_in_errors``         ``gap_in_errors(a, b)``                                float
==============================  =====================================================  ==================
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import Case, Exercise


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- exercise 1: DeepSeek-V3's gates
def _dense_gates(index: torch.Tensor, weight: torch.Tensor, n_experts: int) -> torch.Tensor:
    gates = torch.zeros(index.shape[0], n_experts, dtype=weight.dtype)
    return gates.scatter(1, index, weight)


def _v3_gates(logits: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    affinity = torch.sigmoid(logits)
    index = torch.topk(affinity + bias, k, dim=-1).indices
    weight = affinity.gather(1, index)
    if k >= 2:                                # at k = 1 the course keeps σ itself (see helpers.moe)
        weight = weight / weight.sum(-1, keepdim=True)
    return _dense_gates(index, weight, logits.shape[-1])


def _v3_cases() -> list[Case]:
    g = _generator(701)
    cases = []
    for n, e, k, bias_kind, scale in [(6, 4, 2, "flip", 1.0), (5, 8, 1, "zero", 2.0), (1, 5, 5, "random", 1.0),
                                      (7, 6, 3, "random", 3.0), (4, 3, 2, "flip", -1.0), (9, 16, 4, "random", 0.5)]:
        logits = torch.randn(n, e, generator=g, dtype=torch.float64) * scale
        if scale < 0:
            logits = -logits.abs() - 1.0                              # all negative logits
        if bias_kind == "zero":
            bias = torch.zeros(e, dtype=torch.float64)
        elif bias_kind == "flip":                                     # large enough to change the choice
            bias = torch.zeros(e, dtype=torch.float64)
            bias[-1] = 0.9
            bias[0] = -0.9
        else:
            bias = 0.3 * torch.randn(e, generator=g, dtype=torch.float64)
        cases.append(Case((logits, bias, k), note=f"logits ({n}, {e}), {bias_kind} bias, k={k}"))
    return cases


def _v3_wrong(kind: str):
    def wrong(logits, bias, k):
        affinity = torch.sigmoid(logits)
        if kind == "softmax":
            affinity = torch.softmax(logits, -1)
        select = affinity if kind == "no bias" else affinity + bias
        index = torch.topk(select, k, dim=-1).indices
        source = affinity + bias if kind == "bias in weights" else affinity
        weight = source.gather(1, index)
        if kind != "no normalise" and (k >= 2 or kind == "normalise at k=1"):
            weight = weight / weight.sum(-1, keepdim=True)
        return _dense_gates(index, weight, logits.shape[-1])
    return wrong


check_v3_gates = Exercise(
    "Exercise 1 (DeepSeek-V3 gates)",
    _v3_gates,
    _v3_cases,
    [
        ("the bias went into the combine weights too; it only decides which experts are chosen. Take the "
         "weights from the unbiased affinities σ(logits) of the chosen experts.", _v3_wrong("bias in weights")),
        ("the bias was not used for the choice: pick the top k of σ(logits) + bias.", _v3_wrong("no bias")),
        ("the weights are not normalised: divide the chosen affinities by their sum.", _v3_wrong("no normalise")),
        ("DeepSeek-V3 scores with a sigmoid per expert, not a softmax over experts.", _v3_wrong("softmax")),
        ("with k = 1 the weight was normalised to 1, which would give the router no gradient; the course "
         "keeps the affinity σ(logit) of the one chosen expert and normalises only when k ≥ 2.",
         _v3_wrong("normalise at k=1")),
    ],
    atol=1e-9, rtol=1e-7,
)


# ---------------------------------------------------------------- exercise 2: one bias update
def _bias_step(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    load = load.to(torch.float64)
    return bias + gamma * torch.sign(load.mean() - load).to(bias.dtype)


def _bias_cases() -> list[Case]:
    g = _generator(702)
    cases = []
    for e, kind, gamma in [(4, "mixed", 0.1), (6, "one at mean", 0.01), (5, "equal", 0.05), (1, "equal", 0.2),
                           (8, "random", 0.001), (3, "zero load", 0.5)]:
        bias = 0.2 * torch.randn(e, generator=g, dtype=torch.float64)
        if kind == "mixed":
            load = torch.tensor([10, 2, 4, 4])
        elif kind == "one at mean":
            load = torch.tensor([1, 5, 3, 3, 2, 4])                   # mean 3: two experts exactly at it
        elif kind == "equal":
            load = torch.full((e,), 7)
        elif kind == "zero load":
            load = torch.tensor([0, 0, 12])
        else:
            load = torch.randint(0, 50, (e,), generator=g)
        cases.append(Case((bias, load, gamma), note=f"E={e}, {kind} load {load.tolist()}, gamma={gamma}"))
    return cases


check_bias_step = Exercise(
    "Exercise 2 (one bias update)",
    _bias_step,
    _bias_cases,
    [
        ("the sign is reversed: an over-loaded expert (load above the mean) must become *less* attractive, so "
         "its bias goes down by γ.", lambda b, l, g: b - g * torch.sign(l.double().mean() - l.double())),
        ("the step is proportional to the load gap; DeepSeek-V3 moves every bias by exactly ±γ (the sign "
         "of the gap), and leaves an expert exactly at the mean alone.",
         lambda b, l, g: b + g * (l.double().mean() - l.double())),
        ("an expert exactly at the mean load moved; sign(0) = 0 leaves it where it is.",
         lambda b, l, g: b + g * torch.where(l.double() > l.double().mean(), -1.0, 1.0).to(b.dtype)),
    ],
    atol=1e-12, rtol=1e-12,
)


# ---------------------------------------------------------------- exercise 3: combinations of experts
def _combinations(n_experts: int, top_k: int, m: int, n_shared: int) -> int:
    return math.comb(m * n_experts - n_shared, m * top_k - n_shared)


def _comb_cases() -> list[Case]:
    rows = [(16, 2, 1, 0), (16, 2, 4, 0), (16, 2, 4, 1), (8, 1, 1, 0), (8, 2, 2, 3), (64, 6, 1, 2), (4, 4, 2, 0),
            (8, 1, 4, 3)]
    return [Case(r, note=f"n_experts={r[0]}, top_k={r[1]}, m={r[2]}, n_shared={r[3]}") for r in rows]


check_expert_combinations = Exercise(
    "Exercise 3 (how many expert combinations)",
    _combinations,
    _comb_cases,
    [
        ("the shared experts are not choices: the router picks m·k − s of the m·N − s routed experts, so "
         "subtract n_shared from both.", lambda n, k, m, s: math.comb(m * n, m * k)),
        ("the order of the chosen experts does not matter (the output is a weighted sum): count subsets "
         "(math.comb), not ordered picks (math.perm).", lambda n, k, m, s: math.perm(m * n - s, m * k - s)),
        ("with granularity m a token visits m·k experts out of m·N, not k out of m·N.",
         lambda n, k, m, s: math.comb(m * n - s, k - s) if k > s else 0),
    ],
    kind="investigate",
)


# ---------------------------------------------------------------- exercise 4: a gap in standard errors
def _gap_in_errors(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    se = math.sqrt(float(a.var()) / a.numel() + float(b.var()) / b.numel())
    return float(b.mean() - a.mean()) / se


def _gap_cases() -> list[Case]:
    g = _generator(704)
    cases = []
    for na, nb_, shift in [(3, 3, 0.1), (5, 3, -0.05), (3, 4, 0.0), (8, 8, 0.3), (2, 6, 0.02)]:
        a = 0.2 + 0.02 * torch.randn(na, generator=g, dtype=torch.float64)
        b = 0.2 + shift + 0.03 * torch.randn(nb_, generator=g, dtype=torch.float64)
        cases.append(Case((a, b), note=f"{na} runs vs {nb_} runs, true shift {shift}"))
    return cases


def _gap_wrong(kind: str):
    def wrong(a, b):
        a, b = a.double(), b.double()
        if kind == "ddof0":
            se = math.sqrt(float(a.var(correction=0)) / a.numel() + float(b.var(correction=0)) / b.numel())
        elif kind == "sd not se":
            se = math.sqrt(float(a.var()) + float(b.var()))
        else:
            se = math.sqrt(float(a.var()) / a.numel() + float(b.var()) / b.numel())
        diff = float(a.mean() - b.mean()) if kind == "sign" else float(b.mean() - a.mean())
        return diff / se
    return wrong


check_gap_in_errors = Exercise(
    "Exercise 4 (a gap in standard errors)",
    _gap_in_errors,
    _gap_cases,
    [
        ("the sign is reversed: return mean(b) − mean(a).", _gap_wrong("sign")),
        ("use the sample variance (divide by n − 1, torch's default `var()`): with 3 runs the difference "
         "matters.", _gap_wrong("ddof0")),
        ("that divides by the spread of single runs; the uncertainty of a *mean* of n runs is sd/√n, so the "
         "standard error of the gap is √(sd_a²/n_a + sd_b²/n_b).", _gap_wrong("sd not se")),
    ],
    atol=1e-9, rtol=1e-7, kind="investigate",
)


EXERCISES = [check_v3_gates, check_bias_step, check_expert_combinations, check_gap_in_errors]
