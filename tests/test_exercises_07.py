"""Checkers of notebook 07: what the generic contract test does not cover.

For each exercise: the reference agrees with the course's library, natural correct answers pass (float32 and
float64, other spellings), every listed mistake gets its own hint also when computed in float32, and the hidden
cases reach the extremes the statement allows.
"""
import math
import statistics

import pytest
import torch

from helpers.exercises import nb07
from helpers.moe import MoE, bias_update_step
from helpers.sparsity import expert_combinations
from helpers.stats import welch


def _status(ex, fn):
    result = ex.evaluate(fn)
    return result.status, result.hint, result.message


def _to32(value):
    return value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


# ---------------------------------------------------------------- exercise 1: DeepSeek-V3's gates
@pytest.mark.parametrize("k", [1, 3])
def test_v3_reference_agrees_with_the_library_router(k):
    """At k ≥ 2 the chosen sigmoid affinities are normalised; at k = 1 both keep σ(logit) (Llama 4's router)."""
    torch.manual_seed(k)
    layer = MoE(8, 6, k, d_ff=8, score="sigmoid").eval()
    layer.selection_bias.copy_(torch.tensor([0.0, 0.4, -0.2, 0.0, 0.1, 0.0]))
    r = layer.route(torch.randn(20, 8))
    gates = nb07._v3_gates(r.logits.double(), layer.selection_bias.double(), k)
    expected = torch.zeros(20, 6, dtype=torch.float64).scatter(1, r.expert_index, r.weight.double())
    torch.testing.assert_close(gates, expected, atol=1e-6, rtol=1e-6)
    if k == 1:
        assert bool((gates.sum(1) < 1).all())


def test_v3_hidden_cases_reach_the_extremes():
    cases = nb07.check_v3_gates.cases()
    ks = [(c.args[0].shape, c.args[2]) for c in cases]
    assert any(k == 1 for _, k in ks) and any(k == shape[1] for shape, k in ks)      # k = 1 and k = E
    assert any(shape[0] == 1 for shape, _ in ks)                                       # a batch of one
    assert any(bool((c.args[1] == 0).all()) for c in cases)                            # a zero bias
    assert any(bool((c.args[0] < 0).all()) for c in cases)                             # all logits negative
    assert any(float(c.args[0].abs().max()) >= 8 for c in cases)                       # saturated sigmoids
    assert any(float(c.args[0].abs().max()) < 0.01 for c in cases)                     # tiny logits
    flips = [bool((torch.topk(torch.sigmoid(c.args[0]) + c.args[1], c.args[2]).indices.sort(-1).values
                   != torch.topk(torch.sigmoid(c.args[0]), c.args[2]).indices.sort(-1).values).any())
             for c in cases]
    assert any(flips) and not all(flips)                                               # the bias flips a choice
    margins = []
    for c in cases:                     # no tie at the edge of a top k, even in float32 (the statement says so)
        logits, bias, k = c.args
        for dtype in (torch.float64, torch.float32):
            score = (torch.sigmoid(logits.to(dtype)) + bias.to(dtype)).double().sort(-1, descending=True).values
            if k < logits.shape[1]:
                margins.append(float((score[:, k - 1] - score[:, k]).min()))
    assert min(margins) > 5e-5
    assert min(margins) < 2e-4                          # and one choice is decided by a margin of about 1e-4


def test_v3_natural_answers_pass_in_float32_and_float64():
    def with_mask(logits, bias, k):
        affinity = torch.sigmoid(logits)
        score = affinity + bias
        keep = score >= score.topk(k, -1).values[:, -1:]
        gates = torch.where(keep, affinity, torch.zeros_like(affinity))
        return gates / gates.sum(-1, keepdim=True) if k >= 2 else gates

    def in_float32(logits, bias, k):
        return nb07._v3_gates(logits.float(), bias.float(), k)

    def float32_result_of_float64_logic(logits, bias, k):
        return nb07._v3_gates(logits, bias, k).float()

    for fn in (with_mask, in_float32, float32_result_of_float64_logic):
        assert _status(nb07.check_v3_gates, fn)[0] == "passed", fn.__name__


def test_v3_a_float32_near_miss_is_never_blamed_on_a_mistake():
    """The trial's problem: a float32 answer was blamed on "normalised at k = 1". Now it passes, hint-free."""
    status, hint, _ = _status(nb07.check_v3_gates, lambda l, b, k: nb07._v3_gates(_to32(l), _to32(b), k))
    assert status == "passed" and hint is None


@pytest.mark.parametrize("hint, wrong", nb07.check_v3_gates.mistakes,
                         ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_v3_each_mistake_in_float32_gets_its_hint(hint, wrong):
    status, got, _ = _status(nb07.check_v3_gates, lambda l, b, k: wrong(_to32(l), _to32(b), k))
    assert status == "failed" and got == hint


def test_v3_the_trial_mistakes_have_hints():
    """The trial's "bias before the sigmoid" had no hint; "normalised at k = 1" must cite Llama 4's router."""
    hints = [h for h, _ in nb07.check_v3_gates.mistakes]
    assert sum("inside the sigmoid" in h for h in hints) == 2
    assert any("with k = 1" in h and "Llama 4" in h for h in hints)


def test_v3_wrong_only_at_the_extremes_is_rejected():
    def squeezes(logits, bias, k):                      # breaks on a batch of one
        gates = nb07._v3_gates(logits, bias, k)
        return gates.squeeze()

    def forgets_k_equals_e(logits, bias, k):            # returns no weights when every expert is chosen
        return nb07._v3_gates(logits, bias, k) if k < logits.shape[1] else torch.zeros_like(logits)

    def bias_scaled(logits, bias, k):                   # a bias off by 2 %: only the 1e-4 margin shows it
        return nb07._v3_gates(logits, 0.98 * bias, k)

    for fn in (squeezes, forgets_k_equals_e, bias_scaled):
        assert _status(nb07.check_v3_gates, fn)[0] == "failed", fn.__name__


# ---------------------------------------------------------------- exercise 2: one bias update
def test_bias_reference_agrees_with_the_library():
    bias, load = torch.randn(5, dtype=torch.float64), torch.tensor([3, 9, 5, 5, 3])
    torch.testing.assert_close(nb07._bias_step(bias, load, 0.02), bias_update_step(bias, load, 0.02))


def test_bias_hidden_cases_reach_the_extremes():
    cases = nb07.check_bias_step.cases()
    loads = [c.args[1] for c in cases]
    assert any(l.numel() == 1 for l in loads)                                         # one expert
    assert any(bool((l == l[0]).all()) and l.numel() > 1 for l in loads)               # all equal
    assert any(bool((l.double() == l.double().mean()).any()) and not bool((l == l[0]).all()) for l in loads)
    assert any(float(l.double().mean()) != int(l.sum()) // l.numel() for l in loads)  # a mean that is not whole
    # threshold neighbour: several experts at floor(mean) of a mean that is not whole; they sit below it
    assert any(float(l.double().mean()) % 1 and int((l == int(l.sum()) // l.numel()).sum()) >= 2 for l in loads)
    assert any(bool((l == 0).any()) for l in loads) and any(int(l.max()) >= 300 for l in loads)
    biases = [float(c.args[0].abs().max()) for c in cases]
    assert max(biases) > 40 and min(biases) < 1e-8
    gammas = [c.args[2] for c in cases]
    assert min(gammas) <= 1e-3 and max(gammas) >= 0.5
    for c in cases:
        assert c.args[0].dtype == torch.float64 and c.args[1].dtype == torch.int64 and isinstance(c.args[2], float)


def test_bias_the_trial_float32_logic_passes():
    """The trial's correct answer in float32 ("expected 0.175693064, got 0.175693062") now passes."""
    def trial(bias, load, gamma):
        load = load.float()
        mean = load.mean()
        step = torch.where(load > mean, -gamma, torch.where(load < mean, gamma, 0.0))
        return bias + torch.tensor(step.tolist())

    def all_float32(bias, load, gamma):
        return nb07._bias_step(bias.float(), load, gamma)

    for fn in (trial, all_float32):
        status, hint, message = _status(nb07.check_bias_step, fn)
        assert status == "passed" and hint is None, message


@pytest.mark.parametrize("hint, wrong", nb07.check_bias_step.mistakes,
                         ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_bias_each_mistake_in_float32_gets_its_hint(hint, wrong):
    """The trial's hidden logic errors (an expert at the mean moving, a floor-divided mean) now get their hints."""
    status, got, _ = _status(nb07.check_bias_step, lambda b, l, g: wrong(b.float(), l, g))
    assert status == "failed" and got == hint


def test_bias_credits_wang_et_al():
    assert any("Wang et al. 2024" in hint for hint, _ in nb07.check_bias_step.mistakes)


# ---------------------------------------------------------------- exercise 3: combinations
def test_combinations_match_the_library_and_deepseekmoe():
    assert nb07._combinations(16, 2, 1, 0) == 120
    assert nb07._combinations(16, 2, 4, 0) == 4_426_165_368 == math.comb(64, 8)
    for c in nb07.check_expert_combinations.cases():
        assert nb07._combinations(*c.args) == expert_combinations(*c.args)


def test_combinations_hidden_cases_reach_the_extremes():
    rows = [c.args for c in nb07.check_expert_combinations.cases()]
    assert any(k == n for n, k, m, s in rows)                        # k = E: one set
    assert any(s == m * k - 1 for n, k, m, s in rows)                # one routed choice left
    assert any(s == 0 for n, k, m, s in rows) and any(m == 1 for n, k, m, s in rows)
    assert any(nb07._combinations(*r) > 2 ** 53 for r in rows)       # a float cannot hold it exactly


def test_combinations_other_correct_forms_pass():
    def loop(n, k, m, s):
        total, pool, pick = 1, m * n - s, m * k - s
        for i in range(pick):
            total = total * (pool - i) // (i + 1)
        return total

    def factorials(n, k, m, s):
        return math.factorial(m * n - s) // (math.factorial(m * k - s) * math.factorial(m * n - m * k))

    for fn in (loop, factorials):
        assert _status(nb07.check_expert_combinations, fn)[0] == "passed"
    # a float is accepted only where it is exact
    status, hint, message = _status(nb07.check_expert_combinations,
                                    lambda n, k, m, s: float(math.comb(m * n - s, m * k - s)))
    assert status == "failed" and hint is not None and "exact int" in hint, message


# ---------------------------------------------------------------- exercise 4: Welch's t
def test_welch_reference_is_helpers_stats():
    a, b = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.tensor([4.0, 6.0, 8.0], dtype=torch.float64)
    t, df = nb07._welch_t(a, b)
    assert t == pytest.approx((2.0 - 6.0) / math.sqrt(1.0 / 3 + 4.0 / 3))
    w = welch(a, b)
    assert (t, df) == (w.t, w.df)


def test_welch_hidden_cases_reach_the_extremes():
    cases = nb07.check_welch_t.cases()
    sizes = [(c.args[0].numel(), c.args[1].numel()) for c in cases]
    assert (2, 2) in sizes and any(a != b for a, b in sizes)
    assert any(float(c.args[0].var()) == 0 or float(c.args[1].var()) == 0 for c in cases)  # a group without spread
    spans = [float(torch.cat(c.args).max() / torch.cat(c.args).abs().min()) for c in cases]
    assert max(spans) > 100
    assert any(float(torch.cat(c.args).abs().max()) < 1e-8 for c in cases)
    for c in cases:
        assert all(x.dtype == torch.float64 for x in c.args)


def test_welch_other_correct_forms_pass():
    def with_statistics(a, b):
        a, b = a.tolist(), b.tolist()
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        return ((statistics.mean(a) - statistics.mean(b)) / math.sqrt(va + vb),
                (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)))

    def tensors_out(a, b):
        t, df = nb07._welch_t(a, b)
        return torch.tensor(t), torch.tensor(df)

    def in_float32(a, b):
        return nb07._welch_t(a.float(), b.float())

    for fn in (with_statistics, tensors_out, in_float32):
        status, _, message = _status(nb07.check_welch_t, fn)
        assert status == "passed", message


def test_welch_wrong_shape_of_answer():
    status, _, message = _status(nb07.check_welch_t, lambda a, b: nb07._welch_t(a, b)[0])
    assert status == "failed" and "expected a tuple" in message


def test_blank_stubs_are_not_attempted():
    def blank(*args):
        raise NotImplementedError

    for ex in nb07.EXERCISES:
        assert ex.evaluate(blank).status == "not attempted"
