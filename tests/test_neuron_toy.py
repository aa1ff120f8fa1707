"""helpers.neuron_toy: the shipped file's seed 0 is recomputed exactly, and the readings mean what they say."""
import torch

from helpers.neuron_toy import (NEURON_TOY, features_per_neuron, load_neuron_toy, neuron_hidden, neuron_toy_runs,
                                recovered_features, recovery_arms, train_neuron_toys)


def test_seed_0_recomputed_matches_the_shipped_file():
    filed, live = load_neuron_toy(), neuron_toy_runs([0])
    assert filed["config"] == NEURON_TOY
    assert live["features_per_neuron"][0] == filed["features_per_neuron"][0]
    assert {k: v[0] for k, v in live["represented"].items()} == {k: v[0] for k, v in filed["represented"].items()}
    assert {k: v[0] for k, v in live["recovered"].items()} == {k: v[0] for k, v in filed["recovered"].items()}
    assert list(filed["recovered"]) == ["data start, step 0", "data start, trained", "random start, trained",
                                        "the neurons themselves", "random directions"]


def test_a_seed_trains_the_same_whichever_seeds_train_beside_it():
    alone, _ = train_neuron_toys([1], steps=30)
    together, _ = train_neuron_toys([0, 1], steps=30)
    assert torch.allclose(alone[0], together[1], atol=1e-12)


def test_readings_on_a_hand_made_layer():
    W = torch.tensor([[1.0, 0.0, 0.8], [0.0, 1.0, -0.6]], dtype=torch.float64)   # 2 neurons, 3 features
    assert features_per_neuron(W).tolist() == [2, 1]
    assert recovered_features(W, torch.eye(2, dtype=torch.float64)) == 3        # ReLU(W_2) = (0.8, 0): neuron 0
    h = neuron_hidden(W, 0.5, 50, seed=0)
    assert h.shape == (50, 2) and bool((h >= 0).all())


def test_the_step_0_arm_scores_the_data_start_itself():
    """With every direction one input h, the step-0 arm counts the features some single input points along."""
    W = torch.tensor([[1.0, 0.0, 0.8], [0.0, 1.0, -0.6]], dtype=torch.float64)
    h = neuron_hidden(W, 0.5, 50, seed=0)
    arms = recovery_arms(W, h, (torch.eye(2, dtype=torch.float64),) * 2, seed=0, config={**NEURON_TOY, "n_directions": 50})
    assert arms["the neurons themselves"] == arms["random start, trained"] == 3
    assert 0 <= arms["data start, step 0"] <= 3
    assert 0 <= arms["random directions"] <= 3


def test_random_directions_lie_in_the_positive_orthant_and_are_seeded():
    W = torch.tensor([[1.0, 0.0, 0.8], [0.0, 1.0, -0.6]], dtype=torch.float64)
    h = neuron_hidden(W, 0.5, 50, seed=0)
    eye = (torch.eye(2, dtype=torch.float64),) * 2
    assert recovery_arms(W, h, eye, seed=4) == recovery_arms(W, h, eye, seed=4)
    # a 1-neuron layer: every positive direction is the neuron axis, so the random arm recovers what the neuron does
    W1 = torch.tensor([[1.0, 0.7]], dtype=torch.float64)
    arms = recovery_arms(W1, neuron_hidden(W1, 0.5, 20), (torch.eye(1, dtype=torch.float64),) * 2, seed=0,
                         config={**NEURON_TOY, "n_directions": 5})
    assert arms["random directions"] == arms["the neurons themselves"] == 2


def test_the_sparsity_contrast_file_recomputes_seed_0():
    from helpers.neuron_toy import SPARSITY_CONTRAST, load_neuron_toy_sparsity, sparsity_table
    contrast = load_neuron_toy_sparsity()
    filed = contrast["runs"]
    assert [(float(s), filed[s]["k"]) for s in filed] == list(SPARSITY_CONTRAST)
    s, k = SPARSITY_CONTRAST[0]
    live = neuron_toy_runs([0], {**NEURON_TOY, "sparsity": s, "k": k})
    assert live["features_per_neuron"][0] == filed[str(s)]["features_per_neuron"][0]
    assert {n: v[0] for n, v in live["recovered"].items()} == {n: v[0] for n, v in filed[str(s)]["recovered"].items()}
    table = sparsity_table({**filed, "0.9": {"k": 1, **load_neuron_toy()}})
    assert "S = 0.5 (k = 5)" in table and "S = 0.9 (k = 1)" in table
    from helpers.neuron_toy import K_SWEEP, k_sweep_line
    assert list(contrast["k_sweep"]["recovered, random start"]) == [str(k) for k in K_SWEEP]
    assert "k = 1, 2, 3" in k_sweep_line(contrast, filed[str(s)]["recovered"]["the neurons themselves"])
    line = k_sweep_line(contrast, filed[str(s)]["recovered"]["the neurons themselves"],
                        filed[str(s)]["recovered"]["random directions"])
    assert "random directions 0.9, the dictionary higher in 6, 9, 9 of 15 seeds" in line
