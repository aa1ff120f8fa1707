import random

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
