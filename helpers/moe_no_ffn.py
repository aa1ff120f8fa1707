r"""Notebook 05 section 8's control: the same TinyGPT with no FFN at all (every block's FFN outputs 0).

The recipe is ``helpers.moe_runs``'s short one (15 steps of 32 sentences, AdamW at lr 1e-2, same seeds and so the
same data order), scored on all 608 sentences in eval mode. Paired by seed with the shipped runs of
``helpers.moe_runs``, it says whether an FFN layer has contributed anything measurable after 15 steps.

The shipped file ``NO_FFN_PATH`` is made by::

    python -m helpers.moe_no_ffn --results          # 10 seeds, well under a minute of one CPU core

``--seeds`` and ``--out`` make a smaller file (the tests make one).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.moe_runs import BATCH, SHORT_STEPS, evaluate, lm_config, read_results, values, write_results
from helpers.stats import PairedDifference, paired_difference
from helpers.transformer import TinyGPT, train_lm

LR = 1e-2
SEEDS: tuple[int, ...] = tuple(range(10))
#: Where ``python -m helpers.moe_no_ffn --results`` writes the runs and ``load_no_ffn`` reads them.
NO_FFN_PATH = Path(__file__).parent / "data" / "moe_no_ffn.json"
_DIGITS = 5


class NoFFN(nn.Module):
    """An FFN slot that outputs zeros: the block keeps attention and its residual only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def no_ffn_run(seed: int, data: FactDataset, *, steps: int = SHORT_STEPS, lr: float = LR) -> float:
    """Cross-entropy over every target of the no-FFN model after the short recipe (module docstring)."""
    torch.manual_seed(seed)
    model = TinyGPT(lm_config(data), ffn_factory=lambda layer: NoFFN())
    train_lm(model, data.ids, data.targets, steps=steps, lr=lr, batch_size=BATCH, seed=seed, progress=False)
    return evaluate(model, data)[0]


def save_no_ffn(seeds: Sequence[int], path: str | Path) -> Path:
    """Train ``seeds`` and write ``{"runs": {seed: ce}}`` as JSON with the settings and the machine."""
    data = make_dataset(load_facts())
    runs = {str(s): round(no_ffn_run(s, data), _DIGITS) for s in seeds}
    return write_results(path, "python -m helpers.moe_no_ffn --results",
                         {"steps": SHORT_STEPS, "lr": LR, "batch": BATCH}, {"runs": runs})


def load_no_ffn(path: str | Path | None = None) -> dict:
    """The file written by ``save_no_ffn`` (default: the shipped ``NO_FFN_PATH``), as a dict."""
    return read_results(NO_FFN_PATH if path is None else path, "no-FFN runs", "python -m helpers.moe_no_ffn --results")


def no_ffn_values(no_ffn: dict) -> torch.Tensor:
    """``(seeds,)`` float64: the no-FFN cross-entropies, seeds in the file's order."""
    return torch.tensor(list(no_ffn["runs"].values()), dtype=torch.float64)


def no_ffn_family(no_ffn: dict, study: dict, arms: Sequence[str]) -> dict[str, PairedDifference]:
    """Each arm of ``helpers.moe_runs``'s shipped ``study`` at lr 1e-2 − no FFN, seed by seed (the file's seeds)."""
    seeds = [int(s) for s in no_ffn["runs"]]
    return {f"CE: {arm.replace(', width', '').replace(', ', ' ')} − no FFN":
            paired_difference(values(study, arm, "ce", LR, seeds), no_ffn_values(no_ffn)) for arm in arms}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.moe_no_ffn --results``: train notebook 05's no-FFN control and store it."""
    parser = argparse.ArgumentParser(prog="python -m helpers.moe_no_ffn", description=main.__doc__)
    parser.add_argument("--results", action="store_true", required=True, help="train the runs, write the file")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="default: 0 to 9")
    parser.add_argument("--out", default=str(NO_FFN_PATH), help=f"default: {NO_FFN_PATH}")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                        # as in the notebooks (helpers.env.setup)
    try:
        print(f"wrote {save_no_ffn(args.seeds, args.out)}")
    finally:
        torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
