r"""Dead features of notebook 09's transcoders, and two remedies: Gao et al.'s (2024) AuxK and resampling, shipped.

A feature of a TopK dictionary that wins no input gets no gradient and stays dead: the recipe's transcoders
(``helpers.dictionary_study.RECIPE``) leave over half of their 256 features dead. AuxK (Gao et al. 2024,
Sec. A.2) gives the dead ones a task (``train_auxk``); resampling (Bricken et al. 2023) moves them onto inputs.
``auxk_runs`` trains layer 1's transcoder of each of the five shipped fact models at the recipe (k = 8, 1,000
steps, rate 0.03, float64, dictionary seeds 0 and 1) without AuxK, with it at the coefficients ``AUX_COEFS``
(1 and 5), and with notebook 09's Exercise 8 resampling at the steps ``RESAMPLE_AT`` instead (``_resample``), and
records per run the held-out FVU and the dead features (firing on none of the 1,681 prefixes); ``auxk_family`` is
the Holm family notebook 09 reads. Make the shipped file ``helpers/data/auxk.json`` (about 2 minutes of one CPU
core), or a small run::

    python -m helpers.dead_features
    python -m helpers.dead_features --models 0 --steps 100 --out /tmp/auxk.json
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers import validate
from helpers.dictionary import TopKDictionary, fact_prefixes, firing_counts, fvu, train_dictionaries
from helpers.dictionary_study import ARM_LR, MODELS, RECIPE, layer_data
from helpers.facts import load_facts, make_dataset
from helpers.stats import PairedDifference, paired_difference

__all__ = ["AUX_COEFS", "RESAMPLE_AT", "K_AUX", "DEAD_WINDOW", "AUXK_PATH", "train_auxk", "auxk_runs", "load_auxk",
           "arm_means", "arm_names", "auxk_family", "main"]

#: the AuxK arms and their coefficients (the recipe is coefficient 0); see ``train_auxk``.
AUX_COEFS = {"auxk": 1.0, "auxk_5": 5.0}
#: the resampling arm's steps (no AuxK); see ``train_auxk``.
RESAMPLE_AT = (250, 500)
K_AUX, DEAD_WINDOW = 32, 50
AUXK_PATH = Path(__file__).resolve().parent / "data" / "auxk.json"


def train_auxk(x: torch.Tensor, y: torch.Tensor, n_features: int, k: int, seeds: Sequence[int], *,
               steps: int = 1000, batch_size: int = 64, lr: float = 3e-2, aux_coef: float = 1.0,
               k_aux: int = K_AUX, dead_window: int = DEAD_WINDOW, resample_at: Sequence[int] = (),
               progress: bool = False, desc: str = "AuxK") -> list[TopKDictionary]:
    """One TopK dictionary ``x (N, d_in) -> y (N, d_out)`` per seed from the data start, float64, with the AuxK
    term weighted ``aux_coef`` (0: the recipe of ``train_dictionaries``, run for run).

    AuxK (Gao et al. 2024, Sec. A.2): with ``e = y - ŷ`` the main code's residual (held fixed), the ``k_aux``
    largest pre-activations among the features dead at that step form a second code ``z``, and the loss gains
    ``aux_coef · ‖e - W_dec z‖²`` (divided, like the main loss, by the data's variance). Gao et al.'s reference code
    divides the term by the residual's variance instead, which here is under 1.5 % of the data's on 95 % of the
    steps while features are dead (median about 0.6 %), so their coefficient of 1/32 (with ``k_aux`` = 512 in their
    wide models) is worth about 5 on this scale (2 to 9 over those steps): ``aux_coef = 5`` is their strength,
    ``aux_coef = 1`` a weaker one. Here ``K_AUX = 32`` of 256 features. Bricken et al.'s resampling (dead features
    restarted at badly reconstructed inputs) is the ``"resample"`` arm (``RESAMPLE_AT``). A feature counts as dead
    during training when it has fired on none of the last ``DEAD_WINDOW`` steps' batches (50 × 64 = 3,200 rows,
    about 2.4 passes over the 1,345 training prefixes).

    With ``resample_at`` (the ``"resample"`` arm: steps 250 and 500, no AuxK), Exercise 8's rule for a transcoder
    runs before those steps (``_resample``).

    ``train_auxk`` is ``helpers.dictionary.train_dictionaries`` (the data start, batches of 64, Adam with a linearly
    falling rate, unit-norm values), in float64, with that term added through its ``extra_loss`` hook and resampling
    through its ``before_step`` hook; with ``aux_coef = 0`` (and no ``resample_at``) it is the recipe itself, run
    for run.
    """
    validate.positive_int("n_features", n_features)
    k = validate.int_in_range("k", k, 1, n_features)
    k_aux = min(validate.positive_int("k_aux", k_aux), n_features)
    validate.positive_int("steps", steps)
    validate.positive_int("dead_window", dead_window)
    if aux_coef < 0:
        raise ValueError(f"aux_coef must be >= 0, got {aux_coef}")
    x, y = x.double(), y.double()
    since_fired = torch.zeros(len(seeds), n_features, dtype=torch.long)          # steps since each feature fired

    def aux_term(pre, codes, y_hat, y_batch, W_dec, variance):
        """The ``extra_loss`` hook: update the dead-feature counter; the AuxK term ``(S,)`` if any are dead."""
        nonlocal since_fired
        fired = (codes > 0).any(1)                                                                     # (S, F)
        since_fired = torch.where(fired, 0, since_fired + 1)
        dead = since_fired >= dead_window
        if not bool(dead.any()):
            return None
        masked = pre.masked_fill(~dead[:, None, :], float("-inf"))
        aux = masked.topk(k_aux, dim=-1)
        z = torch.zeros_like(pre).scatter(-1, aux.indices, torch.relu(aux.values.clamp_min(0)))       # (S, B, F)
        residual = (y_batch - y_hat).detach()                                                          # (S, B, d_out)
        return aux_coef * ((z @ W_dec.transpose(1, 2) - residual) ** 2).sum(-1).mean(-1) / variance

    def resample(t, params, opt):
        """The ``before_step`` hook: Exercise 8's resampling before the steps ``resample_at``."""
        if t in resample_at:
            _resample(x, y, k, params, opt)

    return train_dictionaries(x, y, n_features, k, seeds, steps=steps, batch_size=batch_size, lr=lr,
                              dtype=torch.float64, progress=progress, desc=desc,
                              extra_loss=aux_term if aux_coef > 0 else None,
                              before_step=resample if resample_at else None)


def _resample(x: torch.Tensor, y: torch.Tensor, k: int, params: list[torch.Tensor], opt: torch.optim.Adam) -> None:
    """Notebook 09's Exercise 8 on a transcoder, in place, per seed: the features that fire on no row of ``x`` take
    the worst-reconstructed rows n (largest ‖yₙ − ŷₙ‖² first, ties: lower row first), the j-th dead feature (in
    index order) the j-th row: value yₙ/‖yₙ‖, key xₙ/‖xₙ‖ × the live keys' mean length, b_enc 0; their Adam
    state is zeroed (as Bricken et al. 2023 do)."""
    W_enc, b_enc, W_dec, b_dec = params
    with torch.no_grad():
        for i in range(len(W_enc)):
            pre = x @ W_enc[i].T + b_enc[i]
            top = pre.topk(k, dim=-1)
            codes = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
            dead = firing_counts(codes) == 0
            if not bool(dead.any()) or bool(dead.all()):
                continue
            scale = float(W_enc[i][~dead].norm(dim=1).mean())
            error = ((y - (codes @ W_dec[i].T + b_dec[i])) ** 2).sum(-1)
            idx = dead.nonzero().flatten()
            rows = error.sort(descending=True, stable=True).indices[:len(idx)]
            W_dec[i][:, idx] = (y[rows] / y[rows].norm(dim=-1, keepdim=True)).T
            W_enc[i][idx] = scale * x[rows] / x[rows].norm(dim=-1, keepdim=True)
            b_enc[i][idx] = 0.0
            for p, where in ((W_enc, (i, idx)), (b_enc, (i, idx)), (W_dec, (i, slice(None), idx))):
                for name in ("exp_avg", "exp_avg_sq"):
                    if name in opt.state.get(p, {}):
                        opt.state[p][name][where] = 0.0


def auxk_runs(models: Sequence[int] = MODELS, seeds: Sequence[int] = (0, 1), steps: int = RECIPE["steps"],
              progress: bool = True) -> dict:
    """``{"models", "seeds", "steps", "aux_coefs", "k_aux", "dead_window", "runs": {model: {arm: {"held_out",
    "dead"}}}}`` with arms ``"recipe"`` and those of ``AUX_COEFS`` (see the module docstring)."""
    data = make_dataset(load_facts())
    prefixes = fact_prefixes(data)
    out: dict = {"command": "python -m helpers.dead_features", "models": list(models), "seeds": list(seeds),
                 "steps": steps, "k": RECIPE["k"], "aux_coefs": dict(AUX_COEFS), "k_aux": K_AUX,
                 "dead_window": DEAD_WINDOW, "resample_at": list(RESAMPLE_AT), "runs": {}}
    for m in models:
        x, y, train, test = layer_data(data, prefixes, m, 1)
        out["runs"][str(m)] = {}
        for arm, coef, at in (("recipe", 0.0, ()), *((a, c, ()) for a, c in AUX_COEFS.items()),
                              ("resample", 0.0, RESAMPLE_AT)):
            dictionaries = train_auxk(x[train], y[train], RECIPE["n_features"], RECIPE["k"], seeds, steps=steps,
                                      batch_size=RECIPE["batch_size"], lr=ARM_LR["transcoder"], aux_coef=coef,
                                      resample_at=at, progress=progress, desc=f"model {m}, {arm}")
            with torch.no_grad():
                out["runs"][str(m)][arm] = {
                    "held_out": [round(fvu(y[test], d(x[test])), 6) for d in dictionaries],
                    "dead": [int((firing_counts(d.encode(x)) == 0).sum()) for d in dictionaries]}
    return out


def load_auxk(path: str | Path = AUXK_PATH) -> dict:
    """The shipped runs (``helpers/data/auxk.json``), or the file at ``path``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def arm_means(record: dict, arm: str) -> tuple[float, float]:
    """The arm's dead features (of 256) and held-out FVU, each the mean over the models of their seeds' mean."""
    runs = [r[arm] for r in record["runs"].values()]
    return tuple(sum(sum(r[key]) / len(r[key]) for r in runs) / len(runs) for key in ("dead", "held_out"))


def arm_names(record: dict) -> dict[str, str]:
    """``{arm: its name in words}``, the recipe first, then the AuxK arms and resampling (if the record has it)."""
    names = {"recipe": "the recipe", **{a: f"AuxK, coefficient {c:g}" for a, c in record["aux_coefs"].items()}}
    if "resample_at" in record:
        names["resample"] = "resampling (Exercise 8)"
    return names


def auxk_family(record: dict) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``: each AuxK arm, and resampling, minus the recipe, paired over the models (each the
    mean over its seeds), on the dead features and on the held-out FVU in per cent (two comparisons per arm)."""
    def mean(arm, key, scale=1.0):
        return [scale * sum(r[arm][key]) / len(r[arm][key]) for r in record["runs"].values()]
    labels = {a: f"AuxK {c:g}" for a, c in record["aux_coefs"].items()}
    if "resample_at" in record:
        labels["resample"] = "resampling"
    family = {}
    for arm, label in labels.items():
        family[f"dead features, {label} − recipe"] = paired_difference(mean(arm, "dead"), mean("recipe", "dead"))
        family[f"held-out FVU %, {label} − recipe"] = paired_difference(mean(arm, "held_out", 100),
                                                                       mean("recipe", "held_out", 100))
    return family


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--out", type=Path, default=AUXK_PATH, help="the file to write (default: the shipped one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.write_text(json.dumps(auxk_runs(args.models, steps=args.steps), indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
