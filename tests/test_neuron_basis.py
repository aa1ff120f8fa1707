"""helpers.neuron_basis: the pseudo-units of a rotated basis give the same output; the tests' masks, shares and
controls do what they say."""
import pytest
import torch

from helpers.neuron_basis import (Units, basis_tests, basis_tests_figure, neuron_units, random_rotation, random_writers,
                                  recall, rotated, switched_on, top_writers, towards_when_on, writers_figure,
                                  writes_along)
from helpers.width import init_ffn, memorisation_sweep, random_facts


@pytest.fixture(scope="module")
def sweep():
    return memorisation_sweep([16], d_model=4, n_facts=24, seeds=(0, 1, 2), steps=60, lr=3e-2, progress=False)


def test_rotation_is_orthogonal_seeded_and_keeps_the_output():
    q = random_rotation(12, 3)
    assert torch.allclose(q @ q.T, torch.eye(12, dtype=torch.float64), atol=1e-12)
    assert torch.equal(q, random_rotation(12, 3)) and not torch.equal(q, random_rotation(12, 4))
    ffn = init_ffn(4, 12, 0)
    keys, _ = random_facts(10, 4, 0)
    units = neuron_units(ffn, keys)
    with torch.no_grad():
        assert units.output().dtype == torch.float64
        assert torch.allclose(units.output().float(), ffn(keys), atol=1e-5)
        assert torch.allclose(rotated(units, q).output().float(), ffn(keys), atol=1e-5)
    with pytest.raises(ValueError, match=r"q must be \(12, 12\)"):
        rotated(units, torch.eye(5))


def test_shares_sum_to_the_outputs_component_along_each_value():
    ffn = init_ffn(4, 12, 1)
    keys, values = random_facts(10, 4, 1)
    units = neuron_units(ffn, keys)
    c = writes_along(units, values)
    with torch.no_grad():
        along = ((ffn(keys) - ffn.w2.bias) * values).sum(1) / values.pow(2).sum(1)
    assert c.shape == (10, 12) and torch.allclose(c.sum(1).float(), along, atol=1e-5)


def test_masks_pick_the_largest_writers_or_random_units_per_fact():
    c = torch.tensor([[0.1, 0.5, -0.2, 0.3], [0.4, -0.1, 0.2, 0.0]])
    assert top_writers(c, 2).tolist() == [[False, True, False, True], [True, False, True, False]]
    mask = random_writers((5, 7), 3, seed=0)
    assert mask.sum(1).tolist() == [3] * 5 and torch.equal(mask, random_writers((5, 7), 3, seed=0))
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 4\]"):
        top_writers(c, 5)


def test_zeroing_units_and_recall():
    units = Units(torch.eye(3), torch.eye(3), torch.zeros(3))          # fact n is written by unit n alone
    targets = torch.eye(3)
    assert recall(units.output(), targets) == 1.0
    keep = ~torch.eye(3, dtype=torch.bool)                              # zero each fact's own unit
    assert torch.equal(units.output(keep), torch.zeros(3, 3))


def test_selectivity_measures():
    ffn = init_ffn(4, 12, 2)
    keys, values = random_facts(30, 4, 2)
    on = switched_on(ffn, keys)
    with torch.no_grad():
        assert (on == (ffn.w1(keys) > 0)).float().mean() > 0.99     # float64 here, float32 there: ties may differ
    share = towards_when_on(ffn, keys, values)
    units = neuron_units(ffn, keys)
    c = writes_along(units, values)
    weight = units.coefficients.clamp(min=0) * on                   # weighted by how strongly each unit is on
    assert share == pytest.approx(((weight * (c > 0)).sum() / weight.sum()).item())
    assert 0 <= share <= 1


def test_basis_tests_over_seeds_and_the_family(sweep):
    tests = basis_tests(sweep.ffns[16], sweep.seeds, n_facts=24, ks=(1, 4, 16))
    assert tests.ks == [1, 4, 16] and tests.seeds == [0, 1, 2] and tests.n_facts == 24
    for table in (tests.knockout, tests.keep_only):
        assert set(table) == {"neurons", "rotated", "random neurons"}
        assert all(rows.shape == (3, 3) for rows in table.values())
    # every unit kept = nothing zeroed, in either basis; every unit zeroed leaves only b2
    for basis in ("neurons", "rotated"):
        assert tests.keep_only[basis][2].tolist() == pytest.approx(tests.intact)
    assert tests.on_share["trained"].shape == (3, 16) and tests.towards["untrained"].shape == (3,)
    family = tests.family(k_knockout=1, k_keep=4)
    assert len(family) == 5 and all(d.n == 3 for d in family.values())
    assert tests.mean("knockout", "neurons", 1) == pytest.approx(tests.knockout["neurons"][0].mean().item())
    with pytest.raises(ValueError, match="ffns and seeds must be non-empty and of one length"):
        basis_tests(sweep.ffns[16], [0, 1], n_facts=24)


def test_figures_draw(sweep):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = basis_tests(sweep.ffns[16], sweep.seeds, n_facts=24, ks=(1, 2))
    fig = basis_tests_figure(tests)
    assert len(fig.axes) == 3 and "24 facts" in fig._suptitle.get_text()
    plt.close(fig)
    from helpers.neuron_basis import lookup_table_ffn

    control = basis_tests([lookup_table_ffn(*random_facts(24, 4, s)) for s in sweep.seeds], sweep.seeds, n_facts=24,
                          ks=(1, 2))
    fig = basis_tests_figure(tests, steps=150, control=control)
    assert "trained 150 steps" in fig._suptitle.get_text()
    assert len(fig.axes[0].get_lines()) == len(fig.axes[1].get_lines()) == 4    # three bases and the table's neurons
    plt.close(fig)
    with pytest.raises(ValueError, match="same ks"):
        basis_tests_figure(tests, control=basis_tests([lookup_table_ffn(*random_facts(24, 4, 0))], [0], n_facts=24,
                                                      ks=(1,)))
    keys, values = random_facts(24, 4, 0)
    units = neuron_units(sweep.ffns[16][0], keys)
    fig = writers_figure(units, rotated(units, random_rotation(16, 0)), values, fact=3)
    assert len(fig.axes[0].get_lines()) == 3     # neurons, rotated, the zero line
    plt.close(fig)


def test_the_lookup_table_ffn_is_the_positive_control():
    """One ReLU unit per fact, switched on by its own key only: the tests must say "yes" for it."""
    from helpers.neuron_basis import lookup_table_ffn

    from helpers.neuron_basis import outscored

    keys, values = random_facts(64, 16, 0)
    ffn = lookup_table_ffn(keys, values)
    assert (ffn.d_model, ffn.d_ff) == (16, 64)
    on = switched_on(ffn, keys)
    silent = outscored(keys)
    assert torch.equal(on, torch.diag(~silent))            # each unit passes its own key only, or none if outscored
    assert recall(ffn(keys).detach(), values) == pytest.approx(1 - silent.float().mean().item())
    twins = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])    # key 0 is outscored by key 1 along its direction
    assert outscored(twins).tolist() == [True, False, False]
    assert torch.equal(switched_on(lookup_table_ffn(twins, twins), twins), torch.diag(torch.tensor([False, True, True])))
    tests = basis_tests([ffn], [0], n_facts=64, ks=(1,))
    assert tests.mean("knockout", "neurons", 1) < 0.2 < 0.8 < tests.mean("keep_only", "neurons", 1)
    assert tests.mean("keep_only", "rotated", 1) < 0.2
    with pytest.raises(ValueError, match="keys and values"):
        lookup_table_ffn(keys, values[:3])
