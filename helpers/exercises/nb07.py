"""Checkers for the exercises of notebook 07 (the FFN in today's LLMs).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_v3_gates(v3_gates)``; it prints one line (not attempted / passed / what is wrong, with
the likely mistake when one explains the answer). Each declares the domain its statement allows
(``Domain``) and its fixed hidden cases reach every corner of it:

* gates: logits in [−8, 8] with both ends reached, biases in [−1, 1] with both ends reached, k = 1 and
  k = E, one expert (E = 1), a batch of one, a zero bias, a bias that changes the choice, a choice decided
  by a margin of 1e-4, logits below 0.01, every logit negative, equal scores inside the chosen set (never
  at the edge of a top k, also in float32);
* bias step: one expert and 64, loads from 0 to 1,000 (both ends), every load 0, all loads equal, an
  expert exactly at the mean, a mean that is not whole with experts at its floor (below it) and at its
  ceiling (above it), γ = 0.001 and 0.5, biases near ±100 and below 1e-8;
* combinations: top_k = 1 and top_k = n_experts, n_experts = 1 and 256, m = 1 and 16, n_shared = 0 and
  m·top_k − 1, a count above 2**53 (a float cannot hold it);
* paired t: 2 and 50 seeds, values near ±1,000 and near 1e-6, differences of one sign and of both signs,
  a mean difference of exactly 0, differences 30 to 100 times smaller than the values.

Dtypes, as each statement says: exercises 1 and 2 take float64 inputs and accept a float32 or float64
answer (compared to 1e-6, relative and absolute; ``precision=torch.float32``, so no note about precision
can ask for float64); exercise 3 wants an exact Python int; exercise 4 wants
a Python float t and an int or float df, computed in float64 (compared to 1e-6 relative: float32 arithmetic misses it where the
differences are small next to the values, and is told so). Exercise 2's hints credit the rule to Wang et
al. (2024), whose loss-free balancing DeepSeek-V3 adopts.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): the router is ``(E, d_model)``
and a batch of row vectors ``X`` ``(N, d_model)`` gives logits ``X W_rᵀ`` ``(N, E)``.

==============================  ========================================================  ======================
checker                         your function                                             returns
==============================  ========================================================  ======================
``check_v3_gates``              ``v3_gates(logits, bias, k)``                             ``(N, E)`` gates
``check_bias_step``             ``bias_step(bias, load, gamma)``, then γ moved by hand    ``(E,)`` new bias
``check_expert_combinations``   ``my_expert_combinations(n_experts, top_k, m, n_shared)``   int
``check_paired_t``              ``paired_t(a, b)``                                        ``(t, df)`` numbers
==============================  ========================================================  ======================
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import FAILED, HINT_PREFIX, Case, Corner, Domain, Exercise
from helpers.exercises.returns import Returns, python_float, python_int
from helpers.stats import paired_difference, welch

#: exercises 1 and 2: the same logic in float32 or float64 passes; every listed mistake is off by far more
ATOL, RTOL = 1e-6, 1e-6


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _f64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


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


def _v3_gates_answer(logits: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    """The reference (float64); the exercise's ``precision=torch.float32`` accepts a float32 answer."""
    return _v3_gates(logits, bias, k)


def _v3_cases() -> list[Case]:
    g = _generator(701)
    cases = []

    def add(logits, bias, k, note):
        cases.append(Case((logits, bias, k), note=f"{note}, logits {tuple(logits.shape)}, k={k}"))

    # a bias that flips the choice (top-2), biases at both ends of [−1, 1]
    add(torch.randn(6, 4, generator=g, dtype=torch.float64), _f64([-1.0, 0.0, 0.0, 1.0]), 2,
        "bias −1 and +1 on experts 0 and 3")
    add(torch.randn(5, 8, generator=g, dtype=torch.float64) * 2.0, torch.zeros(8, dtype=torch.float64), 1,
        "zero bias")
    # k = 1 with a bias that changes the choice
    add(torch.randn(7, 6, generator=g, dtype=torch.float64), _f64([0.0, 0.5, 0.0, -0.5, 0.2, 0.0]), 1,
        "bias that moves top-1 choices")
    # a batch of one, k = E, two equal scores inside the chosen set
    add(_f64([[0.3, 0.3, -1.0, 2.0, 0.0]]), _f64([0.1, 0.1, 0.0, -0.2, 0.05]), 5, "one token, k = E")
    # logits at both ends of [−8, 8]: σ(l + b) and σ(l) + b rank differently; every logit negative in another
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
    add((torch.randn(9, 16, generator=g, dtype=torch.float64) * 2.5).clamp(-7.5, 7.5),
        (0.3 * torch.randn(16, generator=g, dtype=torch.float64)).clamp(-0.9, 0.9), 16, "k = E = 16")
    add(_f64([[-2.5], [0.0], [7.0]]), _f64([0.4]), 1, "a single expert (E = 1)")
    return cases


def _chosen(case: Case, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """A case's scores sorted (best first) and the unbiased choice, to read its corners."""
    logits, bias, k = case.args
    score = torch.sigmoid(logits.to(dtype)) + bias.to(dtype)
    return score.sort(-1, descending=True).values, torch.topk(torch.sigmoid(logits), k).indices.sort(-1).values


def _flips(case: Case) -> bool:
    logits, bias, k = case.args
    biased = torch.topk(torch.sigmoid(logits) + bias, k).indices.sort(-1).values
    return bool((biased != _chosen(case)[1]).any())


def _edge_margin(case: Case) -> float:
    logits, _, k = case.args
    score = _chosen(case)[0]
    return float((score[:, k - 1] - score[:, k]).min()) if k < logits.shape[1] else math.inf


def _tie_inside(case: Case) -> bool:
    score, k = _chosen(case)[0], case.args[2]
    return bool(((score[:, : k - 1] - score[:, 1:k]).abs() < 1e-12).any()) if k >= 2 else False


V3_DOMAIN = Domain(
    "logits: float64 (N, E), N ≥ 1, E ≥ 1, every entry in [−8, 8]; bias: float64 (E,), entries in [−1, 1]; "
    "k: int, 1 ≤ k ≤ E; no tie at the edge of a token's top k (ties inside the chosen set allowed); "
    "answer: float32 or float64 (N, E), compared to 1e-6",
    (Corner("k = 1 (the weight stays σ(logit))", lambda c: c.args[2] == 1),
     Corner("k = E > 1 (every expert chosen)", lambda c: c.args[2] == c.args[0].shape[1] > 1),
     Corner("E = 1 (one expert)", lambda c: c.args[0].shape[1] == 1),
     Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
     Corner("a logit at 8", lambda c: float(c.args[0].max()) == 8.0),
     Corner("a logit at −8", lambda c: float(c.args[0].min()) == -8.0),
     Corner("every logit negative", lambda c: bool((c.args[0] < 0).all())),
     Corner("logits below 0.01 in size", lambda c: float(c.args[0].abs().max()) < 0.01),
     Corner("a bias at +1", lambda c: float(c.args[1].max()) == 1.0),
     Corner("a bias at −1", lambda c: float(c.args[1].min()) == -1.0),
     Corner("a zero bias", lambda c: bool((c.args[1] == 0).all())),
     Corner("a bias that changes the choice", _flips),
     Corner("a choice decided by a margin below 2e-4", lambda c: _edge_margin(c) < 2e-4),
     Corner("equal scores inside the chosen set", _tie_inside)),
)


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
        if kind == "softmax over chosen":                      # Mixtral's weights: a softmax of the chosen logits
            return _dense_gates(index, torch.softmax(logits.gather(1, index), -1), logits.shape[-1])
        if kind == "normalised over all":
            weight = weight / affinity.sum(-1, keepdim=True)
        elif kind != "no normalise" and (k >= 2 or kind in ("normalise at k=1", "x2.5, normalise at k=1")):
            weight = weight / weight.sum(-1, keepdim=True)
        if kind.startswith("x2.5"):                            # DeepSeek-V3's routed_scaling_factor
            weight = 2.5 * weight
        return _dense_gates(index, weight, logits.shape[-1])
    return wrong


check_v3_gates = Exercise(
    "Exercise 1 (DeepSeek-V3 gates)",
    _v3_gates_answer,
    _v3_cases,
    [
        ("the bias went into the combine weights too; it only decides which experts are chosen. Take the "
         "weights from the unbiased affinities σ(logits) of the chosen experts.", _v3_wrong("bias in weights")),
        ("the experts were chosen by logits + bias (or σ(logits + bias), the same choice): the bias went in before "
         "the sigmoid. DeepSeek-V3 adds it after, choosing by σ(logits) + bias, and only to choose.",
         _v3_wrong("bias inside sigmoid")),
        ("the bias went in before the sigmoid, σ(logits + bias), and that biased affinity was also used as the "
         "weight; choose by σ(logits) + bias and weight by σ(logits).",
         _v3_wrong("bias inside sigmoid, weights too")),
        ("the bias was subtracted; add it: an expert with a positive bias is chosen more often.",
         _v3_wrong("bias subtracted")),
        ("the bias was not used for the choice: pick the top k of σ(logits) + bias.", _v3_wrong("no bias")),
        ("the weights are not normalised: with k ≥ 2 divide the chosen affinities by their sum.",
         _v3_wrong("no normalise")),
        ("the weights were divided by the sum of all E affinities; divide by the sum over the k chosen experts "
         "(and not at all when k = 1).", _v3_wrong("normalised over all")),
        ("DeepSeek-V3 scores with a sigmoid per expert, not a softmax over experts.", _v3_wrong("softmax")),
        ("the weights are a softmax of the chosen logits (Mixtral's rule); DeepSeek-V3 weights by the sigmoid "
         "affinities σ(logit) of the chosen experts, divided by their sum when k ≥ 2.",
         _v3_wrong("softmax over chosen")),
        ("with k = 1 the weight was normalised to 1, which would give the router no gradient; keep the affinity "
         "σ(logit) of the one chosen expert (as Llama 4's top-1 router does) and normalise only when k ≥ 2.",
         _v3_wrong("normalise at k=1")),
        ("every gate is 2.5 times the expected one: ×2.5 is DeepSeek-V3's routed_scaling_factor, applied to the "
         "routed experts' output after the gates; the exercise asks for the gates themselves, without it.",
         _v3_wrong("x2.5")),
        ("the gates were scaled by 2.5 (DeepSeek-V3's routed_scaling_factor: leave it out, the exercise asks for "
         "the gates) and at k = 1 normalised to 1; keep the one chosen expert's σ(logit) when k = 1.",
         _v3_wrong("x2.5, normalise at k=1")),
    ],
    atol=ATOL, rtol=RTOL, precision=torch.float32, domain=V3_DOMAIN,
)


# ---------------------------------------------------------------- exercise 2: one bias update
# Loss-free balancing (Wang et al. 2024, arXiv 2408.15664; adopted by DeepSeek-V3):
# b_i += γ · sign(mean load − c_i).
def _bias_step(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    load = load.to(torch.float64)
    return bias + gamma * torch.sign(load.mean() - load).to(bias.dtype)


def _bias_step_answer(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    """The reference (float64); the exercise's ``precision=torch.float32`` accepts a float32 answer."""
    return _bias_step(bias, load, gamma)


def _bias_cases() -> list[Case]:
    g = _generator(702)
    rows = [
        ([10, 2, 4, 4], 0.1, 0.2, "mixed loads, mean 5"),
        ([1, 5, 3, 3, 2, 4], 0.01, 0.2, "two experts exactly at the mean 3"),
        ([7, 7, 7, 7, 7], 0.05, 0.2, "all loads equal"),
        ([12], 0.2, 0.2, "a single expert"),
        ([0, 0, 12], 0.5, 0.2, "two empty experts"),
        ([3, 4], 0.02, 0.2, "mean 3.5, not a whole number"),
        ([5, 6, 6, 6], 0.003, 1e-9, "mean 5.75: the experts at 6 are just above it"),
        ([0, 1, 1000, 250, 249, 0, 2, 298], 0.001, 40.0, "loads from 0 to 1,000, mean 225"),
        ([8, 9, 8, 7, 9, 8, 8, 8], 0.04, 0.2, "mean 8.125: five experts at 8 = floor(mean) are just below it"),
        ([0, 0, 0, 0], 0.25, 0.2, "every load 0: nothing moves"),
    ]
    cases = []
    for load, gamma, scale, note in rows:
        bias = scale * torch.randn(len(load), generator=g, dtype=torch.float64)
        cases.append(Case((bias, torch.tensor(load), gamma), note=f"{note}: load {load}, gamma={gamma}"))
    # 64 experts with loads from 0 to 1,000, biases up to ±99.9
    load = torch.randint(0, 1001, (64,), generator=g)
    bias = (torch.rand(64, generator=g, dtype=torch.float64) * 2 - 1) * 99.9
    bias[:2] = _f64([99.9, -99.9])
    cases.append(Case((bias, load, 0.001), note=f"64 experts, loads up to {int(load.max())}, biases near ±100"))
    return cases


def _mean(load: torch.Tensor) -> float:
    return float(load.double().mean())


BIAS_DOMAIN = Domain(
    "bias: float64 (E,), 1 ≤ E ≤ 64, entries in [−100, 100]; load: int64 (E,), each count in 0..1000; "
    "gamma: Python float in [0.001, 0.5]; answer: float32 or float64 (E,), compared to 1e-6",
    (Corner("one expert (E = 1)", lambda c: c.args[1].numel() == 1),
     Corner("64 experts", lambda c: c.args[1].numel() == 64),
     Corner("an empty expert (load 0)", lambda c: bool((c.args[1] == 0).any()) and bool((c.args[1] > 0).any())),
     Corner("a load of 1,000", lambda c: int(c.args[1].max()) == 1000),
     Corner("every load 0", lambda c: bool((c.args[1] == 0).all())),
     Corner("all loads equal and non-zero", lambda c: c.args[1].numel() > 1 and bool((c.args[1] == c.args[1][0]).all())
            and int(c.args[1][0]) > 0),
     Corner("an expert exactly at a mean others are not at", lambda c: bool((c.args[1].double() == _mean(c.args[1])).any())
            and not bool((c.args[1] == c.args[1][0]).all())),
     Corner("experts at the floor of a mean that is not whole",
            lambda c: _mean(c.args[1]) % 1 > 0 and int((c.args[1] == math.floor(_mean(c.args[1]))).sum()) >= 2),
     Corner("experts at the ceiling of a mean that is not whole",
            lambda c: _mean(c.args[1]) % 1 > 0 and int((c.args[1] == math.ceil(_mean(c.args[1]))).sum()) >= 2),
     Corner("gamma = 0.001", lambda c: c.args[2] == 0.001),
     Corner("gamma = 0.5", lambda c: c.args[2] == 0.5),
     Corner("a bias near +100", lambda c: float(c.args[0].max()) > 99),
     Corner("a bias near −100", lambda c: float(c.args[0].min()) < -99),
     Corner("biases below 1e-8 in size", lambda c: float(c.args[0].abs().max()) < 1e-8)),
)


def _bias_wrong(kind: str):
    def wrong(bias, load, gamma):
        lf = load.double()
        mean = torch.div(load.sum(), load.numel(), rounding_mode="floor").double() if kind == "floor mean" \
            else lf.mean()
        if kind == "median":
            mean = lf.median()
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


def _integer_mean(bias, load, gamma):
    """The int64 trap: ``.mean()`` of the integer loads, which raises (torch has no integer mean)."""
    return bias + gamma * torch.sign(load.mean() - load)


INTEGER_MEAN_HINT = ("`load` holds int64 counts, and torch takes no mean of an integer tensor: convert it first "
                     "(`load.double()`); the mean load need not be a whole number.")


def _raised(fn, case: Case) -> BaseException | None:
    """The exception ``fn`` raises on fresh copies of the case's inputs, or ``None`` if it returns."""
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    try:
        fn(*args)
    except (Exception, SystemExit) as err:  # the learner's exception is what is compared
        return err
    return None


class _BiasStepExercise(Exercise):
    """The engine names a mistake only from a wrong value. A function that raises gets the int64 hint when,
    on every hidden case, it raises the very exception (type and message) that ``.mean()`` of the int64 loads
    raises: then that mean explains every failing case."""

    def evaluate(self, fn):  # type: ignore[override]
        result = super().evaluate(fn)
        if not result.passed and not result.hint and result.reason == "wrong" and self._right_way_wrong_size(fn):
            return self._result(FAILED, f"{result.message} {HINT_PREFIX}{STEP_SIZE_HINT}", "wrong", STEP_SIZE_HINT)
        if result.passed or result.hint or result.reason != "error":
            return result
        for case in self.cases():
            got, model = _raised(fn, case), _raised(_integer_mean, case)
            if got is None or model is None or type(got) is not type(model) or str(got) != str(model):
                return result
        return self._result(FAILED, f"{result.message} {HINT_PREFIX}{INTEGER_MEAN_HINT}", "error",
                            INTEGER_MEAN_HINT)


    def _right_way_wrong_size(self, fn) -> bool:
        """True when, on every hidden case, each bias moved the right way (down above the mean load, up below
        it, not at all at it) but some step was not exactly γ: the step's size followed the load gap."""
        sized = False
        for case in self.cases():
            bias, load, gamma = case.args
            try:
                got = torch.as_tensor(fn(bias.clone(), load.clone(), gamma)).to(torch.float64)
            except Exception:  # the learner's exception: not this mistake
                return False
            if got.shape != bias.shape or not bool(torch.isfinite(got).all()):
                return False
            step, gap = got - bias, load.double().mean() - load.double()
            tol = 1e-6 * (1 + bias.abs())
            same_way = torch.where(gap == 0, step.abs() <= tol, torch.sign(step) == torch.sign(gap))
            if not bool(same_way.all()):
                return False
            sized |= bool(((step.abs() - gamma).abs() > tol)[gap != 0].any())
        return sized


STEP_SIZE_HINT = ("every bias moved the right way, but not always by exactly γ: the step is ±γ whatever the size "
                  "of the load gap (γ times the sign of mean − load, not the gap itself).")


check_bias_step = _BiasStepExercise(
    "Exercise 2 (one bias update)",
    _bias_step_answer,
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
        ("the loads were compared with their median; Wang et al. (2024) compare each expert's load with the mean "
         "load.", _bias_wrong("median")),
    ],
    atol=ATOL, rtol=RTOL, precision=torch.float32, domain=BIAS_DOMAIN, kind="investigate",
)


# ---------------------------------------------------------------- exercise 3: combinations of experts
def _combinations(n_experts: int, top_k: int, m: int, n_shared: int) -> int:
    return math.comb(m * n_experts - n_shared, m * top_k - n_shared)


def _comb_cases() -> list[Case]:
    rows = [(16, 2, 1, 0), (16, 2, 4, 0), (16, 2, 4, 1), (8, 1, 1, 0), (8, 2, 2, 3), (64, 6, 1, 2), (4, 4, 2, 0),
            (8, 1, 4, 3), (1, 1, 4, 3), (32, 1, 8, 0), (32, 8, 8, 2), (256, 8, 1, 0), (16, 2, 16, 0),
            (256, 256, 1, 5)]
    return [Case(r, note=f"n_experts={r[0]}, top_k={r[1]}, m={r[2]}, n_shared={r[3]}") for r in rows]


COMB_DOMAIN = Domain(
    "Python ints: 1 ≤ top_k ≤ n_experts ≤ 256, 1 ≤ m ≤ 16, 0 ≤ n_shared < m · top_k; answer: an exact Python int",
    (Corner("top_k = 1", lambda c: c.args[1] == 1),
     Corner("top_k = n_experts > 1 (one set when nothing is shared)", lambda c: c.args[1] == c.args[0] > 1),
     Corner("n_experts = 1", lambda c: c.args[0] == 1),
     Corner("n_experts = 256", lambda c: c.args[0] == 256),
     Corner("m = 1", lambda c: c.args[2] == 1),
     Corner("m = 16", lambda c: c.args[2] == 16),
     Corner("n_shared = 0", lambda c: c.args[3] == 0),
     Corner("n_shared = m · top_k − 1 (one routed choice left)", lambda c: c.args[3] == c.args[2] * c.args[1] - 1),
     Corner("a count above 2**53 (a float cannot hold it)", lambda c: _combinations(*c.args) > 2 ** 53)),
)

OVERFLOW_HINT = ("the count overflowed a float (OverflowError): an intermediate such as 256! lies beyond a float's "
                 "range (about 1.8e308), and the answer must be an exact int.")


class _CombinationsExercise(Exercise):
    """The engine names a mistake only from a wrong value. A function that raises gets the overflow hint when,
    on some hidden case, the exception it raises is an ``OverflowError``: a float went past its range."""

    def evaluate(self, fn):  # type: ignore[override]
        result = super().evaluate(fn)
        if result.passed or result.hint or result.reason != "error":
            return result
        if any(isinstance(_raised(fn, case), OverflowError) for case in self.cases()):
            return self._result(FAILED, f"{result.message} {HINT_PREFIX}{OVERFLOW_HINT}", "error", OVERFLOW_HINT)
        return result


check_expert_combinations = _CombinationsExercise(
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
    kind="investigate", domain=COMB_DOMAIN,
    returns=python_int(),
)


# ---------------------------------------------------------------- exercise 4: the paired t
def _paired_t(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    d = paired_difference(a, b)
    return d.t, float(d.df)


def _paired_cases() -> list[Case]:
    g = _generator(704)
    cases = []

    def add(a, b, note):
        a, b = _f64(a) if isinstance(a, list) else a, _f64(b) if isinstance(b, list) else b
        cases.append(Case((a, b), note=f"{note} ({a.numel()} seeds)"))

    def noise(n, scale):
        return scale * torch.randn(n, generator=g, dtype=torch.float64)

    add([0.21, 0.25], [0.14, 0.11], "the fewest seeds")
    base = 0.2 + noise(6, 0.05)
    add(base + 0.03 + noise(6, 0.01), base, "every difference of one sign")
    base = 0.5 + noise(20, 0.1)
    add(base + noise(20, 0.05), base, "differences of both signs")
    add([1.5, 0.5, 3.0, -1.0], [0.5, 1.5, 1.0, 1.0], "a mean difference of exactly 0")
    base = 1000.0 - noise(8, 1.0).abs()
    add(base - 15.0 + noise(8, 4.0).clamp(-9.0, 9.0), base, "values near 1,000, differences about 70 times smaller")
    add(-base, -base + 15.0 + noise(8, 4.0).clamp(-9.0, 9.0), "values near −1,000")
    base = 1e-6 * (1.0 + noise(5, 0.1))
    add(base + 1e-7 * (1.0 + noise(5, 1.0)), base, "values near 1e-6")
    base = 3.0 + noise(50, 1.0)
    add(base + 0.01 + noise(50, 0.05), base, "the most seeds")
    return cases


def _diffs(case: Case) -> torch.Tensor:
    return case.args[0] - case.args[1]


PAIRED_DOMAIN = Domain(
    "a, b: float64 (n,), the same n with 2 ≤ n ≤ 50 (entry i of both from seed i), every value in "
    "[−1000, 1000], the differences a − b not all equal, and never below 1 % of the values in size on average; "
    "answer: (t, df) as Python floats computed in float64, compared to 1e-6 relative",
    (Corner("two seeds", lambda c: c.args[0].numel() == 2),
     Corner("fifty seeds", lambda c: c.args[0].numel() == 50),
     Corner("values near 1,000", lambda c: float(c.args[0].max()) > 990),
     Corner("values near −1,000", lambda c: float(c.args[0].min()) < -990),
     Corner("values near 1e-6", lambda c: float(torch.cat(c.args).abs().max()) < 1e-5),
     Corner("every difference of one sign", lambda c: bool((_diffs(c) > 0).all() or (_diffs(c) < 0).all())),
     Corner("differences of both signs", lambda c: bool((_diffs(c) > 0).any() and (_diffs(c) < 0).any())),
     Corner("a mean difference of exactly 0", lambda c: float(_diffs(c).mean()) == 0.0),
     Corner("differences 30 to 100 times smaller than the values",
            lambda c: float(_diffs(c).abs().mean()) < 0.03 * float(c.args[0].abs().mean()))),
)


def _paired_wrong(kind: str):
    def wrong(a, b):
        a, b = a.double(), b.double()
        n, d = a.numel(), a - b
        if kind == "welch":
            w = welch(a, b)
            return w.t, w.df
        if kind.startswith("student"):                                 # unpaired: pooled variance of a and b
            pooled = (a.var() + b.var()) / 2
            return float(d.mean() / (pooled * 2 / n).sqrt()), float(n - 1 if kind.endswith("n - 1") else 2 * n - 2)
        sd = d.std(correction=0) if kind == "population sd" else d.std()
        se = sd if kind == "sd not se" else sd / math.sqrt(n)
        t = float(d.mean() / se)
        df = {"df n": n, "df 2n - 2": 2 * n - 2}.get(kind, n - 1)
        return (-t if kind == "reversed" else t), float(df)
    return wrong


check_paired_t = Exercise(
    "Exercise 4 (the paired t)",
    _paired_t,
    _paired_cases,
    [
        ("the sign is reversed: t is mean(a − b) / se, negative when a is lower.", _paired_wrong("reversed")),
        ("that is Welch's t for unpaired runs: it ignores that entry i of a and of b share seed i. Pair them: "
         "d = a − b seed by seed, t = mean(d) / (sd(d)/√n) on n − 1 degrees of freedom.", _paired_wrong("welch")),
        ("that is Student's unpaired t (pooled variance, n_a + n_b − 2 degrees of freedom); the runs are paired: "
         "take the differences a − b seed by seed, t = mean(d) / (sd(d)/√n), df = n − 1.",
         _paired_wrong("student")),
        ("that is an unpaired t (the spread of a and of b, each on its own); the runs are paired: take the "
         "differences a − b seed by seed, t = mean(d) / (sd(d)/√n).", _paired_wrong("student, df n - 1")),
        ("the t is right; a paired t has n − 1 degrees of freedom (n differences, one mean), not 2n − 2 (that is "
         "the unpaired count, two samples of n).", _paired_wrong("df 2n - 2")),
        ("use the sample standard deviation of the differences (divide by n − 1, torch's default `std()`).",
         _paired_wrong("population sd")),
        ("that divides by the spread of single differences; the uncertainty of their *mean* is sd(d)/√n.",
         _paired_wrong("sd not se")),
        ("the degrees of freedom of a paired t are n − 1 (one mean estimated from n differences), not n.",
         _paired_wrong("df n")),
    ],
    atol=0.0, rtol=1e-6, kind="investigate", domain=PAIRED_DOMAIN,
    returns=(python_float(0, "t"), Returns("a Python int or float", lambda v: isinstance(v, (int, float))
                                           and not isinstance(v, bool), 1, "df",
                                           "Return n − 1 as a Python int or float.")),
)


EXERCISES = [check_v3_gates, check_bias_step, check_expert_combinations, check_paired_t]
