r"""Read a transformer's FFN as a key-value memory (Geva et al. 2021).

For one token vector ``x`` (the FFN's input, after the block's LayerNorm) a dense FFN computes

    m = φ(W1 x + b1)            memory coefficients, one per neuron   (d_ff,)
    FFN(x) = Σ_i m_i v_i + b2   a weighted sum of value vectors        (d_model,)

with key ``k_i`` = row i of ``W1`` (``ffn.w1.weight[i]``, shape ``(d_model,)``) and value ``v_i`` = column i
of ``W2`` (``ffn.w2.weight[:, i]``). Each term can be read: the key by the inputs that make ``m_i`` large,
the value by what it writes in the vocabulary. This module holds those readings:

* where a model keeps its FFNs (``find_ffns``) and one recorded forward pass (``collect``: every layer's
  coefficients ``(N, T, d_ff)`` and outputs ``(N, T, d_model)``);
* keys: the prefixes that trigger a neuron most (``top_triggers``), how often a neuron's triggers share a
  label (``pattern_share``) and how many of a layer's neurons pass a share (``pattern_neuron_share``), each
  example's peak and its mean per group (``peak_coefficients``, ``group_profile``);
* values: a vector read through the final LayerNorm and the unembedding (``project_to_vocab``,
  ``value_logits``), and Geva et al.'s **agreement rate** between a neuron's value and the token after its
  top trigger, with its mismatched-pairs baseline (``agreement``, ``mismatched_agreement``).

What happens when you change a memory (knock-outs, patching, sub-updates) is in ``helpers.interventions``;
the neuron explorer in ``helpers.explorer``; notebook 03's trained models in ``helpers.fact_model``; rank-one
edits in ``helpers.editing``.

Supported models (``find_ffns``): the course's ``TinyGPT`` (anything with ``model.blocks[l].ffn`` being a
``helpers.ffn.FFN``, plus ``model.ln_f`` and ``model.lm_head``) and Hugging Face GPT-2
(``model.transformer.h[l].mlp``, whose ``Conv1D`` weights are stored transposed). The coefficients are read
as the *input of the contracting map* (``w2`` / ``c_proj``) with a forward hook, so gated FFNs work too:
there ``m = φ(W1 x + b1) ⊙ (W3 x + b3)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validate
from helpers.ffn import FFN

# ---------------------------------------------------------------------------------------------
# Finding the FFNs of a model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FFNLayer:
    """One layer's FFN seen as a memory.

    Attributes:
        index: the layer number.
        module: the FFN module (hooks on it see the FFN's input and output).
        value_module: the contracting map; its input is ``m`` ``(..., d_ff)``, its output ``W2 m + b2``.
        transposed: True when the weights are stored ``(in, out)`` (GPT-2's ``Conv1D``), False for ``nn.Linear``.
    """

    index: int
    module: nn.Module
    expand_module: nn.Module
    value_module: nn.Module
    transposed: bool

    @property
    def keys(self) -> torch.Tensor:
        """``(d_ff, d_model)``: row i is key i (a view of the weights)."""
        w = self.expand_module.weight
        return w.T if self.transposed else w

    @property
    def values(self) -> torch.Tensor:
        """``(d_ff, d_model)``: row i is value i, i.e. column i of ``W2`` (a view of the weights)."""
        w = self.value_module.weight
        return w if self.transposed else w.T

    @property
    def value_matrix(self) -> torch.Tensor:
        """``W2`` in math layout ``(d_model, d_ff)``, so that the FFN output is ``W2 @ m + b2`` (a view)."""
        return self.values.T

    @property
    def value_bias(self) -> torch.Tensor | None:
        """``b2``, shape ``(d_model,)``, or ``None``."""
        return self.value_module.bias

    @property
    def d_ff(self) -> int:
        return self.values.shape[0]


@dataclass(frozen=True)
class FFNMemories:
    """Where a model keeps its FFNs, its final norm and its unembedding.

    Attributes:
        layers: one ``FFNLayer`` per block, in order.
        final_norm: the LayerNorm applied before the unembedding (``ln_f``).
        unembed: the unembedding module; ``unembed(final_norm(h))`` gives logits ``(..., vocab)``.
    """

    model: nn.Module
    layers: list[FFNLayer]
    final_norm: nn.Module
    unembed: nn.Module

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def layer(self, layer: int) -> FFNLayer:
        """The ``FFNLayer`` of block ``layer`` (checked: an int in ``[0, n_layers - 1]``)."""
        validate.int_in_range("layer", layer, 0, self.n_layers - 1)
        return self.layers[layer]


def _expected_ffn_message(model: object) -> str:
    return ("model must expose its FFNs as model.blocks[l].ffn (a helpers.ffn.FFN, with model.ln_f and "
            "model.lm_head, like helpers.transformer.TinyGPT) or be a Hugging Face GPT-2 "
            f"(model.transformer.h[l].mlp); got {type(model).__name__}")


def find_ffns(model: nn.Module) -> FFNMemories:
    """Locate the FFNs of ``model``; raise ``TypeError`` naming what is missing.

    Works for ``TinyGPT`` (and any module with ``blocks[l].ffn`` = ``helpers.ffn.FFN``,
    ``ln_f`` and ``lm_head``) and for Hugging Face ``GPT2LMHeadModel``.
    """
    if isinstance(model, FFNMemories):
        return model
    if not isinstance(model, nn.Module):
        raise TypeError(_expected_ffn_message(model))
    blocks = getattr(model, "blocks", None)
    if blocks is not None:
        layers = []
        for i, block in enumerate(blocks):
            ffn = getattr(block, "ffn", None)
            if not isinstance(ffn, FFN):
                raise TypeError(f"model.blocks[{i}].ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}; "
                                + _expected_ffn_message(model))
            layers.append(FFNLayer(i, ffn, ffn.w1, ffn.w2, transposed=False))
        if not layers or not hasattr(model, "ln_f") or not hasattr(model, "lm_head"):
            raise TypeError("model.blocks is empty or model lacks ln_f / lm_head; " + _expected_ffn_message(model))
        return FFNMemories(model, layers, model.ln_f, model.lm_head)
    transformer = getattr(model, "transformer", None)
    h = getattr(transformer, "h", None)
    if h is not None and hasattr(model, "lm_head") and hasattr(transformer, "ln_f"):
        layers = []
        for i, block in enumerate(h):
            mlp = getattr(block, "mlp", None)
            if mlp is None or not hasattr(mlp, "c_fc") or not hasattr(mlp, "c_proj"):
                raise TypeError(f"model.transformer.h[{i}].mlp lacks c_fc / c_proj; " + _expected_ffn_message(model))
            layers.append(FFNLayer(i, mlp, mlp.c_fc, mlp.c_proj, transposed=True))
        return FFNMemories(model, layers, transformer.ln_f, model.lm_head)
    raise TypeError(_expected_ffn_message(model))


def _ids(ids: object, name: str = "ids") -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
        raise TypeError(f"{name} must be a (N, T) torch.long tensor of token ids, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
    return ids


def logits_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Next-token logits ``(N, T, vocab)`` of ``model`` (a TinyGPT or a Hugging Face model)."""
    out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits


# ---------------------------------------------------------------------------------------------
# Memory coefficients
# ---------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """One forward pass, recorded.

    Attributes:
        logits: ``(N, T, vocab)``.
        coefficients: one ``(N, T, d_ff)`` tensor per layer: the memory coefficients ``m``.
        outputs: one ``(N, T, d_model)`` tensor per layer: the FFN outputs ``Σ m_i v_i + b2``.
    """

    logits: torch.Tensor
    coefficients: list[torch.Tensor]
    outputs: list[torch.Tensor]


@torch.no_grad()
def collect(model: nn.Module, ids: torch.Tensor) -> Trace:
    """Run ``model`` on ``ids`` ``(N, T)`` and record every layer's memory coefficients and FFN output."""
    memories = find_ffns(model)
    ids = _ids(ids)
    coefficients: list[torch.Tensor | None] = [None] * memories.n_layers
    outputs: list[torch.Tensor | None] = [None] * memories.n_layers

    def make_hook(i: int):
        def hook(module, inputs, output):
            coefficients[i] = inputs[0].detach()
            outputs[i] = output.detach()
        return hook

    handles = [layer.value_module.register_forward_hook(make_hook(layer.index)) for layer in memories.layers]
    try:
        was_training = memories.model.training
        memories.model.eval()
        device = next(memories.model.parameters()).device
        logits = logits_of(memories.model, ids.to(device)).detach()
        memories.model.train(was_training)
    finally:
        for handle in handles:
            handle.remove()
    return Trace(logits, list(coefficients), list(outputs))


def memory_coefficients(model: nn.Module, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The memory coefficients of one layer: ``(N, T, d_ff)`` for ``ids`` ``(N, T)``."""
    memories = find_ffns(model)
    memories.layer(layer)
    return collect(memories.model, ids).coefficients[layer]


def prefix_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """``(N, T)`` bool: True at position t when a real next token ``ids[n, t+1]`` exists.

    These are the prefixes ``ids[n, :t+1]`` that have a continuation in the data.
    """
    ids = _ids(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, :-1] = (ids[:, 1:] != pad_id) & (ids[:, :-1] != pad_id)
    return mask


def token_positions(ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the first position of ``tokens[n]`` in row ``ids[n]`` (e.g. where each fact's subject sits)."""
    ids = _ids(ids)
    if not isinstance(tokens, torch.Tensor) or tokens.shape != (ids.shape[0],):
        raise ValueError(f"tokens must be a tensor of shape ({ids.shape[0]},), one token id per row")
    hits = ids == tokens.unsqueeze(1)
    if not hits.any(dim=1).all():
        row = int((~hits.any(dim=1)).nonzero()[0])
        raise ValueError(f"row {row} of ids does not contain token {int(tokens[row])}")
    return hits.float().argmax(dim=1)


@torch.no_grad()
def answer_probability(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor,
                       answer_id: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the probability the model gives ``answer_id[n]`` after ``ids[n, :answer_pos[n] + 1]``."""
    ids = _ids(ids)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    logits = logits_of(model, ids.to(device))
    model.train(was_training)
    rows = torch.arange(ids.shape[0], device=device)
    probs = logits[rows, answer_pos.to(device)].softmax(-1)
    return probs[rows, answer_id.to(device)].cpu()


# ---------------------------------------------------------------------------------------------
# Keys: what triggers a neuron
# ---------------------------------------------------------------------------------------------


@dataclass
class Triggers:
    """The top-k trigger prefixes of neurons, one per example (where the neuron fires most).

    With ``neuron`` given the tensors are ``(k,)``; otherwise ``(d_ff, k)``.

    Attributes:
        examples: row of each trigger in the data.
        positions: the prefix ends at this position (it is ``ids[example, :position + 1]``).
        coefficients: the memory coefficient there, in decreasing order.
    """

    examples: torch.Tensor
    positions: torch.Tensor
    coefficients: torch.Tensor


def _mask_invalid(coefficients: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Set the coefficients (N, T, n) at positions where ``valid`` (N, T) is False to −∞ (not 0), so a row
    whose valid coefficients are all negative keeps its negative peak; ``None`` leaves them as they are."""
    if valid is None:
        return coefficients
    N, T = coefficients.shape[:2]
    if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != (N, T):
        raise ValueError(f"valid must be a bool tensor of shape {(N, T)}, got "
                         f"{getattr(valid, 'dtype', type(valid).__name__)} {tuple(getattr(valid, 'shape', ()))}")
    if not valid.any(dim=1).all():
        raise ValueError("valid has a row with no True position: every example needs at least one prefix")
    return coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf"))

def _check_coefficients(coefficients: object) -> torch.Tensor:
    validate.float_tensor("coefficients", coefficients, min_dims=3)
    if coefficients.dim() != 3:
        raise ValueError(f"coefficients must be (N, T, d_ff), got shape {tuple(coefficients.shape)}")
    return coefficients


def top_triggers(coefficients: torch.Tensor, k: int, valid: torch.Tensor | None = None,
                 neuron: int | None = None) -> Triggers:
    """Top-k trigger prefixes per neuron, as in Geva et al. (2021).

    For every example (row) keep the position where the neuron's coefficient is largest
    (among ``valid`` positions), then rank the examples by that value.

    Args:
        coefficients: ``(N, T, d_ff)`` memory coefficients of one layer.
        k: how many examples, at most ``N``.
        valid: ``(N, T)`` bool, the positions that count as prefix ends (default: all).
        neuron: one neuron index, or ``None`` for all neurons.
    """
    coefficients = _check_coefficients(coefficients)
    N, T, d_ff = coefficients.shape
    validate.int_in_range("k", k, 1, N)
    if neuron is not None:
        validate.int_in_range("neuron", neuron, 0, d_ff - 1)
        coefficients = coefficients[..., neuron:neuron + 1]
    coefficients = _mask_invalid(coefficients, valid)
    best, best_pos = coefficients.max(dim=1)                  # (N, n): best position of every example
    # (n, k): best examples per neuron; a stable sort keeps exact ties (saturated neurons) in row order
    values, examples = (t[:, :k] for t in best.T.sort(dim=1, descending=True, stable=True))
    positions = best_pos.T.gather(1, examples)
    if neuron is not None:
        return Triggers(examples[0], positions[0], values[0])
    return Triggers(examples, positions, values)


def prefix_words(ids: torch.Tensor, example: int, position: int, decode) -> str:
    """The prefix ``ids[example, :position + 1]`` as text, without padding or ``<bos>``; ``decode``: ids -> words."""
    words = [w for w in decode(ids[example, : position + 1].tolist()) if w not in ("<bos>", "<pad>")]
    return " ".join(words)


def pattern_share(examples: torch.Tensor, labels: Sequence[object]) -> torch.Tensor:
    """For each neuron, the share of its top-k trigger examples that carry its most common label.

    Args:
        examples: ``(d_ff, k)`` example indices (``Triggers.examples``).
        labels: one label per example (e.g. each fact's relation or answer).
    Returns:
        ``(d_ff,)`` float in ``[1/k, 1]``; 1 means all k triggers share a label.
    """
    if not isinstance(examples, torch.Tensor) or examples.dim() != 2:
        raise TypeError(f"examples must be a (d_ff, k) tensor, got {type(examples).__name__}")
    codes = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    coded = torch.tensor([codes[label] for label in labels])
    if int(examples.max()) >= len(coded):
        raise ValueError(f"examples refers to row {int(examples.max())}, but labels has only {len(coded)} entries")
    picked = coded[examples]                                   # (d_ff, k)
    counts = torch.nn.functional.one_hot(picked, len(codes)).sum(dim=1)  # (d_ff, n_labels)
    return counts.max(dim=1).values.float() / examples.shape[1]


def pattern_neuron_share(coefficients: torch.Tensor, valid: torch.Tensor | None, labels: Sequence[object],
                         k: int = 10, threshold: float = 0.8) -> float:
    """Share of a layer's neurons whose top-k trigger examples (``top_triggers``) carry one label in at least
    ``threshold`` of them (8 of 10 by default). ``coefficients``: ``(N, T, d_ff)``; ``labels``: one per example.

    Compare it with the same network before training: prompts of one template share words and positions, so
    even random features group them.
    """
    validate.positive_float("threshold", threshold)
    share = pattern_share(top_triggers(coefficients, k, valid).examples, labels)          # (d_ff,) in [1/k, 1]
    return (share * k >= threshold * k - 1e-6).float().mean().item()


def peak_coefficients(coefficients: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Each example's peak: ``(N, d_ff)``, the largest coefficient over the ``valid`` positions of its row.

    This is the number ``top_triggers`` ranks examples by. Invalid positions are masked with ``-inf``
    (not 0), so a row whose valid coefficients are all negative keeps its (negative) peak.
    """
    coefficients = _mask_invalid(_check_coefficients(coefficients), valid)
    return coefficients.max(dim=1).values


def group_profile(peaks: torch.Tensor, groups: Sequence[object]) -> tuple[torch.Tensor, list[object]]:
    """Mean peak per group: ``(d_ff, G)`` from ``peaks`` ``(N, d_ff)`` and one label per example.

    Returns the profile and the group labels in order of first appearance (column g is ``names[g]``).
    E.g. ``groups`` = each fact's relation gives a neuron's activation per relation.
    """
    validate.float_tensor("peaks", peaks, min_dims=2)
    if peaks.dim() != 2 or len(groups) != peaks.shape[0]:
        raise ValueError(f"peaks must be (N, d_ff) with one label per row in groups, got shape "
                         f"{tuple(peaks.shape)} and {len(groups)} labels")
    names = list(dict.fromkeys(groups))
    code = torch.tensor([names.index(g) for g in groups])
    one_hot = torch.nn.functional.one_hot(code, len(names)).to(peaks.dtype)     # (N, G)
    return (peaks.T @ one_hot) / one_hot.sum(0), names


# ---------------------------------------------------------------------------------------------
# Values: what a neuron writes
# ---------------------------------------------------------------------------------------------


def _check_neurons(neurons: int | Sequence[int] | torch.Tensor | None, d_ff: int) -> torch.Tensor:
    if neurons is None:
        return torch.arange(d_ff)
    if isinstance(neurons, int):
        validate.int_in_range("neuron", neurons, 0, d_ff - 1)
        return torch.tensor([neurons])
    index = torch.as_tensor(neurons, dtype=torch.long).reshape(-1)
    if index.numel() and (index.min() < 0 or index.max() >= d_ff):
        bad = int(index[(index < 0) | (index >= d_ff)][0])
        raise ValueError(f"neurons must be in [0, {d_ff - 1}] (d_ff={d_ff}), got {bad}")
    return index


@torch.no_grad()
def project_to_vocab(model: nn.Module, vectors: torch.Tensor, *, biases: bool = True) -> torch.Tensor:
    """Read residual-stream vectors ``(..., d_model)`` as logits ``(..., vocab)``.

    ``biases=True``: ``unembed(final_norm(v))``, the model's own read-out applied to ``v`` alone.
    ``biases=False``: only the part that depends on ``v``, ``W_U (γ ⊙ (v − mean(v)) / σ(v))``: the final
    norm's shift β and the unembedding's bias (if any) are left out, because they add the same vector to
    every read-out, whatever ``v`` is.
    """
    memories = find_ffns(model)
    if biases:
        return memories.unembed(memories.final_norm(vectors))
    norm, unembed = memories.final_norm, memories.unembed
    if not isinstance(norm, nn.LayerNorm) or not hasattr(unembed, "weight"):
        raise TypeError(f"biases=False needs an nn.LayerNorm final norm and an unembedding with a weight, got "
                        f"{type(norm).__name__} and {type(unembed).__name__}")
    normed = torch.nn.functional.layer_norm(vectors, norm.normalized_shape, norm.weight, None, norm.eps)
    return normed @ unembed.weight.T


@torch.no_grad()
def value_logits(model: nn.Module, layer: int, neurons: int | Sequence[int] | None = None, *,
                 biases: bool = True) -> torch.Tensor:
    """What value vectors say about the next token: ``(n, vocab)`` logits, ``project_to_vocab(v_i)``.

    ``neurons``: one index, a list, or ``None`` for all ``d_ff`` neurons of ``layer``.
    ``biases``: see ``project_to_vocab`` (``True``: ``lm_head(ln_f(v_i))``; ``False``: without ln_f's β
    and lm_head's bias, which are the same for every neuron).
    """
    ffn = find_ffns(model).layer(layer)
    index = _check_neurons(neurons, ffn.d_ff)
    return project_to_vocab(model, ffn.values[index].detach(), biases=biases)


@dataclass
class Agreement:
    """Geva et al.'s agreement between a layer's values and its keys' top triggers.

    Attributes:
        rate: share of neurons whose value's top token is the next token after their top trigger prefix.
        median_rank: median rank (1 = top) of that next token in the values' logits.
        chance: the rate a random top token would reach, ``1 / vocab``.
        ranks: ``(d_ff,)`` the rank for every neuron.
        next_tokens: ``(d_ff,)`` the next token after each neuron's top trigger.
        top_tokens: ``(d_ff,)`` each value's top token.
    """

    rate: float
    median_rank: float
    chance: float
    ranks: torch.Tensor
    next_tokens: torch.Tensor
    top_tokens: torch.Tensor


def agreement(model: nn.Module, ids: torch.Tensor, layer: int, valid: torch.Tensor | None = None,
              coefficients: torch.Tensor | None = None, *, biases: bool = True) -> Agreement:
    """Agreement rate and median rank for one layer (Geva et al. 2021, section 4).

    For each neuron: its top trigger prefix ``ids[n, :t+1]`` (``top_triggers`` with k=1), the
    token that follows it, ``ids[n, t+1]``, and the rank of that token in ``value_logits``.

    Args:
        ids: ``(N, T)`` the data set. valid: ``(N, T)`` prefix ends that have a next token
            (default ``prefix_mask(ids)``). coefficients: precomputed ``(N, T, d_ff)`` for ``layer``.
        biases: how values are read, see ``project_to_vocab``.
    """
    ids = _ids(ids)
    find_ffns(model).layer(layer)
    if valid is None:
        valid = prefix_mask(ids)
    if coefficients is None:
        coefficients = memory_coefficients(model, ids, layer)
    trig = top_triggers(coefficients, 1, valid)
    examples, positions = trig.examples[:, 0], trig.positions[:, 0]
    if int(positions.max()) + 1 >= ids.shape[1]:
        raise ValueError("a top trigger ends at the last position, which has no next token: pass valid")
    next_tokens = ids[examples, positions + 1]
    logits = value_logits(model, layer, biases=biases)
    target = logits.gather(1, next_tokens.unsqueeze(1).to(logits.device))
    ranks = (logits > target).sum(dim=1).cpu() + 1
    return Agreement(rate=(ranks == 1).float().mean().item(), median_rank=ranks.float().median().item(),
                     chance=1.0 / logits.shape[1], ranks=ranks, next_tokens=next_tokens,
                     top_tokens=logits.argmax(dim=1).cpu())


def mismatched_agreement(model: nn.Module, layer: int, agreed: Agreement, *, biases: bool = True) -> float:
    """The agreement rate's baseline: how often a value's top token equals the next token of *another*
    neuron's top trigger (all ``d_ff · (d_ff − 1)`` mismatched pairs).

    Both lists stay as they are (the values' top tokens, the triggers' next tokens); only the pairing is
    broken. Most triggers are followed by a template word and many values put a template word first, so this
    rate is far above ``1 / vocab``; an agreement rate means something only above it.
    ``agreed`` is ``agreement(model, ids, layer, ..., biases=biases)``.
    """
    top = value_logits(model, layer, biases=biases).argmax(dim=1).cpu()             # (d_ff,)
    same = top[:, None] == agreed.next_tokens[None, :].cpu()                          # (d_ff, d_ff): value i, trigger j
    n = same.shape[0]
    return ((same.sum() - same.diagonal().sum()) / (n * (n - 1))).item()


def random_orthonormal(d: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random ``(d, d)`` orthonormal matrix (QR of a Gaussian one): a random basis of a hidden space."""
    validate.int_in_range("d", d, 1, 1 << 16)
    return torch.linalg.qr(torch.randn(d, d, generator=generator))[0]


def oriented(coefficients: torch.Tensor, basis: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``basis`` with each column's sign chosen so that its largest excursion over ``valid`` positions is
    positive, as a neuron's is (GELU passes large positive values only): a random direction ``q`` is as much
    ``-q``, and without this its "top trigger" is, for about half the directions, the small tail of the side
    that does not fire. ``coefficients``: ``(N, T, d)``; ``basis``: ``(d, d)``; ``valid``: ``(N, T)`` or None (all)."""
    projected = coefficients @ basis
    if valid is None:
        valid = torch.ones(projected.shape[:2], dtype=torch.bool)
    highest = projected.masked_fill(~valid[..., None], float("-inf")).amax(dim=(0, 1))
    lowest = projected.masked_fill(~valid[..., None], float("inf")).amin(dim=(0, 1))
    return basis * torch.where(highest >= -lowest, 1.0, -1.0)


@torch.no_grad()
def rotated_agreement(model: nn.Module, ids: torch.Tensor, layer: int, valid: torch.Tensor,
                      coefficients: torch.Tensor, basis: torch.Tensor, *, biases: bool = True) -> float:
    """``agreement``'s rate with ``layer``'s hidden space read in another orthonormal basis: direction ``j``
    has coefficients ``(coefficients @ basis)[..., j]`` and value ``(basisᵀ V)[j]``. The layer's output is
    the same in every such basis (``m V = (m Q)(Qᵀ V)``), so a neuron rate above the random-basis rate is a
    property of the neurons, not of what the layer computes.

    Each direction is first given a neuron's sign convention (``oriented``).

    ``coefficients``: ``(N, T, d_ff)`` for ``layer``; ``basis``: ``(d_ff, d_ff)``, e.g. ``random_orthonormal``.
    """
    ids = _ids(ids)
    ffn = find_ffns(model).layer(layer)
    coefficients = _check_coefficients(coefficients)
    if basis.shape != (ffn.d_ff, ffn.d_ff) or coefficients.shape[-1] != ffn.d_ff:
        raise ValueError(f"basis must be ({ffn.d_ff}, {ffn.d_ff}) and coefficients (N, T, {ffn.d_ff}), "
                         f"got {tuple(basis.shape)} and {tuple(coefficients.shape)}")
    basis = oriented(coefficients, basis, valid)     # a direction's top trigger is where it fires, as a neuron's
    trig = top_triggers(coefficients @ basis, 1, valid)
    examples, positions = trig.examples[:, 0], trig.positions[:, 0]
    if int(positions.max()) + 1 >= ids.shape[1]:
        raise ValueError("a top trigger ends at the last position, which has no next token: pass valid")
    next_tokens = ids[examples, positions + 1]
    top = project_to_vocab(model, basis.T @ ffn.values.detach(), biases=biases).argmax(dim=1).cpu()
    return (top == next_tokens.cpu()).float().mean().item()


if __name__ == "__main__":   # kept so that `python -m helpers.memory --make-checkpoint` still works
    from helpers.fact_model import main

    main()
