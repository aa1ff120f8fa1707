"""Notebook 03's specimen: a tiny transformer that knows the course's 608 facts, trained once and shipped.

The model is the course's ``TinyGPT`` (``d_model`` 48, two layers, four heads, GELU FFNs of width 192)
trained on every next token of the fact sentences of ``helpers.facts`` (full batch, AdamW, ``FACT_MODEL``).
Training one takes seconds to tens of seconds of CPU, too long to repeat ten times in a notebook, so the course
ships the weights:

* ``helpers/data/fact_model.pt``: seed 0, the model notebook 03 analyses neuron by neuron;
* ``helpers/data/fact_model_seed<s>.pt``: the same recipe with seeds 1-9, for statistics over seeds;
* ``helpers/data/fact_model_seed0_retrained.pt``: seed 0 trained again with other CPU kernels (torch's generic
  ones, as another machine would round), to show what a retrain with the *same* seed keeps.

Training is deterministic on one machine but not across machines: another CPU (or another set of vectorised
kernels, ``ATEN_CPU_CAPABILITY``) rounds differently, and after 150 steps the weights are a few per cent
apart. The initialisation is the same everywhere up to float rounding (the vectorised normal sampler differs by
about 4e-7 relative between CPU kernels), so ``untrained_fact_model(data, seed)`` needs no file.

Make (or remake) the files with::

    python -m helpers.fact_model --make-checkpoint                 # seeds 0-9
    python -m helpers.fact_model --make-checkpoint --seed 3 4      # only these
    ATEN_CPU_CAPABILITY=default python -m helpers.fact_model --make-checkpoint --seed 0 --retrained

(``python -m helpers.memory --make-checkpoint`` does the same.)
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers import validate
from helpers.transformer import GPTConfig, TinyGPT, train_lm

DATA_DIR = Path(__file__).resolve().parent / "data"

#: how notebook 03's model is trained; ``python -m helpers.fact_model --make-checkpoint`` uses exactly this
FACT_MODEL = {"d_model": 48, "n_layers": 2, "n_heads": 4, "steps": 150, "lr": 1.5e-2}

#: the seeds whose checkpoints ship in ``helpers/data``
FACT_MODEL_SEEDS: tuple[int, ...] = tuple(range(10))


def fact_model_path(seed: int = 0, *, retrained: bool = False, directory: str | Path | None = None) -> Path:
    """Where the checkpoint for ``seed`` lives: ``fact_model.pt`` (seed 0), ``fact_model_seed<seed>.pt``
    (other seeds) or ``fact_model_seed<seed>_retrained.pt`` (``retrained``), in ``directory``
    (default ``helpers/data``)."""
    validate.non_negative_int("seed", seed)
    directory = DATA_DIR if directory is None else Path(directory)
    if retrained:
        return directory / f"fact_model_seed{seed}_retrained.pt"
    return directory / ("fact_model.pt" if seed == 0 else f"fact_model_seed{seed}.pt")


def fact_model_config(data) -> GPTConfig:
    """The ``GPTConfig`` of notebook 03's model for a ``helpers.facts.FactDataset`` ``data``."""
    return GPTConfig(vocab_size=len(data.vocab), d_model=FACT_MODEL["d_model"], n_layers=FACT_MODEL["n_layers"],
                     n_heads=FACT_MODEL["n_heads"], max_len=data.ids.shape[1])


def untrained_fact_model(data, seed: int = 0) -> TinyGPT:
    """Notebook 03's model as ``torch.manual_seed(seed)`` initialises it, before any training (eval mode).

    The same on every machine up to float rounding (about 4e-7 relative between CPU kernels: torch's vectorised
    normal sampler rounds differently); the global random generator is left as it was.
    """
    validate.non_negative_int("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(fact_model_config(data))
    return model.eval()


def train_fact_model(data, seed: int = 0, *, progress: bool = True) -> tuple[TinyGPT, list[float]]:
    """Train notebook 03's model on every next token of ``data`` (full batch, AdamW, ``FACT_MODEL``).

    Returns the model (eval mode) and the loss of every step. Deterministic on one machine; on another CPU
    the weights end a few per cent apart, with the same loss and the same neurons in the same slots.
    """
    model = untrained_fact_model(data, seed).train()
    losses = train_lm(model, data.ids, data.targets, steps=FACT_MODEL["steps"], lr=FACT_MODEL["lr"], seed=seed,
                      progress=progress, desc=f"learning {len(data)} facts")
    return model.eval(), losses


def save_fact_model(model: TinyGPT, losses: Sequence[float], data, path: str | Path, seed: int) -> Path:
    """Write ``model``'s float32 weights, its loss history and what it was trained on, with what, to ``path``."""
    path = Path(path)
    checkpoint = {
        "state_dict": {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()},
        "losses": [float(x) for x in losses],
        "vocab": list(data.vocab.tokens),
        "seed": int(seed),
        "recipe": dict(FACT_MODEL),
        "made_with": f"torch {torch.__version__}, {platform.machine()}, "
                     f"CPU capability {torch.backends.cpu.get_cpu_capability()}",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


def load_fact_model(data, seed: int = 0, path: str | Path | None = None, *,
                    retrained: bool = False) -> tuple[TinyGPT, list[float]]:
    """Load the shipped model trained with ``seed`` (``fact_model_path(seed, retrained=...)``, or ``path``).

    Returns the model (eval mode, on the CPU) and its training loss history. Raises ``FileNotFoundError``
    (naming the command that makes the file) when it is missing, and ``ValueError`` when it was made for
    another vocabulary than ``data``'s or with another recipe than ``FACT_MODEL``.
    """
    path = fact_model_path(seed, retrained=retrained) if path is None else Path(path)
    if not path.is_file():
        flag = " --retrained" if retrained else ""
        raise FileNotFoundError(f"path={str(path)!r}: no checkpoint there; make it with "
                                f"python -m helpers.fact_model --make-checkpoint --seed {seed}{flag}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if checkpoint["vocab"] != list(data.vocab.tokens):
        raise ValueError(f"the checkpoint {path.name} was trained on another vocabulary "
                         f"({len(checkpoint['vocab'])} tokens) than data ({len(data.vocab)} tokens)")
    if checkpoint["recipe"] != FACT_MODEL:
        raise ValueError(f"the checkpoint {path.name} was made with {checkpoint['recipe']}, not {FACT_MODEL}")
    model = TinyGPT(fact_model_config(data))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval(), list(checkpoint["losses"])


def make_checkpoints(seeds: Sequence[int], *, retrained: bool = False,
                     directory: str | Path | None = None) -> list[Path]:
    """Train one model per seed with ``FACT_MODEL`` and write it (one thread, as in the notebooks)."""
    from helpers.facts import load_facts, make_dataset
    from helpers.transformer import answer_accuracy

    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    written = []
    for seed in seeds:
        model, losses = train_fact_model(data, seed)
        path = save_fact_model(model, losses, data, fact_model_path(seed, retrained=retrained, directory=directory),
                               seed)
        accuracy = answer_accuracy(model, data.ids, data.answer_pos, data.answer_id)
        print(f"seed {seed}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, answer accuracy {accuracy:.2%}; "
              f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """The command line: ``python -m helpers.fact_model --make-checkpoint [--seed S ...] [--retrained]``."""
    parser = argparse.ArgumentParser(description="Train and write notebook 03's shipped fact model(s).")
    parser.add_argument("--make-checkpoint", action="store_true", required=True,
                        help="train with FACT_MODEL and write helpers/data/fact_model*.pt")
    parser.add_argument("--seed", type=int, nargs="+", default=list(FACT_MODEL_SEEDS),
                        help="training seeds (default: 0-9; seed 0 is the model the notebook analyses)")
    parser.add_argument("--retrained", action="store_true",
                        help="write fact_model_seed<S>_retrained.pt (run it on another machine, or with "
                             "ATEN_CPU_CAPABILITY=default, to see what a same-seed retrain keeps)")
    parser.add_argument("--out", default=None, help="directory to write to (default: helpers/data)")
    args = parser.parse_args(argv)
    return make_checkpoints(args.seed, retrained=args.retrained, directory=args.out)


if __name__ == "__main__":
    main()
