"""Checkers of notebook 08: the debug exercises' buggy code as the notebook gives it, the debug ladder (the
symptom first, the wrong fix or the class of bug only once a changed function fails again, never the fix), fixes
in several styles, plausible wrong fixes and their hints, and the extreme inputs the statements allow.

The generic contract (reference passes, blank stubs, every listed mistake hinted, one line, hostile input,
time limit) is tested for every exercise in ``test_exercise_contract.py``.
"""
import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import torch

from helpers.exercises import nb08
from helpers.exercises.engine import CLUE_PREFIX, FAILED, HINT_PREFIX, NOT_ATTEMPTED, PASSED
from helpers.moe import MoE, load_balancing_loss

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "08_ffn_in_real_code.ipynb"
SOLUTIONS = ROOT / "notebooks" / "solutions" / "08_ffn_in_real_code.ipynb"


def _function_from(path: Path, name: str, *, remove_raise: bool = False):
    """The function ``name`` as defined in the notebook's exercise cell (the checker call is not run)."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in source:
            body = source.split("\n\n\ncheck_")[0]
            if remove_raise:
                body = "\n".join(line for line in body.splitlines() if "raise NotImplementedError" not in line)
            namespace = {"torch": torch}
            exec(compile(body, f"<{path.name}: {name}>", "exec"), namespace)
            return namespace[name]
    raise AssertionError(f"no cell defines {name} in {path}")


DEBUG = [(nb08.check_gpt2_loader, "attn_from_gpt2"), (nb08.check_padding_balance, "balance_loss"),
         (nb08.check_group_limited, "group_limited_topk")]
ALL = DEBUG + [(nb08.check_gpt_oss_layout, "gpt_oss_gate_up"), (nb08.check_topk_mass, "mean_topk_mass"),
               (nb08.check_score_on_input, "input_over_output")]


@pytest.fixture(autouse=True)
def _a_fresh_ladder():
    """Every test starts with no failure shown: the debug ladder's first step."""
    for ex in nb08.EXERCISES:
        ex.forget()
    yield
    for ex in nb08.EXERCISES:
        ex.forget()


def _after_a_failure(ex):
    """The ladder's second step: ``check`` has printed a failure in this kernel."""
    with contextlib.redirect_stdout(io.StringIO()):
        ex.check(ex.buggy)
    return ex


def _expect_hint(ex, fn, mistake_index):
    result = _after_a_failure(ex).evaluate(fn)
    assert result.status == FAILED, result.message
    assert HINT_PREFIX + ex.mistakes[mistake_index][0] in result.message, result.message


# ------------------------------------------------------------------ the notebook's own cells
@pytest.mark.parametrize("ex, name", ALL, ids=[n for _, n in ALL])
def test_the_notebook_stub_is_not_attempted_and_the_solution_passes(ex, name):
    assert ex.evaluate(_function_from(NOTEBOOK, name)).status == NOT_ATTEMPTED
    result = ex.evaluate(_function_from(SOLUTIONS, name))
    assert result.status == PASSED, result.message


#: what a fix does, in words a message must never use (the learner finds the fix)
FIXES = {"attn_from_gpt2": r"transpose|\.t\(\)|\.T\b",
         "balance_loss": r"mask (both|it|the)|divide (each |f |P )?by|index (the )?real|attention_mask\.bool",
         "group_limited_topk": r"-inf|fill (it |them )?with|\.sort\(|float\(.-inf.\)"}


@pytest.mark.parametrize("ex, name", DEBUG, ids=[n for _, n in DEBUG])
def test_the_bug_as_given_shows_its_symptom_only(ex, name, capsys):
    """Deleting the raise line without fixing anything fails with the symptom (the case, what differs, how many
    cases) and no hint or class of bug, however often it is run (the ladder's first step)."""
    buggy = _function_from(NOTEBOOK, name, remove_raise=True)
    for _ in range(3):
        ex.check(buggy)
        line = capsys.readouterr().out
        assert line.startswith(f"❌ {ex.title}: ") and " (on " in line, line
        assert HINT_PREFIX not in line and CLUE_PREFIX not in line, line
        assert "still does what the function as given does on every hidden case" in line, line
        assert not re.search(FIXES[name], line, re.I), line


@pytest.mark.parametrize("ex, name", DEBUG, ids=[n for _, n in DEBUG])
def test_the_ladder_a_changed_function_gets_its_lead_only_once_it_fails_again(ex, name, capsys):
    """The first failure of a changed function: the symptom only. Run again after that failure: the wrong fix
    it makes (a listed mistake) or the class of bug."""
    wrong_fix = ex.mistakes[0][1]
    ex.check(wrong_fix)
    first = capsys.readouterr().out
    assert HINT_PREFIX not in first and CLUE_PREFIX not in first and " (on " in first, first
    ex.check(wrong_fix)
    second = capsys.readouterr().out
    assert HINT_PREFIX + ex.mistakes[0][0] in second, second


@pytest.mark.parametrize("ex, name", DEBUG, ids=[n for _, n in DEBUG])
def test_no_message_hint_or_clue_names_the_fix(ex, name):
    texts = [hint for hint, _ in ex.mistakes] + [ex.bug_class]
    for text in texts:
        assert not re.search(FIXES[name], text, re.I), text


@pytest.mark.parametrize("ex, name", DEBUG, ids=[n for _, n in DEBUG])
def test_the_bug_hides_on_some_inputs_and_shows_on_others(ex, name):
    """Real bugs of these kinds pass easy inputs: some hidden case must agree with the bug, most must not."""
    buggy = _function_from(NOTEBOOK, name, remove_raise=True)
    passed = []
    for case in ex.cases():
        expected = ex.reference(*case.args, **case.kwargs)
        got = buggy(*case.args, **case.kwargs)
        same = all(torch.equal(torch.as_tensor(g), torch.as_tensor(e)) or
                   torch.allclose(torch.as_tensor(g).double(), torch.as_tensor(e).double())
                   for g, e in (zip(got, expected) if isinstance(got, tuple) else [(got, expected)]))
        passed.append(same)
    assert any(passed) and not all(passed), passed


# ------------------------------------------------------------------ exercise 1: gpt-oss layout
def test_layout_other_correct_forms_pass():
    def with_loop(w1, w3):
        out = torch.empty(w1.shape[1], 2 * w1.shape[0], dtype=w1.dtype)
        for i in range(w1.shape[0]):
            out[:, 2 * i], out[:, 2 * i + 1] = w1[i], w3[i]
        return out

    def with_cat(w1, w3):
        return torch.cat([w1.T[:, :, None], w3.T[:, :, None]], dim=2).flatten(1)

    for fn in (with_loop, with_cat):
        assert nb08.check_gpt_oss_layout.evaluate(fn).status == PASSED


def test_layout_a_float32_answer_to_a_float64_case_fails():
    def float32(w1, w3):
        return nb08._gpt_oss_gate_up(w1.float(), w3.float())
    assert nb08.check_gpt_oss_layout.evaluate(float32).status == FAILED


def test_layout_covers_vectors_squares_and_extreme_magnitudes():
    cases = nb08.check_gpt_oss_layout.cases()
    shapes = {tuple(c.args[0].shape) for c in cases}
    assert {(1, 1), (1, 5), (6, 1), (3, 3)} <= shapes
    assert {torch.float32, torch.float64} == {c.args[0].dtype for c in cases}
    magnitudes = [float(c.args[0].abs().max()) for c in cases]
    assert max(magnitudes) > 1e20 and min(magnitudes) < 1e-20


# ------------------------------------------------------------------ exercise 2: GPT-2 attention loader
@pytest.mark.parametrize("transpose", [lambda t: t.T, lambda t: t.transpose(0, 1), lambda t: t.permute(1, 0),
                                       lambda t: t.mT, lambda t: t.t().contiguous()],
                         ids=["T", "transpose", "permute", "mT", "contiguous"])
def test_gpt2_fixes_in_every_style_pass(transpose):
    def split_then_transpose(c_attn_w, c_proj_w):
        d = c_proj_w.shape[0]
        return (*[transpose(w) for w in c_attn_w.split(d, dim=1)], transpose(c_proj_w))

    def transpose_then_chunk(c_attn_w, c_proj_w):
        return (*transpose(c_attn_w).chunk(3, dim=0), transpose(c_proj_w))
    for fixed in (split_then_transpose, transpose_then_chunk):
        assert nb08.check_gpt2_loader.evaluate(fixed).status == PASSED


def test_gpt2_wrong_fixes_get_their_hints():
    for i in range(len(nb08.check_gpt2_loader.mistakes)):
        _expect_hint(nb08.check_gpt2_loader, nb08.check_gpt2_loader.mistakes[i][1], i)
    _expect_hint(nb08.check_gpt2_loader, lambda a, c: (*a.view(3 * c.shape[0], c.shape[0]).split(c.shape[0]), c.T), 0)


def test_gpt2_a_partial_fix_is_told_the_class_not_a_wrong_hint():
    """Only W_q transposed: no listed mistake explains it, so the checker names the class of bug."""
    def partial(c_attn_w, c_proj_w):
        w_q, w_k, w_v = c_attn_w.split(c_proj_w.shape[0], dim=1)
        return w_q.t(), w_k, w_v, c_proj_w.t()
    assert CLUE_PREFIX not in nb08.check_gpt2_loader.evaluate(partial).message    # the first failure: symptom only
    result = _after_a_failure(nb08.check_gpt2_loader).evaluate(partial)
    assert result.status == FAILED and result.hint is None, result.message
    assert CLUE_PREFIX + nb08.check_gpt2_loader.bug_class in result.message, result.message


def test_gpt2_another_mistake_is_not_told_the_transpose_class():
    """Blocks transposed but returned in another order: no weight is left untransposed, so no lead to a
    missing transpose (the clue is only given where a returned weight is a block as Conv1D stores it)."""
    def q_k_swapped(c_attn_w, c_proj_w):
        w_q, w_k, w_v, w_o = nb08._attn_from_gpt2(c_attn_w, c_proj_w)
        return w_k, w_q, w_v, w_o
    result = _after_a_failure(nb08.check_gpt2_loader).evaluate(q_k_swapped)
    assert result.status == FAILED and result.hint is None and CLUE_PREFIX not in result.message, result.message


def test_gpt2_cases_include_a_one_by_one_layer_and_float64():
    cases = nb08.check_gpt2_loader.cases()
    assert any(c.args[1].shape == (1, 1) for c in cases)              # where the bug cannot show
    assert any(c.args[0].dtype == torch.float64 for c in cases)
    assert all(c.args[0].shape == (c.args[1].shape[0], 3 * c.args[1].shape[0]) for c in cases)


def test_gpt2_reference_is_the_attention_transformers_builds():
    """The reference's W_q, W_k, W_v, W_o reproduce GPT2Attention's c_attn and c_proj as nn.Linear layers."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
    torch.manual_seed(0)
    attn = GPT2Attention(GPT2Config(n_embd=8, n_head=2)).eval()
    x = torch.randn(5, 8)
    w_q, w_k, w_v, w_o = nb08._attn_from_gpt2(attn.c_attn.weight.detach(), attn.c_proj.weight.detach())
    with torch.no_grad():
        qkv = attn.c_attn(x)
        torch.testing.assert_close(torch.cat([x @ w_q.T, x @ w_k.T, x @ w_v.T], -1) + attn.c_attn.bias, qkv)
        torch.testing.assert_close(x @ w_o.T + attn.c_proj.bias, attn.c_proj(x))


# ------------------------------------------------------------------ exercise 3: padding
def test_padding_reference_equals_the_course_loss_on_real_tokens():
    for case in nb08.check_padding_balance.cases():
        logits, index, mask = case.args
        real = mask.bool()
        expected = load_balancing_loss(torch.softmax(logits[real], -1), index[real])
        torch.testing.assert_close(nb08._balance_loss(logits, index, mask), expected)


def test_padding_other_correct_forms_pass():
    def weighted(router_logits, expert_index, attention_mask):
        m = attention_mask.double()
        probs = torch.softmax(router_logits.double(), -1)
        e = probs.shape[-1]
        one_hot = torch.nn.functional.one_hot(expert_index, e).double().sum(1)   # (N, E) slots per token
        f = (one_hot * m[:, None]).sum(0) / (m.sum() * expert_index.shape[1])
        p = (probs * m[:, None]).sum(0) / m.sum()
        return (e * (f * p).sum()).float()             # computed in float64, returned as the float32 asked for

    def float32_bool(router_logits, expert_index, attention_mask):
        keep = attention_mask == 1
        probs = torch.softmax(router_logits, -1)[keep]
        counts = torch.zeros(probs.shape[1]).index_add_(0, expert_index[keep].flatten(),
                                                         torch.ones(int(keep.sum()) * expert_index.shape[1]))
        return probs.shape[1] * (counts / counts.sum() * probs.mean(0)).sum()

    for fn in (weighted, float32_bool):
        result = nb08.check_padding_balance.evaluate(fn)
        assert result.status == PASSED, result.message
    float64 = nb08.check_padding_balance.evaluate(lambda *a: weighted(*a).double())
    assert float64.reason == "type" and "float64 tensor" in float64.message, float64.message


def test_padding_wrong_fixes_get_their_hints():
    for i in (0, 1, 2):
        _expect_hint(nb08.check_padding_balance, nb08.check_padding_balance.mistakes[i][1], i)


def test_padding_f_per_token_is_named_only_where_it_explains_the_answer():
    """Dividing f by N_real instead of N_real·k gives k × the loss: named (it fails every k > 1 case);
    unmasked and per-token at once is not that mistake; nor is the padding class named, because at k = E the
    padding cannot move the loss and the answer is still wrong there (the clue needs the class in every wrong case).
    Unmasked alone gets its own hint."""
    ex = _after_a_failure(nb08.check_padding_balance)
    result = ex.evaluate(nb08._balance_wrong("f per token"))
    assert result.status == FAILED and "not by their N_real·k slots" in result.hint, result.message
    def both(logits, index, mask):
        probs = torch.softmax(logits, -1)
        counts = torch.bincount(index.reshape(-1), minlength=logits.shape[-1]).float()
        return logits.shape[-1] * (counts / len(index) * probs.mean(0)).sum()
    other = ex.evaluate(both)
    assert other.status == FAILED and other.hint is None and CLUE_PREFIX not in other.message, other.message
    def p_unmasked(logits, index, mask):      # f counts real slots over all slots, P unmasked: no listed mistake
        probs = torch.softmax(logits, -1)
        counts = torch.bincount(index[mask.bool()].reshape(-1), minlength=logits.shape[-1]).to(probs.dtype)
        return logits.shape[-1] * (counts / index.numel() * probs.mean(0)).sum()
    clue = ex.evaluate(p_unmasked)
    assert clue.status == FAILED and CLUE_PREFIX + nb08.check_padding_balance.bug_class in clue.message, clue.message


def test_padding_cases_cover_no_padding_one_real_token_and_k_equal_e():
    cases = nb08.check_padding_balance.cases()
    masks = [c.args[2] for c in cases]
    assert any(bool(m.all()) for m in masks) and any(int(m.sum()) == 1 for m in masks)
    assert any(c.args[1].shape[1] == c.args[0].shape[1] for c in cases)      # k = E
    assert any(c.args[1].shape[1] == 1 for c in cases)                        # k = 1


# ------------------------------------------------------------------ exercise 4: group-limited routing
def _with_fill(fill):
    def fn(scores, bias, k, n_group, topk_group):
        return nb08._group_limited(scores, bias, k, n_group, topk_group, fill=fill)
    return fn


def test_group_fixes_that_make_masked_experts_lose_pass():
    for fill in (float("-inf"), torch.finfo(torch.float32).min, -1e9):
        assert nb08.check_group_limited.evaluate(_with_fill(fill)).status == PASSED


def test_group_small_negative_fills_are_caught_as_the_same_class_of_bug():
    """A fill of -1 or -2 loses to the biased scores of the mixed cases but still wins where every biased score is
    below it: the function as given reproduces it on every case it fails, so (once a failure has been shown) it is
    told the original bug, named by its class, is still there on those inputs. Never the fill to use."""
    for fill in (-1.0, -2.0):
        nb08.check_group_limited.forget()
        first = nb08.check_group_limited.evaluate(_with_fill(fill))
        assert first.status == FAILED and first.hint is None and CLUE_PREFIX not in first.message, first.message
        result = _after_a_failure(nb08.check_group_limited).evaluate(_with_fill(fill))
        assert result.status == FAILED, result.message
        assert f"the original bug ({nb08.check_group_limited.bug_class}) is still there" in result.message, \
            result.message
        assert not re.search(FIXES["group_limited_topk"], result.message), result.message


def test_group_fill_of_minus_100_fails_where_a_tiny_score_rounds_to_the_bias():
    """Trial 2026-11-27 (P2): "bias >= -100 and scores > 0, so -100 always loses". In float32 a score below about
    4e-6 on a bias of -100 gives exactly -100.0, which ties with the fill: the cases with such scores fail it,
    with the symptom first and then the bug's class, never the fix."""
    check = nb08.check_group_limited
    check.forget()
    first = check.evaluate(_with_fill(-100.0))
    assert first.status == FAILED and "rounds to -100" in first.message, first.message
    assert first.hint is None and CLUE_PREFIX not in first.message, first.message
    second = _after_a_failure(check).evaluate(_with_fill(-100.0))
    assert second.status == FAILED and check.bug_class in second.message, second.message
    assert not re.search(FIXES["group_limited_topk"], second.message), second.message
    check.forget()


def test_group_another_ranking_is_not_told_the_masking_class():
    """Groups ranked by their best score (DeepSeek-V2's rule) with a -inf mask: the mask is right, so the
    masking class is not offered as the lead."""
    def by_best(scores, bias, k, n_group, topk_group):
        n, e = scores.shape
        choice = scores + bias
        keep = choice.view(n, n_group, e // n_group).max(-1).values.topk(topk_group, dim=-1).indices
        mask = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
        mask = mask[:, :, None].expand(n, n_group, e // n_group).reshape(n, e)
        return choice.masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices.sort(dim=-1).values
    result = _after_a_failure(nb08.check_group_limited).evaluate(by_best)
    assert result.status == FAILED and result.hint is None and CLUE_PREFIX not in result.message, result.message


def test_padding_a_wrong_answer_that_ignores_the_padding_gets_no_padding_lead():
    """Masked correctly but with P as a plain sum (no mean): the padding does not move it, so no padding clue."""
    def summed(logits, index, mask):
        keep = mask.bool()
        probs = torch.softmax(logits[keep], -1)
        counts = torch.bincount(index[keep].reshape(-1), minlength=logits.shape[-1]).to(probs.dtype)
        return logits.shape[-1] * (counts / index[keep].numel() * probs.sum(0)).sum()
    result = _after_a_failure(nb08.check_padding_balance).evaluate(summed)
    assert result.status == FAILED and result.hint is None and CLUE_PREFIX not in result.message, result.message


def test_group_wrong_fixes_get_their_hints():
    for i in (0, 1, 2):
        _expect_hint(nb08.check_group_limited, nb08.check_group_limited.mistakes[i][1], i)


def test_group_right_experts_in_another_order_are_told_so_not_the_bug_class():
    for fn, i in ((nb08._group_descending, 3), (nb08._group_topk_order, 4)):
        result = _after_a_failure(nb08.check_group_limited).evaluate(fn)
        assert result.status == FAILED and "increasing order" in result.message, result.message
        assert CLUE_PREFIX not in result.message, result.message


def test_group_reference_agrees_with_transformers_deepseek_router():
    """The reference chooses the experts transformers' DeepseekV3MoE uses (same outputs as a restricted MoE)."""
    pytest.importorskip("transformers")
    from helpers import real_code

    torch.manual_seed(3)
    moe = MoE(12, 17, 5, d_ff=16, n_shared=1, score="sigmoid").eval()   # 16 routed, top-4
    with torch.no_grad():
        moe.selection_bias.copy_(-1.3 + 0.2 * torch.rand(16))           # every biased score below 0
    x = torch.randn(40, 12)
    hf = real_code.run(real_code.deepseek_v3_moe(moe, n_group=4, topk_group=2), x)
    with torch.no_grad():
        scores = torch.sigmoid(x @ moe.router.weight.t())
        index = nb08._group_limited(scores, moe.selection_bias, 4, 4, 2)
        weight = scores.gather(1, index)
        weight = weight / weight.sum(-1, keepdim=True)
        y = moe.shared(x)
        for n in range(len(x)):
            for j in range(4):
                y[n] += weight[n, j] * moe.experts[int(index[n, j])](x[n])
    assert real_code.max_abs_diff(hf, y) < 1e-5


def test_group_cases_cover_one_group_all_groups_and_k_at_its_limit():
    cases = nb08.check_group_limited.cases()
    assert any(c.args[3] == 1 for c in cases) and any(c.args[3] == c.args[4] for c in cases)
    assert any(c.args[2] == 1 for c in cases) and any(len(c.args[0]) == 1 for c in cases)
    assert any(c.args[2] == c.args[4] * c.args[0].shape[1] // c.args[3] and c.args[4] < c.args[3] for c in cases)
    assert any(bool(((c.args[0] + c.args[1]) < 0).all()) for c in cases)


# ------------------------------------------------------------------ exercises 5 and 6: investigate
def test_topk_mass_float32_passes_and_a_tensor_fails_naming_the_type():
    def tensor(logits, k):
        return torch.softmax(logits, -1).topk(k, -1).values.sum(-1).mean()        # a 0-d float32 tensor
    assert nb08.check_topk_mass.evaluate(lambda *a: tensor(*a).item()).status == PASSED
    result = nb08.check_topk_mass.evaluate(tensor)
    assert result.reason == "type" and "Python float" in result.message, result.message


def test_topk_mass_at_zero_logits_is_k_over_e():
    logits = torch.zeros(3, 16)
    assert nb08._topk_mass(logits, 2) == pytest.approx(2 / 16)


def test_score_on_input_float32_passes_and_is_one_at_s_one():
    def float32(w1, w3, w2, x, s):
        def ffn(z):
            return torch.nn.functional.silu(z @ w1.T) * (z @ w3.T) @ w2.T
        return (ffn(s * x).norm() / (s * ffn(x)).norm()).item()
    assert nb08.check_score_on_input.evaluate(float32).status == PASSED
    case = nb08.check_score_on_input.cases()[1]
    assert case.args[4] == 1.0 and nb08._input_over_output(*case.args) == pytest.approx(1.0)


def test_every_statement_kind_matches_the_notebook_heading():
    kinds = {ex.title: ex.kind for ex in nb08.EXERCISES}
    assert [kinds[ex.title] for ex, _ in DEBUG] == ["debug"] * 3
    assert sum(kind == "investigate" for kind in kinds.values()) == 2


def _group_variant(scores, bias, k, n_group, topk_group, *, inverted=False, n_keep=None, unbiased=False,
                   interleaved=False):
    """Wrong fixes of Exercise 4 that already fill with -inf: their mistake is elsewhere."""
    n, e = scores.shape
    size = e // n_group
    choice = scores + bias
    groups = choice.view(n, size, n_group).transpose(1, 2) if interleaved else choice.view(n, n_group, size)
    keep = groups.topk(min(2, size), dim=-1).values.sum(-1).topk(n_keep or topk_group, dim=-1).indices
    kept = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = (kept[:, None, :].expand(n, size, n_group) if interleaved
            else kept[:, :, None].expand(n, n_group, size)).reshape(n, e)
    mask = ~mask if inverted else mask
    picked_from = scores if unbiased else choice
    return picked_from.masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices.sort(dim=-1).values


@pytest.mark.parametrize("variant", [dict(inverted=True), dict(n_keep=3), dict(unbiased=True),
                                     dict(interleaved=True)], ids=str)
def test_group_wrong_fixes_with_minus_inf_get_no_masking_clue(variant):
    """A fix that masks with -inf but gets the groups wrong is not told to look at the fill (the clue's test
    shifts every bias: a -inf mask does not move, a finite fill does)."""
    result = _after_a_failure(nb08.check_group_limited).evaluate(lambda *a: _group_variant(*a, **variant))
    assert result.status == FAILED, result.message
    assert CLUE_PREFIX not in result.message, result.message


def _clamped_or_product(scores, bias, k, n_group, topk_group, *, clamp=False, product=False):
    """-inf masks with another mistake that a shift of the biases also moves (a clamp, a product of scores)."""
    n, e = scores.shape
    size = e // n_group
    choice = (scores + bias).clamp(min=-1) if clamp else scores + bias
    top2 = choice.view(n, n_group, size).topk(min(2, size), dim=-1).values
    group_score = top2.prod(-1) if product else top2.sum(-1)
    keep = group_score.topk(topk_group, dim=-1).indices
    kept = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = kept[:, :, None].expand(n, n_group, size).reshape(n, e)
    return choice.masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices.sort(dim=-1).values


@pytest.mark.parametrize("variant", [dict(clamp=True), dict(product=True)], ids=str)
def test_group_clue_needs_the_symptom_and_the_cause(variant):
    result = _after_a_failure(nb08.check_group_limited).evaluate(lambda *a: _clamped_or_product(*a, **variant))
    assert result.status == FAILED and CLUE_PREFIX not in result.message, result.message


@pytest.mark.parametrize("misbehave", ["loop", "exit"])
def test_group_clue_calls_cannot_hang_or_exit_the_notebook(misbehave, monkeypatch):
    """The clue calls the learner's function on shifted biases: a function that loops or exits there gives no
    clue, within the time limit, and nothing is raised."""
    import sys
    monkeypatch.setenv("FFN_CHECK_TIMEOUT", "2")

    def fn(scores, bias, k, n_group, topk_group):
        if bias.dtype == torch.float64:                     # only on the clue's calls
            if misbehave == "exit":
                sys.exit(1)
            while True:
                pass
        return nb08._group_limited(scores, bias, k, n_group, topk_group, fill=-1.0)

    result = _after_a_failure(nb08.check_group_limited).evaluate(fn)
    assert result.status == FAILED and CLUE_PREFIX not in result.message, result.message


def test_padding_softmax_over_the_tokens_fails_without_a_misleading_lead():
    """The trial's learner: the padding masked, but the softmax taken over the tokens (dim=0)."""
    def over_tokens(router_logits, expert_index, attention_mask):
        keep = attention_mask.bool()
        probs = torch.softmax(router_logits[keep], dim=0)
        chosen = expert_index[keep]
        counts = torch.bincount(chosen.reshape(-1), minlength=probs.shape[-1]).to(probs.dtype)
        return probs.shape[-1] * (counts / chosen.numel() * probs.mean(0)).sum()
    for ex in (nb08.check_padding_balance, _after_a_failure(nb08.check_padding_balance)):
        result = ex.evaluate(over_tokens)
        assert result.status == FAILED and result.hint is None and CLUE_PREFIX not in result.message, result.message


# ------------------------------------------------------------------ natural wrong answers of exercises 1, 5 and 6
def test_layout_natural_wrong_answers_fail_with_their_hints():
    for index, wrong in enumerate(["concatenated", "swapped", "not transposed", "reshape"]):
        _expect_hint(nb08.check_gpt_oss_layout, nb08._layout_wrong(wrong), index)


def test_topk_mass_natural_wrong_answers_fail():
    def unshifted_exp(logits, k):          # exp without the max shift: overflows on large logits
        e = logits.exp()
        return float((e / e.sum(-1, keepdim=True)).topk(k, -1).values.sum(-1).mean())

    def summed_over_tokens(logits, k):
        return float(torch.softmax(logits.double(), -1).topk(k, -1).values.sum())

    def smallest_k(logits, k):
        return float(torch.softmax(logits.double(), -1).topk(k, -1, largest=False).values.sum(-1).mean())

    for wrong in (unshifted_exp, summed_over_tokens, smallest_k):
        assert nb08.check_topk_mass.evaluate(wrong).status == FAILED, wrong.__name__
    for index, (_, wrong) in enumerate(nb08.check_topk_mass.mistakes):
        if index in (0, 1):
            _expect_hint(nb08.check_topk_mass, wrong, index)


def test_score_on_input_natural_wrong_answers_fail():
    def ffn(w1, w3, w2, z):
        return torch.nn.functional.silu(z @ w1.T) * (z @ w3.T) @ w2.T

    def mean_of_token_ratios(w1, w3, w2, x, s):
        return float((ffn(w1, w3, w2, s * x).norm(dim=-1) / (s * ffn(w1, w3, w2, x)).norm(dim=-1)).mean())

    def gate_and_up_swapped(w1, w3, w2, x, s):
        return float(ffn(w3, w1, w2, s * x).norm() / (s * ffn(w3, w1, w2, x)).norm())

    def score_on_the_gate_only(w1, w3, w2, x, s):
        y = torch.nn.functional.silu(s * x @ w1.T) * (x @ w3.T) @ w2.T
        return float(y.norm() / (s * ffn(w1, w3, w2, x)).norm())

    for wrong in (mean_of_token_ratios, gate_and_up_swapped, score_on_the_gate_only):
        assert nb08.check_score_on_input.evaluate(wrong).status == FAILED, wrong.__name__
    _expect_hint(nb08.check_score_on_input, nb08.check_score_on_input.mistakes[0][1], 0)
    result = nb08.check_score_on_input.evaluate(mean_of_token_ratios)  # review 08-round7: named now
    assert "mean of each token's ratio" in result.message, result.message
    squared = nb08.check_score_on_input.evaluate(  # review 08-round8: squared norms named too
        lambda w1, w3, w2, x, s: float((ffn(w1, w3, w2, s * x) ** 2).sum() / ((s * ffn(w1, w3, w2, x)) ** 2).sum()))
    assert "squared norms" in squared.message, squared.message
    forgot_s = nb08.check_score_on_input.evaluate(  # review 08-round10: the hint names what the answer computed
        lambda w1, w3, w2, x, s: float(ffn(w1, w3, w2, s * x).norm() / ffn(w1, w3, w2, x).norm()))
    assert forgot_s.status == FAILED
    assert "expert(s·x) was compared with expert(x)" in forgot_s.message, forgot_s.message


def test_group_limited_int32_indices_fail_as_a_type():
    """Review 08-round4: the statement asks for int64 indices; right experts as int32 fail, naming the type."""
    result = nb08.check_group_limited.evaluate(lambda *a: nb08._group_limited(*a).int())
    assert result.status == FAILED and result.reason == "type" and "int64" in result.message, result.message


def test_gpt_oss_layout_a_float64_result_for_float32_weights_fails_as_a_type():
    """Trial learner 2026-11-27g: float32 weights widened to float64 changed no value, and passed."""
    result = nb08.check_gpt_oss_layout.evaluate(lambda w1, w3: nb08.check_gpt_oss_layout.reference(w1, w3).double())
    assert result.status == FAILED and result.reason == "type" and "float32" in result.message, result.message
