"""The checker engine: the exercise contract every notebook relies on."""
import numpy as np
import torch

from helpers.exercises.engine import FAILED, NOT_ATTEMPTED, PASSED, Case, Exercise, compare


def square(x):
    return x * x


EX = Exercise("demo", square, lambda: [Case((torch.arange(6.0).reshape(2, 3),)), Case((torch.randn(4, 5),))],
              [("you added instead of multiplying", lambda x: x + x)])


def stub(x):
    raise NotImplementedError


def test_contract():
    assert EX.evaluate(stub).status == NOT_ATTEMPTED
    assert EX.evaluate(lambda x: None).status == NOT_ATTEMPTED
    assert EX.evaluate(square).status == PASSED
    wrong = EX.evaluate(lambda x: x + x)
    assert wrong.status == FAILED and "you added instead of multiplying" in wrong.message
    assert "first at index (0, 1): expected 1, got 2" in wrong.message  # the first value that differs


def test_never_raises_for_learner_errors():
    for fn in [lambda x: 1 / 0, lambda x: x.T, lambda x: x.numpy() ** 2, lambda x: "text", lambda x: x * np.nan, 42]:
        result = EX.evaluate(fn)
        assert result.status == FAILED, fn
    assert "transposed" in EX.evaluate(lambda x: (x * x).T).message
    assert "NaN" in EX.evaluate(lambda x: x * float("nan")).message
    assert "ZeroDivisionError" in EX.evaluate(lambda x: 1 / 0).message


def test_inputs_are_not_shared_between_calls():
    def in_place(x):
        x.mul_(x)
        return x
    assert EX.evaluate(in_place).status == PASSED


def test_check_prints_one_line(capsys):
    EX.check(square)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✅ demo: passed")


def test_compare_values():
    assert compare(3, 3) is None and compare(3.0, 3) is None
    assert "expected 3, got 4" in compare(4, 3)
    assert compare(torch.tensor(0.5), 0.5) is None
    assert "expected a number" in compare("0.5", 0.5)
    assert "[1]" in compare([1, 2], [1, 3])
    assert "keys" in compare({"a": 1}, {"b": 1})
