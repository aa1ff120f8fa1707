"""Checkers for the exercises of notebook 05 (mixture of experts).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function,
e.g. ``check_moe_forward(moe_forward)``, and it prints one line (not attempted /
passed / what is wrong, with the likely mistake when one explains the answer).
The hidden cases come from seeded generators and cover the extremes each statement allows:
k = 1 and k = E, an expert nobody chooses, the last expert, a batch of one token, ties that
the statement's rule settles (identical experts, or ties inside the kept set), router logits
that span hundreds, logits that overflow ``exp`` in float32 and float64, capacities that are
whole numbers and capacities that round up, a capacity factor so small that every expert
takes one slot and one so large that nothing is dropped.

Dtypes, as the statements say: float tensors are float32 (a float64 answer with the right values is
told the statement asks for float32; values are compared to about 1e-5 relative), indices are int64, masks are bool, and
capacity factors are exact in binary (0.25, 0.5, 0.75, 1.25, ...), so ``math.ceil`` of the
product is exact.

===============================  ===========  ==================================================================  =====================
checker                          kind         your function                                                       returns
===============================  ===========  ==================================================================  =====================
``check_moe_forward``            build        ``moe_forward(x, w_router, w1, w3, w2, k)``                         ``(N, d)`` float32
``check_capacity_keep``          build        ``capacity_keep(expert_index, n_experts, capacity_factor)``         ``(N, k)`` bool
``check_balance_loss``           build        ``balance_loss(probs, expert_index)``                               0-dim float32 tensor
``check_z_loss``                 build        ``z_loss_grad(logits)``                                             ``(N, E)`` float32
``check_noisy_top_k``            investigate  ``noisy_top_k_gates(x, w_gate, w_noise, noise, k)``                 ``(N, E)`` float32
``check_later_tokens``           investigate  ``changed_by_later_tokens(expert_index, n_experts, capacity_factor)``  ``(N,)`` bool
``check_aux_loss``               investigate  ``aux_loss(logits, expert_index, alpha, z_coef)``                    0-dim float32 tensor
===============================  ===========  ==================================================================  =====================

Weight layout, as everywhere in the course (PyTorch ``nn.Linear``): an expert's ``W1`` and ``W3`` are
``(d_ff, d)``, ``W2`` is ``(d, d_ff)``, stacked over experts as ``w1``, ``w3`` ``(E, d_ff, d)`` and ``w2``
``(E, d, d_ff)``; the router (and the noise projection of noisy gating) is ``(E, d)``; a batch of row
vectors ``X`` ``(N, d)`` gives logits ``X W_rᵀ`` ``(N, E)``; ``expert_index`` is ``(N, k)``, best choice first.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from helpers.exercises.compare import compare
from helpers.exercises.engine import FAILED, HINT_PREFIX, Case, Corner, Domain, Exercise
from helpers.exercises.returns import tensor_dtype


class _AfterPassExercise(Exercise):
    """One more check once every hidden value passes: ``after(fn)`` returns what is still wrong, or ``None``
    (a mask of the wrong dtype, a loss that carries no gradient)."""

    def __init__(self, *args, after, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.after = after

    def evaluate(self, fn):  # type: ignore[override]
        result = super().evaluate(fn)
        if not result.passed:
            return result
        problem = self.after(fn)
        return result if problem is None else self._result(FAILED, problem, "wrong")


class _BalanceExercise(_AfterPassExercise):
    """A failure by an exception gets the hint of a listed mistake that raises the same exception on exactly
    the cases the learner's function raises on and agrees with it elsewhere (the engine names a mistake only
    from a wrong value; bincount without minlength gives none: its counts are too short, and it raises)."""

    def evaluate(self, fn):  # type: ignore[override]
        result = super().evaluate(fn)
        if result.passed or result.hint or result.reason != "error":
            return result
        hint = self._raising_mistake(fn)
        return result if hint is None else self._result(FAILED, f"{result.message} {HINT_PREFIX}{hint}", "error",
                                                         hint)

    def _raising_mistake(self, fn) -> str | None:
        cases = self.cases()
        learner = [_outcome(fn, c) for c in cases]
        for hint, model in self.mistakes:
            modelled = [_outcome(model, c) for c in cases]
            if any(isinstance(m, Exception) for m in modelled) and all(_same(g, m) for g, m in zip(learner, modelled)):
                return hint
        return None


def _outcome(fn, case: Case):
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    try:
        return fn(*args)
    except Exception as err:  # the learner's exception is the outcome compared
        return err


def _same(got, modelled) -> bool:
    if isinstance(got, Exception) or isinstance(modelled, Exception):
        return type(got) is type(modelled)
    try:
        return compare(got, modelled) is None
    except Exception:
        return False


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _skewed_choices(g: torch.Generator, n: int, n_experts: int, k: int, *, unused: int | None = None) -> torch.Tensor:
    """``(N, k)`` distinct expert ids per row, drawn with uneven popularity (some experts overflow);
    expert ``unused`` is never drawn."""
    popularity = torch.rand(n_experts, generator=g) ** 3 + 0.02
    if unused is not None:
        popularity[unused] = 0.0
    return torch.stack([torch.multinomial(popularity, k, replacement=False, generator=g) for _ in range(n)])


def _permutations(g: torch.Generator, n: int, n_experts: int) -> torch.Tensor:
    """``(N, E)``: k = E, every row a permutation of the experts."""
    return torch.stack([torch.randperm(n_experts, generator=g) for _ in range(n)])


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


def _naive_softmax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(logits)
    return e / e.sum(dim, keepdim=True)


def _route(x, w_router, k, *, renormalise_k1=False, renormalise=True, dim=-1, softmax=torch.softmax):
    probs = softmax(x @ w_router.T, dim=dim)
    weight, index = torch.topk(probs, k, dim=-1)
    if renormalise and (k >= 2 or renormalise_k1):
        weight = weight / weight.sum(-1, keepdim=True)
    return weight, index


def _moe_forward(x: torch.Tensor, w_router: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
                 k: int) -> torch.Tensor:
    weight, index = _route(x, w_router, k)
    return _combine(x, w1, w3, w2, weight, index)


def _moe_case(g, n, d, n_experts, d_ff, k, *, starve=None, favour=None, duplicate=None, logit_scale=None, note):
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
    if logit_scale is not None:                             # router logits span hundreds: the softmax saturates
        w_router = w_router * logit_scale
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
        _moe_case(g, 1, 8, 4, 12, 4, note="a batch of one token, 4 experts, k=4"),
        _moe_case(g, 8, 6, 4, 10, 2, duplicate=(1, 2),
                  note="8 tokens, 4 experts, k=2, experts 1 and 2 identical (their logits tie)"),
        _moe_case(g, 8, 6, 4, 10, 1, duplicate=(0, 3),
                  note="8 tokens, 4 experts, k=1, experts 0 and 3 identical (their logits tie)"),
        _moe_case(g, 10, 8, 5, 12, 2, logit_scale=150.0,
                  note="10 tokens, 5 experts, k=2, router logits in the hundreds (exp overflows)"),
        _moe_case(g, 33, 8, 8, 12, 3, note="33 tokens, 8 experts, k=3"),
    ]


def _moe_logits(c: Case) -> torch.Tensor:
    return c.args[0].double() @ c.args[1].double().T


def _experts_chosen(c: Case) -> torch.Tensor:
    return torch.bincount(_moe_logits(c).topk(c.args[5], dim=-1).indices.reshape(-1), minlength=c.args[1].shape[0])


def _identical_pair(c: Case) -> bool:
    w_router, w1, w3, w2 = c.args[1:5]
    e = w_router.shape[0]
    return any(all(torch.equal(w[a], w[b]) for w in (w_router, w1, w3, w2)) for a in range(e) for b in range(a + 1, e))


def _tie_at_kth(c: Case) -> bool:
    logits, k = _moe_logits(c), c.args[5]
    if k >= logits.shape[1]:
        return False
    top = logits.topk(k + 1, dim=-1).values
    return bool((top[:, k - 1] == top[:, k]).any())


# ---------------------------------------------------------------- exercises 1 and 3: written without helpers.moe
def _helpers_moe_calls(fn, args: tuple) -> list[str]:
    """Names of the ``helpers.moe`` functions and methods that run while ``fn(*args)`` runs (under any name the
    learner gave them, through the module or through an ``MoE`` object): a profiler records every Python frame whose
    code lives in ``helpers/moe.py``."""
    import helpers.moe as moe

    here, seen = moe.__file__, []

    def watch(frame, event, arg):
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if event == "call" and frame.f_code.co_filename == here and "<" not in name and name not in seen:
            seen.append(name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        fn(*args)
    except Exception:
        pass
    finally:
        sys.setprofile(previous)
    return seen


def _uses_helpers_moe(args_of, what: str):
    """An ``after`` check: the statement asks for ``what`` written from raw tensors, so an answer that runs
    ``helpers.moe`` (``MoE``, ``moe_forward_loop``, ``load_balancing_loss``, ...) fails, whatever its values."""
    def after(fn) -> str | None:
        calls = _helpers_moe_calls(fn, args_of())
        if not calls:
            return None
        return (f"right values, but through helpers.moe ({', '.join(calls[:3])}): the exercise asks you to write "
                f"{what} yourself from the input tensors, without the course's module.")
    return after


def _first_moe_case() -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in _moe_cases()[0].args)


def _balance_args() -> tuple:
    probs = torch.softmax(torch.randn(12, 4, generator=_generator(514)), -1)
    return probs, probs.topk(2, dim=-1).indices


MOE_DOMAIN = Domain(
    allows="float32 x (N, d), w_router (E, d), w1 and w3 (E, d_ff, d), w2 (E, d, d_ff) with N, d, d_ff >= 1 and "
           "E >= 1; an int 1 <= k <= E; any finite values, router logits up to the hundreds; ties between router "
           "logits only for identical experts (any tie-break is right); float32 (N, d) out, no capacity limit",
    corners=(
        Corner("k = 1 (the weight stays p)", lambda c: c.args[5] == 1),
        Corner("k = E (every expert)", lambda c: c.args[5] == c.args[1].shape[0]),
        Corner("1 < k < E (renormalised over a subset)", lambda c: 1 < c.args[5] < c.args[1].shape[0]),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
        Corner("an expert no token chooses", lambda c: bool((_experts_chosen(c) == 0).any())),
        Corner("the last expert chosen", lambda c: bool(_experts_chosen(c)[-1] > 0)),
        Corner("router logits above 88 (an unshifted exp overflows float32)",
               lambda c: bool(_moe_logits(c).abs().max() > 88)),
        Corner("identical experts tie, k = 1", lambda c: c.args[5] == 1 and _identical_pair(c)),
        Corner("identical experts tie, k >= 2", lambda c: c.args[5] >= 2 and _identical_pair(c)),
        Corner("a tie at the k-th place (between identical experts)", _tie_at_kth),
    ))


check_moe_forward = _AfterPassExercise(
    "Exercise 1 (the MoE forward)",
    _moe_forward,
    _moe_cases,
    [
        ("with k = 1 the weight stays the router probability p_j (Switch); you renormalised it to 1, which "
         "also cuts the router off from the gradient. Renormalise only when k >= 2.",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, *_route(x, wr, k, renormalise_k1=True))),
        ("with k >= 2 the k chosen probabilities must be renormalised to sum to 1 (divide by their sum).",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, *_route(x, wr, k, renormalise=False))),
        ("each expert's output must be multiplied by its combine weight before the sum.",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, torch.ones(x.shape[0], k), _route(x, wr, k)[1])),
        ("the gate is on W1: FFN(x) = W2 (silu(W1 x) ⊙ W3 x); you put the SiLU on W3 x.",
         lambda x, wr, w1, w3, w2, k: _combine(x, w3, w1, w2, *_route(x, wr, k))),
        ("the softmax ran over the tokens (dim=0); each token needs a distribution over the experts (dim=-1).",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, *_route(x, wr, k, dim=0))),
        ("the last expert never runs (a loop over range(E - 1)?): tokens routed to it get nothing from it.",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, *_route(x, wr, k), skip_last=True)),
        ("a softmax written as exp(l) / sum(exp(l)) overflows when router logits reach the hundreds (inf / inf = "
         "NaN); use torch.softmax, which subtracts each row's maximum first.",
         lambda x, wr, w1, w3, w2, k: _combine(x, w1, w3, w2, *_route(x, wr, k, softmax=_naive_softmax))),
    ],
    kind="build",
    after=_uses_helpers_moe(_first_moe_case, "the routing, the experts and the combine"),
    domain=MOE_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep x's dtype (float32)."),
)


# ---------------------------------------------------------------- exercise 2: capacity with GShard's priority
def _capacity(capacity_factor: float, n: int, k: int, n_experts: int) -> int:
    return math.ceil(capacity_factor * n * k / n_experts)


def _keep(expert_index, n_experts, capacity, *, token_major=False, reverse=False, inclusive=False,
          per_column=False):
    n, k = expert_index.shape
    if per_column:          # each choice column its own queue: every expert takes `capacity` slots per column
        return torch.cat([_keep(expert_index[:, j:j + 1], n_experts, capacity) for j in range(k)], dim=1)
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
    # capacity factors exact in binary; (12, 4, 1, 1.0) and (16, 4, 1, 1.25) make c·N·k/E a whole number
    # (3 and 5: no rounding), the others round up
    for n, e, k, factor in [(10, 4, 1, 1.0), (12, 4, 1, 1.0), (16, 4, 1, 1.25), (20, 4, 2, 1.25), (30, 4, 1, 0.5),
                            (17, 5, 2, 1.5), (25, 8, 3, 2.0), (13, 3, 2, 0.75), (14, 6, 2, 0.5)]:
        cases.append(Case((_skewed_choices(g, n, e, k), e, factor),
                          note=f"{n} tokens, k={k}, {e} experts, capacity_factor={factor}"))
    cases.append(Case((_skewed_choices(g, 15, 5, 2, unused=1), 5, 1.0),
                      note="15 tokens, k=2, 5 experts, expert 1 chosen by nobody"))
    cases.append(Case((_permutations(g, 9, 3), 3, 0.75), note="9 tokens, k = E = 3, capacity_factor=0.75"))
    cases.append(Case((_skewed_choices(g, 12, 4, 2), 4, 0.25), note="12 tokens, k=2, 4 experts, "
                      "capacity_factor=0.25 (every expert takes 2 slots)"))
    cases.append(Case((_skewed_choices(g, 11, 4, 1), 4, 0.25), note="11 tokens, k=1, 4 experts, "
                      "capacity_factor=0.25 (C = 1)"))
    cases.append(Case((_skewed_choices(g, 10, 4, 2), 4, 4.0), note="10 tokens, k=2, 4 experts, "
                      "capacity_factor=4.0 (nothing dropped)"))
    last = torch.stack([torch.tensor([4, int(i) % 4]) for i in range(9)])        # every first choice: the last expert
    cases.append(Case((last, 5, 1.0), note="9 tokens, k=2, 5 experts, the last expert everyone's first choice"))
    cases.append(Case((torch.tensor([[2, 0]]), 3, 0.5), note="a batch of one token, k=2, 3 experts"))
    return cases


def _holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:          # an empty closure cell
        return False


def _uses_arrival_rank(fn) -> str | None:
    """The statement asks for the rule written out: an answer that calls ``helpers.moe.arrival_rank`` (under any
    name in the notebook, or through the module) fails, whatever its values."""
    import helpers.moe as moe

    original, calls = moe.arrival_rank, []

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    scope = getattr(fn, "__globals__", {})
    names = [name for name, value in list(scope.items()) if value is original]
    cells = [c for c in (getattr(fn, "__closure__", None) or ()) if _holds(c, original)]
    try:
        moe.arrival_rank = spy
        for name in names:
            scope[name] = spy
        for c in cells:
            c.cell_contents = spy
        fn(torch.tensor([[0, 1], [1, 0], [0, 1]]), 2, 1.0)
    except Exception:
        pass
    finally:
        moe.arrival_rank = original
        for name in names:
            scope[name] = original
        for c in cells:
            c.cell_contents = original
    if calls:
        return ("right values, but through `arrival_rank`: the exercise asks you to write the serving rule "
                "yourself (count each expert's slots, first choices in token order, then second choices, ...).")
    return None


def _cap_of(c: Case) -> int:
    idx, e, f = c.args
    return _capacity(f, idx.shape[0], idx.shape[1], e)


def _loads(c: Case) -> torch.Tensor:
    return torch.bincount(c.args[0].reshape(-1), minlength=c.args[1])


CAPACITY_DOMAIN = Domain(
    allows="int64 expert_index (N, k) with N >= 1 and 1 <= k <= n_experts, best choice first, the k entries of a "
           "row distinct, values in [0, n_experts); an int n_experts >= 1; a float 0.25 <= capacity_factor <= 4, "
           "exact in binary; bool (N, k) out",
    corners=(
        Corner("k = 1", lambda c: c.args[0].shape[1] == 1),
        Corner("k = E (every expert in every row)", lambda c: c.args[0].shape[1] == c.args[1]),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
        Corner("an expert no token chooses", lambda c: bool((_loads(c) == 0).any())),
        Corner("the last expert everyone's first choice", lambda c: bool((c.args[0][:, 0] == c.args[1] - 1).all())),
        Corner("capacity_factor = 0.25 (the smallest)", lambda c: c.args[2] == 0.25),
        Corner("capacity_factor = 4 (the largest)", lambda c: c.args[2] == 4.0),
        Corner("capacity C = 1", lambda c: _cap_of(c) == 1),
        Corner("c·N·k/E a whole number (no rounding)",
               lambda c: (c.args[2] * c.args[0].numel() / c.args[1]).is_integer()),
        Corner("c·N·k/E rounded up", lambda c: not (c.args[2] * c.args[0].numel() / c.args[1]).is_integer()),
        Corner("nothing dropped", lambda c: bool(_loads(c).max() <= _cap_of(c))),
        Corner("a later first choice takes a slot an earlier second choice wanted (the priority matters)",
               lambda c: not torch.equal(_keep(c.args[0], c.args[1], _cap_of(c)),
                                         _keep(c.args[0], c.args[1], _cap_of(c), token_major=True))),
        Corner("an expert's load exactly at its capacity",
               lambda c: bool((_loads(c) == _cap_of(c)).any())),
    ))


check_capacity_keep = _AfterPassExercise(
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
        ("each choice column had its own queue; an expert has one queue and one capacity for all its slots, "
         "first choices served first, then second choices into what is left.",
         lambda idx, e, f: _keep(idx, e, _capacity(f, *idx.shape, e), per_column=True)),
        ("each choice column had its own queue with ceil(capacity_factor · N / E) places; an expert has one queue "
         "of ceil(capacity_factor · N · k / E) for all its slots, first choices served first.",
         lambda idx, e, f: _keep(idx, e, _capacity(f, idx.shape[0], 1, e), per_column=True)),
    ],
    kind="build",
    returns=tensor_dtype(torch.bool, name="the mask",
                         advice="A comparison such as `rank < capacity` gives one, or call `.bool()`."),
    domain=CAPACITY_DOMAIN,
    after=_uses_arrival_rank,
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
    probs = torch.softmax(torch.randn(12, 6, generator=g), -1)
    probs[:, 3] = 1e-4                                        # an expert nobody picks (its P is tiny, not zero)
    probs = probs / probs.sum(-1, keepdim=True)
    cases.append(Case((probs, probs.topk(2, dim=-1).indices), note="probs (12, 6), expert 3 chosen by nobody"))
    probs = torch.softmax(200 * torch.randn(10, 4, generator=g), -1)      # logits in the hundreds: p ≈ 0 or 1
    cases.append(Case((probs, probs.topk(1, dim=-1).indices), note="probs (10, 4) from logits in the hundreds "
                      "(most entries 0 or 1), k=1"))
    probs = torch.softmax(torch.randn(7, 4, generator=g), -1)
    cases.append(Case((probs, probs.topk(4, dim=-1).indices), note="probs (7, 4), k = E = 4"))
    probs = torch.softmax(torch.randn(1, 4, generator=g), -1)
    cases.append(Case((probs, probs.topk(2, dim=-1).indices), note="a batch of one token, 4 experts, k=2"))
    probs = torch.softmax(2 * torch.randn(8, 4, generator=g), -1)
    even = torch.stack([torch.arange(8) % 4, (torch.arange(8) + 1) % 4], dim=1)
    cases.append(Case((probs, even), note="probs (8, 4), k=2, every expert routed 4 slots (an even load: the loss is 1)"))
    probs = torch.tensor([[0.51, 0.49], [0.51, 0.49], [0.51, 0.49], [0.01, 0.99]])
    cases.append(Case((probs, probs.argmax(-1, keepdim=True)), note="section 5's example: three of four tokens on "
                      "expert 0, whose mean probability is the lower (the loss is below 1)"))
    probs = torch.softmax(torch.randn(10, 5, generator=g), -1)
    probs[:, 4] = 1e-3                                        # the last expert gets no slot (its P is not zero)
    probs = probs / probs.sum(-1, keepdim=True)
    cases.append(Case((probs, probs.topk(2, dim=-1).indices), note="probs (10, 5), k=2, the last expert (4) gets "
                      "no slot"))
    probs = torch.softmax(torch.randn(9, 6, generator=g), -1)
    probs[:, 2] = 1e-3                                        # a middle expert and the last one get no slot
    probs[:, 5] = 2e-3
    probs = probs / probs.sum(-1, keepdim=True)
    cases.append(Case((probs, probs.topk(1, dim=-1).indices), note="probs (9, 6), k=1, experts 2 and 5 (the last) "
                      "get no slot"))
    return cases


def _counts_up_to_the_largest_index(probs, expert_index):
    """bincount without minlength: the counts stop at the largest expert id chosen (shorter than E when the
    last experts get no slot)."""
    f = torch.bincount(expert_index.reshape(-1)).to(probs.dtype) / expert_index.numel()
    return probs.shape[-1] * (f * probs.mean(0)).sum()


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


def _balance_gradient(fn) -> str | None:
    """The loss must train the router: d loss / d probs[n, i] = E · f_i / N, through P only."""
    probs = torch.softmax(torch.randn(12, 4, generator=_generator(513)), -1)
    index = probs.topk(2, dim=-1).indices
    leaf = probs.clone().requires_grad_(True)
    loss = fn(leaf, index.clone())
    where = "on probs (12, 4) with each token's top-2 experts"
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        return (f"the value is right, but it carries no gradient back to probs ({where}): compute P_i = "
                f"probs[:, i].mean() with tensor operations (no .item(), .detach() or NumPy), so that the loss "
                f"trains the router.")
    (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    expected = (4 * _slot_counts(probs, index) / index.numel() / 12).expand(12, 4)
    if grad is None or not torch.allclose(grad.double(), expected.double(), rtol=1e-4, atol=1e-7):
        got = "none" if grad is None else "[" + ", ".join(f"{v:.4f}" for v in grad[0].tolist()) + "]"
        return (f"the value is right, but its gradient with respect to probs is wrong ({where}): token 0 gets "
                f"{got}, expected E·f_i/N = [" + ", ".join(f"{v:.4f}" for v in expected[0].tolist()) + "]. "
                f"f is a count of the routing decisions (a constant); the gradient flows through P only.")
    return None


BALANCE_DOMAIN = Domain(
    allows="float32 probs (N, E) with N >= 1, E >= 1, entries in [0, 1], rows summing to 1 (saturated rows of "
           "0s and a 1 allowed); int64 expert_index (N, k), 1 <= k <= E, the k entries of a row distinct; a 0-dim "
           "float32 tensor out whose gradient flows through P",
    corners=(
        Corner("k = 1", lambda c: c.args[1].shape[1] == 1),
        Corner("k = E", lambda c: c.args[1].shape[1] == c.args[0].shape[1]),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
        Corner("an expert no slot goes to", lambda c: bool((torch.bincount(c.args[1].reshape(-1),
                                                                           minlength=c.args[0].shape[1]) == 0).any())),
        Corner("saturated probabilities (rows of 0s and a 1)", lambda c: bool((c.args[0] > 1 - 1e-6).any())),
        Corner("an even load (the value 1 whatever P)", lambda c: len(set(torch.bincount(
            c.args[1].reshape(-1), minlength=c.args[0].shape[1]).tolist())) == 1 and c.args[0].shape[0] > 1),
        Corner("f and P anti-correlated (a value below 1)", lambda c: float(_balance_loss(*c.args)) < 1 - 1e-6),
        Corner("the last expert chosen by every token", lambda c: bool((c.args[1] == c.args[0].shape[1] - 1)
                                                                        .any(-1).all())),
        Corner("the last expert gets no slot (counts by expert id stop short of E)",
               lambda c: int(c.args[1].max()) < c.args[0].shape[1] - 1),
        Corner("a middle expert gets no slot", lambda c: bool((torch.bincount(
            c.args[1].reshape(-1), minlength=c.args[0].shape[1])[1:-1] == 0).any())),
    ))


check_balance_loss = _BalanceExercise(
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
        ("you counted only each token's first choice (expert_index[:, 0]); f_i counts all N · k routed slots, "
         "every column of expert_index.", lambda probs, idx: _balance_loss(probs, idx[:, :1])),
        ("P_i averaged only over the slots routed to expert i; average expert i's probability over all N "
         "tokens.", _p_over_routed_slots_only),
        ("P_i kept only the chosen probabilities (the others zeroed before the mean); P_i is the mean of expert "
         "i's probability over all N tokens, chosen or not: it is what pushes probability away from busy experts.",
         lambda probs, idx: probs.shape[-1] * (_slot_counts(probs, idx) / idx.numel()
                                              * (probs * torch.zeros_like(probs).scatter(1, idx, 1.0)).mean(0)).sum()),
        ("the counts of slots per expert stop at the largest expert id that was chosen, so they are shorter than "
         "E when the last experts get no slot: count over all E experts (torch.bincount(..., minlength=E), or "
         "one_hot with num_classes=E).", _counts_up_to_the_largest_index),
        ("the value is right, but return the 0-dim tensor itself: a Python float (float() or .item()) has no "
         "gradient, and a shape-(1,) tensor is not the 0-dim scalar a loss is.",
         lambda probs, idx: float(_balance_loss(probs, idx))),
        ("P came from the counts too (Σ f_i·f_i); P_i is the mean router probability of expert i over the "
         "tokens, the differentiable part that carries the gradient.", _p_from_counts),
    ],
    kind="build",
    after=lambda fn: _uses_helpers_moe(_balance_args, "f and P")(fn) or _balance_gradient(fn),
    domain=BALANCE_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep probs' dtype (float32)."),
)


# ---------------------------------------------------------------- exercise 4: what the z-loss does to the logits
def _z_loss_grad(logits: torch.Tensor) -> torch.Tensor:
    """∂/∂logits of mean_n (logsumexp_i logits[n, i])² = (2 / N) · lse_n · softmax(logits[n])_i."""
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    return 2.0 / logits.shape[0] * lse * torch.softmax(logits, dim=-1)


def _z_cases() -> list[Case]:
    g = _generator(504)
    cases = [Case((torch.tensor([[0.0, 0.0], [1.0, -1.0]]),), note="logits [[0, 0], [1, -1]] (2 tokens, 2 experts)")]
    for n, e, scale, shift in [(6, 4, 1.0, 0.0), (10, 8, 3.0, 2.0), (5, 3, 0.5, -1.0)]:
        cases.append(Case((scale * torch.randn(n, e, generator=g) + shift,), note=f"logits of shape ({n}, {e})"))
    cases.append(Case((torch.randn(8, 4, generator=g) + 100.0,), note="logits near +100 (exp overflows float32)"))
    cases.append(Case((torch.randn(6, 5, generator=g) - 120.0,), note="logits near -120 (exp underflows to 0)"))
    cases.append(Case((torch.randn(4, 3, generator=g) + 800.0,), note="logits near +800 (exp overflows float64 too)"))
    cases.append(Case((torch.tensor([[300.0, 0.0, -200.0], [-150.0, 250.0, 10.0]]),),
                      note="rows whose logits span hundreds"))
    cases.append(Case((torch.tensor([[-3.0, -3.0, -3.0, -3.0], [2.5, 2.5, -1.0, 0.0]]),),
                      note="tied logits (a row of equal ones, whose logsumexp is below 0)"))
    cases.append(Case((torch.randn(7, 1, generator=g),), note="logits of shape (7, 1): a single expert"))
    cases.append(Case((torch.randn(1, 6, generator=g) * 2,), note="a batch of one token"))
    return cases


def _z_grad_with(lse_of=lambda l: torch.logsumexp(l, -1, keepdim=True), probs_of=lambda l: torch.softmax(l, -1),
                 scale=2.0, per_token=True):
    def wrong(logits):
        n = logits.shape[0] if per_token else 1
        return scale / n * lse_of(logits) * probs_of(logits)
    return wrong


_AUTOGRAD_NAMES = frozenset({"autograd", "backward", "enable_grad", "set_grad_enabled", "vjp", "jvp", "jacrev",
                              "jacfwd", "hessian", "grad_and_value"})


def _autograd_names(fn) -> set[str]:
    """Names of autograd entry points the function's code reads (its own code, nested functions and lambdas)."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    found, stack = set(), [code] if code is not None else []
    while stack:
        c = stack.pop()
        names = set(c.co_names)
        found |= names & _AUTOGRAD_NAMES
        if {"func", "grad"} <= names:                        # torch.func.grad
            found.add("func.grad")
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return found


def _uses_autograd(fn) -> str | None:
    """The statement asks for the gradient by hand: an answer that gets it from autograd fails, whatever its values.
    Two tests: the function runs under ``torch.no_grad()`` (``backward`` and ``torch.autograd.grad`` raise there,
    also inside the learner's own helpers), and its code names no autograd entry point (``torch.func.grad``,
    ``torch.enable_grad`` would pass the first test)."""
    logits = torch.randn(6, 4, generator=_generator(519))
    try:
        with torch.no_grad():
            value = fn(logits.clone())
        runs = isinstance(value, torch.Tensor) and torch.allclose(value.double(), _z_loss_grad(logits).double(),
                                                                  rtol=1e-4, atol=1e-6)
    except Exception:
        runs = False
    try:
        names = _autograd_names(fn)
    except Exception:
        names = set()
    if runs and not names:
        return None
    how = f"it reads {', '.join(sorted(names))}" if names else "it fails under torch.no_grad(), where autograd is off"
    return (f"right values, but through autograd ({how}): the exercise asks for the formula. Derive "
            f"d lse_n / d l_(n,i) by hand and write the gradient with tensor operations.")


Z_DOMAIN = Domain(
    allows="float32 logits (N, E) with N, E >= 1, any finite values (up to about ±1000); float32 (N, E) out",
    corners=(
        Corner("logits above 88 (exp overflows float32)", lambda c: bool(c.args[0].max() > 88)),
        Corner("logits above 709 (exp overflows float64 too)", lambda c: bool(c.args[0].max() > 709)),
        Corner("a row far below zero (exp underflows to 0)", lambda c: bool((c.args[0].max(-1).values < -104).any())),
        Corner("a row spanning hundreds", lambda c: bool((c.args[0].max(-1).values - c.args[0].min(-1).values
                                                          > 200).any())),
        Corner("a row of tied logits", lambda c: bool((c.args[0].max(-1).values == c.args[0].min(-1).values).any()
                                                      and c.args[0].shape[1] > 1)),
        Corner("a row whose logsumexp is negative", lambda c: bool((torch.logsumexp(c.args[0].double(), -1) < 0).any())),
        Corner("a single expert (E = 1)", lambda c: c.args[0].shape[1] == 1),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
    ))


check_z_loss = _AfterPassExercise(
    "Exercise 4 (what the z-loss does to the logits)",
    _z_loss_grad,
    _z_cases,
    [
        ("exp over- or underflowed on large logits: use torch.logsumexp and torch.softmax, or subtract each row's "
         "maximum m before exponentiating (logsumexp = m + log Σ exp(l − m), softmax = exp(l − m) / Σ exp(l − m)).",
         _z_grad_with(lse_of=lambda l: torch.log(torch.exp(l).sum(-1, keepdim=True)), probs_of=_naive_softmax)),
        ("log(sum(exp(l))) overflows on large logits (log inf = inf): use torch.logsumexp, or subtract each row's "
         "maximum m first (logsumexp = m + log Σ exp(l − m)).",
         _z_grad_with(lse_of=lambda l: torch.log(torch.exp(l).sum(-1, keepdim=True)))),
        ("float64 only moves the overflow: exp passes float64's largest value above a logit of about 709, so the "
         "logits near +800 still give inf / inf = NaN. Subtract each row's maximum m before exponentiating "
         "(logsumexp = m + log Σ exp(l − m), softmax = exp(l − m) / Σ exp(l − m)).",
         _z_grad_with(lse_of=lambda l: torch.log(torch.exp(l.double()).sum(-1, keepdim=True)),
                      probs_of=lambda l: _naive_softmax(l.double()))),
        ("you subtracted each row's maximum m inside logsumexp but did not add it back: logsumexp(l) = "
         "m + log Σ exp(l − m).", _z_grad_with(lse_of=lambda l: torch.logsumexp(l - l.max(-1, keepdim=True).values,
                                                                               -1, keepdim=True))),
        ("the 1/N of the mean is missing: the loss averages over the N tokens, so each token's gradient is "
         "divided by N.", _z_grad_with(per_token=False)),
        ("the factor 2 of the square is missing: d(u²) = 2u du.", _z_grad_with(scale=1.0)),
        ("the softmax is missing: d logsumexp(l) / d l_i = softmax(l)_i, so each entry is (2/N) · lse · p_i.",
         _z_grad_with(probs_of=lambda l: torch.ones_like(l))),
        ("the sign is flipped: this is the gradient, the direction in which the loss grows, not the step.",
         _z_grad_with(scale=-2.0)),
        ("you used the largest logit for logsumexp; it is log Σ exp, a smooth maximum above the largest logit.",
         _z_grad_with(lse_of=lambda l: l.max(-1, keepdim=True).values)),
        ("the softmax ran over the tokens (dim=0); each token's logits get their own softmax (dim=-1).",
         _z_grad_with(probs_of=lambda l: torch.softmax(l, 0))),
    ],
    kind="build",
    after=_uses_autograd,
    domain=Z_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep the logits' dtype (float32): compute in float64 if you like, then .float() the result."),
)


# ---------------------------------------------------------------- exercise 5: noisy top-k gating (Shazeer 2017)
def _gates(h: torch.Tensor, k: int, *, fill: float = -math.inf, select: torch.Tensor | None = None,
           dim: int = -1) -> torch.Tensor:
    """Softmax over the k largest entries of each row of ``h`` (chosen from ``select`` if given), 0 elsewhere."""
    index = (h if select is None else select).topk(k, dim=-1).indices
    masked = torch.full_like(h, fill).scatter(-1, index, h.gather(-1, index))
    return torch.softmax(masked, dim=dim)


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


def _noisy_switch_weight_at_one(x, w_gate, w_noise, noise, k):
    """Right for k >= 2; at k = 1 Switch's weight (the kept expert's softmax over all E) instead of 1."""
    if k == 1:
        return _noisy_softmax_then_zero(x, w_gate, w_noise, noise, k)
    return _noisy_top_k(x, w_gate, w_noise, noise, k)


def _noisy_cases() -> list[Case]:
    g = _generator(505)

    def case(n, d, e, k, *, shift=0.0, zero_noise=False, scale=1.0, duplicate=None, note):
        x = torch.randn(n, d, generator=g)
        w_gate = torch.randn(e, d, generator=g) / math.sqrt(d) * scale
        w_noise = torch.randn(e, d, generator=g) / math.sqrt(d)
        if shift:                                   # a constant feature that shifts every logit
            x[:, 0] = 1.0
            w_gate[:, 0] = shift
        noise = torch.zeros(n, e) if zero_noise else torch.randn(n, e, generator=g)
        if duplicate is not None:                   # two identical experts, ranked first and second
            a, b = duplicate
            x[:, 0] = 1.0
            w_gate[:, 0] = 0.0
            w_gate[a, 0] = w_gate[b, 0] = 30.0
            w_gate[b], w_noise[b] = w_gate[a], w_noise[a]
        return Case((x, w_gate, w_noise, noise, k), note=note)

    return [
        case(6, 4, 4, 2, note="6 tokens, d=4, 4 experts, k=2"),
        case(10, 8, 6, 1, note="10 tokens, 6 experts, k=1"),
        case(7, 6, 3, 3, note="7 tokens, 3 experts, k=3 (k = E: nothing masked)"),
        case(9, 8, 8, 2, shift=-12.0, note="9 tokens, 8 experts, k=2, every noisy logit negative"),
        case(8, 6, 5, 2, zero_noise=True, note="8 tokens, 5 experts, k=2, noise = 0"),
        case(6, 6, 5, 2, zero_noise=True, duplicate=(1, 3),
             note="6 tokens, 5 experts, k=2, noise = 0, experts 1 and 3 identical and both kept (a tie inside the top k)"),
        case(8, 8, 6, 2, scale=100.0, note="8 tokens, 6 experts, k=2, noisy logits in the hundreds"),
        case(1, 8, 4, 2, note="a batch of one token, 4 experts, k=2"),
        case(20, 8, 8, 3, note="20 tokens, 8 experts, k=3"),
    ]


def _noisy_h(c: Case) -> torch.Tensor:
    x, w_gate, w_noise, noise, _ = c.args
    return _noisy_logits(x.double(), w_gate.double(), w_noise.double(), noise.double())


def _tie_inside_top_k(c: Case) -> bool:
    k = c.args[4]
    top = _noisy_h(c).topk(k, dim=-1).values
    return k >= 2 and bool((top[:, :-1] == top[:, 1:]).any())


NOISY_DOMAIN = Domain(
    allows="float32 x (N, d), w_gate and w_noise (E, d), noise (N, E) with N, d >= 1, E >= 1; an int 1 <= k <= E; "
           "no tie at the k-th place of H (ties inside the top k allowed: any order keeps both); noisy logits up "
           "to the hundreds; float32 (N, E) out",
    corners=(
        Corner("k = 1 (the one kept gate is 1)", lambda c: c.args[4] == 1),
        Corner("k = E (nothing masked)", lambda c: c.args[4] == c.args[1].shape[0]),
        Corner("noise = 0", lambda c: bool((c.args[3] == 0).all())),
        Corner("a tie inside the top k", _tie_inside_top_k),
        Corner("noisy logits above 88 (an unshifted exp overflows)", lambda c: bool(_noisy_h(c).abs().max() > 88)),
        Corner("every noisy logit negative", lambda c: bool((_noisy_h(c) < 0).all())),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
    ))


check_noisy_top_k = Exercise(
    "Exercise 5 (noisy top-k gating)",
    _noisy_top_k,
    _noisy_cases,
    [
        ("you set the experts outside the top k to 0 before the softmax; they must be -inf, so that they get "
         "exactly 0 weight (a logit of 0 still gets weight, and beats kept logits that are negative).",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps), k, fill=0.0)),
        ("the softmax ran over the tokens (dim=0): a column whose entries are all -inf gives NaN, and the kept "
         "gates of a token do not sum to 1. Each token's softmax runs over its experts (dim=-1).",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps), k, dim=0)),
        ("you took the softmax over all E experts and then zeroed the others; the softmax runs over the k kept "
         "experts only, so the kept gates sum to 1.", _noisy_softmax_then_zero),
        ("at k = 1 you kept Switch's weight, the expert's softmax probability over all E experts; this gating "
         "takes the softmax over the k kept logits only, so a lone kept expert gets exactly 1.",
         _noisy_switch_weight_at_one),
        ("the noise is missing: H = x W_gateᵀ + noise ⊙ softplus(x W_noiseᵀ).",
         lambda x, wg, wn, eps, k: _gates(x @ wg.T, k)),
        ("the noise scale needs the softplus: noise ⊙ softplus(x W_noiseᵀ), which keeps the scale positive.",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps, spread=lambda v: v), k)),
        ("the noise scale comes from its own matrix: softplus(x W_noiseᵀ), not softplus(x W_gateᵀ).",
         lambda x, wg, wn, eps, k: _gates(x @ wg.T + eps * F.softplus(x @ wg.T), k)),
        ("you chose the experts by the clean logits x W_gateᵀ; the noisy logits H decide which k are kept.",
         lambda x, wg, wn, eps, k: _gates(_noisy_logits(x, wg, wn, eps), k, select=x @ wg.T)),
        ("the noisy logits H chose the experts, but the gates came from the clean logits: G is a softmax over the "
         "kept entries of the noisy H, not of x W_gateᵀ.",
         lambda x, wg, wn, eps, k: _gates(x @ wg.T, k, select=_noisy_logits(x, wg, wn, eps))),
    ],
    kind="investigate",
    domain=NOISY_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep x's dtype (float32)."),
)


# ---------------------------------------------------------------- exercise 6: do later tokens change earlier ones?
def _changed(expert_index, n_experts, capacity_factor, *, fixed_capacity=False, first_only=False,
             full_batch_drops=False, skip_first_token=False, every_slot=False, direction=None):
    n, k = expert_index.shape
    full = _keep(expert_index, n_experts, _capacity(capacity_factor, n, k, n_experts))
    if full_batch_drops:
        return ~full.all(-1)
    changed = torch.zeros(n, dtype=torch.bool)
    for t in range(1 if skip_first_token else 0, n):
        cap = _capacity(capacity_factor, n if fixed_capacity else t + 1, k, n_experts)
        alone = _keep(expert_index[: t + 1], n_experts, cap)[t]
        a, b = (alone[:1], full[t, :1]) if first_only else (alone, full[t])
        if direction is not None:                       # "lost": kept alone, dropped in full; "gained": the reverse
            a, b = (a, b) if direction == "lost" else (b, a)
            changed[t] = bool((a & ~b).any())
        else:
            changed[t] = bool((a != b).all() if every_slot else (a != b).any())
    return changed


def _changed_by_later_tokens(expert_index: torch.Tensor, n_experts: int, capacity_factor: float) -> torch.Tensor:
    return _changed(expert_index, n_experts, capacity_factor)


def _later_cases() -> list[Case]:
    g = _generator(506)
    cases = [Case((torch.tensor([[0, 1], [1, 0]]), 2, 0.5), note="the notebook's two tokens, k=2, capacity_factor=0.5"),
             # tokens 0 and 1 lose their second slot once later tokens arrive: off by one and first-choice-only differ
             Case((torch.tensor([[0, 1], [2, 3], [3, 1], [1, 2]]), 4, 0.5),
                  note="4 tokens, k=2, 4 experts, capacity_factor=0.5 (tokens 0 and 1 change in their second choice only)")]
    for n, e, k, factor in [(12, 4, 1, 1.0), (16, 4, 2, 1.0), (20, 5, 2, 1.25), (15, 3, 1, 0.75), (24, 6, 3, 1.5)]:
        cases.append(Case((_skewed_choices(g, n, e, k), e, factor),
                          note=f"{n} tokens, k={k}, {e} experts, capacity_factor={factor}"))
    cases.append(Case((_skewed_choices(g, 14, 5, 2, unused=0), 5, 0.75), note="14 tokens, k=2, 5 experts, "
                      "expert 0 chosen by nobody, capacity_factor=0.75"))
    cases.append(Case((_permutations(g, 8, 3), 3, 0.5), note="8 tokens, k = E = 3, capacity_factor=0.5"))
    cases.append(Case((_skewed_choices(g, 10, 4, 2), 4, 0.25), note="10 tokens, k=2, 4 experts, "
                      "capacity_factor=0.25"))
    cases.append(Case((torch.tensor([[1, 2]]), 3, 1.0), note="a batch of one token"))
    cases.append(Case((torch.arange(8).remainder(4)[:, None], 4, 2.0), note="8 tokens spread evenly, k=1, nothing dropped"))
    cases.append(Case((_skewed_choices(g, 12, 4, 2), 4, 4.0), note="12 tokens, k=2, 4 experts, capacity_factor=4.0"))
    return cases


def _changed_of(c: Case) -> torch.Tensor:
    return _changed(*c.args)


def _second_choice_only(c: Case) -> bool:
    """A token whose first slot is the same in both batches but a later slot differs."""
    idx, e, f = c.args
    n, k = idx.shape
    full = _keep(idx, e, _capacity(f, n, k, e))
    for t in range(n):
        alone = _keep(idx[: t + 1], e, _capacity(f, t + 1, k, e))[t]
        if alone[0] == full[t, 0] and not torch.equal(alone, full[t]):
            return True
    return False


LATER_DOMAIN = Domain(
    allows="as exercise 2: int64 expert_index (N, k), N >= 1, 1 <= k <= n_experts, rows of distinct experts; "
           "an int n_experts >= 1; a float 0.25 <= capacity_factor <= 4, exact in binary; bool (N,) out",
    corners=(
        Corner("k = 1", lambda c: c.args[0].shape[1] == 1),
        Corner("k = E", lambda c: c.args[0].shape[1] == c.args[1]),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
        Corner("an expert no token chooses", lambda c: bool((torch.bincount(c.args[0].reshape(-1),
                                                                            minlength=c.args[1]) == 0).any())),
        Corner("nothing changes", lambda c: not bool(_changed_of(c).any()) and c.args[0].shape[0] > 1),
        Corner("token 0 changes", lambda c: bool(_changed_of(c)[0])),
        Corner("a token that changes in a later choice only", _second_choice_only),
        Corner("capacity_factor = 0.25 (the smallest)", lambda c: c.args[2] == 0.25),
        Corner("capacity_factor = 4 (the largest)", lambda c: c.args[2] == 4.0),
    ))


check_later_tokens = Exercise(
    "Exercise 6 (do later tokens matter?)",
    _changed_by_later_tokens,
    _later_cases,
    [
        ("the shorter batch has its own capacity: C = ceil(c · n · k / E) with n = t + 1 tokens, not the full "
         "batch's N.", lambda idx, e, f: _changed(idx, e, f, fixed_capacity=True)),
        ("token 0 is never compared (a loop from t = 1?): the batch that ends with token 0 is token 0 alone, and "
         "its second choice can lose its slot once later tokens arrive.",
         lambda idx, e, f: _changed(idx, e, f, skip_first_token=True)),
        ("you compared only the first choice; a token's later slots can change too (compare its whole row of "
         "the keep mask).", lambda idx, e, f: _changed(idx, e, f, first_only=True)),
        ("a token counts as changed when ANY of its slots differs (.any() over its row), not only when all do.",
         lambda idx, e, f: _changed(idx, e, f, every_slot=True)),
        ("you counted only the slots a token loses when later tokens arrive; a slot can also be gained (the full "
         "batch's capacity is larger): compare the rows both ways, any slot that differs.",
         lambda idx, e, f: _changed(idx, e, f, direction="lost")),
        ("you counted only the slots a token gains in the full batch (its larger capacity); later first choices "
         "can also take a slot away: compare the rows both ways, any slot that differs.",
         lambda idx, e, f: _changed(idx, e, f, direction="gained")),
        ("you returned the tokens that lose a slot in the full batch; the question is whether their slots "
         "differ from what they get in the batch that ends with them.",
         lambda idx, e, f: _changed(idx, e, f, full_batch_drops=True)),
    ],
    kind="investigate",
    domain=LATER_DOMAIN,
)



# ---------------------------------------------------------------- exercise 7: both auxiliary losses, then train
def _aux_loss(logits: torch.Tensor, expert_index: torch.Tensor, alpha: float, z_coef: float) -> torch.Tensor:
    """α · E Σ_i f_i P_i + z_coef · mean_n lse_n², P from the softmax of ``logits``, f the share of the N·k slots."""
    probs = torch.softmax(logits, dim=-1)
    z = torch.logsumexp(logits, dim=-1).square().mean()
    return alpha * _balance_loss(probs, expert_index) + z_coef * z


def _aux_cases() -> list[Case]:
    g = _generator(507)
    cases = []
    for n, e, k, alpha, z_coef, scale, shift in [(40, 8, 1, 0.1, 1e-3, 1.0, 0.0), (16, 4, 2, 0.01, 1e-3, 2.0, 1.0),
                                                 (30, 8, 2, 0.0, 1e-3, 1.0, 0.5), (24, 6, 1, 0.1, 0.0, 3.0, 0.0),
                                                 (7, 4, 4, 1.0, 0.01, 1.0, 0.0), (1, 4, 2, 0.1, 1e-3, 1.0, 0.0)]:
        logits = scale * torch.randn(n, e, generator=g) + shift
        cases.append(Case((logits, logits.topk(k, dim=-1).indices, alpha, z_coef),
                          note=f"logits ({n}, {e}), top-{k}, alpha={alpha:g}, z_coef={z_coef:g}"))
    logits = 100 * torch.randn(10, 4, generator=g) + 300.0
    cases.append(Case((logits, logits.topk(1, dim=-1).indices, 0.1, 1e-3),
                      note="logits near +300, spread over hundreds (exp overflows float32), top-1"))
    logits = torch.randn(8, 5, generator=g) - 200.0
    cases.append(Case((logits, logits.topk(2, dim=-1).indices, 0.1, 0.01),
                      note="logits near -200 (exp underflows to 0), top-2"))
    logits = torch.randn(12, 6, generator=g)
    logits[:, 5] = -30.0                                      # the last expert gets no slot
    cases.append(Case((logits, logits.topk(2, dim=-1).indices, 0.1, 1e-3),
                      note="logits (12, 6), top-2, the last expert (5) gets no slot"))
    logits = torch.randn(9, 4, generator=g)
    index = torch.stack([torch.arange(9) % 4, (torch.arange(9) + 2) % 4], dim=1)
    cases.append(Case((logits, index, 1.0, 0.0), note="logits (9, 4), k=2, slots not the top-2 of the logits"))
    return cases


def _aux_with(*, lse=lambda l: torch.logsumexp(l, -1), p_from=lambda l: torch.softmax(l, -1), per_token=False,
              z_of=lambda lse: lse.square().mean(), alpha_on_both=False, without_e=False, z_of_logits=None):
    def wrong(logits, expert_index, alpha, z_coef):
        probs = p_from(logits)
        f = _slot_counts(probs, expert_index) / (expert_index.shape[0] if per_token else expert_index.numel())
        balance = (1 if without_e else logits.shape[-1]) * (f * probs.mean(0)).sum()
        z = z_of(lse(logits)) if z_of_logits is None else z_of_logits(logits)
        return alpha * (balance + z_coef * z) if alpha_on_both else alpha * balance + z_coef * z
    return wrong


def _aux_gradient(fn) -> str | None:
    """The loss must train the router: its gradient with respect to the logits is the reference's."""
    logits = torch.randn(12, 4, generator=_generator(517))
    index = logits.topk(2, dim=-1).indices
    leaf = logits.clone().requires_grad_(True)
    with torch.enable_grad():
        loss = fn(leaf, index.clone(), 0.5, 0.01)
        where = "on logits (12, 4), top-2, alpha=0.5, z_coef=0.01"
        if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
            return (f"the value is right, but it carries no gradient back to the logits ({where}): build it from "
                    f"logits with tensor operations (no .item(), .detach() or NumPy), so that it trains the router.")
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
        ref_leaf = logits.clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(_aux_loss(ref_leaf, index, 0.5, 0.01), ref_leaf)
    if grad is None or not torch.allclose(grad.double(), expected.double(), rtol=1e-4, atol=1e-7):
        got = "none" if grad is None else "[" + ", ".join(f"{v:.4f}" for v in grad[0].tolist()) + "]"
        return (f"the value is right, but its gradient with respect to the logits is wrong ({where}): token 0 gets "
                f"{got}, expected [" + ", ".join(f"{v:.4f}" for v in expected[0].tolist()) + "]. f is a count (a "
                f"constant); the gradient flows through P and through the log-sum-exp.")
    return None


def _aux_args() -> tuple:
    logits = torch.randn(12, 4, generator=_generator(518))
    return logits, logits.topk(2, dim=-1).indices, 0.1, 1e-3


AUX_DOMAIN = Domain(
    allows="float32 logits (N, E), N >= 1, E >= 2, values in the hundreds of either sign; int64 expert_index (N, k), "
           "1 <= k <= E, the k entries of a row distinct; floats 0 <= alpha <= 1 and 0 <= z_coef <= 0.01; a 0-dim "
           "float32 tensor out whose gradient flows to the logits",
    corners=(
        Corner("k = 1", lambda c: c.args[1].shape[1] == 1),
        Corner("k = E", lambda c: c.args[1].shape[1] == c.args[0].shape[1]),
        Corner("a batch of one token", lambda c: c.args[0].shape[0] == 1),
        Corner("alpha = 0 (the z-loss alone)", lambda c: c.args[2] == 0),
        Corner("alpha = 1 (the largest)", lambda c: c.args[2] == 1.0),
        Corner("z_coef = 0 (the balance loss alone)", lambda c: c.args[3] == 0),
        Corner("z_coef = 0.01 (the largest)", lambda c: c.args[3] == 0.01),
        Corner("logits that overflow exp in float32", lambda c: bool((c.args[0] > 89).any())),
        Corner("logits whose exp underflows to 0", lambda c: bool((c.args[0] < -104).all(-1).any())),
        Corner("an expert no slot goes to", lambda c: bool((torch.bincount(c.args[1].reshape(-1),
                                                                           minlength=c.args[0].shape[1]) == 0).any())),
        Corner("slots that are not the top-k of the logits",
               lambda c: not torch.equal(c.args[1].sort(-1).values,
                                         c.args[0].topk(c.args[1].shape[1], -1).indices.sort(-1).values)),
    ))


check_aux_loss = _BalanceExercise(
    "Exercise 7 (both losses in training)",
    _aux_loss,
    _aux_cases,
    [
        ("log(sum(exp(logits))) overflows (or underflows to log 0) when the logits reach the hundreds: use "
         "torch.logsumexp, which subtracts each row's largest logit first.",
         _aux_with(lse=lambda l: torch.log(torch.exp(l).sum(-1)))),
        ("P came from the logits; P_i is the mean of expert i's softmax probability over the tokens.",
         _aux_with(p_from=lambda l: l)),
        ("you squared the mean log-sum-exp; the z-loss is the mean of each token's squared log-sum-exp.",
         _aux_with(z_of=lambda lse: lse.mean().square())),
        ("the z-loss is not squared: you averaged each token's log-sum-exp; ST-MoE's z-loss averages its square, "
         "(1/N) Σ_n logsumexp(logits_n)², so large logits cost quadratically.",
         _aux_with(z_of=lambda lse: lse.mean())),
        ("you divided the counts by N, not by the N · k slots: that is Hugging Face's Mixtral variant, whose value "
         "at balance is k instead of 1.", _aux_with(per_token=True)),
        ("the factor E (number of experts) is missing from the balancing loss: without it the loss is 1/E at an "
         "even load instead of 1, and alpha = 0.1 pushes E times too weakly.", _aux_with(without_e=True)),
        ("the 1/N of the mean is missing: you summed each token's squared log-sum-exp over the N tokens; the "
         "z-loss averages it, so its size does not grow with the batch.", _aux_with(z_of=lambda lse: lse.square().sum())),
        ("you took the mean square of the logits themselves; the z-loss squares each token's log-sum-exp "
         "(torch.logsumexp(logits, -1)), then averages over the tokens.",
         _aux_with(z_of_logits=lambda l: l.square().mean())),
        ("alpha scales the balancing loss only; the z-loss has its own coefficient z_coef.",
         _aux_with(alpha_on_both=True)),
        ("the z-loss uses the log-sum-exp of each token's logits, not its largest logit.",
         _aux_with(lse=lambda l: l.max(-1).values)),
        ("you counted only each token's first choice (expert_index[:, 0]); f_i counts all N · k routed slots, "
         "every column of expert_index.", lambda logits, idx, alpha, z_coef: _aux_loss(logits, idx[:, :1], alpha, z_coef)),
    ],
    kind="investigate",
    after=lambda fn: _uses_helpers_moe(_aux_args, "both losses")(fn) or _aux_gradient(fn),
    domain=AUX_DOMAIN,
    returns=tensor_dtype(torch.float32, advice="Keep the logits' dtype (float32)."),
)

EXERCISES = [check_moe_forward, check_capacity_keep, check_balance_loss, check_z_loss, check_noisy_top_k,
             check_later_tokens, check_aux_loss]
