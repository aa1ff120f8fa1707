"""Checkers for the exercises of notebook 09 (superposition and sparse dictionaries in the FFN).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_topk_activation(topk_activation)``; it prints one line (not attempted / passed / what is wrong, with
the likely mistake when one explains every failing case). Each exercise declares the domain its statement
allows (``Domain``) and its seeded hidden cases reach every corner of it: k = 1 and k = F (every feature), a
batch of one, one feature, rows that are all zero or have fewer than k positive entries, ties at the k-th value
wider than the room left (the stated rule: lower index kept), in rows long enough that an unstable sort
reorders them, large and tiny magnitudes, an output mean far from zero, a constant output dimension.

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): ``W_enc`` is ``(F, d_in)`` (row i = key of
feature i), ``W_dec`` is ``(d_out, F)`` (column i = value of feature i), ``W2`` is ``(d_model, d_ff)``
(column i = value of neuron i); a batch of row vectors ``X`` gives ``X W_encᵀ``.

==============================  =========  ========================================================  =================
checker                         kind       your function                                             returns
==============================  =========  ========================================================  =================
``check_topk_activation``       build      ``topk_activation(pre, k)``                                ``(B, F)`` float32
``check_transcoder``            build      ``transcoder_forward(x, y, W_enc, b_enc, W_dec, b_dec, k)``  codes, ŷ, loss
``check_fvu``                   invest.    ``fraction_of_variance_unexplained(y, y_hat)``             float64
``check_top_sub_updates``       invest.    ``top_sub_updates(m, W2, b2, k)``                           ``(N, d_model)``
``check_features_used``         invest.    ``features_used(codes)``                                    int
``check_toy_forward``           build      ``toy_forward(W, b, x, importance)``                        x_hat, loss
``check_training_step``         build      ``training_step(W_enc, b_enc, W_dec, b_dec, x, k, lr)``      4 params, loss
``check_resample_dead``         build      ``resample_dead(W_enc, b_enc, W_dec, x, x_hat, dead, scale)``  3 params
==============================  =========  ========================================================  =================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.exercises.engine import Case, Corner, Domain, Exercise, _fresh
from helpers.exercises.returns import Returns, type_name
from helpers.exercises.verdict import FAILED, NOT_ATTEMPTED


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _keep_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the k largest entries of each row; among equal values the lower index wins."""
    order = scores.sort(dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, order, True)


def _tie_overflow(scores: torch.Tensor, k: int, *, positive: bool = True) -> bool:
    """Does some row have more entries equal to its k-th largest value than fit among the k kept (and, with
    ``positive``, is that value above 0, so that which of them is kept shows in the answer)?"""
    kth = scores.sort(dim=-1, descending=True).values[..., k - 1:k]
    tied = (scores == kth).sum(-1)
    room = k - (scores > kth).sum(-1)
    hit = tied > room
    if positive:
        hit &= kth[..., 0] > 0
    return bool(hit.any())


def _wide_tie(scores: torch.Tensor, k: int) -> bool:
    """Ties that do not fit, in rows of 32 or more entries, where an unstable sort reorders equal values."""
    return scores.shape[-1] >= 32 and _tie_overflow(scores, k)


def _corner(name: str, test) -> Corner:
    """A ``Corner`` whose test may inspect the case's arguments freely (errors count as not reached)."""
    def reached(case: Case) -> bool:
        try:
            return bool(test(*case.args))
        except Exception:
            return False
    return Corner(name, reached)


# ---------------------------------------------------------------- exercise 1: the TopK activation
def _topk_activation(pre: torch.Tensor, k: int) -> torch.Tensor:
    return torch.where(_keep_mask(pre, k), torch.relu(pre), torch.zeros((), dtype=pre.dtype))


def _tie_rows() -> torch.Tensor:
    """Rows whose k-th largest value (k = 3) is shared by more entries than fit."""
    return torch.tensor([[1.0, 3.0, 2.0, 3.0, 3.0, 0.5, 3.0, -1.0],
                         [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                         [0.25, 5.0, 0.25, 0.25, -4.0, 0.25, 0.1, 0.25],
                         [7.0, 1.5, 1.5, 9.0, 1.5, 0.0, 1.5, 1.5]])


def _topk_cases() -> list[Case]:
    g = _generator(901)
    mixed = torch.randn(6, 12, generator=g)
    mixed[0, :9] = -mixed[0, :9].abs()                           # a row with fewer than k positive entries
    mixed[1] = -mixed[1].abs() - 0.1                             # a row with none
    mixed[2, 3] = -40.0                                           # a large negative entry
    big = torch.randn(3, 9, generator=g) * 1e6
    big[0, 0] = -5e6
    tiny = torch.randn(2, 5, generator=g) * 1e-6
    return [
        Case((torch.randn(4, 10, generator=g), 3), note="pre (4, 10), k=3"),
        Case((torch.randn(5, 7, generator=g), 1), note="pre (5, 7), k=1"),
        Case((torch.randn(3, 6, generator=g), 6), note="pre (3, 6), k=F=6 (every feature)"),
        Case((torch.randn(1, 12, generator=g), 4), note="a batch of one: pre (1, 12), k=4"),
        Case((_tie_rows(), 3), note="ties at the k-th value: pre (4, 8), k=3"),
        Case((torch.zeros(3, 8), 2), note="all-zero rows: pre (3, 8), k=2"),
        Case((mixed, 5), note="rows with fewer than k positive entries and a large negative one: pre (6, 12), k=5"),
        Case((big, 2), note="large magnitudes (about 1e6): pre (3, 9), k=2"),
        Case((tiny, 2), note="tiny magnitudes (about 1e-6): pre (2, 5), k=2"),
        Case((torch.randn(2, 1, generator=g), 1), note="one feature: pre (2, 1), k=1"),
        Case((torch.randn(8, 3, generator=g), 2), note="more rows than features: pre (8, 3), k=2"),
        Case((_wide_tie_rows(g), 3), note="ties at the k-th value in long rows: pre (3, 40), k=3"),
    ]


def _wide_tie_rows(g: torch.Generator) -> torch.Tensor:
    """Rows of 40 small integers: the k-th value is shared by about a third of each row (an unstable sort,
    as torch's is for rows this long, keeps other tied entries than the lowest indices)."""
    return torch.randint(0, 3, (3, 40), generator=g).float()


_TOPK_DOMAIN = Domain(
    allows="pre: float32 (B, F) with B >= 1, F >= 1, any finite values (either sign, |pre| from 0 to about 1e6 "
           "and from about 1e-6 up), ties anywhere; k: int, 1 <= k <= F. Ties at the k-th value: the lowest indices "
           "are kept. Answer: (B, F), the ReLU of the kept entries, 0 elsewhere (float32; float64 with the same "
           "values passes).",
    corners=(
        _corner("k = 1", lambda pre, k: k == 1),
        _corner("k = F (every feature kept)", lambda pre, k: k == pre.shape[-1] and pre.shape[-1] > 1),
        _corner("a batch of one (B = 1)", lambda pre, k: pre.shape[0] == 1),
        _corner("one feature (F = 1)", lambda pre, k: pre.shape[-1] == 1),
        _corner("ties at a positive k-th value wider than the room left", lambda pre, k: _tie_overflow(pre, k)),
        _corner("a row of equal positive values, k < F",
                lambda pre, k: k < pre.shape[-1] and bool(((pre == pre[:, :1]) & (pre > 0)).all(1).any())),
        _corner("such ties in rows of 32+ entries (where an unstable sort reorders them)", _wide_tie),
        _corner("a row with fewer than k positive entries (a kept entry becomes 0)",
                lambda pre, k: bool(((pre > 0).sum(1) < k).any() & ((pre > 0).sum(1) > 0).any())),
        _corner("a row with no positive entry", lambda pre, k: bool((pre <= 0).all(1).any() & (pre != 0).any())),
        _corner("an all-zero row", lambda pre, k: bool((pre == 0).all(1).any())),
        _corner("a negative entry larger in size than every positive one in its row",
                lambda pre, k: bool((pre.min(1).values.abs() > pre.max(1).values.clamp(min=0)).any()
                                    & (pre > 0).any(1).any())),
        _corner("large magnitudes (|pre| >= 1e6)", lambda pre, k: bool(pre.abs().max() >= 1e6)),
        _corner("tiny magnitudes (0 < |pre| <= 1e-5 throughout)",
                lambda pre, k: bool((pre.abs().max() <= 1e-5) & (pre != 0).any())),
        _corner("more rows than features (B > F)", lambda pre, k: pre.shape[0] > pre.shape[1]),
    ),
)


def _topk_wrong(kind: str):
    def wrong(pre, k):
        if kind == "abs":
            keep = _keep_mask(pre.abs(), k)
            return torch.where(keep, torch.relu(pre), torch.zeros((), dtype=pre.dtype))
        if kind == "no relu":
            return torch.where(_keep_mask(pre, k), pre, torch.zeros((), dtype=pre.dtype))
        if kind == "all ties":
            kth = pre.topk(k, dim=-1).values[..., -1:]
            return torch.where(pre >= kth, torch.relu(pre), torch.zeros((), dtype=pre.dtype))
        if kind == "torch.topk":
            top = pre.topk(k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
        if kind == "torch.topk, no relu":
            top = pre.topk(k, dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values)
        if kind == "all ties, no relu":
            kth = pre.topk(k, dim=-1).values[..., -1:]
            return torch.where(pre >= kth, pre, torch.zeros((), dtype=pre.dtype))
        if kind == "unstable argsort, no relu":
            kept = pre.argsort(dim=-1, descending=True)[:, :k]
            return torch.zeros_like(pre).scatter(-1, kept, pre.gather(-1, kept))
        if kind == "dim 0":
            top = pre.topk(k, dim=0)
            return torch.zeros_like(pre).scatter(0, top.indices, torch.relu(top.values))
        if kind == "values only":
            return torch.relu(pre.topk(k, dim=-1).values)
        if kind == "smallest":
            keep = _keep_mask(-pre, k)
            return torch.where(keep, torch.relu(pre), torch.zeros((), dtype=pre.dtype))
        if kind == "unstable argsort":
            kept = pre.argsort(dim=-1, descending=True)[:, :k]
            return torch.zeros_like(pre).scatter(-1, kept, torch.relu(pre.gather(-1, kept)))
        raise AssertionError(kind)
    return wrong


TIE_HINT = ("among entries equal to the k-th largest value keep the lowest indices: torch.topk promises no order "
            "among ties, but a stable sort does (pre.sort(dim=-1, descending=True, stable=True).indices[:, :k]).")

UNSTABLE_TIE_HINT = TIE_HINT.replace("torch.topk promises", "an unstable sort (argsort without stable=True) promises")
RELU_HINT = "a kept entry below 0 must become 0: apply the ReLU to the k values you keep."

check_topk_activation = Exercise(
    "Exercise 1 (the TopK activation)",
    _topk_activation,
    _topk_cases,
    [
        ("entries equal to the k-th largest value were all kept; keep exactly k per row, the lowest indices "
         "first among equals.", _topk_wrong("all ties")),
        (TIE_HINT, _topk_wrong("torch.topk")),
        (UNSTABLE_TIE_HINT, _topk_wrong("unstable argsort")),
        (RELU_HINT, _topk_wrong("no relu")),
        (f"two slips: {RELU_HINT[:-1]}; and {TIE_HINT}", _topk_wrong("torch.topk, no relu")),
        (f"two slips: {RELU_HINT[:-1]}; and {UNSTABLE_TIE_HINT}", _topk_wrong("unstable argsort, no relu")),
        (f"two slips: {RELU_HINT[:-1]}; and entries equal to the k-th largest value were all kept: keep exactly k "
         "per row, the lowest indices first among equals.", _topk_wrong("all ties, no relu")),
        ("you ranked by absolute value; TopK keeps the k *largest* pre-activations (a large negative one is "
         "not kept).", _topk_wrong("abs")),
        ("you chose the top k along the batch (dim 0); choose them in each row, among the F features (dim=-1).",
         _topk_wrong("dim 0")),
        ("return the full (B, F) tensor, with the kept values at their own positions and 0 elsewhere, not "
         "only the k values.", _topk_wrong("values only")),
        ("you kept the k smallest entries; TopK keeps the k largest.", _topk_wrong("smallest")),
    ],
    kind="build", domain=_TOPK_DOMAIN,
)


# ---------------------------------------------------------------- exercise 2: a transcoder's forward pass and loss
def _transcoder(x, y, W_enc, b_enc, W_dec, b_dec, k):
    codes = _topk_activation(x @ W_enc.T + b_enc, k)
    y_hat = codes @ W_dec.T + b_dec
    return codes, y_hat, float(((y - y_hat) ** 2).sum(dim=-1).mean())


def _transcoder_cases() -> list[Case]:
    g = _generator(902)
    plan = [  # (B, d_in, d_out, F, k, note)
        (6, 5, 5, 12, 3, "x (6, 5), 12 features, k=3"),
        (4, 4, 3, 9, 1, "k=1: x (4, 4), d_out=3, 9 features"),
        (3, 3, 4, 7, 7, "k=F=7 (every feature): x (3, 3), d_out=4"),
        (1, 6, 6, 10, 4, "a batch of one: x (1, 6), 10 features, k=4"),
        (5, 4, 4, 4, 2, "as many features as inputs: x (5, 4), 4 features, k=2"),
        (4, 3, 5, 5, 2, "as many features as outputs: x (4, 3), d_out=5, 5 features, k=2"),
        (7, 8, 8, 16, 5, "x (7, 8), 16 features, k=5"),
    ]
    cases = []
    for B, d_in, d_out, F, k, note in plan:
        x = torch.randn(B, d_in, generator=g, dtype=torch.float64)
        y = torch.randn(B, d_out, generator=g, dtype=torch.float64) * 3.0
        W_enc = torch.randn(F, d_in, generator=g, dtype=torch.float64)
        b_enc = torch.randn(F, generator=g, dtype=torch.float64)
        W_dec = torch.randn(d_out, F, generator=g, dtype=torch.float64)
        b_dec = torch.randn(d_out, generator=g, dtype=torch.float64)
        cases.append(Case((x, y, W_enc, b_enc, W_dec, b_dec, k), note=note))
    # all-zero input: the codes come from b_enc alone, which has ties at the k-th value
    x = torch.zeros(3, 4, dtype=torch.float64)
    b_enc = torch.tensor([0.5, 2.0, 0.5, 0.5, 0.5, 0.5], dtype=torch.float64)
    W_enc = torch.randn(6, 4, generator=g, dtype=torch.float64)
    W_dec = torch.randn(4, 6, generator=g, dtype=torch.float64)
    cases.append(Case((x, torch.randn(3, 4, generator=g, dtype=torch.float64), W_enc, b_enc, W_dec,
                       torch.randn(4, generator=g, dtype=torch.float64), 3),
                      note="an all-zero input x (3, 4) and ties in b_enc at the k-th value, k=3"))
    # large magnitudes: an FFN output of size ~1e4
    x = torch.randn(4, 5, generator=g, dtype=torch.float64) * 100.0
    cases.append(Case((x, 1e4 * torch.randn(4, 5, generator=g, dtype=torch.float64),
                       torch.randn(8, 5, generator=g, dtype=torch.float64), torch.zeros(8, dtype=torch.float64),
                       100.0 * torch.randn(5, 8, generator=g, dtype=torch.float64),
                       1e4 * torch.ones(5, dtype=torch.float64), 2),
                      note="large magnitudes: x ~ 100, y ~ 1e4, 8 features, k=2"))
    # ties in long rows: b_enc of small integers shared by many features, x = 0 (an unstable sort reorders them)
    b_enc = torch.randint(1, 3, (40,), generator=g).double()
    cases.append(Case((torch.zeros(2, 3, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64),
                       torch.randn(40, 3, generator=g, dtype=torch.float64), b_enc,
                       torch.randn(3, 40, generator=g, dtype=torch.float64),
                       torch.randn(3, generator=g, dtype=torch.float64), 2),
                      note="ties at the k-th value in long rows: x = 0, 40 features, b_enc of 1s and 2s, k=2"))
    # fewer features than inputs and outputs, and one feature
    cases.append(Case(tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in
                            [(5, 6), (5, 4), (3, 6), (3,), (4, 3), (4,)]) + (2,),
                      note="fewer features than inputs or outputs: x (5, 6), d_out=4, 3 features, k=2"))
    cases.append(Case(tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in
                            [(3, 2), (3, 2), (1, 2), (1,), (2, 1), (2,)]) + (1,),
                      note="one feature: x (3, 2), k=1"))
    return cases


def _pre(x, W_enc, b_enc):
    return x @ W_enc.T + b_enc


_TRANSCODER_DOMAIN = Domain(
    allows="x (B, d_in), y (B, d_out), W_enc (F, d_in), b_enc (F,), W_dec (d_out, F), b_dec (d_out,), all float64 "
           "with any finite values (up to about 1e4, either sign); B, d_in, d_out, F >= 1 in any relation to each "
           "other; k: int, 1 <= k <= F; ties in the pre-activations at the k-th value keep the lowest indices. "
           "Answer: codes (B, F), ŷ (B, d_out) float64, loss = mean over rows of the squared error summed over d_out.",
    corners=(
        _corner("k = 1", lambda *a: a[6] == 1),
        _corner("k = F (every feature kept)", lambda *a: a[6] == a[2].shape[0] > 1),
        _corner("a batch of one (B = 1)", lambda *a: a[0].shape[0] == 1),
        _corner("one feature (F = 1)", lambda *a: a[2].shape[0] == 1),
        _corner("d_in != d_out (a layout mistake shows)", lambda *a: a[0].shape[1] != a[1].shape[1]),
        _corner("F below d_in and d_out", lambda *a: a[2].shape[0] < min(a[0].shape[1], a[1].shape[1])),
        _corner("F = d_in", lambda *a: a[2].shape[0] == a[0].shape[1]),
        _corner("F = d_out", lambda *a: a[2].shape[0] == a[1].shape[1]),
        _corner("ties at a positive k-th pre-activation wider than the room left",
                lambda *a: _tie_overflow(_pre(a[0], a[2], a[3]), a[6])),
        _corner("such ties in rows of 32+ features", lambda *a: _wide_tie(_pre(a[0], a[2], a[3]), a[6])),
        _corner("a kept pre-activation below 0 (fewer than k positive)",
                lambda *a: bool(((_pre(a[0], a[2], a[3]) > 0).sum(1) < a[6]).any())),
        _corner("an all-zero input x", lambda *a: bool((a[0] == 0).all())),
        _corner("large magnitudes (|y| >= 1e3)", lambda *a: bool(a[1].abs().max() >= 1e3)),
    ),
)


def _transcoder_wrong(kind: str):
    def wrong(x, y, W_enc, b_enc, W_dec, b_dec, k):
        pre = (x @ W_enc if kind == "encoder layout" else x @ W_enc.T) + b_enc
        if kind == "no relu":
            codes = torch.where(_keep_mask(pre, k), pre, torch.zeros((), dtype=pre.dtype))
        elif kind == "dense relu":
            codes = torch.relu(pre)
        elif kind == "abs":
            codes = torch.where(_keep_mask(pre.abs(), k), torch.relu(pre), torch.zeros((), dtype=pre.dtype))
        elif "torch.topk" in kind:
            top = pre.topk(k, dim=-1)
            codes = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
        else:
            codes = _topk_activation(pre, k)
        y_hat = codes @ W_dec if kind == "decoder layout" else codes @ W_dec.T
        if kind != "no b_dec":
            y_hat = y_hat + b_dec
        target = x if kind == "target x" else y
        squared = (target - y_hat) ** 2
        if "mean all" in kind:
            loss = squared.mean()
        elif kind == "sum rows":
            loss = squared.sum()
        elif kind == "normalised":
            loss = squared.sum(dim=-1).mean() / ((target - target.mean(0)) ** 2).sum(dim=-1).mean()
        else:
            loss = squared.sum(dim=-1).mean()
        return codes, y_hat, float(loss)
    return wrong


def _stub_called_by(fn, case: Case) -> str | None:
    """The name of another function whose ``NotImplementedError`` ``fn`` passes on (e.g. Exercise 1's blank
    ``topk_activation`` called from a finished ``transcoder_forward``), or None when ``fn`` itself is the stub."""
    args, kwargs = _fresh(case.args, case.kwargs)
    try:
        fn(*args, **kwargs)
    except NotImplementedError as err:
        tb = err.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = getattr(fn, "__code__", None)
        return None if code is None or tb.tb_frame.f_code is code else tb.tb_frame.f_code.co_name
    except Exception:
        return None
    return None


class _NeedsExercise1(Exercise):
    """Exercise 2 may call the learner's ``topk_activation``: while that is still Exercise 1's stub, say so
    instead of calling a finished Exercise 2 "not attempted"."""

    def _evaluate(self, fn):
        result = super()._evaluate(fn)
        if result.status != NOT_ATTEMPTED or not callable(fn):
            return result
        stub = _stub_called_by(fn, self.cases()[0])
        if stub is None:
            return result
        return self._result(FAILED, f"your function calls `{stub}`, which still raises NotImplementedError: finish "
                                    f"Exercise 1 (or write the TopK inside this function), then run this cell again.",
                            "calls a stub")


check_transcoder = _NeedsExercise1(
    "Exercise 2 (a transcoder's forward pass and loss)",
    _transcoder,
    _transcoder_cases,
    [
        ("a transcoder is trained to reproduce the FFN's *output* y from its input x: the loss compares ŷ with y "
         "(comparing with x would make it a sparse autoencoder).", _transcoder_wrong("target x")),
        ("W_enc is (F, d_in) in nn.Linear's layout (row i = key i): the pre-activations are x @ W_enc.T + b_enc.",
         _transcoder_wrong("encoder layout")),
        ("W_dec is (d_out, F) in nn.Linear's layout (column i = value i): ŷ = codes @ W_dec.T + b_dec.",
         _transcoder_wrong("decoder layout")),
        ("b_dec is missing from ŷ = codes @ W_dec.T + b_dec.", _transcoder_wrong("no b_dec")),
        ("the loss divides by every element; sum the squared error over the d_out outputs of a row, then "
         "average over the rows.", _transcoder_wrong("mean all")),
        ("the loss sums over the rows; average the per-row squared error over the batch instead.",
         _transcoder_wrong("sum rows")),
        ("you divided by the variance of y, as section 3's training does (an FVU); this exercise asks for the "
         "loss before that division: the squared error summed over a row's d_out outputs, averaged over the rows.",
         _transcoder_wrong("normalised")),
        ("a kept negative pre-activation must become 0: apply ReLU to the k values you keep.",
         _transcoder_wrong("no relu")),
        (TIE_HINT + " (here the all-zero input leaves only b_enc, which has ties).", _transcoder_wrong("torch.topk")),
        ("two slips: the loss divides by every element (it is d_out times too small; sum the squared error over a "
         "row's d_out outputs, then average over the rows), and " + TIE_HINT,
         _transcoder_wrong("mean all, torch.topk")),
        ("the codes keep every positive pre-activation (a plain ReLU): keep only the k largest per row, with "
         "Exercise 1's TopK.", _transcoder_wrong("dense relu")),
        ("you ranked the pre-activations by absolute value; TopK keeps the k *largest* (a large negative one is "
         "not kept).", _transcoder_wrong("abs")),
    ],
    atol=1e-9, rtol=1e-9, kind="build", domain=_TRANSCODER_DOMAIN,
)


# ---------------------------------------------------------------- exercise 3: fraction of variance unexplained
def _fvu(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    return float(((y - y_hat) ** 2).sum() / ((y - y.mean(dim=0)) ** 2).sum())


def _fvu_cases() -> list[Case]:
    g = _generator(903)
    cases = []
    y = torch.randn(20, 6, generator=g, dtype=torch.float64)
    cases.append(Case((y, y + 0.3 * torch.randn(20, 6, generator=g, dtype=torch.float64)), note="y (20, 6)"))
    y = torch.randn(2, 3, generator=g, dtype=torch.float64)
    cases.append(Case((y, y + 0.1 * torch.randn(2, 3, generator=g, dtype=torch.float64)),
                      note="the fewest rows allowed: y (2, 3)"))
    y = 1e7 + torch.randn(50, 4, generator=g, dtype=torch.float64)
    cases.append(Case((y, y + 0.5 * torch.randn(50, 4, generator=g, dtype=torch.float64)),
                      note="a mean far from zero: y = 1e7 + noise, (50, 4)"))
    y = 1e-8 * torch.randn(10, 5, generator=g, dtype=torch.float64)
    cases.append(Case((y, y + 1e-9 * torch.randn(10, 5, generator=g, dtype=torch.float64)),
                      note="tiny magnitudes (about 1e-8): y (10, 5)"))
    y = torch.randn(8, 3, generator=g, dtype=torch.float64) * torch.tensor([100.0, 1.0, 0.01], dtype=torch.float64)
    cases.append(Case((y, y + torch.randn(8, 3, generator=g, dtype=torch.float64)),
                      note="outputs whose variances span 1e4: y (8, 3)"))
    y = torch.randn(6, 2, generator=g, dtype=torch.float64) + 5.0
    cases.append(Case((y, y.clone()), note="a perfect reconstruction: y_hat = y"))
    cases.append(Case((y, y.mean(dim=0, keepdim=True).expand_as(y).clone()),
                      note="the mean output as reconstruction: y_hat = mean of y"))
    y = torch.randn(12, 1, generator=g, dtype=torch.float64)
    cases.append(Case((y, torch.zeros(12, 1, dtype=torch.float64)), note="one output dimension, y_hat = 0"))
    y = torch.randn(9, 4, generator=g, dtype=torch.float64)
    y[:, 2] = 3.0                                                 # one output dimension never varies
    cases.append(Case((y, y + 0.2 * torch.randn(9, 4, generator=g, dtype=torch.float64)),
                      note="a constant output dimension: y (9, 4), column 2 always 3"))
    y = torch.randn(3, 7, generator=g, dtype=torch.float64) + 2.0
    cases.append(Case((y, -y), note="worse than the mean (FVU > 1), more dimensions than rows: y (3, 7), y_hat = -y"))
    return cases


def _total_ss(y: torch.Tensor) -> torch.Tensor:
    return ((y - y.mean(0)) ** 2).sum()


_FVU_DOMAIN = Domain(
    allows="y, y_hat: float64 (N, d) with N >= 2 and d >= 1 (N above or below d), any finite values (means up to "
           "about 1e7, magnitudes down to about 1e-8, dimensions of very different spread, a dimension that never "
           "varies), y not constant as a whole (Σ‖y − ȳ‖² > 0); y_hat anything of that shape, FVU 0 or above, "
           "also above 1. Answer: a Python float or 0-dim float64 tensor.",
    corners=(
        _corner("N = 2 (the fewest rows)", lambda y, h: y.shape[0] == 2),
        _corner("d = 1 (one output dimension)", lambda y, h: y.shape[1] == 1),
        _corner("more dimensions than rows (N < d)", lambda y, h: y.shape[0] < y.shape[1]),
        _corner("a mean far from zero (|ȳ| >= 1e6 × the spread)",
                lambda y, h: bool(y.mean(0).abs().max() >= 1e6 * y.std(0).max())),
        _corner("tiny magnitudes (|y| <= 1e-6)", lambda y, h: bool(y.abs().max() <= 1e-6)),
        _corner("dimensions whose variances span 1e4 or more",
                lambda y, h: bool(y.var(0).max() >= 1e4 * y.var(0).min() > 0)),
        _corner("a constant output dimension (zero variance there)", lambda y, h: bool((y.var(0) == 0).any())),
        _corner("a perfect reconstruction (FVU = 0)", lambda y, h: bool(torch.equal(y, h))),
        _corner("the mean row as reconstruction (FVU = 1)",
                lambda y, h: bool(torch.allclose(h, y.mean(0).expand_as(y), rtol=0, atol=1e-12))),
        _corner("worse than the mean (FVU > 1)", lambda y, h: bool(((y - h) ** 2).sum() > _total_ss(y))),
    ),
)


def _fvu_wrong(kind: str):
    def wrong(y, y_hat):
        err = ((y - y_hat) ** 2)
        if kind == "not centred":
            return float(err.sum() / (y ** 2).sum())
        if kind == "scalar mean":
            return float(err.sum() / ((y - y.mean()) ** 2).sum())
        if kind == "per dim":
            return float((err.sum(0) / ((y - y.mean(0)) ** 2).sum(0)).mean())
        if kind == "explained":
            return 1.0 - float(err.sum() / ((y - y.mean(0)) ** 2).sum())
        if kind == "ddof":
            return float(err.sum(1).mean() / y.var(dim=0).sum())
        if kind == "norms":
            return float(err.sum().sqrt() / ((y - y.mean(0)) ** 2).sum().sqrt())
        if kind == "one pass":
            n = y.shape[0]
            return float(err.sum() / ((y ** 2).sum() - n * (y.mean(0) ** 2).sum()))
        if kind == "pooled var":
            return float(err.mean() / y.var())
        if kind == "row means":
            return float(err.sum() / ((y - y.mean(dim=1, keepdim=True)) ** 2).sum())
        raise AssertionError(kind)
    return wrong


check_fvu = Exercise(
    "Exercise 3 (fraction of variance unexplained)",
    _fvu,
    _fvu_cases,
    [
        ("the variance is measured from the mean row ȳ, not from zero: divide by Σ‖y − ȳ‖², not Σ‖y‖² "
         "(they differ when the outputs have a mean).", _fvu_wrong("not centred")),
        ("ȳ is the mean *row*, one mean per output dimension (y.mean(dim=0)), not one number for the whole "
         "tensor (y.mean()).", _fvu_wrong("scalar mean")),
        ("you averaged one ratio per output dimension; take one ratio of sums over every row and dimension, "
         "so dimensions with a large variance weigh more.", _fvu_wrong("per dim")),
        ("that is the share of the variance *explained* (1 − FVU); return the unexplained share.",
         _fvu_wrong("explained")),
        ("the two sums are normalised differently (a mean over N rows against a variance over N − 1): "
         "use the plain ratio of the two sums.", _fvu_wrong("ddof")),
        ("square the errors: FVU is a ratio of sums of squares, not of norms.", _fvu_wrong("norms")),
        ("Σy² − N·ȳ² loses all its digits when the mean is large (here 1e7): subtract the mean row first, "
         "then square.", _fvu_wrong("one pass")),
        ("y.var() pools every entry of y around one number (and divides by N·d − 1): FVU's denominator is "
         "Σ‖y_n − ȳ‖², each row's distance from the mean row ȳ = y.mean(dim=0).", _fvu_wrong("pooled var")),
        ("you centred each row on its own mean (y.mean(dim=1)); ȳ is the mean row, the mean over the N rows "
         "(y.mean(dim=0)).", _fvu_wrong("row means")),
    ],
    atol=1e-12, rtol=1e-9, kind="investigate", domain=_FVU_DOMAIN,
)


# ---------------------------------------------------------------- exercise 4: how many neurons does a prefix need?
def _top_sub_updates(m: torch.Tensor, W2: torch.Tensor, b2: torch.Tensor, k: int) -> torch.Tensor:
    keep = _keep_mask(m.abs() * W2.norm(dim=0), k)
    return (m * keep) @ W2.T + b2


def _sub_update_cases() -> list[Case]:
    g = _generator(904)
    cases = []
    plan = [(5, 4, 10, 3, "m (5, 10), d_model=4, k=3"), (3, 6, 8, 1, "k=1: m (3, 8), d_model=6"),
            (4, 3, 7, 7, "k=d_ff=7 (every neuron): the whole FFN output"),
            (1, 5, 12, 4, "a batch of one: m (1, 12), d_model=5, k=4"),
            (6, 5, 5, 2, "d_model = d_ff = 5, k=2")]
    for N, d_model, d_ff, k, note in plan:
        m = torch.randn(N, d_ff, generator=g, dtype=torch.float64)
        W2 = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) * torch.logspace(
            -1, 1, d_ff, dtype=torch.float64)                  # value norms spanning 100x
        cases.append(Case((m, W2, torch.randn(d_model, generator=g, dtype=torch.float64), k), note=note))
    # negative coefficients larger than any positive one (GELU's can be large only on the positive side,
    # but the statement allows any sign)
    m = -3.0 * torch.rand(4, 9, generator=g, dtype=torch.float64)
    m[:, ::3] = 0.5
    cases.append(Case((m, torch.randn(4, 9, generator=g, dtype=torch.float64),
                       torch.randn(4, generator=g, dtype=torch.float64), 3),
                      note="large negative coefficients: m (4, 9), k=3"))
    # ties in |m_i|·‖v_i‖ at the k-th place between different values of equal norm
    W2 = torch.tensor([[3.0, 0.0, 0.0, 0.6, 0.0], [0.0, 3.0, 0.0, 0.8, 1.0], [0.0, 0.0, 3.0, 0.0, 0.0]],
                      dtype=torch.float64)
    m = torch.tensor([[1.0, 1.0, 1.0, 2.0, 0.5], [-1.0, 1.0, 1.0, 0.0, 4.0]], dtype=torch.float64)
    cases.append(Case((m, W2, torch.tensor([0.5, -0.5, 1.0], dtype=torch.float64), 2),
                      note="ties in |m_i|·‖W2[:, i]‖ at the k-th place: m (2, 5), k=2"))
    cases.append(Case((torch.zeros(3, 6, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64),
                       torch.randn(4, generator=g, dtype=torch.float64), 2),
                      note="all-zero coefficients: m (3, 6), k=2"))
    # long rows of tied sizes: unit-norm values, coefficients ±1 or ±2 (an unstable sort reorders them)
    W2 = torch.nn.functional.normalize(torch.randn(3, 40, generator=g, dtype=torch.float64), dim=0)
    m = (torch.randint(1, 3, (2, 40), generator=g) * (2 * torch.randint(0, 2, (2, 40), generator=g) - 1)).double()
    cases.append(Case((m, W2, torch.randn(3, generator=g, dtype=torch.float64), 3),
                      note="ties in sub-update size in long rows: m (2, 40) of ±1 and ±2, unit values, k=3"))
    # a neuron whose value is zero, one output dimension; and a single neuron
    W2 = torch.randn(1, 6, generator=g, dtype=torch.float64)
    W2[0, 1] = 0.0
    m = torch.randn(4, 6, generator=g, dtype=torch.float64)
    m[:, 1] = 50.0                                                # the largest coefficient, writing nothing
    cases.append(Case((m, W2, torch.randn(1, generator=g, dtype=torch.float64), 2),
                      note="d_model=1 and a neuron with a zero value but the largest coefficient: m (4, 6), k=2"))
    cases.append(Case((torch.randn(3, 1, generator=g, dtype=torch.float64),
                       torch.randn(4, 1, generator=g, dtype=torch.float64),
                       torch.randn(4, generator=g, dtype=torch.float64), 1), note="one neuron: m (3, 1), k=1"))
    return cases


def _sizes(m, W2):
    return m.abs() * W2.norm(dim=0)


_SUB_UPDATE_DOMAIN = Domain(
    allows="m: float64 (N, d_ff) of any sign and size; W2: float64 (d_model, d_ff), values of any norm (also 0); "
           "b2: float64 (d_model,); N, d_model, d_ff >= 1; k: int, 1 <= k <= d_ff. Size of sub-update i: "
           "|m_i|·‖W2[:, i]‖; ties in size keep the lowest indices. Answer: float64 (N, d_model).",
    corners=(
        _corner("k = 1", lambda m, W2, b2, k: k == 1),
        _corner("k = d_ff (every neuron kept)", lambda m, W2, b2, k: k == m.shape[1] > 1),
        _corner("a batch of one (N = 1)", lambda m, W2, b2, k: m.shape[0] == 1),
        _corner("one neuron (d_ff = 1)", lambda m, W2, b2, k: m.shape[1] == 1),
        _corner("one output dimension (d_model = 1)", lambda m, W2, b2, k: W2.shape[0] == 1),
        _corner("ties in size at the k-th place wider than the room left (size > 0)",
                lambda m, W2, b2, k: _tie_overflow(_sizes(m, W2), k)),
        _corner("such ties in rows of 32+ neurons", lambda m, W2, b2, k: _wide_tie(_sizes(m, W2), k)),
        _corner("all coefficients zero (every size tied at 0)", lambda m, W2, b2, k: bool((m == 0).all())),
        _corner("negative coefficients larger in size than the positive ones",
                lambda m, W2, b2, k: bool((m.min(1).values.abs() > m.max(1).values).any())),
        _corner("value norms spanning 10x or more", lambda m, W2, b2, k:
                bool(W2.norm(dim=0).max() >= 10 * W2.norm(dim=0).min() > 0)),
        _corner("a value of norm 0 with the largest coefficient",
                lambda m, W2, b2, k: bool(((W2.norm(dim=0) == 0) & (m.abs() == m.abs().max(1, keepdim=True).values)).any())),
    ),
)


def _sub_update_wrong(kind: str):
    kind, _, select = kind.partition(", ")               # "slip, torch.topk": the slip and torch.topk's tie order
    def wrong(m, W2, b2, k):
        if kind == "W2 layout":
            return (m * _keep_mask(m.abs() * W2.norm(dim=1), k)) @ W2 + b2
        if kind == "norm axis":
            return (m * _keep_mask(m.abs() * W2.norm(dim=1), k)) @ W2.T + b2
        if kind == "every neuron":
            return m @ W2.T + b2
        score = {"signed": m * W2.norm(dim=0), "positive part": m.clamp(min=0) * W2.norm(dim=0),
                 "coefficient only": m.abs(),
                 "value only": W2.norm(dim=0).expand_as(m), "squared coefficient": m ** 2 * W2.norm(dim=0),
                 "squared norm": m.abs() * W2.norm(dim=0) ** 2}.get(kind, m.abs() * W2.norm(dim=0))
        if "torch.topk" in (kind, select):
            keep = torch.zeros_like(m, dtype=torch.bool).scatter(-1, score.topk(k, dim=-1).indices, True)
        elif kind == "unstable argsort":
            keep = torch.zeros_like(m, dtype=torch.bool).scatter(
                -1, score.argsort(dim=-1, descending=True)[:, :k], True)
        else:
            keep = _keep_mask(score, k)
        out = (m * keep) @ W2.T
        return out if kind == "no b2" else out + b2
    return wrong


check_top_sub_updates = Exercise(
    "Exercise 4 (how many neurons a prefix needs)",
    _top_sub_updates,
    _sub_update_cases,
    [
        ("rank the neurons by the size of their sub-update |m_i|·‖W2[:, i]‖: a large negative coefficient "
         "writes as much as a large positive one.", _sub_update_wrong("signed")),
        ("negative coefficients count too: m_i can have either sign, and a negative m_i moves the output as far "
         "as a positive one of the same size; rank by |m_i|·‖W2[:, i]‖.",
         _sub_update_wrong("positive part")),
        ("rank by the size of the sub-update m_i·W2[:, i], i.e. |m_i| times the norm of value i; values of "
         "different norms write different amounts for the same coefficient.", _sub_update_wrong("coefficient only")),
        ("the ranking must depend on the coefficients of each row: |m_i|·‖W2[:, i]‖, not the value norms alone.",
         _sub_update_wrong("value only")),
        ("b2 is missing: the FFN output is b2 plus the kept sub-updates.", _sub_update_wrong("no b2")),
        ("W2 is (d_model, d_ff) in nn.Linear's layout: value i is the column W2[:, i], its norm "
         "W2.norm(dim=0), and the output (m · keep) @ W2.T + b2.", _sub_update_wrong("W2 layout")),
        ("wrong axis for the value norms: W2.norm(dim=1) gives one norm per output dimension (d_model of them); "
         "the size of sub-update i uses column i of W2, W2.norm(dim=0), one norm per neuron.",
         _sub_update_wrong("norm axis")),
        ("you kept every neuron (the whole FFN output): keep only the k neurons of each row with the largest "
         "sub-update |m_i|·‖W2[:, i]‖ and drop the others.", _sub_update_wrong("every neuron")),
        ("among neurons whose sub-update size |m_i|·‖W2[:, i]‖ equals the k-th largest, keep the lowest indices: "
         "torch.topk promises no order among ties, but a stable sort does "
         "(size.sort(dim=-1, descending=True, stable=True).indices[:, :k], with size = m.abs() * W2.norm(dim=0)).",
         _sub_update_wrong("torch.topk")),
        ("among neurons whose sub-update size |m_i|·‖W2[:, i]‖ equals the k-th largest, keep the lowest indices: "
         "an unstable sort (argsort without stable=True) promises no order among ties, but a stable sort does "
         "(size.sort(dim=-1, descending=True, stable=True).indices[:, :k], with size = m.abs() * W2.norm(dim=0)).",
         _sub_update_wrong("unstable argsort")),
        ("two slips: b2 is missing (the FFN output is b2 plus the kept sub-updates), and among neurons whose "
         "sub-update size equals the k-th largest, keep the lowest indices: torch.topk promises no order among "
         "ties, a stable sort does (size.sort(dim=-1, descending=True, stable=True).indices[:, :k]).",
         _sub_update_wrong("no b2, torch.topk")),
        ("two slips: rank by the size of the sub-update, |m_i| times the norm of value i (not |m_i| alone), and "
         "among equal sizes keep the lowest indices: torch.topk promises no order among ties, a stable sort does "
         "(size.sort(dim=-1, descending=True, stable=True).indices[:, :k], size = m.abs() * W2.norm(dim=0)).",
         _sub_update_wrong("coefficient only, torch.topk")),
        ("the size of sub-update i is |m_i|·‖W2[:, i]‖, with no square: m_i² · ‖W2[:, i]‖ ranks coefficients "
         "above values.", _sub_update_wrong("squared coefficient")),
        ("the size of sub-update i is |m_i|·‖W2[:, i]‖, the length of the vector m_i·W2[:, i]: no square on the "
         "norm.", _sub_update_wrong("squared norm")),
    ],
    atol=1e-9, rtol=1e-9, kind="investigate", domain=_SUB_UPDATE_DOMAIN,
)


# ---------------------------------------------------------------- exercise 5: features used, against a control
def _features_used(codes: torch.Tensor) -> int:
    return int((codes > 0).any(dim=0).sum())


def _features_used_cases() -> list[Case]:
    g = _generator(905)
    cases = []

    def sparse(n, f, k, dtype=torch.float64, scale=1.0):
        pre = scale * torch.rand(n, f, generator=g, dtype=dtype)
        return torch.zeros_like(pre).scatter(-1, pre.topk(k, dim=-1).indices, pre.topk(k, dim=-1).values)

    cases.append(Case((sparse(40, 64, 4),), note="TopK-4 codes (40, 64), float64"))
    cases.append(Case((sparse(30, 50, 3, torch.float32),), note="TopK-3 codes (30, 50), float32"))
    cases.append(Case((sparse(1, 16, 5),), note="one prefix: (1, 16), 5 active"))
    cases.append(Case((torch.zeros(12, 20, dtype=torch.float64),), note="every feature dead: all zeros (12, 20)"))
    every = sparse(30, 10, 10)
    cases.append(Case((every,), note="no feature dead: k = F, (30, 10)"))
    cases.append(Case((torch.tensor([[0.0], [2.5], [0.0]], dtype=torch.float64),), note="one feature: (3, 1)"))
    few = torch.zeros(25, 40, dtype=torch.float64)
    few[:, 3] = 1.0                                               # one feature on every prefix, three on one each
    few[0, 7], few[5, 19], few[9, 39] = 0.5, 2.0, 1e-30
    cases.append(Case((few,), note="many active entries, few features: one feature on all 25 prefixes, "
                                     "one at 1e-30"))
    cases.append(Case((sparse(20, 32, 2, torch.float32, scale=1e6),), note="large codes (up to 1e6), float32"))
    return cases


_FEATURES_USED_DOMAIN = Domain(
    allows="codes: float32 or float64 (N, F), N >= 1, F >= 1, every entry >= 0 (TopK codes: 0 = inactive, any "
           "positive value, from about 1e-30 up to 1e6, = active), any number of active entries per row. "
           "Answer: a Python int (or 0-dim integer tensor), the number of columns with an entry > 0.",
    corners=(
        _corner("N = 1 (one prefix)", lambda c: c.shape[0] == 1),
        _corner("F = 1 (one feature)", lambda c: c.shape[1] == 1),
        _corner("every feature dead (all zeros)", lambda c: not bool((c > 0).any())),
        _corner("no feature dead", lambda c: bool((c > 0).any(0).all())),
        _corner("float32 codes", lambda c: c.dtype == torch.float32),
        _corner("float64 codes", lambda c: c.dtype == torch.float64),
        _corner("a tiny positive code (<= 1e-20)", lambda c: bool(((c > 0) & (c <= 1e-20)).any())),
        _corner("large codes (>= 1e5)", lambda c: bool((c >= 1e5).any())),
        _corner("more active entries than features",
                lambda c: int((c > 0).sum()) > 2 * int((c > 0).any(0).sum()) > 0),
    ),
)


def _features_used_wrong(kind: str):
    def wrong(codes):
        if kind == "entries":
            return int((codes > 0).sum())
        if kind == ">=":
            return int((codes >= 0).any(dim=0).sum())
        if kind == "dead":
            return int((~(codes > 0).any(dim=0)).sum())
        if kind == "per row":
            return int((codes > 0).sum(dim=1).max())
        if kind == "rows":
            return int((codes > 0).any(dim=1).sum())
        if kind == "argmax":
            return int(torch.unique(codes.argmax(dim=1)).numel())
        raise AssertionError(kind)
    return wrong


check_features_used = Exercise(
    "Exercise 5 (features used, against a control)",
    _features_used,
    _features_used_cases,
    [
        ("you counted active entries (prefix, feature pairs); count features: columns with at least one entry > 0.",
         _features_used_wrong("entries")),
        ("a code of exactly 0 is inactive: test codes > 0, not >= 0.", _features_used_wrong(">=")),
        ("that is the number of dead features (never active); return the number used.",
         _features_used_wrong("dead")),
        ("you counted the active features of one prefix (the most of any row); count the features active on at "
         "least one prefix: any over dim=0.", _features_used_wrong("per row")),
        ("you counted prefixes with some active feature (any over dim=1); count features: any over dim=0.",
         _features_used_wrong("rows")),
        ("you counted the features that are the *largest* in some row (argmax); a feature counts as used when it "
         "is active (> 0) in any row, even if never the largest: (codes > 0).any(dim=0).", _features_used_wrong("argmax")),
    ],
    atol=0, rtol=0, kind="investigate", domain=_FEATURES_USED_DOMAIN,
)


# ---------------------------------------------------------------- exercise 6: the toy model's forward pass and loss
def _toy_forward(W: torch.Tensor, b: torch.Tensor, x: torch.Tensor, importance: torch.Tensor):
    x_hat = torch.relu(x @ W.T @ W + b)
    return x_hat, (importance * (x - x_hat) ** 2).sum(dim=-1).mean()


def _toy_cases() -> list[Case]:
    g = _generator(906)

    def toy(B, m, n, sparsity, bias=0.0):
        u = torch.rand(B, n, generator=g, dtype=torch.float64)
        x = torch.where(torch.rand(B, n, generator=g, dtype=torch.float64) < sparsity, 0.0, u)
        W = torch.randn(m, n, generator=g, dtype=torch.float64) * 0.6
        b = bias + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
        return W, b, x, 0.9 ** torch.arange(n, dtype=torch.float64)

    W, b, x, importance = toy(16, 5, 20, 0.9)
    cases = [Case((W.requires_grad_(), b.requires_grad_(), x, importance),
                  note="W (5, 20), x (16, 20) at S = 0.9, I = 0.9^i; W and b require grad, as in training"),
             Case(toy(8, 3, 6, 0.0), note="dense x (8, 6), W (3, 6)"),
             Case(toy(1, 2, 4, 0.5), note="a batch of one: x (1, 4), W (2, 4)"),
             Case(toy(6, 1, 5, 0.3), note="one hidden dimension: W (1, 5)"),
             Case(toy(5, 4, 4, 0.2), note="as many hidden dimensions as features: W (4, 4)"),
             Case(toy(10, 3, 8, 0.7, bias=-0.4), note="a negative bias that the ReLU cuts: x (10, 8), b about -0.4")]
    W, b, x, importance = toy(6, 2, 7, 0.99)
    x[0] = 0.0                                                     # an input with no feature on
    cases.append(Case((W, b, x, importance), note="very sparse x (6, 7), one row all zero"))
    W, b, x, _ = toy(7, 3, 9, 0.4)
    cases.append(Case((W, b, x, torch.tensor([1.0, 0.0, 2.0, 0.5, 0.0, 3.0, 1.0, 1.0, 0.25], dtype=torch.float64)),
                      note="importances of 0 (features that do not count) and above 1"))
    return cases


_TOY_DOMAIN = Domain(
    allows="W (m, n), b (n,), x (B, n), importance (n,), all float64; B >= 1, 1 <= m <= n; x in [0, 1] (rows may be "
           "all zero); b of either sign; importance >= 0. Answer: x_hat = ReLU(x Wᵀ W + b) (B, n), and the loss, the "
           "mean over rows of Σ_i importance_i (x_i − x_hat_i)², a 0-dim tensor that autograd can differentiate.",
    corners=(
        _corner("a batch of one (B = 1)", lambda W, b, x, i: x.shape[0] == 1),
        _corner("one hidden dimension (m = 1)", lambda W, b, x, i: W.shape[0] == 1),
        _corner("m = n", lambda W, b, x, i: W.shape[0] == W.shape[1]),
        _corner("an all-zero input row", lambda W, b, x, i: bool((x == 0).all(1).any())),
        _corner("dense x (no zero entry)", lambda W, b, x, i: bool((x > 0).all())),
        _corner("a pre-activation below 0 (the ReLU cuts it)",
                lambda W, b, x, i: bool((x @ W.T @ W + b < 0).any())),
        _corner("an importance of 0", lambda W, b, x, i: bool((i == 0).any())),
        _corner("an importance above 1", lambda W, b, x, i: bool((i > 1).any())),
    ),
)


@dataclass(frozen=True)
class _DifferentiableLoss(Returns):
    """The loss, item 1: a one-element tensor, still attached to the graph on a case whose W requires grad."""

    def problem(self, result, where: str = "", args: tuple = ()) -> str | None:
        try:
            loss = self.part(result)
        except Exception:
            return None
        attached = torch.is_tensor(loss) and loss.numel() == 1 and (loss.requires_grad or not args[0].requires_grad)
        if attached:
            return None
        on = f" on {where}" if where else ""
        return (f"the loss is {type_name(loss)}{on}, which loss.backward() cannot differentiate; the statement asks "
                f"for {self.wanted}. {self.advice}")


_TOY_RETURNS = _DifferentiableLoss(
    "a 0-dim tensor that autograd can differentiate", lambda loss: True, item=1, name="the loss",
    advice="Keep it a tensor: no float(), .item(), .detach() or torch.no_grad() on the way.")


def _toy_wrong(kind: str):
    def wrong(W, b, x, importance):
        pre = x @ W.T @ W + b
        x_hat = {"no relu": pre, "bias after relu": torch.relu(x @ W.T @ W) + b}.get(kind, torch.relu(pre))
        squared = (x - x_hat) ** 2
        if kind == "no importance":
            return x_hat, squared.sum(dim=-1).mean()
        weighted = importance * squared
        if kind == "mean all":
            return x_hat, weighted.mean()
        if kind == "sum rows":
            return x_hat, weighted.sum()
        return x_hat, weighted.sum(dim=-1).mean()
    return wrong


check_toy_forward = Exercise(
    "Exercise 6 (the toy model's forward pass and loss)",
    _toy_forward,
    _toy_cases,
    [
        ("x_hat = ReLU(x Wᵀ W + b): the ReLU is what lets a negative bias cut the interference (section 1).",
         _toy_wrong("no relu")),
        ("the bias goes inside the ReLU: x_hat = ReLU(x Wᵀ W + b).", _toy_wrong("bias after relu")),
        ("weight each feature's squared error by its importance I_i.", _toy_wrong("no importance")),
        ("the loss divides by every element; sum the weighted squared error over a row's n features, then "
         "average over the rows.", _toy_wrong("mean all")),
        ("the loss sums over the rows; average the per-row weighted error over the batch instead.",
         _toy_wrong("sum rows")),
    ],
    atol=1e-9, rtol=1e-9, kind="build", domain=_TOY_DOMAIN, returns=_TOY_RETURNS,
)


# ---------------------------------------------------------------- exercise 7: one training step of a TopK dictionary
def _training_step(W_enc: torch.Tensor, b_enc: torch.Tensor, W_dec: torch.Tensor, b_dec: torch.Tensor,
                   x: torch.Tensor, k: int, lr: float):
    params = [t.detach().clone().requires_grad_() for t in (W_enc, b_enc, W_dec, b_dec)]
    codes = _topk_activation(x @ params[0].T + params[1], k)
    x_hat = codes @ params[2].T + params[3]
    loss = ((x - x_hat) ** 2).sum(dim=-1).mean()
    loss.backward()
    with torch.no_grad():
        new = [p - lr * p.grad for p in params]
        new[2] = new[2] / new[2].norm(dim=0, keepdim=True)
    return (*new, float(loss.detach()))


def _step_cases() -> list[Case]:
    g = _generator(907)

    def case(B, d, F, k, lr, note, scale=1.0):
        x = torch.randn(B, d, generator=g, dtype=torch.float64) * scale
        W_enc = torch.randn(F, d, generator=g, dtype=torch.float64) / d ** 0.5
        b_enc = 0.1 * torch.randn(F, generator=g, dtype=torch.float64)
        W_dec = torch.randn(d, F, generator=g, dtype=torch.float64)
        W_dec = W_dec / W_dec.norm(dim=0, keepdim=True)
        b_dec = 0.1 * torch.randn(d, generator=g, dtype=torch.float64)
        return Case((W_enc, b_enc, W_dec, b_dec, x, k, lr), note=note)

    cases = [case(16, 5, 12, 2, 0.05, "x (16, 5), 12 features, k=2, lr 0.05"),
             case(8, 4, 6, 1, 0.1, "k=1: x (8, 4), 6 features, lr 0.1"),
             case(6, 3, 5, 5, 0.02, "k=F=5 (every feature): x (6, 3), lr 0.02"),
             case(1, 6, 10, 3, 0.05, "a batch of one: x (1, 6), 10 features, k=3"),
             case(10, 6, 4, 2, 0.05, "fewer features than dimensions: x (10, 6), 4 features, k=2"),
             case(12, 5, 40, 4, 0.01, "x (12, 5), 40 features, k=4, lr 0.01 (most features get no gradient)"),
             case(9, 4, 8, 3, 1e-4, "large inputs (about 100) and a small lr 1e-4: x (9, 4), 8 features", scale=100.0)]
    W_enc, b_enc, W_dec, b_dec, x, _, _ = case(7, 4, 9, 3, 0.05, "").args
    cases.append(Case((W_enc, b_enc - 3.0, W_dec, b_dec, x, 3, 0.05),
                      note="a negative b_enc (kept pre-activations below 0 get no gradient): x (7, 4), 9 features, k=3"))
    return cases


_STEP_DOMAIN = Domain(
    allows="W_enc (F, d), b_enc (F,), W_dec (d, F) with unit columns, b_dec (d,), x (B, d), all float64 with finite "
           "values (|x| up to about 100), no ties at the k-th pre-activation; B, d, F >= 1; k: int, 1 <= k <= F; "
           "lr > 0 (1e-4 to 0.1). Answer: the four parameters after one plain gradient-descent step on the loss (the "
           "mean over rows of the squared error summed over d), W_dec's columns then scaled to length 1, and the "
           "loss before the step; the inputs unchanged.",
    corners=(
        _corner("k = 1", lambda *a: a[5] == 1),
        _corner("k = F (every feature kept)", lambda *a: a[5] == a[0].shape[0] > 1),
        _corner("a batch of one (B = 1)", lambda *a: a[4].shape[0] == 1),
        _corner("F below d", lambda *a: a[0].shape[0] < a[0].shape[1]),
        _corner("a kept pre-activation below 0 (no gradient through it)",
                lambda *a: bool(((_pre(a[4], a[0], a[1]) > 0).sum(1) < a[5]).any())),
        _corner("a feature active on no row (no gradient to its key)",
                lambda *a: bool((_topk_activation(_pre(a[4], a[0], a[1]), a[5]) == 0).all(0).any())),
        _corner("large inputs (|x| >= 50)", lambda *a: bool(a[4].abs().max() >= 50)),
        _corner("a small rate (lr <= 1e-3)", lambda *a: a[6] <= 1e-3),
    ),
)


def _step_wrong(kind: str):
    def wrong(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        params = [t.detach().clone().requires_grad_() for t in (W_enc, b_enc, W_dec, b_dec)]
        pre = x @ params[0].T + params[1]
        if kind == "no relu":
            codes = torch.where(_keep_mask(pre.detach(), k), pre, torch.zeros((), dtype=pre.dtype))
        elif kind == "dense relu":
            codes = torch.relu(pre)
        else:
            codes = _topk_activation(pre, k)
        if kind == "detached codes":
            codes = codes.detach()
        x_hat = codes @ params[2].T + params[3]
        squared = (x - x_hat) ** 2
        loss = squared.mean() if kind == "mean all" else squared.sum() if kind == "sum rows" else \
            squared.sum(dim=-1).mean()
        loss.backward()
        with torch.no_grad():
            sign = -1.0 if kind == "ascent" else 1.0
            if kind == "projected":            # common SAE code: drop the part of W_dec's gradient along its columns
                g = params[2].grad
                params[2].grad = g - (g * params[2]).sum(dim=0, keepdim=True) * params[2]
            new = [p - sign * lr * (torch.zeros_like(p) if p.grad is None else p.grad) for p in params]
            if kind == "rows":
                new[2] = new[2] / new[2].norm(dim=1, keepdim=True)
            elif kind != "no renorm":
                new[2] = new[2] / new[2].norm(dim=0, keepdim=True)
            if kind == "loss after":
                after = _topk_activation(x @ new[0].T + new[1], k) @ new[2].T + new[3]
                return (*new, float(((x - after) ** 2).sum(dim=-1).mean().detach()))
        return (*new, float(loss.detach()))
    return wrong


check_training_step = _NeedsExercise1(
    "Exercise 7 (one training step of a TopK dictionary)",
    _training_step,
    _step_cases,
    [
        ("after the step, scale each column of W_dec (each feature's value) back to length 1: "
         "W_dec / W_dec.norm(dim=0, keepdim=True).", _step_wrong("no renorm")),
        ("W_dec is (d, F): its columns are the values, so divide by W_dec.norm(dim=0, keepdim=True), not by the "
         "rows' norms.", _step_wrong("rows")),
        ("the step went uphill: gradient descent subtracts lr × gradient.", _step_wrong("ascent")),
        ("the loss divides by every element; sum the squared error over a row's d dimensions, then average over "
         "the rows (the gradient was d times too small).", _step_wrong("mean all")),
        ("the loss sums over the rows; average the per-row squared error over the batch instead.",
         _step_wrong("sum rows")),
        ("return the loss computed before the step (the one whose gradient you used).", _step_wrong("loss after")),
        ("the codes were detached, so W_enc and b_enc got no gradient: let the gradient flow through the kept "
         "entries of the TopK.", _step_wrong("detached codes")),
        ("a kept negative pre-activation must become 0: apply ReLU to the k values you keep.",
         _step_wrong("no relu")),
        ("the codes keep every positive pre-activation (a plain ReLU): keep only the k largest per row.",
         _step_wrong("dense relu")),
        ("you removed the part of W_dec's gradient along each column (as much SAE code does before renormalising); "
         "this step is plain gradient descent on all four parameters, then the columns scaled to length 1.",
         _step_wrong("projected")),
    ],
    atol=1e-9, rtol=1e-9, kind="build", domain=_STEP_DOMAIN,
)


# ---------------------------------------------------------------- exercise 8: resampling dead directions
def _resample_dead(W_enc: torch.Tensor, b_enc: torch.Tensor, W_dec: torch.Tensor, x: torch.Tensor,
                   x_hat: torch.Tensor, dead: torch.Tensor, scale: float):
    W_enc, b_enc, W_dec = W_enc.clone(), b_enc.clone(), W_dec.clone()
    idx = dead.nonzero().flatten()
    error = ((x - x_hat) ** 2).sum(dim=-1)
    rows = x[error.sort(descending=True, stable=True).indices[:len(idx)]]
    unit = rows / rows.norm(dim=-1, keepdim=True)
    W_dec[:, idx] = unit.T
    W_enc[idx] = scale * unit
    b_enc[idx] = 0.0
    return W_enc, b_enc, W_dec


def _resample_cases() -> list[Case]:
    g = _generator(911)

    def case(N, d, F, dead, note, scale=0.7, size=1.0, ties=False):
        x = torch.randn(N, d, generator=g, dtype=torch.float64) * size
        x_hat = x + 0.3 * size * torch.randn(N, d, generator=g, dtype=torch.float64)
        if ties:                 # quarter-integers (exact sums): rows 2j and 2j+1 have the same error
            x = torch.randint(1, 9, (N, d), generator=g).double() / 4
            residual = torch.randint(-4, 5, (N // 2, d), generator=g).double() / 4
            x_hat = x - residual.repeat_interleave(2, dim=0)
        W_enc = torch.randn(F, d, generator=g, dtype=torch.float64) / d ** 0.5
        b_enc = 0.1 * torch.randn(F, generator=g, dtype=torch.float64)
        W_dec = torch.randn(d, F, generator=g, dtype=torch.float64)
        W_dec = W_dec / W_dec.norm(dim=0, keepdim=True)
        mask = torch.zeros(F, dtype=torch.bool)
        mask[list(dead)] = True
        return Case((W_enc, b_enc, W_dec, x, x_hat, mask, scale), note=note)

    return [case(40, 5, 12, (1, 4, 5, 11), "x (40, 5), 12 directions, 4 dead (1, 4, 5, 11), scale 0.7"),
            case(30, 6, 10, (), "no dead direction: x (30, 6), 10 directions"),
            case(25, 4, 8, range(8), "every direction dead: x (25, 4), 8 directions", scale=1.3),
            case(5, 4, 9, (0, 2, 3, 6, 8), "as many dead as rows: x (5, 4), 9 directions, 5 dead"),
            case(1, 3, 4, (3,), "one row: x (1, 3), 4 directions, the last dead", scale=2.0),
            case(16, 3, 6, (0, 1, 4), "errors tied in pairs: x (16, 3), 6 directions, 3 dead", ties=True),
            case(20, 5, 7, (2, 6), "rows of size about 100, scale 0.05: x (20, 5), 7 directions", scale=0.05,
                 size=100.0),
            case(12, 8, 5, (1, 3), "more dimensions than directions: x (12, 8), 5 directions, 2 dead")]


def _tie_at_cut(x, x_hat, dead) -> bool:
    """Do rows with the last chosen row's error lie on both sides of the cut?"""
    error = ((x - x_hat) ** 2).sum(dim=-1)
    n = int(dead.sum())
    if not 0 < n < len(error):
        return False
    chosen = error.sort(descending=True, stable=True).indices[:n]
    cut = error[chosen[-1]]
    return int((error == cut).sum()) > int((error[chosen] == cut).sum())


_RESAMPLE_DOMAIN = Domain(
    allows="W_enc (F, d), b_enc (F,), W_dec (d, F), x (N, d) with no all-zero row, x_hat (N, d), all float64 with "
           "finite values (|x| up to about 100); dead (F,) bool with at most N entries True (none or all allowed); "
           "scale > 0 (0.05 to 2); N, d, F >= 1; ties in the squared error allowed (lower row first). Answer: new "
           "(W_enc, b_enc, W_dec), each dead direction (in index order) restarted at the next worst row; the "
           "others and the inputs unchanged.",
    corners=(
        _corner("no dead direction", lambda *a: not bool(a[5].any())),
        _corner("every direction dead", lambda *a: bool(a[5].all())),
        _corner("as many dead directions as rows", lambda *a: int(a[5].sum()) == a[3].shape[0]),
        _corner("one row (N = 1)", lambda *a: a[3].shape[0] == 1),
        _corner("tied errors split by the cut (lower row first decides)", lambda *a: _tie_at_cut(a[3], a[4], a[5])),
        _corner("F below d", lambda *a: a[0].shape[0] < a[0].shape[1]),
        _corner("large rows (|x| >= 50)", lambda *a: bool(a[3].abs().max() >= 50)),
        _corner("a small scale (<= 0.1)", lambda *a: a[6] <= 0.1),
    ),
)


def _resample_wrong(kind: str):
    def wrong(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
        W_enc, b_enc, W_dec = W_enc.clone(), b_enc.clone(), W_dec.clone()
        idx = dead.nonzero().flatten()
        error = ((x - x_hat) ** 2).sum(dim=-1)
        key = x.norm(dim=-1) if kind == "largest x" else error
        order = key.sort(descending=kind != "best", stable=True).indices
        if kind == "torch.topk":
            order = key.topk(len(idx)).indices
        if kind == "ties reversed":                                 # equal errors: the higher row first
            order = len(key) - 1 - key.flip(0).sort(descending=True, stable=True).indices
        pick = order[:1].repeat(len(idx)) if kind == "one row" else order[:len(idx)]
        rows = (x - x_hat)[pick] if kind == "residual" else x[pick]
        unit = rows if kind == "no unit" else rows / rows.norm(dim=-1, keepdim=True)
        W_dec[:, idx] = unit.T
        W_enc[idx] = unit if kind == "no scale" else scale * unit
        if kind != "bias kept":
            b_enc[idx] = 0.0
        return W_enc, b_enc, W_dec
    return wrong


check_resample_dead = Exercise(
    "Exercise 8 (resampling dead directions)",
    _resample_dead,
    _resample_cases,
    [
        ("the restarted value is the input row itself, scaled to length 1 (Bricken et al.'s rule), not its "
         "residual x - x_hat.", _resample_wrong("residual")),
        ("the rows go largest squared error first: the dead directions restart where the dictionary does worst.",
         _resample_wrong("best")),
        ("rank the rows by their squared error ‖x_n - x_hat_n‖², not by the size of x_n.",
         _resample_wrong("largest x")),
        ("each dead direction takes its own row: the first dead one the worst row, the second the next, and so on.",
         _resample_wrong("one row")),
        ("scale the chosen row to length 1 before it becomes a value (W_dec's columns have length 1).",
         _resample_wrong("no unit")),
        ("the key is the unit row times scale.", _resample_wrong("no scale")),
        ("set a restarted direction's encoder bias b_enc to 0.", _resample_wrong("bias kept")),
        ("rows with equal errors go lower row first: torch.topk promises no order among ties, but a stable sort "
         "does (error.sort(descending=True, stable=True).indices).", _resample_wrong("torch.topk")),
        ("rows with equal errors go lower row first (a stable sort, e.g. sort(descending=True, stable=True)).",
         _resample_wrong("ties reversed")),
    ],
    atol=1e-9, rtol=1e-9, kind="build", domain=_RESAMPLE_DOMAIN,
)


EXERCISES = [check_topk_activation, check_transcoder, check_fvu, check_top_sub_updates, check_features_used,
             check_toy_forward, check_training_step, check_resample_dead]
