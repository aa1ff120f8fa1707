r"""A sparse dictionary for an FFN: a TopK transcoder, its training, and how to judge it.

The idea. A layer may represent more *features* than it has neurons, as directions in superposition
(``helpers.superposition``); then no single neuron need mean one thing. A sparse dictionary looks for those
directions: many more units than the layer has dimensions, of which only a few are active for any input.
A **transcoder** (Dunefsky et al. 2024) is such a dictionary trained to *replace* an FFN: from the FFN's input
``x`` it predicts the FFN's output ``y``,

    f = TopK_k(W_enc x + b_enc)      (F,)   the feature activations (codes): at most k non-zero
    ŷ = W_dec f + b_dec              (d_out,)

with ``W_enc`` ``(F, d_in)`` and ``W_dec`` ``(d_out, F)`` in ``nn.Linear``'s layout. It has the FFN's own
key-value form: row i of ``W_enc`` is feature i's **key**, column i of ``W_dec`` its **value**, and
``ŷ = Σ_i f_i · W_dec[:, i] + b_dec``, but with F features of which k fire instead of d_ff neurons that all
fire. With the target equal to the input it is a sparse autoencoder (Bricken et al. 2023, Cunningham et al.
2023). ``TopK`` keeps the k largest pre-activations of each row (ReLU'd) and zeroes the rest (Gao et al. 2024),
so the sparsity L0 is fixed by k instead of tuned through an L1 penalty; among equal values at the k-th place
the lower index is kept (``torch.topk`` promises no order among ties).

How a dictionary is judged here:

* ``fvu``: fraction of variance unexplained, ``Σ‖y − ŷ‖² / Σ‖y − ȳ‖²`` (0 perfect, 1 = no better than the
  mean output); ``l0``: mean number of active features per input; ``firing_counts``: how often each feature
  fires (0 = a **dead** feature);
* ``replaced_ffn`` + ``answer_scores``: what the model does with the dictionary spliced in place of the FFN;
* ``top_label_share`` / ``tracking_rates``: how cleanly a unit's strongest inputs share one label.

A feature's value (a column of ``W_dec``) is read in the vocabulary as notebook 03 reads a neuron's:
``helpers.memory.project_to_vocab(model, values, biases=False)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validate
from helpers.memory import find_ffns, logits_of, prefix_mask, token_positions
from helpers.progress import progress as progress_bar

__all__ = ["topk_codes", "TopKDictionary", "random_dictionary", "train_dictionaries", "fvu", "l0",
           "firing_counts", "held_out_split", "ffn_io", "distinct_prefixes", "fact_labels", "Prefixes", "fact_prefixes", "replaced_ffn", "answer_scores",
           "top_label_share", "firing_label_share", "strongest_label_share", "level_table", "without_features", "tracking_rates"]


# ---------------------------------------------------------------------------------------------
# The dictionary
# ---------------------------------------------------------------------------------------------


def topk_codes(pre: torch.Tensor, k: int) -> torch.Tensor:
    """TopK activation: ``(..., F) -> (..., F)``, ReLU of the k largest entries of each row, 0 elsewhere.

    Among entries equal to the k-th largest value, the lower indices are kept (exactly k entries are kept;
    a kept entry ≤ 0 becomes 0). Differentiable: the gradient flows to the kept, positive entries.
    """
    validate.float_tensor("pre", pre)
    validate.int_in_range("k", k, 1, pre.shape[-1])
    kth = pre.topk(k, dim=-1).values[..., -1:]                        # (..., 1): the k-th largest value
    above = pre > kth
    tied = pre == kth
    room = k - above.sum(dim=-1, keepdim=True)                        # how many tied entries still fit
    keep = above | (tied & (tied.cumsum(dim=-1) <= room))
    return torch.where(keep, torch.relu(pre), torch.zeros((), dtype=pre.dtype))


class TopKDictionary(nn.Module):
    """A TopK transcoder (or autoencoder): ``x (..., d_in) -> ŷ (..., d_out)`` through ``F`` sparse features.

    Args:
        W_enc: ``(F, d_in)``, row i = feature i's key. b_enc: ``(F,)``.
        W_dec: ``(d_out, F)``, column i = feature i's value. b_dec: ``(d_out,)``.
        k: features kept per input, ``1 <= k <= F``.

    ``forward`` returns ŷ only, so the module can stand in for an FFN; ``encode`` gives the codes.
    """

    def __init__(self, W_enc: torch.Tensor, b_enc: torch.Tensor, W_dec: torch.Tensor, b_dec: torch.Tensor,
                 k: int) -> None:
        super().__init__()
        validate.float_tensor("W_enc", W_enc, min_dims=2)
        n_features, d_in = W_enc.shape
        validate.float_tensor("W_dec", W_dec, min_dims=2)
        if W_dec.shape[1] != n_features or b_enc.shape != (n_features,) or b_dec.shape != (W_dec.shape[0],):
            raise ValueError(f"shapes must be W_enc (F, d_in), b_enc (F,), W_dec (d_out, F), b_dec (d_out,); got "
                             f"{tuple(W_enc.shape)}, {tuple(b_enc.shape)}, {tuple(W_dec.shape)}, {tuple(b_dec.shape)}")
        self.k = validate.int_in_range("k", k, 1, n_features)
        self.W_enc = nn.Parameter(W_enc.detach().clone())
        self.b_enc = nn.Parameter(b_enc.detach().clone())
        self.W_dec = nn.Parameter(W_dec.detach().clone())
        self.b_dec = nn.Parameter(b_dec.detach().clone())

    @property
    def n_features(self) -> int:
        return self.W_enc.shape[0]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The codes ``f = TopK(x W_encᵀ + b_enc)``: ``(..., d_in) -> (..., F)``."""
        return topk_codes(x @ self.W_enc.T + self.b_enc, self.k)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """``ŷ = f W_decᵀ + b_dec``: ``(..., F) -> (..., d_out)``."""
        return codes @ self.W_dec.T + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))


def _check_pairs(x: torch.Tensor, y: torch.Tensor) -> None:
    validate.float_tensor("x", x, min_dims=2)
    validate.float_tensor("y", y, min_dims=2)
    if x.dim() != 2 or y.dim() != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError(f"x and y must be (N, d_in) and (N, d_out) with the same N >= 2, got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")


def _random_start(x: torch.Tensor, y: torch.Tensor, n_features: int, seed: int) -> list[torch.Tensor]:
    """Gaussian keys of unit norm, centred on the mean input; unit-norm random values; b_dec = mean output."""
    gen = torch.Generator().manual_seed(seed)
    W_enc = torch.randn(n_features, x.shape[1], generator=gen).to(x.dtype)
    W_enc = W_enc / W_enc.norm(dim=1, keepdim=True)
    W_dec = torch.randn(y.shape[1], n_features, generator=gen).to(y.dtype)
    W_dec = W_dec / W_dec.norm(dim=0, keepdim=True)
    return [W_enc, -(W_enc @ x.mean(0)), W_dec, y.mean(0).clone()]


def _data_start(x: torch.Tensor, y: torch.Tensor, n_features: int, seed: int) -> list[torch.Tensor]:
    """Feature i starts as one remembered example r: key x_r/‖x_r‖, value y_r/‖y_r‖, both biases 0."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, x.shape[0], (n_features,), generator=gen)
    W_enc = x[rows] / x[rows].norm(dim=1, keepdim=True).clamp_min(1e-12)
    W_dec = (y[rows] / y[rows].norm(dim=1, keepdim=True).clamp_min(1e-12)).T.contiguous()
    return [W_enc, torch.zeros(n_features), W_dec, torch.zeros(y.shape[1])]


def _tied_start(x: torch.Tensor, y: torch.Tensor, n_features: int, seed: int) -> list[torch.Tensor]:
    """An autoencoder's start against dead features (Gao et al. 2024): ``_random_start``'s unit-norm random values,
    and each key the transpose of its value (``W_enc = W_decᵀ``), centred on the mean input."""
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"the tied start needs an autoencoder (d_in == d_out), got {x.shape[1]} and {y.shape[1]}")
    W_dec = _random_start(x, y, n_features, seed)[2]
    W_enc = W_dec.T.contiguous().to(x.dtype)
    return [W_enc, -(W_enc @ x.mean(0)), W_dec, y.mean(0).clone()]


STARTS = {"data": _data_start, "random": _random_start, "tied": _tied_start}

#: ``train_dictionaries``' hooks (see its docstring): ``extra_loss(pre, codes, y_hat, y_batch, W_dec, variance)``
#: returns an ``(S,)`` term to add to the loss (or None); ``before_step(t, params, opt)`` runs before step t.
ExtraLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                     torch.Tensor | None]
BeforeStep = Callable[[int, list[torch.Tensor], torch.optim.Optimizer], None]


def random_dictionary(x: torch.Tensor, y: torch.Tensor, n_features: int, k: int, seed: int = 0) -> TopKDictionary:
    """The control: a dictionary of random directions, never trained (``train_dictionaries``'s ``"random"`` start).

    Keys are random unit vectors (centred on the mean of ``x``), values random unit vectors, ``b_dec`` the
    mean of ``y``. x: ``(N, d_in)``, y: ``(N, d_out)``; float64 data give a float64 dictionary, else float32.
    """
    _check_pairs(x, y)
    validate.positive_int("n_features", n_features)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return TopKDictionary(*_random_start(x.to(dtype), y.to(dtype), n_features,
                                         validate.non_negative_int("seed", seed)), k)


def _per_seed(name: str, t: torch.Tensor, n_seeds: int, dtype: torch.dtype) -> torch.Tensor:
    """``(S, N, d)``: a shared ``(N, d)`` tensor repeated, or one ``(S, N, d)`` tensor with a slice per seed."""
    validate.float_tensor(name, t, min_dims=2)
    if t.dim() == 2:
        return t.detach().to(dtype).expand(n_seeds, -1, -1)
    if t.dim() != 3 or t.shape[0] != n_seeds:
        raise ValueError(f"{name} must be (N, d) (shared) or ({n_seeds}, N, d) (one per seed), got {tuple(t.shape)}")
    return t.detach().to(dtype)


def train_dictionaries(x: torch.Tensor, y: torch.Tensor, n_features: int, k: int | Sequence[int],
                       seeds: Sequence[int], *, steps: int = 3000, batch_size: int = 64, lr: float = 3e-2,
                       start: str | Sequence[str] = "data", dtype: torch.dtype = torch.float32,
                       progress: bool = True, desc: str = "dictionaries", extra_loss: ExtraLoss | None = None,
                       before_step: BeforeStep | None = None) -> list[TopKDictionary]:
    """Train one TopK dictionary per seed to map ``x`` to ``y``; return them in seed order.

    ``x``: ``(N, d_in)`` shared by every seed, or ``(S, N, d_in)`` with one data set per seed (so a transcoder
    and an autoencoder, or several toy models, train side by side); ``y`` likewise ``(N, d_out)`` or
    ``(S, N, d_out)``. ``k``: features kept per input, one int for all, or one per seed.

    The recipe: each seed fixes its start and its minibatches (``batch_size`` rows drawn with replacement each
    step), so a dictionary comes out the same (up to rounding) whichever other seeds train beside it. ``start="data"`` (the
    default) starts feature i as one remembered example (key ``x_r/‖x_r‖``, value ``y_r/‖y_r‖``), which leaves
    far fewer features dead than ``start="random"`` (one start for all seeds, or one per seed). Loss: ``Σ‖y − ŷ‖²`` over the batch divided by the batch
    size times the data's variance ``Σ‖y − ȳ‖²/N`` (the batch's fraction of variance unexplained). Adam with
    a learning rate that falls linearly from ``lr`` to 0 over the ``steps``; after every step each value
    (column of ``W_dec``) is scaled back to unit norm, so a code is the size of its feature's contribution.
    All seeds train as one batched computation, in ``dtype`` (float64 for small problems whose result should
    not depend on the CPU's float32 kernels). Deterministic on a given machine.

    Two optional hooks let a variant of the recipe reuse this loop (``helpers.dead_features.train_auxk`` adds
    the AuxK term and resampling through them); without them the loop is the recipe above, unchanged:

    * ``extra_loss(pre, codes, y_hat, y_batch, W_dec, variance)``, called every step once the loss is computed:
      ``pre`` and ``codes`` ``(S, B, F)`` are the batch's pre-activations and TopK codes, ``y_hat`` and
      ``y_batch`` ``(S, B, d_out)`` its prediction and target, ``W_dec`` ``(S, d_out, F)`` the values,
      ``variance`` ``(S,)`` each seed's data variance (the loss's divisor). It returns an ``(S,)`` term that is
      added to each seed's loss, or ``None`` to add nothing at this step.
    * ``before_step(t, params, opt)``, called before step ``t`` (0 to ``steps - 1``) draws its batch:
      ``params`` is the list ``[W_enc (S, F, d_in), b_enc (S, F), W_dec (S, d_out, F), b_dec (S, d_out)]`` being
      trained and ``opt`` their Adam optimiser; it may change both in place, wrapping its own edits in
      ``torch.no_grad()`` (the parameters require grad).
    """
    validate.positive_int("n_features", n_features)
    validate.positive_int("steps", steps)
    validate.positive_int("batch_size", batch_size)
    validate.positive_float("lr", lr)
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    starts = [start] * len(seeds) if isinstance(start, str) else list(start)
    if len(starts) != len(seeds):
        raise ValueError(f"start must be a str or have one entry per seed ({len(seeds)}), got {len(starts)}")
    starts = [validate.one_of("start", s, STARTS) for s in starts]
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    xs, ys = _per_seed("x", x, len(seeds), dtype), _per_seed("y", y, len(seeds), dtype)
    if xs.shape[1] != ys.shape[1] or xs.shape[1] < 2:
        raise ValueError(f"x and y must have the same number N >= 2 of rows, got {xs.shape[1]} and {ys.shape[1]}")
    ks = [k] * len(seeds) if isinstance(k, int) else list(k)
    if len(ks) != len(seeds):
        raise ValueError(f"k must be an int or have one entry per seed ({len(seeds)}), got {len(ks)}")
    ks = [validate.int_in_range("k", v, 1, n_features) for v in ks]
    with torch.enable_grad():                                # trains even where the caller turned autograd off
        params = _train(xs, ys, n_features, ks, seeds, steps, batch_size, lr, starts, progress, desc,
                        extra_loss, before_step)
    W_enc, b_enc, W_dec, b_dec = params
    return [TopKDictionary(W_enc[i], b_enc[i], W_dec[i], b_dec[i], ks[i]).eval() for i in range(len(seeds))]


def _train(xs, ys, n_features, ks, seeds, steps, batch_size, lr, starts, progress, desc, extra_loss=None,
           before_step=None) -> list[torch.Tensor]:
    """``train_dictionaries``' loop: the stacked parameters ``(W_enc, b_enc, W_dec, b_dec)`` after training."""
    rank_ok = torch.arange(max(ks)) < torch.tensor(ks)[:, None, None]                  # (S, 1, k_max)
    first = [[t.to(xs.dtype) for t in STARTS[how](xs[i], ys[i], n_features, s)]
             for i, (how, s) in enumerate(zip(starts, seeds))]
    params = [torch.stack(p).requires_grad_() for p in zip(*first)]
    W_enc, b_enc, W_dec, b_dec = params                      # (S, F, d_in), (S, F), (S, d_out, F), (S, d_out)
    gens = [torch.Generator().manual_seed(10_000 + s) for s in seeds]
    variance = ((ys - ys.mean(1, keepdim=True)) ** 2).sum(-1).mean(-1)                     # (S,)
    which = torch.arange(len(seeds))[:, None]
    opt = torch.optim.Adam(params, lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / steps)
    for t in progress_bar(range(steps), desc=desc, disable=not progress):
        if before_step is not None:
            before_step(t, params, opt)
        rows = torch.stack([torch.randint(0, xs.shape[1], (batch_size,), generator=g) for g in gens])   # (S, B)
        pre = torch.baddbmm(b_enc[:, None, :], xs[which, rows], W_enc.transpose(1, 2))                 # (S, B, F)
        top = pre.topk(max(ks), dim=-1)     # exact ties have probability 0 here, so no tie rule is needed
        codes = torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values) * rank_ok)
        y_hat = torch.baddbmm(b_dec[:, None, :], codes, W_dec.transpose(1, 2))                     # (S, B, d_out)
        y_batch = ys[which, rows]                                                                 # (S, B, d_out)
        loss = ((y_hat - y_batch) ** 2).sum(-1).mean(-1) / variance                                # (S,)
        if extra_loss is not None:
            extra = extra_loss(pre, codes, y_hat, y_batch, W_dec, variance)                        # (S,) or None
            if extra is not None:
                if extra.shape != loss.shape:
                    raise ValueError(f"extra_loss must return one value per seed, shape {tuple(loss.shape)}, "
                                     f"got {tuple(extra.shape)}")
                loss = loss + extra
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
        schedule.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return [p.detach() for p in params]


def held_out_split(n: int, held_out: float = 0.2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random split of ``n`` rows: ``(train, test)`` index tensors, ``test`` a ``held_out`` share."""
    validate.int_in_range("n", n, 2, 10**9)
    validate.probability("held_out", held_out)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(validate.non_negative_int("seed", seed)))
    n_test = min(n - 1, max(1, round(held_out * n)))
    return order[n_test:].sort().values, order[:n_test].sort().values


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def fvu(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    """Fraction of variance unexplained, ``Σ‖y − ŷ‖² / Σ‖y − ȳ‖²`` (ȳ the mean row), computed in float64.

    y, y_hat: ``(N, d)``, N >= 2, y not constant.
    """
    _check_pairs(y, y_hat)
    y, y_hat = y.double(), y_hat.double()
    return float(((y - y_hat) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())


def l0(codes: torch.Tensor) -> float:
    """Mean number of non-zero entries per row of ``codes (..., F)``."""
    validate.float_tensor("codes", codes)
    return float((codes != 0).sum(-1).double().mean())


def firing_counts(codes: torch.Tensor) -> torch.Tensor:
    """``(F,)`` long: on how many rows of ``codes (N, F)`` each feature is non-zero (0 = dead)."""
    validate.float_tensor("codes", codes, min_dims=2)
    return (codes != 0).reshape(-1, codes.shape[-1]).sum(0)


# ---------------------------------------------------------------------------------------------
# The fact model: its FFNs' inputs and outputs, its prefixes and their labels, splicing
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def ffn_io(model: nn.Module, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Every layer's FFN input and output on ``ids (N, T)``: two lists of ``(N, T, d_model)`` tensors.

    The input is what the FFN module receives (after the block's LayerNorm); hooks on ``find_ffns``'s modules.
    """
    memories = find_ffns(model)
    inputs: list[torch.Tensor | None] = [None] * memories.n_layers
    outputs: list[torch.Tensor | None] = [None] * memories.n_layers

    def make_hook(i: int):
        def hook(module, args, output):
            inputs[i], outputs[i] = args[0].detach(), output.detach()
        return hook

    handles = [layer.module.register_forward_hook(make_hook(layer.index)) for layer in memories.layers]
    try:
        was_training = model.training
        model.eval()
        logits_of(model, ids)
        model.train(was_training)
    finally:
        for handle in handles:
            handle.remove()
    return list(inputs), list(outputs)


def distinct_prefixes(ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One ``(row, position)`` per distinct prefix ``ids[row, :position + 1]`` among the ``valid (N, T)`` ones.

    A causal model computes the same activations for the same prefix, so repeats ("the capital of" starts 152
    sentences) add copies, not information. Returns two ``(M,)`` long tensors, in row-major order (first seen).
    """
    if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != ids.shape:
        raise ValueError(f"valid must be a bool tensor of shape {tuple(ids.shape)}")
    seen: dict[tuple[int, ...], None] = {}
    rows, positions = [], []
    for r, t in valid.nonzero().tolist():
        key = tuple(ids[r, :t + 1].tolist())
        if key not in seen:
            seen[key] = None
            rows.append(r)
            positions.append(t)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(positions, dtype=torch.long)


def fact_labels(data, rows: torch.Tensor, positions: torch.Tensor) -> dict[str, list[str]]:
    """The course's labels of each prefix ``data.ids[row, :position + 1]`` of a ``FactDataset``.

    ``relation``, ``subject`` and ``answer`` are those of the row's fact; ``slot`` is what the prefix must be
    followed by: ``"answer"`` at the answer position, else the next (template) word, e.g. ``"is"``.
    Meaningful for prefixes that contain the subject.
    """
    labels: dict[str, list[str]] = {"relation": [], "subject": [], "answer": [], "slot": []}
    for r, t in zip(rows.tolist(), positions.tolist()):
        fact = data.facts[r]
        labels["relation"].append(fact.relation)
        labels["subject"].append(fact.subject)
        labels["answer"].append(fact.obj)
        labels["slot"].append("answer" if t == int(data.answer_pos[r]) else data.vocab.tokens[int(data.ids[r, t + 1])])
    return labels


@dataclass
class Prefixes:
    """The fact model's distinct prefixes (``distinct_prefixes``) and what is known about each.

    Attributes:
        rows, positions: ``(M,)`` long, prefix m is ``data.ids[rows[m], :positions[m] + 1]``.
        named: ``(M,)`` bool, the prefix contains its subject (the country), so its labels mean something.
        answer: ``(M,)`` bool, the prefix ends where the answer is due.
        labels: ``fact_labels`` of the named prefixes (relation, subject, answer, slot), in order.
    """

    rows: torch.Tensor
    positions: torch.Tensor
    named: torch.Tensor
    answer: torch.Tensor
    labels: dict[str, list[str]]


def fact_prefixes(data) -> Prefixes:
    """Every distinct prefix of a ``helpers.facts.FactDataset`` that has a next token, with its labels."""
    rows, positions = distinct_prefixes(data.ids, prefix_mask(data.ids, data.vocab.pad_id))
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    named = positions >= subject_pos[rows]
    answer = positions == data.answer_pos[rows]
    return Prefixes(rows, positions, named, answer, fact_labels(data, rows[named], positions[named]))


@contextmanager
def replaced_ffn(model: nn.Module, layer: int,
                 replacement: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Inside the ``with`` block, the FFN of ``layer`` outputs ``replacement(x)`` for its input ``x``.

    ``replacement`` maps ``(..., d_model) -> (..., d_model)``: a ``TopKDictionary`` (spliced in), or e.g.
    ``lambda x: torch.zeros_like(x)`` (FFN removed) or a constant mean output (mean-ablated); not the hooked
    FFN module itself (its hook would call itself), but a copy of it is fine.
    """
    module = find_ffns(model).layer(layer).module
    handle = module.register_forward_hook(lambda mod, args, output: replacement(args[0]).to(output.dtype))
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def answer_scores(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor,
                  answer_id: torch.Tensor) -> tuple[float, float]:
    """``(accuracy, loss)`` on the answers: the share of rows whose top prediction at ``answer_pos`` is
    ``answer_id``, and the mean cross-entropy −log p(answer) there. ids ``(N, T)``; the others ``(N,)``."""
    was_training = model.training
    model.eval()
    logits = logits_of(model, ids)[torch.arange(ids.shape[0]), answer_pos]          # (N, vocab)
    model.train(was_training)
    accuracy = (logits.argmax(-1) == answer_id).double().mean().item()
    loss = torch.nn.functional.cross_entropy(logits.double(), answer_id).item()
    return accuracy, loss


# ---------------------------------------------------------------------------------------------
# Reading units: how cleanly their strongest inputs share a label; what their values write
# ---------------------------------------------------------------------------------------------


def _top_rows(acts: torch.Tensor, q: int) -> torch.Tensor:
    """``(q, U)``: each column's q highest rows, ties broken by row order."""
    return acts.double().sort(dim=0, descending=True, stable=True).indices[:q]


def top_label_share(acts: torch.Tensor, labels: Sequence[object], q: int = 10, *,
                    _top: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """For every unit (column of ``acts (M, U)``): the share of its ``q`` highest inputs that carry its most
    common label among them, and on how many of the M inputs it is positive.

    ``labels``: one label per row. Ties in activation are broken by row order (stable sort); a unit positive
    on fewer than ``q`` inputs has zeros among its top q, so judge only units with ``n_positive >= q``.
    Returns ``(share (U,) float, n_positive (U,) long)``.
    """
    validate.float_tensor("acts", acts, min_dims=2)
    M = acts.shape[0]
    if len(labels) != M:
        raise ValueError(f"labels must have one entry per row of acts ({M}), got {len(labels)}")
    validate.int_in_range("q", q, 1, M)
    codes = {value: i for i, value in enumerate(dict.fromkeys(labels))}
    label_ids = torch.tensor([codes[value] for value in labels])
    top = _top_rows(acts, q) if _top is None else _top                               # (q, U)
    counts = torch.zeros(len(codes), acts.shape[1]).scatter_add_(0, label_ids[top], torch.ones(top.shape))
    return counts.max(0).values / q, (acts > 0).sum(0)


def firing_label_share(acts: torch.Tensor, labels: Sequence[object]) -> tuple[torch.Tensor, torch.Tensor]:
    """For every unit (column of ``acts (M, U)``): the share of *all* the inputs it is positive on that carry
    its most common label among them, and how many those are. The whole firing distribution, where
    ``top_label_share`` reads only the top. Returns ``(share (U,) float, n_positive (U,) long)`` (share 0 for a
    unit positive nowhere)."""
    validate.float_tensor("acts", acts, min_dims=2)
    if len(labels) != acts.shape[0]:
        raise ValueError(f"labels must have one entry per row of acts ({acts.shape[0]}), got {len(labels)}")
    codes = {value: i for i, value in enumerate(dict.fromkeys(labels))}
    onehot = torch.nn.functional.one_hot(torch.tensor([codes[v] for v in labels]), len(codes)).double()  # (M, L)
    counts = onehot.T @ (acts > 0).double()                                                          # (L, U)
    n = counts.sum(0)
    return counts.max(0).values / n.clamp_min(1), n.long()


def strongest_label_share(acts: torch.Tensor, labels: Sequence[object], above: float = 0.0) -> torch.Tensor:
    """For every unit (column of ``acts (M, U)``): the share of *all* the inputs it is positive on that carry the
    label of its *strongest* input, the label its top list suggests (``firing_label_share`` takes the most common
    label instead). ``above`` in [0, 1): count only inputs above that fraction of the unit's largest activation
    (0.5: its upper half, how a feature reads at high activation). Returns ``(U,)`` float64 (0 for a unit
    positive nowhere)."""
    above = validate.probability("above", above)
    validate.float_tensor("acts", acts, min_dims=2)
    if len(labels) != acts.shape[0]:
        raise ValueError(f"labels must have one entry per row of acts ({acts.shape[0]}), got {len(labels)}")
    codes = {value: i for i, value in enumerate(dict.fromkeys(labels))}
    code = torch.tensor([codes[v] for v in labels])                                                   # (M,)
    positive = (acts > 0) & (acts > above * acts.max(0).values)
    same = code[:, None] == code[acts.argmax(0)][None, :]                                            # (M, U)
    return (positive & same).sum(0).double() / positive.sum(0).clamp_min(1).double()


def level_table(acts: torch.Tensor, labels: Sequence[object], edges: Sequence[float], top: int = 3) -> str:
    """One unit read by activation level: for each interval ``(edges[i], edges[i+1]]`` of ``acts (M,)``, how many
    inputs fall in it and their ``top`` most common labels (``labels``: one per input). Printable lines."""
    validate.float_tensor("acts", acts, min_dims=1)
    if len(labels) != len(acts):
        raise ValueError(f"labels must have one entry per entry of acts ({len(acts)}), got {len(labels)}")
    lines = ["activation     inputs   most common labels"]
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = ((acts > lo) & (acts <= hi)).nonzero()[:, 0].tolist()
        counts = Counter(labels[j] for j in inside).most_common(top)
        lines.append(f"  ({lo:g}, {hi:g}]".ljust(15) + f"{len(inside):6d}   "
                     + ", ".join(f"{label} {n}" for label, n in counts))
    return "\n".join(lines)


def without_features(dictionary: TopKDictionary, features: Sequence[int]) -> TopKDictionary:
    """A copy of ``dictionary`` in which the listed features write nothing (their values set to 0): splice it
    in to ablate those features and keep the rest."""
    out = TopKDictionary(dictionary.W_enc, dictionary.b_enc, dictionary.W_dec, dictionary.b_dec, dictionary.k).eval()
    for i in features:
        validate.int_in_range("feature", i, 0, dictionary.n_features - 1)
    with torch.no_grad():
        out.W_dec[:, list(features)] = 0.0
    return out


def tracking_rates(acts: torch.Tensor, labels: Mapping[str, Sequence[object]], q: int = 10,
                   threshold: float = 0.8) -> tuple[dict[str, float], int]:
    """For each kind of label: the share of units whose top ``q`` inputs share one label at least ``threshold``
    of the time, among the units positive on at least ``q`` inputs; and how many units were judged.

    ``acts (M, U)``; ``labels``: name -> one label per row (e.g. ``fact_labels``). Notebook 03's test on trigger
    lists (at least 8 of the top 10 share a label) with prefixes, not sentences, as the inputs.
    """
    validate.float_tensor("acts", acts, min_dims=2)
    validate.int_in_range("q", q, 1, acts.shape[0])
    top = _top_rows(acts, q)
    judged = (acts > 0).sum(0) >= q
    rates = {}
    for name, values in labels.items():
        share, _ = top_label_share(acts, values, q, _top=top)
        rates[name] = (float(((share >= threshold - 1e-9) & judged).sum() / judged.sum()) if judged.any()
                       else float("nan"))
    return rates, int(judged.sum())
