"""A fact lookup whose only varied part is its FFN: the model behind notebook 07's race (``helpers.moe_race``).

Every fact of ``helpers.facts`` ("the capital of france is paris") is reduced to its two informative prompt
tokens, the subject and the relation, and the model predicts the answer token:

    h      = E[subject] + E[relation]                  (d_model,)  token embeddings, summed
    h      = h + FFN(LayerNorm(h))                      the one FFN (dense, an ``MoE``, or ``NoFFN``)
    logits = U · LayerNorm(h)                           (n_answers,)

Attention is left out, so that a run takes a fraction of a second. Trained too, the embeddings can store the
facts themselves (the no-FFN control fits them); ``build_lookup(..., frozen=True)`` keeps them at their random
start, so that what an FFN adds is what it stores. ``build_lookup`` draws the embeddings, the LayerNorms and the
unembedding first and the FFN last, so two models built with the same seed start from the same lookup around
different FFNs. ``train_lookup`` trains on every fact at every step with ``helpers.transformer.train_lm``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.facts import RELATIONS, Fact, load_facts
from helpers.ffn import FFN
from helpers.moe import MoE, RoutingLog, moe_aux_loss, update_selection_biases
from helpers.transformer import train_lm


@dataclass
class LookupData:
    """Facts as ``(subject, relation)`` token pairs and answer ids.

    Attributes:
        ids: ``(N, 1)`` long, ``subject · n_relations + relation`` with subjects and relations numbered
            in ``subjects`` and ``relations``.
        targets: ``(N, 1)`` long, the answer id.
        subjects, relations: the input vocabularies. answers: the output vocabulary.
        facts: the N facts, in row order.
    """

    ids: torch.Tensor
    targets: torch.Tensor
    subjects: list[str]
    relations: list[str]
    answers: list[str]
    facts: list[Fact]

    @property
    def answer_id(self) -> torch.Tensor:
        """``(N,)`` long: the answer of every row."""
        return self.targets[:, 0]


def lookup_data(facts: Sequence[Fact] | None = None) -> LookupData:
    """Tokenise facts (default: every fact of ``load_facts()``) for ``FactLookup``."""
    facts = list(load_facts() if facts is None else facts)
    if not facts:
        raise ValueError("facts is empty")
    subjects = sorted({f.subject for f in facts})
    relations = [r for r in RELATIONS if any(f.relation == r for f in facts)]
    answers = sorted({f.obj for f in facts})
    s_index = {t: i for i, t in enumerate(subjects)}
    r_index = {t: i for i, t in enumerate(relations)}
    answer_index = {a: i for i, a in enumerate(answers)}
    ids = torch.tensor([[s_index[f.subject] * len(relations) + r_index[f.relation]] for f in facts])
    targets = torch.tensor([[answer_index[f.obj]] for f in facts])
    return LookupData(ids, targets, subjects, relations, answers, facts)


class FactLookup(nn.Module):
    """``(N, 1)`` ids ``subject · n_relations + relation`` -> ``(N, 1, n_answers)`` answer logits.

    Args:
        n_subjects, n_relations: input vocabulary sizes. n_answers: output vocabulary size. d_model: width.
        ffn: the FFN module (``helpers.ffn.FFN``, ``helpers.moe.MoE`` or ``NoFFN``) acting on ``(N, d_model)``.
    """

    def __init__(self, n_subjects: int, n_relations: int, n_answers: int, d_model: int, ffn: nn.Module) -> None:
        super().__init__()
        self.n_subjects = validate.positive_int("n_subjects", n_subjects)
        self.n_relations = validate.positive_int("n_relations", n_relations)
        validate.positive_int("n_answers", n_answers)
        self.d_model = validate.positive_int("d_model", d_model)
        self.embed = nn.Embedding(n_subjects + n_relations, d_model)   # subjects, then relations
        self.ln = nn.LayerNorm(d_model)
        self.ffn = ffn
        self.ln_f = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, n_answers, bias=False)
        self.ffn_record: object | None = None

    def inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """The residual stream before the FFN, ``E[subject] + E[relation]``: ``(N, 1)`` ids -> ``(N, d_model)``."""
        if ids.dim() != 2 or ids.shape[1] != 1:
            raise ValueError(f"ids must have shape (N, 1), got {tuple(ids.shape)}")
        ids = ids[:, 0]
        return self.embed(ids // self.n_relations) + self.embed(self.n_subjects + ids % self.n_relations)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.inputs(ids)                                         # (N, d)
        out = self.ffn(self.ln(h))
        if isinstance(out, tuple):
            out, self.ffn_record = out
        return self.unembed(self.ln_f(h + out))[:, None]             # (N, 1, n_answers)

    def ffn_records(self) -> list[object]:
        """The FFN's record of the last forward, as a one-layer list (``RoutingLog`` reads it)."""
        return [self.ffn_record]


class NoFFN(nn.Module):
    """The control: an "FFN" without parameters that adds nothing, ``(N, d_model)`` -> zeros of the same shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def make_ffn(spec: dict, d_model: int) -> nn.Module:
    """The FFN an arm describes: ``{"ffn": "none"}`` (``NoFFN``), ``{"ffn": "dense", "d_ff": w}`` (a bias-free
    SwiGLU ``FFN`` of width w) or ``{"ffn": "moe", **options}`` (``MoE(d_model, **options)``)."""
    kind, options = spec.get("ffn"), {k: v for k, v in spec.items() if k != "ffn"}
    if kind == "none" and not options:
        return NoFFN()
    if kind == "dense" and set(options) == {"d_ff"}:
        return FFN.from_variant("swiglu", d_model, options["d_ff"], bias=False)
    if kind == "moe":
        return MoE(d_model, **options)
    raise ValueError(f"an arm is {{'ffn': 'none'}}, {{'ffn': 'dense', 'd_ff': w}} or {{'ffn': 'moe', ...}}, got {spec}")


def build_lookup(data: LookupData, spec: dict, d_model: int, seed: int, *, frozen: bool = True) -> FactLookup:
    """One run's model: ``torch.manual_seed(seed)``, then the embeddings, LayerNorms and unembedding (the same
    for every arm of that seed), then the FFN of ``spec``; ``frozen`` keeps the embeddings at their start."""
    torch.manual_seed(validate.non_negative_int("seed", seed))
    model = FactLookup(len(data.subjects), len(data.relations), len(data.answers), d_model, NoFFN())
    model.ffn = make_ffn(spec, d_model)
    model.embed.weight.requires_grad_(not frozen)
    return model


@torch.no_grad()
def lookup_loss_and_accuracy(model: FactLookup, data: LookupData) -> tuple[float, float]:
    """Cross-entropy of the answers (nats) and the share answered right, over every fact, in eval mode."""
    model.eval()
    logits = model(data.ids)[:, 0]
    return float(F.cross_entropy(logits, data.answer_id)), float((logits.argmax(-1) == data.answer_id).float().mean())


def ffn_params(ffn: nn.Module) -> tuple[int, int]:
    """The FFN's parameters in total and used per fact (an MoE: its router, its top-k routed experts and the
    shared ones)."""
    total = sum(p.numel() for p in ffn.parameters())
    if not isinstance(ffn, MoE):
        return total, total
    shared = sum(p.numel() for p in ffn.shared.parameters()) if ffn.shared is not None else 0
    return total, ffn.router.weight.numel() + ffn.top_k * sum(p.numel() for p in ffn.experts[0].parameters()) + shared


def train_lookup(model: FactLookup, data: LookupData, *, steps: int, lr: float, eval_at: Sequence[int] = (),
                 progress: bool = False, desc: str = "training"
                 ) -> tuple[torch.Tensor, torch.Tensor | None, dict[int, tuple[float, float]]]:
    """Train ``model`` with ``helpers.transformer.train_lm`` on every fact at every step (AdamW, no weight decay,
    a constant learning rate).

    With an ``MoE`` FFN the loss adds its ``aux_loss`` and, after every step, the selection bias moves
    (``update_selection_biases``; nothing happens unless ``bias_update > 0``). Returns the answer loss of every
    step (``(steps,)`` float64, before that step's update, auxiliary loss left out), for an MoE the routed
    slots per expert at every step (``(steps, E)`` long; ``None`` otherwise), and ``lookup_loss_and_accuracy``
    after each step listed in ``eval_at``, by step.
    """
    log, evals, moe = RoutingLog(), {}, isinstance(model.ffn, MoE)

    def after_step(step: int, m: nn.Module, loss: float) -> None:
        if moe:
            log(step, m, loss)
            update_selection_biases(m)
        if step + 1 in eval_at:
            evals[step + 1] = lookup_loss_and_accuracy(m, data)
            m.train()

    losses = train_lm(model, data.ids, data.targets, steps=steps, lr=lr, extra_loss=moe_aux_loss if moe else None,
                      on_step=after_step, progress=progress, desc=desc)
    if not moe:
        return torch.tensor(losses, dtype=torch.float64), None, evals
    return log.lm_loss, log.counts[:, 0], evals


