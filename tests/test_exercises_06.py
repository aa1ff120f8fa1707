"""Notebook 06's checkers: the extremes each statement allows, other correct forms (float32 and float64, loops,
tensors), unlisted wrong answers (the generic contract for every checker is in test_exercise_contract.py).
"""
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.costs import ffn_flops_per_token
from helpers.exercises import nb06 as ex
from helpers.exercises.engine import FAILED, PASSED
from helpers.tensor_parallel import tensor_parallel_bytes_per_token

ROOT = Path(__file__).resolve().parent.parent

EXERCISES = {
    "flops": ex.check_model_flops,
    "degree": ex.check_tp_degree,
    "tp": ex.check_tensor_parallel,
    "splits": ex.check_split_sizes,
    "intensity": ex.check_moe_intensity,
    "decode": ex.check_decode_batch,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "flops": lambda *a: ex.model_flops_reference(*a) + 1,
    "degree": lambda *a: ex.largest_tp_degree_reference(*a) + 1,
    "splits": lambda ei, kept, e, w: [int(kept.sum())] + [0] * (w - 1),
    "tp": lambda *a: (ex.tensor_parallel_reference(*a)[0][::-1], ex.tensor_parallel_reference(*a)[1]),
    "intensity": lambda *a: 1.5 * ex.intensity_reference(*a),
    "decode": lambda *a: ex.decode_batch_reference(*a) + 1,
}


def test_two_investigate_exercises_and_the_rest_build():
    assert [e.kind for e in ex.EXERCISES] == ["build", "build", "build", "build", "investigate", "investigate"]


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


# ----------------------------------------------------------------------------- 1. FLOPs per token

def test_flops_cases_cover_every_attention_layout_and_the_extremes():
    args = [c.args for c in ex.check_model_flops.cases()]
    assert any(a[3] == a[2] for a in args), "no grouping (n_kv_heads == n_heads)"
    assert any(a[3] == 1 for a in args), "multi-query attention"
    assert any(1 < a[3] < a[2] for a in args), "grouped-query attention"
    assert any(a[5] == 1 for a in args) and any(a[0] == 1 for a in args), "a one-token context, one layer"
    assert {a[6] for a in args} == {True, False}
    assert any(a[1] >= 16384 and a[5] >= 131072 for a in args), "a large model at a long context"


def test_flops_a_float_result_fails_naming_the_python_int_and_the_llama3_8b_figure():
    """Trial 2026-11-27 (P4): the head size by `/` gives a float; the statement fixes a Python int, and its
    arguments have no upper bound, so the float loses digits on the count beyond 2**53 (trial 2026-11-27d)."""
    def with_floats(n_layers, d_model, n_heads, n_kv_heads, d_ff, n_ctx, training):
        head = d_model / n_heads
        per_layer = 2.0 * (2 * d_model ** 2 + 2 * d_model * n_kv_heads * head + 3 * d_model * d_ff + 2 * n_ctx * d_model)
        return n_layers * per_layer * (3 if training else 1)

    result = ex.check_model_flops.evaluate(with_floats)
    assert result.status == FAILED and "beyond 2**53" in result.message, result.message
    for other in (lambda *a: np.int64(ex.model_flops_reference(*a)), lambda *a: torch.tensor(ex.model_flops_reference(*a))):
        result = ex.check_model_flops.evaluate(other)
        assert result.status == FAILED and "int(...)" in result.message, result.message
    cfg = ex.LLAMA3_8B
    n_matrix = cfg["n_layers"] * (2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert n_matrix == 6_979_321_856                                   # Llama-3-8B without embeddings and norms
    full = ex.model_flops_reference(*cfg.values(), True)
    assert round(full / (6 * n_matrix), 3) == 1.308


# ----------------------------------------------------------------------------- 2. the largest hidden TP degree

def _by_the_library(d_model, d_ff, k, gated, s, link_ratio, max_ranks):
    """The largest R by the notebook's own counters (cell 35): a rank's FLOPs over its bytes sent, in fractions."""
    best = 1
    flops = k * ffn_flops_per_token(d_model, d_ff, gated=gated, backward=True)
    for r in range(2, max_ranks + 1):
        sent = Fraction(tensor_parallel_bytes_per_token(d_model, r, bytes_per_element=s, backward=True)).limit_denominator(r)
        if Fraction(flops, r) / sent < link_ratio:
            break
        best = r
    return best


def test_tp_degree_reference_is_the_largest_R_by_the_library_counts():
    for case in ex.check_tp_degree.cases():
        assert ex.largest_tp_degree_reference(*case.args) == _by_the_library(*case.args), case.note
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        draw = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))    # noqa: E731
        args = (draw(1, 300), draw(1, 5000), draw(1, 9), bool(draw(0, 2)), [1, 2, 4][draw(0, 3)], draw(1, 3000),
                draw(1, 70))
        assert ex.largest_tp_degree_reference(*args) == _by_the_library(*args), args


def test_tp_degree_cases_hold_the_notebooks_numbers():
    """Cell 36: Mixtral's experts hide up to R = 30 by bytes behind NVLink, capped at its 8 GPUs; 4 over InfiniBand."""
    answers = {c.args: ex.largest_tp_degree_reference(*c.args) for c in ex.check_tp_degree.cases()}
    assert answers[(4096, 14336, 2, True, 2, 2198, 8)] == 8 and answers[(4096, 14336, 2, True, 2, 2198, 64)] == 30
    assert answers[(4096, 14336, 2, True, 2, 19780, 64)] == 4


def _hint(result):
    return result.message.split("Likely mistake: ")[1] if "Likely mistake: " in result.message else None


def _learner_degree(d_model, d_ff, k, gated, bytes_per_element, link_ratio, max_ranks, *, split_flops=True,
                    passes=2, ring=True, op="ge", use_k=True, cap=True, matrices=None, s=None, start=1,
                    flops_per_multiply_add=6):
    """A learner's exact loop over R (Fractions: a float ratio misses an exact fit), one sentence changed at a time."""
    matrices = (3 if gated else 2) if matrices is None else matrices
    s = bytes_per_element if s is None else s
    best = start
    for r in range(2, (max_ranks if cap else 10 ** 6) + 1):
        flops = Fraction(flops_per_multiply_add * matrices * (k if use_k else 1) * d_model * d_ff, r if split_flops else 1)
        sent = passes * 2 * (Fraction(r - 1, r) if ring else 1) * d_model * s
        if not (flops / sent >= link_ratio if op == "ge" else flops / sent > link_ratio):
            break
        best = r
    return best


def test_tp_degree_a_float_loop_and_a_closed_form_pass():
    assert ex.check_tp_degree.evaluate(_learner_degree).status == PASSED
    closed = lambda d, f, k, g, s, rho, cap: min(cap, 1 + math.floor((18 if g else 12) * k * f / (4 * s * rho)))  # noqa: E731
    assert ex.check_tp_degree.evaluate(closed).status == PASSED


@pytest.mark.parametrize("change, words", [
    (dict(split_flops=False), "1/R of a token's FLOPs"), (dict(passes=1), "two all-reduces"),
    (dict(passes=1, ring=True), "half the bytes"),  # review 06-round7 E2: two all-reduces, a ring share of (R−1)/R
    (dict(ring=False), "ring all-reduce"), (dict(op="gt"), "at least"), (dict(use_k=False), "k experts"),
    (dict(cap=False), "max_ranks"), (dict(matrices=3), "read `gated`"), (dict(matrices=2), "12·d_model·d_ff"),
    (dict(s=1), "bytes_per_element"), (dict(start=0), "never 0"),
    (dict(flops_per_multiply_add=2, passes=1), "forward pass only")])  # review 06-round11: forward only
def test_tp_degree_natural_wrong_answers_fail_with_their_hint(change, words):
    _hinted(ex.check_tp_degree, lambda *a, c=change: _learner_degree(*a, **c), words)


def test_tp_degree_a_float_ratio_fails_at_an_exact_fit_with_its_hint():
    """Trial learner 2026-11-27e (M2): the ratio in floats is 161.99999... at R = 5 for a link ratio of 162."""
    result = ex.check_tp_degree.evaluate(ex._float_ratio_degree)
    assert result.status == FAILED and "float division" in result.message, result.message
    assert ex._float_ratio_degree(4096, 144, 1, True, 1, 162, 1024) == 4


def test_tp_degree_a_float_or_a_numpy_int_fails_as_a_type():
    for convert in (float, np.int64):
        result = ex.check_tp_degree.evaluate(lambda *a, c=convert: c(_learner_degree(*a)))
        assert (result.status, result.reason) == (FAILED, "type"), result.message


# ----------------------------------------------------------------------------- 3. tensor parallel by hand

def test_tensor_parallel_cases_cover_uneven_blocks_one_rank_and_one_token():
    cases = ex.check_tensor_parallel.cases()
    assert any(c.args[1].shape[0] % c.args[5] for c in cases), "a d_ff that does not split evenly"
    assert any(c.args[5] == 1 for c in cases) and any(c.args[0].shape[0] == 1 for c in cases)
    assert any(c.args[5] == c.args[1].shape[0] for c in cases), "one hidden unit per rank"
    assert all(c.args[2].abs().min() > 0 and c.args[4].abs().min() > 0 for c in cases), "biases present"
    assert all(a.dtype == torch.float64 for c in cases for a in c.args[:5]), "the statement says float64"


def test_tensor_parallel_in_float32_gets_a_dtype_note_not_a_hint():
    def in_float32(x, w1, b1, w2, b2, n_parts):
        x, w1, b1, w2, b2 = (t.float() for t in (x, w1, b1, w2, b2))
        parts = [F.gelu(x @ w1[b].T + b1[b]) @ w2[:, b].T for b in torch.tensor_split(torch.arange(w1.shape[0]), n_parts)]
        return parts, sum(parts) + b2

    result = ex.check_tensor_parallel.evaluate(in_float32)
    assert result.status == FAILED and "float32" in result.message and "Likely mistake" not in result.message


def test_tensor_parallel_partials_match_the_library():
    from helpers.ffn import FFN
    from helpers.tensor_parallel import tensor_parallel_partials

    torch.manual_seed(0)
    ffn = FFN.from_variant("gelu", 8, 30).double()
    x = torch.randn(5, 8, dtype=torch.float64)
    w = (ffn.w1.weight, ffn.w1.bias, ffn.w2.weight, ffn.w2.bias)
    parts, y = ex.tensor_parallel_reference(x, *w, 4)
    for a, b in zip(parts, tensor_parallel_partials(ffn, x, 4)):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)
    assert torch.allclose(y, ffn(x), atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- 4. split sizes

def test_split_sizes_example_catches_expert_floor_divided_by_world_size():
    example = ex.check_split_sizes.cases()[0]
    ei, kept, e, w = example.args
    assert e // w != w and ex.split_sizes_reference(*example.args) == [3, 2]
    assert torch.bincount(ei[kept] // w, minlength=w).tolist() != [3, 2]


def test_split_sizes_accepts_a_tensor_or_a_tuple():
    def as_tensor(ei, kept, e, w):
        return torch.bincount(ei[kept] // (e // w), minlength=w)

    assert ex.check_split_sizes.evaluate(as_tensor).status == PASSED
    assert ex.check_split_sizes.evaluate(lambda *a: tuple(as_tensor(*a).tolist())).status == PASSED


def test_split_sizes_wrong_length_is_reported():
    result = ex.check_split_sizes.evaluate(lambda ei, kept, e, w: [0])
    assert result.status == FAILED and "items" in result.message


def test_split_cases_cover_empty_ranks_all_dropped_k_equal_e_one_rank_and_one_token():
    cases = ex.check_split_sizes.cases()
    answers = [ex.split_sizes_reference(*c.args) for c in cases]
    assert any(a[-1] == 0 for a in answers), "the last rank receives nothing"
    assert any(a[0] == 0 for a in answers), "the first rank receives nothing"
    assert any(sum(a) == 0 for a in answers), "every slot dropped"
    assert any(c.args[0].shape[1] == c.args[2] for c in cases), "k = E"
    assert any(c.args[3] == 1 for c in cases) and any(c.args[3] == c.args[2] for c in cases), "W = 1 and W = E"
    assert any(c.args[0].shape[0] == 1 for c in cases), "one token"
    assert len({tuple(c.args[0].shape) for c in cases}) >= 4


# ----------------------------------------------------------------------------- 5. MoE intensity

def test_intensity_cases_cover_decode_one_expert_all_experts_k_equal_e_and_formats():
    cases = ex.check_moe_intensity.cases()
    assert any(c.args[0].shape[0] == 1 for c in cases)
    assert any(torch.unique(c.args[0]).numel() == 1 for c in cases)
    assert any(torch.unique(c.args[0]).numel() == c.args[1] for c in cases)
    assert any(c.args[0].shape[1] == c.args[1] for c in cases), "k = E"
    assert any(int(c.args[0].max()) == c.args[1] - 1 for c in cases), "the last expert id"
    assert {c.args[5] for c in cases} >= {1, 2, 4} and {c.args[4] for c in cases} == {True, False}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_intensity_accepts_tensor_arithmetic_in_either_float_dtype(dtype):
    def with_tensors(expert_index, n_experts, d_model, d_ff, gated, bytes_per_element):
        n, k = expert_index.shape
        m = 3 if gated else 2
        flops = torch.tensor(2.0 * n * k * m * d_model * d_ff, dtype=dtype)
        read = torch.tensor(float(torch.unique(expert_index).numel() * m * d_model * d_ff * bytes_per_element),
                            dtype=dtype)
        return flops / read

    assert ex.check_moe_intensity.evaluate(lambda *a: with_tensors(*a).item()).status == PASSED
    result = ex.check_moe_intensity.evaluate(with_tensors)      # the statement asks for a Python float
    assert result.reason == "type" and "Python float" in result.message, result.message


# ----------------------------------------------------------------------------- the notebook's follow-ups

def test_follow_ups_that_use_a_learners_function_run_only_after_its_check_passed():
    nb = json.loads((ROOT / "notebooks" / "06_ffn_at_scale.ipynb").read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for fn, check in [("flops_per_token", "check_model_flops"), ("moe_step_intensity", "check_moe_intensity"),
                      ("fewest_sequences", "check_decode_batch")]:
        users = [c for c in code if re.search(rf"(?<![\w.]){fn}\(", c) and f"def {fn}(" not in c]
        assert users, f"a follow-up uses {fn}"
        for cell in users:                 # a knob may come first; every use sits under the passing check
            lines = cell.splitlines()
            guard = [i for i, line in enumerate(lines)
                     if re.fullmatch(rf"if {check}\.(?:passes\({fn}\)|evaluate\({fn}\)\.passed):", line)]
            assert len(guard) == 1, cell
            other = lines[:guard[0]] + [line for line in lines[guard[0]:] if not line.startswith((" ", "if "))]
            assert not any(re.search(rf"(?<![\w.]){fn}\(", line) for line in other), cell
        printed = ["".join("".join(o.get("text", "")) for o in c["outputs"])      # a print may arrive in pieces
                   for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]) in users]
        assert all("must pass before" in text for text in printed)


def test_mixtral_and_deepseek_batches_in_the_follow_up_are_what_the_formula_says():
    assert math.ceil(295.2 * 4) == 1181 and math.ceil(295.2 * 32) == 9447


# ----------------------------------------------------------------------------- declared domains

def test_every_exercise_is_listed_in_order_and_declares_a_domain_its_cases_respect():
    assert ex.EXERCISES == list(EXERCISES.values())
    for exercise in ex.EXERCISES:
        assert exercise.domain is not None and exercise.uncovered() == []
    for c in ex.check_model_flops.cases():
        n_layers, d, heads, kv, d_ff, n_ctx, training = c.args
        assert min(n_layers, d, heads, kv, d_ff, n_ctx) >= 1 and d % heads == 0 and heads % kv == 0
        assert isinstance(training, bool) and all(type(a) is int for a in c.args[:6])
    for c in ex.check_tp_degree.cases():
        d, f, k, gated, size, ratio, cap = c.args
        assert all(type(a) is int for a in (d, f, k, size, ratio, cap)) and isinstance(gated, bool)
        assert d >= 1 and 1 <= f <= 10 ** 6 and 1 <= k <= 256 and size in (1, 2, 4) and 1 <= ratio <= 10 ** 5
        assert 1 <= cap <= 1024
    for c in ex.check_tensor_parallel.cases():
        x, w1, b1, w2, b2, parts = c.args
        assert 1 <= parts <= w1.shape[0] and w2.shape == (x.shape[1], w1.shape[0]) and b2.shape == (x.shape[1],)
    for exercise in (ex.check_split_sizes, ex.check_moe_intensity):
        for c in exercise.cases():
            index, n_experts = c.args[0], c.args[2] if exercise is ex.check_split_sizes else c.args[1]
            assert index.dtype == torch.int64 and index.shape[0] >= 1 and index.shape[1] <= n_experts
            assert int(index.min()) >= 0 and int(index.max()) < n_experts
            assert all(len(set(row)) == len(row) for row in index.tolist()), "distinct experts per row"
    assert all(c.args[2] % c.args[3] == 0 for c in ex.check_split_sizes.cases())
    assert {c.args[5] for c in ex.check_moe_intensity.cases()} == {1, 2, 4}


def test_the_references_leave_their_inputs_unchanged():
    for exercise in ex.EXERCISES:
        for case in exercise.cases():
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in case.args]
            exercise.reference(*case.args)
            for a, b in zip(case.args, before):
                assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), exercise.title


# ----------------------------------------------------------------------------- natural wrong answers (trial, review)

def _hinted(exercise, fn, words):
    result = exercise.evaluate(fn)
    assert result.status == FAILED, result.message
    hint = _hint(result)
    assert hint is not None and words in hint, result.message
    return result


def _learner_flops(n_layers, d_model, n_heads, n_kv_heads, d_ff, n_ctx, training, *, kv_square=False,
                   attn="both", ffn=3, train_factor=3, mac=2, layers=True):
    head = d_model // n_heads
    kv = d_model if kv_square else n_kv_heads * head
    context = {"both": 2 * n_ctx * d_model, "qk_only": n_ctx * d_model, "none": 0,
               "kv_width": 2 * n_ctx * kv}[attn]
    per_layer = mac * (2 * d_model * d_model + 2 * d_model * kv + context + ffn * d_model * d_ff)
    total = per_layer * (n_layers if layers else 1)
    return total * train_factor if training else total


@pytest.mark.parametrize("change, words", [
    (dict(kv_square=True), "grouped-query"), (dict(attn="qk_only"), "without the mixing AV"),
    (dict(attn="none"), "left them out"), (dict(attn="kv_width"), "every query head"),
    (dict(ffn=2), "three weight matrices"), (dict(train_factor=2), "3× the forward"),
    (dict(mac=1), "2 FLOPs"), (dict(layers=False), "n_layers")])
def test_flops_natural_wrong_answers_fail_with_their_hint(change, words):
    _hinted(ex.check_model_flops, lambda *a: _learner_flops(*a, **change), words)


def test_flops_head_size_with_true_division_passes_within_the_declared_domain():
    assert ex.check_model_flops.evaluate(
        lambda L, d, h, kv, f, t, tr: int(_learner_flops(L, d, h, kv, f, t, tr))).status == PASSED


def _learner_tp(x, w1, b1, w2, b2, n_parts, *, blocks="split", b2_every=False, approximate="none"):
    units = torch.arange(w1.shape[0])
    chosen = {"split": torch.tensor_split(units, n_parts), "chunk": torch.chunk(units, n_parts),
              "strided": [units[r::n_parts] for r in range(n_parts)]}[blocks]
    parts = [F.gelu(x @ w1[b].T + b1[b], approximate=approximate) @ w2[:, b].T + (b2 if b2_every else 0)
             for b in chosen]
    return parts, sum(parts) + (0 if b2_every else b2)


@pytest.mark.parametrize("change, words", [
    (dict(b2_every=True), "every rank"), (dict(blocks="chunk"), "torch.chunk"),
    (dict(blocks="strided"), "contiguous block"), (dict(approximate="tanh"), "tanh approximation")])
def test_tensor_parallel_natural_wrong_answers_fail_with_their_hint(change, words):
    _hinted(ex.check_tensor_parallel, lambda *a: _learner_tp(*a, **change), words)


def test_tensor_parallel_split_of_the_input_dimension_fails():
    def split_d(x, w1, b1, w2, b2, n_parts):
        cols = torch.tensor_split(torch.arange(w1.shape[1]), n_parts)
        parts = [F.gelu(x[:, c] @ w1[:, c].T + b1 / n_parts) @ w2.T for c in cols]
        return parts, sum(parts) + b2
    assert ex.check_tensor_parallel.evaluate(split_d).status == FAILED


@pytest.mark.parametrize("fn, words", [
    (lambda ei, kept, e, w: torch.bincount((ei // (e // w)).reshape(-1), minlength=w).tolist(), "dropped"),
    (lambda ei, kept, e, w: torch.bincount(ei[kept] % w, minlength=w).tolist(), "round-robin"),
    (lambda ei, kept, e, w: torch.bincount(ei[kept] // (e // w)).tolist(), "minlength"),
    (lambda ei, kept, e, w: [int((((ei // (e // w)) == r) & kept).any(1).sum()) for r in range(w)], "(token, slot)"),
    (lambda ei, kept, e, w: torch.bincount(ei[kept] // w, minlength=w).tolist(), "expert // (n_experts"),
    (lambda ei, kept, e, w: [int(((ei // w == r) & kept).sum()) for r in range(w)], "expert // (n_experts")])
def test_split_sizes_natural_wrong_answers_fail_with_their_hint(fn, words):
    _hinted(ex.check_split_sizes, fn, words)


def _learner_intensity(expert_index, n_experts, d_model, d_ff, gated, bytes_per_element, *, read="used", k=True,
                       floor=False, mac=2):
    n, top = expert_index.shape
    m = 3 if gated else 2
    used = {"used": len(set(expert_index.reshape(-1).tolist())), "all": n_experts}[read]
    flops = mac * n * (top if k else 1) * m * d_model * d_ff
    n_bytes = used * m * d_model * d_ff * bytes_per_element
    return float(flops // n_bytes) if floor else flops / n_bytes


@pytest.mark.parametrize("change, words", [
    (dict(read="all"), "all n_experts"), (dict(k=False), "k experts"), (dict(floor=True), "not //"),
    (dict(mac=1), "2 FLOPs")])
def test_intensity_natural_wrong_answers_fail_with_their_hint(change, words):
    _hinted(ex.check_moe_intensity, lambda *a: _learner_intensity(*a, **change), words)


# ----------------------------------------------------------------------------- 6. the decode batch

def _intensity_of_step(batch, target, context, n_weights, s, layers, d, kv):
    """FLOPs − target·bytes of a decode step of ``batch`` sequences, exactly (>= 0: the step reaches target)."""
    return batch * (2 * n_weights + 4 * layers * context * d) - target * (s * n_weights + batch * context * kv)


def test_decode_reference_is_the_smallest_batch_by_direct_search():
    gen = torch.Generator().manual_seed(1)
    draw = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))    # noqa: E731
    for _ in range(300):
        args = (draw(1, 60), draw(0, 40), draw(1, 3000), [1, 2, 4][draw(0, 3)], draw(1, 4), draw(1, 16), draw(1, 400))
        answer = ex.decode_batch_reference(*args)
        reaching = [b for b in range(1, 5000) if _intensity_of_step(b, *args) >= 0]
        if answer == 0:
            assert _intensity_of_step(10 ** 9, *args) < 0, args          # not even a huge batch
        else:
            assert reaching and reaching[0] == answer, args


def test_decode_cases_respect_the_declared_bounds_and_hold_the_llama_crossover():
    for c in ex.check_decode_batch.cases():
        t, ctx, n, s, layers, d, kv = c.args
        assert all(type(a) is int for a in c.args)
        assert 1 <= t <= 1000 and 0 <= ctx <= 131072 and 1 <= n <= 10 ** 12 and s in (1, 2, 4)
        assert 1 <= layers <= 200 and 1 <= d <= 32768 and 1 <= kv <= 10 ** 7
        assert t * s * n < 2 ** 53
    llama = tuple(ex.LLAMA3_8B_DECODE.values())
    assert ex.decode_batch_reference(295, 393, *llama) > 0 == ex.decode_batch_reference(295, 394, *llama)
    from helpers.inference import H100_SXM, decode_intensity_limit, dense_param_counts
    counts = dense_param_counts()
    assert ex.LLAMA3_8B_DECODE["n_weights"] == counts["total"] - counts["input_embedding"]
    assert decode_intensity_limit(393) >= H100_SXM.ridge > decode_intensity_limit(394)   # the library agrees


def test_decode_float_division_and_bisection_answers_pass():
    """The statement's bounds keep target·s·n below 2**53, so float division is exact enough: it passes."""
    def with_floats(t, ctx, n, s, layers, d, kv):
        margin = 2.0 * n + 4.0 * layers * ctx * d - 1.0 * t * ctx * kv
        return 0 if margin <= 0 else int(math.ceil(t * s * n / margin))

    def bisection(t, ctx, n, s, layers, d, kv):
        reaches = lambda b: b * (2 * n + 4 * layers * ctx * d) >= t * (s * n + b * ctx * kv)   # noqa: E731
        if ctx and 2 * n + 4 * layers * ctx * d <= t * ctx * kv:
            return 0
        lo, hi = 0, 1
        while not reaches(hi):
            hi *= 2
        while hi - lo > 1:
            lo, hi = (lo, (lo + hi) // 2) if reaches((lo + hi) // 2) else ((lo + hi) // 2, hi)
        return hi

    assert ex.check_decode_batch.evaluate(with_floats).status == PASSED
    assert ex.check_decode_batch.evaluate(bisection).status == PASSED


def _learner_decode(t, ctx, n, s, layers, d, kv, *, cache=True, attention=4, shared=False, none=0, op="ge",
                    rounding="ceil"):
    flops_each = 2 * n + attention * layers * ctx * d
    if shared:
        return math.ceil(t * (s * n + ctx * kv) / flops_each)
    if not cache:
        return math.ceil(t * s / 2)
    margin = flops_each - t * ctx * kv
    if margin <= 0:
        return none
    need = t * s * n
    if op == "gt":
        return need // margin + 1
    return -(-need // margin) if rounding == "ceil" else need // margin


@pytest.mark.parametrize("change, words", [
    (dict(cache=False), "only the weights"), (dict(shared=True), "not shared"), (dict(attention=0), "left them out"),
    (dict(attention=2), "half of it"), (dict(none=-1), "-1"), (dict(op="gt"), "not one more"),
    (dict(rounding="floor"), "not the floor")])
def test_decode_natural_wrong_answers_fail_with_their_hint(change, words):
    _hinted(ex.check_decode_batch, lambda *a: _learner_decode(*a, **change), words)


def test_decode_a_strict_limit_test_fails_on_the_limit_exactly_at_the_target():
    def strict_limit(t, ctx, n, s, layers, d, kv):
        if ctx and (2 * n + 4 * layers * ctx * d) / (ctx * kv) < t:      # < where <= is needed
            return 0
        return math.ceil(t * s * n / (2 * n + 4 * layers * ctx * d - t * ctx * kv))

    result = ex.check_decode_batch.evaluate(strict_limit)
    assert result.status == FAILED and "ZeroDivisionError" in result.message and "exactly at the target" in \
        result.message


def test_decode_a_loop_over_batches_passes_within_the_time_limit():
    def one_by_one(t, ctx, n, s, layers, d, kv):
        if ctx and (2 * n + 4 * layers * ctx * d) <= t * ctx * kv:
            return 0
        b = 1
        while b * (2 * n + 4 * layers * ctx * d) < t * (s * n + b * ctx * kv):
            b += 1
        return b

    assert max(ex.decode_batch_reference(*c.args) for c in ex.check_decode_batch.cases()) < 10 ** 6
    assert ex.check_decode_batch.evaluate(one_by_one).status == PASSED


def test_decode_a_search_that_gives_up_early_fails():
    """Trial learner 2026-11-27f: a search capped at 10**6 passed when no answer came near it; the statement now
    bounds the answer below 10**6 and a case reaches 971,623, so a search that gives up at 500,000 fails."""
    def fewest(target, context, n_weights, bytes_per_weight, n_layers, d_model, kv_bytes_per_token):
        for batch in range(1, 500_000):
            flops = batch * (2 * n_weights + 4 * n_layers * context * d_model)
            if flops >= target * (bytes_per_weight * n_weights + batch * context * kv_bytes_per_token):
                return batch
        return 0

    result = ex.check_decode_batch.evaluate(fewest)
    assert result.status == FAILED and "971623" in result.message.replace(",", ""), result.message


def test_decode_a_non_positive_margin_answered_1_is_named():
    """Review 06-round8 E1: a ceiling clamped to at least 1 returns 1 where no batch reaches the target."""
    def fewest(target, context, n_weights, bytes_per_weight, n_layers, d_model, kv_bytes_per_token):
        margin = 2 * n_weights + 4 * n_layers * context * d_model - target * context * kv_bytes_per_token
        if margin <= 0:
            return 1
        return -(-target * bytes_per_weight * n_weights // margin)

    result = ex.check_decode_batch.evaluate(fewest)
    assert result.status == FAILED and "you returned 1" in result.message, result.message
