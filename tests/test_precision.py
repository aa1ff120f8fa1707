"""helpers.precision: gaps measured in float64 and printed as bounds."""
import numpy as np
import pytest
import torch

from helpers.precision import bound, max_abs_diff


def test_max_abs_diff_takes_tensors_arrays_and_lists_in_float64():
    a = torch.tensor([1.0, 2.0], dtype=torch.float32)
    assert max_abs_diff(a, np.array([1.0, 2.5])) == 0.5
    assert max_abs_diff([[1.0]], [[1.0 + 1e-15]]) == pytest.approx(1e-15, rel=0.2)
    assert max_abs_diff(torch.zeros(0), torch.zeros(0)) == 0.0
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
