"""Section 4 of notebook 03 over 25 seeds: layer 1's push on the answer and on its rivals, by relation.

For each seed, ``shifts_by_reference`` (layer 1's output at the answer slot, read through ``ln_f`` and the
unembedding against a reference word) averaged over each relation's 152 prompts. Seeds 0-9 are the shipped fact
models; seeds 10-24 are trained here with the same recipe (``train_fact_model``, about 20 s each), too slow for
the notebook. Made by

    python -m helpers.promotion_runs        # writes helpers/data/promotion_runs.json (about 6 min)

and checked in the notebook by recomputing seed 0.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.facts import RELATIONS, FactDataset, load_facts, make_dataset
from helpers.interventions import shifts_by_reference
from helpers.stats import PairedDifference, paired_difference

__all__ = ["DATA_PATH", "SEEDS", "REFERENCES", "summarise", "make", "load", "live_gap", "family", "margin_family",
           "main"]

DATA_PATH = Path(__file__).parent / "data" / "promotion_runs.json"
SEEDS = range(25)
REFERENCES = ("outside", "median")


@torch.no_grad()
def summarise(model: torch.nn.Module, data: FactDataset) -> dict[str, dict[str, list[float]]]:
    """One model: ``{reference: {relation: [answer, rivals]}}``, the mean logit shift over the relation's prompts
    that layer 1 writes at the answer slot, against ``reference`` (rounded to 6 decimals)."""
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    shifts = shifts_by_reference(model, 1, data.ids, data.answer_pos, data.answer_id, relation_of, REFERENCES)
    return {ref: {r: [round(part[relation_of == g].mean().item(), 6) for part in shifts[ref]]
                  for g, r in enumerate(RELATIONS)} for ref in REFERENCES}


def make(seeds: Sequence[int] = SEEDS, path: Path = DATA_PATH) -> dict:
    """``summarise`` each seed's fact model (shipped ones loaded, the others trained) and write ``path``."""
    from helpers.fact_model import FACT_MODEL_SEEDS, load_fact_model, train_fact_model
    from helpers.transformer import answer_accuracy
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {}
    for s in seeds:
        shipped = s in FACT_MODEL_SEEDS
        model, losses = load_fact_model(data, seed=s) if shipped else train_fact_model(data, seed=s, progress=False)
        runs[str(s)] = {"shipped": shipped, "final loss": round(losses[-1], 4),
                        "accuracy": answer_accuracy(model, data.ids, data.answer_pos, data.answer_id),
                        **summarise(model, data)}
        print(f"seed {s}: loss {losses[-1]:.3f}, accuracy {runs[str(s)]['accuracy']:.1%}", flush=True)
    result = {"made_by": "python -m helpers.promotion_runs", "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict]:
    """The shipped runs, ``{seed: record}``."""
    return {int(s): run for s, run in json.loads(Path(path).read_text())["runs"].items()}


def live_gap(model: torch.nn.Module, data: FactDataset, runs: dict[int, dict], seed: int = 0) -> float:
    """Largest |live − stored| over the references, relations and both parts, for ``model`` as seed ``seed``."""
    live = summarise(model, data)
    return max(abs(a - b) for ref in REFERENCES for r in RELATIONS
               for a, b in zip(live[ref][r], runs[seed][ref][r]))


def family(runs: dict[int, dict], seeds: Sequence[int], reference: str = "outside") -> dict[str, PairedDifference]:
    """``"<relation>: answer"`` and ``"<relation>: rivals"``, each seed's mean shift against 0, paired by seed:
    the family ``helpers.interventions.promotion_grid`` prints (``promotion_by_group``'s, from stored means)."""
    out = {}
    for r in RELATIONS:
        for j, part in enumerate(("answer", "rivals")):
            values = [runs[s][reference][r][j] for s in seeds]
            out[f"{r}: {part}"] = paired_difference(values, [0.0] * len(values))
    return out


def margin_family(runs: dict[int, dict], seeds: Sequence[int]) -> dict[str, PairedDifference]:
    """``"<relation>: answer − rivals"``: each seed's mean shift of the answer minus that of its rivals, against 0,
    paired by seed. A shift common to every word cancels, so the margin is the same against any reference (the
    stored "outside" one is used)."""
    out = {}
    for r in RELATIONS:
        values = [runs[s]["outside"][r][0] - runs[s]["outside"][r][1] for s in seeds]
        out[f"{r}: answer − rivals"] = paired_difference(values, [0.0] * len(values))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args(argv)
    make(args.seeds, args.out)


if __name__ == "__main__":
    main()
