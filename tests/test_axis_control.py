"""helpers.neuron_dictionary's axis control: the best-axis-cosine reading on a hand-made dictionary, and the shipped control's shape."""
import torch

from helpers.neuron_dictionary import axis_control_line, best_axis_cosines, load_axis_control, random_axis_cosine


class _Dictionary:
    """Two used features (one on neuron 0, one halfway between neurons 1 and 2) and one never active."""
    W_dec = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 0.0]], dtype=torch.float64)

    def encode(self, a):
        return torch.tensor([[1.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=torch.float64)


def test_best_axis_cosines_reads_used_features_only():
    best = best_axis_cosines(_Dictionary(), torch.zeros(2, 3))
    assert torch.allclose(best, torch.tensor([1.0, 2 ** -0.5], dtype=torch.float64))


def test_the_shipped_control_separates_the_two_kinds_of_data():
    runs = load_axis_control()
    real = [r["median best cosine"] for r in runs["real neurons"]]
    axis = [r["median best cosine"] for r in runs["sparse on the neuron axes"]]
    assert len(real) == len(axis) == len(runs["models"]) * len(runs["seeds"])
    assert max(real) < min(axis)
    assert "real neurons" in axis_control_line(runs)


def test_chance_level_of_the_best_axis_cosine():
    assert random_axis_cosine(1, n=10) == 1.0                              # one dimension: every direction is the axis
    chance = random_axis_cosine()
    assert 0.15 < chance < 0.3 and chance == random_axis_cosine()          # 192 dimensions, seeded
    assert chance < min(r["median best cosine"] for r in load_axis_control()["real neurons"])
