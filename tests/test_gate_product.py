"""helpers.gate_product: the shipped product/control experiment of notebook 04, section 6.3."""
import math

import pytest

from helpers.ffn import VARIANT_NAMES
from helpers.gate_product import (DATA_PATH, FLOOR, LONGER_PATH, READ_ROWS, TARGETS, VARIANTS, family,
                                   gate_content_cosine, load, make_task, train)
from helpers.stats import holm


def test_targets_have_unit_variance_on_the_test_inputs():
    for target in TARGETS:
        x, y, x_test, y_test = make_task(target, 0)
        assert x.shape == (512, 8) and y_test.shape == (2048, 8)
        assert y_test.var(dim=0).sub(1).abs().max() < 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_seed_0_retrained_matches_the_shipped_runs(target):
    result = load(DATA_PATH)
    for variant in VARIANTS:
        live = train(variant, target, [0], result["best_lr"][target][variant])[0]["test"]
        stored = result["runs"][target][variant][0]["test"]
        if stored < FLOOR:                             # float32's noise floor: only the floor is reproducible
            assert live < FLOOR, (target, variant, live)
        else:
            assert abs(math.log(live / stored)) < 0.05, (target, variant, live, stored)


def test_shipped_verdicts_are_the_ones_the_notebook_reads():
    result = load(DATA_PATH)
    verdicts = {v.name: v.verdict for v in holm(family(result, VARIANT_NAMES))}
    assert len(verdicts) == 36
    for arm in ("a²", "ReLU²", "Bilinear", "ReGLU", "GEGLU", "SwiGLU"):   # same parameters as GELU (32 units)
        assert verdicts[f"product: {arm} ÷ GELU"] == "lower"
        assert verdicts[f"control: {arm} ÷ GELU"] == "higher"
    for t in TARGETS:                                  # 21 dense units against 32: higher on every target
        assert verdicts[f"{t}: GELU 21 ÷ GELU"] == "higher"
    for arm in ("Bilinear", "ReGLU", "GEGLU", "SwiGLU"):  # same units: every gated arm lower on both product targets
        assert verdicts[f"product: {arm} ÷ GELU 21"] == "lower"
    for arm in ("ReGLU", "GEGLU", "SwiGLU"):
        assert verdicts[f"gate: {arm} ÷ GELU 21"] == "lower"
    assert verdicts["gate: Bilinear ÷ GELU 21"] == "higher"
    assert [verdicts[f"control: {a} ÷ GELU 21"] for a in ("Bilinear", "ReGLU", "GEGLU", "SwiGLU")] == [
        "not resolved", "higher", "lower", "higher"]
    assert verdicts["gate: GEGLU ÷ GELU"] == "lower" and verdicts["gate: SwiGLU ÷ GELU"] == "not resolved"
    assert verdicts["gate: ReGLU ÷ GELU"] == "not resolved" and verdicts["control: Swish ÷ GELU"] == "not resolved"
    for v in ("square", "bilinear"):                   # products exactly representable: float32's floor, every seed
        assert max(r["test"] for r in result["runs"]["product"][v]) < FLOOR
    for t in TARGETS:                                  # every chosen rate is inside the sweep
        for v in VARIANTS:
            assert min(result["lrs"]) < result["best_lr"][t][v] < max(result["lrs"])


def test_training_error_check_is_the_same_family():
    result = load(DATA_PATH)
    test, train_ = (holm(family(result, VARIANT_NAMES, score)) for score in ("test", "train"))
    assert [v.name for v in test] == [v.name for v in train_] and len(train_) == 36
    for t in TARGETS:                                  # training error is below held-out error for every arm
        for v in VARIANTS:
            assert all(r["train"] < r["test"] for r in result["runs"][t][v] if r["test"] > FLOOR), (t, v)


def test_gate_content_cosine_keep_returns_the_trained_weights():
    result = load(DATA_PATH)
    kept = []
    train("swiglu", "product", [0], result["best_lr"]["product"]["swiglu"], steps=5, keep=kept)
    assert [tuple(p.shape) for p in kept] == [(1, 21, 8), (1, 21), (1, 21, 8), (1, 21), (1, 8, 21), (1, 8)]
    c = gate_content_cosine("product", [0], 0.01, steps=5)
    assert 0 < c.init < 1 and 0 < c.trained < 1 and c.units == 21
    assert 0 <= c.init_aligned <= c.units and 0 <= c.trained_aligned <= c.units


def test_longer_run_keeps_the_verdicts_the_notebook_states_at_both_lengths():
    result, longer = load(DATA_PATH), load(LONGER_PATH)
    assert longer["steps"] == 3000 and longer["test_seeds"] == result["test_seeds"]
    assert all(set(longer["runs"][t]) == set(VARIANTS) for t in TARGETS)
    for r in (result, longer):
        verdicts = {v.name: v.verdict for v in holm(family(r, VARIANT_NAMES))}
        for arm in ("Bilinear", "ReGLU", "GEGLU", "SwiGLU"):
            assert verdicts[f"product: {arm} ÷ GELU"] == "lower"
            assert verdicts[f"control: {arm} ÷ GELU"] == "higher"
            assert verdicts[f"product: {arm} ÷ GELU 21"] == "lower"
        for arm in ("ReGLU", "GEGLU", "SwiGLU"):
            assert verdicts[f"gate: {arm} ÷ GELU 21"] == "lower"
        assert verdicts["gate: Bilinear ÷ GELU 21"] == "higher"
        assert verdicts["control: GELU 21 ÷ GELU"] == "higher"
    at_3000 = {v.name: v.verdict for v in holm(family(longer, VARIANT_NAMES))}
    assert all(at_3000[f"gate: {arm} ÷ GELU"] != "lower" for arm in ("Bilinear", "ReGLU", "GEGLU", "SwiGLU"))
    assert len(READ_ROWS) == 9


def test_verdict_lines_are_the_lines_the_notebook_reads():
    """Notebook 04, cells 50-52: ten lines of verdicts after 3,000 steps, [the 1,000-step verdict] where it
    differs; the two checks beside them."""
    from helpers.gate_product import check_lines, verdict_lines
    result, longer = load(DATA_PATH), load(LONGER_PATH)
    lines = verdict_lines(result, longer, VARIANT_NAMES).splitlines()
    assert len(lines) == 10 and "Holm over 36 rows" in lines[0]
    assert lines[1].endswith("lower: Bilinear (floor), ReGLU ×0.18, GEGLU ×0.037, SwiGLU ×0.093; higher: GELU 21 ×4.4")
    assert lines[2].endswith("lower: a² (floor), ReLU² ×0.31")
    assert "not resolved: ReGLU ×1.1, GEGLU ×0.95 [lower], SwiGLU ×1.0" in lines[4]
    assert lines[5].endswith("lower: ReLU² ×0.86, Swish ×0.94 [not resolved]")   # the dense arms below GELU
    assert lines[6].endswith("lower: ReGLU ×0.55, GEGLU ×0.48, SwiGLU ×0.53; higher: Bilinear ×1.4")
    assert lines[7].endswith("higher: Bilinear ×2.2, ReGLU ×2.3, GEGLU ×1.9, SwiGLU ×2.2, GELU 21 ×2.0")
    assert lines[8].endswith("not resolved: Swish ×1.0; higher: a² ×2.2, ReLU² ×2.1")     # 32 units: other kinds, a twin
    assert "GEGLU ×0.98 [lower]" in lines[9] and lines[9].endswith("ReGLU ×1.2, SwiGLU ×1.1")
    checks = check_lines(result, longer, VARIANT_NAMES)
    assert "33 of 36 verdicts stay" in checks and "product 0.0123 → 0.0072" in checks


def test_full_readout_and_figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.gate_product import full_readout, ratio_figure
    result, longer = load(DATA_PATH), load(LONGER_PATH)
    text = full_readout(result, longer, VARIANT_NAMES)
    assert "Holm over 36 rows" in text and "GEGLU ÷ GELU        ×0.057 24/0  lower" in text
    assert "judged on training error, 33 of 36 verdicts stay" in text and "×0.94 lower → ×0.95 n.r." in text
    after = text.split("3,000 steps, the same seeds")[1].splitlines()   # every row of the family, 1,000 → 3,000
    assert len(after) == 2 + 12
    dense = {line.split("  ")[0]: line for line in after if line.startswith(("Swish", "a²", "ReLU²"))}
    assert dense["Swish ÷ GELU"].endswith("×0.96 n.r. → ×0.94 lower      ×1.0 n.r. → ×1.0 n.r.")   # cell 52 reads
    assert "×2.2 higher" in dense["a² ÷ GELU"] and "×0.86 lower" in dense["ReLU² ÷ GELU"]         # these at 3,000
    fig = ratio_figure(result, longer, VARIANT_NAMES)
    assert [ax.get_title() for ax in fig.axes] == [f"{t} target" for t in TARGETS]
    hollow = [ln for ln in fig.axes[1].lines if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 6      # gate target, not resolved: ReGLU, SwiGLU (both lengths), GEGLU (3,000), Swish (1,000)
    plt.close(fig)


def test_cell_51_lines_retrain_and_cosines():
    """Notebook 04, cell 51 shows only helper lines: the retrained run within 5 % of the stored one, and the
    gate/content cosines on a 0.05 grid (one seed here, to keep the test short)."""
    from helpers.gate_product import cosine_lines, retrain_line
    result = load(DATA_PATH)
    assert retrain_line(result) == "SwiGLU, product target, seed 0, retrained here: error within 5 % of the stored run's"
    first, second = cosine_lines(result, seeds=[0]).splitlines()
    assert first.startswith("SwiGLU units, median |cos| of gate row w1_i and content row w3_i, seeds 0-0: ")
    low, high = (float(x) for x in first.split("between ")[1].split(" on")[0].split(" and "))
    assert low <= high and round(low * 20, 6).is_integer() and round(high * 20, 6).is_integer()
    assert second.startswith("units in line (|cos| > 0.9), of 21: ") and "product " in second and "control " in second
