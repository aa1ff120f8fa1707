"""Notebook 04's checkers: other correct forms pass, unlisted wrong answers fail, and the references
agree with what PyTorch measures (the generic contract for every checker is in test_exercise_contract.py).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.costs import measure_saved_tensors
from helpers.exercises.engine import FAILED, PASSED
from helpers.exercises.nb04 import (_NAMES as NAMES, _TRAINABLE_D_FF_TENSORS, ALL_VARIANTS, EXERCISES,
                                    FROZEN_D_FF_TENSORS, GATED, attempted, check_fused_ffn, check_fused_saved,
                                    check_frozen_saved, check_gate_gradients, check_llama_width)
from helpers.ffn import FFN, VARIANTS
from helpers.gating import fused_gate_forward, gate_gradients


def test_every_exercise_is_marked_and_both_kinds_are_there():
    assert [ex.kind for ex in EXERCISES] == ["build", "build", "build", "investigate", "investigate"]
    assert [ex.title.split(" (")[0] for ex in EXERCISES] == [f"Exercise {i}" for i in range(1, 6)]


# ---- exercise 1: LLaMA's width rule
def test_llama_width_released_configurations():
    cases = {(c.args[0], c.args[1], c.args[2]): check_llama_width.reference(*c.args)
             for c in check_llama_width.cases()}
    assert cases[(4096, 256, None)] == 11008          # LLaMA-1/2 7B
    assert cases[(4096, 1024, 1.3)] == 14336          # LLaMA-3 8B
    assert cases[(8192, 4096, 1.3)] == 28672          # LLaMA-2 70B
    assert cases[(2048, 256, 1.5)] == 8192            # Llama 3.2 1B


def test_llama_width_other_correct_forms_pass_and_unlisted_errors_fail():
    def integer_arithmetic(d, m, k=None):
        w = 8 * d // 3
        if k is not None:
            w = int(w * k)
        return -(-w // m) * m

    assert check_llama_width.evaluate(integer_arithmetic).status == PASSED
    wrong = check_llama_width.evaluate(lambda d, m, k=None: 4 * d)          # the dense width
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message
    assert check_llama_width.evaluate(lambda d, m, k=None: integer_arithmetic(d, m, k) + 0.5).status == FAILED


# ---- exercise 2: gradients through any gate
def _by_formula(a, b, gh, variant):
    if variant == "glu":
        s = torch.sigmoid(a)
        phi, slope = s, s * (1 - s)
    elif variant == "bilinear":
        phi, slope = a, torch.ones_like(a)
    elif variant == "reglu":
        phi, slope = a.clamp(min=0), torch.where(a > 0, 1.0, 0.0).to(a.dtype)
    elif variant == "geglu":
        cdf = torch.special.ndtr(a)
        phi, slope = a * cdf, cdf + a * torch.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    else:
        s = torch.sigmoid(a)
        phi, slope = a * s, s + a * s * (1 - s)
    return gh * slope * b, gh * phi


def test_gate_gradients_by_formula_pass_with_autograd_on_or_off():
    assert check_gate_gradients.evaluate(_by_formula).status == PASSED
    torch.set_grad_enabled(False)          # the old checker's reference used autograd and failed here
    try:
        assert check_gate_gradients.evaluate(_by_formula).status == PASSED
    finally:
        torch.set_grad_enabled(True)
    with torch.inference_mode():
        assert check_gate_gradients.evaluate(_by_formula).status == PASSED


def test_gate_gradients_by_autograd_pass():
    phis = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}

    def by_autograd(a, b, gh, variant):
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        return torch.autograd.grad(phis[variant](a) * b, (a, b), gh)

    assert check_gate_gradients.evaluate(by_autograd).status == PASSED


def test_gate_gradients_reference_matches_the_autograd_helper():
    for case in check_gate_gradients.cases():
        a, b, gh, variant = case.args
        expected = gate_gradients(a, b, gh, VARIANTS[variant][0])
        got = check_gate_gradients.reference(a, b, gh, variant)
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


def test_gate_gradients_cases_cover_every_variant_and_the_kink():
    cases = check_gate_gradients.cases()
    assert {c.args[3] for c in cases} == set(GATED)
    assert any(c.args[3] == "reglu" and (c.args[0] == 0).any() for c in cases)
    assert any(c.args[0].dim() == 1 and c.args[0].numel() == 1 for c in cases)


def test_gate_gradients_unlisted_errors_fail_without_a_hint():
    wrong = check_gate_gradients.evaluate(lambda a, b, gh, v: (gh * b, gh * b))
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message
    assert check_gate_gradients.evaluate(lambda a, b, gh, v: _by_formula(a, b, gh, v)[0]).status == FAILED


# ---- exercise 3: one matrix for gate and content
def test_fused_ffn_other_correct_forms_pass():
    phis = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}

    def with_chunk(x, w13, b13, w2, b2, variant):
        a, b = F.linear(x, w13, b13).chunk(2, dim=-1)
        return F.linear(phis[variant](a) * b, w2, b2)

    def with_matmul(x, w13, b13, w2, b2, variant):
        both = x @ w13.T
        if b13 is not None:
            both = both + b13
        d_ff = w13.shape[0] // 2
        out = (phis[variant](both[..., :d_ff]) * both[..., d_ff:]) @ w2.T
        return out if b2 is None else out + b2

    def with_einsum(x, w13, b13, w2, b2, variant):
        both = torch.einsum("...d,fd->...f", x, w13)
        if b13 is not None:
            both = both + b13
        d_ff = w13.shape[0] // 2
        out = torch.einsum("...f,df->...d", phis[variant](both[..., :d_ff]) * both[..., d_ff:], w2)
        return out if b2 is None else out + b2

    for fn in (with_chunk, with_matmul, with_einsum):
        assert check_fused_ffn.evaluate(fn).status == PASSED, fn.__name__


def test_fused_ffn_two_products_for_gate_and_content_fail_with_the_count():
    """The statement asks for one product with w13: the right values from two products are named."""
    phis = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}

    def weights_split_first(x, w13, b13, w2, b2, variant):      # two matmuls: equal values, not fused
        w1, w3 = w13.split(w13.shape[0] // 2)
        b1, b3 = (None, None) if b13 is None else b13.split(w13.shape[0] // 2)
        return F.linear(phis[variant](F.linear(x, w1, b1)) * F.linear(x, w3, b3), w2, b2)

    result = check_fused_ffn.evaluate(weights_split_first)
    assert result.status == FAILED and "3 matrix products" in result.message and "one product with w13" in result.hint


def test_fused_ffn_equals_the_course_ffn():
    """The reference is the three-matrix FFN of helpers.ffn on the split weights."""
    for case in check_fused_ffn.cases():
        x, w13, b13, w2, b2, variant = case.args
        d_ff = w13.shape[0] // 2
        ffn = FFN.from_variant(variant, x.shape[-1], d_ff, bias=True).double()
        with torch.no_grad():
            ffn.w1.weight.copy_(w13[:d_ff])
            ffn.w3.weight.copy_(w13[d_ff:])
            ffn.w2.weight.copy_(w2)
            ffn.w1.bias.copy_(b13[:d_ff] if b13 is not None else torch.zeros(d_ff))
            ffn.w3.bias.copy_(b13[d_ff:] if b13 is not None else torch.zeros(d_ff))
            ffn.w2.bias.copy_(b2 if b2 is not None else torch.zeros(x.shape[-1]))
            torch.testing.assert_close(check_fused_ffn.reference(*case.args), ffn(x), atol=1e-12, rtol=1e-10)


def test_fused_ffn_cases_cover_variants_biases_and_shapes():
    cases = check_fused_ffn.cases()
    assert {c.args[5] for c in cases} == set(GATED)
    assert {(c.args[2] is not None, c.args[4] is not None) for c in cases} == {(True, True), (True, False),
                                                                              (False, True), (False, False)}
    assert {c.args[0].dim() for c in cases} == {1, 2, 3}
    assert any(c.args[0].dim() == 2 and c.args[0].shape[0] == 1 for c in cases)


def test_fused_ffn_unlisted_error_fails_without_a_hint():
    wrong = check_fused_ffn.evaluate(lambda x, w13, b13, w2, b2, v: torch.zeros(*x.shape, dtype=x.dtype))
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message


# ---- exercise 4: what a frozen FFN keeps
def _by_measuring(variant, d_model, d_ff):
    ffn = FFN.from_variant(variant, d_model, d_ff, bias=True).requires_grad_(False)
    x = torch.randn(3, d_model, requires_grad=True)
    return int(measure_saved_tensors(lambda: ffn(x), exclude=ffn).per_token(3))


def test_frozen_reference_is_what_pytorch_keeps():
    """A learner who measures instead of predicting gets the checker's answer on every hidden case."""
    assert check_frozen_saved.evaluate(_by_measuring).status == PASSED
    assert {c.args[0] for c in check_frozen_saved.cases()} == set(ALL_VARIANTS)


def test_frozen_unlisted_error_fails_without_a_hint():
    wrong = check_frozen_saved.evaluate(lambda v, d, f: 2 * f)
    assert wrong.status == FAILED and "Likely mistake" not in wrong.message


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.title)
def test_blank_stub_is_not_attempted(ex):
    def stub(*args):
        raise NotImplementedError

    assert "not attempted yet" in ex.evaluate(stub).line()


# ---- the extremes each statement allows (issue 23)
def test_llama_width_cases_cover_the_edges_of_the_statement():
    cases = [c.args for c in check_llama_width.cases()]
    ref = check_llama_width.reference
    assert (1, 4, None) in cases and ref(1, 4, None) == 4               # a multiple larger than the width
    assert (1, 1, 0.5) in cases and ref(1, 1, 0.5) == 1                 # the smallest multiplier on the smallest d
    assert (768, 256, None) in cases and ref(768, 256, None) == 2048    # already a multiple: it stays
    assert (3, 8, 2.0) in cases and ref(3, 8, 2.0) == 16                # a multiple after the multiplier
    assert (10, 1, 1.3) in cases and ref(10, 1, 1.3) == 33              # truncate the product, do not round it
    assert all(k is None or 0.5 <= k <= 2 for _, _, k in cases)
    assert all(isinstance(d, int) and isinstance(m, int) and d >= 1 and m >= 1 for d, m, _ in cases)


def test_llama_width_float_whole_numbers_fail_naming_the_type_and_one_more_multiple_is_named():
    def as_float(d, m, k=None):                        # the statement asks for a Python int
        return float(check_llama_width.reference(d, m, k))

    result = check_llama_width.evaluate(as_float)
    assert (result.status, result.reason) == (FAILED, "type") and "Python float" in result.message

    def one_more(d, m, k=None):
        w = int(8 * d / 3) if k is None else int(k * int(8 * d / 3))
        return m * (w // m + 1)

    wrong = check_llama_width.evaluate(one_more)
    assert wrong.status == FAILED and "already is a multiple" in wrong.message


def test_gate_gradients_cases_cover_the_range_zero_and_a_scalar():
    cases = check_gate_gradients.cases()
    for variant in GATED:
        a_values = torch.cat([c.args[0].reshape(-1) for c in cases if c.args[3] == variant])
        assert a_values.min() == -30 and a_values.max() == 30 and (a_values == 0).any()
    assert any(c.args[0].dim() == 0 for c in cases)
    assert all(c.args[0].dtype == torch.float64 for c in cases)
    assert all(c.args[0].abs().max() <= 30 for c in cases)


def test_gate_gradients_natural_float64_forms_pass_and_float32_gets_a_dtype_note():
    def naive_sigmoid(a, b, gh, variant):             # sigmoid and its slope written with exp, as on paper
        if variant in ("glu", "swiglu"):
            s = 1 / (1 + torch.exp(-a))
            phi, slope = (s, s * (1 - s)) if variant == "glu" else (a * s, s + a * s * (1 - s))
            return gh * slope * b, gh * phi
        return _by_formula(a, b, gh, variant)

    assert check_gate_gradients.evaluate(naive_sigmoid).status == PASSED

    def in_float32(a, b, gh, variant):
        return tuple(t.float() for t in _by_formula(a.float(), b.float(), gh.float(), variant))

    result = check_gate_gradients.evaluate(in_float32)
    assert result.status == FAILED and "float32" in result.message


def test_gate_gradients_tanh_gelu_is_named():
    def tanh_gelu(a, b, gh, variant):
        if variant != "geglu":
            return _by_formula(a, b, gh, variant)
        t = a.clone().requires_grad_()
        value = F.gelu(t, approximate="tanh")
        (slope,) = torch.autograd.grad(value.sum(), t)
        return gh * slope * b, gh * value.detach()

    wrong = check_gate_gradients.evaluate(tanh_gelu)
    assert wrong.status == FAILED and "tanh approximation" in wrong.message


def test_fused_ffn_cases_include_width_one_and_a_batch_of_one():
    cases = check_fused_ffn.cases()
    assert any(c.args[1].shape[0] == 2 for c in cases)                 # d_ff = 1
    assert any(c.args[0].dim() == 3 and c.args[0].shape[:2] == (1, 1) for c in cases)
    assert all(t.dtype == torch.float64 for c in cases for t in c.args[:5] if t is not None)


def test_fused_ffn_in_float32_gets_a_dtype_note():
    phis = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}

    def in_float32(x, w13, b13, w2, b2, variant):
        f = lambda t: None if t is None else t.float()
        a, b = F.linear(f(x), f(w13), f(b13)).chunk(2, dim=-1)
        return F.linear(phis[variant](a) * b, f(w2), f(b2))

    result = check_fused_ffn.evaluate(in_float32)
    assert result.status == FAILED and "float32" in result.message


def test_frozen_cases_include_the_smallest_and_a_wide_layer():
    cases = [c.args for c in check_frozen_saved.cases()]
    assert ("swiglu", 1, 3) in cases and ("relu", 2, 1) in cases and ("reglu", 4096, 11008) in cases
    assert {v for v, _, _ in cases} == set(ALL_VARIANTS)
    assert check_frozen_saved.reference("reglu", 4096, 11008) == 2 * 11008


def test_a_float64_answer_rounded_to_float32_gets_a_dtype_note():
    def rounded(a, b, gh, variant):
        return tuple(t.float() for t in _by_formula(a, b, gh, variant))

    result = check_gate_gradients.evaluate(rounded)
    assert result.status == FAILED and "float32" in result.message
    reference = check_fused_ffn.reference
    result = check_fused_ffn.evaluate(lambda *args: reference(*args).float())
    assert result.status == FAILED and "float32" in result.message


@pytest.mark.parametrize("variants, change", [
    (("relu",), -1), (("reglu",), -1), (GATED, +1), (("gelu", "swish"), +1), (("geglu", "swiglu"), -1),
    (("gelu", "swish"), -1)])
def test_frozen_partial_mistakes_are_named(variants, change):
    def partly(v, d, f):
        return FROZEN_D_FF_TENSORS[v] * f + (change * f if v in variants else 0)

    result = check_frozen_saved.evaluate(partly)
    assert result.status == FAILED and "Likely mistake" in result.message, result.message
    assert "for " + ", ".join(NAMES[v] for v in variants) + ":" in result.message


def test_frozen_d_ff_for_every_variant_gets_the_product_hint():
    """Review 04-r48: the most natural first guess, d_ff for every variant, fails only on the gated variants."""
    result = check_frozen_saved.evaluate(lambda v, d, f: f)
    assert result.status == FAILED and "Likely mistake" in result.message and "φ(a)·b" in result.message


def test_frozen_trainable_count_names_section_3():
    result = check_frozen_saved.evaluate(lambda v, d, f: d + _TRAINABLE_D_FF_TENSORS[v] * f)
    assert "(section 3)" in result.message


# ---- natural wrong answers, each breaking one sentence of its statement (issue 32): each fails, named
def _llama(d, m, k=None):
    w = int(8 * d / 3)
    if k is not None:
        w = int(k * w)
    return m * math.ceil(w / m)


@pytest.mark.parametrize("wrong, hint", [
    (lambda d, m, k=None: m * math.ceil((int(k * 8 * d / 3) if k else int(8 * d / 3)) / m), "untruncated 8·d/3"),
    (lambda d, m, k=None: m * round((int(k * int(8 * d / 3)) if k else int(8 * d / 3)) / m), "*nearest* multiple"),
    (lambda d, m, k=None: m * math.ceil((round(k * int(8 * d / 3)) if k else int(8 * d / 3)) / m), "not truncated"),
    # trial learner 2026-11-27e (H2): the second int() skipped, the float product rounded up to the multiple
    (lambda d, m, k=None: m * math.ceil((k * int(8 * d / 3) if k else int(8 * d / 3)) / m), "not truncated"),
    (lambda d, m, k=None: m * math.ceil(8 * d / 3 * (k or 1) / m), "without truncating"),
    (lambda d, m, k=None: _llama(d, m), "ffn_dim_multiplier was ignored"),
    (lambda d, m, k=None: (int(k * int(8 * d / 3)) if k else int(8 * d / 3)), "multiple_of was ignored"),
    (lambda d, m, k=None: m * ((int(k * int(8 * d / 3)) if k else int(8 * d / 3)) // m), "*down*"),
])
def test_llama_width_natural_wrong_answers_are_named(wrong, hint):
    result = check_llama_width.evaluate(wrong)
    assert result.status == FAILED and "Likely mistake" in result.message and hint in result.message, result.message


def test_llama_width_math_ceil_passes():
    assert check_llama_width.evaluate(_llama).status == PASSED


def test_gate_gradients_sigmoid_slope_for_silu_is_named():
    def sigmoid_slope(a, b, gh, variant):
        if variant != "swiglu":
            return _by_formula(a, b, gh, variant)
        s = torch.sigmoid(a)
        return gh * s * (1 - s) * b, gh * a * s

    result = check_gate_gradients.evaluate(sigmoid_slope)
    assert result.status == FAILED and "sigmoid's own derivative" in result.message


def test_gate_gradients_relu_slope_one_at_zero_is_named():
    def ge(a, b, gh, variant):
        if variant != "reglu":
            return _by_formula(a, b, gh, variant)
        return gh * (a >= 0).to(a.dtype) * b, gh * a.clamp(min=0)

    result = check_gate_gradients.evaluate(ge)
    assert result.status == FAILED and "a > 0, not a >= 0" in result.message


def test_fused_ffn_chunk_on_the_wrong_dimension_fails_with_the_error():
    phis = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}

    def chunk_dim0(x, w13, b13, w2, b2, variant):
        w1, w3 = w13.chunk(2, dim=1)
        return F.linear(phis[variant](F.linear(x, w1)) * F.linear(x, w3), w2, b2)

    result = check_fused_ffn.evaluate(chunk_dim0)
    assert result.status == FAILED and "raised" in result.message


_PHIS = {"glu": torch.sigmoid, "bilinear": lambda t: t, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}


def _output_split_on_tokens(x, w13, b13, w2, b2, variant):     # review 04-round19: chunk(2, dim=0)
    u = x @ w13.T
    if b13 is not None:
        u = u + b13
    gate, content = u.chunk(2, dim=0)
    y = (_PHIS[variant](gate) * content) @ w2.T
    return y + b2 if b2 is not None else y


def _output_sliced_on_tokens(x, w13, b13, w2, b2, variant):    # u[:d_ff], the same mistake written as a slice
    d_ff = w13.shape[0] // 2
    u = F.linear(x, w13, b13)
    return F.linear(_PHIS[variant](u[:d_ff]) * u[d_ff:], w2, b2)


@pytest.mark.parametrize("wrong", [_output_split_on_tokens, _output_sliced_on_tokens])
def test_fused_ffn_split_along_the_tokens_raises_and_is_named(wrong):
    for _ in range(3):
        result = check_fused_ffn.evaluate(wrong)
        assert result.status == FAILED and "raised" in result.message
        assert "split along its first axis" in result.message and result.hint is not None


def test_fused_ffn_token_split_hint_needs_every_case_explained():
    def split_on_tokens_silu_always(x, w13, b13, w2, b2, variant):        # two mistakes: not named
        gate, content = F.linear(x, w13, b13).chunk(2, dim=0)
        return F.linear(F.silu(gate) * content, w2, b2)

    def split_on_tokens_no_b13(x, w13, b13, w2, b2, variant):
        gate, content = F.linear(x, w13).chunk(2, dim=0)
        return F.linear(_PHIS[variant](gate) * content, w2, b2)

    def weight_not_transposed(x, w13, b13, w2, b2, variant):              # raises too, another mistake
        gate, content = (x @ w13).chunk(2, dim=-1)
        return F.linear(_PHIS[variant](gate) * content, w2, b2)

    def raises_always(x, w13, b13, w2, b2, variant):
        raise RuntimeError("shapes")

    for wrong in (split_on_tokens_silu_always, split_on_tokens_no_b13, weight_not_transposed, raises_always):
        result = check_fused_ffn.evaluate(wrong)
        assert result.status == FAILED and "split along its first axis" not in result.message, wrong.__name__


def test_fused_ffn_d_model_one_is_a_case():
    assert any(c.args[0].shape[-1] == 1 for c in check_fused_ffn.cases())


# ---- exercise 5: what a fused gate keeps
def _fused_by_measuring(variant, d_model, d_ff):
    ffn = FFN.from_variant(variant, d_model, d_ff, bias=False)
    x = torch.randn(2, d_model, requires_grad=True)
    return int(measure_saved_tensors(lambda: fused_gate_forward(ffn, x), exclude=ffn).per_token(2))


def test_fused_saved_reference_is_what_pytorch_keeps():
    """A learner who measures FusedGate instead of predicting gets the checker's answer on every hidden case."""
    assert check_fused_saved.evaluate(_fused_by_measuring).status == PASSED


@pytest.mark.parametrize("wrong, hint", [
    (lambda v, d, f: d + _TRAINABLE_D_FF_TENSORS[v] * f, "unfused count of section 3"),
    (lambda v, d, f: d + 2 * f, "W2's input h"),
    (lambda v, d, f: 3 * f, "x (d per token) is still kept"),
    (lambda v, d, f: d + (_TRAINABLE_D_FF_TENSORS[v] - 1) * f, "does not drop a tensor for GLU"),
    (lambda v, d, f: d + 4 * f, "recomputed from a"),
])
def test_fused_saved_natural_wrong_answers_are_named(wrong, hint):
    result = check_fused_saved.evaluate(wrong)
    assert result.status == FAILED and hint in result.message, result.message


def test_fused_saved_unlisted_error_fails_without_a_hint():
    result = check_fused_saved.evaluate(lambda v, d, f: 2 * d + 3 * f)
    assert result.status == FAILED and "Likely mistake" not in result.message


def test_attempted_tells_a_stub_from_an_answer():
    def stub(*args):
        raise NotImplementedError

    assert not attempted(check_fused_saved, stub)
    assert attempted(check_fused_saved, lambda v, d, f: 0)
    assert attempted(check_frozen_saved, lambda v, d, f: 0)


def test_review_04_round8_wrong_answers_are_named():
    """Review 04-round8: ceil(8d/3) for int(8d/3) in Exercise 1; a kept beside σ(a) and b for a frozen GLU."""
    def width(d, m, k=None):
        w = math.ceil(8 * d / 3)
        if k is not None:
            w = int(k * w)
        return m * math.ceil(w / m)

    result = check_llama_width.evaluate(width)
    assert result.status == FAILED and "rounded 2·4·d_model/3 up" in result.message, result.message
    from helpers.exercises.nb04 import _saved_when_frozen, check_frozen_saved
    result = check_frozen_saved.evaluate(lambda v, d, f: _saved_when_frozen(v, d, f) + (f if v == "glu" else 0))
    assert result.status == FAILED and "σ's derivative comes from its output" in result.message, result.message


def test_a_prediction_that_raises_is_not_measured_against():
    """Trial learner 2026-11-27g: the measurement cells of Exercises 4 and 5 ran a prediction that raised."""
    from helpers.exercises.nb04 import attempted, check_frozen_saved

    def raises(variant, d_model, d_ff):
        raise ValueError("unknown variant")

    def stub(variant, d_model, d_ff):
        raise NotImplementedError

    assert not attempted(check_frozen_saved, raises) and not attempted(check_frozen_saved, stub)
    assert attempted(check_frozen_saved, lambda v, d, f: 0)


def _tanh_gelu_parts(a):
    t = a.clone().requires_grad_()
    value = F.gelu(t, approximate="tanh")
    (slope,) = torch.autograd.grad(value.sum(), t)
    return value.detach(), slope


def test_gate_gradients_tanh_gelu_in_one_place_is_named_and_the_exact_one_passes():
    """Review 04-round34: the tanh GELU for φ(a) alone, or for φ'(a) alone, gets its own hint."""
    def tanh_value(a, b, gh, variant):
        grad_a, grad_b = _by_formula(a, b, gh, variant)
        return (grad_a, gh * _tanh_gelu_parts(a)[0]) if variant == "geglu" else (grad_a, grad_b)

    def tanh_slope(a, b, gh, variant):
        grad_a, grad_b = _by_formula(a, b, gh, variant)
        return (gh * _tanh_gelu_parts(a)[1] * b, grad_b) if variant == "geglu" else (grad_a, grad_b)

    value = check_gate_gradients.evaluate(tanh_value)
    assert value.status == FAILED and "φ(a) here is the tanh approximation" in value.message
    slope = check_gate_gradients.evaluate(tanh_slope)
    assert slope.status == FAILED and "derivative of GELU's tanh approximation" in slope.message
    assert check_gate_gradients.evaluate(_by_formula).passed


def _output_split_on_axis1(x, w13, b13, w2, b2, variant):      # review 04-round34: chunk(2, dim=1)
    gate, content = F.linear(x, w13, b13).chunk(2, dim=1)
    return F.linear(_PHIS[variant](gate) * content, w2, b2)


def _output_sliced_on_axis1(x, w13, b13, w2, b2, variant):     # u[:, :d_ff], the same mistake written as a slice
    d_ff = w13.shape[0] // 2
    u = F.linear(x, w13, b13)
    return F.linear(_PHIS[variant](u[:, :d_ff]) * u[:, d_ff:], w2, b2)


@pytest.mark.parametrize("wrong", [_output_split_on_axis1, _output_sliced_on_axis1])
def test_fused_ffn_split_along_axis1_raises_and_is_named(wrong):
    result = check_fused_ffn.evaluate(wrong)
    assert result.status == FAILED and "raised" in result.message
    assert "split along axis 1" in result.message and result.hint is not None


def test_fused_ffn_axis1_hint_needs_every_case_explained_and_the_last_axis_passes():
    def axis1_silu_always(x, w13, b13, w2, b2, variant):                    # two mistakes: not named
        gate, content = F.linear(x, w13, b13).chunk(2, dim=1)
        return F.linear(F.silu(gate) * content, w2, b2)

    result = check_fused_ffn.evaluate(axis1_silu_always)
    assert result.status == FAILED and "axis 1" not in result.message

    def last_axis(x, w13, b13, w2, b2, variant):
        gate, content = F.linear(x, w13, b13).chunk(2, dim=-1)
        return F.linear(_PHIS[variant](gate) * content, w2, b2)

    assert check_fused_ffn.evaluate(last_axis).passed
