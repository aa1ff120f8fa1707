r"""Activation memory of the FFN, and how sequence chunking (with or without checkpointing) changes it.

The FFN treats every position on its own, so a sequence can be cut into chunks
along the token axis and the chunks pushed through one after the other: the
result is the same, up to float rounding (Reformer, Kitaev et al. 2020; the
``apply_chunking_to_forward`` utility of Hugging Face ``transformers`` does
the same).

What that buys depends on whether gradients are needed:

* **inference**: only one chunk's hidden ``(T/n, d_ff)`` tensor exists at a time;
* **training, chunking alone**: nothing. Autograd keeps every chunk's
  activations until the backward pass, and the chunks add up to the whole;
* **training, chunking + checkpointing** (``torch.utils.checkpoint``): autograd
  keeps only each chunk's *input*; in the backward pass each chunk's forward is
  recomputed just before its gradient is needed, so only one chunk's
  activations exist at a time. Peak = inputs + one chunk.

Saved activations per token (fp32 elements) of the course's FFN, as measured
with ``helpers.costs.measure_saved_tensors``: the input ``d`` plus a number of
``d_ff``-wide tensors that depends on the variant (``helpers.costs.saved_per_token``,
from notebook 04): ReLU ``d + d_ff``, GELU ``d + 2·d_ff``, SwiGLU ``d + 4·d_ff``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from helpers import validate
from helpers.costs import measure_saved_tensors
from helpers.costs import saved_per_token

def _check_chunks(x: torch.Tensor, n_chunks: int, dim: int) -> int:
    validate.float_tensor("x", x, min_dims=1)
    validate.positive_int("n_chunks", n_chunks)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must index one of x's {x.dim()} dimensions, got {dim}")
    length = x.shape[dim]
    if n_chunks > length:
        raise ValueError(f"n_chunks must be at most the sequence length {length} (x.shape[{dim}]), got {n_chunks}")
    return length


def chunked_apply(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, n_chunks: int, *,
                  checkpoint: bool = False, dim: int = -2) -> torch.Tensor:
    """Apply a position-wise ``fn`` to ``x`` in ``n_chunks`` pieces along the token axis ``dim``.

    Shapes: ``x`` is ``(..., T, d_model)`` with the tokens on ``dim`` (default
    ``-2``, e.g. ``(B, T, d)`` or ``(T, d)``); the output has ``fn``'s output
    shape, e.g. ``(..., T, d_model)``. Chunks are ``torch.tensor_split`` pieces
    (sizes differ by at most one; the first ``T mod n`` are the larger ones).

    With ``checkpoint=True`` every chunk runs under
    ``torch.utils.checkpoint.checkpoint`` (non-reentrant): its activations are
    dropped after the forward and recomputed in the backward pass.
    """
    _check_chunks(x, n_chunks, dim)
    if not isinstance(checkpoint, bool):
        raise TypeError(f"checkpoint must be a bool, got {checkpoint!r} ({type(checkpoint).__name__})")
    pieces = torch.tensor_split(x, n_chunks, dim=dim)
    if checkpoint:
        outputs = [_checkpoint(fn, piece, use_reentrant=False) for piece in pieces]
    else:
        outputs = [fn(piece) for piece in pieces]
    return torch.cat(outputs, dim=dim)


class ChunkedFFN(nn.Module):
    """A drop-in wrapper that runs a position-wise module (e.g. ``helpers.ffn.FFN``) chunk by chunk.

    Args:
        ffn: the module to wrap (its parameters stay its own: nothing is copied).
        n_chunks: pieces along the token axis (``dim=-2``).
        checkpoint: recompute each chunk in the backward pass instead of keeping its activations.

    Shapes: ``(..., T, d_model) -> (..., T, d_model)``; needs ``T >= n_chunks``.
    """

    def __init__(self, ffn: nn.Module, n_chunks: int, *, checkpoint: bool = True) -> None:
        super().__init__()
        if not isinstance(ffn, nn.Module):
            raise TypeError(f"ffn must be an nn.Module, got {type(ffn).__name__}")
        if not isinstance(checkpoint, bool):
            raise TypeError(f"checkpoint must be a bool, got {checkpoint!r} ({type(checkpoint).__name__})")
        self.ffn = ffn
        self.n_chunks = validate.positive_int("n_chunks", n_chunks)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return chunked_apply(self.ffn, x, min(self.n_chunks, x.shape[-2]), checkpoint=self.checkpoint)

    def extra_repr(self) -> str:
        return f"n_chunks={self.n_chunks}, checkpoint={self.checkpoint}"


@dataclass(frozen=True)
class ActivationMemory:
    """Bytes of saved activations of one training step of a (possibly chunked) module.

    ``kept_bytes``: what autograd holds from the end of the forward pass until
    the backward pass reaches the module (every chunk's activations without
    checkpointing; only the chunk inputs with it). ``recompute_bytes``: what the
    recomputation of the largest chunk adds while its gradient is computed (0
    without checkpointing). ``peak_bytes`` is their sum.
    """

    kept_bytes: int
    recompute_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return self.kept_bytes + self.recompute_bytes


def activation_memory(module: nn.Module, x: torch.Tensor, n_chunks: int = 1, *, checkpoint: bool = False,
                      dim: int = -2) -> ActivationMemory:
    """Measure the activation memory of training ``module`` on ``x`` run in ``n_chunks`` chunks.

    Both parts are measured with ``helpers.costs.measure_saved_tensors``
    (distinct storages, parameters excluded). For the recomputation, the
    largest chunk's plain forward is run inside the same measurement as the
    chunked one, so its input, a view of ``x`` that checkpointing already
    keeps, is not counted twice.

    Shapes: ``x`` is ``(..., T, d_model)`` with tokens on ``dim``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    _check_chunks(x, n_chunks, dim)

    def chunked() -> torch.Tensor:
        return chunked_apply(module, x, n_chunks, checkpoint=checkpoint, dim=dim)

    kept = measure_saved_tensors(chunked, exclude=module).total_bytes
    if not checkpoint:
        return ActivationMemory(kept, 0)
    largest = torch.tensor_split(x, n_chunks, dim=dim)[0]

    def chunked_then_one_recomputation() -> torch.Tensor:
        chunked()
        return module(largest)

    peak = measure_saved_tensors(chunked_then_one_recomputation, exclude=module).total_bytes
    return ActivationMemory(kept, peak - kept)


def peak_saved_bytes(n_tokens: int, d_model: int, d_ff: int, variant: str, n_chunks: int = 1, *,
                     checkpoint: bool = True, bytes_per_element: int = 4) -> int:
    """Formula for ``activation_memory(...).peak_bytes`` of one FFN on ``n_tokens`` tokens.

    Without checkpointing: ``T·(d + h·d_ff)`` elements whatever ``n_chunks``.
    With it: the kept inputs ``T·d`` plus the largest chunk's hidden tensors
    ``ceil(T/n)·h·d_ff``, where ``d + h·d_ff = helpers.costs.saved_per_token(variant, d, d_ff)``
    (h = 1 for ReLU, 2 for GELU, 4 for SwiGLU: the notebook's symbol for saved hidden tensors).
    """
    validate.positive_int("n_tokens", n_tokens)
    per_token = saved_per_token(variant, d_model, d_ff)
    validate.int_in_range("n_chunks", n_chunks, 1, n_tokens)
    validate.positive_int("bytes_per_element", bytes_per_element)
    if not checkpoint:
        return n_tokens * per_token * bytes_per_element
    largest = -(-n_tokens // n_chunks)
    hidden = per_token - d_model
    return (n_tokens * d_model + largest * hidden) * bytes_per_element
