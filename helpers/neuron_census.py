"""Does any single neuron hold a fact? Notebook 03, section 4's direct test, on every fact and ten seeds.

For each fact model, each of the three knock-out sites of ``helpers.knockout_runs.sites`` (layer 0 at the
subject, layers 0 and 1 at the last word) and each of the 192 neurons, the neuron alone is knocked out at that
site in every one of the 608 prompts; recorded per site: how many facts some single neuron flips (the model's
answer was right and is no longer the top word), the most facts one neuron flips, and the largest and median
(over facts) worst drop in P(right answer). 576 forward passes per seed, too slow for the notebook; made by

    python -m helpers.neuron_census        # writes helpers/data/neuron_census.json (a few minutes of CPU)
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.interventions import knock_out
from helpers.knockout_runs import sites
from helpers.memory import logits_of

DATA_PATH = Path(__file__).parent / "data" / "neuron_census.json"


@torch.no_grad()
def _answers(model: torch.nn.Module, data: FactDataset) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N,)`` P(right answer) and ``(N,)`` bool: the right answer is the top word, at each prompt's answer slot."""
    logits = logits_of(model, data.ids)[torch.arange(len(data.ids)), data.answer_pos]      # (N, vocab)
    return logits.softmax(-1)[torch.arange(len(data.ids)), data.answer_id], logits.argmax(-1) == data.answer_id


@torch.no_grad()
def census(model: torch.nn.Module, data: FactDataset) -> dict[str, dict[str, float]]:
    """One model: ``{site: {"facts flipped", "most flipped by one neuron", "max drop", "median worst drop"}}``
    (counts over the N facts; drops in P(right answer), each fact's worst over the neurons)."""
    was_training = model.training
    model.eval()
    p0, right0 = _answers(model, data)
    d_ff = model.blocks[0].ffn.w2.weight.shape[1]
    out = {}
    for site, (layer, pos) in sites(data).items():
        worst, flipped, most = torch.zeros(len(p0)), torch.zeros(len(p0), dtype=torch.bool), 0
        for i in range(d_ff):
            with knock_out(model, layer, [i], positions=pos):
                p, right = _answers(model, data)
            lost = right0 & ~right
            worst, flipped, most = torch.maximum(worst, p0 - p), flipped | lost, max(most, int(lost.sum()))
        out[site] = {"facts flipped": int(flipped.sum()), "most flipped by one neuron": most,
                     "max drop": worst.max().item(), "median worst drop": worst.median().item()}
    model.train(was_training)
    return out


def make(seeds: Sequence[int], path: Path = DATA_PATH) -> dict:
    """Run ``census`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): census(load_fact_model(data, seed=s)[0], data) for s in seeds}
    result = {"made_by": "python -m helpers.neuron_census", "facts": len(data.facts), "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict[str, dict[str, float]]]:
    """The shipped runs: ``{seed: census(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def report(runs: dict, seeds: Sequence[int], n_facts: int) -> str:
    """One line per site over ``seeds``: the most facts flipped by some single neuron in one seed, and the range
    of the largest drop in P(right answer) a single neuron causes."""
    lines = []
    for site in runs[seeds[0]]:
        flips = [runs[s][site]["facts flipped"] for s in seeds]
        drops = [runs[s][site]["max drop"] for s in seeds]
        flipped = (f"none of {n_facts} in any seed" if max(flips) == 0 else
                   f"at most {max(flips)} of {n_facts} per seed (none in {flips.count(0)} of {len(seeds)} seeds)")
        lines.append(f"  {site:13s} facts flipped: {flipped}; largest drop in P(right answer) {min(drops):.2f} to "
                     f"{max(drops):.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args()
    make(args.seeds, args.out)
