"""helpers.neuron_census: single-neuron knock-outs on every fact, shipped for ten seeds."""
import torch

from helpers import neuron_census
from helpers.fact_model import load_fact_model
from helpers.facts import load_facts, make_dataset

SITES = {"L0 subject", "L0 last word", "L1 last word"}


def test_the_shipped_file_holds_ten_seeds_with_every_site():
    runs = neuron_census.load()
    assert sorted(runs) == list(range(10))
    for run in runs.values():
        assert set(run) == SITES
        for r in run.values():
            assert 0 <= r["most flipped by one neuron"] <= r["facts flipped"] <= 608
            assert 0.0 <= r["median worst drop"] <= r["max drop"] <= 1.0


def test_the_census_reproduces_the_files_layer_1_row_of_seed_0():
    data = make_dataset(load_facts())
    model = load_fact_model(data, seed=0)[0]
    p0, right0 = neuron_census._answers(model, data)
    assert right0.float().mean() == 1.0 and p0.min() > 0.5
    shipped = neuron_census.load()[0]
    assert shipped["L1 last word"]["facts flipped"] == 0
    assert abs(shipped["L0 subject"]["max drop"] - 0.378) < 1e-3          # the seed-0 run of the command


def test_the_report_has_one_line_per_site():
    runs = neuron_census.load()
    assert len(neuron_census.report(runs, list(range(10)), 608).splitlines()) == len(SITES)
