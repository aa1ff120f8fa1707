"""Does a gated FFN fit products of input directions better than a dense FFN of the same size? (notebook 04)

Section 4 shows one gated unit computing ``φ(w1·x)·(w3·x)``, a product of two directions. This module asks
whether that shows at FFN level, at matched parameters (``d = 8``: dense width 32, gated width 21, biases on), on
three noise-free targets ``R^8 -> R^8`` of Gaussian inputs, each built from 32 (or 64) random unit directions:

* ``product``: ``y = Σ_j (x·u_j)(x·v_j) c_j``: a Bilinear FFN of width 32 without biases;
* ``gate``: ``y = Σ_j ReLU(x·u_j)(x·v_j) c_j`` (same draws): a ReGLU FFN of width 32, the gate's own shape;
* ``control``: ``y = Σ_j GELU(x·w_j) c_j`` over 64 directions, no product: a dense GELU FFN of width 64.

The arms: dense GELU and Swish (GELU's near-twin: ``GELU(z) ≈ z·σ(1.702 z) = Swish(1.702 z) / 1.702``,
Hendrycks & Gimpel 2016, so a dense Swish FFN can rescale its rows to GELU's shape); dense FFNs with a squared
activation, ``a²`` and squared ReLU (Primer), which form products without a gate since ``(u·x)(v·x) = ¼[((u+v)·x)² − ((u−v)·x)²]``;
gated Bilinear (the product target's own kind), ReGLU (the gate target's own kind), GEGLU and SwiGLU; and a dense
GELU FFN of the gated arms' width, 21 units (365 parameters), which separates "a product unit" from "more units": a
gated arm has as many units as it and as many parameters as the width-32 GELU. (A second model size is not run: it
would double the data file's CPU time.) Each target is scaled to unit variance per output over the test inputs. Every arm is trained full batch with Adam and a cosine
schedule on 512 inputs for ``STEPS`` steps; the score is the held-out error as a fraction of the target's
variance, ``FVU = MSE / Var(y)`` on 2,048 fresh inputs. Within a seed, every arm sees the same target and data.
Each arm's learning rate is its best of ``LRS`` (lowest mean log FVU) on the sweep seeds, per target; the test
seeds are others. Comparisons are paired over seeds on ``ln FVU`` (a ratio of errors), judged with
``helpers.stats.holm`` over ``family``'s rows.

Too slow to run live (about 7 CPU-minutes); made by

    python -m helpers.gate_product                 # writes helpers/data/gate_product.json
    python -m helpers.gate_product --longer 3000   # then helpers/data/gate_product_3000.json (about 6 CPU-minutes)

and checked in the notebook by retraining test seed 0. The second file trains every arm again on the same test
seeds at the same rates for 3,000 steps: 1,000 steps are not converged, and ``print_checks`` shows which verdicts
hold at both lengths, and how much of the held-out error is generalisation error (training error beside it).

The notebook shows ``ratio_figure`` (each arm's error ÷ GELU's, per target, both lengths) and ``verdict_lines``
(the rows it reads, grouped by verdict), then ``retrain_line`` (one stored run trained again), ``check_lines`` and
``cosine_lines`` (do SwiGLU's units keep two directions?); ``full_readout`` returns every table (``print_verdicts``,
``print_checks``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from helpers.activations import get_activation
from helpers.ffn import FFN, VARIANT_NAMES, VARIANTS as FFN_VARIANTS
from helpers.stats import PairedDifference, holm, paired_difference

DATA_PATH = Path(__file__).parent / "data" / "gate_product.json"
LONGER_PATH = Path(__file__).parent / "data" / "gate_product_3000.json"
LONGER_STEPS = 3000
D, N_TRAIN, N_TEST, PAIRS = 8, 512, 2048, 32
STEPS = 1000
LRS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
SWEEP_SEEDS = (100, 101, 102)
TEST_SEEDS = tuple(range(24))
DENSE, SQUARED, GATED = ("gelu", "swish"), ("square", "relu2"), ("bilinear", "reglu", "geglu", "swiglu")
NARROW = "gelu21"                                      # dense GELU with the gated arms' 21 units
VARIANTS = DENSE + (NARROW,) + SQUARED + GATED
TARGETS = ("product", "gate", "control")
SAME_PARAMS = [("swish", "gelu")] + [(v, "gelu") for v in SQUARED + GATED] + [(NARROW, "gelu")]
SAME_UNITS = [(g, NARROW) for g in GATED]
ROWS = SAME_PARAMS + SAME_UNITS                        # (arm, reference), per target: 12
ARM_NAMES = {"square": "a²", "relu2": "ReLU²", NARROW: "GELU 21"}   # the arms ``helpers.ffn.VARIANTS`` does not name
FLOOR = 1e-6                                           # float32 training's noise floor for an FVU


def make_task(target: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs and targets of one seed: ``(x_train (512, 8), y_train (512, 8), x_test (2048, 8),
    y_test (2048, 8))``, float32, ``y`` scaled to unit variance per output over the test inputs."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    g = torch.Generator().manual_seed(10_000 + seed)
    unit = lambda n: F.normalize(torch.randn(n, D, generator=g, dtype=torch.float64), dim=1)  # noqa: E731
    u, v, w = unit(PAIRS), unit(PAIRS), unit(2 * PAIRS)
    c_prod = torch.randn(PAIRS, D, generator=g, dtype=torch.float64)
    c_ctrl = torch.randn(2 * PAIRS, D, generator=g, dtype=torch.float64)
    x = torch.randn(N_TRAIN + N_TEST, D, generator=g, dtype=torch.float64)
    if target == "product":
        y = ((x @ u.T) * (x @ v.T)) @ c_prod                        # (N, PAIRS) products -> (N, D)
    elif target == "gate":
        y = (F.relu(x @ u.T) * (x @ v.T)) @ c_prod                  # (N, PAIRS) gated products -> (N, D)
    else:
        y = F.gelu(x @ w.T) @ c_ctrl                                  # (N, 2·PAIRS) single directions -> (N, D)
    y = y / y[N_TRAIN:].std(dim=0)
    x, y = x.float(), y.float()
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def _stacked_init(variant: str, seeds: Sequence[int]) -> list[torch.Tensor]:
    """Each seed's ``FFN.from_variant(variant, D)`` initial weights (``torch.manual_seed(seed)``), stacked over
    seeds: ``[W1 (S, d_ff, D), b1 (S, d_ff), W3, b3 (gated only), W2 (S, D, d_ff), b2 (S, D)]``."""
    per_seed = []
    for seed in seeds:
        torch.manual_seed(seed)
        if variant in SQUARED:                                         # dense width 4d, as ReLU's init
            ffn = FFN(D, 4 * D, "relu", gated=False)
        elif variant == NARROW:                                        # dense, the gated arms' width
            ffn = FFN(D, FFN.from_variant("swiglu", D).d_ff, "gelu", gated=False)
        else:
            ffn = FFN.from_variant(variant, D)                         # biases on; gated width int(8d/3)
        layers = [ffn.w1] + ([ffn.w3] if ffn.gated else []) + [ffn.w2]
        per_seed.append([t.detach().clone() for layer in layers for t in (layer.weight, layer.bias)])
    return [torch.stack(ts).requires_grad_(True) for ts in zip(*per_seed)]


def _forward(variant: str, params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``FFN.forward`` for S seeds at once: ``x (S, N, D) -> (S, N, D)``."""
    act = {"square": torch.square, "relu2": get_activation("relu2"), NARROW: get_activation("gelu")}.get(variant)
    act = act or get_activation(FFN_VARIANTS[variant][0])
    lin = lambda w, b, z: torch.baddbmm(b.unsqueeze(1), z, w.transpose(1, 2))  # noqa: E731
    h = act(lin(params[0], params[1], x))
    if len(params) == 6:
        h = h * lin(params[2], params[3], x)
    return lin(params[-2], params[-1], h)


def train(variant: str, target: str, seeds: Sequence[int], lr: float, steps: int = STEPS,
          keep: list | None = None) -> list[dict[str, float]]:
    """Train one FFN per seed on that seed's task (the seeds side by side: Adam is elementwise and each seed's
    loss its own mean squared error, so each run is as if alone); returns per seed ``{"train": FVU, "test": FVU}``
    at the end. ``keep``: a list that receives the trained weights, stacked as ``_stacked_init``'s."""
    tasks = [make_task(target, s) for s in seeds]
    x, y, x_test, y_test = (torch.stack(ts) for ts in zip(*tasks))    # (S, N, D) each
    params = _stacked_init(variant, seeds)
    opt = torch.optim.Adam(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)   # the rate decays to 0 at the end
    for _ in range(steps):
        opt.zero_grad()
        loss = ((_forward(variant, params, x) - y) ** 2).mean(dim=(1, 2)).sum()
        loss.backward()
        opt.step()
        schedule.step()
    with torch.no_grad():
        def fvu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return ((_forward(variant, params, a) - b) ** 2).mean(dim=(1, 2)) / b.var(dim=1).mean(dim=1)
        tr, te = fvu(x, y), fvu(x_test, y_test)
    if keep is not None:
        keep.extend(p.detach() for p in params)
    return [{"train": float(a), "test": float(b)} for a, b in zip(tr, te)]


class UnitCosines(NamedTuple):
    """``gate_content_cosine``'s answer: median |cos| at initialisation and after training, how many units have
    |cos| > ``ALIGNED`` at each, out of ``units``."""
    init: float
    trained: float
    init_aligned: int
    trained_aligned: int
    units: int


ALIGNED = 0.9                                      # |cos| above this: a unit's gate and content rows are in line


def gate_content_cosine(target: str, seeds: Sequence[int], lr: float, variant: str = "swiglu",
                        steps: int = STEPS) -> UnitCosines:
    """Do a gated arm's units keep two directions? The cosine between each unit's gate row ``w1_i`` and content
    row ``w3_i`` over the arm's units and ``seeds``: the median |cos| at initialisation and after training, and
    the number of units whose |cos| exceeds ``ALIGNED`` (gate and content nearly one direction) at each."""
    trained: list[torch.Tensor] = []
    train(variant, target, seeds, lr, steps, keep=trained)
    cos = lambda p: F.cosine_similarity(p[0], p[2], dim=-1).abs()  # noqa: E731
    init, after = cos(_stacked_init(variant, seeds)).detach(), cos(trained).detach()
    return UnitCosines(float(init.median()), float(after.median()), int((init > ALIGNED).sum()),
                       int((after > ALIGNED).sum()), after.numel())


def make(path: Path = DATA_PATH, steps: int = STEPS) -> dict:
    """Run the sweep, the test seeds and the convergence check; write and return the JSON."""
    sweep = {t: {v: {str(lr): [r["test"] for r in train(v, t, SWEEP_SEEDS, lr, steps)] for lr in LRS}
                 for v in VARIANTS} for t in TARGETS}
    best = {t: {v: min(LRS, key=lambda lr: sum(math.log(e) for e in sweep[t][v][str(lr)])) for v in VARIANTS}
            for t in TARGETS}
    runs = {t: {v: train(v, t, TEST_SEEDS, best[t][v], steps) for v in VARIANTS} for t in TARGETS}
    longer = {t: {v: train(v, t, TEST_SEEDS[:1], best[t][v], 2 * steps)[0] for v in VARIANTS} for t in TARGETS}
    params = {v: sum(t[0].numel() for t in _stacked_init(v, [0])) for v in VARIANTS}
    result = {"made_by": "python -m helpers.gate_product", "steps": steps, "targets": list(TARGETS), "lrs": list(LRS),
              "sweep_seeds": list(SWEEP_SEEDS), "test_seeds": list(TEST_SEEDS), "params": params,
              "sweep": sweep, "best_lr": best, "runs": runs, "double_steps_seed0": longer}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def make_longer(result: dict, path: Path = LONGER_PATH, steps: int = LONGER_STEPS) -> dict:
    """Every arm on the same test seeds trained ``steps`` steps (3× the default, about 6 CPU-minutes) at its
    chosen rate in ``result``, on every target; writes and returns ``{"steps", "runs"}`` in ``result``'s format
    (``family`` and ``holm`` read it as they read ``result``)."""
    arms = VARIANTS
    runs = {t: {v: train(v, t, result["test_seeds"], result["best_lr"][t][v], steps) for v in arms}
            for t in result["targets"]}
    longer = {"made_by": f"python -m helpers.gate_product --longer {steps}", "steps": steps,
              "targets": result["targets"], "test_seeds": result["test_seeds"], "runs": runs}
    Path(path).write_text(json.dumps(longer, indent=1) + "\n")
    return longer


def load(path: Path = DATA_PATH) -> dict:
    """The shipped results (see ``make``; ``load(LONGER_PATH)``: see ``make_longer``)."""
    return json.loads(Path(path).read_text())


def log_fvu(result: dict, target: str, variant: str, score: str = "test") -> torch.Tensor:
    """``(n_test_seeds,)`` float64: ln of the held-out FVU per test seed (``score="train"``: on the 512 training
    inputs)."""
    return torch.tensor([math.log(r[score]) for r in result["runs"][target][variant]], dtype=torch.float64)


def arm_name(variant: str, names: dict[str, str]) -> str:
    """A display name: ``names`` (e.g. ``helpers.ffn.VARIANT_NAMES``) or ``ARM_NAMES``."""
    return ARM_NAMES.get(variant) or names[variant]


def family(result: dict, names: dict[str, str], score: str = "test", rows: Sequence[tuple[str, str]] = ROWS
           ) -> dict[str, PairedDifference]:
    """The section's family, paired over test seeds on ln FVU (negative: the first named is lower), per target:
    at the same parameters, Swish against GELU (its near-twin: GELU(z) ≈ Swish(1.702 z) / 1.702), each of a², ReLU²,
    Bilinear, ReGLU, GEGLU and SwiGLU against GELU, and GELU with 21 units against GELU with 32 (what the units
    alone are worth); at the same units, each gated FFN against GELU 21: 12 rows per target, 36 in all.
    ``score="train"`` judges the training error instead; ``rows`` picks a subset of ``ROWS``."""
    family_: dict[str, PairedDifference] = {}
    for t in result["targets"]:
        for a, b in rows:
            family_[f"{t}: {arm_name(a, names)} ÷ {arm_name(b, names)}"] = paired_difference(
                log_fvu(result, t, a, score), log_fvu(result, t, b, score))
    return family_


def _fvu(x: float) -> str:
    return f"<{FLOOR:.0e}" if x < FLOOR else f"{x:.4f}"


def _ratio(c: PairedDifference, floor: bool) -> str:
    return "<1e-4" if floor else f"{math.exp(c.mean):#.2g}"


def print_verdicts(result: dict, names: dict[str, str]) -> None:
    """Print each arm's held-out FVU per target (geometric mean over test seeds, with its rate) and the family's
    Holm verdicts as a table in two blocks, same parameters (÷ GELU, 32 units) and same units (÷ GELU 21): the
    per-seed error ratio (geometric mean), seeds lower/higher, verdict."""
    seeds, sweep, targets = result["test_seeds"], result["sweep_seeds"], result["targets"]
    print(f"FVU = held-out error ÷ target variance after {result['steps']:,} steps, geometric mean over seeds "
          f"{seeds[0]}-{seeds[-1]} (<{FLOOR:.0e}: float32's floor)")
    print(f"lr: each arm's best of {', '.join(f'{lr:g}' for lr in result['lrs'])} on seeds {sweep[0]}-{sweep[-1]}")
    print(f"{'arm (parameters)':<20}" + "".join(f"{t + ': FVU, lr':>22}" for t in targets))
    for v in VARIANTS:
        cells = "".join(f"{_fvu(math.exp(float(log_fvu(result, t, v).mean()))):>14}  {result['best_lr'][t][v]:<6g}"
                        for t in targets)
        print(f"{arm_name(v, names) + ' (' + str(result['params'][v]) + ')':<20}{cells}".rstrip())
    verdicts = {v.name: v for v in holm(family(result, names))}
    print(f"\nerror ratio per seed (geometric mean), seeds lower/higher of {len(seeds)}, verdict "
          f"(paired t on ln FVU, Holm over {len(verdicts)} rows)")
    print((f"{'':<20}" + "".join(f"{t:^29}" for t in targets)).rstrip())
    for title, rows in [("same parameters:", SAME_PARAMS), ("same units (21):", SAME_UNITS)]:
        print(title)
        for a, b in rows:
            cells = ""
            for t in targets:
                v = verdicts[f"{t}: {arm_name(a, names)} ÷ {arm_name(b, names)}"]
                c, floor = v.comparison, float(log_fvu(result, t, a).exp().max()) < FLOOR
                cells += f"{'×' + _ratio(c, floor):>8} {c.lower:>2}/{c.higher:<2} {v.verdict:<13}"
            print(f"  {arm_name(a, names) + ' ÷ ' + arm_name(b, names):<18}{cells}".rstrip())


READ_ROWS = [(g, "gelu") for g in GATED] + [(NARROW, "gelu")] + SAME_UNITS   # the rows section 6.3's reading uses


def _cell(v, result: dict, target: str, arm: str) -> str:
    floor = float(log_fvu(result, target, arm).exp().max()) < FLOOR
    return f"×{_ratio(v.comparison, floor)} {'n.r.' if v.verdict == 'not resolved' else v.verdict}"


def print_checks(result: dict, longer: dict, names: dict[str, str]) -> None:
    """Two checks of ``print_verdicts``'s table. Training error: how much of the held-out FVU is generalisation
    error, and which of the 36 verdicts change when judged on the 512 training inputs instead. 3× longer: the
    family judged again on ``longer`` (``make_longer``: the same seeds and rates, Holm over the same 36 rows), one
    line per row of the family (``ROWS``, the dense arms Swish, a² and ReLU² included): ratio and verdict at 1,000
    → at the longer length."""
    targets = result["targets"]
    gm = lambda r, t, v, s="test": math.exp(float(log_fvu(r, t, v, s).mean()))  # noqa: E731
    print("GELU's FVU, training inputs / held-out: "
          + ", ".join(f"{t} {gm(result, t, 'gelu', 'train'):.4f} / {gm(result, t, 'gelu'):.4f}" for t in targets))
    test = {v.name: v.verdict for v in holm(family(result, names))}
    train_ = {v.name: v.verdict for v in holm(family(result, names, "train"))}
    moved = [f"{k} {test[k]} → {train_[k]}" for k in test if test[k] != train_[k]]
    print(f"judged on training error, {len(test) - len(moved)} of {len(test)} verdicts stay"
          + (f"; not: {'; '.join(moved)}" if moved else ""))
    before = {v.name: v for v in holm(family(result, names))}
    after = {v.name: v for v in holm(family(longer, names))}
    print(f"\n{longer['steps']:,} steps, the same seeds and rates (Holm over {len(after)} rows; n.r.: not "
          f"resolved), {result['steps']:,} → {longer['steps']:,}; GELU's FVU "
          + ", ".join(f"{t} {gm(result, t, 'gelu'):.4f} → {gm(longer, t, 'gelu'):.4f}" for t in targets))
    print((f"{'':<19}" + "".join(f"{t:^29}" for t in targets)).rstrip())
    for a, b in ROWS:
        row = f"{arm_name(a, names)} ÷ {arm_name(b, names)}"
        cells = "".join(f"{_cell(before[f'{t}: {row}'], result, t, a):>13} → "
                        f"{_cell(after[f'{t}: {row}'], longer, t, a):<13}" for t in targets)
        print(f"{row:<19}{cells}".rstrip())


def ratio(result: dict, target: str, arm: str, reference: str = "gelu") -> float:
    """The per-seed error ratio ``arm ÷ reference`` on ``target``, geometric mean over the test seeds."""
    return math.exp(float((log_fvu(result, target, arm) - log_fvu(result, target, reference)).mean()))


def verdict_lines(result: dict, longer: dict, names: dict[str, str]) -> str:
    """Section 6.3's verdicts in ten lines: per target, the rows the notebook reads (``READ_ROWS``: the gated
    arms and GELU 21 against GELU, the gated arms against GELU 21; on the product target also a² and ReLU² against GELU,
    on the control a², ReLU² and Swish, on the gate target ReLU² and Swish), grouped by their Holm verdict (``family``, 36 rows) after ``longer``'s steps, each with its error ratio
    then (``(floor)``: float32's floor) and, in brackets, its verdict after ``result``'s steps where that differs.
    Every row: ``full_readout``."""
    short, long_ = ({v.name: v for v in holm(family(r, names))} for r in (result, longer))
    lines = [f"after {longer['steps']:,} steps: error ratio, verdict (Holm over {len(long_)} rows; [...]: the verdict "
             f"after {result['steps']:,} steps where it differs)"]
    blocks = [(t, ref, [row for row in READ_ROWS if row[1] == ref]) for t in result["targets"]
              for ref in ("gelu", NARROW)]
    blocks.insert(1, ("product", "gelu", [(v, "gelu") for v in SQUARED]))   # dense FFNs that square, once
    blocks.insert(4, ("gate", "gelu", [("relu2", "gelu"), ("swish", "gelu")]))  # the dense arms below GELU there
    blocks.insert(7, ("control", "gelu", [(v, "gelu") for v in (*SQUARED, "swish")]))   # 32 units: other kinds, a near-twin
    for t, ref, rows in blocks:
        groups: dict[str, list[str]] = {"lower": [], "not resolved": [], "higher": []}
        for a, b in rows:
            key = f"{t}: {arm_name(a, names)} ÷ {arm_name(b, names)}"
            floor = float(log_fvu(longer, t, a).exp().max()) < FLOOR
            was = f" [{short[key].verdict}]" if short[key].verdict != long_[key].verdict else ""
            size = "(floor)" if floor else f"×{_ratio(long_[key].comparison, False)}"
            groups[long_[key].verdict].append(f"{arm_name(a, names)} {size}{was}")
        text = "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items() if v)
        lines.append(f"{t:<7} ÷ {arm_name(ref, names):<8} {text}")
    return "\n".join(lines)


def check_lines(result: dict, longer: dict, names: dict[str, str]) -> str:
    """Two checks of ``verdict_lines``: how many of the 36 verdicts (after ``result``'s steps) stay when judged on
    the training inputs, and GELU's held-out error after ``result``'s and ``longer``'s steps, per target."""
    test = {v.name: v.verdict for v in holm(family(result, names))}
    train_ = {v.name: v.verdict for v in holm(family(result, names, "train"))}
    stay = sum(test[k] == train_[k] for k in test)
    gm = lambda r, t: math.exp(float(log_fvu(r, t, "gelu").mean()))  # noqa: E731
    return (f"judged on training error, {stay} of {len(test)} verdicts stay (after {result['steps']:,} steps)\n"
            f"GELU's error (FVU), {result['steps']:,} → {longer['steps']:,} steps: "
            + ", ".join(f"{t} {gm(result, t):.4f} → {gm(longer, t):.4f}" for t in result["targets"]))


def retrain_line(result: dict, variant: str = "swiglu", target: str = "product", seed: int = 0,
                 tolerance: float = 0.05) -> str:
    """Train one stored run again here (``variant`` on ``target``, test seed ``seed``, at its stored rate) and say
    whether its held-out error is within ``tolerance`` of the stored run's. Float32 training moves the last digits
    with the CPU kernel, so the line prints the check, not the digits."""
    live = train(variant, target, [seed], result["best_lr"][target][variant])[0]["test"]
    off = abs(live / result["runs"][target][variant][seed]["test"] - 1)
    verdict = f"within {tolerance * 100:g} %" if off < tolerance else f"{off * 100:.0f} % off"
    return (f"{arm_name(variant, VARIANT_NAMES)}, {target} target, seed {seed}, retrained here: error {verdict} "
            "of the stored run's")


def cosine_lines(result: dict, seeds: Sequence[int] = range(8), variant: str = "swiglu") -> str:
    """Do a gated arm's units keep two directions? ``gate_content_cosine`` on every target (trained here, ``seeds``,
    each target's stored rate; the same seeds, so the same initialisation, on every target), in two lines: the
    median |cos| of each unit's gate and content rows at initialisation and the range after training, and the
    number of units in line (|cos| > ``ALIGNED``). The trained medians are rounded outward to a 0.05 grid, so the
    printed range does not move with the CPU kernel."""
    cosines = {t: gate_content_cosine(t, seeds, result["best_lr"][t][variant], variant) for t in result["targets"]}
    trained = [c.trained for c in cosines.values()]
    first = next(iter(cosines.values()))
    name, steps, span = arm_name(variant, VARIANT_NAMES), f"{STEPS:,}", f"{seeds[0]}-{seeds[-1]}"
    return (f"{name} units, median |cos| of gate row w1_i and content row w3_i, seeds {span}: {first.init:.2f} at "
            f"initialisation; after {steps} steps between {math.floor(20 * min(trained)) / 20:.2f} and "
            f"{math.ceil(20 * max(trained)) / 20:.2f} on every target\n"
            f"units in line (|cos| > {ALIGNED:g}), of {first.units}: {first.init_aligned} at initialisation; after "
            f"{steps} steps " + ", ".join(f"{t} {c.trained_aligned}" for t, c in cosines.items()))


def ratio_figure(result: dict, longer: dict, names: dict[str, str]):
    """One panel per target: each arm's error ratio to the 32-unit GELU FFN (geometric mean over seeds, log scale,
    one axis for all panels), after ``longer``'s steps (dark) and ``result``'s (faint, drawn just below), with the
    references marked: GELU with 32 units (same parameters, 1) and GELU with 21 (same units, dashed). A hollow
    marker: not resolved against GELU with 32 units at that length (``family``, Holm over 36 rows). Arms at
    float32's floor are drawn at the left edge. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    arms = ["swish", "square", "relu2", "bilinear", "reglu", "geglu", "swiglu"]
    groups = [("dense, no product", "#888888", ["swish"]), ("dense, squaring", "#DDAA33", ["square", "relu2"]),
              ("gated, 21 units", "#4477AA", list(GATED))]
    colour = {a: c for _, c, members in groups for a in members}
    left, right, ticks = 0.012, 6.0, [0.03, 0.1, 0.3, 1, 3]
    resolved = {id(r): {v.name: v.verdict != "not resolved" for v in holm(family(r, names))} for r in (result, longer)}
    fig, axes = plt.subplots(1, len(result["targets"]), figsize=(11, 4.6), sharey=True, sharex=True)
    for ax, t in zip(axes, result["targets"]):
        for i, a in enumerate(arms):
            for r, dy, style in [(result, 0.22, dict(alpha=0.4, ms=6)), (longer, -0.08, dict(ms=8))]:
                floor = float(log_fvu(r, t, a).exp().max()) < FLOOR
                hollow = {} if resolved[id(r)][f"{t}: {arm_name(a, names)} ÷ GELU"] else dict(mfc="none", mew=1.8)
                ax.plot(left * 1.2 if floor else ratio(r, t, a), i + dy, "<" if floor else "o", color=colour[a],
                        **style, **hollow)   # the 1,000-step marker a little below the 3,000-step one
            if float(log_fvu(longer, t, a).exp().max()) < FLOOR:
                ax.annotate("float32's floor", (left * 1.5, i), va="center", fontsize=8)
        ax.axvline(1, color="black", lw=1.2)
        ax.axvline(ratio(longer, t, NARROW), color="#CC3311", ls="--", lw=1.5)
        ax.set_xscale("log")
        ax.set_xlim(left, right)
        ax.set_xticks(ticks, [f"×{x:g}" for x in ticks])
        ax.minorticks_off()
        ax.set_title(f"{t} target")
        ax.set_xlabel("error ÷ GELU's error")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(arms)), [arm_name(a, names) for a in arms])
    axes[0].invert_yaxis()
    handles = [Line2D([], [], color=c, marker="o", ls="", ms=8, label=name) for name, c, _ in groups]
    handles += [Line2D([], [], color="#666666", marker="o", ls="", ms=6, alpha=0.3,
                       label=f"faint, just below: after {result['steps']:,} steps (dark: {longer['steps']:,})"),
                Line2D([], [], color="#666666", marker="o", ls="", ms=8, mfc="none", mew=1.8,
                       label="hollow: not resolved against GELU, 32 units"),
                Line2D([], [], color="black", lw=1.2, label="same parameters: GELU, 32 units (×1)"),
                Line2D([], [], color="#CC3311", ls="--", lw=1.5, label="same units: GELU, 21 units")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle("Each arm's held-out error against a GELU FFN of the same parameters (left of ×1: lower)")
    fig.tight_layout(rect=(0, 0.15, 1, 1))
    return fig


def full_readout(result: dict, longer: dict, names: dict[str, str]) -> str:
    """Every printed detail of section 6.3: ``print_verdicts``'s tables (FVU and rate per arm, the 36 verdict
    rows with ratios and seed counts) and ``print_checks``'s (training error, 1,000 → 3,000 steps per row)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_verdicts(result, names)
        print()
        print_checks(result, longer, names)
    return out.getvalue().rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--longer", type=int, default=None, metavar="STEPS",
                        help="retrain the stored test seeds this long instead (writes gate_product_3000.json)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.longer:
        make_longer(load(), LONGER_PATH if args.out == DATA_PATH else args.out, args.longer)
        return
    result = make(args.out, args.steps)
    for t in TARGETS:
        print(t, {v: (result["best_lr"][t][v], round(math.exp(float(log_fvu(result, t, v).mean())), 4))
                  for v in VARIANTS})


if __name__ == "__main__":
    main()
