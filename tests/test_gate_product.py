"""helpers.gate_product: the shipped product/control experiment of notebook 04, section 6.3."""
import math

import pytest

from helpers.ffn import VARIANT_NAMES
from helpers.gate_product import DATA_PATH, FLOOR, TARGETS, VARIANTS, family, load, make_task, train
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
    assert len(verdicts) == 45
    for arm in ("a²", "ReLU²", "GEGLU", "SwiGLU"):    # on the control, GELU is the target's own kind
        assert verdicts[f"product: {arm} ÷ GELU"] == "lower"
        assert verdicts[f"control: {arm} ÷ GELU"] == "higher"
    for arm in ("a²", "ReLU²", "GEGLU", "SwiGLU"):    # against Swish, smooth but not the control's kind: higher there
        assert verdicts[f"control: {arm} ÷ Swish"] == "higher"
    for arm in ("a²", "ReLU²", "GEGLU", "SwiGLU"):    # against ReLU, which forms no products: lower on the control
        assert verdicts[f"control: {arm} ÷ ReLU"] == "lower"
    assert verdicts["gate: GEGLU ÷ GELU"] == "lower" and verdicts["gate: SwiGLU ÷ GELU"] == "not resolved"
    assert verdicts["gate: GEGLU ÷ ReLU²"] == "higher" and verdicts["gate: SwiGLU ÷ ReLU²"] == "higher"
    for t in TARGETS:                                  # every chosen rate is inside the sweep
        for v in VARIANTS:
            assert min(result["lrs"]) < result["best_lr"][t][v] < max(result["lrs"])
