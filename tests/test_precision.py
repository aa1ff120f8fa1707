"""helpers.precision: gaps measured in float64 and printed as bounds."""
import numpy as np
import pytest
import torch

from helpers.precision import bound, gap, max_abs_diff


def test_max_abs_diff_takes_tensors_arrays_and_lists_in_float64():
    a = torch.tensor([1.0, 2.0], dtype=torch.float32)
    assert max_abs_diff(a, np.array([1.0, 2.5])) == 0.5
    assert max_abs_diff([[1.0]], [[1.0 + 1e-15]]) == pytest.approx(1e-15, rel=0.2)
    assert max_abs_diff(torch.zeros(0), torch.zeros(0)) == 0.0
    assert max_abs_diff(torch.ones(2, dtype=torch.bfloat16), torch.zeros(2)) == 1.0
    with pytest.raises(ValueError, match="same shape"):
        max_abs_diff(torch.zeros(2), torch.zeros(3))


def test_bound_prints_a_bound_below_the_tolerance_and_the_value_above():
    assert bound(3e-7) == "< 1e-06"
    assert bound(0.0, 1e-12) == "< 1e-12"
    assert bound(0.0123) == "= 0.012"
    with pytest.raises(ValueError, match="tol must be a positive"):
        bound(0.1, 0)
    with pytest.raises(TypeError, match="diff must be a number"):
        bound(True)


def test_scale_makes_the_bound_relative_above_one_and_leaves_it_absolute_below():
    assert bound(5e-5, scale=92.0) == "< 1e-06"
    assert bound(5e-5, scale=0.5) == "= 5e-05"
    assert bound(61.0, scale=92.4) == "= 0.66"
    assert bound(3e-7, scale=None) == bound(3e-7)
    with pytest.raises(ValueError, match="scale must be a number >= 0"):
        bound(0.1, scale=-1.0)


def test_gap_divides_by_the_reference_size_floored_at_one():
    y = torch.tensor([100.0, -50.0])
    assert gap(y + 5e-5, y) == "< 1e-06"
    assert gap(y + 1.0, y) == "= 0.01"
    assert gap(torch.tensor([0.5]), torch.tensor([0.25])) == "= 0.25"
    assert gap(y.bfloat16().float(), y, 1e-2) == "< 1e-02"


def test_dtype_tol_counts_steps_of_the_format_and_says_where_they_come_from():
    from helpers.precision import describe_dtype_tol, dtype_tol
    assert dtype_tol(torch.bfloat16, 2) == 2 * 2.0 ** -7
    assert dtype_tol(torch.float32, 1) == 2.0 ** -23
    assert gap(torch.tensor([1.0 + 2 ** -7]), torch.tensor([1.0]), dtype_tol(torch.bfloat16, 2)) == "< 2e-02"
    line = describe_dtype_tol(torch.bfloat16, 2)
    assert line.startswith("bfloat16: 8 significant bits, one step ≤ 2⁻⁷ = 0.0078 of the value")
    assert "bound 2 steps = 0.0156" in line
    with pytest.raises(TypeError, match="dtype must be a floating"):
        dtype_tol(torch.int64, 1)
    with pytest.raises(ValueError, match="steps must be a positive"):
        dtype_tol(torch.bfloat16, 0)


def test_digits_prints_the_tolerance_it_was_checked_against():
    from helpers.precision import dtype_tol
    tol = dtype_tol(torch.bfloat16, 2)
    assert bound(0.001, tol, digits=3) == "< 0.0156"
    assert bound(0.001, tol) == "< 2e-02"                       # the default is unchanged
    assert bound(0.5, tol, digits=3) == "= 0.5"
    assert gap(torch.tensor([1.0 + 2 ** -7]), torch.tensor([1.0]), tol, digits=3) == "< 0.0156"
    with pytest.raises(ValueError):
        bound(0.1, digits=0)
