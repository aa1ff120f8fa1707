r"""Sparse dictionaries on five shipped fact models: the runs too slow for notebook 09, shipped as a file.

Notebook 09 trains one dictionary live (model seed 0, layer 1, dictionary seed 0) and checks it against this
file; every verdict over models comes from here. For each of the shipped fact models ``MODELS``
(``helpers.fact_model`` seeds 0-4) and the layers ``LAYERS`` (the last, layer 1), on the model's distinct
prefixes split once into 80 % for fitting and 20 % held out (``held_out_split``), with ``RECIPE``'s TopK
dictionaries (256 features, k = 8, 1,000 steps, 2 seeds per model):

* **the test of sparse structure** (section 4): the held-out fraction of variance unexplained (FVU) of

  - the *transcoder* (``x -> y``: the FFN's input to its output, 8 of 256 features active per prefix),
  - the best *affine map* from ``x`` (least squares): the dense map from the same input,
  - *PCA-8 of y*: the best any code confined to 8 fixed dimensions can do, even one that sees ``y`` (an oracle),
  - a sparse autoencoder on ``y`` and one on a *Gaussian with y's mean and covariance* (the moment-matched
    control: how much a sparse code beats PCA-8 on data without sparse structure);

* **convergence**: the transcoder's held-out FVU after 1/10, 1/3, 1 and 3 times the recipe's steps, and the
  two autoencoders of the control after 3 and 10 times (``control_lengths``, ``--only-control``), and a third
  on a *slot mixture* (``slot_mixture_like``: each prefix keeps its template slot, within a slot a Gaussian with
  that slot's moments of y) after 1, 3 and 10 times (``--arms sae_slots``): how much of the edge is the slot;
* **splicing**: the model's answers with each transcoder in place of the FFN, the FFN removed, mean-ablated;
* **features against neurons**: ``tracking_rates`` of the transcoder's features, the layer's neurons, an
  autoencoder on ``x`` (the FFN's input), a random dictionary, and the untrained network's neurons; the two
  trained ones also after 3 times the steps (``tracking_lengths``, ``--only-tracking 3000``);

plus the toy models of ``helpers.superposition`` and their autoencoders (``toy_recovery``) trained 3× longer
than the notebook trains them, the planted check at the recipe as an autoencoder and as a transcoder
(``planted_recovery``, ``--only-planted``), and optionally (``--sweep``) a learning-rate sweep of every arm on model 0.
Live only: ``train_with_step`` trains ``toy_recovery``'s random-start autoencoder with the learner's own Exercise 7
step (plain gradient descent) and reports what it recovered, its FVU over steps and its dead directions.

Make the file (about 10 minutes of one CPU core), or a small run to see the format::

    python -m helpers.dictionary_study
    python -m helpers.dictionary_study --models 0 --layers 1 --seeds 2 --steps 60 --no-toy --out /tmp/small.json
    python -m helpers.dictionary_study --only-control      # the control's longer runs, into the file (~10 min)
    python -m helpers.dictionary_study --only-control --arms sae_slots --lengths 1000 3000 10000   # (~5 min)
    python -m helpers.dictionary_study --only-tracking 3000      # section 6's dictionaries 3x longer (~3 min)
    python -m helpers.dictionary_study --only-planted            # the planted checks at the recipe (~2 min)
    python -m helpers.dictionary_study --rate 0.01 --arms sae_y --lengths 10000 30000           # (~15 min)
    python -m helpers.dictionary_study --rate 0.01 --arms sae_slots --lengths 30000             # (~10 min)
    python -m helpers.dictionary_study --rate 0.01 --arms sae_gaussian --lengths 30000          # (~5 min)
    python -m helpers.dictionary_study --frontier --steps 3000   # the k frontier, sparsity_frontier.json (~5 min)

``--frontier`` (``frontier_runs``) writes ``helpers/data/sparsity_frontier.json``, the sparsity-reconstruction
frontier: on each of the five models, layer 1's transcoders with the recipe (float64, dictionary seeds 0 and 1) at
k = 2, 4, 8, 16, 32, trained 3,000 steps (3× the recipe: the length at which notebook 09 rereads its verdicts; at
1,000 steps the large-k runs are far from done); per model and k each seed's held-out FVU, its dead features
(firing on none of the 1,681 prefixes) and the held-out FVU of PCA-k of y. ``frontier_family``: per k, the
transcoder against PCA-k, paired over the models. One model's runs train side by side; the data start can begin
two features on the same example, and a wider top-k breaks their exact tie differently, so a run there is another
draw of the recipe than a lone run of the same seed.

``--rate`` trains the control's autoencoders at one learning rate for every arm (``rate_runs``; the five models
side by side), into ``control_lr[rate]`` of each model's entry: the rate at the length a verdict is read, and
the 3× longer check of that verdict.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from helpers import validate
from helpers.dictionary import (STARTS, answer_scores, fact_labels, fact_prefixes, ffn_io, firing_counts, fvu,
                                TopKDictionary, held_out_split, random_dictionary, replaced_ffn, topk_codes,
                                tracking_rates, train_dictionaries)
from helpers.facts import load_facts, make_dataset
from helpers.fact_model import FACT_MODEL_SEEDS, load_fact_model, untrained_fact_model
from helpers.memory import collect
from helpers.progress import progress as progress_bar
from helpers.stats import PairedDifference, holm, paired_difference
from helpers.superposition import (best_cosines, dimensions_per_feature, feature_norms, planted_features,
                                   planted_pairs, toy_hidden, train_toy_models)

__all__ = ["RECIPE", "ARM_LR", "CONTROL_STEPS", "STUDY_PATH", "layer_data", "pca_projection", "pca_fvu", "affine_fvu", "gaussian_like",
           "slot_mixture_like", "layer_study", "lr_sweep", "control_lengths", "rate_runs", "at_rate", "rate_table",
           "slot_edge_family", "control_family", "tracking_lengths", "toy_recovery", "train_with_step", "own_run_lines", "verdict_lines", "verdict_groups", "structure_headline", "planted_recovery",
           "make_study", "load_study", "model_means", "sparse_structure_family", "superposition_family",
           "tracking_family", "longest", "convergence_table", "structure_ratios",
           "floor_table", "sweep_table", "FRONTIER_PATH", "FRONTIER_KS", "frontier_runs", "load_frontier", "frontier_means", "frontier_family", "sparse_structure_table", "superposition_table", "tracking_table", "main"]

STUDY_PATH = Path(__file__).resolve().parent / "data" / "dictionary_study.json"
FRONTIER_PATH = Path(__file__).resolve().parent / "data" / "sparsity_frontier.json"
#: the frontier's k (active features per prefix)
FRONTIER_KS = (2, 4, 8, 16, 32)

#: the dictionaries of the study (and of notebook 09)
RECIPE = {"n_features": 256, "k": 8, "steps": 1000, "batch_size": 64, "seeds": 2, "held_out": 0.2, "split_seed": 0,
          "rank": 8}
#: each arm's learning rate at the recipe's 1,000 steps: the best held-out FVU on model seed 0 among ``SWEEP_LR``
#: (``lr_sweep``, run with ``--sweep``; the shipped file does not hold it). Section 4 reads its controls at
#: 10,000 steps, where every arm is run at 0.01 too (``--rate``, ``at_rate``): for y the better of 0.01 and 0.03
#: there (``rate_table``), for the slot mixture the better on model 0 (below), for the Gaussian its best at 1,000 steps
ARM_LR = {"transcoder": 3e-2, "sae_x": 3e-2, "sae_y": 3e-2, "sae_gaussian": 1e-2}
#: the slot mixture's autoencoder: on model 0, 0.01 and 0.03 tie at 1,000 steps (held-out FVU 0.91 % and 0.90 %),
#: and 0.01 is far better at 10,000 (FVU / its PCA-8 0.52 against 0.66): the rate that gives the control its best
ARM_LR["sae_slots"] = 1e-2
SWEEP_LR = (1e-2, 3e-2, 1e-1)
#: the training lengths of the convergence check, for a recipe of 3,000 steps (scaled to the recipe's length)
STEPS = (300, 1000, 3000, 9000)
#: the longer trainings of the control's two autoencoders (SAE on y, SAE on a Gaussian like y)
CONTROL_STEPS = (3000, 10000)
#: the shipped file: the first five fact models, the last layer (notebook 09's)
MODELS, LAYERS = tuple(FACT_MODEL_SEEDS[:5]), (1,)
#: the units whose tracking rates are compared (values: how to get their activations)
UNITS = ("transcoder", "neurons", "sae_x", "random", "untrained_neurons")


# ---------------------------------------------------------------- dense yardsticks and the Gaussian control
def layer_data(data, prefixes, model_seed: int, layer: int = 1):
    """``(x, y, train, test)``: shipped fact model ``model_seed``'s FFN input and output in ``layer`` at the fact
    prefixes, float64, each ``(n_prefixes, d_model)``, and the recipe's held-out split of their rows."""
    inputs, outputs = ffn_io(load_fact_model(data, seed=model_seed)[0].double(), data.ids)
    x, y = (t[layer][prefixes.rows, prefixes.positions] for t in (inputs, outputs))
    train, test = held_out_split(len(x), RECIPE["held_out"], RECIPE["split_seed"])
    return x, y, train, test


def pca_projection(y_train: torch.Tensor, y_test: torch.Tensor, rank: int) -> torch.Tensor:
    """``y_test (M, d)`` projected on the mean and top ``rank`` principal directions of ``y_train (N, d)``
    (float64): the best reconstruction from ``rank`` fixed dimensions, fitted on the training rows."""
    validate.positive_int("rank", rank)
    mean = y_train.double().mean(0)
    basis = torch.linalg.svd(y_train.double() - mean, full_matrices=False).Vh[:rank]          # (rank, d)
    return mean + (y_test.double() - mean) @ basis.T @ basis


def pca_fvu(y_train: torch.Tensor, y_test: torch.Tensor, rank: int) -> float:
    """Held-out FVU of ``pca_projection``: the best any code confined to ``rank`` fixed dimensions can do."""
    return fvu(y_test.double(), pca_projection(y_train, y_test, rank))


def affine_fvu(x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor) -> float:
    """Held-out FVU of the least-squares affine map ``x -> y`` fitted on the training rows (float64)."""
    def ones(x):
        return torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], 1)
    solution = torch.linalg.lstsq(ones(x_train), y_train.double()).solution
    return fvu(y_test.double(), ones(x_test) @ solution)


def gaussian_like(y: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """``(n, d)`` float32 samples of a Gaussian with the mean and covariance of ``y (N, d)``."""
    validate.positive_int("n", n)
    y = y.double()
    cov = torch.cov(y.T) + 1e-10 * torch.eye(y.shape[1], dtype=torch.float64)
    noise = torch.randn(n, y.shape[1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (y.mean(0) + noise @ torch.linalg.cholesky(cov).T).float()


def slot_mixture_like(y: torch.Tensor, slots: Sequence[str], wanted: Sequence[str], seed: int = 0) -> torch.Tensor:
    """``(len(wanted), d)`` float32 samples of y's per-slot Gaussian mixture: row n is drawn from a Gaussian with
    the mean and covariance of the rows of ``y (N, d)`` whose slot (``slots``, N labels) is ``wanted[n]`` (only
    their mean if a slot has fewer than 3 rows, y's mean if none). Data whose only structure is which slot."""
    if len(slots) != len(y):
        raise ValueError(f"slots must have one label per row of y ({len(y)}), got {len(slots)}")
    y, d = y.double(), y.shape[1]
    generator, out = torch.Generator().manual_seed(seed), torch.empty(len(wanted), d, dtype=torch.float64)
    for slot in sorted(set(wanted)):
        rows = [n for n, w in enumerate(wanted) if w == slot]
        members = y[[n for n, s in enumerate(slots) if s == slot]]
        mean = members.mean(0) if len(members) else y.mean(0)
        cov = torch.cov(members.T) if len(members) > 2 else torch.zeros(d, d, dtype=torch.float64)
        root = torch.linalg.cholesky(cov + 1e-8 * torch.eye(d, dtype=torch.float64))
        out[rows] = mean + torch.randn(len(rows), d, generator=generator, dtype=torch.float64) @ root.T
    return out.float()


def _r(values):
    """Round for the file: 5 significant digits (floats), lists and dicts recursively."""
    if isinstance(values, float):
        return float(f"{values:.5g}") if math.isfinite(values) else None
    if isinstance(values, (list, tuple)):
        return [_r(v) for v in values]
    if isinstance(values, dict):
        return {k: _r(v) for k, v in values.items()}
    return values


# ---------------------------------------------------------------- one model, one layer
def _dicts(x, y, seeds, lr, steps, desc):
    return train_dictionaries(x, y, RECIPE["n_features"], RECIPE["k"], seeds, steps=steps, lr=lr,
                              batch_size=RECIPE["batch_size"], progress=False, desc=desc)


@torch.no_grad()
def layer_study(model, untrained, data, layer: int, seeds: Sequence[int], steps: int = RECIPE["steps"],
                convergence: Sequence[int] = STEPS) -> dict:
    """Everything the file holds for one model's ``layer`` (see the module docstring). ``convergence``: the
    other training lengths at which the transcoder's held-out FVU is measured."""
    p = fact_prefixes(data)
    inputs, outputs = ffn_io(model, data.ids)
    x, y = inputs[layer][p.rows, p.positions], outputs[layer][p.rows, p.positions]
    train, test = held_out_split(len(x), RECIPE["held_out"], RECIPE["split_seed"])
    answers = test[p.answer[test]]                                         # held-out prefixes at an answer
    rank, out = RECIPE["rank"], {}
    gauss_train = gaussian_like(y[train], len(train), seed=1)
    gauss_test = gaussian_like(y[train], len(test), seed=2)
    out["dense"] = {"pca": pca_fvu(y[train], y[test], rank), "affine": affine_fvu(x[train], y[train], x[test], y[test]),
                    "pca_answers": pca_fvu(y[train], y[answers], rank), "pca_gaussian": pca_fvu(gauss_train, gauss_test, rank),
                    "pca_fit": pca_fvu(y[train], y[train], rank)}
    with torch.enable_grad():
        transcoders = _dicts(x[train], y[train], seeds, ARM_LR["transcoder"], steps, "transcoders")
        sae_x = _dicts(x[train], x[train], seeds, ARM_LR["sae_x"], steps, "SAE on x")
        sae_y = _dicts(y[train], y[train], seeds, ARM_LR["sae_y"], steps, "SAE on y")
        sae_g = _dicts(gauss_train, gauss_train, seeds, ARM_LR["sae_gaussian"], steps, "SAE on a Gaussian")
        lengths = {n: _dicts(x[train], y[train], seeds, ARM_LR["transcoder"], n, f"{n} steps")
                   for n in convergence if n != steps}
    codes = [d.encode(x) for d in transcoders]
    out["transcoder"] = {
        "held_out": [fvu(y[test], d(x[test])) for d in transcoders],
        "fit": [fvu(y[train], d(x[train])) for d in transcoders],
        "answers": [fvu(y[answers], d(x[answers])) for d in transcoders],
        "used": [int((firing_counts(c) > 0).sum()) for c in codes],
        "steps": {str(n): ([fvu(y[test], d(x[test])) for d in lengths[n]] if n in lengths else None)
                  for n in convergence}}
    out["transcoder"]["steps"][str(steps)] = out["transcoder"]["held_out"]
    alive = [firing_counts(c) >= 10 for c in codes]                       # features active on >= 10 prefixes
    patterns = [torch.nn.functional.normalize(c[:, a].T, dim=1) for c, a in zip(codes, alive)]
    out["transcoder"]["near_copies"] = [float(((patterns[0] @ q.T).max(1).values > 0.9).double().mean())
                                        for q in patterns[1:]]
    out["sae_x"] = {"held_out": [fvu(x[test], d(x[test])) for d in sae_x],
                    "used": [int((firing_counts(d.encode(x)) > 0).sum()) for d in sae_x]}
    out["sae_y"] = {"held_out": [fvu(y[test], d(y[test])) for d in sae_y]}
    out["sae_gaussian"] = {"held_out": [fvu(gauss_test, d(gauss_test)) for d in sae_g]}

    scores = [answer_scores(model, data.ids, data.answer_pos, data.answer_id)]
    for d in transcoders:
        with replaced_ffn(model, layer, d):
            scores.append(answer_scores(model, data.ids, data.answer_pos, data.answer_id))
    with replaced_ffn(model, layer, lambda h: torch.zeros_like(h)):
        removed = answer_scores(model, data.ids, data.answer_pos, data.answer_id)
    mean_output = outputs[layer][torch.arange(len(data.facts)), data.answer_pos].mean(0)
    with replaced_ffn(model, layer, lambda h: mean_output.expand_as(h)):
        ablated = answer_scores(model, data.ids, data.answer_pos, data.answer_id)
    out["splice"] = {"original": scores[0], "transcoder": scores[1:], "removed": removed, "mean_ablated": ablated}

    xn = x[p.named]
    acts = {"transcoder": [d.encode(xn) for d in transcoders],
            "neurons": [collect(model, data.ids).coefficients[layer][p.rows, p.positions][p.named]],
            "sae_x": [d.encode(xn) for d in sae_x],
            "random": [random_dictionary(x[train], y[train], RECIPE["n_features"], RECIPE["k"], s).encode(xn)
                       for s in seeds],
            "untrained_neurons": [collect(untrained, data.ids).coefficients[layer][p.rows, p.positions][p.named]]}
    out["tracking"] = {}
    for name, sets in acts.items():
        runs = [tracking_rates(a, p.labels) for a in sets]
        out["tracking"][name] = [{**rates, "judged": judged} for rates, judged in runs]
    return _r(out)


def lr_sweep(model, data, layer: int, seeds: Sequence[int], steps: int = RECIPE["steps"],
             lrs: Sequence[float] = SWEEP_LR) -> dict:
    """Held-out FVU of every arm at every learning rate in ``lrs`` (the choice of ``ARM_LR``), and the features
    each transcoder uses: ``{arm: {str(lr): [per seed]}}``."""
    p = fact_prefixes(data)
    inputs, outputs = ffn_io(model, data.ids)
    x, y = inputs[layer][p.rows, p.positions], outputs[layer][p.rows, p.positions]
    train, test = held_out_split(len(x), RECIPE["held_out"], RECIPE["split_seed"])
    gauss_train, gauss_test = gaussian_like(y[train], len(train), seed=1), gaussian_like(y[train], len(test), seed=2)
    pairs = {"transcoder": (x, y), "sae_x": (x, x), "sae_y": (y, y)}
    out: dict = {arm: {} for arm in [*pairs, "sae_gaussian", "transcoder_used"]}
    for lr in lrs:
        for arm, (a, b) in pairs.items():
            ds = _dicts(a[train], b[train], seeds, lr, steps, arm)
            with torch.no_grad():
                out[arm][str(lr)] = [fvu(b[test], d(a[test])) for d in ds]
                if arm == "transcoder":
                    out["transcoder_used"][str(lr)] = [int((firing_counts(d.encode(x)) > 0).sum()) for d in ds]
        ds = _dicts(gauss_train, gauss_train, seeds, lr, steps, "sae_gaussian")
        with torch.no_grad():
            out["sae_gaussian"][str(lr)] = [fvu(gauss_test, d(gauss_test)) for d in ds]
    return _r(out)


def toy_recovery(toys, sparsity: float, seeds: Sequence[int], *, n_directions: int = 40, n_inputs: int = 2000,
                 steps: int = 2000, lr: float = 1e-2, threshold: float = 0.95, progress: bool = True,
                 extra: Sequence[tuple] = ()) -> dict:
    """Section 2 of notebook 09: sparse autoencoders (TopK, k = 1, ``n_directions`` directions) trained on the
    hidden vectors ``h = W x`` of each toy model (``toys``: ``train_toy_models``' result) at ``sparsity``, from the
    data start and from the random start, side by side; and random directions as the control.

    Returns ``{"represented": [...], "recovered": {arm: [...]}, "used": {start: [...]}}``, one entry per seed:
    the true features with ``‖W_i‖ > 0.5``, how many of them some direction matches at cosine > ``threshold``
    (``best_cosines``), and how many directions each autoencoder uses (active on some input). The arm "data start,
    untrained" scores the data start's directions at step 0 (what training adds is the difference). The autoencoders
    train in float64, so that the counts do not depend on the CPU's float32 kernels. ``extra``: more
    ``(hidden (n_inputs, m), seed)`` or ``(hidden, seed, start)`` data sets whose autoencoders (from ``start``,
    default ``"data"``) train in the same batch (it costs little more); their directions ``(m, n_directions)``
    come back under ``"extra"``.
    """
    truth = [toys.W[toys.index(sparsity, seed=s)] for s in seeds]                          # (m, n) each
    hidden = torch.stack([toy_hidden(W.double(), sparsity, n=n_inputs, seed=s) for s, W in zip(seeds, truth)])
    extra = [(e[0], e[1], e[2] if len(e) > 2 else "data") for e in extra]
    both = torch.cat([hidden, hidden, *(h[None].double() for h, _, _ in extra)])
    trained = train_dictionaries(both, both, n_directions, 1, [*seeds, *seeds, *(s for _, s, _ in extra)],
                                 steps=steps, lr=lr, dtype=torch.float64, progress=progress,
                                 start=["data"] * len(seeds) + ["random"] * len(seeds) + [a for _, _, a in extra],
                                 desc="toy autoencoders, data and random starts")
    extra_found, trained = trained[2 * len(seeds):], trained[:2 * len(seeds)]
    found = {"data start": trained[:len(seeds)], "random start": trained[len(seeds):]}
    directions = {"data start, untrained": [STARTS["data"](h, h, n_directions, s)[2] for s, h in zip(seeds, hidden)],
                  **{name: [d.W_dec.detach() for d in ds] for name, ds in found.items()}}
    directions["random directions"] = [torch.randn(W.shape[0], n_directions, generator=torch.Generator().manual_seed(s),
                                                   dtype=torch.float64) for s, W in zip(seeds, truth)]
    represented = [feature_norms(W) > 0.5 for W in truth]
    truth = [W.double() for W in truth]
    with torch.no_grad():
        used = {name: [int((firing_counts(d.encode(h)) > 0).sum()) for d, h in zip(ds, hidden)]
                for name, ds in found.items()}
    return {"represented": [int(r.sum()) for r in represented],
            "recovered": {name: [int((best_cosines(W[:, r], D) > threshold).sum())
                                 for W, r, D in zip(truth, represented, dirs)] for name, dirs in directions.items()},
            "used": used, "extra": [d.W_dec.detach() for d in extra_found]}


# ---------------------------------------------------------------- after Exercise 7: the learner's step, end to end
# Section 2's toy autoencoder trained with the learner's own ``training_step`` (plain gradient descent at a constant
# rate) from the random start, on the same data and batches as ``toy_recovery``'s Adam loop, then inspected.
# ``train_with_step`` never raises for a faulty step: it returns a sentence saying what went wrong.
def _reconstruct(params: Sequence[torch.Tensor], h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    W_enc, b_enc, W_dec, b_dec = params
    codes = topk_codes(h @ W_enc.T + b_enc, k)
    return codes, codes @ W_dec.T + b_dec


def train_with_step(step: Callable, W_true: torch.Tensor, sparsity: float = 0.99, *, n_inputs: int = 2000,
                    n_directions: int = 40, k: int = 1, steps: int = 2000, batch_size: int = 64, lr: float = 0.1,
                    seed: int = 0, report_at: Sequence[int] = (0, 250, 500, 1000, 2000),
                    resample: Callable | None = None, resample_at: Sequence[int] = (500, 1000, 1500),
                    key_scale: float = 1.0, rows: str = "worst") -> dict | str:
    """Train a TopK autoencoder on the toy model ``W_true`` ``(m, n)``'s hidden vectors with ``step``.

    Returns ``{"fvu": {step: FVU on all inputs}, "recovered": int, "represented": int, "random": int,
    "used": int, "dead": int, "n_directions": int}``: the recovered count is of the represented true features
    (``‖W_i‖ > 0.5``) that some learned value matches at cosine > 0.95; ``random`` the same for as many random
    directions; ``used`` the directions active on some input. Or a sentence saying why it could not train.
    With ``resample`` (Exercise 8's ``resample_dead(W_enc, b_enc, W_dec, x, x_hat, dead, scale)``), at each step of
    ``resample_at`` the directions that win no input (over all the inputs) are restarted at the worst-reconstructed
    inputs, their keys ``scale`` = ``key_scale`` × the live keys' mean length long. Bricken et al. (2023) draw the
    inputs at random (with probability ∝ the loss squared) and use 0.2 for their L1 autoencoders, where a weak key still
    fires; under TopK (k = 1) a key that short never wins an input: at 0.2, seeds 0-4 here end with 26 to 28 dead
    directions, as without resampling, and at 1 with 1 to 4. With ``rows="random"`` (a control) ``resample`` gets,
    in place of the reconstruction, a stand-in whose errors rank the inputs in a random order: the same rule
    restarts the dead directions at random inputs.
    """
    if rows not in ("worst", "random"):
        raise ValueError(f"rows must be 'worst' or 'random', got {rows!r}")
    validate.positive_int("steps", steps)
    W_true = W_true.detach().double()
    h = toy_hidden(W_true, sparsity, n=n_inputs, seed=seed)                          # (n_inputs, m)
    params = [t.double() for t in STARTS["random"](h, h, n_directions, seed)]
    gen = torch.Generator().manual_seed(10_000 + seed)
    curve = {}
    for t in range(steps + 1):
        if t in report_at:
            curve[t] = fvu(h, _reconstruct(params, h, k)[1])
        if t == steps:
            break
        if resample is not None and t in resample_at:
            codes, h_hat = _reconstruct(params, h, k)
            dead = firing_counts(codes) == 0
            if bool(dead.any()) and not bool(dead.all()):
                scale = key_scale * float(params[0][~dead].norm(dim=1).mean())
                if rows == "random":               # errors 1², 2², ..., N² in a random order over the inputs
                    rank = torch.randperm(len(h), generator=torch.Generator().manual_seed(20_000 + seed + t))
                    h_hat = h - (rank + 1.0).double()[:, None] * h / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
                try:
                    out = resample(*params[:3], h.clone(), h_hat, dead.clone(), scale)
                    params[:3] = [torch.as_tensor(p, dtype=torch.float64).detach() for p in out[:3]]
                except Exception as error:  # noqa: BLE001 - the learner's code: report, never raise
                    return f"your resample_dead failed at step {t}: {type(error).__name__}: {error}"
        batch = h[torch.randint(0, len(h), (batch_size,), generator=gen)]
        try:
            out = step(*params, batch.clone(), k, lr)
            new = [torch.as_tensor(p, dtype=torch.float64).detach() for p in out[:4]]
        except Exception as error:  # noqa: BLE001 - the learner's code: report, never raise
            return f"your training_step failed at step {t}: {type(error).__name__}: {error}"
        if [p.shape for p in new] != [p.shape for p in params]:
            return (f"your training_step returned parameters of shapes {[tuple(p.shape) for p in new]}, expected "
                    f"{[tuple(p.shape) for p in params]}")
        if not all(torch.isfinite(p).all() for p in new):
            return f"the parameters stopped being finite at step {t + 1}: check the step's sign and size"
        params = new
    codes, _ = _reconstruct(params, h, k)
    used = int((firing_counts(codes) > 0).sum())
    represented = feature_norms(W_true) > 0.5
    random = torch.randn(W_true.shape[0], n_directions, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    return {"fvu": curve, "represented": int(represented.sum()),
            "recovered": int((best_cosines(W_true[:, represented], params[2]) > 0.95).sum()),
            "random": int((best_cosines(W_true[:, represented], random) > 0.95).sum()),
            "used": used, "dead": n_directions - used, "n_directions": n_directions}


def own_run_lines(run: dict | str) -> str:
    """The printable summary of ``train_with_step``'s result (or its sentence)."""
    if isinstance(run, str):
        return run
    steps = "".join(f"{t:>8,}" for t in run["fvu"])
    values = "".join(f"{v:8.1%}" for v in run["fvu"].values())
    return (f"step {steps}\nFVU  {values}\n"
            f"recovered at cosine > 0.95: {run['recovered']} of the {run['represented']} represented features "
            f"({run['n_directions']} random directions: {run['random']})\n"
            f"directions used: {run['used']} of {run['n_directions']}; dead (won no input): {run['dead']}")


def verdict_lines(comparisons: dict[str, PairedDifference], unit: str = "", digits: int = 2, drop: str = "",
                  over: str = "models", only: Sequence[str] | None = None) -> str:
    """One short line per verdict of ``holm(comparisons)``, in the given order: the comparison (``drop`` removed
    from its name), its mean difference, in how many of the paired runs it points that way, the verdict. ``only``
    (optional): print just these comparisons, still judged in the whole family. The full table, with each t and
    the Holm threshold it had to pass: ``helpers.stats.holm_table``."""
    verdicts = [v for v in holm(comparisons) if only is None or v.name in only]
    names = [v.name.replace(drop, "") for v in verdicts]
    width = max(len(n) for n in names)
    lines = []
    for name, v in zip(names, verdicts):
        c = v.comparison
        way = c.lower if c.mean < 0 else c.higher
        lines.append(f"  {name:<{width}}  {c.mean:+.{digits}f}{unit}  {'lower' if c.mean < 0 else 'higher'} in "
                     f"{way} of {c.n} {over}  → {v.verdict}")
    return "\n".join(lines)


def verdict_groups(comparisons: dict[str, PairedDifference], groups: dict[str, str], drop: str = "",
                   digits: int = 2) -> str:
    """One line per group of a family's verdicts (``holm`` over all of ``comparisons``): ``groups`` maps a
    group's words to the text its comparisons' names contain after a colon (``"features − neurons"`` takes
    ``"relation: features − neurons"``, not ``"relation: random-start features − neurons"``). Each line: how
    many of the group are resolved, each one's mean difference and in how many paired runs it points that way,
    and, for any that is not resolved, its |t| below the Holm threshold it had to pass (the full table: ``helpers.stats.holm_table``)."""
    verdicts = holm(comparisons)
    lines = []
    for words, part in groups.items():
        group = [v for v in verdicts if f": {part}" in v.name]
        if not group:
            raise ValueError(f"no comparison's name contains {part!r}")
        parts = []
        for v in group:
            c, label = v.comparison, v.name.replace(drop, "").replace(part, "").strip(" :,")
            way = c.lower if c.mean < 0 else c.higher
            missed = "" if v.resolved else f", |t| {abs(c.t):.2f} < {v.threshold:.2f}"
            parts.append(f"{label} {c.mean:+.{digits}f} ({way}/{c.n}{missed})")
        lines.append(f"  {words}: {sum(v.resolved for v in group)} of {len(group)} resolved; " + ", ".join(parts))
    return "\n".join(lines)


def structure_headline(study: dict, verdicts: dict[str, PairedDifference], lr: float = 0.01,
                       length: str = "10000", layer: int = 1) -> str:
    """Section 4's answer in three lines: each autoencoder's held-out FVU over its own data's PCA-8 (mean over
    models, ``lr`` and ``length`` steps) and the verdict of y against the Gaussian, with its t and the Holm
    threshold it had to pass in ``verdicts``' family."""
    names = {"sae_gaussian": "a Gaussian like y", "sae_slots": "the slot mixture", "sae_y": "y"}
    levels = {arm: sum(r) / len(r) for arm in names for r in [_runs(study, layer, arm)[(lr, length)]]}
    v = next(v for v in holm(verdicts) if v.name.endswith("SAE on y − SAE on a Gaussian"))
    c = v.comparison
    return (f"the same autoencoder ({int(length):,} steps, lr {lr:g}), held-out FVU over its own data's PCA-8, "
            f"mean over {c.n} models:\n  on " + ", on ".join(f"{n} {levels[a]:.2f}×" for a, n in names.items())
            + f"\n  y − the Gaussian: {c.mean:+.2f}×, lower in {c.lower} of {c.n} models, t {c.t:+.2f} against its "
            f"Holm threshold {v.threshold:.2f} → {v.verdict}")


def _autoencoder_pair(X: torch.Tensor, T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return X, X, T


def planted_recovery(seeds: Sequence[int], steps: int = RECIPE["steps"], threshold: float = 0.95,
                     progress: bool = True, transcoder: bool = False) -> dict:
    """The planted check at the recipe of sections 3-6 (``RECIPE``: TopK 8 of 256, data start, lr 0.03, float64):
    one autoencoder per seed on ``planted_features(seed=seed)`` (96 features in 48 dimensions, as many rows as
    the fact model's training prefixes). Per seed, how many of the 96 some direction matches at cosine >
    ``threshold``: the trained ``"dictionary"``, its data start before training (``"untrained"``), and 256 random
    directions (``"random directions"``). ``transcoder=True``: one transcoder per seed on
    ``planted_pairs(seed=seed)`` (keys in x, values in y), counting the planted values its decoder matches."""
    pairs = [planted_pairs(seed=s) if transcoder else _autoencoder_pair(*planted_features(seed=s)) for s in seeds]
    data = [(x, T) for x, _, T in pairs]
    X, Y = (torch.stack([p[i] for p in pairs]) for i in (0, 1))
    trained = train_dictionaries(X, Y, RECIPE["n_features"], RECIPE["k"], list(seeds), steps=steps,
                                 batch_size=RECIPE["batch_size"], dtype=torch.float64, progress=progress,
                                 desc="planted features")
    directions = {"dictionary": [d.W_dec.detach() for d in trained],
                  "untrained": [STARTS["data"](x, y, RECIPE["n_features"], s)[2] for (x, y, _), s in zip(pairs, seeds)],
                  "random directions": [torch.randn(x.shape[1], RECIPE["n_features"], dtype=torch.float64,
                                                    generator=torch.Generator().manual_seed(s))
                                        for (x, _), s in zip(data, seeds)]}
    return {name: [int((best_cosines(T, D) > threshold).sum()) for (_, T), D in zip(data, dirs)]
            for name, dirs in directions.items()}


@torch.no_grad()
def control_lengths(model, data, layer: int, seeds: Sequence[int], lengths: Sequence[int] = CONTROL_STEPS,
                    arms: Sequence[str] = ("sae_y", "sae_gaussian")) -> dict:
    """Held-out FVU of the control's autoencoders (``arms``: on ``y``, on the Gaussian like ``y``, on the slot
    mixture like ``y`` "sae_slots"; each at its ``ARM_LR``) trained each of ``lengths`` steps:
    ``{"sae_y": {"3000": [per seed], ...}, ...}``, with "sae_slots" also ``"pca_slots"``, the slot mixture's
    held-out PCA-8 FVU. The same split, data and recipe as ``layer_study``; only the number of steps changes."""
    arms = [validate.one_of("arm", a, ("sae_y", "sae_gaussian", "sae_slots")) for a in arms]
    p = fact_prefixes(data)
    _, outputs = ffn_io(model, data.ids)
    y = outputs[layer][p.rows, p.positions]
    train, test = held_out_split(len(y), RECIPE["held_out"], RECIPE["split_seed"])
    out: dict = {}
    if "sae_slots" in arms:
        slot = fact_labels(data, p.rows, p.positions)["slot"]
        fit_slots = [slot[i] for i in train.tolist()]
        slots = (slot_mixture_like(y[train], fit_slots, fit_slots, seed=1),
                 slot_mixture_like(y[train], fit_slots, [slot[i] for i in test.tolist()], seed=2))
        out["pca_slots"] = pca_fvu(*slots, RECIPE["rank"])
    data_of = {"sae_y": lambda: (y[train], y[test]),
               "sae_gaussian": lambda: (gaussian_like(y[train], len(train), seed=1),
                                        gaussian_like(y[train], len(test), seed=2)),
               "sae_slots": lambda: slots}
    arms = {arm: data_of[arm]() for arm in arms}
    out.update({arm: {} for arm in arms})
    for n in lengths:
        for arm, (fit, held) in arms.items():
            with torch.enable_grad():
                ds = _dicts(fit, fit, seeds, ARM_LR[arm], n, arm)
            out[arm][str(n)] = [fvu(held, d(held)) for d in ds]
    return _r(out)


@torch.no_grad()
def rate_runs(models: Sequence[int], layer: int, seeds: Sequence[int], lr: float, lengths: Sequence[int],
              arms: Sequence[str] = ("sae_y",), progress: bool = True) -> dict:
    """``control_lengths`` with every arm at the one learning rate ``lr``, the models' dictionaries trained side
    by side (one batched run per arm and length; each dictionary as if trained alone):
    ``{model: {arm: {str(steps): [held-out FVU per seed]}}}``."""
    arms = [validate.one_of("arm", a, ("sae_y", "sae_gaussian", "sae_slots")) for a in arms]
    seeds = list(seeds)
    data = make_dataset(load_facts())
    p = fact_prefixes(data)
    slot = fact_labels(data, p.rows, p.positions)["slot"]
    runs = {arm: [] for arm in arms}                                    # per model: (fit, held out)
    for m in models:
        y = ffn_io(load_fact_model(data, seed=m)[0], data.ids)[1][layer][p.rows, p.positions]
        train, test = held_out_split(len(y), RECIPE["held_out"], RECIPE["split_seed"])
        fit_slots = [slot[i] for i in train.tolist()]
        made = {"sae_y": lambda: (y[train], y[test]),
                "sae_gaussian": lambda: (gaussian_like(y[train], len(train), seed=1),
                                         gaussian_like(y[train], len(test), seed=2)),
                "sae_slots": lambda: (slot_mixture_like(y[train], fit_slots, fit_slots, seed=1),
                                      slot_mixture_like(y[train], fit_slots, [slot[i] for i in test.tolist()], seed=2))}
        for arm in arms:
            runs[arm].append(made[arm]())
    out: dict = {str(m): {arm: {} for arm in arms} for m in models}
    jobs = [(arm, n) for arm in arms for n in lengths]
    for arm, n in progress_bar(jobs, desc=f"lr {lr}", disable=not progress):
        fit = torch.stack([f for f, _ in runs[arm] for _ in seeds])     # (models × seeds, N, d)
        with torch.enable_grad():
            ds = _dicts(fit, fit, seeds * len(runs[arm]), lr, n, arm)
        for i, m in enumerate(models):
            held = runs[arm][i][1]
            out[str(m)][arm][str(n)] = _r([fvu(held, d(held)) for d in ds[i * len(seeds):(i + 1) * len(seeds)]])
    return out


def at_rate(study: dict, lr: str, layer: int = 1) -> dict:
    """The study with the control's runs at learning rate ``lr`` (a key of ``control_lr``) in place of those at
    ``ARM_LR``: an arm run at ``lr`` keeps only those runs; an arm whose ``ARM_LR`` is ``lr`` keeps its own."""
    out = json.loads(json.dumps(study))
    for e in out["models"].values():
        entry = e[str(layer)]
        for arm, by_length in entry.get("control_lr", {}).get(lr, {}).items():
            if study["arm_lr"][arm] == float(lr):
                entry["control_steps"][arm].update(by_length)
            else:
                entry["control_steps"][arm] = dict(by_length)
    out["arm_lr"] = {**study["arm_lr"], **{arm: float(lr) for arm in ("sae_y", "sae_gaussian", "sae_slots")}}
    return out


@torch.no_grad()
def tracking_lengths(model, data, layer: int, seeds: Sequence[int], steps: int) -> dict:
    """``tracking_rates`` of the two trained units of section 6 (the transcoder's features and the autoencoder on
    ``x``'s), the dictionaries trained ``steps`` steps instead of the recipe's (the longer-run check of
    section 6; neurons and the random dictionary do not train): ``{"transcoder": [per seed], "sae_x": [...]}``."""
    p = fact_prefixes(data)
    inputs, outputs = ffn_io(model, data.ids)
    x, y = inputs[layer][p.rows, p.positions], outputs[layer][p.rows, p.positions]
    train, _ = held_out_split(len(x), RECIPE["held_out"], RECIPE["split_seed"])
    with torch.enable_grad():
        trained = {"transcoder": _dicts(x[train], y[train], seeds, ARM_LR["transcoder"], steps, "transcoders"),
                   "sae_x": _dicts(x[train], x[train], seeds, ARM_LR["sae_x"], steps, "SAE on x")}
    return _r({name: [{**rates, "judged": judged}
                      for rates, judged in (tracking_rates(d.encode(x[p.named]), p.labels) for d in ds)]
               for name, ds in trained.items()})


def _toy_check(seeds: Sequence[int], steps: int) -> dict:
    """The toy models of notebook 09's section 1, trained ``steps`` steps: represented features and dimensions
    per feature, per sparsity and seed."""
    toys = train_toy_models(sparsities=(0.0, 0.7, 0.9, 0.99), seeds=seeds, steps=steps, progress=False)
    out = {str(s): {"represented": (feature_norms(toys.W[toys.at(s)]) > 0.5).sum(1).tolist(),
                    "dims_per_feature": _r(dimensions_per_feature(toys.W[toys.at(s)]).tolist())}
           for s in (0.0, 0.7, 0.9, 0.99)}
    out["recovery"] = toy_recovery(toys, 0.99, seeds, steps=3 * 2000, progress=False)
    return out


# ---------------------------------------------------------------- the whole study
def make_study(models: Sequence[int] = MODELS, layers: Sequence[int] = LAYERS, n_seeds: int = RECIPE["seeds"],
               steps: int = RECIPE["steps"], sweep: bool = False, toy: bool = True, progress: bool = True) -> dict:
    """Run ``layer_study`` for every model seed and layer (with ``sweep``, also ``lr_sweep`` on the first model;
    with ``toy``, the toy models' 3× longer run); returns the dictionary ``main`` writes as JSON."""
    from helpers.progress import progress as bar
    seeds = list(range(validate.positive_int("n_seeds", n_seeds)))
    data = make_dataset(load_facts())
    convergence = sorted({max(1, round(steps * f / 3000)) for f in STEPS})
    study = {"command": "python -m helpers.dictionary_study", "recipe": {**RECIPE, "steps": steps, "seeds": n_seeds},
             "arm_lr": ARM_LR, "layers": list(layers), "models": {}}
    for m in bar(list(models), desc="fact models", disable=not progress):
        model, _ = load_fact_model(data, seed=m)
        untrained = untrained_fact_model(data, seed=m)
        study["models"][str(m)] = {str(L): layer_study(model, untrained, data, L, seeds, steps, convergence)
                                   for L in layers}
    if sweep:
        model, _ = load_fact_model(data, seed=models[0])
        study["lr_sweep"] = {"model": models[0], **{str(L): lr_sweep(model, data, L, seeds, steps) for L in layers}}
    if toy:
        study["toy_3x"] = _toy_check(range(5), 3 * 1000)
    return study


def load_study(path: str | Path | None = None) -> dict:
    """The shipped study (``helpers/data/dictionary_study.json``), or the file at ``path``."""
    path = STUDY_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no study file at {path}: make it with `python -m helpers.dictionary_study`")
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- reading it: one value per model, verdict families
def _layers(study: dict, layers: Sequence[int] | None) -> list[int]:
    """The layers to read: ``layers``, or every layer in the file, the last first."""
    return list(layers) if layers is not None else sorted(study["layers"], reverse=True)


def model_means(study: dict, layer: int, get) -> list[float]:
    """One value per model (in model order): ``get(entry)`` on the layer's entry, averaged if it is a list."""
    values = []
    for entry in study["models"].values():
        v = get(entry[str(layer)])
        values.append(sum(v) / len(v) if isinstance(v, list) else v)
    return values


def _relative(study: dict, layer: int, arm: str, baseline: str, steps: str | None = None) -> list[float]:
    def get(e):
        return e[arm]["held_out"] if steps is None else e[arm]["steps"][steps]
    return [a / b for a, b in zip(model_means(study, layer, get),
                                  model_means(study, layer, lambda e: e["dense"][baseline]))]


def longest(study: dict) -> str:
    """The longest training of the transcoders in the study (the 3× longer run), as its key in ``steps``."""
    entry = next(iter(study["models"].values()))[str(study["layers"][0])]
    return max(entry["transcoder"]["steps"], key=int)


def _control(study: dict, layer: int, arm: str, baseline: str, control_steps: str | None) -> list[float]:
    """One control arm's held-out FVU over its own PCA-8, per model: the recipe's run, or the one trained
    ``control_steps`` steps (a key of ``control_steps`` in the file; an arm only trained there, like
    "sae_slots", is read there at the recipe's length)."""
    if control_steps is None and arm in study["models"]["0"][str(layer)]:
        return _relative(study, layer, arm, baseline)
    control_steps = control_steps or str(study["recipe"]["steps"])
    return [a / b for a, b in zip(model_means(study, layer, lambda e: e["control_steps"][arm][control_steps]),
                                  model_means(study, layer, lambda e: e["dense"][baseline]))]


def sparse_structure_family(study: dict, layers: Sequence[int] | None = None, steps: str | None = None,
                            control_steps: str | None = None, slots: bool = False) -> dict[str, PairedDifference]:
    """Section 4's comparisons (sparse structure), paired over models, in units of PCA-8's held-out FVU of y:
    the transcoder against PCA-8 (an oracle: 1.0) and against the affine map from x, and the edge of an
    autoencoder over PCA-8 on y against its edge on a Gaussian with y's mean and covariance. ``steps``: use
    the transcoders trained that long (a key of ``steps`` in the file, e.g. ``longest(study)``);
    ``control_steps``: the two autoencoders trained that long (a key of ``control_steps``, e.g. "10000");
    ``slots``: also the autoencoder on y against the one on the slot mixture (what is left beyond the slot), and
    the slot mixture's against the Gaussian's."""
    layers = _layers(study, layers)
    family = {}
    for L in layers:
        ours = _relative(study, L, "transcoder", "pca", steps)
        affine = [a / b for a, b in zip(model_means(study, L, lambda e: e["dense"]["affine"]),
                                        model_means(study, L, lambda e: e["dense"]["pca"]))]
        family[f"layer {L}: transcoder − PCA-8 of y"] = paired_difference(ours, [1.0] * len(ours))
        family[f"layer {L}: transcoder − affine map from x"] = paired_difference(ours, affine)
        on_y = _control(study, L, "sae_y", "pca", control_steps)
        gauss = _control(study, L, "sae_gaussian", "pca_gaussian", control_steps)
        family[f"layer {L}: SAE on y − SAE on a Gaussian"] = paired_difference(on_y, gauss)
        if slots:
            mixture = _control(study, L, "sae_slots", "pca_slots", control_steps)
            family[f"layer {L}: SAE on y − SAE on a slot mixture"] = paired_difference(on_y, mixture)
            family[f"layer {L}: SAE on a slot mixture − on a Gaussian"] = paired_difference(mixture, gauss)
    return family


def structure_ratios(study: dict, layer: int = 1, control_steps: str | None = None) -> dict[str, list[float]]:
    """Section 4's arms per model, each as a multiple of its own data's PCA-8 held-out FVU (PCA-8 itself: 1.0):
    the affine map from x and the transcoder (against PCA-8 of y), and the same autoencoder on a Gaussian like y,
    on the slot mixture and on y (each against its own data's PCA-8; ``control_steps`` as in
    ``sparse_structure_family``). The values the verdicts of ``sparse_structure_family(..., slots=True)`` pair."""
    affine = [a / b for a, b in zip(model_means(study, layer, lambda e: e["dense"]["affine"]),
                                    model_means(study, layer, lambda e: e["dense"]["pca"]))]
    return {"affine map from x": affine,
            "transcoder x -> y": _relative(study, layer, "transcoder", "pca"),
            "SAE on a Gaussian like y": _control(study, layer, "sae_gaussian", "pca_gaussian", control_steps),
            "SAE on the slot mixture": _control(study, layer, "sae_slots", "pca_slots", control_steps),
            "SAE on y": _control(study, layer, "sae_y", "pca", control_steps)}


def _runs(study: dict, layer: int, arm: str) -> dict[tuple[float, str], list[float]]:
    """Every run of a control arm in the file, ``(learning rate, steps) ->`` held-out FVU over its own PCA-8 per
    model (mean over seeds)."""
    base = {"sae_y": "pca", "sae_gaussian": "pca_gaussian", "sae_slots": "pca_slots"}[arm]
    entry = study["models"]["0"][str(layer)]
    keys = [(study["arm_lr"][arm], str(study["recipe"]["steps"]), (arm, "held_out"))] if arm in entry else []
    keys += [(study["arm_lr"][arm], n, ("control_steps", arm, n)) for n in entry["control_steps"].get(arm, {})]
    keys += [(float(lr), n, ("control_lr", lr, arm, n)) for lr, arms in entry.get("control_lr", {}).items()
             for n in arms.get(arm, {})]

    def get(e, path):
        for key in path:
            e = e[key]
        return e
    return {(lr, n): [a / b for a, b in zip(model_means(study, layer, lambda e, p=path: get(e, p)),
                                          model_means(study, layer, lambda e: e["dense"][base]))]
            for lr, n, path in keys}


def rate_table(study: dict, layer: int = 1, lengths: Sequence[str] = ("1000", "3000", "10000", "30000")) -> str:
    """The control's autoencoders at each learning rate run at ``lengths``: held-out FVU over each one's own
    PCA-8 (the floor a trained TopK-8 dictionary with F >= 16 cannot lose to on its fitting data), mean (range)
    over models ("—": not run)."""
    names = {"sae_y": "SAE on y", "sae_slots": "SAE on a slot mixture", "sae_gaussian": "SAE on a Gaussian"}
    lines = ["held-out FVU / its own PCA-8, mean (range) over models" + "".join(
        f"{int(n):>18,d}" for n in lengths) + " steps"]
    for arm, name in names.items():
        runs = _runs(study, layer, arm)
        for lr in sorted({lr for lr, n in runs if n in lengths}, reverse=True):
            cells = [_spread(runs[(lr, n)], 1.0, unit="×") if (lr, n) in runs else "—" for n in lengths]
            lines.append(f"  {name + f', lr {lr:g}':52s}" + "".join(f"{c:>18s}" for c in cells))
    return "\n".join(lines)


def slot_edge_family(study: dict, lr: float, lengths: Sequence[str], layer: int = 1) -> dict[str, PairedDifference]:
    """SAE on y − SAE on the slot mixture (over each one's own PCA-8), both at learning rate ``lr``, paired over
    models, at each of ``lengths`` (named as in ``sparse_structure_family``, the steps added when there are
    several): the verdict of structure beyond the slot, and its longer-run check."""
    y, mixture = _runs(study, layer, "sae_y"), _runs(study, layer, "sae_slots")
    name = f"layer {layer}: SAE on y − SAE on a slot mixture"
    return {name + (f", {int(n):,} steps" if len(lengths) > 1 else ""):
            paired_difference(y[(lr, n)], mixture[(lr, n)]) for n in lengths}


def control_family(study: dict, lr: float, length: str, layer: int = 1) -> dict[str, PairedDifference]:
    """Section 4's three autoencoder comparisons, all at learning rate ``lr`` and ``length`` steps, paired over
    models, named as in ``sparse_structure_family(..., slots=True)``: y against the Gaussian and the slot
    mixture, the mixture against the Gaussian (each over its own PCA-8). Read at 3× section 4's length, it is
    the longer-run check of those verdicts."""
    y, gauss, mixture = (_runs(study, layer, arm)[(lr, length)] for arm in ("sae_y", "sae_gaussian", "sae_slots"))
    return {f"layer {layer}: SAE on y − SAE on a Gaussian": paired_difference(y, gauss),
            f"layer {layer}: SAE on y − SAE on a slot mixture": paired_difference(y, mixture),
            f"layer {layer}: SAE on a slot mixture − on a Gaussian": paired_difference(mixture, gauss)}


def _tracking(entry: dict, unit: str, steps: str | None) -> list[dict]:
    """A layer entry's tracking runs of ``unit``; the trained units as trained ``steps`` steps if given."""
    if steps is not None and unit in ("transcoder", "sae_x"):
        return entry["tracking_steps"][steps][unit]
    return entry["tracking"][unit]


def tracking_family(study: dict, layers: Sequence[int] | None = None, labels: Sequence[str] = ("relation", "answer"),
                    controls: Sequence[str] = ("neurons", "sae_x", "random"),
                    steps: str | None = None) -> dict[str, PairedDifference]:
    """Transcoder features minus each control, the share of judged units that track each label, paired over
    models (each model's value: the mean over its dictionary seeds). ``steps``: the trained units (transcoder,
    autoencoder on x) trained that long (a key of ``tracking_steps`` in the file, ``--only-tracking``)."""
    layers = _layers(study, layers)
    family = {}
    for L in layers:
        for label in labels:
            ours = model_means(study, L, lambda e: [r[label] for r in _tracking(e, "transcoder", steps)])
            for control in controls:
                theirs = model_means(study, L, lambda e: [r[label] for r in _tracking(e, control, steps)])
                family[f"layer {L}, {label}: features − {control.replace('_', ' ')}"] = paired_difference(ours, theirs)
    return family


# ---------------------------------------------------------------- printed tables for the notebook
def _spread(values: Sequence[float], scale: float = 100.0, digits: int = 2, unit: str = "") -> str:
    """``mean (min–max)`` of per-model values, times ``scale``; ``unit`` follows the mean."""
    v = [scale * x for x in values]
    return f"{sum(v) / len(v):.{digits}f}{unit} ({min(v):.{digits}f}–{max(v):.{digits}f})"


def convergence_table(study: dict, layers: Sequence[int] | None = None) -> str:
    """Held-out FVU (%) of the transcoder after each training length, mean over models (and seeds), beside
    PCA-8 of y."""
    layers = _layers(study, layers)
    lengths = list(study["models"]["0"][str(layers[0])]["transcoder"]["steps"])
    lines = ["held-out FVU %, mean over models   " + "".join(f"{int(n):>9,d}" for n in lengths)
             + " steps   PCA-8 of y"]
    for L in layers:
        cells = [sum(v) / len(v) for v in (model_means(study, L, lambda e, n=n: e["transcoder"]["steps"][n])
                                           for n in lengths)]
        pca = model_means(study, L, lambda e: e["dense"]["pca"])
        lines.append(f"  layer {L} transcoder" + " " * 14 + "".join(f"{100 * c:9.2f}" for c in cells)
                     + f"{100 * sum(pca) / len(pca):15.2f}")
    return "\n".join(lines)


def floor_table(study: dict, layer: int = 1) -> str:
    """Each autoencoder's held-out FVU over its own PCA-8 (the floor a trained TopK-8 dictionary with F >= 16
    cannot lose to on its fitting data), mean (range) over models, at the recipe's length and each longer one."""
    entry = study["models"]["0"][str(layer)]
    lengths = [str(study["recipe"]["steps"]), *entry["control_steps"]["sae_y"]]
    lines = ["held-out FVU / its own PCA-8, mean (range) over models" + "".join(
        f"{int(n):>18,d}" for n in lengths) + " steps"]
    arms = [("sae_y", "pca", "SAE on y"), ("sae_gaussian", "pca_gaussian", "SAE on a Gaussian")]
    if "sae_slots" in entry["control_steps"]:
        arms.insert(1, ("sae_slots", "pca_slots", "SAE on a slot mixture (y's slot means, covariances)"))
    for arm, base, name in arms:
        cells = [_spread(_control(study, layer, arm, base, None if n == lengths[0] else n), 1.0)
                 for n in lengths]
        lines.append(f"  {name:52s}" + "".join(f"{c:>18s}" for c in cells))
    return "\n".join(lines)


def sweep_table(study: dict, layer: int = 1) -> str:
    """The learning-rate sweep on model 0: held-out FVU (%) of each arm at each rate, mean over seeds, and the
    features each transcoder uses."""
    sweep = study["lr_sweep"][str(layer)]
    rates = list(sweep["transcoder"])
    names = {"transcoder": "transcoder x -> y", "sae_x": "SAE on x", "sae_y": "SAE on y",
             "sae_gaussian": "SAE on a Gaussian like y"}
    lines = [f"learning-rate sweep, model {study['lr_sweep']['model']}, layer {layer}, held-out FVU %:"
             + "".join(f"{'lr ' + r:>11s}" for r in rates)]
    for arm, name in names.items():
        lines.append(f"  {name:44s}" + "".join(f"{100 * sum(v) / len(v):11.2f}" for v in sweep[arm].values()))
    used = [sum(v) / len(v) for v in sweep["transcoder_used"].values()]
    lines.append(f"  {'transcoder: features used (of 256)':44s}" + "".join(f"{u:11.0f}" for u in used))
    return "\n".join(lines)


def sparse_structure_table(study: dict, layers: Sequence[int] | None = None, control_steps: str | None = None,
                           rate: str | None = None) -> str:
    """Held-out FVU (%) of every arm of section 4, mean (range) over models; ``control_steps``: the two
    autoencoders trained that long (a key of ``control_steps``); ``rate``: their learning rate, named in the rows
    (the study as returned by ``at_rate(study, rate)``)."""
    layers = _layers(study, layers)

    def sae(arm):
        return (lambda e: e[arm]["held_out"]) if control_steps is None else (
            lambda e: e["control_steps"][arm][control_steps])
    at = "" if control_steps is None else f", {int(control_steps):,} st."
    at += "" if rate is None else f", lr {rate}"
    rows = {"transcoder x -> y, 8 of 256 features": lambda e: e["transcoder"]["held_out"],
            "affine map from x (dense, 48 dims)": lambda e: e["dense"]["affine"],
            "PCA-8 of y (oracle: 8 fixed dims)": lambda e: e["dense"]["pca"],
            f"SAE on y, 8 of 256 features{at}": sae("sae_y"),
            f"SAE on a Gaussian like y{at}": sae("sae_gaussian"),
            "PCA-8 of that Gaussian": lambda e: e["dense"]["pca_gaussian"]}
    width = max(40, len(max(rows, key=len)))
    lines = [f"{'held-out FVU %, mean (range) over ' + str(len(study['models'])) + ' models':{width + 2}s}" + "".join(
        f"{'layer ' + str(L):>22s}" for L in layers)]
    for name, get in rows.items():
        lines.append(f"  {name:{width}s}"
                     + "".join(f"{_spread(model_means(study, L, get), unit=' %'):>22s}" for L in layers))
    return "\n".join(lines)


#: the names of an earlier version (section 4 tests sparse structure, not superposition)
superposition_family, superposition_table = sparse_structure_family, sparse_structure_table


def tracking_table(study: dict, layers: Sequence[int] | None = None,
                   labels: Sequence[str] = ("relation", "answer", "slot"),
                   steps: str | None = None, units: Sequence[str] = UNITS) -> str:
    """Share (%) of judged units whose 10 strongest prefixes share each label, mean over models, per layer.
    ``steps``: the trained units as trained that long (a key of ``tracking_steps``); ``units``: the rows."""
    layers = _layers(study, layers)
    names = {"transcoder": "transcoder features", "neurons": "neurons", "sae_x": "SAE-on-x features",
             "random": "random dictionary", "untrained_neurons": "untrained network's neurons"}
    where = f"layer {layers[0]}" if len(layers) == 1 else "layers " + ", ".join(map(str, layers))
    title = (f"share tracking, {where}, mean over models" if steps is None
             else f"the same, {where}, {int(steps):,} steps")
    width = 12 if len(layers) == 1 else 18
    head = "".join(f"{label if len(layers) == 1 else f'layer {L} ' + label:>{width}s}"
                   for L in layers for label in labels)
    lines = [title, f"{'':32s}{head}   judged units (layer {layers[0]})"]
    for unit in units:
        name = names[validate.one_of("unit", unit, names)]
        cells = "".join(f"{100 * sum(v) / len(v):{width - 1}.0f}%" for L in layers for label in labels
                        for v in [model_means(study, L,
                                              lambda e, u=unit, a=label: [r[a] for r in _tracking(e, u, steps)])])
        judged = model_means(study, layers[0], lambda e, u=unit: [r["judged"] for r in _tracking(e, u, steps)])
        lines.append(f"  {name:30s}{cells}   {min(judged):.0f}–{max(judged):.0f}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the sparsity-reconstruction frontier
def frontier_runs(models: Sequence[int] = MODELS, ks: Sequence[int] = FRONTIER_KS, seeds: Sequence[int] = (0, 1),
                  steps: int = RECIPE["steps"], progress: bool = True) -> dict:
    """``{"ks", "models", "seeds", "steps", "runs": {model: {k: {"held_out", "dead", "pca"}}}}``: layer 1's
    transcoders at each k (see the module docstring, ``--frontier``)."""
    data = make_dataset(load_facts())
    prefixes = fact_prefixes(data)
    out: dict = {"ks": list(ks), "models": list(models), "seeds": list(seeds), "steps": steps, "runs": {}}
    for m in models:
        x, y, train, test = layer_data(data, prefixes, m, 1)
        grid = [(k, s) for k in ks for s in seeds]
        dictionaries = train_dictionaries(x[train], y[train], RECIPE["n_features"], [k for k, _ in grid],
                                          [s for _, s in grid], steps=steps, lr=ARM_LR["transcoder"],
                                          batch_size=RECIPE["batch_size"], dtype=torch.float64,
                                          progress=progress, desc=f"model {m}: k = {', '.join(map(str, ks))}")
        runs = {str(k): {"held_out": [], "dead": [], "pca": round(pca_fvu(y[train], y[test], k), 6)} for k in ks}
        with torch.no_grad():
            for (k, _), d in zip(grid, dictionaries):
                runs[str(k)]["held_out"].append(round(fvu(y[test], d(x[test])), 6))
                runs[str(k)]["dead"].append(int((firing_counts(d.encode(x)) == 0).sum()))
        out["runs"][str(m)] = runs
    return out


def load_frontier(path: str | Path = FRONTIER_PATH) -> dict:
    """The shipped frontier (``helpers/data/sparsity_frontier.json``), or the file at ``path``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def frontier_means(record: dict) -> dict[str, list]:
    """Per k (in ``record["ks"]`` order), means over models of each model's seed mean: ``{"held_out": FVU,
    "pca": PCA-k's FVU, "dead": dead features}``, plus ``"held_out_range"``: (min, max) of the model means."""
    def per_model(k, key):
        return [sum(v) / len(v) if isinstance(v, list) else v
                for v in (record["runs"][m][str(k)][key] for m in record["runs"])]
    out: dict = {"held_out": [], "pca": [], "dead": [], "held_out_range": []}
    for k in record["ks"]:
        for key in ("held_out", "pca", "dead"):
            values = per_model(k, key)
            out[key].append(sum(values) / len(values))
        fits = per_model(k, "held_out")
        out["held_out_range"].append((min(fits), max(fits)))
    return out


def frontier_family(record: dict) -> dict[str, PairedDifference]:
    """For ``helpers.stats.holm``, per k: the transcoder's held-out FVU as a multiple of PCA-k's, minus 1 (so
    below 0: the transcoder is better), paired over the models (each model: the mean over its seeds)."""
    family = {}
    for k in record["ks"]:
        ratios = [sum(r[str(k)]["held_out"]) / len(r[str(k)]["held_out"]) / r[str(k)]["pca"]
                  for r in record["runs"].values()]
        family[f"k = {k}: transcoder − PCA-k"] = paired_difference(ratios, [1.0] * len(ratios))
    return family


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=list(MODELS))
    parser.add_argument("--layers", type=int, nargs="+", default=list(LAYERS))
    parser.add_argument("--seeds", type=int, default=RECIPE["seeds"], help="dictionary seeds per arm")
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--sweep", action="store_true", help="add the learning-rate sweep on the first model")
    parser.add_argument("--no-toy", action="store_true", help="skip the toy models' 3x longer check")
    parser.add_argument("--only-toy", action="store_true",
                        help="recompute only the toy models' 3x check, in the existing file at --out")
    parser.add_argument("--only-planted", action="store_true",
                        help="recompute only the planted check at the recipe (5 seeds), in the existing file at --out")
    parser.add_argument("--only-control", action="store_true",
                        help="recompute only the control's longer runs (CONTROL_STEPS), in the existing file at --out")
    parser.add_argument("--only-tracking", type=int, metavar="STEPS",
                        help="recompute only section 6's trained units at STEPS steps, in the existing file at --out")
    parser.add_argument("--arms", nargs="+", default=["sae_y", "sae_gaussian"],
                        help="with --only-control: the autoencoders to train (sae_y, sae_gaussian, sae_slots)")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(CONTROL_STEPS),
                        help="with --only-control: the training lengths")
    parser.add_argument("--rate", type=float, help="train --arms for --lengths at this one learning rate "
                        "(rate_runs), into each model's control_lr, in the existing file at --out")
    parser.add_argument("--frontier", action="store_true",
                        help="make the k frontier (frontier_runs) into --out, by default sparsity_frontier.json")
    parser.add_argument("--out", type=Path, default=None, help="the file to write (default: the shipped one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.frontier:
        out = args.out or FRONTIER_PATH
        record = {"command": "python -m helpers.dictionary_study --frontier"
                             + (f" --steps {args.steps}" if args.steps != RECIPE["steps"] else ""),
                  **frontier_runs(args.models, FRONTIER_KS, range(args.seeds), args.steps)}
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        return out
    args.out = args.out or STUDY_PATH
    if args.rate:
        study = load_study(args.out)
        for L in args.layers:
            runs = rate_runs(args.models, L, range(study["recipe"]["seeds"]), args.rate, args.lengths, args.arms)
            for m, by_arm in runs.items():
                rates = study["models"][m][str(L)].setdefault("control_lr", {}).setdefault(str(args.rate), {})
                for arm, by_length in by_arm.items():
                    rates.setdefault(arm, {}).update(by_length)
    elif args.only_planted:
        study = load_study(args.out)
        study["planted"] = planted_recovery(range(5))
        study["planted_transcoder"] = planted_recovery(range(5), transcoder=True)
    elif args.only_toy:
        study = load_study(args.out)
        study["toy_3x"] = _toy_check(range(5), 3 * 1000)
    elif args.only_tracking:
        study = load_study(args.out)
        data = make_dataset(load_facts())
        for m in progress_bar(args.models, desc=f"tracking, {args.only_tracking} steps"):
            model = load_fact_model(data, seed=m)[0]
            for L in args.layers:
                study["models"][str(m)][str(L)].setdefault("tracking_steps", {})[str(args.only_tracking)] = \
                    tracking_lengths(model, data, L, range(study["recipe"]["seeds"]), args.only_tracking)
    elif args.only_control:
        study = load_study(args.out)
        data = make_dataset(load_facts())
        for m in progress_bar(args.models, desc="control, longer runs"):
            model = load_fact_model(data, seed=m)[0]
            for L in args.layers:
                entry = study["models"][str(m)][str(L)]
                runs = control_lengths(model, data, L, range(study["recipe"]["seeds"]), args.lengths, args.arms)
                if "pca_slots" in runs:
                    entry["dense"]["pca_slots"] = runs.pop("pca_slots")
                for arm, by_length in runs.items():
                    entry.setdefault("control_steps", {}).setdefault(arm, {}).update(by_length)
        study["arm_lr"].update({arm: ARM_LR[arm] for arm in args.arms})
    else:
        study = make_study(args.models, args.layers, args.seeds, args.steps, sweep=args.sweep, toy=not args.no_toy)
    args.out.write_text(json.dumps(study, indent=1) + "\n", encoding="utf-8")
    return args.out


if __name__ == "__main__":
    print(main())
