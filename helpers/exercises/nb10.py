"""Checkers for the exercises of notebook 10 (activation sparsity: silent neurons, skipping, predicting, batches).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_threshold_for_share(threshold_for_share)``; it prints one line (not attempted / passed / what is wrong, with the likely
mistake when one explains every failing case). The hidden cases are seeded and cover the corners each statement
declares (``Domain``): a share whose count s·n lies just above, just below or exactly on a whole number; ties
across the threshold (ReLU's exact zeros); gates on SiLU's negative side; nothing kept and everything kept; a batch of one and
a single neuron; firing rates of 0 and 1; tokens with no active neuron; large and tiny magnitudes.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): ``W1`` and ``W3`` are ``(d_ff, d_model)``
(row i = neuron i's key and linear branch), ``W2`` is ``(d_model, d_ff)`` (column i = neuron i's value).

==========================  =========  =================================================  ======================
checker                     kind       your function                                      returns
==========================  =========  =================================================  ======================
``check_threshold_for_share`` build    ``threshold_for_share(m, s)``                      ``(tau, skipped)``
``check_skip_swiglu``       build      ``skip_swiglu(x, W1, W3, W2, tau)``                ``(y, weights_read)``
``check_expected_union``    invest.    ``expected_union(rates, batch)``                   float
``check_recall``            invest.    ``recall(predicted, active)``                      float
==========================  =========  =================================================  ======================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.exercises.engine import Case, Corner, Domain, Exercise
from helpers.exercises.returns import python_int


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- exercise 1: a threshold that skips a share s
def _entries_for_share(s: float, n: int) -> int:
    """The fewest entries k with k / n >= s, read as a learner computes it: ceil(s·n) can round up past an exact
    share (s = 0.28, n = 25: s·n = 7.000000000000001, yet 7 / 25 == 0.28), so one step down is taken when it holds."""
    k = math.ceil(s * n)
    return k - 1 if k > 1 and (k - 1) / n >= s else k


def _threshold_for_share(m: torch.Tensor, s: float):
    magnitudes = m.abs().flatten()
    tau = magnitudes.kthvalue(_entries_for_share(s, magnitudes.numel())).values.item()
    return tau, (magnitudes <= tau).double().mean().item()


def _count(case: Case) -> float:
    """``s · N · d_ff`` of a case, the share asked for in entries."""
    return case.args[1] * case.args[0].numel()


def _fraction(case: Case) -> float:
    return _count(case) - math.floor(_count(case))


def _tied_at_tau(case: Case) -> bool:
    """Do entries tie with the k-th smallest |m| on both sides of k (so the share skipped exceeds s)?"""
    magnitudes = case.args[0].abs().flatten().sort().values
    k = math.ceil(_count(case))
    return k < magnitudes.numel() and bool(magnitudes[k] == magnitudes[k - 1]) and k > 1 \
        and bool(magnitudes[k - 2] == magnitudes[k - 1])


def _threshold_cases() -> list[Case]:
    g = _generator(1001)
    relu_like = torch.relu(torch.randn(6, 20, generator=g) - 0.3)             # 55 % exact zeros here
    relu_like[0, :4] = -0.0                                                  # signed zeros are zeros too
    tied = torch.randn(4, 10, generator=g)
    tied[:, :5] = 0.25 * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])           # 20 entries of |m| = 0.25
    tied[:, 5:] = tied[:, 5:].sign() * (0.5 + tied[:, 5:].abs())             # the rest above 0.5
    return [
        Case((F.gelu(2 * torch.randn(6, 16, generator=g)), 0.7), note="GELU outputs m (6, 16), s=0.7 (s·n = 67.2)"),
        Case((torch.randn(5, 20, generator=g), 0.698), note="m (5, 20), s=0.698 (s·n = 69.8)"),
        Case((torch.randn(4, 16, generator=g), 0.5), note="m (4, 16), s=0.5 (s·n = 32 exactly)"),
        Case((relu_like, 0.5), note="ReLU outputs, 55 % exact zeros (some -0.0), s=0.5"),
        Case((tied, 0.32), note="20 of 40 entries at |m| = 0.25, s=0.32"),
        Case((torch.randn(3, 7, generator=g), 1.0), note="s=1: every entry skipped"),
        Case((torch.randn(5, 20, generator=g), 0.004), note="s=0.004 (s·n = 0.4): the smallest |m| alone"),
        Case((torch.randn(1, 9, generator=g), 0.5), note="one token: m (1, 9), s=0.5"),
        Case((torch.randn(7, 1, generator=g), 0.3), note="one neuron: m (7, 1), s=0.3"),
        Case((torch.tensor([[-1.5]]), 0.5), note="one entry: m (1, 1) = -1.5, s=0.5"),
        Case((1e4 * torch.randn(3, 10, generator=g), 0.41), note="large magnitudes (about 1e4), s=0.41"),
        Case((1e-6 * torch.randn(4, 8, generator=g), 0.5625), note="tiny magnitudes (about 1e-6), s=0.5625"),
    ]


def _threshold_wrong(kind: str):
    def wrong(m, s):
        if kind.startswith("quantile"):                              # torch.quantile(|m|, s, interpolation=...)
            magnitudes = m.abs().flatten()
            tau = torch.quantile(magnitudes, s, interpolation=kind.split()[1]).item()
            return tau, (magnitudes <= tau).double().mean().item()
        magnitudes = m.flatten() if kind == "no abs" else m.abs().flatten()
        n = magnitudes.numel()
        k = {"round": round(s * n), "round, -1 for none": round(s * n), "round, at least 1": max(round(s * n), 1),
             "floor": int(s * n),
             "floor, at least 1": max(int(s * n), 1), "floor + 1": int(s * n) + 1}.get(kind, _entries_for_share(s, n))
        if kind == "index k":                                        # sorted[⌈s·n⌉], counted from 0
            tau = magnitudes.sort().values[math.ceil(s * n)].item()
            return tau, (magnitudes <= tau).double().mean().item()
        if kind == "per row":
            tau = m.abs().kthvalue(math.ceil(s * m.shape[-1]), dim=-1).values
            return tau, (m.abs() <= tau[:, None]).double().mean(dim=-1)
        if kind == "round, -1 for none":                            # helpers' calibrate_threshold, copied
            if s >= 1:
                raise ValueError("skip must be a probability in [0, 1)")
            if k == 0:
                return -1.0, 0.0
        tau = magnitudes.kthvalue(k).values.item()
        if kind == "asked share":
            return tau, s
        if kind == "strict":
            return tau, (magnitudes < tau).double().mean().item()
        return tau, (magnitudes <= tau).double().mean().item()
    return wrong


check_threshold_for_share = Exercise(
    "Exercise 1 (a threshold that skips a share s)",
    _threshold_for_share,
    _threshold_cases,
    [
        ("at least a share s means at least s·n entries: round up, k = ⌈s·n⌉ (rounding to the nearest skips less "
         "than s when s·n has a fraction below ½).", _threshold_wrong("round")),
        ("at least a share s means at least s·n entries: round up, k = ⌈s·n⌉ (rounding to the nearest skips less "
         "than s when s·n has a fraction below ½; max(round(s·n), 1) only mends s·n < ½).",
         _threshold_wrong("round, at least 1")),
        ("at least a share s means at least s·n entries: round up, k = ⌈s·n⌉ (rounding to the nearest skips less "
         "than s when s·n has a fraction below ½; helpers' calibrate_threshold aims at about s, not at least s).",
         _threshold_wrong("round, -1 for none")),
        ("at least a share s means at least s·n entries: round up, k = ⌈s·n⌉, not down (int() drops the "
         "fraction).", _threshold_wrong("floor")),
        ("at least a share s means at least s·n entries: round up, k = ⌈s·n⌉, not down (int() drops the "
         "fraction, and max(int(s·n), 1) only mends s·n < 1).", _threshold_wrong("floor, at least 1")),
        ("when s·n is a whole number, exactly s·n entries already make the share s: k = ⌈s·n⌉, not "
         "int(s·n) + 1.", _threshold_wrong("floor + 1")),
        ("τ is the ⌈s·n⌉-th smallest |m_i|, counted from 1: in a sorted tensor, counted from 0, that is index "
         "⌈s·n⌉ − 1 (index ⌈s·n⌉ is one entry too far, and out of range at s = 1).", _threshold_wrong("index k")),
        ("rank the magnitudes |m_i|: a large negative coefficient is not silent.", _threshold_wrong("no abs")),
        ("return the share τ really skips, the entries with |m_i| <= τ over all entries: entries tied with τ "
         "are skipped too, so it can be more than s.", _threshold_wrong("asked share")),
        ("the share skipped counts |m_i| <= τ: the entries equal to τ are skipped too.", _threshold_wrong("strict")),
        ("one τ for the whole layer, the ⌈s·n⌉-th smallest of all N·d_ff magnitudes, not one per token.",
         _threshold_wrong("per row")),
        *[(f"torch.quantile (interpolation='{how}') estimates a quantile at the position s·(n−1), counted from 0; "
           "it does not count: τ is the ⌈s·n⌉-th smallest |m_i| itself (kthvalue).", _threshold_wrong(f"quantile {how}"))
          for how in ("linear", "lower", "higher", "nearest", "midpoint")],
    ],
    atol=1e-12, rtol=1e-6, kind="build",
    domain=Domain(
        allows="m: float32 (N, d_ff), N >= 1, d_ff >= 1, any finite values of either sign (signed zeros and ties "
               "included), distinct magnitudes at least 1e-5 apart relatively; s: a Python float, 0 < s <= 1, and "
               "s·N·d_ff a whole number only where that product is exact in binary (s = 0.5, 1), else at least "
               "0.01 from one; the answer: (tau, skipped), tau the ⌈s·N·d_ff⌉-th smallest |m_i|, skipped the "
               "share of entries with |m_i| <= tau (each a float: a Python float or a 0-d tensor)",
        corners=(
            Corner("s·n just above a whole number (round up, not to the nearest)",
                   lambda c: 0 < _fraction(c) < 0.5 and _count(c) > 1),
            Corner("s·n just below a whole number (round up, not down)", lambda c: _fraction(c) > 0.5),
            Corner("s·n a whole number, s < 1", lambda c: _fraction(c) == 0 and c.args[1] < 1 and _count(c) > 1),
            Corner("k = 1 (s·n <= 1, the smallest |m|)", lambda c: _count(c) <= 1 and c.args[0].numel() > 1),
            Corner("s = 1 (the largest |m|)", lambda c: c.args[1] == 1),
            Corner("exact zeros (and -0.0) tied across tau = 0",
                   lambda c: _tied_at_tau(c) and bool((c.args[0] == 0).any())
                   and float(c.args[0].abs().flatten().kthvalue(math.ceil(_count(c))).values) == 0),
            Corner("a non-zero |m| tied across tau (+tau and -tau)",
                   lambda c: _tied_at_tau(c) and float(c.args[0].abs().flatten().kthvalue(math.ceil(_count(c)))
                                                       .values) > 0),
            Corner("negative entries", lambda c: bool((c.args[0] < 0).any())),
            Corner("one token (N = 1)", lambda c: c.args[0].shape[0] == 1),
            Corner("one neuron (d_ff = 1)", lambda c: c.args[0].shape[-1] == 1),
            Corner("one entry (N = d_ff = 1)", lambda c: c.args[0].numel() == 1),
            Corner("large magnitudes (>= 1e3)", lambda c: float(c.args[0].abs().max()) >= 1e3),
            Corner("tiny magnitudes (<= 1e-5)", lambda c: float(c.args[0].abs().max()) <= 1e-5),
        )),
)


# ---------------------------------------------------------------- exercise 2: skipping a SwiGLU FFN's silent neurons
def _skip_swiglu(x, W1, W3, W2, tau):
    gate = F.silu(W1 @ x)                                       # (d_ff,): every row of W1 is read
    keep = (gate.abs() > tau).nonzero().flatten()
    y = W2[:, keep] @ (gate[keep] * (W3[keep] @ x))
    d_ff, d_model = W1.shape
    return y, d_model * d_ff + 2 * d_model * len(keep)


def _swiglu_weights(g: torch.Generator, d_model: int, d_ff: int, scale: float = 1.0):
    W1 = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64) / math.sqrt(d_model)
    W3 = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64) / math.sqrt(d_model)
    W2 = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) * scale / math.sqrt(d_ff)
    return W1, W3, W2


def _gates(x, W1):
    return F.silu(W1 @ x).abs()


def _near(case: Case, below: bool) -> bool:
    """Is tau within 1e-5 relative below (``below``) or above a gate's magnitude in this case?"""
    x, W1, tau = case.args[0], case.args[1], case.args[4]
    gap = (_gates(x, W1) - tau) if below else (tau - _gates(x, W1))
    return tau > 0 and bool(((gap > 0) & (gap < 1e-5 * tau)).any())


def _skip_cases() -> list[Case]:
    g = _generator(1002)
    cases = []
    for d_model, d_ff, tau, note in [(6, 16, 0.1, "x (6,), d_ff=16, tau=0.1"), (8, 24, 0.3, "x (8,), d_ff=24, tau=0.3"),
                                     (5, 12, 0.0, "tau=0: every neuron whose gate is not exactly 0"),
                                     (4, 10, 1e6, "tau=1e6: nothing kept"), (1, 7, 0.05, "d_model=1, d_ff=7, tau=0.05"),
                                     (6, 1, 0.05, "one neuron: d_ff=1, tau=0.05")]:
        x = torch.randn(d_model, generator=g, dtype=torch.float64)
        W1, W3, W2 = _swiglu_weights(g, d_model, d_ff)
        cases.append(Case((x, W1, W3, W2, tau), note=note))
    x = torch.randn(5, generator=g, dtype=torch.float64)         # a zero row of W1: its gate is exactly 0
    W1, W3, W2 = _swiglu_weights(g, 5, 9)
    W1[2] = 0.0
    cases.append(Case((x, W1, W3, W2, 0.0), note="a row of W1 that is all zeros (gate exactly 0), tau=0"))
    x = torch.randn(6, generator=g, dtype=torch.float64)         # tau one relative step of 1e-6 either side of a gate
    W1, W3, W2 = _swiglu_weights(g, 6, 14)
    middle = _gates(x, W1).sort().values[7].item()
    cases.append(Case((x, W1, W3, W2, middle * (1 - 1e-6)), note="tau just below one gate's magnitude"))
    cases.append(Case((x.clone(), W1.clone(), W3.clone(), W2.clone(), middle * (1 + 1e-6)),
                      note="tau just above one gate's magnitude"))
    x = torch.ones(4, dtype=torch.float64)                       # gates on SiLU's negative side, |gate| near 0.27
    W1 = torch.tensor([[-0.3, -0.3, -0.3, -0.35], [0.1, 0.0, 0.0, 0.0], [-2.0, -2.0, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5],
                       [-0.1, 0.0, 0.0, 0.0]], dtype=torch.float64)
    _, W3, W2 = _swiglu_weights(g, 4, 5)
    cases.append(Case((x, W1, W3, W2, 0.2), note="gates on SiLU's negative side (down to -0.28), tau=0.2"))
    x = 100.0 * torch.randn(6, generator=g, dtype=torch.float64)
    W1, W3, W2 = _swiglu_weights(g, 6, 12, scale=100.0)
    cases.append(Case((x, W1, W3, W2, 50.0), note="large magnitudes: x about 100, tau=50"))
    x = torch.randn(3, generator=g, dtype=torch.float64)
    W1, W3, W2 = _swiglu_weights(g, 3, 8)
    cases.append(Case((x, W1, W3, W2, 0.0), note="tau=0 and no gate exactly 0: every neuron kept, x (3,), d_ff=8"))
    return cases


def _skip_wrong(kind: str):
    def wrong(x, W1, W3, W2, tau):
        gate = torch.relu(W1 @ x) if kind == "relu" else F.silu(W1 @ x)
        up = W3 @ x
        score = {"no abs": gate, "product": (gate * up).abs()}.get(kind, gate.abs())
        keep = ((score >= tau) if kind == "ties kept" else (score > tau)).nonzero().flatten()
        y = W2[:, keep] @ (gate[keep] * up[keep])
        d_ff, d_model = W1.shape
        n = len(keep)
        weights = {"W1 rows": 3 * d_model * n, "no W3": d_model * d_ff + d_model * n,
                   "dense": 3 * d_model * d_ff}.get(kind, d_model * d_ff + 2 * d_model * n)
        return y, weights
    return wrong


check_skip_swiglu = Exercise(
    "Exercise 2 (skipping a SwiGLU FFN's silent neurons)",
    _skip_swiglu,
    _skip_cases,
    [
        ("a gate on SiLU's negative side (down to about -0.28) is large when |gate| > tau: keep by the magnitude, "
         "gate.abs() > tau, not gate > tau.", _skip_wrong("no abs")),
        ("CATS thresholds the gate SiLU(W1 x) alone, before W3 x is computed (that is what lets W3's rows be "
         "skipped): keep |gate| > tau, not |gate · (W3 x)| > tau.", _skip_wrong("product")),
        ("SwiGLU's gate is SiLU(W1 x) (F.silu), not ReLU.", _skip_wrong("relu")),
        ("keep a neuron only when |gate| > tau, strictly: at tau = 0 a gate of exactly 0 is skipped (it would "
         "add nothing, and reading its weights costs bytes).", _skip_wrong("ties kept")),
        ("all of W1 must be read to compute every gate before any neuron can be skipped: weights_read = "
         "d_model·d_ff (W1) + 2·d_model·(neurons kept) (their rows of W3 and columns of W2).", _skip_wrong("W1 rows")),
        ("the kept neurons' rows of W3 are read too: weights_read = d_model·d_ff + 2·d_model·(neurons kept).",
         _skip_wrong("no W3")),
        ("count only what is read: all of W1, and W3's rows and W2's columns of the kept neurons, not all "
         "3·d_model·d_ff weights.", _skip_wrong("dense")),
    ],
    atol=1e-10, rtol=1e-9, kind="build",
    domain=Domain(
        allows="x: float64 (d_model,); W1, W3: float64 (d_ff, d_model); W2: float64 (d_model, d_ff); d_model, d_ff "
               ">= 1; no biases; tau: a float >= 0, never within 1e-7 relative of a gate's magnitude; the answer: "
               "(y float64 (d_model,), weights_read an int)",
        corners=(
            Corner("tau = 0 with a gate exactly 0 (skipped)",
                   lambda c: c.args[4] == 0 and bool((_gates(c.args[0], c.args[1]) == 0).any())),
            Corner("tau = 0 with every gate non-zero (all kept)",
                   lambda c: c.args[4] == 0 and bool((_gates(c.args[0], c.args[1]) > 0).all())),
            Corner("nothing kept", lambda c: not bool((_gates(c.args[0], c.args[1]) > c.args[4]).any())),
            Corner("tau within 1e-5 relative below a gate's magnitude", lambda c: _near(c, below=True)),
            Corner("tau within 1e-5 relative above a gate's magnitude", lambda c: _near(c, below=False)),
            Corner("a gate below -tau (SiLU's negative side) kept",
                   lambda c: c.args[4] > 0 and bool((F.silu(c.args[1] @ c.args[0]) < -c.args[4]).any())),
            Corner("one neuron (d_ff = 1)", lambda c: c.args[1].shape[0] == 1),
            Corner("d_model = 1", lambda c: c.args[1].shape[1] == 1),
            Corner("large magnitudes (|x| >= 50)", lambda c: float(c.args[0].abs().max()) >= 50),
        )),
    returns=python_int(item=1, name="weights_read"),
)


# ---------------------------------------------------------------- exercise 3: the union of a batch's active neurons
def _expected_union(rates: torch.Tensor, batch: int) -> float:
    return float((1 - (1 - rates) ** batch).mean())


def _union_cases() -> list[Case]:
    g = _generator(1003)
    skewed = torch.rand(40, generator=g, dtype=torch.float64) ** 4       # a few hot neurons, many cold
    with_ends = torch.rand(12, generator=g, dtype=torch.float64)
    with_ends[:2], with_ends[2:4] = 0.0, 1.0                             # dead neurons and always-on ones
    return [
        Case((skewed, 8), note="uneven rates (40 neurons), batch=8"),
        Case((skewed.clone(), 1), note="batch=1 (one token)"),
        Case((with_ends, 16), note="rates of 0 (dead) and 1 (always on), batch=16"),
        Case((torch.full((10,), 0.3, dtype=torch.float64), 5), note="equal rates 0.3, batch=5"),
        Case((torch.rand(25, generator=g, dtype=torch.float64) * 0.05, 1_000_000), note="batch=1,000,000"),
        Case((torch.tensor([0.2], dtype=torch.float64), 3), note="one neuron, rate 0.2, batch=3"),
        Case((torch.full((6,), 1e-9, dtype=torch.float64), 1000), note="tiny rates (1e-9), batch=1000"),
        Case((torch.rand(30, generator=g, dtype=torch.float64), 64), note="uniform rates (30 neurons), batch=64"),
    ]


def _union_wrong(kind: str):
    def wrong(rates, batch):
        if kind == "mean rate":
            return float(1 - (1 - rates.mean()) ** batch)
        if kind == "linear":
            return float((batch * rates).clamp(max=1.0).mean())
        if kind == "none active":
            return float(((1 - rates) ** batch).mean())
        if kind == "count":
            return float((1 - (1 - rates) ** batch).sum())
        if kind == "rate to the power":
            return float((1 - rates ** batch).mean())
        raise AssertionError(kind)
    return wrong


check_expected_union = Exercise(
    "Exercise 3 (the union of a batch's active neurons)",
    _expected_union,
    _union_cases,
    [
        ("you used one mean rate for every neuron (notebook 07's equal-rates formula); average 1 − (1 − p_i)^B over "
         "the neurons instead: uneven rates give a smaller union.", _union_wrong("mean rate")),
        ("B tokens do not reach B·p_i of a neuron: it is read once if any token fires it, with probability "
         "1 − (1 − p_i)^B.", _union_wrong("linear")),
        ("(1 − p_i)^B is the probability that no token fires neuron i; the union needs 1 minus it.",
         _union_wrong("none active")),
        ("return the share of neurons (the mean over neurons), not their expected number.", _union_wrong("count")),
        ("neuron i is silent for one token with probability 1 − p_i, for all B with (1 − p_i)^B; the union is "
         "1 − (1 − p_i)^B, not 1 − p_i^B.", _union_wrong("rate to the power")),
    ],
    atol=1e-12, rtol=1e-6, kind="investigate",
    domain=Domain(
        allows="rates: float64 (d_ff,), d_ff >= 1, each in [0, 1]; batch: an int from 1 to 1,000,000; the answer: a "
               "float (a Python float or a 0-d tensor), the expected share of neurons fired by at least one of batch independent tokens",
        corners=(
            Corner("batch = 1", lambda c: c.args[1] == 1),
            Corner("batch = 1,000,000", lambda c: c.args[1] == 1_000_000),
            Corner("a rate of 0 (dead neuron)", lambda c: bool((c.args[0] == 0).any())),
            Corner("a rate of 1 (always on)", lambda c: bool((c.args[0] == 1).any())),
            Corner("all rates equal", lambda c: bool((c.args[0] == c.args[0][0]).all()) and c.args[0].numel() > 1),
            Corner("one neuron", lambda c: c.args[0].numel() == 1),
            Corner("tiny rates (<= 1e-8)", lambda c: float(c.args[0].max()) <= 1e-8),
        )),
)


# ---------------------------------------------------------------- exercise 4: a predictor's recall
def _recall(predicted: torch.Tensor, active: torch.Tensor) -> float:
    total = int(active.sum())
    return 1.0 if total == 0 else int((predicted & active).sum()) / total


def _recall_cases() -> list[Case]:
    g = _generator(1004)
    active = torch.rand(8, 20, generator=g) < 0.3
    noisy = active ^ (torch.rand(8, 20, generator=g) < 0.15)
    uneven = torch.zeros(4, 10, dtype=torch.bool)
    uneven[0, :9], uneven[1, :1], uneven[3, 2:6] = True, True, True        # 9, 1, 0 and 4 active neurons
    guess = torch.zeros(4, 10, dtype=torch.bool)
    guess[0, :3], guess[1, :1], guess[2, 5], guess[3, 2:4] = True, True, True, True
    return [
        Case((noisy, active), note="predicted (8, 20) with misses and extras"),
        Case((guess, uneven), note="rows with 9, 1, 0 and 4 active neurons"),
        Case((torch.zeros(3, 5, dtype=torch.bool), torch.zeros(3, 5, dtype=torch.bool)),
             note="nothing active anywhere (and nothing predicted)"),
        Case((torch.ones(6, 7, dtype=torch.bool), torch.rand(6, 7, generator=g) < 0.5),
             note="every neuron predicted"),
        Case((torch.zeros(5, 9, dtype=torch.bool), torch.rand(5, 9, generator=g) < 0.5),
             note="nothing predicted"),
        Case((torch.tensor([[True, False, True, True]]), torch.tensor([[True, True, False, True]])),
             note="a batch of one, 4 neurons"),
        Case((torch.rand(10, 1, generator=g) < 0.5, torch.rand(10, 1, generator=g) < 0.5), note="one neuron"),
    ]


def _recall_wrong(kind: str):
    def wrong(predicted, active):
        hits, total = (predicted & active).sum(dim=-1).double(), active.sum(dim=-1).double()
        if kind == "per row":
            return float((hits / total.clamp(min=1)).mean())
        if kind == "per row, empty 1":
            return float(torch.where(total > 0, hits / total.clamp(min=1), torch.ones_like(total)).mean())
        if kind == "per neuron":
            hits, total = (predicted & active).sum(dim=0).double(), active.sum(dim=0).double()
            return float(torch.where(total > 0, hits / total.clamp(min=1), torch.ones_like(total)).mean())
        if kind == "per row, active rows":
            rows = total > 0
            return float((hits[rows] / total[rows]).mean()) if rows.any() else 1.0
        if kind == "precision":
            n = int(predicted.sum())
            return 1.0 if n == 0 else int((predicted & active).sum()) / n
        if kind == "accuracy":
            return float((predicted == active).double().mean())
        if kind == "empty zero":
            n = int(active.sum())
            return 0.0 if n == 0 else int((predicted & active).sum()) / n
        if kind == "miss rate":
            n = int(active.sum())
            return 0.0 if n == 0 else int((~predicted & active).sum()) / n
        raise AssertionError(kind)
    return wrong


check_recall = Exercise(
    "Exercise 4 (a predictor's recall)",
    _recall,
    _recall_cases,
    [
        ("pool over the tokens (Σ hits / Σ active over the whole batch, as Deja Vu's code does); a mean of per-token "
         "recalls weighs a token with 1 active neuron like one with 9.", _recall_wrong("per row")),
        ("pool over the tokens (Σ hits / Σ active over the whole batch); a mean of per-token recalls weighs a token "
         "with 1 active neuron like one with 9.", _recall_wrong("per row, active rows")),
        ("pool over the tokens (Σ hits / Σ active over the whole batch); a mean of per-token recalls weighs a token "
         "with 1 active neuron like one with 9 (and 1.0 is for a batch with nothing active, not for each silent "
         "token).", _recall_wrong("per row, empty 1")),
        ("pool over all entries (Σ hits / Σ active over the whole batch); a mean of per-neuron recalls weighs a "
         "neuron that fires once like one that fires on every token.", _recall_wrong("per neuron")),
        ("that is the precision (hits / predicted); recall divides by the active neurons: Σ (predicted ∧ active) / "
         "Σ active.", _recall_wrong("precision")),
        ("that is the accuracy over all entries (it counts correctly predicted silent neurons too); recall is "
         "Σ (predicted ∧ active) / Σ active.", _recall_wrong("accuracy")),
        ("with nothing active there is nothing to miss: the statement asks for 1.0 there.", _recall_wrong("empty zero")),
        ("that is the share missed (1 − recall); return the share of active neurons that were predicted.",
         _recall_wrong("miss rate")),
    ],
    atol=1e-12, rtol=1e-6, kind="investigate",
    domain=Domain(
        allows="predicted, active: bool (N, d_ff) of the same shape, N >= 1, d_ff >= 1, any pattern; the answer: a "
               "float (a Python float or a 0-d tensor), Σ (predicted ∧ active) / Σ active pooled over all tokens, 1.0 when nothing is active",
        corners=(
            Corner("nothing active anywhere", lambda c: not bool(c.args[1].any())),
            Corner("every neuron predicted", lambda c: bool(c.args[0].all())),
            Corner("nothing predicted while some are active",
                   lambda c: not bool(c.args[0].any()) and bool(c.args[1].any())),
            Corner("tokens with different active counts, one with none",
                   lambda c: len(set(c.args[1].sum(-1).tolist())) > 2 and bool((c.args[1].sum(-1) == 0).any())),
            Corner("a batch of one (N = 1)", lambda c: c.args[0].shape[0] == 1),
            Corner("one neuron (d_ff = 1)", lambda c: c.args[0].shape[-1] == 1),
        )),
)


EXERCISES = [check_threshold_for_share, check_skip_swiglu, check_expected_union, check_recall]
