"""The answer types statements fix (``Exercise(returns=...)``, ``helpers.exercises.returns``).

Values are compared leniently (a whole float matches an int); where a statement fixes the type, a right value of
another type fails with the reason ``"type"``, naming the type returned, the case and the type wanted, judged on the
very result each hidden case gave (the learner's function is not called again).
"""
import numpy as np
import pytest
import torch

from helpers.exercises import nb02, nb03, nb04, nb05, nb06, nb07, nb08, nb10
from helpers.exercises.engine import FAILED, PASSED, Case, Exercise
from helpers.exercises.returns import Returns, integer_tensor, python_float, python_int, tensor_dtype


@pytest.mark.parametrize("value,ok", [(3, True), (3.0, False), (True, False), (np.int64(3), False),
                                      (torch.tensor(3), False)])
def test_python_int_accepts_only_a_python_int(value, ok):
    assert (python_int().problem(value) is None) == ok


@pytest.mark.parametrize("value,ok", [(0.5, True), (2, False), (np.float64(0.5), True), (np.float32(0.5), False),
                                      (torch.tensor(0.5), False), (False, False)])
def test_python_float_accepts_only_floats(value, ok):
    assert (python_float().problem(value) is None) == ok


def test_tensor_kinds():
    assert tensor_dtype(torch.float32).problem(torch.zeros(2)) is None
    assert "float64 tensor" in tensor_dtype(torch.float32).problem(torch.zeros(2, dtype=torch.float64))
    assert integer_tensor().problem(torch.zeros(2, dtype=torch.int32)) is None
    for bad in (torch.zeros(2), torch.zeros(2, dtype=torch.bool), [0, 1]):
        assert integer_tensor().problem(bad) is not None


def test_a_part_of_a_tuple_is_named():
    spec = python_int(item=1, name="weights_read")
    assert spec.problem((torch.zeros(2), 7)) is None
    message = spec.problem((torch.zeros(2), torch.tensor(7)), "case A")
    assert message.startswith("weights_read is a 0-d int64 tensor (7) on case A;") and "a Python int" in message


def _count_exercise(**kwargs):
    cases = [Case((n,), note=f"n={n}") for n in (1, 2, 5)]
    return Exercise("Exercise 9 (count)", lambda n: 2 * n, cases, kind="build", **kwargs)


def test_right_values_of_another_type_fail_once_every_value_is_right():
    exercise = _count_exercise(returns=python_int())
    assert exercise.evaluate(lambda n: 2 * n).status == PASSED
    result = exercise.evaluate(lambda n: 2.0 * n)
    assert (result.status, result.reason) == (FAILED, "type")
    assert "the values are right, but your function returns a Python float (2.0) on n=1" in result.message
    wrong = exercise.evaluate(lambda n: 3.0 * n)       # a wrong value is told its value, not its type
    assert wrong.reason == "wrong" and "type" not in wrong.message
    assert _count_exercise().evaluate(lambda n: 2.0 * n).status == PASSED   # no returns=: lenient as before


def test_the_type_is_read_from_the_first_call():
    calls = []

    def answer(n):
        calls.append(n)
        return 2 * n if len(calls) <= 3 else 2.0 * n   # a second call would see a float
    assert _count_exercise(returns=python_int()).evaluate(answer).status == PASSED
    assert calls == [1, 2, 5]


def test_returns_must_be_declared_with_the_helpers():
    with pytest.raises(ValueError, match="returns="):
        _count_exercise(returns=int)
    assert isinstance(python_int(), Returns)


#: Every exercise whose statement fixes the answer's type declares it (statement's words in the comment).
DECLARED = {
    nb02.check_layer_grad_norms: "a float32 tensor", nb03.check_top_triggers: "integer tensors",
    nb04.check_llama_width: "a Python int", nb04.check_frozen_saved: "a Python int",
    nb04.check_fused_saved: "a Python int", nb05.check_capacity_keep: "a bool mask",
    nb06.check_model_flops: "a Python int", nb07.check_expert_combinations: "an exact Python int",
    nb07.check_paired_t: "(t, df) as Python floats", nb08.check_padding_balance: "a 0-d float32 tensor",
    nb08.check_topk_mass: "a Python float", nb08.check_score_on_input: "a Python float",
    nb10.check_skip_swiglu: "weights_read a Python int", nb05.check_balance_loss: "a 0-dim float32 tensor",
    nb06.check_tp_degree: "a Python int", nb06.check_moe_intensity: "a Python float",
    nb02.check_stack_forward: "a float32 tensor", nb02.check_contributions: "a float32 tensor",
    nb03.check_value_logits: "float32 logits", nb03.check_relation_profile: "float32",
}


@pytest.mark.parametrize("exercise", list(DECLARED), ids=lambda e: e.title)
def test_each_fixed_type_is_declared(exercise):
    assert exercise.returns, f"{exercise.title} states {DECLARED[exercise]} but declares no returns="


@pytest.mark.parametrize("exercise,convert", [
    (nb04.check_llama_width, float), (nb06.check_model_flops, np.int64),
    (nb08.check_topk_mass, torch.tensor), (nb08.check_score_on_input, torch.tensor),
    (nb08.check_padding_balance, lambda t: t.double()), (nb05.check_capacity_keep, lambda t: t.long()),
], ids=lambda x: getattr(x, "title", ""))
def test_a_right_value_of_another_type_fails_in_the_course(exercise, convert):
    result = exercise.evaluate(lambda *a, **k: convert(exercise.reference(*a, **k)))
    assert (result.status, result.reason) == (FAILED, "type"), result.message
    assert "the values are right, but" in result.message
