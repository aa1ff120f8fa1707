"""Checkers for the exercises of notebook 07 (the FFN in today's LLMs).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_v3_gates(v3_gates)``; it prints one line (not attempted / passed / what is wrong, with
the likely mistake when one explains the answer). The hidden cases are fixed and cover the
extremes each statement allows:

* gates: k = 1 and k = E, a batch of one, a bias that flips the choice and one that does not,
  a choice decided by a margin of 1e-4, logits from −8 to 8 in one row and below 0.01 in another,
  all negative logits, equal scores inside the chosen set (no tie at the edge of a top k);
* bias step: one expert, all loads equal, experts exactly at the mean, a mean that is not a whole
  number (a floor-divided mean moves an expert it should not), experts at floor(mean) just below a
  mean of 8.125 (they move up), empty experts, loads from 0 to hundreds, biases of size 50 and 1e-9,
  γ from 1e-3 to 0.5;
* combinations: k = E, one routed choice left (s = m·k − 1), no shared experts, m = 1, and
  DeepSeek-V3's 256 experts (an exact integer of 15 digits);
* Welch's t: two runs per group, 2 against 8 runs, a group with no spread, values from 0.1 to 300,
  differences of 1e-9.

Tolerances: the float answers are compared to 1e-6 (relative and absolute), so the same logic in
float32 or float64 passes (also with every float64 input converted to float32), and every listed
mistake is off by far more. Exercise 2's hints credit the rule to Wang et al. (2024), whose
loss-free balancing DeepSeek-V3 adopts.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): the router is ``(E, d_model)``
and a batch of row vectors ``X`` ``(N, d_model)`` gives logits ``X W_rᵀ`` ``(N, E)``.

==============================  ========================================================  ======================
checker                         your function                                             returns
==============================  ========================================================  ======================
``check_v3_gates``              ``v3_gates(logits, bias, k)``                             ``(N, E)`` gates
``check_bias_step``             ``bias_step(bias, load, gamma)``                          ``(E,)`` new bias
``check_expert_combinations``   ``my_expert_combinations(n_experts, top_k, m, n_shared)``   int
``check_welch_t``               ``welch_t(a, b)``                                         ``(t, df)`` floats
==============================  ========================================================  ======================
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import Case, Exercise
from helpers.stats import welch

#: float answers: the same logic in float32 or float64 passes; every listed mistake is off by far more
ATOL, RTOL = 1e-6, 1e-6


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- exercise 1: DeepSeek-V3's gates
def _dense_gates(index: torch.Tensor, weight: torch.Tensor, n_experts: int) -> torch.Tensor:
    return torch.zeros(index.shape[0], n_experts, dtype=weight.dtype).scatter(1, index, weight)


def _v3_gates(logits: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    affinity = torch.sigmoid(logits)
    index = torch.topk(affinity + bias, k, dim=-1).indices
    weight = affinity.gather(1, index)
    if k >= 2:                                # at k = 1 the course keeps σ itself (Llama 4's top-1 router)
        weight = weight / weight.sum(-1, keepdim=True)
    return _dense_gates(index, weight, logits.shape[-1])


def _f64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def _v3_cases() -> list[Case]:
    g = _generator(701)
    cases = []

    def add(logits, bias, k, note):
        cases.append(Case((logits, bias, k), note=f"{note}, logits {tuple(logits.shape)}, k={k}"))

    # a bias that flips the choice (top-2), and the same row without bias
    logits = torch.randn(6, 4, generator=g, dtype=torch.float64)
    add(logits, _f64([-0.9, 0.0, 0.0, 0.9]), 2, "bias ±0.9 on experts 0 and 3")
    add(torch.randn(5, 8, generator=g, dtype=torch.float64) * 2.0, torch.zeros(8, dtype=torch.float64), 1,
        "zero bias")
    # k = 1 with a bias that changes the choice
    add(torch.randn(7, 6, generator=g, dtype=torch.float64), _f64([0.0, 0.5, 0.0, -0.5, 0.2, 0.0]), 1,
        "bias that moves top-1 choices")
    # a batch of one, k = E, two equal scores inside the chosen set
    add(_f64([[0.3, 0.3, -1.0, 2.0, 0.0]]), _f64([0.1, 0.1, 0.0, -0.2, 0.05]), 5, "one token, k = E")
    # saturated logits: σ(l + b) and σ(l) + b rank differently; every logit negative in another
    add(_f64([[6.0, 5.0, -6.0, 0.0], [5.5, 6.0, 0.2, -0.2], [-8.0, 8.0, 3.0, -3.0]]),
        _f64([0.0, 0.0, 0.3, 0.45]), 2, "saturated logits from -8 to 8, bias 0.3/0.45")
    add(-torch.rand(4, 3, generator=g, dtype=torch.float64) * 3.0 - 0.5, _f64([0.05, 0.0, -0.05]), 2,
        "all logits negative")
    # a choice decided by a margin of 1e-4: σ(0)+b_0 = 0.5 + 0.0101 vs σ(l_1) with l_1 = 0.04
    near = math.log((0.5101 - 1e-4) / (1 - (0.5101 - 1e-4)))
    add(_f64([[0.0, near, -2.0, -2.0], [0.0, near + 8e-4, -2.0, -2.0]]), _f64([0.0101, 0.0, 0.0, 0.0]), 1,
        "choice decided by a margin of 1e-4")
    # tiny logits (|logit| < 0.01), 1e-3 apart in each row, and a bias of 1e-5 steps: the top 4 by ≥ 1e-4
    tiny = torch.stack([torch.randperm(16, generator=g) for _ in range(6)]).double()
    add(1e-3 * (tiny - 7.5), 1e-5 * torch.arange(16, dtype=torch.float64), 4, "logits below 0.01")
    add(torch.randn(9, 16, generator=g, dtype=torch.float64) * 3.0, 0.3 * torch.randn(16, generator=g,
                                                                                        dtype=torch.float64),
        16, "k = E = 16")
    return cases


def _v3_wrong(kind: str):
    def wrong(logits, bias, k):
        affinity = torch.sigmoid(logits)
        if kind == "softmax":
            affinity = torch.softmax(logits, -1)
        if kind in ("bias inside sigmoid", "bias inside sigmoid, weights too"):
            select = torch.sigmoid(logits + bias)
        elif kind == "no bias":
            select = affinity
        elif kind == "bias subtracted":
            select = affinity - bias
        else:
            select = affinity + bias
        index = torch.topk(select, k, dim=-1).indices
        if kind == "bias in weights":
            source = affinity + bias
        elif kind == "bias inside sigmoid, weights too":
            source = select
        else:
            source = affinity
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
        ("the bias was added inside the sigmoid, σ(logits + bias); DeepSeek-V3 adds it to the affinity after the "
         "sigmoid, σ(logits) + bias, and only to choose.", _v3_wrong("bias inside sigmoid")),
        ("the bias was added inside the sigmoid, σ(logits + bias), and that biased affinity was also used as the "
         "weight; choose by σ(logits) + bias and weight by σ(logits).",
         _v3_wrong("bias inside sigmoid, weights too")),
        ("the bias was subtracted; add it: an expert with a positive bias is chosen more often.",
         _v3_wrong("bias subtracted")),
        ("the bias was not used for the choice: pick the top k of σ(logits) + bias.", _v3_wrong("no bias")),
        ("the weights are not normalised: with k ≥ 2 divide the chosen affinities by their sum.",
         _v3_wrong("no normalise")),
        ("DeepSeek-V3 scores with a sigmoid per expert, not a softmax over experts.", _v3_wrong("softmax")),
        ("with k = 1 the weight was normalised to 1, which would give the router no gradient; keep the affinity "
         "σ(logit) of the one chosen expert (as Llama 4's top-1 router does) and normalise only when k ≥ 2.",
         _v3_wrong("normalise at k=1")),
    ],
    atol=ATOL, rtol=RTOL,
)


# ---------------------------------------------------------------- exercise 2: one bias update
# Loss-free balancing (Wang et al. 2024, arXiv 2408.15664; adopted by DeepSeek-V3):
# b_i += γ · sign(mean load − c_i).
def _bias_step(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    load = load.to(torch.float64)
    return bias + gamma * torch.sign(load.mean() - load).to(bias.dtype)


def _bias_cases() -> list[Case]:
    g = _generator(702)
    rows = [
        ([10, 2, 4, 4], 0.1, "mixed loads, mean 5"),
        ([1, 5, 3, 3, 2, 4], 0.01, "two experts exactly at the mean 3"),
        ([7, 7, 7, 7, 7], 0.05, "all loads equal"),
        ([12], 0.2, "a single expert"),
        ([0, 0, 12], 0.5, "two empty experts"),
        ([3, 4], 0.02, "mean 3.5, not a whole number"),
        ([5, 6, 6, 6], 0.003, "mean 5.75: the experts at 6 are just above it"),
        ([0, 1, 500, 250, 249, 0, 2, 298], 0.001, "loads from 0 to 500, mean 162.5"),
        ([8, 9, 8, 7, 9, 8, 8, 8], 0.04, "mean 8.125: five experts at 8 = floor(mean) are just below it"),
    ]
    cases = []
    for i, (load, gamma, note) in enumerate(rows):
        e = len(load)
        scale = 50.0 if i == 7 else 1e-9 if i == 6 else 0.2
        bias = scale * torch.randn(e, generator=g, dtype=torch.float64)
        cases.append(Case((bias, torch.tensor(load), gamma), note=f"{note}: load {load}, gamma={gamma}"))
    return cases


def _bias_wrong(kind: str):
    def wrong(bias, load, gamma):
        lf = load.double()
        mean = torch.div(load.sum(), load.numel(), rounding_mode="floor").double() if kind == "floor mean" \
            else lf.mean()
        if kind == "proportional":
            step = mean - lf
        elif kind == "at mean up":
            step = torch.where(lf > mean, -1.0, 1.0).double()
        elif kind == "at mean down":
            step = torch.where(lf < mean, 1.0, -1.0).double()
        else:
            step = torch.sign(mean - lf)
        if kind == "reversed":
            step = -step
        return bias + gamma * step.to(bias.dtype)
    return wrong


check_bias_step = Exercise(
    "Exercise 2 (one bias update)",
    _bias_step,
    _bias_cases,
    [
        ("the sign is reversed: an over-loaded expert (load above the mean) must become *less* attractive, so "
         "its bias goes down by γ.", _bias_wrong("reversed")),
        ("the step is proportional to the load gap; loss-free balancing (Wang et al. 2024, adopted by "
         "DeepSeek-V3) moves every bias by exactly ±γ, the sign of the gap, and leaves an expert exactly at the "
         "mean alone.", _bias_wrong("proportional")),
        ("an expert exactly at the mean load moved up; sign(0) = 0 leaves it where it is.",
         _bias_wrong("at mean up")),
        ("an expert exactly at the mean load moved down; sign(0) = 0 leaves it where it is.",
         _bias_wrong("at mean down")),
        ("the mean load was rounded down (integer division, or `.mean()` of an integer sum divided with //); "
         "take the mean in floating point: with loads [3, 4] the mean is 3.5 and both experts move.",
         _bias_wrong("floor mean")),
    ],
    atol=ATOL, rtol=RTOL,
)


# ---------------------------------------------------------------- exercise 3: combinations of experts
def _combinations(n_experts: int, top_k: int, m: int, n_shared: int) -> int:
    return math.comb(m * n_experts - n_shared, m * top_k - n_shared)


def _comb_cases() -> list[Case]:
    rows = [(16, 2, 1, 0), (16, 2, 4, 0), (16, 2, 4, 1), (8, 1, 1, 0), (8, 2, 2, 3), (64, 6, 1, 2), (4, 4, 2, 0),
            (8, 1, 4, 3), (1, 1, 4, 3), (32, 1, 8, 0), (32, 8, 8, 2)]
    return [Case(r, note=f"n_experts={r[0]}, top_k={r[1]}, m={r[2]}, n_shared={r[3]}") for r in rows]


check_expert_combinations = Exercise(
    "Exercise 3 (how many expert combinations)",
    _combinations,
    _comb_cases,
    [
        ("the shared experts are not choices: the router picks m·k − s of the m·N − s routed experts, so "
         "subtract n_shared from both.", lambda n, k, m, s: math.comb(m * n, m * k)),
        ("the shared experts left the pool but not the picks: each token still uses m·k experts in all, so the "
         "router picks m·k − s of the m·N − s routed ones.", lambda n, k, m, s: math.comb(m * n - s, m * k)),
        ("the shared experts left the picks but not the pool: they are not routed, so the pool is m·N − s.",
         lambda n, k, m, s: math.comb(m * n, m * k - s)),
        ("the order of the chosen experts does not matter (the output is a weighted sum): count subsets "
         "(math.comb), not ordered picks (math.perm).", lambda n, k, m, s: math.perm(m * n - s, m * k - s)),
        ("with granularity m a token visits m·k experts out of m·N, not k out of m·N.",
         lambda n, k, m, s: math.comb(m * n - s, k - s) if k > s else 0),
        ("a float lost digits: the count must be an exact int (math.comb gives one; a ratio of factorials "
         "with / is a float, exact only below 2**53).",
         lambda n, k, m, s: math.factorial(m * n - s) / (math.factorial(m * k - s)
                                                         * math.factorial(m * n - m * k))),
    ],
    kind="investigate",
)


# ---------------------------------------------------------------- exercise 4: Welch's t
def _welch_t(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    w = welch(a, b)
    return w.t, w.df


def _welch_cases() -> list[Case]:
    g = _generator(704)
    cases = []

    def add(a, b, note):
        a = torch.as_tensor(a, dtype=torch.float64)
        b = torch.as_tensor(b, dtype=torch.float64)
        cases.append(Case((a, b), note=f"{note} ({a.numel()} vs {b.numel()} runs)"))

    add([0.21, 0.25], [0.14, 0.11], "two runs each")
    add(0.2 + 0.02 * torch.randn(6, generator=g, dtype=torch.float64),
        0.15 + 0.04 * torch.randn(6, generator=g, dtype=torch.float64), "six runs each")
    add(0.3 + 0.01 * torch.randn(2, generator=g, dtype=torch.float64),
        0.25 + 0.08 * torch.randn(8, generator=g, dtype=torch.float64), "unequal sizes and spreads")
    add([0.125, 0.125, 0.125], [0.2, 0.3, 0.25, 0.4], "a group with no spread")
    add([0.1, 300.0, 42.0], [5.0, 7.5, 250.0, 0.2, 11.0], "values from 0.1 to 300")
    add(1e-9 * torch.randn(4, generator=g, dtype=torch.float64),
        1e-9 * (1.0 + torch.randn(3, generator=g, dtype=torch.float64)), "differences of 1e-9")
    return cases


def _welch_wrong(kind: str):
    def wrong(a, b):
        a, b = a.double(), b.double()
        na, nb = a.numel(), b.numel()
        if kind == "population variance":
            va, vb = float(a.var(correction=0)), float(b.var(correction=0))
        else:
            va, vb = float(a.var()), float(b.var())
        if kind == "sd not se":
            se2_a, se2_b = va, vb
        else:
            se2_a, se2_b = va / na, vb / nb
        if kind == "pooled":
            pooled = ((na - 1) * va + (nb - 1) * vb) / (na + nb - 2)
            se2_a, se2_b = pooled / na, pooled / nb
        se = math.sqrt(se2_a + se2_b)
        diff = float(a.mean() - b.mean())
        t = (-diff if kind == "reversed" else diff) / se
        if kind in ("pooled", "pooled df"):
            df = float(na + nb - 2)
        elif kind == "df with n":
            df = (se2_a + se2_b) ** 2 / (se2_a ** 2 / na + se2_b ** 2 / nb)
        else:
            df = (se2_a + se2_b) ** 2 / (se2_a ** 2 / (na - 1) + se2_b ** 2 / (nb - 1))
        return t, df
    return wrong


check_welch_t = Exercise(
    "Exercise 4 (Welch's t)",
    _welch_t,
    _welch_cases,
    [
        ("the sign is reversed: t is (mean(a) − mean(b)) / se, negative when a is lower.", _welch_wrong("reversed")),
        ("use the sample variance (divide by n − 1, torch's default `var()`): with a few runs the difference "
         "matters.", _welch_wrong("population variance")),
        ("that divides by the spread of single runs; the uncertainty of a *mean* of n runs is sd/√n, so "
         "se = √(s_a²/n_a + s_b²/n_b).", _welch_wrong("sd not se")),
        ("the degrees of freedom are Student's n_a + n_b − 2; Welch's are "
         "se⁴ / ((s_a²/n_a)²/(n_a − 1) + (s_b²/n_b)²/(n_b − 1)), smaller when the groups differ in size or "
         "spread.", _welch_wrong("pooled df")),
        ("that is Student's t with a pooled variance; Welch's t keeps each group's own variance: "
         "se = √(s_a²/n_a + s_b²/n_b), with Welch's degrees of freedom.", _welch_wrong("pooled")),
        ("in the degrees of freedom each term is divided by n − 1, not n.", _welch_wrong("df with n")),
    ],
    atol=ATOL, rtol=RTOL, kind="investigate",
)


EXERCISES = [check_v3_gates, check_bias_step, check_expert_combinations, check_welch_t]
