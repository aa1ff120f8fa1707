"""Notebook 05, section 10: what capacity drops cost where the experts' work matters (section 7's fact lookup).

Section 7's E = 8 MoE (top-1 experts of width 8, α = 0.1, 100 steps at 8e-2, seeds 0-9) is trained dropless exactly
as ``helpers.moe_expert_count`` trains it, then its answer loss over every fact is scored in one batch with the
capacity factor set, at evaluation only, to each of ``FACTORS`` (``None``: dropless). The share of slots dropped is
kept too. Trained on the AVX2 kernel, as section 7's main sweep (whose E = 8 losses the dropless column repeats):

    ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_lookup_capacity --results   # helpers/data/moe_lookup_capacity.json
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.costs import torch_threads
from helpers.fact_lookup import build_lookup, lookup_data, lookup_loss_and_accuracy, train_lookup
from helpers.moe_expert_count import D_MODEL, LR, SEEDS, STEPS, TOTAL_E, spec
from helpers.moe_runs import read_results, write_results
from helpers.stats import Comparison, holm, paired_difference

FACTORS: tuple[float | None, ...] = (None, 2.0, 1.25, 1.0)
PATH = Path(__file__).parent / "data" / "moe_lookup_capacity.json"
COMMAND = "ATEN_CPU_CAPABILITY=avx2 python -m helpers.moe_lookup_capacity --results"


def key(factor: float | None) -> str:
    return "dropless" if factor is None else f"c = {factor:g}"


def scored_run(seed: int, data=None, n_experts: int = TOTAL_E) -> dict[str, dict[str, float]]:
    """Train one seed dropless, then score it at every factor: {factor key: {"loss", "dropped"}}."""
    data = lookup_data() if data is None else data
    out = {}
    with torch_threads(1):
        model = build_lookup(data, spec(n_experts), d_model=D_MODEL, seed=seed)
        train_lookup(model, data, steps=STEPS, lr=LR)
        for factor in FACTORS:
            model.ffn.capacity_factor = factor
            loss = lookup_loss_and_accuracy(model, data)[0]
            dropped = float(model.ffn_record.dropped_share)          # the MoE's record of that forward
            out[key(factor)] = {"loss": round(loss, 5), "dropped": round(dropped, 5)}
        model.ffn.capacity_factor = None
    return out


def load_lookup_capacity(path: str | Path = PATH) -> dict:
    return read_results(path, "capacity-scored fact-lookup runs", COMMAND)


def values(study: dict, factor_key: str, what: str = "loss") -> torch.Tensor:
    runs = study["runs"]
    return torch.tensor([runs[s][factor_key][what] for s in sorted(runs, key=int)], dtype=torch.float64)


def lookup_capacity_family(study: dict) -> dict[str, Comparison]:
    """Answer loss at c = 1.25 and at c = 1 − dropless, paired by seed (one Holm family of two; c = 2 drops no
    slot in any shipped seed, so its losses equal the dropless ones and it is not tested)."""
    base = values(study, "dropless")
    return {f"answer loss at {key(f)} − dropless": paired_difference(values(study, key(f)), base)
            for f in FACTORS[1:] if bool((values(study, key(f), "dropped") > 0).any())}


def lookup_capacity_line(study: dict) -> str:
    """One printed line: the mean answer loss at each factor with its share of slots dropped, and for each tested
    factor the paired difference from dropless with its Holm verdict."""
    family = lookup_capacity_family(study)
    verdicts = {v.name: v for v in holm(family)}
    parts = [f"dropless {values(study, 'dropless').mean():.2f}"]
    for f in FACTORS[1:]:
        v, dropped = verdicts.get(f"answer loss at {key(f)} − dropless"), values(study, key(f), "dropped").mean()
        text = f"{key(f)} {values(study, key(f)).mean():.2f} ({dropped:.1%} of slots dropped"
        if v is None:
            parts.append(text + ", the same loss in every seed)")
        else:
            parts.append(text + f"; {v.comparison.mean:+.2f}, higher in {v.comparison.higher}/{v.comparison.n}, "
                                f"{'resolved' if v.resolved else 'not resolved'})")
    return (f"E = 8 fact lookup, answer loss, mean of {len(study['runs'])} seeds (Holm over {len(family)}): "
            + "; ".join(parts))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", action="store_true", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", default=str(PATH))
    args = parser.parse_args(argv)
    data = lookup_data()
    settings = {"steps": STEPS, "lr": LR, "d_model": D_MODEL, "n_experts": TOTAL_E, "spec": spec(TOTAL_E),
                "factors": [key(f) for f in FACTORS]}
    write_results(args.out, COMMAND, settings, {"runs": {str(s): scored_run(s, data) for s in args.seeds}})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
