"""Notebook 06's checkers: unlisted wrong answers, accepted result types, varied hidden cases
(the generic contract for every checker is in test_exercise_contract.py).
"""
import pytest
import torch

from helpers.exercises import nb06 as ex
from helpers.exercises.engine import FAILED, PASSED

EXERCISES = {
    "flops": ex.check_model_flops,
    "peak": ex.check_peak_bytes,
    "tp": ex.check_tensor_parallel,
    "splits": ex.check_split_sizes,
    "intensity": ex.check_moe_intensity,
}

#: a wrong answer that is not one of the listed mistakes, for every exercise
UNLISTED_WRONG = {
    "flops": lambda n, d, f, t, g, tr: ex.model_flops_reference(n, d, f, t, g, tr) + 1,
    "peak": lambda t, d, f, n: 4 * (t * d + t * 2 * f // n) + 8,
    "splits": lambda ei, kept, e, w: [int(kept.sum())] + [0] * (w - 1),
    "tp": lambda *a: (ex.tensor_parallel_reference(*a)[0][::-1], ex.tensor_parallel_reference(*a)[1]),
    "intensity": lambda *a: 1.5 * ex.intensity_reference(*a),
}


@pytest.mark.parametrize("name", EXERCISES)
def test_unlisted_wrong_answer_fails_without_a_hint(name):
    result = EXERCISES[name].evaluate(UNLISTED_WRONG[name])
    assert result.status == FAILED
    assert "Likely mistake" not in result.message


def test_split_sizes_accepts_a_tensor_or_a_tuple():
    def as_tensor(ei, kept, e, w):
        return torch.bincount(ei[kept] // (e // w), minlength=w)

    assert ex.check_split_sizes.evaluate(as_tensor).status == PASSED
    assert ex.check_split_sizes.evaluate(lambda *a: tuple(as_tensor(*a).tolist())).status == PASSED


def test_split_sizes_wrong_length_is_reported():
    result = ex.check_split_sizes.evaluate(lambda ei, kept, e, w: [0])
    assert result.status == FAILED and "items" in result.message


def test_hidden_cases_vary():
    shapes = {tuple(c.args[0].shape) for c in ex.check_split_sizes.cases()}
    assert len(shapes) >= 4
    assert len({c.args for c in ex.check_model_flops.cases()}) >= 6
    assert any(c.args[0] % c.args[3] for c in ex.check_peak_bytes.cases()), "a T that does not split evenly"


def test_tensor_parallel_cases_cover_uneven_blocks_one_rank_and_one_token():
    cases = ex.check_tensor_parallel.cases()
    assert any(c.args[1].shape[0] % c.args[5] for c in cases), "a d_ff that does not split evenly"
    assert any(c.args[5] == 1 for c in cases) and any(c.args[0].shape[0] == 1 for c in cases)
    assert any(c.args[5] == c.args[1].shape[0] for c in cases), "one hidden unit per rank"
    assert all(c.args[2].abs().min() > 0 and c.args[4].abs().min() > 0 for c in cases), "biases present"


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


def test_intensity_cases_cover_decode_one_expert_all_experts_and_formats():
    cases = ex.check_moe_intensity.cases()
    assert any(c.args[0].shape[0] == 1 for c in cases)
    assert any(torch.unique(c.args[0]).numel() == 1 for c in cases)
    assert any(torch.unique(c.args[0]).numel() == c.args[1] for c in cases)
    assert any(int(c.args[0].max()) == c.args[1] - 1 for c in cases), "the last expert id"
    assert {c.args[5] for c in cases} >= {1, 2, 4} and {c.args[4] for c in cases} == {True, False}
