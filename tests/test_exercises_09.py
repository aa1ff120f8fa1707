"""Notebook 09's checkers: the extremes each statement allows are among the hidden cases, other correct forms
pass (in the stated dtype), unlisted wrong answers fail without a misleading hint, and the references agree
with the course's helpers (the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch

from helpers.dictionary import TopKDictionary, firing_counts, fvu, topk_codes
from helpers.exercises.engine import FAILED, NOT_ATTEMPTED, PASSED
from helpers.exercises.nb09 import (EXERCISES, check_features_used, check_fvu, check_resample_dead,
                                    check_top_sub_updates, check_topk_activation, check_training_step,
                                    check_transcoder)


def _notes(ex):
    return " | ".join(case.note for case in ex.cases())


def test_kinds_titles_and_blank_stubs():
    assert [ex.kind for ex in EXERCISES] == ["build", "build", "investigate", "investigate", "investigate", "build",
                                             "build", "build"]
    assert [ex.title.split(" (")[0] for ex in EXERCISES] == [f"Exercise {i}" for i in range(1, 9)]

    def blank(*args):
        raise NotImplementedError

    assert all(ex.evaluate(blank).status == NOT_ATTEMPTED for ex in EXERCISES)


# ---- exercise 1: the TopK activation
def test_topk_cases_cover_the_extremes():
    notes = _notes(check_topk_activation)
    for words in ["k=1", "k=F", "a batch of one", "ties at the k-th value", "all-zero rows",
                  "fewer than k positive", "large magnitudes", "tiny magnitudes", "one feature"]:
        assert words in notes, words
    dtypes = {case.args[0].dtype for case in check_topk_activation.cases()}
    assert dtypes == {torch.float32}, "the statement promises float32 inputs"


def test_topk_reference_is_the_helper_and_keeps_exactly_k():
    for case in check_topk_activation.cases():
        pre, k = case.args
        expected = check_topk_activation.reference(pre, k)
        assert torch.equal(expected, topk_codes(pre, k)), case.note
        assert ((expected != 0).sum(-1) <= k).all()
    ties = next(c for c in check_topk_activation.cases() if "ties" in c.note).args[0]
    out = check_topk_activation.reference(ties, 3)
    assert out[0].nonzero().flatten().tolist() == [1, 3, 4]           # the 3 at index 6 is left out
    assert out[1].nonzero().flatten().tolist() == [0, 1, 2]


def test_topk_other_correct_forms_pass():
    def by_stable_sort(pre, k):
        idx = pre.sort(dim=-1, descending=True, stable=True).indices[:, :k]
        return torch.zeros_like(pre).scatter(-1, idx, pre.gather(-1, idx).clamp(min=0))

    def by_threshold(pre, k):              # above the k-th value, then the first tied entries until k are kept
        kth = pre.double().sort(dim=-1, descending=True).values[:, k - 1:k]
        keep = pre > kth
        for row in range(pre.shape[0]):
            for j in range(pre.shape[1]):
                if pre[row, j] == kth[row, 0] and keep[row].sum() < k:
                    keep[row, j] = True
        return torch.where(keep, pre.relu(), 0.0)

    def relu_first(pre, k):                # ReLU before choosing: the same output, zeros are never kept values
        return by_stable_sort(pre.relu(), k)

    for fn in (by_stable_sort, by_threshold, relu_first):
        assert check_topk_activation.evaluate(fn).status == PASSED, fn.__name__


def test_topk_unlisted_wrong_answers_fail():
    off_by_one = check_topk_activation.evaluate(lambda pre, k: topk_codes(pre, max(1, k - 1)))
    assert off_by_one.status == FAILED
    relu_only = check_topk_activation.evaluate(lambda pre, k: pre.relu())
    assert relu_only.status == FAILED and "Likely mistake" not in relu_only.message


def test_torch_topk_is_caught_only_by_the_tie_case_and_named():
    result = check_topk_activation.evaluate(
        lambda pre, k: torch.zeros_like(pre).scatter(-1, pre.topk(k).indices, pre.topk(k).values.relu()))
    assert result.status == FAILED and "ties at the k-th value" in result.message
    assert "stable sort" in result.message


# ---- exercise 2: a transcoder's forward pass and loss
def test_transcoder_cases_cover_the_extremes():
    notes = _notes(check_transcoder)
    for words in ["k=1", "k=F", "a batch of one", "all-zero input", "ties in b_enc", "large magnitudes",
                  "as many features as inputs", "as many features as outputs"]:
        assert words in notes, words
    for case in check_transcoder.cases():
        assert all(a.dtype == torch.float64 for a in case.args[:6]), case.note


def test_transcoder_reference_matches_the_helper_module():
    for case in check_transcoder.cases():
        x, y, W_enc, b_enc, W_dec, b_dec, k = case.args
        codes, y_hat, loss = check_transcoder.reference(*case.args)
        module = TopKDictionary(W_enc, b_enc, W_dec, b_dec, k).double()
        with torch.no_grad():
            torch.testing.assert_close(module.encode(x), codes)
            torch.testing.assert_close(module(x), y_hat)
        assert abs(loss - float(((y - y_hat) ** 2).sum(1).mean())) < 1e-9


def test_transcoder_other_correct_forms_pass():
    def with_tensor_loss(x, y, W_enc, b_enc, W_dec, b_dec, k):
        codes = topk_codes(torch.nn.functional.linear(x, W_enc, b_enc), k)
        y_hat = torch.nn.functional.linear(codes, W_dec, b_dec)
        return codes, y_hat, torch.nn.functional.mse_loss(y_hat, y, reduction="sum") / x.shape[0]

    assert check_transcoder.evaluate(with_tensor_loss).status == PASSED


def test_transcoder_float32_is_told_its_dtype():
    def in_float32(x, y, W_enc, b_enc, W_dec, b_dec, k):
        x, y, W_enc, b_enc, W_dec, b_dec = (t.float() for t in (x, y, W_enc, b_enc, W_dec, b_dec))
        return check_transcoder.reference(x, y, W_enc, b_enc, W_dec, b_dec, k)

    result = check_transcoder.evaluate(in_float32)
    assert result.status == FAILED and "float32" in result.message


# ---- exercise 3: fraction of variance unexplained
def test_fvu_cases_cover_the_extremes_and_match_the_helper():
    notes = _notes(check_fvu)
    for words in ["the fewest rows allowed", "a mean far from zero", "tiny magnitudes", "span 1e4",
                  "a perfect reconstruction", "the mean output", "one output dimension"]:
        assert words in notes, words
    for case in check_fvu.cases():
        assert abs(check_fvu.reference(*case.args) - fvu(*case.args)) <= 1e-12 + 1e-9 * abs(fvu(*case.args))
    perfect = next(c for c in check_fvu.cases() if "perfect" in c.note)
    mean = next(c for c in check_fvu.cases() if "the mean output" in c.note)
    assert check_fvu.reference(*perfect.args) == 0.0 and abs(check_fvu.reference(*mean.args) - 1.0) < 1e-12


def test_fvu_other_correct_forms_pass():
    def by_variances(y, y_hat):
        return ((y - y_hat) ** 2).mean(0).sum() / y.var(dim=0, unbiased=False).sum()

    def as_tensor(y, y_hat):
        return torch.sum((y - y_hat) ** 2) / torch.sum((y - y.mean(0, keepdim=True)) ** 2)

    for fn in (by_variances, as_tensor):
        assert check_fvu.evaluate(fn).status == PASSED, fn.__name__


def test_fvu_float32_is_told_its_dtype():
    result = check_fvu.evaluate(lambda y, y_hat: check_fvu.reference(y.float(), y_hat.float()))
    assert result.status == FAILED


# ---- exercise 4: how many neurons a prefix needs
def test_sub_update_cases_cover_the_extremes():
    notes = _notes(check_top_sub_updates)
    for words in ["k=1", "k=d_ff", "a batch of one", "ties in", "all-zero coefficients", "large negative",
                  "d_model = d_ff"]:
        assert words in notes, words


def test_sub_updates_at_k_equal_d_ff_are_the_whole_ffn_output():
    case = next(c for c in check_top_sub_updates.cases() if "k=d_ff" in c.note)
    m, W2, b2, k = case.args
    torch.testing.assert_close(check_top_sub_updates.reference(m, W2, b2, k), m @ W2.T + b2)


def test_sub_updates_other_correct_forms_pass():
    def loop_over_rows(m, W2, b2, k):
        out = []
        for row in m:
            size = row.abs() * torch.linalg.vector_norm(W2, dim=0)
            idx = size.sort(descending=True, stable=True).indices[:k]
            out.append(b2 + W2[:, idx] @ row[idx])
        return torch.stack(out)

    assert check_top_sub_updates.evaluate(loop_over_rows).status == PASSED


def test_topk_float64_result_passes_as_the_statement_says():
    result = check_topk_activation.evaluate(
        lambda pre, k: check_topk_activation.reference(pre.double(), k))
    assert result.status == PASSED, result.message


def test_transcoder_normalised_loss_is_named():
    def normalised(x, y, W_enc, b_enc, W_dec, b_dec, k):
        codes, y_hat, loss = check_transcoder.reference(x, y, W_enc, b_enc, W_dec, b_dec, k)
        return codes, y_hat, torch.as_tensor(loss) / ((y - y.mean(0)) ** 2).sum(-1).mean()   # inf for one row

    result = check_transcoder.evaluate(normalised)
    assert result.status == FAILED and "variance of y" in result.message, result.message


@pytest.mark.parametrize("topk", ["stable sort", "torch.topk"])
def test_transcoder_loss_averaged_over_d_out_too_is_named(topk):
    def mean_all(x, y, W_enc, b_enc, W_dec, b_dec, k):
        pre = x @ W_enc.T + b_enc
        if topk == "torch.topk":
            top = pre.topk(k, dim=-1)
            codes = torch.zeros_like(pre).scatter(-1, top.indices, top.values.clamp(min=0))
        else:
            codes = topk_codes(pre, k)
        y_hat = codes @ W_dec.T + b_dec
        return codes, y_hat, ((y - y_hat) ** 2).mean()

    result = check_transcoder.evaluate(mean_all)
    assert result.status == FAILED and "divides by every element" in result.message, result.message


def test_sub_updates_every_neuron_kept_is_named_and_tie_hint_is_its_own():
    result = check_top_sub_updates.evaluate(lambda m, W2, b2, k: m @ W2.T + b2)
    assert result.status == FAILED and "kept every neuron" in result.message, result.message

    def by_topk(m, W2, b2, k):
        idx = (m.abs() * W2.norm(dim=0)).topk(k, dim=-1).indices
        return (m * torch.zeros_like(m, dtype=torch.bool).scatter(-1, idx, True)) @ W2.T + b2

    result = check_top_sub_updates.evaluate(by_topk)
    if result.status == FAILED:                      # torch.topk happened to break the tie the other way
        assert "stable sort" in result.message and "pre." not in result.message, result.message
    hints = " ".join(hint for hint, _ in check_top_sub_updates.mistakes)
    assert "pre." not in hints


@pytest.mark.parametrize("slip", ["no b2", "coefficient only"])
def test_sub_updates_a_slip_with_torch_topk_keeps_its_hint(slip):
    def slipped(m, W2, b2, k):
        size = m.abs() if slip == "coefficient only" else m.abs() * W2.norm(dim=0)
        keep = torch.zeros_like(m, dtype=torch.bool).scatter(-1, size.topk(k, dim=-1).indices, True)
        return (m * keep) @ W2.T + (0 if slip == "no b2" else b2)

    # named with or without the tie slip (torch.topk may break these ties the stable way)
    _fails(check_top_sub_updates, slipped, "b2 is missing" if slip == "no b2" else "|m_i| times the norm")


# ---- the natural wrong answers of the 2026-11-26 review and learner trial, each breaking one sentence of a statement
def _fails(ex, fn, hint=None):
    result = ex.evaluate(fn)
    assert result.status == FAILED, result.message
    if hint is not None:
        assert hint in result.message, result.message
    return result


def test_every_exercise_declares_its_domain_and_reaches_every_corner():
    for ex in EXERCISES:
        assert ex.domain is not None and ex.domain.corners, ex.title
        assert ex.uncovered() == [], (ex.title, ex.uncovered())


def test_topk_natural_wrong_answers_fail():
    def unstable_argsort(pre, k):              # the review: passed before, the rows were too short to reorder ties
        kept = pre.argsort(dim=-1, descending=True)[:, :k]
        return torch.zeros_like(pre).scatter(-1, kept, pre.gather(-1, kept).relu())

    _fails(check_topk_activation, unstable_argsort, "stable")
    _fails(check_topk_activation, lambda pre, k: torch.where(pre >= pre.topk(k).values[:, -1:], pre.relu(), 0.0),
           "lowest indices")                                                         # keeps every tie
    _fails(check_topk_activation, lambda pre, k: torch.zeros_like(pre).scatter(0, pre.topk(k, dim=0).indices,
                                                                               pre.topk(k, dim=0).values.relu()))
    _fails(check_topk_activation, lambda pre, k: torch.where(
        torch.zeros_like(pre, dtype=torch.bool).scatter(-1, pre.sort(dim=-1, descending=True, stable=True)
                                                        .indices[:, :k], True), pre, 0.0), "ReLU")   # no ReLU


def test_topk_without_relu_by_torch_topk_names_both_slips():
    def no_relu(pre, k):                    # the review (r40): 6 cases failed with no likely mistake
        top = pre.topk(k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values)

    def no_relu_all_ties(pre, k):
        return torch.where(pre >= pre.topk(k, dim=-1).values[:, -1:], pre, 0.0)

    for fn, tie_words in ((no_relu, "stable sort"), (no_relu_all_ties, "were all kept")):
        message = _fails(check_topk_activation, fn, "apply the ReLU").message
        assert tie_words in message and "two slips" in message, message


def test_transcoder_natural_wrong_answers_fail():
    def dense_relu(x, y, W_enc, b_enc, W_dec, b_dec, k):        # the review: failed with no likely mistake
        codes = (x @ W_enc.T + b_enc).relu()
        y_hat = codes @ W_dec.T + b_dec
        return codes, y_hat, ((y - y_hat) ** 2).sum(1).mean()

    def mse(x, y, W_enc, b_enc, W_dec, b_dec, k):
        codes, y_hat, _ = check_transcoder.reference(x, y, W_enc, b_enc, W_dec, b_dec, k)
        return codes, y_hat, torch.nn.functional.mse_loss(y_hat, y)

    _fails(check_transcoder, dense_relu, "plain ReLU")
    _fails(check_transcoder, mse, "divides by every element")


def test_fvu_natural_wrong_answers_fail_with_their_hint():
    _fails(check_fvu, lambda y, h: float(((y - h) ** 2).mean() / y.var()), "y.var() pools")          # the review
    _fails(check_fvu, lambda y, h: float(((y - h) ** 2).sum() / ((y - y.mean(1, keepdim=True)) ** 2).sum()),
           "own mean")                                                                             # the trial
    _fails(check_fvu, lambda y, h: float(((y - h) ** 2).sum() / ((y - y.mean()) ** 2).sum()), "mean *row*")
    _fails(check_fvu, lambda y, h: float((((y - h) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)).mean()),
           "one ratio per output dimension")
    _fails(check_fvu, lambda y, h: float(((y - h) ** 2).sum() / (y.var(0).sum() * len(y))), "normalised differently")


def test_sub_update_natural_wrong_answers_fail_with_their_hint():
    def ranked_by(size_of):
        def top(m, W2, b2, k):
            size = size_of(m, W2)
            keep = torch.zeros_like(m, dtype=torch.bool).scatter(
                -1, size.sort(dim=-1, descending=True, stable=True).indices[:, :k], True)
            return (m * keep) @ W2.T + b2
        return top

    _fails(check_top_sub_updates, ranked_by(lambda m, W2: m ** 2 * W2.norm(dim=0)), "no square")     # the review
    _fails(check_top_sub_updates, ranked_by(lambda m, W2: m.abs() * W2.norm(dim=0) ** 2), "no square")  # the trial
    _fails(check_top_sub_updates, ranked_by(lambda m, W2: m * W2.norm(dim=0)), "large negative")
    _fails(check_top_sub_updates, ranked_by(lambda m, W2: m.abs()), "different norms")
    _fails(check_top_sub_updates, ranked_by(lambda m, W2: m.clamp(min=0) * W2.norm(dim=0)), "either sign")  # 09-r7

    def unstable(m, W2, b2, k):
        kept = (m.abs() * W2.norm(dim=0)).argsort(dim=-1, descending=True)[:, :k]
        return (m * torch.zeros_like(m, dtype=torch.bool).scatter(-1, kept, True)) @ W2.T + b2

    _fails(check_top_sub_updates, unstable, "stable")


def test_sub_updates_that_zero_m_in_place_fail():
    """The trial's W1: zeroing the dropped entries of the caller's m passed, and the follow-up cell then read FVU
    149 % for every k. The engine compares the inputs after the call (parallel engine work)."""
    def in_place(m, W2, b2, k):
        order = torch.argsort(m.abs() * W2.norm(dim=0), dim=1, descending=True, stable=True)
        m.scatter_(1, order[:, k:], 0.0)
        return m @ W2.T + b2

    result = check_top_sub_updates.evaluate(in_place)
    if result.status == PASSED:
        pytest.xfail("this engine does not yet compare a function's inputs after the call")
    assert result.status == FAILED and "m" in result.message, result.message


# ---- exercise 5: features used
def test_features_used_blank_right_and_named_wrong_answers():
    def blank(codes):
        raise NotImplementedError

    assert check_features_used.evaluate(blank).status == NOT_ATTEMPTED
    for right in (lambda c: int((c > 0).any(dim=0).sum()), lambda c: (c > 0).any(dim=0).sum(),
                  lambda c: int(((c > 0).sum(dim=0) > 0).sum()), lambda c: len(c.nonzero()[:, 1].unique())):
        assert check_features_used.evaluate(right).status == PASSED
    for case in check_features_used.cases():
        (codes,) = case.args
        assert check_features_used.reference(codes) == int((firing_counts(codes) > 0).sum()), case.note
    _fails(check_features_used, lambda c: int((c > 0).sum()), "active entries")
    _fails(check_features_used, lambda c: int((c >= 0).any(dim=0).sum()), "not >= 0")
    _fails(check_features_used, lambda c: int((c == 0).all(dim=0).sum()), "dead features")
    _fails(check_features_used, lambda c: int((c > 0).sum(dim=1).max()), "one prefix")
    _fails(check_features_used, lambda c: int((c > 0).any(dim=1).sum()), "prefixes with some")
    _fails(check_features_used, lambda c: int((c > 1e-12).any(dim=0).sum()))           # a threshold above 0


# ---- review 09-round23: Ex 2 calling a blank Ex 1, Ex 4's norm axis, Ex 5's argmax
def test_transcoder_that_calls_a_blank_topk_says_exercise_1_is_a_stub():
    def topk_activation(pre, k):
        raise NotImplementedError

    def transcoder_forward(x, y, W_enc, b_enc, W_dec, b_dec, k):
        codes = topk_activation(x @ W_enc.T + b_enc, k)
        y_hat = codes @ W_dec.T + b_dec
        return codes, y_hat, float(((y - y_hat) ** 2).sum(-1).mean())

    result = check_transcoder.evaluate(transcoder_forward)
    assert result.status == FAILED
    assert "topk_activation" in result.message and "Exercise 1" in result.message

    def blank(x, y, W_enc, b_enc, W_dec, b_dec, k):
        raise NotImplementedError

    assert check_transcoder.evaluate(blank).status == NOT_ATTEMPTED


def test_sub_updates_with_norms_over_the_wrong_axis_are_named_not_raised():
    def top_sub_updates(m, W2, b2, k):
        size = m.abs() * W2.norm(dim=1)
        kept = size.sort(dim=-1, descending=True, stable=True).indices[:, :k]
        keep = torch.zeros_like(m, dtype=torch.bool).scatter(-1, kept, True)
        return b2 + (m * keep) @ W2.T

    result = check_top_sub_updates.evaluate(top_sub_updates)
    assert result.status == FAILED
    assert "wrong axis" in result.line() and "W2.norm(dim=0)" in result.line()


def test_features_used_by_argmax_gets_its_hint():
    def features_used(codes):
        return torch.unique(codes.argmax(1)).numel()

    result = check_features_used.evaluate(features_used)
    assert result.status == FAILED
    assert "argmax" in result.line()


def test_toy_forward_matches_the_trainer_and_a_float_loss_is_told():
    from helpers.exercises.nb09 import _toy_forward, check_toy_forward
    from helpers.superposition import train_toy_models, train_toy_with
    W = train_toy_with(_toy_forward, 0.8, steps=20)
    assert torch.allclose(W, train_toy_models(sparsities=[0.8], seeds=[0], steps=20, progress=False).W[0], atol=1e-9)
    told = train_toy_with(lambda W, b, x, i: (x, float(((x - x) ** 2).sum())), 0.8, steps=3)
    assert isinstance(told, str) and "backward" in told

    def by_einsum(W, b, x, importance):
        x_hat = torch.relu(torch.einsum("bi,mi,mj->bj", x, W, W) + b)
        return x_hat, torch.einsum("bi,i->b", (x - x_hat) ** 2, importance).mean()
    assert check_toy_forward.evaluate(by_einsum).status == PASSED

    def detached(W, b, x, importance):                  # right values, but loss.backward() cannot run on it
        x_hat, loss = by_einsum(W, b, x, importance)
        return x_hat, loss.detach()

    def under_no_grad(W, b, x, importance):
        with torch.no_grad():
            return by_einsum(W, b, x, importance)
    for fn in (detached, under_no_grad):
        result = check_toy_forward.evaluate(fn)
        assert result.status == FAILED and "backward" in result.line(), result.line()


# ---- exercise 7: one training step of a TopK dictionary
def _step_by_hand(W_enc, b_enc, W_dec, b_dec, x, k, lr):
    """The step with the gradients written out (no autograd), and torch.topk for the codes (no ties allowed)."""
    pre = x @ W_enc.T + b_enc
    top = pre.topk(k, dim=-1)
    codes = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
    err = codes @ W_dec.T + b_dec - x                                               # (B, d)
    B = x.shape[0]
    g_out = 2 * err / B
    g_codes = (g_out @ W_dec) * (codes > 0)                                         # (B, F)
    new = [W_enc - lr * g_codes.T @ x, b_enc - lr * g_codes.sum(0), W_dec - lr * g_out.T @ codes,
           b_dec - lr * g_out.sum(0)]
    new[2] = new[2] / new[2].norm(dim=0, keepdim=True)
    return (*new, float((err ** 2).sum(-1).mean()))


def test_training_step_by_hand_and_with_torch_optim_pass():
    assert check_training_step.evaluate(_step_by_hand).status == PASSED

    def with_sgd(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        params = [t.clone().requires_grad_() for t in (W_enc, b_enc, W_dec, b_dec)]
        codes = topk_codes(x @ params[0].T + params[1], k)
        loss = ((codes @ params[2].T + params[3] - x) ** 2).sum(-1).mean()
        opt = torch.optim.SGD(params, lr=lr)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            params[2] /= params[2].norm(dim=0, keepdim=True)
        return (*[p.detach() for p in params], loss.item())

    assert check_training_step.evaluate(with_sgd).status == PASSED


def test_training_step_reference_gives_the_dictionarys_loss_and_unit_values():
    """The reference's loss is that of helpers.dictionary's TopKDictionary on the batch; its values have length 1."""
    case = check_training_step.cases()[0]
    W_enc, b_enc, W_dec, b_dec, x, k, lr = case.args
    d = TopKDictionary(W_enc, b_enc, W_dec, b_dec, k).requires_grad_(False)
    assert torch.allclose(d(x), topk_codes(x @ W_enc.T + b_enc, k) @ W_dec.T + b_dec)
    out = check_training_step.reference(*case.args)
    assert torch.allclose(out[2].norm(dim=0), torch.ones(W_dec.shape[1], dtype=torch.float64))
    assert abs(out[4] - float(((d(x) - x) ** 2).sum(-1).mean())) < 1e-12


def test_training_step_in_place_update_fails_naming_the_argument():
    def in_place(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        out = _step_by_hand(W_enc, b_enc, W_dec, b_dec, x, k, lr)
        W_enc.copy_(out[0])
        return out

    result = check_training_step.evaluate(in_place)
    assert result.status == FAILED and "W_enc" in result.message


def test_training_step_named_mistakes_are_told_and_an_unlisted_one_gets_no_hint():
    from helpers.exercises.nb09 import _step_wrong
    for kind, words in [("no renorm", "length 1"), ("rows", "columns"), ("ascent", "uphill"),
                        ("mean all", "every element"), ("loss after", "before the step"),
                        ("detached codes", "detached"), ("no relu", "ReLU"), ("dense relu", "k largest"),
                        ("projected", "along each column")]:
        result = check_training_step.evaluate(_step_wrong(kind))
        assert result.status == FAILED and words in result.message, (kind, result.message)

    def half_rate(W_enc, b_enc, W_dec, b_dec, x, k, lr):
        return _step_by_hand(W_enc, b_enc, W_dec, b_dec, x, k, lr / 2)

    result = check_training_step.evaluate(half_rate)
    assert result.status == FAILED and "Likely mistake" not in result.message


def test_exercise_2_diagnoses_a_topk_ranked_by_absolute_value():
    from helpers.exercises.nb09 import _keep_mask

    def by_abs(x, y, W_enc, b_enc, W_dec, b_dec, k):
        pre = x @ W_enc.T + b_enc
        codes = torch.where(_keep_mask(pre.abs(), k), torch.relu(pre), torch.zeros((), dtype=pre.dtype))
        y_hat = codes @ W_dec.T + b_dec
        return codes, y_hat, float(((y - y_hat) ** 2).sum(-1).mean())

    _fails(check_transcoder, by_abs, "absolute value")


def _resample_by_loop(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
    """Exercise 8 written another way: a Python loop over the dead directions, the rows ranked by sorted()."""
    W_enc, b_enc, W_dec = W_enc.clone(), b_enc.clone(), W_dec.clone()
    error = ((x - x_hat) ** 2).sum(1).tolist()
    order = sorted(range(len(error)), key=lambda n: (-error[n], n))
    for j, i in enumerate(torch.nonzero(dead).flatten().tolist()):
        unit = x[order[j]] / x[order[j]].norm()
        W_dec[:, i], W_enc[i], b_enc[i] = unit, scale * unit, 0.0
    return W_enc, b_enc, W_dec


def test_resample_dead_other_correct_form_passes_and_the_reference_restarts_only_dead_ones():
    assert check_resample_dead.evaluate(_resample_by_loop).status == PASSED
    for case in check_resample_dead.cases():
        W_enc, b_enc, W_dec, x, x_hat, dead, scale = case.args
        new = check_resample_dead.reference(*case.args)
        assert torch.equal(new[0][~dead], W_enc[~dead]) and torch.equal(new[2][:, ~dead], W_dec[:, ~dead])
        assert torch.allclose(new[2][:, dead].norm(dim=0), torch.ones(int(dead.sum()), dtype=torch.float64))
        assert bool((new[1][dead] == 0).all())


def test_resample_dead_named_mistakes_are_told_and_unlisted_ones_get_no_hint():
    from helpers.exercises.nb09 import _resample_wrong
    for kind, words in [("residual", "residual"), ("best", "largest squared error first"),
                        ("largest x", "size of x_n"), ("one row", "its own row"), ("no unit", "length 1"),
                        ("no scale", "times scale"), ("bias kept", "b_enc to 0"), ("ties reversed", "stable")]:
        result = check_resample_dead.evaluate(_resample_wrong(kind))
        assert result.status == FAILED and words in result.message, (kind, result.message)

    def half_scale(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
        return _resample_by_loop(W_enc, b_enc, W_dec, x, x_hat, dead, scale / 2)

    def in_place(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
        out = _resample_by_loop(W_enc, b_enc, W_dec, x, x_hat, dead, scale)
        W_dec.copy_(out[2])
        return out

    result = check_resample_dead.evaluate(half_scale)
    assert result.status == FAILED and "Likely mistake" not in result.message
    result = check_resample_dead.evaluate(in_place)
    assert result.status == FAILED and "W_dec" in result.message


def test_resample_dead_with_torch_topk_is_named_when_its_tie_order_fails():
    def by_topk(W_enc, b_enc, W_dec, x, x_hat, dead, scale):
        W_enc, b_enc, W_dec = W_enc.clone(), b_enc.clone(), W_dec.clone()
        idx = dead.nonzero().flatten()
        rows = x[((x - x_hat) ** 2).sum(-1).topk(len(idx)).indices]
        unit = rows / rows.norm(dim=-1, keepdim=True)
        W_dec[:, idx], W_enc[idx], b_enc[idx] = unit.T, scale * unit, 0.0
        return W_enc, b_enc, W_dec

    result = check_resample_dead.evaluate(by_topk)
    if result.status == FAILED:                      # torch.topk may break the ties the stable way
        assert "errors tied in pairs" in result.message and "torch.topk promises no order" in result.message


def test_resampling_in_the_loop_revives_directions_on_the_toy():
    """train_with_step with Exercise 8's reference: fewer dead directions than without it, on section 2's toy."""
    from helpers.dictionary_study import train_with_step
    from helpers.exercises.nb09 import _resample_dead, _training_step
    from helpers.toy_runs import load_toy_runs, toy_models
    toys = toy_models(load_toy_runs())
    W = toys.W[toys.index(0.99, seed=0)]
    plain = train_with_step(_training_step, W, 0.99, steps=600, lr=0.1, report_at=(0, 600), resample_at=(300,))
    revived = train_with_step(_training_step, W, 0.99, steps=600, lr=0.1, report_at=(0, 600),
                              resample=_resample_dead, resample_at=(300,))
    assert revived["dead"] < plain["dead"] and revived["fvu"][600] < plain["fvu"][600]
    broken = train_with_step(_training_step, W, 0.99, steps=400, lr=0.1, resample=lambda *a: 1 / 0,
                             resample_at=(300,))
    assert isinstance(broken, str) and "resample_dead failed at step 300" in broken
