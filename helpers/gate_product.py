"""Does a gated FFN fit a product of two input directions better than a dense FFN of the same size? (notebook 04)

Section 4 shows one gated unit computing ``φ(w1·x)·(w3·x)``, a product of two directions, which one dense unit
cannot. This module tests the FFN-level version at matched parameters (``FFN.from_variant`` with ``d = 8``: dense
width 32, gated width 21, biases on) on two noise-free targets ``R^8 -> R^8`` of Gaussian inputs:

* ``product``: ``y = Σ_j (x·u_j)(x·v_j) c_j`` over 32 random unit direction pairs ``(u_j, v_j)``: a Bilinear FFN
  of width 32 without biases, the gated side's own function class;
* ``control``: ``y = Σ_j GELU(x·w_j) c_j`` over 64 random unit directions (the same count of directions, no
  product): a dense GELU FFN of width 64 without biases, the dense side's own class.

Each target is scaled to unit variance per output over the test inputs. Every variant (GELU, ReLU, GEGLU, SwiGLU)
is trained full batch with Adam on 512 inputs for ``STEPS`` steps; the score is the held-out error as a
fraction of the target's variance, ``FVU = MSE / Var(y)`` on 2,048 fresh inputs. Within a seed, every variant
sees the same target and data. Each variant's learning rate is its best of ``LRS`` (lowest mean log FVU) on the
sweep seeds, chosen per target; the test seeds are others. Comparisons are paired over seeds on ``ln FVU``
(a ratio of errors), judged with ``helpers.stats.holm`` over the family of ``family``.

Too slow to run live (a few minutes of CPU); made by

    python -m helpers.gate_product      # writes helpers/data/gate_product.json

and checked in the notebook by retraining test seed 0.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.activations import get_activation
from helpers.ffn import FFN, VARIANTS as FFN_VARIANTS
from helpers.stats import PairedDifference, holm, paired_difference

DATA_PATH = Path(__file__).parent / "data" / "gate_product.json"
D, N_TRAIN, N_TEST, PAIRS = 8, 512, 2048, 32
STEPS = 1000
LRS = (0.01, 0.03, 0.1, 0.3)
SWEEP_SEEDS = (100, 101, 102)
TEST_SEEDS = tuple(range(12))
DENSE, GATED = ("gelu", "relu"), ("geglu", "swiglu")
VARIANTS = DENSE + GATED
TARGETS = ("product", "control")


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
        ffn = FFN.from_variant(variant, D)                             # biases on; gated width int(8d/3)
        layers = [ffn.w1] + ([ffn.w3] if ffn.gated else []) + [ffn.w2]
        per_seed.append([t.detach().clone() for layer in layers for t in (layer.weight, layer.bias)])
    return [torch.stack(ts).requires_grad_(True) for ts in zip(*per_seed)]


def _forward(variant: str, params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``FFN.forward`` for S seeds at once: ``x (S, N, D) -> (S, N, D)``."""
    act = get_activation(FFN_VARIANTS[variant][0])
    lin = lambda w, b, z: torch.baddbmm(b.unsqueeze(1), z, w.transpose(1, 2))  # noqa: E731
    h = act(lin(params[0], params[1], x))
    if len(params) == 6:
        h = h * lin(params[2], params[3], x)
    return lin(params[-2], params[-1], h)


def train(variant: str, target: str, seeds: Sequence[int], lr: float, steps: int = STEPS
          ) -> list[dict[str, float]]:
    """Train one FFN per seed on that seed's task (the seeds side by side: Adam is elementwise and each seed's
    loss its own mean squared error, so each run is as if alone); returns per seed ``{"train": FVU, "test": FVU}``
    at the end."""
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
    return [{"train": float(a), "test": float(b)} for a, b in zip(tr, te)]


def make(path: Path = DATA_PATH, steps: int = STEPS) -> dict:
    """Run the sweep, the test seeds and the convergence check; write and return the JSON."""
    sweep = {t: {v: {str(lr): [r["test"] for r in train(v, t, SWEEP_SEEDS, lr, steps)] for lr in LRS}
                 for v in VARIANTS} for t in TARGETS}
    best = {t: {v: min(LRS, key=lambda lr: sum(math.log(e) for e in sweep[t][v][str(lr)])) for v in VARIANTS}
            for t in TARGETS}
    runs = {t: {v: train(v, t, TEST_SEEDS, best[t][v], steps) for v in VARIANTS} for t in TARGETS}
    longer = {t: {v: train(v, t, TEST_SEEDS[:1], best[t][v], 2 * steps)[0] for v in VARIANTS} for t in TARGETS}
    params = {v: FFN.from_variant(v, D).param_count() for v in VARIANTS}
    result = {"made_by": "python -m helpers.gate_product", "steps": steps, "lrs": list(LRS),
              "sweep_seeds": list(SWEEP_SEEDS), "test_seeds": list(TEST_SEEDS), "params": params,
              "sweep": sweep, "best_lr": best, "runs": runs, "double_steps_seed0": longer}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict:
    """The shipped results (see ``make``)."""
    return json.loads(Path(path).read_text())


def log_fvu(result: dict, target: str, variant: str) -> torch.Tensor:
    """``(n_test_seeds,)`` float64: ln of the held-out FVU per test seed."""
    return torch.tensor([math.log(r["test"]) for r in result["runs"][target][variant]], dtype=torch.float64)


def group_mean(result: dict, target: str, variants: Sequence[str]) -> torch.Tensor:
    """``(n_test_seeds,)``: the mean ln FVU of a group of variants, seed by seed."""
    return torch.stack([log_fvu(result, target, v) for v in variants]).mean(dim=0)


def family(result: dict, names: dict[str, str]) -> dict[str, PairedDifference]:
    """The section's family, paired over test seeds on ln FVU (negative: the first named is lower):
    per target the group row (gated − dense) and the 4 gated − dense pairs, then the gating effect on the
    product target minus that on the control (does gating help the product more?): 11 rows."""
    rows: dict[str, PairedDifference] = {}
    gap = {}
    for t in TARGETS:
        gap[t] = group_mean(result, t, GATED) - group_mean(result, t, DENSE)
        rows[f"{t}: gated − dense"] = paired_difference(group_mean(result, t, GATED), group_mean(result, t, DENSE))
        for g in GATED:
            for d in DENSE:
                rows[f"{t}: {names[g]} − {names[d]}"] = paired_difference(log_fvu(result, t, g),
                                                                           log_fvu(result, t, d))
    rows["(product − control) of gated − dense"] = paired_difference(gap["product"], gap["control"])
    return rows


def print_verdicts(result: dict, names: dict[str, str]) -> None:
    """Print the table (each variant's rate, geometric-mean FVU over the test seeds, and seed 0 at 1× and 2× the
    steps) and the family's Holm verdicts: each gated variant against GELU (the stronger dense FFN) with its
    per-seed error ratio, the group rows and the product-minus-control row, the pairs against ReLU as a count."""
    seeds = result["test_seeds"]
    print(f"held-out error ÷ target variance, geometric mean over seeds {seeds[0]}-{seeds[-1]}; parameters: "
          + ", ".join(f"{names[v]} {result['params'][v]}" for v in VARIANTS))
    sweep = result["sweep_seeds"]
    print("lr: each arm's best of " + ", ".join(f"{lr:g}" for lr in result["lrs"])
          + f" on seeds {sweep[0]}-{sweep[-1]}, per target")
    print(f"{'':<8}" + "".join(f"{t + ': lr, error (seed 0 at 1×, 2× steps)':>44}" for t in TARGETS))
    for v in VARIANTS:
        cells = ""
        for t in TARGETS:
            one, two = result["runs"][t][v][0]["test"], result["double_steps_seed0"][t][v]["test"]
            cells += (f"{result['best_lr'][t][v]:>17} {math.exp(float(log_fvu(result, t, v).mean())):>8.4f} "
                      f"({one:.4f}, {two:.4f})")
        print(f"{names[v]:<8}{cells}")
    verdicts = {v.name: v for v in holm(family(result, names))}
    width = max(len(k) for k in verdicts)
    print(f"against GELU, the stronger dense FFN: per-seed error ratio, geometric mean (range over {len(seeds)} "
          f"seeds); Holm over the family's {len(verdicts)} rows")
    for t in TARGETS:
        for g in GATED:
            v = verdicts[f"{t}: {names[g]} − {names['gelu']}"]
            ratio = (log_fvu(result, t, g) - log_fvu(result, t, "gelu")).exp()
            c = v.comparison
            print(f"  {t}: {names[g]} ÷ GELU ×{math.exp(c.mean):#.2g} ({float(ratio.min()):#.2g} to "
                  f"{float(ratio.max()):#.2g}), lower in {c.lower}, higher in {c.higher} of {c.n}  → {v.verdict}")
    for k, v in verdicts.items():
        if "gated" in k:
            print(v.line(width, digits=2, t_cap=20, compact=True)
                  + f"   (error ratio ×{math.exp(v.comparison.mean):.2g})")
    relu = [v for k, v in verdicts.items() if k.endswith(names["relu"])]
    print("against ReLU, per target: " + "; ".join(
        f"{t}: gated lower in {sum(v.verdict == 'lower' and v.name.startswith(t) for v in relu)}, higher in "
        f"{sum(v.verdict == 'higher' and v.name.startswith(t) for v in relu)} of 2 pairs" for t in TARGETS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = make(args.out, args.steps)
    for t in TARGETS:
        print(t, {v: (result["best_lr"][t][v], round(math.exp(float(log_fvu(result, t, v).mean())), 4))
                  for v in VARIANTS})


if __name__ == "__main__":
    main()
