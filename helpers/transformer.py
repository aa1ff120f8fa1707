"""A tiny decoder-only transformer whose FFN is the course's ``helpers.ffn.FFN``.

Pre-norm blocks (GPT-2 style): ``x ← x + Attn(LN(x))``, ``x ← x + FFN(LN(x))``,
then a final LayerNorm and an (untied) unembedding. Small enough to train on
a CPU in seconds; made to be opened up: every block's FFN is ``model.blocks[l].ffn``.

Any module can stand in for the FFN through ``ffn_factory`` (a mixture of
experts, for instance). If that module returns a tuple ``(output, record)``,
the block keeps ``record`` in ``block.ffn_record`` so the training loop can read
routing statistics and auxiliary losses from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.ffn import FFN, VARIANTS
from helpers.progress import progress as progress_bar


@dataclass
class GPTConfig:
    """Size of a ``TinyGPT``. ``d_ff=None`` lets ``FFN.from_variant`` choose (4·d, or 2/3 of that when gated)."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None
    max_len: int = 16
    variant: str = "gelu"
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            validate.positive_int(name, getattr(self, name))
        if self.d_ff is not None:
            validate.positive_int("d_ff", self.d_ff)
        validate.one_of("variant", self.variant, VARIANTS)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={self.d_model}, "
                             f"n_heads={self.n_heads}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``(B, T, d_model) -> (B, T, d_model)``."""

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        head_width = width // self.n_heads
        # one projection for queries, keys and values; each (batch, length, width) -> (batch, heads, length, head_width)
        q, k, v = (t.view(batch, length, self.n_heads, head_width).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=-1))
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(mixed.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """One pre-norm transformer block: ``(B, T, d_model) -> (B, T, d_model)``."""

    def __init__(self, d_model: int, n_heads: int, ffn: nn.Module, bias: bool = True) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, bias)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = ffn
        self.ffn_record: object | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out = self.ffn(self.ln2(x))
        if isinstance(out, tuple):
            out, self.ffn_record = out
        return x + out


class TinyGPT(nn.Module):
    """A small GPT: token ids ``(B, T)`` -> next-token logits ``(B, T, vocab_size)``.

    Args:
        config: sizes, see ``GPTConfig``.
        ffn_factory: optional ``layer_index -> nn.Module`` replacing the FFN of each block.
    """

    def __init__(self, config: GPTConfig, ffn_factory: Callable[[int], nn.Module] | None = None) -> None:
        super().__init__()
        self.config = c = config
        if ffn_factory is None:
            def ffn_factory(layer: int) -> nn.Module:
                return FFN.from_variant(c.variant, c.d_model, c.d_ff, bias=c.bias)
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_len, c.d_model)
        self.blocks = nn.ModuleList(Block(c.d_model, c.n_heads, ffn_factory(i), c.bias) for i in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            raise TypeError(f"ids must be a (B, T) torch.long tensor, got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {tuple(getattr(ids, 'shape', ()))}")
        T = ids.shape[1]
        if T > self.config.max_len:
            raise ValueError(f"ids has sequence length {T}, more than max_len={self.config.max_len}")
        pos = torch.arange(T, device=ids.device)
        x = self.tok_emb(ids) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def ffn_records(self) -> list[object]:
        """The record each block's FFN returned in the last forward (``None`` for plain FFNs)."""
        return [block.ffn_record for block in self.blocks]


def train_lm(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor, *, steps: int, lr: float = 3e-3,
             batch_size: int | None = None, seed: int = 0, weight_decay: float = 0.0,
             extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
             on_step: Callable[[int, nn.Module, float], None] | None = None,
             progress: bool = True, desc: str = "training") -> list[float]:
    """Train ``model`` on next-token prediction with AdamW; return the loss of every step.

    Args:
        ids: ``(N, T)`` token ids. targets: ``(N, T)`` next-token ids, ``-100`` where there is none.
        steps: optimisation steps. batch_size: rows per step, drawn with a seeded generator
            (``None``: the whole data set every step).
        extra_loss: ``model -> scalar`` added to the loss after each forward (e.g. a balancing loss).
        on_step: called as ``on_step(step, model, loss)`` after each step (e.g. to log routing).
        progress: show a tqdm bar.
    Deterministic for a given seed on a given machine.
    """
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    if ids.shape != targets.shape:
        raise ValueError(f"ids and targets must have the same shape, got {tuple(ids.shape)} and {tuple(targets.shape)}")
    n = ids.shape[0]
    if batch_size is not None:
        validate.int_in_range("batch_size", batch_size, 1, n)
    device = next(model.parameters()).device
    ids, targets = ids.to(device), targets.to(device)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    losses: list[float] = []
    bar = progress_bar(range(steps), desc=desc, disable=not progress)
    for step in bar:
        if batch_size is None:
            x, y = ids, targets
        else:
            rows = torch.randint(0, n, (batch_size,), generator=gen).to(device)
            x, y = ids[rows], targets[rows]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        if extra_loss is not None:
            loss = loss + extra_loss(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, model, losses[-1])
        if progress and step % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


@torch.no_grad()
def answer_accuracy(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor, answer_id: torch.Tensor) -> float:
    """Share of rows whose top prediction at ``answer_pos`` is ``answer_id``.

    Shapes: ids ``(N, T)``, answer_pos ``(N,)``, answer_id ``(N,)``.
    """
    model.eval()
    device = next(model.parameters()).device
    logits = model(ids.to(device))
    rows = torch.arange(ids.shape[0], device=device)
    pred = logits[rows, answer_pos.to(device)].argmax(-1)
    return (pred == answer_id.to(device)).float().mean().item()
