"""Checkers of notebook 07: what the generic contract test does not cover.

For each exercise: the reference agrees with the course's library, the hidden cases stay inside the declared
domain and reach its corners in the ways the statement cares about, natural correct answers pass (in every dtype
the statement allows), and the natural wrong answers tried against the statement (each breaking one of its
sentences) fail, with their hint where one explains them.
"""
import math
import statistics

import pytest
import torch

from helpers.exercises import nb07
from helpers.moe import MoE, bias_update_step
from helpers.moe_configs import expert_combinations
from helpers.stats import paired_difference


def _status(ex, fn):
    result = ex.evaluate(fn)
    return result.status, result.hint, result.message


def _to32(value):
    return value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _hint_of(ex, kind_words):
    return next(h for h, _ in ex.mistakes if kind_words in h)


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


def test_v3_hidden_cases_stay_in_the_domain_and_never_tie_at_the_edge():
    cases = nb07.check_v3_gates.cases()
    margins = []
    for c in cases:
        logits, bias, k = c.args
        assert logits.dtype == bias.dtype == torch.float64 and isinstance(k, int) and 1 <= k <= logits.shape[1]
        assert float(logits.abs().max()) <= 8 and float(bias.abs().max()) <= 1
        for dtype in (torch.float64, torch.float32):     # the statement promises no tie at the edge, also in float32
            score = (torch.sigmoid(logits.to(dtype)) + bias.to(dtype)).double().sort(-1, descending=True).values
            if k < logits.shape[1]:
                margins.append(float((score[:, k - 1] - score[:, k]).min()))
    assert 5e-5 < min(margins) < 2e-4


def test_v3_natural_answers_pass_in_float32_and_float64_without_a_note():
    def with_mask(logits, bias, k):
        affinity = torch.sigmoid(logits)
        score = affinity + bias
        keep = score >= score.topk(k, -1).values[:, -1:]
        gates = torch.where(keep, affinity, torch.zeros_like(affinity))
        return gates / gates.sum(-1, keepdim=True) if k >= 2 else gates

    def in_float32(logits, bias, k):
        return nb07._v3_gates(logits.float(), bias.float(), k)

    def float64_logic(logits, bias, k):
        return nb07._v3_gates(logits, bias, k)

    for fn in (with_mask, in_float32, float64_logic):
        status, hint, message = _status(nb07.check_v3_gates, fn)
        assert status == "passed" and hint is None and "precision" not in message, (fn.__name__, message)


def test_v3_a_wrong_answer_is_never_told_it_is_only_imprecise():
    """The statement allows float32: no message may say the exercise wants float64."""
    def bias_scaled(logits, bias, k):                   # off by 2 % of the bias: only the 1e-4 margin shows it
        return nb07._v3_gates(logits, 0.98 * bias, k)

    status, _, message = _status(nb07.check_v3_gates, bias_scaled)
    assert status == "failed" and "float64" not in message and "precision" not in message, message


@pytest.mark.parametrize("hint, wrong", nb07.check_v3_gates.mistakes,
                         ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_v3_each_mistake_in_float32_gets_its_hint(hint, wrong):
    status, got, _ = _status(nb07.check_v3_gates, lambda l, b, k: wrong(_to32(l), _to32(b), k))
    assert status == "failed" and got == hint


def test_v3_natural_wrong_answers_fail():
    """Each breaks one sentence of the statement; those a listed mistake explains get its hint."""
    def squeezes(logits, bias, k):                      # "(N, E)": breaks on a batch of one
        return nb07._v3_gates(logits, bias, k).squeeze()

    def forgets_k_equals_e(logits, bias, k):            # "1 ≤ k ≤ E": nothing when every expert is chosen
        return nb07._v3_gates(logits, bias, k) if k < logits.shape[1] else torch.zeros_like(logits)

    def chosen_only(logits, bias, k):                   # "(N, E), zero except ...": returns the (N, k) weights
        weight = torch.sigmoid(logits).gather(1, torch.topk(torch.sigmoid(logits) + bias, k).indices)
        return weight / weight.sum(-1, keepdim=True) if k >= 2 else weight

    def softmax_of_chosen(logits, bias, k):             # "weight each chosen expert by its σ(logit)"
        index = torch.topk(torch.sigmoid(logits) + bias, k).indices
        return torch.zeros_like(logits).scatter(1, index, torch.softmax(logits.gather(1, index), -1))

    for fn in (squeezes, forgets_k_equals_e, chosen_only, softmax_of_chosen):
        assert _status(nb07.check_v3_gates, fn)[0] == "failed", fn.__name__


def test_v3_choosing_on_logits_plus_bias_is_told_what_it_did():
    """The review's answer: the top k of logits + bias (no sigmoid in the choice), weights σ(logits)."""
    def logits_plus_bias(logits, bias, k):
        index = torch.topk(logits + bias, k).indices
        weight = torch.sigmoid(logits).gather(1, index)
        weight = weight / weight.sum(-1, keepdim=True) if k >= 2 else weight
        return torch.zeros_like(logits).scatter(1, index, weight)

    status, hint, _ = _status(nb07.check_v3_gates, logits_plus_bias)
    assert status == "failed" and hint == _hint_of(nb07.check_v3_gates, "chosen by logits + bias")


# ---------------------------------------------------------------- exercise 2: one bias update
def test_bias_reference_agrees_with_the_library():
    bias, load = torch.randn(5, dtype=torch.float64), torch.tensor([3, 9, 5, 5, 3])
    torch.testing.assert_close(nb07._bias_step(bias, load, 0.02), bias_update_step(bias, load, 0.02))


def test_bias_hidden_cases_stay_in_the_domain():
    for c in nb07.check_bias_step.cases():
        bias, load, gamma = c.args
        assert bias.dtype == torch.float64 and load.dtype == torch.int64 and isinstance(gamma, float)
        assert 1 <= load.numel() <= 64 and bias.shape == load.shape and float(bias.abs().max()) <= 100
        assert 0 <= int(load.min()) and int(load.max()) <= 1000 and 0.001 <= gamma <= 0.5


def test_bias_natural_correct_answers_pass_without_a_note():
    """The trial's float32 answer ("expected 0.175693064, got 0.175693062") and others pass, hint-free."""
    def trial(bias, load, gamma):
        load = load.float()
        mean = load.mean()
        step = torch.where(load > mean, -gamma, torch.where(load < mean, gamma, 0.0))
        return bias + torch.tensor(step.tolist())

    def all_float32(bias, load, gamma):
        return nb07._bias_step(bias.float(), load, gamma)

    def with_a_loop(bias, load, gamma):
        mean, new = load.sum().item() / len(load), bias.clone()
        for i, c in enumerate(load.tolist()):
            new[i] += gamma if c < mean else -gamma if c > mean else 0.0
        return new

    for fn in (trial, all_float32, with_a_loop):
        status, hint, message = _status(nb07.check_bias_step, fn)
        assert status == "passed" and hint is None and "precision" not in message, (fn.__name__, message)


def test_bias_a_wrong_answer_near_float32_is_not_told_it_wants_float64():
    """The trial's "median" answer was told it matched "only to float32 precision (this exercise wants
    float64)", though the statement allows float32: now it gets its hint and no such note."""
    status, hint, message = _status(nb07.check_bias_step, nb07._bias_wrong("median"))
    assert status == "failed" and hint == _hint_of(nb07.check_bias_step, "median") and "float64" not in message


@pytest.mark.parametrize("hint, wrong", nb07.check_bias_step.mistakes,
                         ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_bias_each_mistake_in_float32_gets_its_hint(hint, wrong):
    status, got, _ = _status(nb07.check_bias_step, lambda b, l, g: wrong(b.float(), l, g))
    assert status == "failed" and got == hint


def test_bias_natural_wrong_answers_fail():
    def mean_of_busy_experts(bias, load, gamma):        # "the mean load": over the experts that got tokens only
        busy = load[load > 0].double()
        mean = busy.mean() if busy.numel() else torch.tensor(0.0, dtype=torch.float64)
        return bias + gamma * torch.sign(mean - load.double())

    def never_moves_at_zero_load(bias, load, gamma):    # "counts ≥ 0": skips an empty expert
        new = nb07._bias_step(bias, load, gamma)
        return torch.where(load == 0, bias, new)

    def relative_step(bias, load, gamma):               # "moves by gamma": scales the step by the bias
        return bias + gamma * bias.abs() * torch.sign(load.double().mean() - load.double())

    for fn in (mean_of_busy_experts, never_moves_at_zero_load, relative_step):
        assert _status(nb07.check_bias_step, fn)[0] == "failed", fn.__name__


def test_bias_the_int64_mean_gets_its_hint_only_when_it_explains_every_case():
    """The statement no longer says to convert the int64 loads: `.mean()` of them raises on every case and
    is named; the same call on some cases only, or another error, is not."""
    def integer_mean(bias, load, gamma):
        return bias + gamma * torch.sign(load.mean() - load)

    def integer_mean_in_where(bias, load, gamma):
        m = torch.mean(load)
        return torch.where(load > m, bias - gamma, torch.where(load < m, bias + gamma, bias))

    for fn in (integer_mean, integer_mean_in_where):
        status, hint, message = _status(nb07.check_bias_step, fn)
        assert status == "failed" and hint == nb07.INTEGER_MEAN_HINT and "load.double()" in message, fn.__name__

    def integer_mean_on_small_layers(bias, load, gamma):
        mean = load.mean() if load.numel() > 4 else load.double().mean()
        return bias + gamma * torch.sign(mean - load)

    def another_error(bias, load, gamma):
        return bias + gamma * (load.double()[:1, None] @ bias[None, :2])

    for fn in (integer_mean_on_small_layers, another_error):
        status, hint, _ = _status(nb07.check_bias_step, fn)
        assert status == "failed" and hint is None, fn.__name__

    def blank(bias, load, gamma):
        raise NotImplementedError

    assert _status(nb07.check_bias_step, blank)[0] == "not attempted"


# ---------------------------------------------------------------- exercise 3: combinations
def test_combinations_match_the_library_and_deepseekmoe():
    assert nb07._combinations(16, 2, 1, 0) == 120
    assert nb07._combinations(16, 2, 4, 0) == 4_426_165_368 == math.comb(64, 8)
    for c in nb07.check_expert_combinations.cases():
        n, k, m, s = c.args
        assert 1 <= k <= n <= 256 and 1 <= m <= 16 and 0 <= s < m * k
        assert nb07._combinations(*c.args) == expert_combinations(*c.args)


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


def test_combinations_natural_wrong_answers_fail():
    def shared_counted_once(n, k, m, s):                # "shared experts are always on": pool m·N − s, picks m·k
        return math.comb(m * n - s, m * k) if m * k <= m * n - s else 0

    def granularity_ignored(n, k, m, s):                # "cut with m": C(N, k)
        return math.comb(n, k)

    for fn in (shared_counted_once, granularity_ignored):
        assert _status(nb07.check_expert_combinations, fn)[0] == "failed", fn.__name__


def test_combinations_a_float_overflow_is_told_the_count_overflowed():
    def through_gamma(n, k, m, s):                      # factorials as floats: 256! is past a float's range
        pool, pick = m * n - s, m * k - s
        return round(math.gamma(pool + 1) / (math.gamma(pick + 1) * math.gamma(pool - pick + 1)))

    status, hint, message = _status(nb07.check_expert_combinations, through_gamma)
    assert status == "failed" and hint == nb07.OVERFLOW_HINT and "overflowed a float" in message, message
    # another raise is not told it overflowed
    def raises_otherwise(n, k, m, s):
        raise ValueError("not this")

    status, hint, _ = _status(nb07.check_expert_combinations, raises_otherwise)
    assert status == "failed" and hint != nb07.OVERFLOW_HINT


# ---------------------------------------------------------------- exercise 4: the paired t
def test_paired_reference_is_helpers_stats():
    a = torch.tensor([1.0, 2.0, 3.5], dtype=torch.float64)
    b = torch.tensor([0.5, 2.5, 1.0], dtype=torch.float64)
    d = [0.5, -0.5, 2.5]
    t, df = nb07._paired_t(a, b)
    assert t == pytest.approx(statistics.mean(d) / (statistics.stdev(d) / math.sqrt(3))) and df == 2.0
    assert t == paired_difference(a, b).t


def test_paired_hidden_cases_stay_in_the_domain():
    for c in nb07.check_paired_t.cases():
        a, b = c.args
        assert a.dtype == b.dtype == torch.float64 and a.shape == b.shape and 2 <= a.numel() <= 50
        assert float(torch.cat([a, b]).abs().max()) <= 1000 and float((a - b).std()) > 0
        assert float((a - b).abs().mean()) >= 0.01 * float(a.abs().mean())


def test_paired_other_correct_forms_pass():
    def with_statistics(a, b):
        d = [x - y for x, y in zip(a.tolist(), b.tolist())]
        return statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d))), float(len(d) - 1)

    def numpy_floats(a, b):
        d = (a - b).numpy()
        return d.mean() / (d.std(ddof=1) / len(d) ** 0.5), float(len(d) - 1)

    def int_df(a, b):                                   # the statement allows df as an int
        d = a - b
        return float(d.mean() / (d.std() / math.sqrt(len(d)))), len(d) - 1

    for fn in (with_statistics, numpy_floats, int_df):
        status, hint, message = _status(nb07.check_paired_t, fn)
        assert status == "passed" and hint is None, message


def test_paired_tensors_fail_naming_the_type():
    """The statement asks for Python numbers: 0-d tensors with the right values fail, naming t."""
    def tensors_out(a, b):
        d = a - b
        return d.mean() / (d.std() / d.numel() ** 0.5), torch.tensor(d.numel() - 1.0)
    result = nb07.check_paired_t.evaluate(tensors_out)
    assert result.reason == "type" and "t is a 0-d float64 tensor" in result.message, result.message
    tensor_df = nb07.check_paired_t.evaluate(lambda a, b: (float(tensors_out(a, b)[0]), tensors_out(a, b)[1]))
    assert tensor_df.reason == "type" and "df is a 0-d float" in tensor_df.message, tensor_df.message


def test_paired_float32_arithmetic_is_told_the_exercise_wants_float64():
    """The statement asks for float64: float32 misses where differences are small next to the values, and is
    told so (the precision note), never blamed on a listed mistake."""
    result = nb07.check_paired_t.evaluate(lambda a, b: nb07._paired_t(a.float(), b.float()))
    assert result.status == "failed" and result.reason == "precision" and result.hint is None, result.message


def test_paired_natural_wrong_answers_fail():
    def absolute_t(a, b):                               # "negative when a is lower": drops the sign
        t, df = nb07._paired_t(a, b)
        return abs(t), df

    def swapped_args(a, b):                             # "t of a − b": b − a
        return nb07._paired_t(b, a)

    def means_not_differences(a, b):                    # "the differences": sd of a alone
        n = a.numel()
        return float((a.mean() - b.mean()) / (a.std() / math.sqrt(n))), float(n - 1)

    for fn in (absolute_t, swapped_args, means_not_differences):
        assert _status(nb07.check_paired_t, fn)[0] == "failed", fn.__name__
    assert _status(nb07.check_paired_t, swapped_args)[1] == _hint_of(nb07.check_paired_t, "sign is reversed")


@pytest.mark.parametrize("hint, wrong", nb07.check_paired_t.mistakes,
                         ids=lambda v: v[:30] if isinstance(v, str) else "")
def test_paired_each_mistake_gets_its_hint(hint, wrong):
    status, got, _ = _status(nb07.check_paired_t, wrong)
    assert status == "failed" and got == hint


def test_blank_stubs_are_not_attempted():
    def blank(*args):
        raise NotImplementedError

    for ex in nb07.EXERCISES:
        assert ex.evaluate(blank).status == "not attempted"


# ---------------------------------------------------------------- review 07-round30: hints for ×2.5 and a sized step
def test_v3_gates_scaled_by_the_routed_scaling_factor_get_the_x2_5_hint():
    def scaled(logits, bias, k):
        return 2.5 * nb07._v3_gates(logits, bias, k)

    status, hint, _ = _status(nb07.check_v3_gates, scaled)
    assert status == "failed" and hint == _hint_of(nb07.check_v3_gates, "2.5 times the expected")


@pytest.mark.parametrize("relative", [False, True])
def test_bias_steps_sized_by_the_load_gap_get_the_step_size_hint(relative):
    def sized(bias, load, gamma):
        mean = load.double().mean()
        gap = mean - load.double()
        return bias + gamma * (gap / mean.clamp(min=1) if relative else torch.tanh(gap))

    status, hint, _ = _status(nb07.check_bias_step, sized)
    assert status == "failed" and hint == nb07.STEP_SIZE_HINT


def test_the_step_size_hint_is_not_given_to_a_step_the_wrong_way():
    def backwards_sized(bias, load, gamma):
        return bias - gamma * torch.tanh(load.double().mean() - load.double())

    assert _status(nb07.check_bias_step, backwards_sized)[1] != nb07.STEP_SIZE_HINT
