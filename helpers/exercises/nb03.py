"""Checkers for notebook 03 (the FFN as a key-value memory).

Each ``check_*`` is an ``helpers.exercises.engine.Exercise``: call it on your function,
``check_memory_coefficients(my_fn)``, and it prints one line (not attempted /
passed / what is wrong and the likely mistake). Hidden cases come from seeded
``torch.Generator`` s, with shapes the notebook never shows.

Layout: PyTorch's ``nn.Linear`` layout, as in ``helpers.ffn.FFN``: ``W1`` is
``(d_ff, d_model)`` (row i = key i) and ``W2`` is ``(d_model, d_ff)`` (column i = value i).

===========================  ===========================================================================
checker                      the learner writes
===========================  ===========================================================================
``check_memory_coefficients`` ``memory_coefficients(x, W1, b1)`` -> ``(B, T, d_ff)``
``check_top_triggers``        ``top_trigger_prefixes(coefficients, valid, neuron, k)`` -> (examples, positions)
``check_value_logits``        ``value_to_vocab(ffn, neuron, ln_f, lm_head)`` -> ``(vocab,)``
``check_agreement_rate``      ``agreement_rate(coefficients, ids, valid, value_logits)`` -> float
``check_rank_one_update``     ``rank_one_update(W, C, k_star, v_star)`` -> ``(d_out, d_in)``
===========================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises.engine import Case, Exercise
from helpers.ffn import FFN


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """One int in [low, high] from ``gen``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def _no_grad(fn: Callable[..., object]) -> Callable[..., object]:
    def wrapped(*args: object) -> object:
        with torch.no_grad():
            return fn(*args)
    return wrapped


# --------------------------------------------------------------------------------------------
# Exercise 1: memory coefficients for a batch
# --------------------------------------------------------------------------------------------


def _memory_coefficients(x: torch.Tensor, W1: torch.Tensor, b1: torch.Tensor) -> torch.Tensor:
    """``(B, T, d_model) -> (B, T, d_ff)``: ``m = GELU(x W1ᵀ + b1)``, key i = row i of W1."""
    return F.gelu(x @ W1.T + b1)


def _coefficient_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2021)
    cases = []
    for k in range(4):
        B, T = _randint(gen, 1, 3), _randint(gen, 2, 6)
        d = _randint(gen, 3, 9)
        d_ff = d if k == 0 else _randint(gen, 10, 24)   # first case square: a transposed W1 still runs
        x = torch.randn(B, T, d, generator=gen)
        W1 = torch.randn(d_ff, d, generator=gen)
        b1 = torch.randn(d_ff, generator=gen)
        note = f"x {tuple(x.shape)}, W1 {tuple(W1.shape)}, b1 {tuple(b1.shape)}"
        cases.append(Case((x, W1, b1), note=note))
    return cases


check_memory_coefficients = Exercise(
    "Exercise 1 (memory coefficients)",
    _memory_coefficients,
    _coefficient_cases,
    mistakes=[
        ("you used the columns of W1 as keys (x @ W1); in nn.Linear's layout the keys are the rows of W1 "
         "(shape (d_ff, d_model)), so the match scores are x @ W1.T.",
         lambda x, W1, b1: F.gelu(x @ W1 + b1)),
        ("you forgot the activation: these are the pre-activations k_i·x + b1_i; the memory coefficient is "
         "GELU of that.",
         lambda x, W1, b1: x @ W1.T + b1),
        ("b1 is missing: m = GELU(x @ W1.T + b1).",
         lambda x, W1, b1: F.gelu(x @ W1.T)),
        ("you used ReLU; the course's model uses the exact GELU (torch.nn.functional.gelu).",
         lambda x, W1, b1: torch.relu(x @ W1.T + b1)),
        ("you used GELU's tanh approximation; the exercise asks for the exact GELU (F.gelu without "
         "approximate='tanh').",
         lambda x, W1, b1: F.gelu(x @ W1.T + b1, approximate="tanh")),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 2: top-k trigger prefixes of one neuron
# --------------------------------------------------------------------------------------------


def _top_triggers(coefficients: torch.Tensor, valid: torch.Tensor, neuron: int,
                  k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, T, d_ff)``, ``(N, T)`` bool -> examples ``(k,)``, positions ``(k,)``, best first."""
    c = coefficients[:, :, neuron].masked_fill(~valid, float("-inf"))
    best, position = c.max(dim=1)
    examples = best.topk(k).indices
    return examples, position[examples]


def _valid_mask(gen: torch.Generator, N: int, T: int) -> torch.Tensor:
    """Rows of different real lengths (3..T); a prefix needs a next token, so the last real position is out."""
    lengths = torch.randint(3, T + 1, (N,), generator=gen)
    return torch.arange(T).unsqueeze(0) < (lengths - 1).unsqueeze(1)


def _trigger_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2022)
    cases = []
    for _ in range(4):
        N, T, d_ff = _randint(gen, 8, 20), _randint(gen, 5, 8), _randint(gen, 4, 12)
        coefficients = torch.randn(N, T, d_ff, generator=gen)
        coefficients[:, -1] += 3.0     # the last position (never a valid prefix end) fires strongly
        valid = _valid_mask(gen, N, T)
        neuron, k = _randint(gen, 0, d_ff - 1), _randint(gen, 3, 6)
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


def _triggers_many_per_example(c, valid, neuron, k):
    flat = c[:, :, neuron].masked_fill(~valid, float("-inf")).reshape(-1)
    index = flat.topk(k).indices
    return index // c.shape[1], index % c.shape[1]


def _triggers_off_by_one(c, valid, neuron, k):
    examples, positions = _top_triggers(c, valid, neuron, k)
    return examples, positions + 1


check_top_triggers = Exercise(
    "Exercise 2 (top-k trigger prefixes)",
    _top_triggers,
    _trigger_cases,
    mistakes=[
        ("you took the smallest coefficients (argmin / largest=False); trigger prefixes are where the neuron "
         "fires MOST.", _triggers_argmin),
        ("you ignored `valid`: positions that are padding or have no next token must not count (mask them with "
         "-inf before taking the max).", _triggers_no_mask),
        ("one example appears several times: take the best position of each example first (max over T), then "
         "the top k examples.", _triggers_many_per_example),
        ("off by one: return the position t where the prefix ends (the prefix is ids[n, :t+1]), not its "
         "length t+1.", _triggers_off_by_one),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 3: a value vector read in the vocabulary
# --------------------------------------------------------------------------------------------


def _value_to_vocab(ffn: FFN, neuron: int, ln_f: nn.LayerNorm, lm_head: nn.Linear) -> torch.Tensor:
    """``(vocab,)`` logits: ``lm_head(ln_f(W2[:, neuron]))``."""
    with torch.no_grad():
        return lm_head(ln_f(ffn.w2.weight[:, neuron]))


def _value_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2023)
    cases = []
    for k in range(4):
        d = _randint(gen, 4, 10)
        d_ff = d if k == 0 else _randint(gen, 12, 30)   # first case square: a row of W2 still fits
        vocab = _randint(gen, 15, 40)
        with torch.random.fork_rng(devices=[]):       # module init draws from the global generator
            torch.manual_seed(3000 + k)
            ffn, ln_f, lm_head = FFN(d, d_ff).eval(), nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        with torch.no_grad():                          # a trained-looking final norm: scale and shift not 1 and 0
            ln_f.weight.copy_(1 + 0.5 * torch.randn(d, generator=gen))
            ln_f.bias.copy_(0.5 * torch.randn(d, generator=gen))
        neuron = _randint(gen, 0, d_ff - 1)
        note = f"FFN(d_model={d}, d_ff={d_ff}), neuron={neuron}, LayerNorm({d}), lm_head {d}->{vocab}"
        cases.append(Case((ffn, neuron, ln_f, lm_head), note=note))
    return cases


check_value_logits = Exercise(
    "Exercise 3 (value to vocabulary)",
    _value_to_vocab,
    _value_cases,
    mistakes=[
        ("you forgot ln_f: the model always normalises the residual stream before the unembedding, so read "
         "the value as lm_head(ln_f(v)).",
         _no_grad(lambda f, i, ln, head: head(f.w2.weight[:, i]))),
        ("you used the key (row i of w1.weight); the value is column i of w2.weight, w2.weight[:, i].",
         _no_grad(lambda f, i, ln, head: head(ln(f.w1.weight[i])))),
        ("you took row i of w2.weight; w2.weight is (d_model, d_ff), so value i is its column, w2.weight[:, i].",
         _no_grad(lambda f, i, ln, head: head(ln(f.w2.weight[i])))),
        ("you returned probabilities (softmax); return the logits, lm_head(ln_f(v)).",
         _no_grad(lambda f, i, ln, head: head(ln(f.w2.weight[:, i])).softmax(-1))),
        ("you normalised without ln_f's learned scale and shift: call ln_f(v) itself.",
         _no_grad(lambda f, i, ln, head: head(F.layer_norm(f.w2.weight[:, i], ln.normalized_shape)))),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 4: agreement rate
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
    for _ in range(4):
        N, T, d_ff, vocab = _randint(gen, 10, 25), _randint(gen, 5, 8), _randint(gen, 12, 30), _randint(gen, 20, 40)
        ids = torch.randint(1, vocab, (N, T), generator=gen)
        valid = _valid_mask(gen, N, T)
        coefficients = torch.randn(N, T, d_ff, generator=gen)
        coefficients[:, -1] += 3.0
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
        logits[agree, nxt[agree]] = top
        logits[off_by_one, last[off_by_one]] = top
        logits[lowest, nxt[lowest]] = bottom
        note = f"coefficients {tuple(coefficients.shape)}, ids {tuple(ids.shape)}, value_logits {tuple(logits.shape)}"
        cases.append(Case((coefficients, ids, valid, logits), note=note))
    return cases


def _agreement_last_token(c, ids, valid, logits):
    cm = c.masked_fill(~valid.unsqueeze(-1), float("-inf"))
    best, position = cm.max(dim=1)
    example = best.argmax(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    return (logits.argmax(dim=1) == ids[example, t]).float().mean().item()


def _agreement_value_argmin(c, ids, valid, logits):
    cm = c.masked_fill(~valid.unsqueeze(-1), float("-inf"))
    best, position = cm.max(dim=1)
    example = best.argmax(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    return (logits.argmin(dim=1) == ids[example, t + 1]).float().mean().item()


def _agreement_count(c, ids, valid, logits):
    return _agreement_rate(c, ids, valid, logits) * c.shape[2]


def _agreement_weakest_trigger(c, ids, valid, logits):
    cm = c.masked_fill(~valid.unsqueeze(-1), float("inf"))
    worst, position = cm.min(dim=1)
    example = worst.argmin(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    return (logits.argmax(dim=1) == ids[example, t + 1]).float().mean().item()


check_agreement_rate = Exercise(
    "Exercise 4 (agreement rate)",
    _agreement_rate,
    _agreement_cases,
    mistakes=[
        ("off by one: you compared with the last token OF the trigger prefix, ids[n, t]; agreement is about the "
         "token that comes NEXT, ids[n, t + 1].", _agreement_last_token),
        ("you took the value's argmin; a value's prediction is its top (argmax) token.", _agreement_value_argmin),
        ("you returned the number of agreeing neurons; the rate is that number divided by d_ff.", _agreement_count),
        ("you took the weakest trigger (argmin over the coefficients); the top trigger is where the neuron fires "
         "most.", _agreement_weakest_trigger),
    ],
)

# --------------------------------------------------------------------------------------------
# Exercise 5: the rank-one update
# --------------------------------------------------------------------------------------------


def _rank_one(W: torch.Tensor, C: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor) -> torch.Tensor:
    """``Ŵ = W + Λ (C⁻¹k*)ᵀ``, ``Λ = (v* − W k*) / ((C⁻¹k*)ᵀ k*)``; ``(d_out, d_in)``."""
    u = torch.linalg.solve(C, k_star)
    return W + torch.outer((v_star - W @ k_star) / (u @ k_star), u)


def _rank_one_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(2025)
    cases = []
    for _ in range(4):
        d_out, d_in = _randint(gen, 3, 8), _randint(gen, 9, 20)
        W = torch.randn(d_out, d_in, generator=gen, dtype=torch.float64)
        keys = torch.randn(4 * d_in, d_in, generator=gen, dtype=torch.float64) + 0.5
        C = keys.T @ keys / keys.shape[0] + 0.1 * torch.eye(d_in, dtype=torch.float64)
        k_star = torch.randn(d_in, generator=gen, dtype=torch.float64) + 0.5
        v_star = torch.randn(d_out, generator=gen, dtype=torch.float64)
        note = f"W {tuple(W.shape)}, C {tuple(C.shape)}, k_star ({d_in},), v_star ({d_out},)"
        cases.append(Case((W, C, k_star, v_star), note=note))
    return cases


check_rank_one_update = Exercise(
    "Exercise 5 (rank-one update)",
    _rank_one,
    _rank_one_cases,
    mistakes=[
        ("you forgot C⁻¹: the update direction is u = C⁻¹k* (torch.linalg.solve(C, k_star)), not k* itself.",
         lambda W, C, k, v: W + torch.outer((v - W @ k) / (k @ k), k)),
        ("you used v* where the residual v* − W k* belongs: the update must add only what W k* lacks.",
         lambda W, C, k, v: W + torch.outer(v / (torch.linalg.solve(C, k) @ k), torch.linalg.solve(C, k))),
        ("you multiplied by C instead of solving with it: u = C⁻¹k*, i.e. torch.linalg.solve(C, k_star).",
         lambda W, C, k, v: W + torch.outer((v - W @ k) / ((C @ k) @ k), C @ k)),
        ("the denominator should be (C⁻¹k*)ᵀk*, so that Ŵk* = v* exactly; you divided by k*ᵀk*.",
         lambda W, C, k, v: W + torch.outer((v - W @ k) / (k @ k), torch.linalg.solve(C, k))),
        ("you returned only the update Λ(C⁻¹k*)ᵀ; return the edited matrix W + Λ(C⁻¹k*)ᵀ.",
         lambda W, C, k, v: _rank_one(W, C, k, v) - W),
    ],
    atol=1e-8, rtol=1e-6,
)

__all__ = ["check_memory_coefficients", "check_top_triggers", "check_value_logits", "check_agreement_rate",
           "check_rank_one_update"]
