import random

import pytest

import numpy as np
import torch

from helpers import env


def test_setup_seeds_and_returns_device(capsys):
    device = env.setup(seed=3)
    line = capsys.readouterr().out.strip()
    assert line.startswith(env.VERSION_LINE_PREFIX) and f"device: {device}" in line
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    env.setup(seed=3, quiet=True)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item())


def test_nothing_missing_here():
    assert env.missing_packages() == []
    assert env.install_missing() == []


def test_setup_cell_uses_the_course_repo():
    assert env.REPO_URL in env.SETUP_CELL
    assert "google.colab" in env.SETUP_CELL


def test_setup_runs_torch_on_one_thread_unless_told_otherwise():
    before = torch.get_num_threads()
    try:
        env.setup(quiet=True)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        env.setup(threads=None, quiet=True)
        assert torch.get_num_threads() == 2
        with pytest.raises(ValueError, match="threads must be a positive int, got 0"):
            env.setup(threads=0, quiet=True)
    finally:
        torch.set_num_threads(before)
