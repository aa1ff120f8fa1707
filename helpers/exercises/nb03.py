"""Checkers for notebook 03 (the FFN as a key-value memory).

Each ``check_*`` is an ``helpers.exercises.engine.Exercise``: call it on your function,
``check_memory_coefficients(my_fn)``, and it prints one line (not attempted / passed /
what is wrong and the likely mistake). Hidden cases come from seeded ``torch.Generator`` s,
with shapes the notebook never shows, and they cover every input the task statement allows:
batches of one, the last neuron, rows whose allowed values are all negative (or all below -1), linear layers
with and without a bias, unequal group sizes.

Layout: PyTorch's ``nn.Linear`` layout, as in ``helpers.ffn.FFN``: ``W1`` is
``(d_ff, d_model)`` (row i = key i) and ``W2`` is ``(d_model, d_ff)`` (column i = value i).

=============================  ======  ==============================================================
checker                        kind    the learner writes
=============================  ======  ==============================================================
``check_memory_coefficients``  build   ``memory_coefficients(x, W1, b1)`` -> ``(B, T, d_ff)``
``check_top_triggers``         build   ``top_trigger_prefixes(coefficients, valid, neuron, k)``
                                       -> (examples ``(k,)``, positions ``(k,)``)
``check_value_logits``         build   ``value_to_vocab(ffn, neuron, ln_f, lm_head, biases)`` -> ``(vocab,)``
``check_agreement_rate``       build   ``agreement_rate(coefficients, ids, valid, value_logits)`` -> float
``check_edit_spill``           invest. ``edit_spill(C, k_star, keys)`` -> ``(M,)`` float64, α of every key
``check_relation_profile``     invest. ``relation_profile(coefficients, valid, relation, n_relations)``
                                       -> ``(d_ff, n_relations)`` mean peak per relation
``check_best_match``           invest. ``best_match(a, b)`` -> (index ``(n_a,)``, correlation ``(n_a,)``)
``check_rome_update``          build   ``rome_update(W, C, k_star, v_star)`` -> ``(d_out, d)`` float64, Ŵ
=============================  ======  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises.cases import below_minus_one, negative_rows, randint, spd, valid_mask
from helpers.exercises.engine import FAILED, HINT_PREFIX, Case, Corner, Domain, Exercise
from helpers.exercises.returns import integer_tensor, tensor_dtype
from helpers.ffn import FFN


# --------------------------------------------------------------------------------------------
# Exercise 1 (build): memory coefficients for a batch
# --------------------------------------------------------------------------------------------


def _memory_coefficients(x: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor) -> torch.Tensor:
    """``(B, T, d_model) -> (B, T, d_ff)``: ``m = GELU(x W1ᵀ + b1)``, key i = row i of W1."""
    return F.gelu(x @ W1.T + b1)


def _coefficient_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2021)
    shapes = [(2, 4, 5, 5),     # square W1: a transposed W1 still runs, so its result must be told apart
              (1, 1, 3, 11),    # a batch of one, one position
              (3, 6, 8, 20),
              (2, 3, 9, 4),     # fewer neurons than model width
              (1, 3, 4, 1),     # one neuron; inputs of size ~30, where GELU's tails matter
              (2, 3, 1, 6)]     # a model width of one
    cases = []
    for B, T, d, d_ff in shapes:
        x = torch.randn(B, T, d, generator=gen) * (30.0 if d_ff == 1 else 1.0)
        W1 = torch.randn(d_ff, d, generator=gen)
        b1 = torch.randn(d_ff, generator=gen)
        cases.append(Case((x, W1, b1), note=f"x {tuple(x.shape)}, W1 {tuple(W1.shape)}, b1 {tuple(b1.shape)}"))
    return cases


def _pre_activations(case: Case) -> torch.Tensor:
    x, W1, b1 = case.args
    return x @ W1.T + b1


check_memory_coefficients = Exercise(
    "Exercise 1 (memory coefficients)",
    _memory_coefficients,
    _coefficient_cases,
    domain=Domain(
        allows="x (B, T, d_model), W1 (d_ff, d_model), b1 (d_ff,), all float32, every size from 1, any finite values; "
               "the answer (B, T, d_ff) in float32 or float64, the exact GELU, checked to float32 precision",
        corners=(
            Corner("B = T = 1", lambda c: c.args[0].shape[:2] == (1, 1)),
            Corner("d_model = 1", lambda c: c.args[0].shape[2] == 1),
            Corner("d_ff = 1", lambda c: c.args[1].shape[0] == 1),
            Corner("square W1 (the untransposed product runs too)", lambda c: c.args[1].shape[0] == c.args[1].shape[1]),
            Corner("fewer neurons than model width", lambda c: c.args[1].shape[0] < c.args[1].shape[1]),
            Corner("more neurons than model width", lambda c: c.args[1].shape[0] > c.args[1].shape[1]),
            Corner("pre-activations above +20 (GELU ≈ identity)", lambda c: bool((_pre_activations(c) > 20).any())),
            Corner("pre-activations below -20 (GELU ≈ 0)", lambda c: bool((_pre_activations(c) < -20).any())),
            Corner("pre-activations near ±2.7, where the tanh GELU is furthest off", lambda c: bool(
                ((_pre_activations(c).abs() - 2.7).abs() < 0.3).any())),
        )),
    mistakes=[
        ("you used the columns of W1 as keys (W1 without its transpose, the row layout); in nn.Linear's "
         "layout the keys are the rows of W1 (shape (d_ff, d_model)), so the match scores are x @ W1.T.",
         lambda x, W1, b1: F.gelu(torch.matmul(x, W1) + b1)),
        ("W1 was used without its transpose where it is square (d_ff = d_model): there the shapes cannot tell the "
         "layout, but nn.Linear's keys are always the rows of W1, so the match scores are x @ W1.T on every shape.",
         lambda x, W1, b1: F.gelu(x @ (W1 if W1.shape[0] == x.shape[-1] else W1.T) + b1)),
        ("you forgot the activation: these are the pre-activations k_i·x + b1_i; the memory coefficient is "
         "GELU of that.",
         lambda x, W1, b1: x @ W1.T + b1),
        ("b1 is missing: m = GELU(x @ W1.T + b1).",
         lambda x, W1, b1: F.gelu(x @ W1.T)),
        ("b1 was added after the activation: it belongs inside, m = GELU(x @ W1.T + b1) (the bias shifts each "
         "key's match score before GELU reads it).",
         lambda x, W1, b1: F.gelu(x @ W1.T) + b1),
        ("you used ReLU; the course's model uses the exact GELU (torch.nn.functional.gelu).",
         lambda x, W1, b1: torch.relu(x @ W1.T + b1)),
        ("you used GELU's tanh approximation; the exercise asks for the exact GELU (F.gelu without "
         "approximate='tanh').",
         lambda x, W1, b1: F.gelu(x @ W1.T + b1, approximate="tanh")),
        ("your hand-written GELU misses the √2: the exact GELU is z·Φ(z) = ½·z·(1 + erf(z/√2)), not "
         "½·z·(1 + erf(z)).",
         lambda x, W1, b1: 0.5 * (x @ W1.T + b1) * (1 + torch.erf(x @ W1.T + b1))),
        ("your hand-written GELU divides by 2 inside erf: the exact GELU is ½·z·(1 + erf(z/√2)), not "
         "½·z·(1 + erf(z/2)).",
         lambda x, W1, b1: 0.5 * (x @ W1.T + b1) * (1 + torch.erf((x @ W1.T + b1) / 2))),
        ("you used GELU's sigmoid approximation z·σ(1.702·z); the exercise asks for the exact GELU, "
         "½·z·(1 + erf(z/√2)) (F.gelu).",
         lambda x, W1, b1: (x @ W1.T + b1) * torch.sigmoid(1.702 * (x @ W1.T + b1))),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 2 (build): top-k trigger prefixes of one neuron
# --------------------------------------------------------------------------------------------


def _top_triggers(coefficients: torch.Tensor, valid: torch.Tensor, neuron: int,
                  k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, T, d_ff)``, ``(N, T)`` bool -> examples ``(k,)``, positions ``(k,)``, best first."""
    c = coefficients[:, :, neuron].masked_fill(~valid, float("-inf"))
    best, position = c.max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _trigger_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2022)
    cases = []
    # (N, T, d_ff, neuron, k, rows whose allowed values are all negative, the last position may be allowed)
    for N, T, d_ff, neuron, k, negative, last in [(14, 6, 7, 3, 4, False, False),
                                                   (9, 5, 5, 4, 9, True, False),    # k = N, last neuron
                                                   (1, 4, 3, 0, 1, True, False),    # one example
                                                   (16, 7, 10, 9, 5, True, True),
                                                   (12, 8, 6, 2, 3, False, True),
                                                   (10, 6, 4, 1, 10, False, True),    # peaks from 1e-3 to 1e2
                                                   (11, 6, 5, 2, 6, "below", True),   # every value below -1
                                                   (8, 5, 4, 1, 3, "far below", True)]:  # ... below -1e10
        coefficients = torch.randn(N, T, d_ff, generator=gen)
        coefficients[:, -1] += 3.0     # the last position fires strongly: it counts only where it is allowed
        if N == 10:
            coefficients = coefficients * torch.logspace(-3, 2, N)[:, None, None]
        valid = valid_mask(gen, N, T, last_allowed=last)
        if N == 14:                                    # a row that allows one position only, and it is its peak
            valid[0] = False
            valid[0, 0] = True
            coefficients[0, 0, neuron] = coefficients[:, :, neuron].max() + 1.0
        if negative in ("below", "far below"):
            below_minus_one(coefficients, valid, gen, nearest=1e11 if negative == "far below" else 1e-2)
        elif negative:
            negative_rows(coefficients, valid, gen)
        note = f"coefficients {tuple(coefficients.shape)}, valid {tuple(valid.shape)}, neuron={neuron}, k={k}"
        cases.append(Case((coefficients, valid, neuron, k), note=note))
    return cases


def _triggers_argmin(c, valid, neuron, k):
    low = c[:, :, neuron].masked_fill(~valid, float("inf"))
    worst, position = low.min(dim=1)
    examples = worst.topk(k, largest=False).indices
    return examples, position[examples]


def _triggers_no_mask(c, valid, neuron, k):
    best, position = c[:, :, neuron].max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _triggers_zero_mask(c, valid, neuron, k):
    best, position = (c[:, :, neuron] * valid).max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _triggers_minus_one_mask(c, valid, neuron, k):
    best, position = c[:, :, neuron].masked_fill(~valid, -1.0).max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _triggers_nan_mask(c, valid, neuron, k):
    v = valid.to(c.dtype)
    best, position = (c[:, :, neuron] * v + (1 - v) * float("-inf")).max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _triggers_inverted_mask(c, valid, neuron, k):
    best, position = c[:, :, neuron].masked_fill(valid, float("-inf")).max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _triggers_many_per_example(c, valid, neuron, k):
    flat = c[:, :, neuron].masked_fill(~valid, float("-inf")).reshape(-1)
    index = flat.topk(k).indices
    return index // c.shape[1], index % c.shape[1]


def _triggers_weakest_first(c, valid, neuron, k):
    examples, positions = _top_triggers(c, valid, neuron, k)
    return examples.flip(0), positions.flip(0)


def _triggers_index_order(c, valid, neuron, k):
    examples, positions = _top_triggers(c, valid, neuron, k)
    order = examples.argsort()
    return examples[order], positions[order]


def _triggers_ascending_first_k(c, valid, neuron, k):
    best, position = c[:, :, neuron].masked_fill(~valid, float("-inf")).max(dim=1)
    examples = best.argsort()[:k]
    return examples, position[examples]


def _triggers_off_by_one(c, valid, neuron, k):
    examples, positions = _top_triggers(c, valid, neuron, k)
    return examples, positions + 1


def _allowed_peaks(coefficients: torch.Tensor, valid: torch.Tensor, neuron: int) -> torch.Tensor:
    """``(N,)`` each example's largest allowed coefficient of ``neuron``."""
    return coefficients[:, :, neuron].masked_fill(~valid, float("-inf")).max(dim=1).values


def _has_no_ties(coefficients: torch.Tensor, valid: torch.Tensor, neuron: int) -> bool:
    """No two allowed values of a row tie, and no two examples' peaks tie (what the statement promises)."""
    rows = [coefficients[n, valid[n], neuron] for n in range(coefficients.shape[0])]
    peaks = _allowed_peaks(coefficients, valid, neuron)
    return all(r.unique().numel() == r.numel() for r in rows) and peaks.unique().numel() == peaks.numel()


TRIGGER_CORNERS = (
    Corner("N = 1 (a single example)", lambda c: c.args[0].shape[0] == 1),
    Corner("k = 1", lambda c: c.args[3] == 1),
    Corner("k = N", lambda c: c.args[3] == c.args[0].shape[0]),
    Corner("neuron = 0", lambda c: c.args[2] == 0),
    Corner("neuron = d_ff - 1", lambda c: c.args[2] == c.args[0].shape[2] - 1),
    Corner("a row whose allowed values are all negative, above -1 (GELU's dip)", lambda c: bool(
        ((_allowed_peaks(*c.args[:3]) < 0) & (_allowed_peaks(*c.args[:3]) > -1)).any())),
    Corner("every allowed value below -1", lambda c: bool((_allowed_peaks(*c.args[:3]) < -1).all())),
    Corner("every allowed value below -1e10 (a finite stand-in fill such as -1e9 wins)",
           lambda c: bool((_allowed_peaks(*c.args[:3]) < -1e10).all())),
    Corner("valid allows the last position", lambda c: bool(c.args[1][:, -1].any())),
    Corner("a row that allows a single position", lambda c: bool((c.args[1].sum(1) == 1).any())),
    Corner("peaks spanning five orders of magnitude", lambda c: bool(
        _allowed_peaks(*c.args[:3]).abs().max() / _allowed_peaks(*c.args[:3]).abs().min() > 1e4)),
)


check_top_triggers = Exercise(
    "Exercise 2 (top-k trigger prefixes)",
    _top_triggers,
    _trigger_cases,
    domain=Domain(
        allows="coefficients (N, T, d_ff) float32, any finite values with no ties (in a row's allowed values or "
               "between examples' peaks); valid (N, T) bool with at least one True per row, the last position "
               "included or not; neuron in [0, d_ff); 1 <= k <= N; the answer: two (k,) integer tensors (any integer "
               "dtype), strongest first",
        corners=TRIGGER_CORNERS),
    mistakes=[
        ("you took the smallest coefficients (argmin / largest=False); trigger prefixes are where the neuron "
         "fires MOST.", _triggers_argmin),
        ("you ignored `valid`: positions that are padding or have no next token must not count (mask them with "
         "-inf before taking the max).", _triggers_no_mask),
        ("you masked the positions that are not allowed with 0 (e.g. by multiplying with `valid`); where every "
         "allowed value of a row is negative (GELU dips to -0.17), 0 wins and an invalid position is picked. "
         "Mask with -inf: masked_fill(~valid, float('-inf')).", _triggers_zero_mask),
        ("you masked the positions that are not allowed with -1: GELU never goes below -0.17, but these "
         "coefficients can (here every allowed value of a row is below -1), and then -1 wins and an invalid "
         "position is picked. No finite number is safe: masked_fill(~valid, float('-inf')).", _triggers_minus_one_mask),
        ("you masked by arithmetic: at a valid position (1 - valid)·(-inf) is 0·(-inf) = NaN, so the peaks are "
         "NaN. Mask with masked_fill(~valid, float('-inf')).", _triggers_nan_mask),
        ("you masked the allowed positions instead of the others: `valid` is True where a position counts, so "
         "fill the rest: masked_fill(~valid, float('-inf')).", _triggers_inverted_mask),
        ("one example appears several times: take the best position of each example first (max over T), then "
         "the top k examples.", _triggers_many_per_example),
        ("off by one: return the position t where the prefix ends (the prefix is ids[n, :t+1]), not its "
         "length t+1.", _triggers_off_by_one),
        ("your k examples are the right ones, but weakest first: return them strongest first (topk, or sort "
         "with descending=True).", _triggers_weakest_first),
        ("your k examples are the right ones, but in index order (sorted indices): return them strongest first, "
         "in the order topk gives.", _triggers_index_order),
        ("you sorted the peaks in ascending order and kept the first k: those are the k WEAKEST examples; sort "
         "descending (or use topk) to keep the strongest.", _triggers_ascending_first_k),
    ],
    returns=tuple(integer_tensor(i, name, advice="Any integer dtype will do (topk and argmax give int64); a float "
                                                 "tensor cannot index ids.")
                  for i, name in enumerate(("examples", "positions"))),
)

# --------------------------------------------------------------------------------------------
# Exercise 3 (build): a value vector read in the vocabulary, with and without the biases
# --------------------------------------------------------------------------------------------


def _value_to_vocab(ffn: FFN, neuron: int, ln_f: nn.LayerNorm, lm_head: nn.Linear,
                    biases: bool = True) -> torch.Tensor:
    """``(vocab,)`` logits: ``lm_head(ln_f(v))``, or without ln_f's β and lm_head's bias."""
    with torch.no_grad():
        value = ffn.w2.weight[:, neuron]
        if biases:
            return lm_head(ln_f(value))
        return F.layer_norm(value, ln_f.normalized_shape, ln_f.weight, None, ln_f.eps) @ lm_head.weight.T


def _value_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2023)
    cases = []
    # (d_model, d_ff, vocab, lm_head has a bias, biases)
    for k, (d, d_ff, vocab, head_bias, biases) in enumerate([(6, 6, 21, True, True),      # square W2
                                                             (5, 17, 30, True, False),
                                                             (8, 20, 25, False, True),
                                                             (7, 7, 18, False, False),    # square W2
                                                             (4, 12, 33, True, True),
                                                             (6, 1, 15, True, False),     # one neuron
                                                             (9, 5, 20, False, True),     # a tiny value
                                                             (5, 9, 22, True, True),      # ε = 1e-2 from here
                                                             (6, 4, 19, False, False)]):
        with torch.random.fork_rng(devices=[]):       # module init draws from the global generator
            torch.manual_seed(3000 + k)
            ffn = FFN(d, d_ff).eval()
            ln_f, lm_head = nn.LayerNorm(d, eps=1e-2 if k >= 7 else 1e-5), nn.Linear(d, vocab, bias=head_bias)
        with torch.no_grad():                          # a trained-looking final norm: scale and shift not 1 and 0
            ln_f.weight.copy_(1 + 0.5 * torch.randn(d, generator=gen))
            ln_f.bias.copy_(0.5 * torch.randn(d, generator=gen))
            if head_bias:
                lm_head.bias.copy_(torch.randn(vocab, generator=gen))
        neuron = d_ff - 1 if k in (1, 3, 5) else 0 if k == 6 else randint(gen, 0, d_ff - 2)
        if k in (5, 6):                                # values of size 1e-3: variance 1e-6, against ε = 1e-5
            with torch.no_grad():
                ffn.w2.weight[:, neuron] = 1e-3 * torch.randn(d, generator=gen)
        if k >= 7:                                     # values of size 0.1: variance 1e-2, against ε = 1e-2
            with torch.no_grad():
                ffn.w2.weight[:, neuron] = 0.1 * torch.randn(d, generator=gen)
        note = (f"FFN(d_model={d}, d_ff={d_ff}), neuron={neuron}, LayerNorm({d}, eps={ln_f.eps:g}), "
                f"lm_head {d}->{vocab} {'with' if head_bias else 'without'} bias, biases={biases}")
        cases.append(Case((ffn, neuron, ln_f, lm_head, biases), note=note))
    return cases


def _ln_no_beta(v: torch.Tensor, ln: nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(v, ln.normalized_shape, ln.weight, None, ln.eps)


def _values_with_read(read: Callable[[torch.Tensor, nn.LayerNorm, nn.Linear, bool], torch.Tensor],
                      column: Callable[[FFN, int], torch.Tensor] = lambda f, i: f.w2.weight[:, i]):
    """A mistake model: ``read(v, ln_f, lm_head, biases)`` applied to the vector ``column(ffn, neuron)``."""
    @torch.no_grad()
    def wrong(f, i, ln, head, biases=True):
        return read(column(f, i), ln, head, biases)
    return wrong


def _right_read(v, ln, head, biases):
    return head(ln(v)) if biases else _ln_no_beta(v, ln) @ head.weight.T


def _default_eps(ln: nn.LayerNorm) -> nn.LayerNorm:
    """A copy of ``ln`` with nn.LayerNorm's default ε, 1e-5 (the mistake of not passing ``ln_f.eps``)."""
    copy = nn.LayerNorm(ln.normalized_shape, eps=1e-5)
    with torch.no_grad():
        copy.weight.copy_(ln.weight)
        copy.bias.copy_(ln.bias)
    return copy


def _norm_by_hand(correction: int, eps: bool, both: bool = True, centre: bool = True, eps_outside: bool = False):
    """A LayerNorm written out by hand, with the variance's divisor d - correction and with or without ε (inside the
    square root, or ``eps_outside``: added to the standard deviation); in both modes, or (``both=False``) only
    without the biases, where no one-call form exists (``lm_head(ln_f(v))`` with)."""
    def read(v, ln, head, biases):
        centred = (v - v.mean()) if centre else v
        if eps_outside:
            z = centred / (torch.sqrt(v.var(correction=correction)) + ln.eps) * ln.weight
        else:
            z = centred / torch.sqrt(v.var(correction=correction) + (ln.eps if eps else 0.0)) * ln.weight
        if biases:
            return F.linear(z + ln.bias, head.weight, head.bias) if both else head(ln(v))
        return z @ head.weight.T
    return read


check_value_logits = Exercise(
    "Exercise 3 (value to vocabulary)",
    _value_to_vocab,
    _value_cases,
    mistakes=[
        ("you forgot ln_f: the model always normalises the residual stream before the unembedding, so read "
         "the value through ln_f (with biases) or through its normalisation and scale γ (without).",
         _values_with_read(lambda v, ln, head, b: head(v) if b else v @ head.weight.T)),
        ("with biases=False you left ln_f out altogether, as Geva et al. (2021) read values: this exercise keeps "
         "what the model does to every vector, its normalisation and scale γ, and drops only what is the same for "
         "every neuron (β and lm_head's bias): F.layer_norm(v, shape, ln_f.weight, None, ln_f.eps) @ lm_head.weight.T.",
         _values_with_read(lambda v, ln, head, b: head(ln(v)) if b else v @ head.weight.T)),
        ("you used the key (row i of w1.weight); the value is column i of w2.weight, w2.weight[:, i].",
         _values_with_read(_right_read, lambda f, i: f.w1.weight[i])),
        ("you took row i of w2.weight; w2.weight is (d_model, d_ff), so value i is its column, w2.weight[:, i].",
         _values_with_read(_right_read, lambda f, i: f.w2.weight[i])),
        ("where a row of w2.weight exists you took row i (it has the right length only when W2 is square); value i "
         "is always column i, w2.weight[:, i].",
         _values_with_read(_right_read, lambda f, i: f.w2.weight[i] if i < f.w2.weight.shape[0] else f.w2.weight[:, i])),
        ("you returned probabilities (softmax); return the logits.",
         _values_with_read(lambda v, ln, head, b: _right_read(v, ln, head, b).softmax(-1))),
        ("biases=False ignored: without the biases, leave out ln_f's shift β and lm_head's bias "
         "(F.layer_norm(v, shape, ln_f.weight, None, ln_f.eps) @ lm_head.weight.T).",
         _values_with_read(lambda v, ln, head, b: head(ln(v)))),
        ("without the biases you also dropped ln_f's scale γ: only β is the same for every neuron; γ scales each "
         "coordinate and belongs to the read-out.",
         _values_with_read(lambda v, ln, head, b: head(ln(v)) if b else
                           F.layer_norm(v, ln.normalized_shape, eps=ln.eps) @ head.weight.T)),
        ("without the biases you kept lm_head's bias: like β it adds the same vector to every neuron's logits, "
         "so leave it out too.",
         _values_with_read(lambda v, ln, head, b: head(ln(v)) if b else head(_ln_no_beta(v, ln)))),
        ("with the biases you dropped lm_head's bias: the full read-out is lm_head(ln_f(v)), bias included.",
         _values_with_read(lambda v, ln, head, b: (ln(v) if b else _ln_no_beta(v, ln)) @ head.weight.T)),
        ("you used LayerNorm's default ε (1e-5), not ln_f's own: pass ln_f.eps (here a hidden ln_f has ε = 1e-2).",
         _values_with_read(lambda v, ln, head, b: _right_read(v, _default_eps(ln), head, b))),
        ("your LayerNorm by hand does not subtract the mean: LayerNorm centres v first, (v - v.mean()) / "
         "sqrt(var + ε), or call F.layer_norm.", _values_with_read(_norm_by_hand(correction=0, eps=True, centre=False))),
        ("your LayerNorm by hand leaves out ε: normalise by sqrt(var + ln_f.eps), as nn.LayerNorm does (it matters "
         "for a small value), or call F.layer_norm.", _values_with_read(_norm_by_hand(correction=0, eps=False))),
        ("your LayerNorm by hand uses the unbiased variance (divisor d - 1, torch.var's default); LayerNorm divides "
         "by d: var(correction=0), or call F.layer_norm.", _values_with_read(_norm_by_hand(correction=1, eps=True))),
        ("with biases=False your LayerNorm by hand leaves out ε (the biases=True read-out is right): normalise by "
         "sqrt(var + ln_f.eps), as nn.LayerNorm does, or call F.layer_norm(v, shape, ln_f.weight, None, ln_f.eps).",
         _values_with_read(_norm_by_hand(correction=0, eps=False, both=False))),
        ("your LayerNorm by hand adds ε to the standard deviation; ε belongs inside the square root: "
         "(v - mean) / sqrt(var + ln_f.eps), as nn.LayerNorm does, or call F.layer_norm.",
         _values_with_read(_norm_by_hand(correction=0, eps=True, eps_outside=True))),
        ("with biases=False your LayerNorm by hand adds ε to the standard deviation (the biases=True read-out is "
         "right); ε belongs inside the square root: (v - mean) / sqrt(var + ln_f.eps), or call F.layer_norm.",
         _values_with_read(_norm_by_hand(correction=0, eps=True, both=False, eps_outside=True))),
        ("your LayerNorm by hand uses the unbiased standard deviation (torch.std's default divisor d - 1) and no "
         "ε: LayerNorm divides by sqrt(var + ε) with var over d, (v - mean) / sqrt(v.var(correction=0) + ln_f.eps), "
         "or call F.layer_norm.", _values_with_read(_norm_by_hand(correction=1, eps=False))),
        ("with biases=False your LayerNorm by hand uses the unbiased standard deviation (torch.std's default "
         "divisor d - 1) and no ε (the biases=True read-out is right): divide by sqrt(v.var(correction=0) + "
         "ln_f.eps), or call F.layer_norm(v, shape, ln_f.weight, None, ln_f.eps).",
         _values_with_read(_norm_by_hand(correction=1, eps=False, both=False))),
        ("with biases=False your LayerNorm by hand uses the unbiased variance (torch.var's default divisor d - 1; "
         "the biases=True read-out is right): LayerNorm divides by d, var(correction=0), or call F.layer_norm.",
         _values_with_read(_norm_by_hand(correction=1, eps=True, both=False))),
    ],
    domain=Domain(
        allows="ffn a float32 helpers.ffn.FFN (d_model >= 2, d_ff >= 1), neuron in [0, d_ff), ln_f any "
               "nn.LayerNorm(d_model), lm_head an nn.Linear with or without a bias, biases True or False; the "
               "answer (vocab,) float32",
        corners=(
            Corner("biases=True, lm_head with a bias", lambda c: c.args[4] and c.args[3].bias is not None),
            Corner("biases=True, lm_head without a bias", lambda c: c.args[4] and c.args[3].bias is None),
            Corner("biases=False, lm_head with a bias", lambda c: not c.args[4] and c.args[3].bias is not None),
            Corner("biases=False, lm_head without a bias", lambda c: not c.args[4] and c.args[3].bias is None),
            Corner("neuron = 0", lambda c: c.args[1] == 0),
            Corner("neuron = d_ff - 1", lambda c: c.args[1] == c.args[0].d_ff - 1),
            Corner("d_ff = 1", lambda c: c.args[0].d_ff == 1),
            Corner("square W2 (a row still fits)", lambda c: c.args[0].d_ff == c.args[0].d_model),
            Corner("a value so small that ln_f's ε matters", lambda c: bool(
                c.args[0].w2.weight[:, c.args[1]].var(correction=0) < 10 * c.args[2].eps)),
            Corner("ln_f's ε not the default 1e-5", lambda c: c.args[2].eps != 1e-5),
        )),
    returns=tensor_dtype(torch.float32, advice="Keep the inputs' dtype (float32)."),
)

# --------------------------------------------------------------------------------------------
# Exercise 4 (build): agreement rate
# --------------------------------------------------------------------------------------------


def _agreement_rate(coefficients: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor,
                    value_logits: torch.Tensor) -> float:
    """Share of neurons whose value's top token equals the token after their top trigger prefix."""
    c = coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf"))   # (N, T, d_ff)
    best, position = c.max(dim=1)                                       # (N, d_ff)
    example = best.argmax(dim=0)                                        # (d_ff,)
    t = position[example, torch.arange(c.shape[2])]
    next_token = ids[example, t + 1]
    return (value_logits.argmax(dim=1) == next_token).float().mean().item()


def _agreement_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2024)
    cases = []
    for negative, shape in [(False, None), (True, None), (False, None), (True, None), (False, (1, 4, 3, 12)),
                            ("below", None), ("all agree", (9, 6, 5, 15)), ("none agree", (7, 5, 1, 10)),
                            ("far below", (12, 6, 10, 30))]:
        # the last three: every allowed value below -1; every neuron agrees (rate 1); one neuron that does not (rate 0)
        N, T, d_ff, vocab = shape or (randint(gen, 10, 25), randint(gen, 5, 8), randint(gen, 12, 30),
                                      randint(gen, 20, 40))      # the last case: a single example
        ids = torch.randint(1, vocab, (N, T), generator=gen)
        valid = valid_mask(gen, N, T, padded=negative)
        coefficients = torch.randn(N, T, d_ff, generator=gen)
        coefficients[:, -1] += 3.0
        if negative in ("below", "far below"):
            below_minus_one(coefficients, valid, gen, nearest=1e11 if negative == "far below" else 1e-2)
        elif negative is True:
            negative_rows(coefficients, valid, gen, share=1.0)     # every allowed value is negative
        logits = torch.randn(d_ff, vocab, generator=gen)
        # plant answers: about half of the neurons agree; some others point at the trigger's own last token
        # (what an off-by-one finds) or have the next token as their argmin, so each mistake gets its own rate
        c = coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf"))
        best, position = c.max(dim=1)
        example = best.argmax(dim=0)
        t = position[example, torch.arange(d_ff)]
        nxt, last = ids[example, t + 1], ids[example, t]
        u = torch.rand(d_ff, generator=gen)
        top, bottom = logits.max() + 1.0, logits.min() - 1.0
        agree, off_by_one, lowest = u < 0.5, (u >= 0.5) & (u < 0.75) & (last != nxt), u >= 0.9
        agree[-1] = True                                       # the last neuron counts too (and nothing else)
        off_by_one[-1] = lowest[-1] = False
        if negative == "all agree":
            agree[:] = True
            off_by_one[:] = lowest[:] = False
        elif negative == "none agree":
            agree[:] = False
        logits[agree, nxt[agree]] = top
        logits[off_by_one, last[off_by_one]] = top
        logits[lowest, nxt[lowest]] = bottom
        if negative in (True, "below"):   # where 0-masking finds another trigger, some values name ITS next token
            zero_example, zero_t = _trigger_max(coefficients, valid, fill=0.0)
            zero_next = ids[zero_example, zero_t + 1]
            zero = (u >= 0.75) & (u < 0.9) & (zero_next != nxt) & (zero_next != last)
            zero[-1] = False
            logits[zero, zero_next[zero]] = top
        note = f"coefficients {tuple(coefficients.shape)}, ids {tuple(ids.shape)}, value_logits {tuple(logits.shape)}"
        cases.append(Case((coefficients, ids, valid, logits), note=note))
    return cases


def _agreement_with(trigger: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                    shift: int = 1, pick: str = "argmax", per: float = 1.0):
    """A mistake model of the agreement rate: ``trigger(c, valid)`` gives each neuron's (example, position)."""
    def wrong(c, ids, valid, logits):
        example, t = trigger(c, valid)
        top = logits.argmax(dim=1) if pick == "argmax" else logits.argmin(dim=1)
        return (top == ids[example, t + shift]).float().mean().item() * per
    return wrong


def _trigger_max(c, valid, fill=float("-inf")):
    best, position = c.masked_fill(~valid.unsqueeze(-1), fill).max(dim=1)
    example = best.argmax(dim=0)
    return example, position[example, torch.arange(c.shape[2])]


def _trigger_min(c, valid):
    worst, position = c.masked_fill(~valid.unsqueeze(-1), float("inf")).min(dim=1)
    example = worst.argmin(dim=0)
    return example, position[example, torch.arange(c.shape[2])]


def _agreement_ignoring_valid(c, ids, valid, logits, *, clamp: bool):
    """``valid`` ignored: the top trigger over every position but the last (which has no next token), or over
    every position with the next token's index clamped to the last."""
    allowed = torch.ones_like(valid)
    if not clamp:
        allowed[:, -1] = False
    example, t = _trigger_max(c, allowed)
    return (logits.argmax(dim=1) == ids[example, (t + 1).clamp(max=c.shape[1] - 1)]).float().mean().item()


def _agreement_count(c, ids, valid, logits):
    return _agreement_rate(c, ids, valid, logits) * c.shape[2]


def _agreement_floor_division(c, ids, valid, logits):
    hits = round(_agreement_rate(c, ids, valid, logits) * c.shape[2])
    return float(hits // c.shape[2])


def _agreement_of(case: Case) -> float:
    return _agreement_rate(*case.args)


def _agreement_unmasked(c, ids, valid, logits):
    """``valid`` ignored altogether: the peak over every position, the last included, whose next token
    ``ids[n, T]`` does not exist (an IndexError wherever a neuron peaks at the last position)."""
    best, position = c.max(dim=1)
    example = best.argmax(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    return (logits.argmax(dim=1) == ids[example, t + 1]).float().mean().item()


UNMASKED_HINT = ("a top trigger ended at the last position, which has no next token (ids[n, t + 1] is out of "
                 "range): `valid` was ignored. Set the positions it marks False to -inf before taking each "
                 "neuron's maximum; `valid` is never True at the last position.")


def _outcome(fn, case: Case):
    """``("raised", exception text)`` or ``("value", float)`` for ``fn`` on fresh copies of the case's inputs."""
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    try:
        value = fn(*args)
    except (Exception, SystemExit) as err:  # the learner's exception is what is compared
        return "raised", f"{type(err).__name__}: {err}"
    try:
        return "value", float(value)
    except (TypeError, ValueError, RuntimeError):
        return "value", None


class _AgreementExercise(Exercise):
    """The engine names a mistake only from a wrong value. A function that raises gets the unmasked-peak hint
    when, on every hidden case, it raises the very exception ``_agreement_unmasked`` raises there (type and
    message) and returns the same value where that one returns: then ignoring ``valid`` explains every case."""

    def evaluate(self, fn):  # type: ignore[override]
        result = super().evaluate(fn)
        if result.passed or result.hint or result.reason != "error":
            return result
        for case in self.cases():
            got, model = _outcome(fn, case), _outcome(_agreement_unmasked, case)
            if got[0] != model[0] or (got[0] == "raised" and got[1] != model[1]) or \
                    (got[0] == "value" and (got[1] is None or abs(got[1] - model[1]) > 1e-6)):
                return result
        return self._result(FAILED, f"{result.message} {HINT_PREFIX}{UNMASKED_HINT}", "error", UNMASKED_HINT)


check_agreement_rate = _AgreementExercise(
    "Exercise 4 (agreement rate)",
    _agreement_rate,
    _agreement_cases,
    mistakes=[
        ("off by one: you compared with the last token OF the trigger prefix, ids[n, t]; agreement is about the "
         "token that comes NEXT, ids[n, t + 1].", _agreement_with(_trigger_max, shift=0)),
        ("you took the value's argmin; a value's prediction is its top (argmax) token.",
         _agreement_with(_trigger_max, pick="argmin")),
        ("you returned the number of agreeing neurons; the rate is that number divided by d_ff.", _agreement_count),
        ("you took the weakest trigger (argmin over the coefficients); the top trigger is where the neuron fires "
         "most.", _agreement_with(_trigger_min)),
        ("you masked the positions that are not allowed with 0; where every allowed value is negative, 0 wins "
         "and the trigger ends at a position that is not allowed. Mask with -inf.",
         _agreement_with(lambda c, valid: _trigger_max(c, valid, fill=0.0))),
        ("`valid` was ignored: a top trigger may end where no prefix may end (a position marked False); mask "
         "those positions before taking each neuron's maximum.",
         lambda c, ids, valid, logits: _agreement_ignoring_valid(c, ids, valid, logits, clamp=False)),
        ("`valid` was ignored: a top trigger may end where no prefix may end (a position marked False); mask "
         "those positions before taking each neuron's maximum (clamping t + 1 to the last position only hides "
         "the miss).",
         lambda c, ids, valid, logits: _agreement_ignoring_valid(c, ids, valid, logits, clamp=True)),
        ("integer division: the count // d_ff is 0 unless every neuron agrees; divide with / (or take the mean of "
         "a float tensor).", _agreement_floor_division),
    ],
    domain=Domain(
        allows="coefficients (N, T, d_ff) float32, any finite values, each neuron's allowed values all different; "
               "ids (N, T) int64; valid (N, T) bool, at least one True per row, never the last position; "
               "value_logits (d_ff, vocab) float32 with one top token per row; the answer a number in [0, 1] (a "
               "Python float or a 0-d tensor)",
        corners=(
            Corner("N = 1 (a single example)", lambda c: c.args[0].shape[0] == 1),
            Corner("d_ff = 1", lambda c: c.args[0].shape[2] == 1),
            Corner("rate 0 (no neuron agrees)", lambda c: _agreement_of(c) == 0.0),
            Corner("rate 1 (every neuron agrees)", lambda c: _agreement_of(c) == 1.0),
            Corner("every allowed value negative", lambda c: bool(
                (c.args[0].masked_fill(~c.args[2].unsqueeze(-1), -1.0) < 0).all()
                and (c.args[0].masked_fill(~c.args[2].unsqueeze(-1), -1.0) > -1).any())),
            Corner("every allowed value below -1", lambda c: bool(
                (c.args[0].masked_fill(~c.args[2].unsqueeze(-1), -2.0) < -1).all())),
            Corner("every allowed value below -1e10 (a finite stand-in fill such as -1e9 wins)", lambda c: bool(
                (c.args[0].masked_fill(~c.args[2].unsqueeze(-1), -2e10) < -1e10).all())),
        )),
)

# --------------------------------------------------------------------------------------------
# Exercise 5 (investigate): what C buys in a rank-one edit
# --------------------------------------------------------------------------------------------


def _edit_spill(C: torch.Tensor, k_star: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``(M,)`` float64: ``α(k) = (C⁻¹k*)ᵀk / (C⁻¹k*)ᵀk*`` for every row ``k`` of ``keys`` ``(M, d)``."""
    u = torch.linalg.solve(C, k_star)                        # C⁻¹k*: (d,)
    return keys @ u / (u @ k_star)


def _spill_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2025)
    cases = []
    # (d, M, C's eigenvalues from .. to, key scales): every case holds k* itself, a key C⁻¹-orthogonal to k*
    # (α = 0) and a key on the far side (α < 0); one has keys whose sizes span 1e-4 to 1e3
    for d, M, low, high, scale in [(6, 8, 0.05, 20.0, None), (1, 3, 2.0, 2.0, None), (12, 1, 0.1, 5.0, None),
                                   (5, 7, 1.0, 1.0, None), (9, 10, 1e-2, 1e3, None), (7, 9, 0.2, 8.0, "span"),
                                   (4, 6, 0.5, 3.0, "tiny k*"), (4, 6, 0.5, 3.0, "large k*")]:
        C = torch.eye(d, dtype=torch.float64) if (low, high) == (1.0, 1.0) else spd(gen, d, low, high)
        k_star = torch.randn(d, generator=gen, dtype=torch.float64) + 0.5
        k_star = k_star * {"tiny k*": 1e-6, "large k*": 1e4}.get(scale, 1.0)     # α of a fixed key scales as 1/|k*|
        keys = torch.randn(M, d, generator=gen, dtype=torch.float64)
        u = torch.linalg.solve(C, k_star)
        if M >= 3 and d > 1:
            keys[0] = k_star                                             # α = 1
            keys[-2] = -2.5 * k_star + 0.1 * keys[-2]                    # α < 0 (last but one: the first key that
                                                                         # differs is then one C changes a lot)
            keys[-1] = keys[-1] - (keys[-1] @ u) / (u @ u) * u           # α = 0
        if scale == "span":
            keys = keys * torch.logspace(-4, 3, M, dtype=torch.float64)[:, None]
        note = f"C ({d}, {d}), k_star ({d},), keys ({M}, {d}), float64"
        cases.append(Case((C, k_star, keys), note=note))
    return cases


check_edit_spill = Exercise(
    "Exercise 5 (edit spill)",
    _edit_spill,
    _spill_cases,
    mistakes=[
        ("you used C where C⁻¹ belongs: the edit measures keys in the metric of C⁻¹, u = C⁻¹k* = "
         "torch.linalg.solve(C, k_star), not C @ k_star.",
         lambda C, k, K: K @ (C @ k) / ((C @ k) @ k)),
        ("you left C out (u = k*): that is the edit without key statistics, the C = I case you compare with "
         "below. Use u = torch.linalg.solve(C, k_star).",
         lambda C, k, K: K @ k / (k @ k)),
        ("α(k*) must be 1: divide by (C⁻¹k*)ᵀk*, the same product for k* itself.",
         lambda C, k, K: K @ torch.linalg.solve(C, k)),
        ("the denominator is (C⁻¹k*)ᵀk*, not k*ᵀk*: with it, α(k*) = 1 exactly.",
         lambda C, k, K: K @ torch.linalg.solve(C, k) / (k @ k)),
        ("the denominator is (C⁻¹k*)ᵀk*, not (C⁻¹k*)ᵀ(C⁻¹k*): with u = C⁻¹k*, divide by u @ k_star, so that "
         "α(k*) = 1 exactly.",
         lambda C, k, K: K @ torch.linalg.solve(C, k) / (torch.linalg.solve(C, k) @ torch.linalg.solve(C, k))),
        ("keep the sign: a negative α means the edit pushes that key's output away from v*; return α, not |α|.",
         lambda C, k, K: _edit_spill(C, k, K).abs()),
        ("your α is the right one times ‖k*‖: you normalised k_star. Use k* as given: the edit writes at the key "
         "itself, and α of a fixed key scales as 1/‖k*‖.",
         lambda C, k, K: _edit_spill(C, k / k.norm(), K)),
    ],
    kind="investigate",
    domain=Domain(
        allows="C (d, d) float64 symmetric positive definite, eigenvalues from 1e-2 to 1e3; k_star (d,) float64, "
               "not zero, of any size; keys (M, d) float64 of any size; d, M >= 1; the answer (M,) float64",
        corners=(
            Corner("d = 1", lambda c: c.args[0].shape == (1, 1)),
            Corner("M = 1 (a single key)", lambda c: c.args[2].shape[0] == 1),
            Corner("C = I", lambda c: torch.equal(c.args[0], torch.eye(c.args[0].shape[0], dtype=torch.float64))),
            Corner("C ill-conditioned (eigenvalues 1e-2 to 1e3)", lambda c: bool(torch.linalg.cond(c.args[0]) > 1e4)),
            Corner("a key equal to k* (α = 1)", lambda c: bool((c.args[2] == c.args[1]).all(dim=1).any())),
            Corner("a key with α < 0", lambda c: bool((_edit_spill(*c.args) < 0).any())),
            Corner("a key C⁻¹-orthogonal to k* (α = 0)", lambda c: bool((_edit_spill(*c.args).abs() < 1e-9).any())),
            Corner("keys whose sizes span 1e-4 to 1e3", lambda c: bool(
                c.args[2].norm(dim=1).max() / c.args[2].norm(dim=1).min() > 1e5)),
            Corner("a tiny k* (norm about 1e-6)", lambda c: bool(c.args[1].norm() < 1e-4)),
            Corner("a large k* (norm about 1e4)", lambda c: bool(c.args[1].norm() > 1e3)),
        )),
)

# --------------------------------------------------------------------------------------------
# Exercise 6 (investigate): a neuron's activation per relation
# --------------------------------------------------------------------------------------------


def _relation_profile(coefficients: torch.Tensor, valid: torch.Tensor, relation: torch.Tensor,
                      n_relations: int) -> torch.Tensor:
    """``(d_ff, n_relations)``: per relation, the mean over its examples of each example's peak coefficient."""
    peaks = coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf")).max(dim=1).values     # (N, d_ff)
    one_hot = F.one_hot(relation, n_relations).to(peaks.dtype)                                   # (N, R)
    return (peaks.T @ one_hot) / one_hot.sum(dim=0)


def _profile_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2026)
    cases = []
    # (N, T, d_ff, R, rows whose allowed values are all negative)
    for N, T, d_ff, R, negative in [(13, 6, 5, 3, True), (9, 4, 7, 4, False), (20, 7, 3, 2, True),
                                     (5, 5, 6, 1, False), (11, 8, 4, 5, True), (4, 5, 1, 4, "below"),
                                     (10, 6, 4, 4, False),                  # square: d_ff = n_relations
                                     (6, 5, 3, 2, "far below")]:            # every allowed value below -1e10
        coefficients = torch.randn(N, T, d_ff, generator=gen)      # the last case: one neuron, each relation once
        valid = valid_mask(gen, N, T, last_allowed=True)
        if negative in ("below", "far below"):
            below_minus_one(coefficients, valid, gen, nearest=1e11 if negative == "far below" else 1e-2)
        elif negative:
            negative_rows(coefficients, valid, gen, share=0.5)
        # every relation appears at least once, in unequal numbers, interleaved; the last one only once
        relation = torch.cat([torch.arange(R - 1), torch.randint(0, max(R - 1, 1), (N - R,), generator=gen),
                              torch.tensor([R - 1])]) if R > 1 else torch.zeros(N, dtype=torch.long)
        relation = relation[torch.randperm(N, generator=gen)]
        note = (f"coefficients {tuple(coefficients.shape)}, valid {tuple(valid.shape)}, relation ({N},) with "
                f"counts {torch.bincount(relation, minlength=R).tolist()}, n_relations={R}")
        cases.append(Case((coefficients, valid, relation, R), note=note))
    return cases


def _profile_from_peaks(peaks_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], divide: str = "count"):
    def wrong(c, valid, relation, R):
        peaks = peaks_of(c, valid)
        one_hot = F.one_hot(relation, R).to(peaks.dtype)
        total = peaks.T @ one_hot
        if divide == "count":
            return total / one_hot.sum(dim=0)
        if divide == "none":
            return total
        return total / (c.shape[0] / R)                      # as if every relation had N/R examples
    return wrong


def _peaks(c, valid, fill=float("-inf")):
    return c.masked_fill(~valid.unsqueeze(-1), fill).max(dim=1).values


def _mean_over_positions(c, valid):
    v = valid.unsqueeze(-1).to(c.dtype)
    return (c * v).sum(dim=1) / v.sum(dim=1)


check_relation_profile = Exercise(
    "Exercise 6 (activation per relation)",
    _relation_profile,
    _profile_cases,
    mistakes=[
        ("you masked the positions that are not allowed with 0; where every allowed value of an example is "
         "negative, its peak must stay negative. Mask with -inf before the max over positions.",
         _profile_from_peaks(lambda c, valid: _peaks(c, valid, 0.0))),
        ("you ignored `valid`: only positions where a prefix may end count.",
         _profile_from_peaks(lambda c, valid: c.max(dim=1).values)),
        ("you averaged over the positions; the profile averages each example's PEAK (its max over the allowed "
         "positions), the number trigger lists are ranked by.", _profile_from_peaks(_mean_over_positions)),
        ("you summed instead of averaging: divide each relation's total by its number of examples.",
         _profile_from_peaks(_peaks, divide="none")),
        ("you divided by N / n_relations, as if every relation had as many examples; divide by each "
         "relation's own count.", _profile_from_peaks(_peaks, divide="equal")),
        ("your result is (n_relations, d_ff); return (d_ff, n_relations): one row per neuron.",
         lambda c, valid, relation, R: _relation_profile(c, valid, relation, R).T),
    ],
    kind="investigate",
    domain=Domain(
        allows="coefficients (N, T, d_ff) float32, any finite values; valid (N, T) bool, at least one True per row; "
               "relation (N,) int64 in [0, n_relations), every relation at least once, in any counts; "
               "n_relations >= 1; the answer (d_ff, n_relations) float32",
        corners=(
            Corner("n_relations = 1", lambda c: c.args[3] == 1),
            Corner("a relation with a single example", lambda c: c.args[3] > 1 and bool(
                (torch.bincount(c.args[2], minlength=c.args[3]) == 1).any())),
            Corner("every relation exactly once (N = n_relations)", lambda c: c.args[0].shape[0] == c.args[3] > 1),
            Corner("unequal counts", lambda c: len(set(torch.bincount(c.args[2], minlength=c.args[3]).tolist())) > 1),
            Corner("d_ff = 1", lambda c: c.args[0].shape[2] == 1),
            Corner("a row whose allowed values are all negative, above -1", lambda c: bool(
                ((c.args[0].masked_fill(~c.args[1].unsqueeze(-1), float("-inf")).amax(1) < 0)
                 & (c.args[0].masked_fill(~c.args[1].unsqueeze(-1), float("-inf")).amax(1) > -1)).any())),
            Corner("every allowed value below -1", lambda c: bool(
                (c.args[0].masked_fill(~c.args[1].unsqueeze(-1), -2.0) < -1).all())),
            Corner("every allowed value below -1e10 (a finite stand-in fill such as -1e9 wins)", lambda c: bool(
                (c.args[0].masked_fill(~c.args[1].unsqueeze(-1), -2e10) < -1e10).all())),
            Corner("valid allows the last position", lambda c: bool(c.args[1][:, -1].any())),
        )),
    returns=tensor_dtype(torch.float32, advice="Keep the coefficients' dtype (float32)."),
)

# --------------------------------------------------------------------------------------------
# Exercise 7 (investigate): the best-matching neuron of another model
# --------------------------------------------------------------------------------------------


def _best_match(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each column of ``a`` ``(M, n_a)``: the column of ``b`` ``(M, n_b)`` with the largest Pearson
    correlation, and that correlation; ``(n_a,)`` long and ``(n_a,)`` float."""
    za = (a - a.mean(dim=0)) / a.std(dim=0)
    zb = (b - b.mean(dim=0)) / b.std(dim=0)
    r = za.T @ zb / (a.shape[0] - 1)                         # (n_a, n_b)
    best, index = r.max(dim=1)
    return index, best


def _match_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2027)
    cases = []
    for M, n_a, n_b in [(40, 6, 9), (25, 5, 5), (60, 8, 1), (30, 7, 12), (50, 4, 3), (3, 1, 4), (35, 3, 5)]:
        a = torch.randn(M, n_a, generator=gen, dtype=torch.float64)
        b = torch.randn(M, n_b, generator=gen, dtype=torch.float64)
        # plant partners: some columns of b are a shuffled, rescaled, shifted, noisy copy of a column of a
        for j in torch.randperm(n_b, generator=gen)[: min(n_a, n_b) // 2 + 1].tolist():
            i = randint(gen, 0, n_a - 1)
            b[:, j] = 3.0 * torch.rand(1, generator=gen, dtype=torch.float64) * (
                a[:, i] + 0.6 * torch.randn(M, generator=gen, dtype=torch.float64)) + 5.0
        if n_b > 2:   # a decoy: strongly ANTI-correlated with a column of a (larger |r| than any partner)
            b[:, -1] = -0.5 * a[:, 0] + 0.02 * torch.randn(M, generator=gen, dtype=torch.float64) - 2.0
        a = a * (0.2 + 4 * torch.rand(n_a, generator=gen, dtype=torch.float64)) + 3.0   # other scales and offsets
        if (M, n_a, n_b) == (35, 3, 5):        # an exact affine copy (r = 1), and activations near 1e4 that vary
            b[:, 2] = -7.0 + 2.5 * a[:, 1]     # by about 1e-2 (E[ab] - E[a]E[b] loses them; centring first does not)
            a = a * 1e-2 + 1e4
        note = f"a ({M}, {n_a}), b ({M}, {n_b}) float64"
        cases.append(Case((a, b), note=note))
    return cases


def _match_from(r_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], absolute: bool = False):
    def wrong(a, b):
        r = r_of(a, b)
        best, index = (r.abs() if absolute else r).max(dim=1)
        return index, r.gather(1, index.unsqueeze(1)).squeeze(1)
    return wrong


def _corr(a, b):
    za, zb = (a - a.mean(0)) / a.std(0), (b - b.mean(0)) / b.std(0)
    return za.T @ zb / (a.shape[0] - 1)


def _corr_mixed_divisors(a, b, correction=1, divisor_offset=0):
    """Pearson's r with std(correction=...) but the products averaged over M - divisor_offset."""
    za = (a - a.mean(0)) / a.std(0, correction=correction)
    zb = (b - b.mean(0)) / b.std(0, correction=correction)
    return za.T @ zb / (a.shape[0] - divisor_offset)


def _match_in_float32(a, b):
    index, r = _best_match(a.float(), b.float())
    return index, r.double()


def _cosine(a, b):
    return F.normalize(a, dim=0).T @ F.normalize(b, dim=0)


def _covariance(a, b):
    return (a - a.mean(0)).T @ (b - b.mean(0)) / (a.shape[0] - 1)


check_best_match = Exercise(
    "Exercise 7 (best-matching neuron)",
    _best_match,
    _match_cases,
    mistakes=[
        ("you ranked by |r|: a neuron that fires exactly when the other is silent (r close to -1) is not the same "
         "memory. Take the largest r itself.", _match_from(_corr, absolute=True)),
        ("you did not subtract each column's mean: that is the cosine of the raw activations, which a constant "
         "offset (GELU's outputs are mostly positive) inflates. Pearson's r centres both columns first.",
         _match_from(_cosine)),
        ("you compared covariances: a neuron with larger activations wins. Divide by both standard deviations "
         "(Pearson's r is scale-free).", _match_from(_covariance)),
        ("you mixed two divisors: torch.std divides by M - 1 by default (correction=1), but you averaged "
         "the products over M with .mean(); r comes out (M-1)/M too small. Use one divisor for both (e.g. "
         "std(correction=0) with .mean()): a column's r with itself is then exactly 1.",
         _match_from(lambda a, b: _corr_mixed_divisors(a, b, correction=1, divisor_offset=0))),
        ("you mixed two divisors: std(correction=0) divides by M, but you divided the summed products by "
         "M - 1; r comes out M/(M-1) too large (it can pass 1). Use one divisor for both.",
         _match_from(lambda a, b: _corr_mixed_divisors(a, b, correction=0, divisor_offset=1))),
        ("you matched the wrong way round: return one entry per neuron of `a` (the best column of b for each "
         "column of a).", lambda a, b: _best_match(b, a)),
        ("you computed in float32: with activations near 1e4 that vary by about 1e-2, float32 stores each "
         "value only to about 1e-3, a tenth of that spread. Keep the float64 inputs as they are.",
         _match_in_float32),
    ],
    kind="investigate",
    domain=Domain(
        allows="a (M, n_a), b (M, n_b) float64, M >= 3, n_a, n_b >= 1, no constant column, any offsets and scales, "
               "no two correlations in a row tie; the answer: index (n_a,) int64 and r (n_a,) float64",
        corners=(
            Corner("M = 3", lambda c: c.args[0].shape[0] == 3),
            Corner("n_a = 1", lambda c: c.args[0].shape[1] == 1),
            Corner("n_b = 1", lambda c: c.args[1].shape[1] == 1),
            Corner("n_a > n_b", lambda c: c.args[0].shape[1] > c.args[1].shape[1]),
            Corner("n_a < n_b", lambda c: c.args[0].shape[1] < c.args[1].shape[1]),
            Corner("an anti-correlated decoy with a larger |r| than the best r", lambda c: bool(
                (_corr(*c.args).min(dim=1).values.abs() > _corr(*c.args).max(dim=1).values).any())),
            Corner("an exact affine copy (r = 1)", lambda c: bool((_corr(*c.args) > 1 - 1e-9).any())),
            Corner("activations near 1e4 with a spread of about 1e-2", lambda c: bool(
                c.args[0].mean() > 1e3 and c.args[0].std(dim=0).max() < 1e-1)),
        )),
    returns=tensor_dtype(torch.int64, 0, "index", advice="argmax and topk give int64 indices."),
)


# --------------------------------------------------------------------------------------------
# Exercise 8 (build): ROME's rank-one update
# --------------------------------------------------------------------------------------------


def _rome_update(W: torch.Tensor, C: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor) -> torch.Tensor:
    """``(d_out, d)`` float64: ``Ŵ = W + (v* − Wk*)(C⁻¹k*)ᵀ / ((C⁻¹k*)ᵀk*)``."""
    u = torch.linalg.solve(C, k_star)                        # C⁻¹k*: (d,)
    return W + torch.outer(v_star - W @ k_star, u) / (u @ k_star)


def _rome_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2026)
    cases = []
    # (d_out, d, C's eigenvalues from .. to, what is special)
    for d_out, d, low, high, special in [(5, 6, 0.05, 20.0, None), (3, 1, 2.0, 2.0, None), (1, 4, 0.2, 5.0, None),
                                         (4, 5, 1.0, 1.0, None), (6, 8, 1e-2, 1e3, None), (3, 4, 0.5, 3.0, "tiny k*"),
                                         (3, 4, 0.5, 3.0, "large k*"), (4, 3, 0.1, 4.0, "v* = Wk*")]:
        C = torch.eye(d, dtype=torch.float64) if (low, high) == (1.0, 1.0) else spd(gen, d, low, high)
        W = torch.randn(d_out, d, generator=gen, dtype=torch.float64)
        k_star = (torch.randn(d, generator=gen, dtype=torch.float64) + 0.5) * {"tiny k*": 1e-6,
                                                                              "large k*": 1e4}.get(special, 1.0)
        v_star = W @ k_star if special == "v* = Wk*" else torch.randn(d_out, generator=gen, dtype=torch.float64)
        note = f"W ({d_out}, {d}), C ({d}, {d}), k_star ({d},), v_star ({d_out},), float64"
        cases.append(Case((W, C, k_star, v_star), note=note))
    return cases


def _rome_with(u_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], norm: bool = True):
    def wrong(W, C, k, v):
        u = u_of(C, k)
        return W + torch.outer(v - W @ k, u) / ((u @ k) if norm else 1.0)
    return wrong


check_rome_update = Exercise(
    "Exercise 8 (ROME's update)",
    _rome_update,
    _rome_cases,
    mistakes=[
        ("you used C where C⁻¹ belongs: u = C⁻¹k* = torch.linalg.solve(C, k_star), not C @ k_star.",
         _rome_with(lambda C, k: C @ k)),
        ("you left C out (u = k*): that is the edit without key statistics. Use u = torch.linalg.solve(C, k_star).",
         _rome_with(lambda C, k: k)),
        ("the outer product's row vector is C⁻¹k*, not k*: Ŵ = W + (v* − Wk*)(C⁻¹k*)ᵀ / ((C⁻¹k*)ᵀk*); with k* there "
         "(the denominator alone using C⁻¹k*), Ŵk* = v* still holds but other keys receive the edit as if C were I.",
         lambda W, C, k, v: W + torch.outer(v - W @ k, k) / (torch.linalg.solve(C, k) @ k)),
        ("divide by (C⁻¹k*)ᵀk*: without it Ŵk* misses v*.",
         _rome_with(lambda C, k: torch.linalg.solve(C, k), norm=False)),
        ("the denominator is (C⁻¹k*)ᵀk*, not k*ᵀk*: with it, Ŵk* = v* exactly.",
         lambda W, C, k, v: W + torch.outer(v - W @ k, torch.linalg.solve(C, k)) / (k @ k)),
        ("the column is the residual v* − Wk*, not v*: the edit adds only what W does not yet return.",
         lambda W, C, k, v: W + torch.outer(v, torch.linalg.solve(C, k)) / (torch.linalg.solve(C, k) @ k)),
        ("return Ŵ = W + the rank-one term, not the term alone.",
         lambda W, C, k, v: _rome_update(W, C, k, v) - W),
    ],
    domain=Domain(
        allows="W (d_out, d) float64; C (d, d) float64 symmetric positive definite, eigenvalues from 1e-2 to 1e3; "
               "k_star (d,) float64, not zero, of any size; v_star (d_out,) float64; d, d_out >= 1; the answer "
               "(d_out, d) float64",
        corners=(
            Corner("d = 1", lambda c: c.args[1].shape == (1, 1)),
            Corner("d_out = 1", lambda c: c.args[0].shape[0] == 1),
            Corner("C = I", lambda c: torch.equal(c.args[1], torch.eye(c.args[1].shape[0], dtype=torch.float64))),
            Corner("C ill-conditioned (eigenvalues 1e-2 to 1e3)", lambda c: bool(torch.linalg.cond(c.args[1]) > 1e4)),
            Corner("v* = Wk* (nothing to change)", lambda c: torch.equal(c.args[3], c.args[0] @ c.args[2])),
            Corner("a tiny k* (norm about 1e-6)", lambda c: bool(c.args[2].norm() < 1e-4)),
            Corner("a large k* (norm about 1e4)", lambda c: bool(c.args[2].norm() > 1e3)),
        )),
)


EXERCISES = [check_memory_coefficients, check_top_triggers, check_value_logits, check_agreement_rate, check_edit_spill,
             check_relation_profile, check_best_match, check_rome_update]

__all__ = ["check_memory_coefficients", "check_top_triggers", "check_value_logits", "check_agreement_rate",
           "check_edit_spill", "check_relation_profile", "check_best_match", "check_rome_update", "EXERCISES"]
