r"""Read a transformer's FFN as a key-value memory (Geva et al. 2021, 2022).

For one token vector ``x`` (the FFN's input, after the block's LayerNorm) a
dense FFN computes

    m = φ(K x + b1)            memory coefficients, one per neuron   (d_ff,)
    FFN(x) = Σ_i m_i v_i + b2  a weighted sum of value vectors        (d_model,)

with key ``k_i`` = row i of ``W1`` (``ffn.w1.weight[i]``, shape ``(d_model,)``)
and value ``v_i`` = column i of ``W2`` (``ffn.w2.weight[:, i]``). This module
finds, for any model that exposes its FFNs:

* the memory coefficients of every neuron at every position (``collect``);
* the prefixes that trigger a neuron most (``top_triggers``) and how often a
  neuron's triggers share a label (``pattern_share``);
* what a value writes, read through the final LayerNorm and the unembedding
  (``value_logits``), and the **agreement rate** between a neuron's value and
  the next token of its top trigger (``agreement``);
* the per-neuron sub-updates ``m_i v_i`` of one forward pass (``sub_updates``);
* the effect of switching neurons off (``knock_out``, ``answer_probability``).

Supported models (``find_ffns``): the course's ``TinyGPT`` (or anything with
``model.blocks[l].ffn`` being a ``helpers.ffn.FFN``, plus ``model.ln_f`` and
``model.lm_head``) and Hugging Face GPT-2 (``model.transformer.h[l].mlp``,
whose ``Conv1D`` weights are stored transposed).

The memory coefficients are read as the *input of the contracting map*
(``w2`` / ``c_proj``) with a forward hook, so gated FFNs work too: there
``m = φ(W1 x + b1) ⊙ (W3 x + b3)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
    if valid is not None:
        if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != (N, T):
            raise ValueError(f"valid must be a bool tensor of shape {(N, T)}, got "
                             f"{getattr(valid, 'dtype', type(valid).__name__)} {tuple(getattr(valid, 'shape', ()))}")
        if not valid.any(dim=1).all():
            raise ValueError("valid has a row with no True position: every example needs at least one prefix")
        coefficients = coefficients.masked_fill(~valid.unsqueeze(-1), float("-inf"))
    best, best_pos = coefficients.max(dim=1)                  # (N, n): best position of every example
    values, examples = best.T.topk(k, dim=1)                  # (n, k): best examples per neuron
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
def project_to_vocab(model: nn.Module, vectors: torch.Tensor) -> torch.Tensor:
    """Read residual-stream vectors ``(..., d_model)`` as logits ``(..., vocab)``: ``unembed(final_norm(v))``."""
    memories = find_ffns(model)
    return memories.unembed(memories.final_norm(vectors))


@torch.no_grad()
def value_logits(model: nn.Module, layer: int, neurons: int | Sequence[int] | None = None) -> torch.Tensor:
    """What value vectors say about the next token: ``(n, vocab)`` logits, ``lm_head(ln_f(v_i))``.

    ``neurons``: one index, a list, or ``None`` for all ``d_ff`` neurons of ``layer``.
    """
    ffn = find_ffns(model).layer(layer)
    index = _check_neurons(neurons, ffn.d_ff)
    return project_to_vocab(model, ffn.values[index].detach())


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
              coefficients: torch.Tensor | None = None) -> Agreement:
    """Agreement rate and median rank for one layer (Geva et al. 2021, section 4).

    For each neuron: its top trigger prefix ``ids[n, :t+1]`` (``top_triggers`` with k=1), the
    token that follows it, ``ids[n, t+1]``, and the rank of that token in ``value_logits``.

    Args:
        ids: ``(N, T)`` the data set. valid: ``(N, T)`` prefix ends that have a next token
            (default ``prefix_mask(ids)``). coefficients: precomputed ``(N, T, d_ff)`` for ``layer``.
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
    logits = value_logits(model, layer)
    target = logits.gather(1, next_tokens.unsqueeze(1).to(logits.device))
    ranks = (logits > target).sum(dim=1).cpu() + 1
    return Agreement(rate=(ranks == 1).float().mean().item(), median_rank=ranks.float().median().item(),
                     chance=1.0 / logits.shape[1], ranks=ranks, next_tokens=next_tokens,
                     top_tokens=logits.argmax(dim=1).cpu())


# ---------------------------------------------------------------------------------------------
# Sub-updates and knock-outs
# ---------------------------------------------------------------------------------------------


@dataclass
class SubUpdates:
    """The FFN output of one layer at one position, split into neurons (Geva et al. 2022).

    Attributes:
        coefficients: ``(d_ff,)`` the memory coefficients ``m_i``.
        vectors: ``(d_ff, d_model)`` the sub-updates ``m_i v_i``.
        bias: ``(d_model,)`` ``b2`` (zeros without bias); ``vectors.sum(0) + bias`` is the FFN output.
        output: ``(d_model,)`` the FFN output recorded in the forward pass.
        order: ``(d_ff,)`` neurons by decreasing ``|m_i| · ||v_i||``.
    """

    coefficients: torch.Tensor
    vectors: torch.Tensor
    bias: torch.Tensor
    output: torch.Tensor
    order: torch.Tensor

    @property
    def scores(self) -> torch.Tensor:
        """``(d_ff,)`` the size ``|m_i| · ||v_i||`` of each sub-update."""
        return self.vectors.norm(dim=1)


def sub_updates(model: nn.Module, ids: torch.Tensor, layer: int, position: int, example: int = 0) -> SubUpdates:
    """Split the FFN output of ``layer`` at ``ids[example, position]`` into the terms ``m_i v_i``."""
    ids = _ids(ids)
    memories = find_ffns(model)
    ffn = memories.layer(layer)
    validate.int_in_range("example", example, 0, ids.shape[0] - 1)
    validate.int_in_range("position", position, 0, ids.shape[1] - 1)
    trace = collect(memories.model, ids[example:example + 1])
    m = trace.coefficients[layer][0, position]
    vectors = m.unsqueeze(1) * ffn.values.detach()
    bias = ffn.value_bias.detach() if ffn.value_bias is not None else torch.zeros(vectors.shape[1])
    order = vectors.norm(dim=1).argsort(descending=True)
    return SubUpdates(m, vectors, bias, trace.outputs[layer][0, position], order)


@contextmanager
def knock_out(model: nn.Module, layer: int, neurons: int | Sequence[int] | torch.Tensor) -> Iterator[None]:
    """Inside the ``with`` block, chosen neurons of ``layer`` have memory coefficient 0 at every position.

    ``neurons``: an index or a list/1-D tensor of indices (silenced in every row), or a bool
    tensor ``(N, d_ff)`` choosing different neurons for each of the N rows of the next forward
    pass. Silenced neurons write nothing. Nest two blocks to silence neurons in two layers.
    """
    ffn = find_ffns(model).layer(layer)
    if isinstance(neurons, torch.Tensor) and neurons.dtype == torch.bool:
        if neurons.dim() != 2 or neurons.shape[1] != ffn.d_ff:
            raise ValueError(f"a bool neurons mask must have shape (N, d_ff={ffn.d_ff}), got {tuple(neurons.shape)}")
        keep = (~neurons).float().unsqueeze(1)                     # (N, 1, d_ff)
    else:
        keep = torch.ones(ffn.d_ff)
        keep[_check_neurons(neurons, ffn.d_ff)] = 0.0

    def pre_hook(module, inputs):
        m = inputs[0]
        if keep.dim() == 3 and (m.dim() != 3 or m.shape[0] != keep.shape[0]):
            raise ValueError(f"the neurons mask has {keep.shape[0]} rows but the batch has shape {tuple(m.shape)}")
        return (m * keep.to(m.device), *inputs[1:])

    handle = ffn.value_module.register_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()


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
# Optional: a real model
# ---------------------------------------------------------------------------------------------


def load_gpt2(name: str = "gpt2", *, download: bool | None = None):
    """Load a pretrained Hugging Face GPT-2 and its tokenizer, or say why not.

    Returns ``(model, tokenizer, None)`` on success and ``(None, None, reason)`` when the
    ``transformers`` package or the weights are unavailable. ``download=None`` downloads
    only in Google Colab or when the environment variable ``FFN_COURSE_GPT2=1`` is set;
    elsewhere only weights already in the local Hugging Face cache are used, so that a
    machine without internet (or CI) skips quickly instead of waiting for a download.
    """
    import importlib.util
    import os
    import sys
    import warnings

    if importlib.util.find_spec("transformers") is None:
        return None, None, "the `transformers` package is not installed (pip install transformers)"
    if download is None:
        download = "google.colab" in sys.modules or os.environ.get("FFN_COURSE_GPT2") == "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers

            transformers.logging.set_verbosity_error()
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=not download)
            model = transformers.GPT2LMHeadModel.from_pretrained(name, local_files_only=not download)
    except Exception as err:  # no cache, no network, or a broken install: all mean "skip"
        where = ("downloading them failed" if download else
                 "they are not in the local cache (set FFN_COURSE_GPT2=1 to download ~500 MB)")
        return None, None, f"GPT-2's weights ({name!r}) are unavailable: {where} [{type(err).__name__}]"
    return model.eval(), tokenizer, None
