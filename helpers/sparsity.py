"""What sparsity buys: a small fact-lookup language model in which only the FFN is varied.

Every fact of ``helpers.facts`` ("the capital of france is paris") is reduced to its two informative
prompt tokens, the subject and the relation, and the model predicts the answer token:

    h      = E[subject] + E[relation]                  (d_model,)  token embeddings, summed
    h      = h + FFN(LayerNorm(h))                      the one FFN (dense, or an ``MoE``)
    logits = U · LayerNorm(h)                           (n_answers,)

The embeddings and the unembedding are trained too, and the LayerNorm before ``U`` is not
linear, so this model can fit every fact even without an FFN (``NoFFN``, the control) when it
is trained long enough. What a fixed, short budget of steps measures is therefore how fast a
model fits the facts, not how many it can store: the kind of claim Switch makes (a lower loss
after the same steps at the same FLOPs per token). Attention is taken out so that a training run
is quick and its outcome does not depend on whether attention happened to learn to copy the subject.

``FactLookup`` fits ``helpers.transformer.train_lm``: its input is ``(N, 1)`` ids, one per fact,
``subject · n_relations + relation`` (the two prompt tokens packed into one number), its output
``(N, 1, n_answers)`` logits, and ``ffn_records()`` exposes the MoE record for ``helpers.moe.RoutingLog``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.facts import RELATIONS, Fact, load_facts
from helpers.progress import progress as progress_bar


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
        ffn: the FFN module (``helpers.ffn.FFN`` or ``helpers.moe.MoE``) acting on ``(N, d_model)``.
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
        """The FFN's input ``LN(E[subject] + E[relation])``: ``(N, 1)`` ids -> ``(N, d_model)``."""
        if ids.dim() != 2 or ids.shape[1] != 1:
            raise ValueError(f"ids must have shape (N, 1), got {tuple(ids.shape)}")
        ids = ids[:, 0]
        h = self.embed(ids // self.n_relations) + self.embed(self.n_subjects + ids % self.n_relations)
        return h

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
    """The control: an "FFN" that adds nothing, ``(N, d_model)`` -> zeros of the same shape.

    ``FactLookup(..., ffn=NoFFN())`` is the model of embeddings and unembedding alone; it has no FFN parameters.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


@torch.no_grad()
def lookup_loss_and_accuracy(model: FactLookup, data: LookupData) -> tuple[float, float]:
    """Cross-entropy of the answers (nats) and the share answered right, over every fact, in eval mode."""
    model.eval()
    logits = model(data.ids)[:, 0]
    return float(F.cross_entropy(logits, data.answer_id)), float((logits.argmax(-1) == data.answer_id).float().mean())


@dataclass
class SeedRuns:
    """Results of one model configuration trained with several seeds on the same data order.

    Attributes:
        name: label. curves: ``(seeds, steps)`` training loss (answer cross-entropy, without auxiliary
            losses). final_loss, final_accuracy: ``(seeds,)`` over every fact after training.
        params_total, params_active: FFN parameters in total and used per fact.
        models: the trained models, one per seed.
    """

    name: str
    curves: torch.Tensor
    final_loss: torch.Tensor
    final_accuracy: torch.Tensor
    params_total: int
    params_active: int
    models: list = field(default_factory=list, repr=False)

    def mean_sd(self, values: torch.Tensor | None = None) -> tuple[float, float]:
        """Mean and sample standard deviation over seeds (of ``final_loss`` by default)."""
        v = (self.final_loss if values is None else values).double()
        return float(v.mean()), float(v.std()) if v.numel() > 1 else 0.0


def train_full_batch(model: FactLookup, data: LookupData, *, steps: int, lr: float,
                     extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
                     on_step: Callable[[int, nn.Module, float], None] | None = None) -> list[float]:
    """AdamW on every fact at every step (the loop of ``helpers.transformer.train_lm`` with the whole data
    set as the batch), with the optimizer's multi-tensor ("foreach") update, which on a CPU saves most of
    its per-parameter overhead for a model of many small tensors. Returns the loss of every step
    (answer cross-entropy plus ``extra_loss``); ``on_step(step, model, loss)`` runs after each step.
    """
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, foreach=True)
    model.train()
    losses: list[float] = []
    target = data.answer_id
    for step in range(steps):
        loss = F.cross_entropy(model(data.ids)[:, 0], target)
        if extra_loss is not None:
            loss = loss + extra_loss(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, model, losses[-1])
    model.eval()
    return losses


def train_seeds(name: str, make_ffn: Callable[[], nn.Module], data: LookupData, *, d_model: int,
                seeds: Sequence[int] = (0, 1, 2), steps: int = 200, lr: float = 1e-2,
                params_active: int | None = None, extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
                on_step_factory: Callable[[], Callable] | None = None, progress: bool = True) -> SeedRuns:
    """Train ``FactLookup(ffn=make_ffn())`` once per seed (the seed sets the initial weights; the data
    order is the same for all), and collect loss curves and final loss / accuracy.

    ``params_active`` defaults to the FFN's parameter count (right for a dense FFN).
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    curves, losses, accs, models = [], [], [], []
    ffn_total = 0
    for seed in progress_bar(seeds, desc=name, disable=not progress):
        torch.manual_seed(seed)
        ffn = make_ffn()
        model = FactLookup(len(data.subjects), len(data.relations), len(data.answers), d_model, ffn)
        ffn_total = sum(p.numel() for p in ffn.parameters())
        hook = on_step_factory() if on_step_factory is not None else None
        curve = []

        def on_step(step, m, loss, hook=hook, curve=curve):
            aux = sum(float(r.aux_loss.detach()) for r in m.ffn_records() if hasattr(r, "aux_loss")) \
                if extra_loss is not None else 0.0
            curve.append(loss - aux)
            if hook is not None:
                hook(step, m, loss)

        train_full_batch(model, data, steps=steps, lr=lr, extra_loss=extra_loss, on_step=on_step)
        loss, acc = lookup_loss_and_accuracy(model, data)
        curves.append(curve)
        losses.append(loss)
        accs.append(acc)
        models.append(model)
    return SeedRuns(name, torch.tensor(curves, dtype=torch.float64), torch.tensor(losses, dtype=torch.float64),
                    torch.tensor(accs, dtype=torch.float64), ffn_total,
                    ffn_total if params_active is None else params_active, models)


# ----------------------------------------------------------------------------- figures
def curves_figure(runs: Sequence[SeedRuns], colors: Sequence[str] | None = None, title: str = ""):
    """Training-loss curves: the mean over seeds as a line, the band from the lowest to the highest seed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, r in enumerate(runs):
        color = None if colors is None else colors[i % len(colors)]
        steps = torch.arange(1, r.curves.shape[1] + 1).numpy()
        mean = r.curves.mean(0).numpy()
        line, = ax.plot(steps, mean, color=color, lw=1.8,
                        label=f"{r.name} ({r.curves.shape[0]} seeds)")
        ax.fill_between(steps, r.curves.min(0).values.numpy(), r.curves.max(0).values.numpy(),
                        color=line.get_color(), alpha=0.2)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("answer cross-entropy (nats, log scale)")
    ax.set_title(title)
    ax.legend(frameon=False)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def balancing_figure(logs: dict[str, Sequence], seed_index: int = 0):
    """One figure, one column per balancing method: the routing over training of one seed (share of tokens
    per expert per step, experts sorted by their final load) above the max/mean load of every seed.

    ``logs``: method name -> list of ``helpers.moe.RoutingLog`` (one per seed).
    """
    import matplotlib.pyplot as plt

    names = list(logs)
    fig, axes = plt.subplots(2, len(names), figsize=(4.3 * len(names), 6.8), squeeze=False,
                             gridspec_kw={"height_ratios": [1.2, 1]}, layout="constrained")
    top = max(float(log.max_over_mean()[:, 0].max()) for runs in logs.values() for log in runs)
    shares = {}
    for name in names:
        counts = logs[name][seed_index].counts[:, 0].double()                 # (steps, E)
        shares[name] = counts / counts.sum(-1, keepdim=True)
    vmax = max(float(v.max()) for v in shares.values())
    for col, name in enumerate(names):
        share = shares[name]
        order = torch.argsort(share[-10:].mean(0), descending=True)
        ax = axes[0, col]
        im = ax.imshow(share[:, order].T.numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=vmax,
                       interpolation="nearest")
        ax.grid(False)
        ax.set_title(f"{name}\n(seed {seed_index})")
        ax.set_xlabel("training step")
        ax.set_ylabel("expert (sorted by final load)")
        ax.set_yticks(range(share.shape[1]))
        ax.set_yticklabels([str(i + 1) for i in range(share.shape[1])])
        ax = axes[1, col]
        for i, log in enumerate(logs[name]):
            ax.plot(log.max_over_mean()[:, 0].numpy(), lw=1.3, label=f"seed {i}")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0.9, top * 1.05)
        ax.set_xlabel("training step")
        ax.set_ylabel("busiest expert's load / mean load")
        ax.legend(frameon=False, fontsize=8)
    fig.colorbar(im, ax=axes[0, :].tolist(), shrink=0.9, label="share of the step's tokens")
    return fig
