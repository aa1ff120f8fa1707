r"""Activation sparsity: for any one token most FFN neurons are silent; skip them, predict them, count the bytes.

The idea. Neuron i of an FFN computes ``m_i = φ(W1[i]·x + b1[i])`` for a token ``x`` and writes ``m_i·W2[:, i]``.
ReLU and squared ReLU give exactly 0 for a negative pre-activation, and after training most of a token's
pre-activations are negative: most neurons are **silent for that token**. That is not **dead** (notebook 01): a
dead neuron is silent for every token. A decoder that knows which neurons are silent can leave their weights
unread, the bytes that bound decoding (notebook 06):

* exact (ReLU): compute all of ``W1 x`` to find the zeros, then read only the active columns of ``W2``
  (gated: rows of ``W3`` too); the output is unchanged;
* threshold (GELU, SiLU, SwiGLU have no exact zeros): treat ``|m_i| ≤ τ`` as silent, at a cost in quality
  (TEAL, Liu et al. 2024; CATS, Lee et al. 2024);
* predicted (Deja Vu, Liu et al. 2023): a cheap low-rank classifier guesses the active set from ``x`` first, so
  the rows of ``W1`` of the other neurons are skipped too; a missed active neuron is lost.

B tokens decoded together read the **union** of their active sets, which grows with B: ``expected_union``.

``python -m helpers.activation_sparsity --make-results`` writes ``helpers/data/activation_sparsity_runs.json``,
the multi-seed runs notebook 10 reads: fact models trained with each activation, checkpointed (5 seeds); and on
the ten shipped GELU fact models, the threshold sweep, ReLUfication with its unions, and predictors of every
rank. ``--only PART ...`` reruns some parts and keeps the others; ``--seeds 0 --quick`` makes a small file for tests.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.dictionary import answer_scores, ffn_io, replaced_ffn
from helpers.facts import prompt_words
from helpers.ffn import FFN
from helpers.progress import progress as progress_bar

RESULTS_PATH = Path(__file__).resolve().parent / "data" / "activation_sparsity_runs.json"

#: the activations trained in the results file: name -> (φ, gated); "swiglu" is SiLU(W1 x) ⊙ (W3 x)
TRAINED_ACTIVATIONS: dict[str, tuple[str, bool]] = {"relu": ("relu", False), "relu2": ("relu2", False),
                                                     "gelu": ("gelu", False), "silu": ("silu", False),
                                                     "swiglu": ("silu", True)}

Rule = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------------------------------------- measuring
@dataclass
class LayerStates:
    """One FFN layer at the rows measured: inputs ``x`` (N, d_model), pre-activations ``pre = W1 x + b1``
    (N, d_ff) and coefficients ``m`` (N, d_ff), ``φ(pre)`` (gated: ``φ(pre) ⊙ (W3 x + b3)``)."""

    x: torch.Tensor
    pre: torch.Tensor
    m: torch.Tensor


@torch.no_grad()
def layer_states(model: nn.Module, ids: torch.Tensor, valid: torch.Tensor) -> list[LayerStates]:
    """Every layer's FFN input, pre-activations and coefficients at the ``valid (N, T)`` positions of ``ids``."""
    inputs, _ = ffn_io(model, ids)
    states = []
    for block, x in zip(model.blocks, inputs):
        x = x[valid]
        states.append(LayerStates(x, block.ffn.w1(x), block.ffn.hidden(x)))
    return states


def silent_share(m: torch.Tensor, tau: float = 0.0) -> torch.Tensor:
    """Per row (token), the share of neurons with ``|m_i| ≤ tau``: ``(N, d_ff) -> (N,)`` float64.

    ``tau = 0`` counts exact zeros (ReLU, squared ReLU); GELU and SiLU need ``tau > 0``.
    """
    validate.float_tensor("m", m)
    validate.non_negative_float("tau", tau)
    return (m.abs() <= tau).double().mean(dim=-1)


def with_activation(model: nn.Module, activation: str) -> nn.Module:
    """A copy of ``model`` whose FFNs use ``activation`` (same weights, eval mode): ReLUfication's swap."""
    new = copy.deepcopy(model)
    for block in new.blocks:
        old = block.ffn
        block.ffn = FFN(old.d_model, old.d_ff, activation, gated=old.gated, bias=old.has_bias)
        block.ffn.load_state_dict(old.state_dict())
    return new.eval()


# ---------------------------------------------------------------------------------------------- skipping
def calibrate_threshold(m: torch.Tensor, skip: float) -> float:
    """The ``τ`` below which a share ``skip`` of the entries of ``m`` lie (``|m| ≤ τ``): the ``skip``-quantile
    of ``|m|`` over the calibration rows, as TEAL and CATS set theirs (``-1`` for ``skip = 0``). ``skip`` in [0, 1)."""
    validate.probability("skip", skip)
    values = m.detach().abs().flatten()
    count = int(round(skip * values.numel()))
    return -1.0 if count == 0 else values.kthvalue(count).values.item()


def top_k_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool ``(N, d_ff)``: the ``k`` largest scores of each row, the same count for every token (``torch.topk``'s
    pick among equal scores; ``k = 0`` keeps nothing)."""
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, scores.topk(k, dim=-1).indices, True)


def random_like(keep: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Bool like ``keep``: in each row as many neurons as ``keep`` has, chosen at random (the control)."""
    order = torch.rand(keep.shape, generator=generator).argsort(dim=-1)       # a random permutation per row
    first = torch.arange(keep.shape[-1]) < keep.sum(dim=-1, keepdim=True)    # its first `count` places
    return torch.zeros_like(keep).scatter(-1, order, first)


@contextmanager
def skipping(model: nn.Module, rules: Sequence[Rule | None]):
    """Inside the block, FFN ``l`` outputs ``W2 (m ⊙ keep) + b2`` with ``keep = rules[l](x, m)`` (bool, like m).

    ``x`` is the FFN's input and ``m`` its coefficients in that forward, so a rule sees what skipping upstream
    layers did to them. ``None`` leaves a layer dense.
    """
    with ExitStack() as stack:
        for layer, (block, rule) in enumerate(zip(model.blocks, rules)):
            if rule is None:
                continue

            def replacement(x, ffn=block.ffn, rule=rule):
                m = ffn.hidden(x)
                return ffn.w2(m * rule(x, m))

            stack.enter_context(replaced_ffn(model, layer, replacement))
        yield


def answer_quality(model: nn.Module, data, rows: torch.Tensor | None = None) -> tuple[float, float]:
    """``(accuracy, loss)`` on the answers of ``data``'s facts (``rows``: a subset), as in notebooks 03 and 09."""
    rows = torch.arange(len(data)) if rows is None else rows
    return answer_scores(model, data.ids[rows], data.answer_pos[rows], data.answer_id[rows])


def scored_kept(model: nn.Module, data, rules: Sequence[Rule]) -> tuple[float, list[torch.Tensor]]:
    """Answer loss with FFN ``l`` skipping by ``rules[l]``, and per layer the number of neurons kept at each
    fact's scored position (the one that predicts its answer): a list of ``(N,)`` long tensors."""
    rows, kept = torch.arange(len(data)), {}

    def recording(layer, rule):
        def rule_and_count(x, m):
            keep = rule(x, m)                                             # (N, T, d_ff)
            kept[layer] = keep[rows, data.answer_pos].sum(-1)
            return keep
        return rule_and_count

    with skipping(model, [recording(layer, rule) for layer, rule in enumerate(rules)]):
        loss = answer_quality(model, data)[1]
    return loss, [kept[layer] for layer in range(len(rules))]


#: the rules of ``threshold_sweep``, as the notebook names them
SKIP_RULES = {"threshold": "threshold", "top_k": "top-k", "matched": "top-k, matched where scored",
              "random": "random", "scored_tau": "threshold, calibrated where scored"}


def threshold_sweep(model: nn.Module, data, valid: torch.Tensor, shares: Sequence[float], seed: int = 0) -> dict:
    """For each share ``s``, the answer loss when both FFNs skip by each rule, and the neurons kept per scored token:

    * ``"threshold"``: ``|m_i| > τ``, one ``τ`` per layer skipping ``s`` of all ``valid`` entries (TEAL, CATS);
      the count kept varies from token to token;
    * ``"top_k"``: each token's ``round((1 − s)·d_ff)`` largest ``|m_i|``, the same count for every token;
    * ``"matched"``: top-k, except at the scored positions (``data.answer_pos``), where each token keeps its
      largest ``|m_i|``, as many as the threshold keeps there on average in that layer: top-k with the threshold's
      count only where the loss is measured (every other position keeps top-k's count);
    * ``"random"``: the control, each token as many neurons as the threshold keeps, chosen at random;
    * ``"scored_tau"``: the threshold rule with ``τ`` calibrated on the scored positions' entries only.

    Returns ``{"dense": loss, "by_share": {"0.7": {"loss": {rule: loss}, "kept": {rule: [mean per layer]},
    "fewest": [threshold's fewest kept per layer]}, ...}}``; ``seed`` seeds the random control of each share.
    """
    states = layer_states(model, data.ids, valid)
    d_ff, out = states[0].m.shape[-1], {}
    scored_at = torch.zeros(data.ids.shape, dtype=torch.bool)                 # (N, T): the scored positions
    scored_at[torch.arange(len(data)), data.answer_pos] = True
    for share in shares:
        gen = torch.Generator().manual_seed(seed)
        taus = [calibrate_threshold(s.m, share) for s in states]
        scored_taus = [calibrate_threshold(s.m[scored_at[valid]], share) for s in states]
        k = round((1 - share) * d_ff)
        rules = {"threshold": [lambda x, m, t=t: m.abs() > t for t in taus],
                 "top_k": [lambda x, m: top_k_mask(m.abs(), k)] * len(states),
                 "random": [lambda x, m, t=t: random_like(m.abs() > t, gen) for t in taus],
                 "scored_tau": [lambda x, m, t=t: m.abs() > t for t in scored_taus]}
        scored = {"threshold": scored_kept(model, data, rules["threshold"])}
        matched = [round(c.double().mean().item()) for c in scored["threshold"][1]]
        rules["matched"] = [lambda x, m, n=n: torch.where(scored_at[..., None], top_k_mask(m.abs(), n),
                                                          top_k_mask(m.abs(), k)) for n in matched]
        for rule in ("top_k", "matched", "random", "scored_tau"):
            scored[rule] = scored_kept(model, data, rules[rule])
        out[f"{share:g}"] = {"loss": {rule: scored[rule][0] for rule in SKIP_RULES},
                             "kept": {rule: [c.double().mean().item() for c in scored[rule][1]] for rule in SKIP_RULES},
                             "fewest": [int(c.min()) for c in scored["threshold"][1]]}
    return {"dense": answer_quality(model, data)[1], "by_share": out}


# ---------------------------------------------------------------------------------------------- predicting
class ActivePredictor(nn.Module):
    """Deja Vu's neuron predictor: ``x (…, d_model) -> U (V x) + c (…, d_ff)``, one logit per neuron.

    ``V`` is ``(rank, d_model)`` and ``U`` ``(d_ff, rank)``: two linear maps, no non-linearity between them (as in
    Deja Vu's code, which has no bias; ``c``, one bias per neuron, lets a rank-1 predictor learn how often each
    neuron fires). A neuron is predicted active where its logit is ≥ 0.
    """

    def __init__(self, d_model: int, d_ff: int, rank: int) -> None:
        super().__init__()
        self.down = nn.Linear(d_model, validate.positive_int("rank", rank), bias=False)
        self.up = nn.Linear(rank, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Bool ``(…, d_ff)``: the neurons predicted active."""
        with torch.no_grad():
            return self(x) >= 0

    def weights(self) -> int:
        """Weights read per token: ``rank·(d_model + d_ff) + d_ff``."""
        return sum(p.numel() for p in self.parameters())


def train_predictor(x: torch.Tensor, active: torch.Tensor, rank: int, *, steps: int = 300, lr: float = 1e-2,
                    seed: int = 0) -> ActivePredictor:
    """Fit an ``ActivePredictor`` of ``rank`` to ``active (N, d_ff)`` (bool) from ``x (N, d_model)``.

    Full-batch AdamW (weight decay 0.01) on the weighted binary cross-entropy of Deja Vu's
    ``sparse_predictor/trainer_mlp.py``: with ``w`` the share of active entries plus 0.005, an active entry weighs
    1 and a silent one ``w`` (their ``y·(1 − w) + w``), so the rarer active entries are not drowned out.
    Deterministic for a seed on one machine.
    """
    validate.positive_int("steps", steps)
    target = active.float()
    w = target.mean() + 0.005
    weight = target * (1 - w) + w
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        predictor = ActivePredictor(x.shape[-1], active.shape[-1], rank)
    opt = torch.optim.AdamW(predictor.parameters(), lr=lr, weight_decay=0.01)
    for _ in range(steps):
        loss = F.binary_cross_entropy_with_logits(predictor(x), target, weight=weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return predictor.eval()


def recall(predicted: torch.Tensor, active: torch.Tensor) -> float:
    """Share of the active entries that were predicted, pooled over rows: ``Σ (pred ∧ active) / Σ active``
    (1.0 when nothing is active). Bool ``(N, d_ff)`` each."""
    total = int(active.sum())
    return 1.0 if total == 0 else int((predicted & active).sum()) / total


# ---------------------------------------------------------------------------------------------- batches and bytes
def batch_union(active: torch.Tensor, batch_size: int, n_batches: int = 200, seed: int = 0) -> float:
    """Mean share of neurons active for at least one of ``batch_size`` rows of ``active (N, d_ff)`` drawn at
    random (with replacement), over ``n_batches`` batches: what a decode step of that many tokens must read."""
    validate.positive_int("batch_size", batch_size)
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, active.shape[0], (n_batches, batch_size), generator=gen)
    return active[rows].any(dim=1).double().mean().item()


def sentence_union(active: torch.Tensor, valid: torch.Tensor, *, draws: int = 20, seed: int = 0) -> tuple[float, float]:
    """The union over one sentence's consecutive tokens, against as many tokens drawn at random.

    ``active (P, d_ff)`` bool holds the rows of ``valid (N, T)``'s positions in order (as ``layer_states`` gives
    them). Returns the mean over sentences of the share of neurons fired by at least one of the sentence's tokens,
    and the same for as many positions drawn at random (with replacement) from all ``P``, averaged over ``draws``.
    """
    validate.positive_int("draws", draws)
    full = torch.zeros(*valid.shape, active.shape[-1], dtype=torch.bool)
    full[valid] = active
    own = full.any(dim=1).double().mean().item()
    first = torch.arange(valid.shape[1]) < valid.sum(dim=1, keepdim=True)          # (N, T): a sentence's count
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, active.shape[0], (draws, *valid.shape), generator=gen)
    return own, (active[rows] & first[..., None]).any(dim=2).double().mean().item()


def position_matched_union(active: torch.Tensor, valid: torch.Tensor, *, draws: int = 20, seed: int = 0) -> float:
    """``sentence_union``'s control without the template: for each sentence and each of its positions ``t``, the
    token at ``t`` of a sentence drawn at random (among those reaching ``t``); the mean share of neurons fired by
    at least one of them, over sentences and ``draws``. Same ``active (P, d_ff)`` and ``valid (N, T)``."""
    validate.positive_int("draws", draws)
    full = torch.zeros(*valid.shape, active.shape[-1], dtype=torch.bool)
    full[valid] = active
    gen = torch.Generator().manual_seed(seed)
    picked = torch.zeros(draws, *full.shape, dtype=torch.bool)                     # (draws, N, T, d_ff)
    for t in range(valid.shape[1]):
        reach = valid[:, t].nonzero().flatten()
        if len(reach):
            rows = reach[torch.randint(0, len(reach), (draws, valid.shape[0]), generator=gen)]
            picked[:, :, t] = full[rows, t] & valid[:, t, None]
    return picked.any(dim=2).double().mean().item()


def expected_union(rates: torch.Tensor, batch_size: int) -> float:
    """Expected share of neurons active for at least one of ``batch_size`` independent tokens, neuron i firing
    with probability ``rates[i]``: the mean of ``1 − (1 − p_i)^B``. Equal rates ``p`` give notebook 07's
    ``1 − (1 − k/E)^B`` with ``k/E = p``; uneven rates give less (the function is concave in ``p``)."""
    validate.positive_int("batch_size", batch_size)
    return (1 - (1 - rates.double()) ** batch_size).mean().item()


def ffn_weights_read(d_model: int, d_ff: int, read_share: float, *, how: str, gated: bool = False,
                     predictor_weights: int = 0) -> float:
    """Weights one decode step reads from one FFN (multiply by bytes per weight), biases left out.

    ``how``: ``"dense"`` every weight, ``(3 if gated else 2)·d·d_ff``; ``"exact"`` all of ``W1`` (to find the
    silent neurons) plus the share ``read_share`` of ``W2``'s columns (and ``W3``'s rows); ``"predicted"`` the
    predictor plus ``read_share`` of every matrix.
    """
    validate.one_of("how", how, ["dense", "exact", "predicted"])
    validate.probability("read_share", read_share, allow_one=True)
    per_matrix = d_model * d_ff
    n = 3 if gated else 2
    if how == "dense":
        return float(n * per_matrix)
    if how == "exact":
        return per_matrix + read_share * (n - 1) * per_matrix
    return predictor_weights + read_share * n * per_matrix


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``header`` as aligned text columns: the first left-aligned, the others right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     .rstrip() for row in cells)


# ---------------------------------------------------------------------------------------------- the results file
CHECKPOINTS = (0, 1, 2, 5, 10, 20, 40, 80, 150)
LR_GRID = (5e-3, 1e-2, 2e-2)
RELUFY_STEPS, RELUFY_LR_GRID = 30, (1e-3, 3e-3, 1e-2)
RANKS = (1, 2, 4, 8, 16, 32)
SWEEP_SHARES = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
PARTS = ("training", "thresholds", "relufication", "predictor")


def fact_model_with(data, activation: str, seed: int) -> nn.Module:
    """Notebook 03's fact model (``FACT_MODEL``'s sizes) with another FFN activation from ``TRAINED_ACTIVATIONS``,
    as ``torch.manual_seed(seed)`` initialises it; ``"gelu"`` is exactly ``untrained_fact_model(data, seed)``."""
    from helpers.fact_model import fact_model_config
    from helpers.ffn import matched_gated_width
    from helpers.transformer import TinyGPT

    phi, gated = TRAINED_ACTIVATIONS[validate.one_of("activation", activation, TRAINED_ACTIVATIONS)]
    config = fact_model_config(data)
    d_ff = matched_gated_width(config.d_model) if gated else 4 * config.d_model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(config, ffn_factory=lambda layer: FFN(config.d_model, d_ff, phi, gated=gated))
    return model.eval()


def country_split(data, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``data`` whose country is in a random half of the countries (to fit a predictor on), and the rest."""
    countries = sorted({f.subject for f in data.facts})
    order = torch.randperm(len(countries), generator=torch.Generator().manual_seed(seed)).tolist()
    fit = {countries[i] for i in order[: len(countries) // 2]}
    rows = [i for i, f in enumerate(data.facts) if f.subject in fit]
    return torch.tensor(rows), torch.tensor([i for i in range(len(data)) if i not in set(rows)])


def country_positions(data) -> torch.Tensor:
    """Bool ``(N, T)``: each fact's positions from its country on. The positions before it hold a template prefix
    (``<bos> the capital of``) whose inputs are the same for every country of the causal model."""
    start = torch.tensor([prompt_words(f).index(f.subject) for f in data.facts])
    return torch.arange(data.ids.shape[1]) >= start[:, None]


def rows_mask(valid: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``valid (N, T)`` with every row outside ``rows`` switched off."""
    out = torch.zeros_like(valid)
    out[rows] = valid[rows]
    return out


def _negative_share(model, data, valid) -> list[float]:
    return [(s.pre <= 0).double().mean().item() for s in layer_states(model, data.ids, valid)]


def _training_runs(data, valid, seeds, steps, lr_grid, progress) -> dict:
    from helpers.transformer import train_lm

    out = {}
    checkpoints = [c for c in CHECKPOINTS if c <= steps]
    for activation in progress_bar(list(TRAINED_ACTIVATIONS), desc="activations", disable=not progress):
        def run(seed, lr):
            model, silent = fact_model_with(data, activation, seed), {}
            silent[0] = _negative_share(model, data, valid)

            def on_step(step, m, loss):
                if step + 1 in checkpoints:
                    silent[step + 1] = _negative_share(m, data, valid)
            losses = train_lm(model, data.ids, data.targets, steps=steps, lr=lr, seed=seed, progress=False,
                              on_step=on_step)
            acc, loss = answer_quality(model, data)
            dead = [(s.pre <= 0).all(dim=0).double().mean().item() for s in layer_states(model, data.ids, valid)]
            return {"seed": seed, "silent": [silent[c] for c in checkpoints], "dead": dead, "loss_last": losses[-1],
                    "loss_at_80pct": losses[int(0.8 * steps) - 1], "answer_accuracy": acc, "answer_loss": loss}
        sweep = {lr: run(seeds[0], lr) for lr in lr_grid}
        best = min(sweep, key=lambda lr: sweep[lr]["loss_last"])
        runs = [sweep[best]] + [run(seed, best) for seed in seeds[1:]]
        out[activation] = {"lr": best, "lr_sweep": {f"{lr:g}": r for lr, r in sweep.items()}, "runs": runs}
    return {"checkpoints": checkpoints, "steps": steps, "by_activation": out}


def relufied(data, seed: int, activation: str = "relu", *, steps: int = RELUFY_STEPS, lr: float = 3e-3,
             progress: bool = False):
    """The shipped GELU fact model of ``seed`` with its FFNs switched to ``activation`` and trained ``steps`` more
    full-batch AdamW steps at ``lr`` (``activation="gelu"``: the same extra training without the swap, the
    control). Returns the model (eval mode) and the loss of every step."""
    from helpers.fact_model import load_fact_model
    from helpers.transformer import train_lm

    model = with_activation(load_fact_model(data, seed)[0], activation).train()
    losses = train_lm(model, data.ids, data.targets, steps=steps, lr=lr, seed=seed, progress=progress,
                      desc=f"{activation}, {steps} steps")
    return model.eval(), losses


def _relufication_runs(data, valid, seeds, steps, progress) -> dict:
    from helpers.fact_model import load_fact_model

    def arm(model, losses=None):
        acc, loss = answer_quality(model, data)
        out = {"answer_accuracy": acc, "answer_loss": loss, "silent": _negative_share(model, data, valid)}
        if losses is not None:
            out.update(loss_first=losses[0], loss_last=losses[-1], loss_at_80pct=losses[int(0.8 * steps) - 1])
        return out
    sweep = {act: {lr: relufied(data, seeds[0], act, steps=steps, lr=lr)[1][-1] for lr in RELUFY_LR_GRID}
             for act in ("relu", "gelu")}
    lrs = {act: min(s, key=s.get) for act, s in sweep.items()}
    runs = []
    for seed in progress_bar(seeds, desc="ReLUfication", disable=not progress):
        shipped = load_fact_model(data, seed)[0]
        relu_model, losses = relufied(data, seed, "relu", steps=steps, lr=lrs["relu"])
        tuned = arm(relu_model, losses)
        states = layer_states(relu_model, data.ids, valid)
        tuned["sentence_union"] = [sentence_union(s.m > 0, valid) for s in states]
        tuned["position_matched_union"] = [position_matched_union(s.m > 0, valid) for s in states]
        runs.append({"seed": seed, "gelu": arm(shipped), "relu_swapped": arm(with_activation(shipped, "relu")),
                     "relu_tuned": tuned, "gelu_tuned": arm(*relufied(data, seed, "gelu", steps=steps, lr=lrs["gelu"]))})
    return {"seeds": list(seeds), "steps": steps, "lr": lrs,
            "lr_sweep": {a: {f"{lr:g}": v for lr, v in s.items()} for a, s in sweep.items()}, "runs": runs}


def _threshold_runs(data, valid, seeds, shares, progress) -> dict:
    from helpers.fact_model import load_fact_model

    runs = [{"seed": seed, **threshold_sweep(load_fact_model(data, seed)[0], data, valid, shares, seed=seed)}
            for seed in progress_bar(seeds, desc="thresholds", disable=not progress)]
    return {"seeds": list(seeds), "shares": list(shares), "runs": runs}


def _predictor_runs(data, valid, seeds, relu_lr, quick, progress) -> dict:
    ranks, steps = ((1, 8), 20) if quick else (RANKS, 300)
    runs = []
    for seed in progress_bar(seeds, desc="predictors", disable=not progress):
        model, _ = relufied(data, seed, steps=5 if quick else RELUFY_STEPS, lr=relu_lr)
        by_rank = {str(r): predictor_scores(model, data, valid, r, steps=steps) for r in ranks}
        runs.append({"seed": seed, "by_rank": by_rank,
                     "rank8_3x_steps": predictor_scores(model, data, valid, 8, steps=3 * steps)})
    return {"seeds": list(seeds), "ranks": list(ranks), "steps": steps, "runs": runs}


def predictor_scores(model, data, valid, rank: int, *, steps: int = 300, seed: int = 0) -> dict:
    """Fit one ``ActivePredictor`` per layer of a ReLU ``model`` on the facts of half the countries and score it
    on the other half: recall, predicted and active share per layer at the held-out facts' positions from the
    country on (``"recall_template"``: at their template prefixes, inputs the predictor was fitted on), and the
    answers with only predicted neurons computed, against the same number of random neurons per token."""
    fit_rows, test_rows = country_split(data)
    fit = layer_states(model, data.ids, rows_mask(valid, fit_rows))
    held = rows_mask(valid, test_rows)
    test = layer_states(model, data.ids, held & country_positions(data))
    template = layer_states(model, data.ids, held & ~country_positions(data))
    predictors = [train_predictor(s.x, s.m > 0, rank, steps=steps, seed=seed) for s in fit]
    gen = torch.Generator().manual_seed(seed)
    with skipping(model, [lambda x, m, p=p: p.predict(x) for p in predictors]):
        acc, loss = answer_quality(model, data, test_rows)
    with skipping(model, [lambda x, m, p=p: random_like(p.predict(x), gen) for p in predictors]):
        random_acc, random_loss = answer_quality(model, data, test_rows)
    return {"recall": [recall(p.predict(s.x), s.m > 0) for p, s in zip(predictors, test)],
            "recall_template": [recall(p.predict(s.x), s.m > 0) for p, s in zip(predictors, template)],
            "predicted_share": [p.predict(s.x).double().mean().item() for p, s in zip(predictors, test)],
            "active_share": [(s.m > 0).double().mean().item() for s in test],
            "answer_accuracy": acc, "answer_loss": loss, "random_accuracy": random_acc, "random_loss": random_loss}


def make_results(seeds: Sequence[int] | None = None, *, parts: Sequence[str] = PARTS, quick: bool = False,
                 path: str | Path = RESULTS_PATH, progress: bool = True) -> dict:
    """Run the multi-seed experiments of notebook 10 named in ``parts`` and write them to ``path`` (JSON),
    keeping the other parts of the file already there. ``seeds``: default 0-4 for ``"training"``, the ten shipped
    fact models 0-9 for the others. ``quick``: a few steps, shares and ranks only (tests)."""
    from helpers.facts import load_facts, make_dataset
    from helpers.memory import prefix_mask

    for part in parts:
        validate.one_of("parts", part, PARTS)
    torch.set_num_threads(1)
    path = Path(path)
    data = make_dataset(load_facts())
    valid = prefix_mask(data.ids, data.vocab.pad_id)
    results = load_results(path) if path.is_file() else {}
    if "seeds" in results:                                   # files made before the parts had their own seeds
        results.setdefault("training", {})["seeds"] = results.pop("seeds")
    results.update(made_with=f"torch {torch.__version__}, {platform.machine()}, "
                             f"CPU capability {torch.backends.cpu.get_cpu_capability()}",
                   positions="every position of the 608 fact sentences that has a next token")
    chosen = {part: list(seeds if seeds is not None else range(5 if part == "training" else 10)) for part in parts}
    if "training" in parts:
        results["training"] = _training_runs(data, valid, chosen["training"], 10 if quick else 150,
                                             LR_GRID[:1] if quick else LR_GRID, progress)
        results["training"]["seeds"] = chosen["training"]
    if "thresholds" in parts:
        results["thresholds"] = _threshold_runs(data, valid, chosen["thresholds"],
                                                (0.5, 0.9) if quick else SWEEP_SHARES, progress)
    if "relufication" in parts:
        results["relufication"] = _relufication_runs(data, valid, chosen["relufication"],
                                                     5 if quick else RELUFY_STEPS, progress)
    if "predictor" in parts:
        relu_lr = results.get("relufication", {}).get("lr", {}).get("relu", 3e-3)
        results["predictor"] = _predictor_runs(data, valid, chosen["predictor"], relu_lr, quick, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """The results file (``make_results``); ``FileNotFoundError`` names the command that makes it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r}: no results there; make them with "
                                f"python -m helpers.activation_sparsity --make-results")
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> dict:
    """``python -m helpers.activation_sparsity --make-results [--only PART ...] [--seeds ...] [--quick] [--out PATH]``."""
    parser = argparse.ArgumentParser(description="Write notebook 10's multi-seed results.")
    parser.add_argument("--make-results", action="store_true", required=True)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS),
                        help="the parts to (re)run; the others are kept from the file")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="default: 0-4 for training, 0-9 (the shipped fact models) for the other parts")
    parser.add_argument("--quick", action="store_true", help="a few steps only: a small file for tests")
    parser.add_argument("--out", default=str(RESULTS_PATH))
    args = parser.parse_args(argv)
    return make_results(args.seeds, parts=args.only, quick=args.quick, path=args.out)


if __name__ == "__main__":
    main()
