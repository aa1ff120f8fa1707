"""helpers.knockout_runs: the shipped file holds ten seeds on every fact, and the command reproduces seed 0."""
import pytest

from helpers import knockout_runs
from helpers.fact_model import load_fact_model
from helpers.facts import load_facts, make_dataset


def test_the_shipped_file_holds_ten_seeds_and_the_command_reproduces_seed_0(tmp_path):
    shipped = knockout_runs.load()
    assert sorted(shipped) == list(range(10))
    made = knockout_runs.make([0], tmp_path / "ko.json")
    assert knockout_runs.max_difference(made["runs"]["0"], shipped[0]) < 1e-5   # float32 sums: the file was made on AVX-512
    assert knockout_runs.load(tmp_path / "ko.json")[0]["size gap below 1e-4"][1] == 3 * 608


def test_each_seed_holds_every_set_at_every_site():
    run = knockout_runs.load()[3]
    assert set(run["sets"]) == set(run["random direction"]) == set(run["shared"]) == {
        "L0 subject", "L0 last word", "L1 last word"}
    for by_set in run["sets"].values():
        assert set(by_set) == {"own", "other", "matched", "size-matched", "random size-matched", "random"}
        assert all(len(v) == len(knockout_runs.QUANTITIES) for v in by_set.values())
        assert by_set["own"][3] == by_set["other"][3] == knockout_runs.N_OFF    # 40 neurons each
    assert run["matched activity gap"] < 1e-4


def test_max_difference_reads_every_number_and_rejects_mismatched_results():
    a = {"x": [1.0, 2.0], "y": {"z": 3.0}}
    assert knockout_runs.max_difference(a, {"x": [1.0, 2.5], "y": {"z": 2.0}}) == 1.0
    with pytest.raises(ValueError, match="same numbers"):
        knockout_runs.max_difference(a, {"x": [1.0], "y": {"z": 3.0}})


@pytest.mark.parametrize("n_off", [20, 80])
def test_the_set_size_files_hold_ten_seeds_at_their_size(n_off):
    path = knockout_runs.data_path(n_off)
    assert path.name == f"knockout_runs_{n_off}.json"
    runs = knockout_runs.load(path)
    assert sorted(runs) == list(range(10))
    assert all(run["sets"][site]["own"][3] == run["sets"][site]["other"][3] == n_off
               for run in runs.values() for site in run["sets"])


def test_the_command_reproduces_seed_0_at_20_neurons_per_set(tmp_path):
    made = knockout_runs.make([0], tmp_path / "ko20.json", n_off=20)
    assert made["n_off"] == 20 and made["made_by"].endswith("--n-off 20")
    assert knockout_runs.max_difference(made["runs"]["0"], knockout_runs.load(knockout_runs.data_path(20))[0]) < 1e-5


def test_live_gap_compares_a_fresh_run_of_seed_0_with_both_files():
    data = make_dataset(load_facts())
    assert knockout_runs.live_gap(load_fact_model(data, seed=0)[0], data) < 1e-5


def test_family_compares_every_set_with_other_at_every_site_and_verdicts_hold_across_set_sizes():
    runs = knockout_runs.load()
    site_names = list(runs[0]["sets"])
    fam = knockout_runs.family(runs, site_names, range(10))
    assert len(fam) == len(site_names) * len(knockout_runs.COMPARED) == 15
    own = knockout_runs.per_seed_mean(runs, site_names[0], "own", range(10))
    other = knockout_runs.per_seed_mean(runs, site_names[0], "other", range(10))
    assert fam[f"{site_names[0]}: own − other"].mean == pytest.approx(sum(a - b for a, b in zip(own, other)) / 10,
                                                                     abs=1e-6)
    assert knockout_runs.per_seed_mean(runs, site_names[0], "activity-matched", [0], "neurons off") == \
        [runs[0]["sets"][site_names[0]]["matched"][3]]
    assert set(knockout_runs.same_verdicts(site_names, range(10))) == {20, 80}


def test_grid_prints_one_line_per_set_with_every_verdict_of_the_family():
    from helpers.stats import holm
    sites = ["L0 subject", "L0 last word", "L1 last word"]
    fam = knockout_runs.family(knockout_runs.load(), sites, list(range(10)))
    lines = knockout_runs.grid(fam, sites).splitlines()
    assert len(lines) == 2 + len(knockout_runs.COMPARED)
    marks = sum(line.count("▲") + line.count("▼") for line in lines[2:])
    assert marks == sum(v.resolved for v in holm(fam)) and str(len(fam)) in lines[0]


def test_readout_shows_one_verdict_per_cell_and_folds_the_tables():
    from helpers import knockout_split
    site_names = ["L0 subject", "L0 last word", "L1 last word"]
    out = knockout_split.readout(knockout_runs.load(), knockout_split.load(), site_names, range(10))
    shown = repr(out).splitlines()
    assert len(shown) == 1 + 4 and shown[1].startswith("zeroed ") and "Holm over 15 tests" in shown[0]
    assert not any(" vs " in line or "mean-ablated" in line for line in shown)
    assert shown[2].split()[:2] == ["own", "+0.100"] and shown[4].split()[:3] == ["random", "direction", "-0.063"]
    assert "random size-matched" not in repr(out)
    html = out._repr_html_()
    assert "mean-ablated (Holm over 12)" in html and "+0.012 not resolved" in html and "+0.010 higher" in html
    assert "<details>" in html and "own only − shared" in html and "15 of 15 at 20" in html


def test_verdict_grid_shows_one_cell_per_site_and_holm_over_the_whole_family():
    from helpers.stats import holm, paired_difference
    fam = {f"{site}: {name}": paired_difference([d + 0.01 * k for k in range(6)], [0.0] * 6)
           for site in ("a", "b") for name, d in (("x", 1.0), ("y", -1.0), ("z", 0.0))}
    lines = knockout_runs.verdict_grid(fam, [("x label", "x"), ("y label", "y")], ["a", "b"], "title", width=20)
    assert len(lines) == 3 and lines[0].startswith("title" + " " * 15 + "a")
    assert lines[1].split() == ["x", "label", "+1.025", "higher", "+1.025", "higher"]
    assert lines[2].split()[-2:] == ["-0.975", "lower"]
    verdicts = {v.name: v.verdict for v in holm(fam)}
    assert verdicts["a: z"] == "higher"                    # z is in the family though not shown
    line = knockout_runs.verdict_summary({"p": fam["a: x"], "q": fam["b: y"]})
    assert line == "6 seeds, Holm over 2: p +1.025 higher; q -0.975 lower"
