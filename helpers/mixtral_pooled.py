"""Hugging Face's pooled Mixtral balance loss, written out so notebook 05 need not import ``transformers``.

``pooled_balance_loss`` follows ``transformers.models.mixtral.modeling_mixtral.load_balancing_loss_func`` without
an attention mask: every layer's router logits are pooled as one set of tokens; ``f_i`` counts the top-k
choices as k one-hots over all pooled tokens (so it sums to k), ``P_i`` is the mean router probability, and the
loss is ``E · Σ_i f_i P_i`` (k at an even load, for the whole model). ``tests/test_mixtral_pooled.py`` checks it
against the library's function on random logits and on notebook 05's two-layer example.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def pooled_balance_loss(gate_logits: Sequence[torch.Tensor], num_experts: int, top_k: int = 2) -> torch.Tensor:
    """``gate_logits``: one (tokens, E) tensor of router logits per layer -> a 0-dim float32 tensor."""
    logits = torch.cat(list(gate_logits), dim=0)
    probs = torch.softmax(logits.float(), dim=-1)
    chosen = probs.topk(top_k, dim=-1).indices                                # (tokens, k), no gradient
    share = torch.bincount(chosen.reshape(-1), minlength=num_experts).float() / logits.shape[0]
    return num_experts * torch.sum(share * probs.mean(0))
