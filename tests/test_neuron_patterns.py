import pytest
import torch

from helpers.memory import pattern_neuron_share
from helpers.neuron_patterns import pattern_share_table, random_set_share, selective_share


def _coefficients(n=12, t=3, d_ff=4, seed=0):
    return torch.randn(n, t, d_ff, generator=torch.Generator().manual_seed(seed))


def test_pattern_share_table_is_pattern_neuron_share_per_model_and_labelling():
    valid = torch.ones(12, 3, dtype=torch.bool)
    labels = ["a", "b", "c"] * 4
    rows = torch.arange(12) % 2 == 0
    models = [_coefficients(seed=s) for s in range(3)]
    table = pattern_share_table(models, valid, {"all": (None, labels), "even": (rows, labels[::2])}, k=4,
                                threshold=0.5)
    assert table.shape == (3, 2)
    for m, c in enumerate(models):
        assert table[m, 0].item() == pytest.approx(pattern_neuron_share(c, valid, labels, 4, 0.5))
        assert table[m, 1].item() == pytest.approx(pattern_neuron_share(c[rows], valid[rows], labels[::2], 4, 0.5))


def test_pattern_share_table_names_a_labelling_of_the_wrong_length():
    with pytest.raises(ValueError, match="labellings\\['x'\\]"):
        pattern_share_table([_coefficients()], torch.ones(12, 3, dtype=torch.bool), {"x": (None, ["a"] * 5)})


def test_random_set_share_one_label_always_and_distinct_labels_never():
    g = torch.Generator().manual_seed(0)
    assert random_set_share(["a"] * 20, 5, 50, 0.8, g) == 1.0
    assert random_set_share(list(range(20)), 5, 50, 0.8, g) == 0.0


def test_selective_share_counts_relation_neurons_whose_other_relations_stay_below_half():
    # 4 prompts of relation 0 then 4 of relation 1; neuron 0 fires on relation 0 only, neuron 1 on relation 1 only
    relation = torch.tensor([0] * 4 + [1] * 4)
    c = torch.zeros(8, 1, 2)
    c[:4, 0, 0] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    c[4:, 0, 1] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    valid = torch.ones(8, 1, dtype=torch.bool)
    selective = torch.tensor([[2.5, 0.0], [0.0, 2.5]])           # (d_ff, R): each silent on the other relation
    assert selective_share(c, selective, valid, relation, k=4, threshold=0.8) == 1.0
    half_selective = torch.tensor([[2.5, 2.0], [0.0, 2.5]])      # neuron 0 fires at 0.8 of its own elsewhere
    assert selective_share(c, half_selective, valid, relation, k=4, threshold=0.8) == 0.5
    with pytest.raises(ValueError, match="relation neuron"):
        selective_share(c, -selective, valid, relation, k=4, threshold=0.8)   # no positive own mean


def test_share_family_is_the_paired_trained_minus_untrained_share_per_layer_and_labelling():
    from types import SimpleNamespace
    from helpers.neuron_patterns import share_family
    valid = torch.ones(12, 3, dtype=torch.bool)
    labellings = {"all": (None, ["a", "b", "c"] * 4)}
    trace = lambda seed: SimpleNamespace(coefficients=[_coefficients(seed=seed), _coefficients(seed=seed + 50)])
    trained, untrained = {s: trace(s) for s in range(3)}, {s: trace(s + 10) for s in range(3)}
    family, means = share_family(trained, untrained, valid, labellings, range(2), k=4, threshold=0.5)
    assert list(family) == ["layer 0, same all", "layer 1, same all"]
    after = pattern_share_table([trained[s].coefficients[1] for s in range(3)], valid, labellings, 4, 0.5)
    before = pattern_share_table([untrained[s].coefficients[1] for s in range(3)], valid, labellings, 4, 0.5)
    assert family["layer 1, same all"].mean == pytest.approx((after - before)[:, 0].mean().item())
    assert means[1][0].tolist() == pytest.approx(after.mean(0).tolist())


def test_resolved_higher_counts_holms_higher_verdicts_at_each_threshold():
    from helpers.neuron_patterns import resolved_higher, share_families, share_family
    from helpers.stats import holm
    from types import SimpleNamespace
    valid = torch.ones(12, 3, dtype=torch.bool)
    labellings = {"all": (None, ["a", "b", "c"] * 4)}
    trace = lambda seed: SimpleNamespace(coefficients=[_coefficients(seed=seed), _coefficients(seed=seed + 50)])
    trained, untrained = {s: trace(s) for s in range(3)}, {s: trace(s + 10) for s in range(3)}
    got = resolved_higher(share_families(trained, untrained, valid, labellings, range(2), k=4, needed=(2, 3)))
    for n in (2, 3):
        family = share_family(trained, untrained, valid, labellings, range(2), k=4, threshold=n / 4)[0]
        assert got[n] == sum(v.verdict == "higher" for v in holm(family))


def test_random_basis_family_is_neurons_minus_the_mean_over_random_bases():
    from types import SimpleNamespace
    from helpers.memory import oriented, random_orthonormal
    from helpers.neuron_patterns import random_basis_family
    valid = torch.ones(12, 3, dtype=torch.bool)
    labellings = {"all": (None, ["a", "b", "c"] * 4)}
    traces = {s: SimpleNamespace(coefficients=[_coefficients(seed=s)]) for s in range(3)}
    family, means = random_basis_family(traces, valid, labellings, [0], k=4, needed=2, rotations=2,
                                        generator=torch.Generator().manual_seed(5))
    assert list(family) == ["layer 0, same all: neurons − random directions"]
    own = pattern_share_table([traces[s].coefficients[0] for s in range(3)], valid, labellings, 4, 0.5)
    g = torch.Generator().manual_seed(5)
    rotated = []
    for s in range(3):
        c = traces[s].coefficients[0]
        rotated.append(torch.stack([pattern_share_table([c @ oriented(c, random_orthonormal(c.shape[-1], g), valid)], valid, labellings,
                                                        4, 0.5)[0] for _ in range(2)]).mean(0))
    rotated = torch.stack(rotated)
    assert means[0][0].tolist() == pytest.approx(own.mean(0).tolist())
    assert means[0][1].tolist() == pytest.approx(rotated.mean(0).tolist())
    assert family["layer 0, same all: neurons − random directions"].mean == pytest.approx((own - rotated)[:, 0].mean().item())
