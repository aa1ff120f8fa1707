"""helpers.moe_expert_count, section 10: section 7's E = 8 fact lookup scored at each capacity factor (shipped file)."""
from helpers.moe_expert_count import load_expert_count
from helpers.moe_expert_count import (FACTORS, capacity_key as key, load_lookup_capacity, lookup_capacity_family,
                                         lookup_capacity_line, capacity_values)


def test_dropless_column_is_section_sevens_e8_runs():
    study, by_count = load_lookup_capacity(), load_expert_count()
    assert study["runs"].keys() == by_count["loss"]["8"].keys()
    for seed, run in study["runs"].items():
        assert run["dropless"]["loss"] == by_count["loss"]["8"][seed]
        assert set(run) == {key(f) for f in FACTORS}


def test_a_factor_that_drops_nothing_scores_as_dropless_and_is_not_tested():
    study = load_lookup_capacity()
    assert float(capacity_values(study, "c = 2", "dropped").max()) == 0.0
    assert capacity_values(study, "c = 2").tolist() == capacity_values(study, "dropless").tolist()
    assert list(lookup_capacity_family(study)) == ["answer loss at c = 1.25 − dropless", "answer loss at c = 1 − dropless"]


def test_line_prints_each_factor_and_the_verdicts():
    line = lookup_capacity_line(load_lookup_capacity())
    assert line.startswith("E = 8 fact lookup, mean of 10 seeds; each factor − dropless, paired, Holm over 2:")
    rows = {r.split("  ")[0].strip(): r.split() for r in line.splitlines()[2:6]}
    assert rows["dropless"][1] == "0.38" and "not tested" in line.splitlines()[3]
    assert rows["c = 1"][3:] == ["1.06", "7.8%", "+0.68", "10/10", "resolved"], rows["c = 1"]


def test_a_dropped_fact_scores_worse_than_a_uniform_guess_in_every_seed():
    import math
    study = load_lookup_capacity()
    lost = [run["c = 1"]["dropped_loss"] for run in study["runs"].values()]
    assert min(lost) > math.log(296)
    assert "the facts whose slot was dropped: answer loss 9.2 (7.3–11.4 over seeds)" in lookup_capacity_line(study)
    assert "ln 296 = 5.69" in lookup_capacity_line(study)


def test_c1_against_the_dense_ffn_of_its_active_parameters_joins_the_family():
    """Review 05-r62: cell 62 reads c = 1 against the dense FFN of E = 8's active parameters with its verdict."""
    from helpers.moe_expert_count import load_expert_count

    line = lookup_capacity_line(load_lookup_capacity(), load_expert_count())
    assert line.startswith("E = 8 fact lookup, mean of 10 seeds; each factor − dropless and c = 1 − the dense FFN "
                           "(last line), paired, Holm over 3:")
    assert line.splitlines()[-1] == ("c = 1 − the dense FFN of its active parameters (width 11, 0.96): +0.10, "
                                     "not resolved (3 lower, 7 higher of 10)")
