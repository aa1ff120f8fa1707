"""Notebook 03's checkers: unlisted wrong answers, correct answers written differently, and hidden cases
that cover every branch the task statements allow (the generic contract for every checker is in
test_exercise_contract.py).
"""
import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import nb03 as ex
from helpers.exercises.engine import FAILED, PASSED

EXERCISES = {
    "coefficients": ex.check_memory_coefficients,
    "triggers": ex.check_top_triggers,
    "values": ex.check_value_logits,
    "agreement": ex.check_agreement_rate,
    "spill": ex.check_edit_spill,
    "profile": ex.check_relation_profile,
    "match": ex.check_best_match,
    "rome": ex.check_rome_update,
}


def _triggers_unsorted(c, valid, neuron, k):                 # descending index order (ascending index is listed)
    examples, positions = ex._top_triggers(c, valid, neuron, k)
    order = examples.argsort(descending=True)
    return examples[order], positions[order]


#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "coefficients": lambda x, W1, b1: F.gelu(x @ W1.T + b1) * 1.01,
    "triggers": _triggers_unsorted,
    "values": lambda f, i, ln, head, biases=True: ex._value_to_vocab(f, i, ln, head, biases) + 0.1,
    "agreement": lambda c, ids, valid, logits: ex._agreement_rate(c, ids, valid, logits) + 0.05,
    "spill": lambda C, k, K: ex._edit_spill(C, k, K) * 1.001,
    "profile": lambda c, valid, rel, R: ex._relation_profile(c, valid, rel, R) + 0.01,
    "match": lambda a, b: (ex._best_match(a, b)[0], ex._best_match(a, b)[1] ** 2),
    "rome": lambda W, C, k, v: ex._rome_update(W, C, k, v) * 1.001,
}


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


# --------------------------------------------------------------------------------------------
# correct answers written another way pass
# --------------------------------------------------------------------------------------------


def _triggers_by_loop(c, valid, neuron, k):
    peaks = []
    for n in range(c.shape[0]):
        allowed = [(c[n, t, neuron].item(), t) for t in range(c.shape[1]) if valid[n, t]]
        value, t = max(allowed)
        peaks.append((value, n, t))
    peaks.sort(key=lambda p: -p[0])
    return torch.tensor([n for _, n, _ in peaks[:k]]), torch.tensor([t for _, _, t in peaks[:k]])


def _values_by_hand(f, i, ln, head, biases=True):
    with torch.no_grad():
        v = f.w2.weight[:, i]
        z = (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + ln.eps) * ln.weight
        if biases:
            z = z + ln.bias
            return F.linear(z, head.weight, head.bias)
        return F.linear(z, head.weight)


def _profile_by_loop(c, valid, relation, R):
    peaks = c.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(dim=1)
    return torch.stack([peaks[relation == r].mean(dim=0) for r in range(R)], dim=1)


def _match_with_corrcoef(a, b):
    n_a = a.shape[1]
    r = torch.corrcoef(torch.cat([a, b], dim=1).T)[:n_a, n_a:]
    best, index = r.max(dim=1)
    return index, best


def _match_population_std(a, b):
    za, zb = (a - a.mean(0)) / a.std(0, correction=0), (b - b.mean(0)) / b.std(0, correction=0)
    best, index = (za.T @ zb / a.shape[0]).max(dim=1)
    return index, best


ALSO_RIGHT = {
    "coefficients": lambda x, W1, b1: F.gelu(F.linear(x, W1, b1)),
    "triggers": _triggers_by_loop,
    "values": _values_by_hand,
    "spill": lambda C, k, K: (K @ torch.linalg.inv(C) @ k) / (k @ torch.linalg.inv(C) @ k),
    "spill_cholesky": lambda C, k, K: K @ torch.cholesky_solve(k[:, None], torch.linalg.cholesky(C))[:, 0]
    / (k @ torch.cholesky_solve(k[:, None], torch.linalg.cholesky(C))[:, 0]),
    "spill_rows_solved": lambda C, k, K: torch.linalg.solve(C, K.T).T @ k / (k @ torch.linalg.solve(C, k)),
    "coefficients_float64": lambda x, W1, b1: F.gelu(x.double() @ W1.double().T + b1.double()),
    "agreement_tensor": lambda c, ids, valid, logits: torch.tensor(ex._agreement_rate(c, ids, valid, logits)),
    "profile": _profile_by_loop,
    "match": _match_with_corrcoef,
    "match_population": lambda a, b: _match_population_std(a, b),
    "rome": lambda W, C, k, v: W + (v - W @ k)[:, None] * (torch.linalg.inv(C) @ k)[None, :]
    / (k @ torch.linalg.inv(C) @ k),
    "rome_clone": lambda W, C, k, v: W.clone().addr_(v - W @ k, torch.linalg.solve(C, k),
                                                      alpha=1 / (torch.linalg.solve(C, k) @ k).item()),
}


@pytest.mark.parametrize("name", ALSO_RIGHT)
def test_a_correct_answer_written_differently_passes(name):
    result = EXERCISES[name.split("_")[0]].evaluate(ALSO_RIGHT[name])
    assert result.status == PASSED, result.message


# --------------------------------------------------------------------------------------------
# the hidden cases cover every branch the statements allow
# --------------------------------------------------------------------------------------------


def _all_negative_rows(coefficients, valid):
    """Rows (examples) whose allowed coefficients are all negative, in any neuron."""
    masked = coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(dim=1)   # (N, d_ff)
    return (masked < 0).any()


def test_coefficient_cases_cover_square_single_and_narrow_shapes():
    shapes = [(c.args[0].shape, c.args[1].shape) for c in ex.check_memory_coefficients.cases()]
    assert any(w[0] == w[1] for _, w in shapes), "a square W1, so x @ W1 runs and must be told apart"
    assert any(x[0] == 1 and x[1] == 1 for x, _ in shapes), "a batch of one with one position"
    assert any(w[0] < w[1] for _, w in shapes), "fewer neurons than model width"


def test_trigger_cases_cover_the_edges():
    cases = ex.check_top_triggers.cases()
    assert any(c.args[3] == c.args[0].shape[0] for c in cases), "k = N"
    assert any(c.args[0].shape[0] == 1 for c in cases), "a single example"
    assert any(c.args[2] == c.args[0].shape[2] - 1 for c in cases), "the last neuron"
    assert any(c.args[1][:, -1].any() for c in cases), "a mask that allows the last position"
    assert any(_all_negative_rows(c.args[0][:, :, c.args[2]:c.args[2] + 1], c.args[1]) for c in cases)


def test_masking_with_zero_fails_triggers_agreement_and_profile():
    """The slip issue 12 names: filling forbidden positions with 0 instead of -inf."""
    zero_triggers = ex._triggers_zero_mask
    zero_agreement = ex._agreement_with(lambda c, valid: ex._trigger_max(c, valid, fill=0.0))
    zero_profile = ex._profile_from_peaks(lambda c, valid: ex._peaks(c, valid, 0.0))
    for check, wrong in [(ex.check_top_triggers, zero_triggers), (ex.check_agreement_rate, zero_agreement),
                         (ex.check_relation_profile, zero_profile)]:
        assert check.evaluate(wrong).status == FAILED


def test_value_cases_have_a_biased_head_in_both_modes_and_the_last_neuron():
    cases = ex.check_value_logits.cases()
    modes = {(c.args[3].bias is not None, c.args[4]) for c in cases}
    assert modes == {(True, True), (True, False), (False, True), (False, False)}
    assert any(c.args[1] == c.args[0].d_ff - 1 for c in cases)
    assert any(c.args[0].d_ff == c.args[0].d_model for c in cases), "a square W2: a row still fits"


def test_value_answers_that_ignore_the_head_bias_fail():
    def never_head_bias(f, i, ln, head, biases=True):
        with torch.no_grad():
            v = f.w2.weight[:, i]
            return (ln(v) if biases else F.layer_norm(v, ln.normalized_shape, ln.weight, None, ln.eps)) @ head.weight.T

    result = ex.check_value_logits.evaluate(never_head_bias)
    assert result.status == FAILED and "you dropped lm_head's bias" in result.message


def test_agreement_cases_are_informative():
    """The hidden agreement cases have rates well away from 0 and 1, and half of them have only negative
    allowed coefficients."""
    cases = ex.check_agreement_rate.cases()
    rates = [ex._agreement_rate(*case.args) for case in cases]
    assert rates.count(1.0) == 1 and rates.count(0.0) == 1, "one case at each end of [0, 1]"
    for case, rate in zip(cases, rates):
        if case.args[0].shape[0] > 1 and rate not in (0.0, 1.0):
            assert 0.2 < rate < 0.9
    assert any(case.args[0].shape[0] == 1 for case in cases), "a single example"
    assert sum(bool((case.args[0].masked_fill(~case.args[2].unsqueeze(-1), -1.0) < 0).all()) for case in cases) >= 2


def test_profile_cases_cover_unequal_groups_single_members_and_one_relation():
    cases = ex.check_relation_profile.cases()
    counts = [torch.bincount(c.args[2], minlength=c.args[3]) for c in cases]
    assert all((n >= 1).all() for n in counts), "every relation occurs (as the statement promises)"
    assert any(len(set(n.tolist())) > 1 for n in counts), "unequal group sizes"
    assert any((n == 1).any() and len(n) > 1 for n in counts), "a relation with one example"
    assert any(c.args[3] == 1 for c in cases), "a single relation"
    assert any(_all_negative_rows(c.args[0], c.args[1]) for c in cases)


def test_match_cases_have_a_strong_negative_decoy_and_a_single_candidate():
    cases = ex.check_best_match.cases()
    assert any(c.args[1].shape[1] == 1 for c in cases)
    decoy = 0
    for c in cases:
        a, b = c.args
        r = ex._corr(a, b)
        decoy += int((r.min(dim=1).values.abs() > r.max(dim=1).values).any())
    assert decoy >= 2, "|r| and r must pick different neurons somewhere"


def test_coefficient_cases_include_one_neuron_and_large_inputs():
    cases = ex.check_memory_coefficients.cases()
    assert any(c.args[1].shape[0] == 1 and c.args[0].abs().max() > 20 for c in cases)


def test_trigger_cases_include_k_1_and_peaks_spanning_five_orders_of_magnitude():
    cases = ex.check_top_triggers.cases()
    assert any(c.args[3] == 1 for c in cases), "k = 1"
    spans = [c.args[0].abs().amax(dim=(1, 2)) for c in cases]
    assert any(s.max() / s.min() > 1e4 for s in spans)


def test_spill_cases_cover_the_edges():
    cases = ex.check_edit_spill.cases()
    alphas = [ex._edit_spill(*c.args) for c in cases]
    assert any(torch.allclose(a[0], torch.tensor(1.0, dtype=torch.float64)) and (a < 0).any()
               and a.abs().min() < 1e-9 for a in alphas), "k* itself (1), a key on the far side (< 0), an orthogonal one (0)"
    assert any(c.args[0].shape == (1, 1) for c in cases), "a one-dimensional key"
    assert any(c.args[2].shape[0] == 1 for c in cases), "a single key"
    assert any(torch.equal(c.args[0], torch.eye(c.args[0].shape[0], dtype=torch.float64)) for c in cases), "C = I"
    assert any(torch.linalg.cond(c.args[0]) > 1e4 for c in cases), "an ill-conditioned C"
    assert any(c.args[2].norm(dim=1).max() / c.args[2].norm(dim=1).min() > 1e5 for c in cases), "key sizes span"
    assert all(c.args[0].dtype == c.args[1].dtype == c.args[2].dtype == torch.float64 for c in cases)


def test_spill_in_float32_gets_a_dtype_note():
    def in_float32(C, k, K):
        u = torch.linalg.solve(C.float(), k.float())
        return K.float() @ u / (u @ k.float())

    result = ex.check_edit_spill.evaluate(in_float32)
    assert result.status == FAILED and "float64" in result.message


def test_a_spill_with_c_instead_of_its_inverse_is_named():
    """The notebook's review found "the metric of C" written where C⁻¹ is meant: the checker names that slip."""
    result = ex.check_edit_spill.evaluate(lambda C, k, K: K @ (C @ k) / ((C @ k) @ k))
    assert result.status == FAILED and "you used C where C⁻¹ belongs" in result.message


def test_trigger_and_agreement_cases_include_values_below_minus_one():
    """The statements allow any float32 coefficients: a case has every allowed value below -1."""
    for check, valid_at in [(ex.check_top_triggers, 1), (ex.check_agreement_rate, 2)]:
        cases = check.cases()
        assert any(bool((c.args[0].masked_fill(~c.args[valid_at].unsqueeze(-1), -2.0) < -1).all())
                   for c in cases), check.title


def test_a_finite_stand_in_for_minus_infinity_fails_without_a_zero_hint():
    """-1 for the forbidden positions is right on GELU-like inputs, wrong where every allowed value is below -1;
    the 0-mask hint must not be named (it fails on cases this answer passes); Exercise 2 names the -1 (r56)."""
    def triggers(c, valid, neuron, k):
        best, position = c[:, :, neuron].masked_fill(~valid, -1.0).max(dim=1)
        examples = best.topk(k).indices
        return examples, position[examples]

    agreement = ex._agreement_with(lambda c, valid: ex._trigger_max(c, valid, fill=-1.0))
    for check, wrong in [(ex.check_top_triggers, triggers), (ex.check_agreement_rate, agreement)]:
        result = check.evaluate(wrong)
        assert result.status == FAILED
        assert "with 0" not in result.message
    assert "with -1" in ex.check_top_triggers.evaluate(triggers).message


def test_weakest_first_and_mixed_std_divisors_are_named():
    result = ex.check_top_triggers.evaluate(ex._triggers_weakest_first)
    assert "weakest first" in result.message
    mixed = ex._match_from(lambda a, b: ex._corr_mixed_divisors(a, b, correction=1, divisor_offset=0))
    assert "(M-1)/M too small" in ex.check_best_match.evaluate(mixed).message


def test_the_right_examples_in_index_order_are_named():
    def index_order(c, valid, neuron, k):                  # the right set, re-sorted by example index
        best, position = c[:, :, neuron].masked_fill(~valid, float("-inf")).max(dim=1)
        examples = best.topk(k).indices.sort().values
        return examples, position[examples]

    result = ex.check_top_triggers.evaluate(index_order)
    assert result.status == FAILED
    assert "index order" in result.message


# --------------------------------------------------------------------------------------------
# issue 32: declared domains, the statements' promises, and the natural wrong answers of the trial
# --------------------------------------------------------------------------------------------


def test_the_module_lists_every_exercise():
    assert ex.EXERCISES == list(EXERCISES.values())


@pytest.mark.parametrize("name", EXERCISES)
def test_the_references_leave_their_inputs_unchanged(name):
    import copy

    for case in EXERCISES[name].cases():
        before = copy.deepcopy(case.args)
        EXERCISES[name].reference(*case.args)
        for old, new in zip(before, case.args):
            if isinstance(old, torch.Tensor):
                assert torch.equal(old, new)
            elif isinstance(old, torch.nn.Module):
                assert all(torch.equal(p, q) for p, q in zip(old.state_dict().values(), new.state_dict().values()))


def test_the_hidden_trigger_and_agreement_cases_have_no_ties_as_the_statements_promise():
    for case in ex.check_top_triggers.cases():
        c, valid, neuron, _ = case.args
        assert ex._has_no_ties(c, valid, neuron)
    for case in ex.check_agreement_rate.cases():
        c, ids, valid, logits = case.args
        assert all(ex._has_no_ties(c, valid, i) for i in range(c.shape[2]))
        assert ((logits == logits.max(dim=1, keepdim=True).values).sum(1) == 1).all(), "one top token per value"
        assert not valid[:, -1].any(), "a prefix always has a next token"
    for case in ex.check_best_match.cases():
        r = ex._corr(*case.args)
        assert (r.sort(dim=1).values.diff(dim=1) > 1e-12).all(), "no two correlations in a row tie"


def _triggers_position_before_masking(c, valid, neuron, k):
    best = c[:, :, neuron].masked_fill(~valid, float("-inf")).max(dim=1).values
    position = c[:, :, neuron].argmax(dim=1)                    # the position of the unmasked maximum
    examples = best.topk(k).indices
    return examples, position[examples]


def _values_geva_raw(f, i, ln, head, biases=True):
    with torch.no_grad():
        v = f.w2.weight[:, i]
        return head(ln(v)) if biases else v @ head.weight.T


def _agreement_at_the_peak(c, ids, valid, logits):
    best, position = c.masked_fill(~valid.unsqueeze(-1), float("-inf")).max(dim=1)
    example = best.argmax(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    return (logits.argmax(1) == ids[example, t]).float().mean().item()


def _agreement_floor(c, ids, valid, logits):
    best, position = c.masked_fill(~valid.unsqueeze(-1), float("-inf")).max(dim=1)
    example = best.argmax(dim=0)
    t = position[example, torch.arange(c.shape[2])]
    hits = int((logits.argmax(1) == ids[example, t + 1]).sum())
    return float(hits // c.shape[2])


def _profile_over_all_rows(c, valid, relation, R):
    peaks = c.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(dim=1)
    return (peaks.T @ F.one_hot(relation, R).to(peaks.dtype)) / (len(relation) / R)


def _spill_unit_k_star(C, k, K):
    """A "tidy" answer that normalises k* first: α of a fixed key scales as 1/|k*|, so it is wrong."""
    unit = k / k.norm()
    u = torch.linalg.solve(C, unit)
    return K @ u / (u @ unit)


def _values_eps_outside(ffn, neuron, ln_f, lm_head, biases=True):
    """Review 03-round21: a LayerNorm by hand with ε added to the standard deviation, in both modes."""
    v = ffn.w2.weight[:, neuron].detach()
    z = (v - v.mean()) / (v.var(unbiased=False).sqrt() + ln_f.eps) * ln_f.weight
    return (lm_head(z + ln_f.bias) if biases else z @ lm_head.weight.T).detach()


def _values_eps_outside_without_biases(ffn, neuron, ln_f, lm_head, biases=True):
    if biases:
        return lm_head(ln_f(ffn.w2.weight[:, neuron].detach())).detach()
    return _values_eps_outside(ffn, neuron, ln_f, lm_head, False)


def _spill_u_dot_u(C, k, K):
    """Review 03-round21: the denominator uᵀu with u = C⁻¹k*."""
    u = torch.linalg.solve(C, k)
    return K @ u / (u @ u)


def _match_dim0(a, b):
    za, zb = (a - a.mean(0)) / a.std(0), (b - b.mean(0)) / b.std(0)
    best, index = (za.T @ zb / (a.shape[0] - 1)).max(dim=0)
    return index, best


#: natural wrong answers (the trial learner's, the reviewer's and ours), each breaking one sentence of its
#: statement, with the hint it must get (None: it fails without a named mistake)
def _values_row_natural(ffn, neuron, ln_f, lm_head, biases=True):
    """A row of w2.weight, read as a learner would: lm_head(ln_f(row)) (it raises where the row's length differs)."""
    v = ffn.w2.weight[neuron].detach()
    if biases:
        return lm_head(ln_f(v)).detach()
    return (F.layer_norm(v, ln_f.normalized_shape, ln_f.weight, None, ln_f.eps) @ lm_head.weight.T).detach()


def _rome_k_row_inverse(W, C, k, v):
    """k* as the outer product's row, the denominator through an explicit inverse."""
    u = torch.linalg.inv(C) @ k
    return W + torch.outer(v - W @ k, k) / (k @ u)


NATURAL_WRONG = [
    ("coefficients", lambda x, W1, b1: F.gelu(x @ W1.T + b1, approximate="tanh"), "tanh approximation"),
    ("coefficients", lambda x, W1, b1: F.gelu(x @ W1 + b1), "columns of W1 as keys"),
    ("coefficients", lambda x, W1, b1: torch.relu(x @ W1.T + b1), "you used ReLU"),
    ("coefficients", lambda x, W1, b1: F.gelu(x @ W1.T) + b1, "after the activation"),  # review 03-round13
    ("coefficients", lambda x, W1, b1: 0.5 * (x @ W1.T + b1) * (1 + torch.erf(x @ W1.T + b1)), "misses the √2"),  # 03-r18
    ("coefficients", lambda x, W1, b1: 0.5 * (x @ W1.T + b1) * (1 + torch.erf((x @ W1.T + b1) / 2)), "inside erf"),  # 03-r19
    ("coefficients", lambda x, W1, b1: (x @ W1.T + b1) * torch.sigmoid(1.702 * (x @ W1.T + b1)), "sigmoid approximation"),  # 03-r19
    ("triggers", ex._triggers_zero_mask, "with 0"),
    ("triggers", ex._triggers_nan_mask, "NaN"),  # 03-r19
    ("triggers", lambda c, valid, neuron, k: (lambda best: (best.values.topk(k).indices, best.indices[
        best.values.topk(k).indices]))(c[:, :, neuron].masked_fill(valid, float("-inf")).max(dim=1)),
     "you masked the allowed positions"),  # 03-r22
    ("triggers", ex._triggers_many_per_example, "one example appears several times"),
    ("triggers", _triggers_position_before_masking, None),
    ("triggers", ex._triggers_off_by_one, "off by one"),
    ("values", lambda f, i, ln, head, biases=True: ex._value_to_vocab(f, i, ln, head, True) if biases else
     head(ex._ln_no_beta(f.w2.weight[:, i].detach(), ln)).detach(), "you kept lm_head's bias"),
    ("values", _values_geva_raw, "Geva"),
    ("values", ex._values_with_read(ex._right_read, lambda f, i: f.w2.weight[i]), "you took row i of w2.weight"),
    ("values", ex._values_with_read(ex._right_read, lambda f, i: f.w2.weight[i] if i < f.w2.weight.shape[0] else
                                    f.w2.weight[:, i]), "where a row of w2.weight exists"),  # 03-r47
    ("values", _values_row_natural, "you took row i of w2.weight"),  # 03-r47
    ("values", ex._values_with_read(ex._norm_by_hand(correction=1, eps=True)), "unbiased variance"),
    ("values", ex._values_with_read(ex._norm_by_hand(correction=0, eps=True, centre=False)), "subtract the mean"),
    ("values", ex._values_with_read(ex._norm_by_hand(correction=0, eps=False)), "leaves out ε"),
    ("values", ex._values_with_read(ex._norm_by_hand(correction=0, eps=False, both=False)),
     "with biases=False your LayerNorm by hand leaves out ε"),
    ("values", ex._values_with_read(ex._norm_by_hand(correction=1, eps=True, both=False)),
     "with biases=False your LayerNorm by hand uses the unbiased variance"),
    ("values", _values_eps_outside, "adds ε to the standard deviation"),  # 03-r21
    ("values", lambda f, i, ln, head, biases=True: ex._value_to_vocab(f, i, ln, head, True) if biases else
     ((lambda v: (v - v.mean()) / v.std() * ln.weight)(f.w2.weight[:, i].detach()) @ head.weight.T).detach(),
     "with biases=False your LayerNorm by hand uses the unbiased standard deviation"),  # 03-r56
    ("values", ex._values_with_read(ex._norm_by_hand(correction=1, eps=False)), "unbiased standard deviation"),  # r56
    ("values", _values_eps_outside_without_biases, "with biases=False your LayerNorm by hand adds ε"),  # 03-r21
    ("agreement", _agreement_at_the_peak, "off by one"),
    ("agreement", _agreement_floor, "integer division"),
    ("agreement", ex._agreement_with(lambda c, valid: ex._trigger_max(c, valid, fill=0.0)), "with 0"),
    ("spill", lambda C, k, K: K @ (C @ k) / (k @ C @ k), "C where C⁻¹ belongs"),
    ("spill", lambda C, k, K: K @ torch.linalg.solve(C, k), "α(k*) must be 1"),
    ("spill", lambda C, k, K: K @ torch.linalg.solve(C, k) / (k @ k), "not k*ᵀk*"),
    ("spill", _spill_u_dot_u, "not (C⁻¹k*)ᵀ(C⁻¹k*)"),  # 03-r21
    ("spill", _spill_unit_k_star, "normalised k_star"),  # 03-r55
    ("profile", _profile_over_all_rows, "N / n_relations"),
    ("profile", ex._profile_from_peaks(ex._mean_over_positions), "averaged over the positions"),
    ("match", ex._match_from(lambda a, b: ex._corr_mixed_divisors(a, b, 1, 0)), "mixed two divisors"),
    ("match", ex._match_from(ex._corr, absolute=True), "ranked by |r|"),
    ("match", _match_dim0, "the wrong way round"),
    ("match", ex._match_from(ex._cosine), "did not subtract each column's mean"),
    ("rome", lambda W, C, k, v: W + torch.outer(v - W @ k, C @ k) / ((C @ k) @ k), "C where C⁻¹ belongs"),
    ("rome", lambda W, C, k, v: W + torch.outer(v - W @ k, torch.linalg.solve(C, k)), "divide by (C⁻¹k*)ᵀk*"),
    ("rome", lambda W, C, k, v: W + torch.outer(v - W @ k, k) / (k @ k), "you left C out"),
    ("rome", lambda W, C, k, v: W + torch.outer(v - W @ k, k) / (torch.linalg.solve(C, k) @ k),
     "row vector is C⁻¹k*, not k*"),  # 03-r47
    ("rome", _rome_k_row_inverse, "row vector is C⁻¹k*, not k*"),  # 03-r47
    ("rome", lambda W, C, k, v: torch.outer(v - W @ k, torch.linalg.solve(C, k)) / (torch.linalg.solve(C, k) @ k),
     "not the term alone"),
    ("rome", lambda W, C, k, v: W + torch.outer(torch.linalg.solve(C, k), v - W @ k).T
     / (torch.linalg.solve(C, k) @ k) + 0.5 * (v - W @ k)[:, None], None),
]


@pytest.mark.parametrize("name, wrong, hint", NATURAL_WRONG, ids=[f"{n}-{i}" for i, (n, _, _) in
                                                                 enumerate(NATURAL_WRONG)])
def test_natural_wrong_answers_fail_with_their_hint(name, wrong, hint):
    result = EXERCISES[name].evaluate(wrong)
    assert result.status == FAILED, result.message
    if hint is None:
        assert "Likely mistake" not in result.message, result.message
    else:
        assert hint in result.message, result.message


def test_the_new_corners_catch_what_the_old_cases_let_through():
    """A by-hand LayerNorm without ε was right on values of ordinary size, and // d_ff on rate-0 cases only:
    the tiny value and the rate-1 case are there for them."""
    tiny = [c for c in ex.check_value_logits.cases() if c.args[0].w2.weight[:, c.args[1]].abs().max() < 1e-2]
    assert tiny, "a value small enough for ε"
    assert any(ex._agreement_rate(*c.args) == 1.0 for c in ex.check_agreement_rate.cases())


@pytest.mark.parametrize("name, answer", [
    ("coefficients", lambda x, W1, b1: F.gelu(x.double() @ W1.double().T + b1.double())),   # any float dtype
    ("triggers", lambda *a: tuple(t.int() for t in ex._top_triggers(*a))),                   # any integer dtype
    ("agreement", lambda *a: torch.tensor(ex._agreement_rate(*a))),                           # a 0-d tensor
])
def test_the_relaxed_output_dtypes_pass(name, answer):
    """Each statement allows these result types (Ex 1: any float dtype; Ex 2: any integer dtype; Ex 4: a number)."""
    assert EXERCISES[name].evaluate(answer).status == PASSED


def test_top_triggers_int32_passes_and_a_float_result_fails_naming_integer_tensors():
    """Trial 2026-11-27 (P4): int32 is allowed (the statement says any integer dtype); a float tensor of the same
    values is not an integer tensor and fails, naming the dtype."""
    assert ex.check_top_triggers.evaluate(lambda *a: tuple(t.int() for t in ex._top_triggers(*a))).status == PASSED
    result = ex.check_top_triggers.evaluate(lambda *a: tuple(t.float() for t in ex._top_triggers(*a)))
    assert result.status == FAILED and "float32 tensor" in result.message and "integer tensor" in result.message, \
        result.message


def test_edit_spill_first_differing_key_is_one_c_changes():
    """The first value a wrong answer gets wrong differs visibly (not -2.580 against -2.575)."""
    result = ex.check_edit_spill.evaluate(lambda C, k, K: K @ k / (k @ k))
    assert "index (1,): expected -0.799414, got -0.750513" in result.message


def test_agreement_rate_ignoring_valid_is_named():
    """Review 03-round9: `valid` ignored (the next token's index clamped) fails with a hint naming it."""
    def rate(coefficients, ids, valid, value_logits):
        n_examples, length, d_ff = coefficients.shape
        best = coefficients.reshape(n_examples * length, d_ff).argmax(0)
        example, t = best // length, best % length
        following = ids[example, (t + 1).clamp(max=length - 1)]
        return (value_logits.argmax(1) == following).float().mean()

    result = ex.check_agreement_rate.evaluate(rate)
    assert result.status == FAILED and "`valid` was ignored" in result.message, result.message


@pytest.mark.parametrize("flat", [False, True])
def test_agreement_rate_unmasked_peak_raising_index_error_is_named(flat):
    """Reviews 03-r57/r58: the peak taken without `valid` reaches the last position and raises IndexError at
    t + 1; the checker names the mistake. An IndexError of another kind gets no such hint."""
    def rate(c, ids, valid, value_logits):
        n, length, d_ff = c.shape
        if flat:
            best = c.reshape(n * length, d_ff).argmax(0)
            example, t = best // length, best % length
        else:
            peak, position = c.max(dim=1)
            example = peak.argmax(0)
            t = position[example, torch.arange(d_ff)]
        return (value_logits.argmax(1) == ids[example, t + 1]).float().mean()

    result = ex.check_agreement_rate.evaluate(rate)
    assert result.status == FAILED and "`valid` was ignored" in result.message, result.message

    def flat_index(c, ids, valid, value_logits):       # masked, but the flat index used as the example
        n, length, d_ff = c.shape
        best = _fill(c, valid, float("-inf")).reshape(n * length, d_ff).argmax(0)
        return (value_logits.argmax(1) == ids[best, best % length + 1]).float().mean()

    result = ex.check_agreement_rate.evaluate(flat_index)
    assert result.status == FAILED and "IndexError" in result.message and "valid" not in result.message, \
        result.message


def _fill(c, valid, value):
    return c.masked_fill(~valid[:, :, None], value)


@pytest.mark.parametrize("fill", [-1e4, -1e9])
def test_a_finite_fill_for_the_forbidden_positions_fails_in_exercises_2_4_and_6(fill):
    """Trial learner 2026-11-27f: -1e4 instead of -inf passed Exercises 2, 4 and 6 (allowed values reached -60)."""
    def top_triggers(c, valid, neuron, k):
        peak, position = _fill(c, valid, fill)[:, :, neuron].max(dim=1)
        example = peak.topk(k).indices
        return example, position[example]

    def agreement(c, ids, valid, value_logits):
        n, length, d_ff = c.shape
        flat = _fill(c, valid, fill).reshape(n * length, d_ff).argmax(0)
        example, t = flat // length, (flat % length).clamp(max=length - 2)
        return (ids[example, t + 1] == value_logits.argmax(1)).float().mean()

    def profile(c, valid, relation, n_relations):
        peaks = _fill(c, valid, fill).amax(1)
        return torch.stack([peaks[relation == r].mean(0) for r in range(n_relations)], dim=1)

    for check, answer in [(ex.check_top_triggers, top_triggers), (ex.check_agreement_rate, agreement),
                          (ex.check_relation_profile, profile)]:
        result = check.evaluate(answer)
        assert result.status == FAILED, (check.title, result.message)


def test_memory_coefficients_bias_after_the_activation_is_named():
    """Review 03-round13: GELU(x W1ᵀ) + b1 got the symptom only."""
    result = ex.check_memory_coefficients.evaluate(lambda x, W1, b1: F.gelu(x @ W1.T) + b1)
    assert result.status == "failed" and "after the activation" in result.message, result.message


def test_best_match_in_float32_is_named_and_computing_otherwise_in_float32_still_fails():
    def in_float32(a, b):
        a, b = a.float(), b.float()
        za, zb = (a - a.mean(0)) / a.std(0), (b - b.mean(0)) / b.std(0)
        r = za.T @ zb / (a.shape[0] - 1)
        v, i = r.max(1)
        return i, v.double()

    def norms_in_float32(a, b):
        ac, bc = a.float() - a.float().mean(0), b.float() - b.float().mean(0)
        v, i = (ac.T @ bc / (ac.norm(dim=0)[:, None] * bc.norm(dim=0)[None])).max(1)
        return i, v.double()

    result = ex.check_best_match.evaluate(in_float32)
    assert result.status == "failed" and "float32" in (result.hint or ""), result.message
    assert ex.check_best_match.evaluate(norms_in_float32).status == "failed"


@pytest.mark.parametrize("hard_coded", ["F.layer_norm default", "by hand with 1e-5"])
def test_a_read_out_with_the_default_epsilon_is_named(hard_coded):
    """The statement says keep ln_f's ε: hidden cases with ε = 1e-2 fail an answer that hard-codes 1e-5."""
    def wrong(f, i, ln, head, biases=True):
        with torch.no_grad():
            v = f.w2.weight[:, i]
            if hard_coded == "F.layer_norm default":
                z = F.layer_norm(v, ln.normalized_shape, ln.weight)
            else:
                z = (v - v.mean()) / torch.sqrt(v.var(correction=0) + 1e-5) * ln.weight
            return F.linear(z + ln.bias, head.weight, head.bias) if biases else z @ head.weight.T

    assert any(c.args[2].eps != 1e-5 for c in ex.check_value_logits.cases())
    result = ex.check_value_logits.evaluate(wrong)
    assert result.status == FAILED and "default ε" in result.message, result.message
