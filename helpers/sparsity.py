"""What sparsity buys: a small fact-lookup model in which only the FFN is varied, trained over many seeds.

Every fact of ``helpers.facts`` ("the capital of france is paris") is reduced to its two informative
prompt tokens, the subject and the relation, and the model predicts the answer token:

    h      = E[subject] + E[relation]                  (d_model,)  token embeddings, summed
    h      = h + FFN(LayerNorm(h))                      the one FFN (dense, or an ``MoE``)
    logits = U · LayerNorm(h)                           (n_answers,)

The embeddings and the unembedding are trained too, and the LayerNorm before ``U`` is not
linear, so this model can fit every fact even without an FFN (``NoFFN``, the control) when it
is trained long enough. What a fixed, short budget of steps measures is therefore how fast a
model fits its training facts (training-set fit), not how many it can store, and not how well a
language model generalises. Attention is left out so that a run takes a fraction of a second.

Training many seeds at once
---------------------------
``train_seeds`` builds ``FactLookup(ffn=make_ffn())`` once per seed, exactly as a single run would
(``torch.manual_seed(seed)``, then the FFN, then the model), stacks the seeds' weights along a new
first dimension and trains all of them together with one AdamW: every operation is batched over
the seeds, and since the loss is the *sum* of the seeds' losses and AdamW updates each number on
its own, every seed follows the same updates as when trained alone (``tests/test_sparsity.py``
checks this against ``train_full_batch`` on the course's own modules). As there, AdamW leaves an
expert alone in a step in which it received no token (no gradient, no update). The final loss and
accuracy are measured by the same batched forward, and the trained weights are written back into
the seeds' modules (their own loss agrees; tested).

An ``MoE`` is trained with its own recipe: the answer loss plus its ``aux_loss``
(``balance_coef`` · Switch balance loss + ``z_coef`` · z-loss) and, when ``bias_update > 0``, the
±γ bias update after every step (``helpers.moe.update_selection_biases``). The batched version
computes every expert on every fact and multiplies the unchosen ones by a zero gate, which gives
the numbers of ``MoE``'s dispatch (the same outputs and gradients) at the FLOPs of a dense layer:
at this toy size that is faster on a CPU than moving tokens to experts, which is itself a lesson
about what routing costs (``count_ops``).

``FactLookup`` fits ``helpers.transformer.train_lm``: its input is ``(N, 1)`` ids, one per fact,
``subject · n_relations + relation`` (the two prompt tokens packed into one number), its output
``(N, 1, n_answers)`` logits, and ``ffn_records()`` exposes the MoE record for ``helpers.moe.RoutingLog``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import validate
from helpers.facts import RELATIONS, Fact, load_facts
from helpers.ffn import FFN
from helpers.moe import MoE
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
    """The control: an "FFN" that adds nothing, ``(N, d_model)`` -> zeros of the same shape.

    ``FactLookup(..., ffn=NoFFN())`` is the model of embeddings and unembedding alone; it has no FFN parameters.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def make_lookup(data: LookupData, d_model: int, ffn: nn.Module) -> FactLookup:
    """``FactLookup`` sized for ``data`` around ``ffn``."""
    return FactLookup(len(data.subjects), len(data.relations), len(data.answers), d_model, ffn)


@torch.no_grad()
def lookup_loss_and_accuracy(model: FactLookup, data: LookupData) -> tuple[float, float]:
    """Cross-entropy of the answers (nats) and the share answered right, over every fact, in eval mode."""
    model.eval()
    logits = model(data.ids)[:, 0]
    return float(F.cross_entropy(logits, data.answer_id)), float((logits.argmax(-1) == data.answer_id).float().mean())


def train_full_batch(model: FactLookup, data: LookupData, *, steps: int, lr: float,
                     extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
                     on_step: Callable[[int, nn.Module, float], None] | None = None) -> list[float]:
    """One model, AdamW on every fact at every step (the loop of ``helpers.transformer.train_lm`` with
    the whole data set as the batch; multi-tensor "foreach" update). Returns the loss of every step
    (answer cross-entropy plus ``extra_loss``); ``on_step(step, model, loss)`` runs after each step.
    ``train_seeds`` does the same for many seeds at once.
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


# ----------------------------------------------------------------------------- many seeds at once
@dataclass
class SeedRuns:
    """One model configuration trained with several seeds on the same facts.

    Attributes:
        name: label. seeds: the seeds, in order.
        curves: ``(seeds, steps)`` float64 training loss per step (answer cross-entropy, without the
            auxiliary losses), before that step's update.
        final_loss, final_accuracy: ``(seeds,)`` float64, over every fact after training (eval mode,
            measured on the course's own modules).
        loads: ``(steps, seeds, E)`` long, routed slots per expert at every training step (an MoE;
            ``None`` otherwise).
        params_total, params_active: FFN parameters in total and used per fact.
        models: the trained ``FactLookup`` models, one per seed.
    """

    name: str
    seeds: list[int]
    curves: torch.Tensor
    final_loss: torch.Tensor
    final_accuracy: torch.Tensor
    params_total: int
    params_active: int
    loads: torch.Tensor | None = None
    models: list = field(default_factory=list, repr=False)

    def mean_sd(self, values: torch.Tensor | None = None) -> tuple[float, float]:
        """Mean and sample standard deviation over seeds (of ``final_loss`` by default)."""
        v = (self.final_loss if values is None else values).double()
        return float(v.mean()), float(v.std()) if v.numel() > 1 else 0.0

    def max_over_mean(self) -> torch.Tensor:
        """``(steps, seeds)`` float64: the busiest expert's load over the mean load, at every step."""
        if self.loads is None:
            raise ValueError(f"{self.name} has no router: only an MoE records loads")
        c = self.loads.double()
        return c.max(-1).values / c.mean(-1)


def _stack(models: Sequence[nn.Module], get: Callable[[nn.Module], torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([get(m).detach().to(dtype) for m in models]).requires_grad_(True)


class _BatchedLookup:
    """The seeds' ``FactLookup`` models as stacked leaf tensors, with a batched forward (see the module doc)."""

    def __init__(self, models: Sequence[FactLookup], dtype: torch.dtype = torch.float32) -> None:
        self.models = list(models)
        self.dtype = dtype
        first = self.models[0]
        self.n_subjects, self.n_relations = first.n_subjects, first.n_relations
        ffn = first.ffn
        self.kind = "moe" if isinstance(ffn, MoE) else "dense" if isinstance(ffn, FFN) else \
            "none" if isinstance(ffn, NoFFN) else None
        if self.kind is None:
            raise TypeError(f"train_seeds supports FFN, MoE and NoFFN layers, got {type(ffn).__name__}")
        p: dict[str, torch.Tensor] = {
            "embed": _stack(self.models, lambda m: m.embed.weight, dtype),
            "ln.w": _stack(self.models, lambda m: m.ln.weight, dtype),
            "ln.b": _stack(self.models, lambda m: m.ln.bias, dtype),
            "lnf.w": _stack(self.models, lambda m: m.ln_f.weight, dtype),
            "lnf.b": _stack(self.models, lambda m: m.ln_f.bias, dtype),
            "unembed": _stack(self.models, lambda m: m.unembed.weight, dtype),
        }
        if self.kind == "dense":
            self._check_ffn(ffn)
            self.gated = ffn.gated
            self.act = ffn.act
            for name in ("w1", "w3", "w2") if ffn.gated else ("w1", "w2"):
                p[name] = _stack(self.models, lambda m, name=name: getattr(m.ffn, name).weight, dtype)
        elif self.kind == "moe":
            self._check_moe(ffn)
            self.moe = ffn
            self.gated = ffn.experts[0].gated
            self.act = ffn.experts[0].act
            p["router"] = _stack(self.models, lambda m: m.ffn.router.weight, dtype)
            names = ("w1", "w3", "w2") if self.gated else ("w1", "w2")
            for name in names:                   # (S, E, F, d) and (S, E, d, F)
                p["experts." + name] = _stack(
                    self.models, lambda m, name=name: torch.stack([getattr(e, name).weight for e in m.ffn.experts]),
                    dtype)
                if ffn.shared is not None:
                    p["shared." + name] = _stack(self.models, lambda m, name=name: getattr(m.ffn.shared, name).weight,
                                                 dtype)
            self.router_dtype = torch.promote_types(dtype, torch.float32)      # MoE routes in float32 at least
            self.bias = torch.stack([m.ffn.selection_bias.detach().to(self.router_dtype) for m in self.models])
        self.params = p

    @staticmethod
    def _check_ffn(ffn: FFN) -> None:
        if ffn.has_bias or ffn.dropout.p > 0:
            raise ValueError("train_seeds trains FFNs without biases or dropout (bias=False, dropout=0)")

    @staticmethod
    def _check_moe(moe: MoE) -> None:
        expert = moe.experts[0]
        if moe.router_type != "token" or moe.capacity_factor is not None or moe.jitter > 0 or moe.noisy \
                or expert.has_bias or expert.dropout.p > 0:
            raise ValueError("train_seeds trains dropless token-choice MoE layers without jitter, noise, expert "
                             "biases or dropout")

    # ----- forward pieces, batched over the seeds (S) and the facts (N)
    @staticmethod
    def _layer_norm(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, h.shape[-1:], eps=1e-5) * w[:, None] + b[:, None]

    def _ffn(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        """A dense (gated) FFN without biases: ``(S, N, d)`` with weights ``(S, F, d)``."""
        p = self.params
        h = self.act(torch.bmm(x, p[prefix + "w1"].transpose(1, 2)))
        if self.gated:
            h = h * torch.bmm(x, p[prefix + "w3"].transpose(1, 2))
        return torch.bmm(h, p[prefix + "w2"].transpose(1, 2))

    def _route(self, x: torch.Tensor):
        """Token-choice routing as ``MoE.route`` does it: ``(gate (S, N, E), load (S, E), aux (S,))``."""
        moe, p = self.moe, self.params
        rd = self.router_dtype
        logits = torch.bmm(x.to(rd), p["router"].to(rd).transpose(1, 2))               # (S, N, E)
        if moe.score == "softmax":
            scores = probs = torch.softmax(logits, -1)
        else:
            scores = torch.sigmoid(logits)
            probs = scores / scores.sum(-1, keepdim=True)
        select = scores + self.bias[:, None]          # + 0.0 leaves the scores exactly as they are
        k = moe.top_k
        if k == 1:                                    # ties to the lower index, as MoE's own top-1
            index = select.max(-1, keepdim=True).indices
        elif k == 2:
            first = select.max(-1, keepdim=True).indices
            second = select.scatter(-1, first, float("-inf")).max(-1, keepdim=True).indices
            index = torch.cat([first, second], -1)
        else:
            index = torch.topk(select, k, dim=-1).indices
        weight = scores.gather(-1, index)
        if moe.renormalise and k >= 2:
            weight = weight / weight.sum(-1, keepdim=True)
        gate = torch.zeros_like(scores).scatter(-1, index, weight)                       # (S, N, E)
        n_experts, n_slots = scores.shape[-1], index.shape[1] * k
        load = torch.zeros(index.shape[0], n_experts, dtype=torch.long).scatter_add_(
            1, index.reshape(index.shape[0], -1), torch.ones_like(index.reshape(index.shape[0], -1)))
        aux = torch.zeros(index.shape[0], dtype=rd)
        if moe.balance_coef > 0:
            f = load.to(probs.dtype) / n_slots
            aux = aux + moe.balance_coef * n_experts * (f * probs.mean(1)).sum(-1)
        if moe.z_coef > 0:
            aux = aux + moe.z_coef * torch.logsumexp(logits, -1).square().mean(1)
        return gate, load, aux

    def _moe(self, x: torch.Tensor):
        p = self.params
        gate, load, aux = self._route(x)
        s, n_experts, width, d = p["experts.w1"].shape
        w1 = p["experts.w1"].reshape(s, n_experts * width, d)
        h = self.act(torch.bmm(x, w1.transpose(1, 2)))                                   # (S, N, E·F)
        if self.gated:
            h = h * torch.bmm(x, p["experts.w3"].reshape(s, n_experts * width, d).transpose(1, 2))
        h = (h.view(s, -1, n_experts, width) * gate.to(h.dtype)[..., None]).view(s, -1, n_experts * width)
        w2 = p["experts.w2"].transpose(2, 3).reshape(s, n_experts * width, d)            # (S, E·F, d)
        y = torch.bmm(h, w2)
        if "shared.w1" in p:
            y = y + self._ffn(x, "shared.")
        return y, load, aux

    def forward(self, subject: torch.Tensor, relation: torch.Tensor):
        """``(logits (S, N, A), load (S, E) or None, aux (S,))``."""
        p = self.params
        h = p["embed"][:, subject] + p["embed"][:, self.n_subjects + relation]           # (S, N, d)
        x = self._layer_norm(h, p["ln.w"], p["ln.b"])
        load, aux = None, torch.zeros(h.shape[0], dtype=h.dtype)
        if self.kind == "dense":
            out = self._ffn(x, "")
        elif self.kind == "moe":
            out, load, aux = self._moe(x)
        else:
            out = torch.zeros_like(x)
        logits = torch.bmm(self._layer_norm(h + out, p["lnf.w"], p["lnf.b"]), p["unembed"].transpose(1, 2))
        return logits, load, aux

    def update_bias(self, load: torch.Tensor) -> None:
        """DeepSeek-V3's ±γ step for every seed (``helpers.moe.bias_update_step``), after the optimizer step."""
        gamma = self.moe.bias_update
        load = load.to(torch.float64)
        self.bias = self.bias + gamma * torch.sign(load.mean(-1, keepdim=True) - load).to(self.bias.dtype)

    @torch.no_grad()
    def write_back(self) -> None:
        """Copy the trained weights (and selection biases) into the seeds' modules."""
        p = self.params
        for s, m in enumerate(self.models):
            m.embed.weight.copy_(p["embed"][s])
            m.ln.weight.copy_(p["ln.w"][s])
            m.ln.bias.copy_(p["ln.b"][s])
            m.ln_f.weight.copy_(p["lnf.w"][s])
            m.ln_f.bias.copy_(p["lnf.b"][s])
            m.unembed.weight.copy_(p["unembed"][s])
            names = ("w1", "w3", "w2") if self.kind != "none" and self.gated else ("w1", "w2")
            if self.kind == "dense":
                for name in names:
                    getattr(m.ffn, name).weight.copy_(p[name][s])
            elif self.kind == "moe":
                m.ffn.router.weight.copy_(p["router"][s])
                for name in names:
                    for e, expert in enumerate(m.ffn.experts):
                        getattr(expert, name).weight.copy_(p["experts." + name][s, e])
                    if m.ffn.shared is not None:
                        getattr(m.ffn.shared, name).weight.copy_(p["shared." + name][s])
                m.ffn.selection_bias.copy_(self.bias[s])
                m.ffn.refresh_prepared()


class _ExpertAdamW:
    """AdamW (no weight decay) for stacked expert weights ``(S, E, ...)``, one seed's expert at a time.

    In the course's ``MoE`` an expert that receives no token in a step is not called, its weights get no
    gradient (``None``), and ``torch.optim.AdamW`` skips them: no update, no step counted. This does the same
    per seed and expert, with the formulas of ``torch.optim.AdamW``.
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = [torch.zeros(p.shape[:2] + (1,) * (p.dim() - 2), dtype=torch.float64) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, used: torch.Tensor) -> None:
        """``used``: ``(S, E)`` bool, the experts that received at least one token in this step."""
        beta1, beta2 = self.betas
        for p, m, v, t in zip(self.params, self.exp_avg, self.exp_avg_sq, self.steps):
            mask = used.reshape(t.shape)
            t += mask
            grad = p.grad
            m.copy_(torch.where(mask, m.lerp(grad, 1 - beta1), m))
            v.copy_(torch.where(mask, v * beta2 + (1 - beta2) * grad * grad, v))
            count = t.clamp_min(1)
            step_size = (self.lr / (1 - beta1 ** count)).to(p.dtype)
            denom = v.sqrt() / (1 - beta2 ** count).sqrt().to(p.dtype) + self.eps
            p.sub_(torch.where(mask, step_size * m / denom, torch.zeros_like(p)))


def train_seeds(name: str, make_ffn: Callable[[], nn.Module], data: LookupData, *, d_model: int,
                seeds: Sequence[int] = tuple(range(8)), steps: int = 100, lr: float = 2e-2,
                params_active: int | None = None, dtype: torch.dtype = torch.float32,
                progress: bool = False) -> SeedRuns:
    """Train ``FactLookup(ffn=make_ffn())`` once per seed, all seeds at once (see the module doc).

    Every seed starts from the weights a single run with ``torch.manual_seed(seed)`` would build; all
    train on every fact at every step (full batch) with AdamW (``lr``, no weight decay) for ``steps``
    steps. An ``MoE`` adds its own ``aux_loss`` and, with ``bias_update > 0``, its ±γ bias update after
    each step. ``params_active`` defaults to the FFN's parameter count (right for a dense FFN).

    ``dtype``: the training precision. With the default float32 the steps are those of the course's modules
    (``train_full_batch``; ``tests/test_sparsity.py``). A CPU's kernels (AVX2, AVX-512, plain) round sums and
    exponentials differently in the last bit, and Adam and the router's top-k choices amplify such
    differences over 100 steps: a seed can end a few hundredths of a nat elsewhere on another machine, so
    statistics over seeds agree between machines to about two decimals, and t values only to about one.
    float64 shrinks those differences (without removing the routing flips) at twice the cost.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(make_lookup(data, d_model, make_ffn()))
    ffn_total = sum(p.numel() for p in models[0].ffn.parameters())
    net = _BatchedLookup(models, dtype)
    expert_keys = [k for k in net.params if k.startswith("experts.")]
    opt = torch.optim.AdamW([p for k, p in net.params.items() if k not in expert_keys], lr=lr, weight_decay=0.0,
                            foreach=True)
    expert_opt = _ExpertAdamW([net.params[k] for k in expert_keys], lr=lr)
    subject, relation = data.ids[:, 0] // net.n_relations, data.ids[:, 0] % net.n_relations
    target = data.answer_id.repeat(len(seeds))

    def answer_loss(logits: torch.Tensor) -> torch.Tensor:                              # (S,) per seed
        flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target, reduction="none")
        return flat.view(len(seeds), -1).mean(1)

    curves, loads = [], []
    update_bias = net.kind == "moe" and net.moe.bias_update > 0
    for _ in progress_bar(range(steps), desc=name, disable=not progress):
        logits, load, aux = net.forward(subject, relation)
        answer = answer_loss(logits)
        opt.zero_grad(set_to_none=True)
        expert_opt.zero_grad()
        (answer + aux.to(answer.dtype)).sum().backward()
        opt.step()
        if expert_keys:
            expert_opt.step(load > 0)
        curves.append(answer.detach())
        if load is not None:
            loads.append(load)
            if update_bias:
                net.update_bias(load)
    with torch.no_grad():                      # after training, in the training precision
        logits, _, _ = net.forward(subject, relation)
        final_loss = answer_loss(logits).double()
        right = (logits.argmax(-1) == data.answer_id).double().mean(1)
    net.write_back()
    return SeedRuns(name, seeds, torch.stack(curves, 1).double(), final_loss, right, ffn_total,
                    ffn_total if params_active is None else params_active,
                    torch.stack(loads) if loads else None, models)


# ----------------------------------------------------------------------------- what routing costs
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot"})
#: operations that only re-describe memory (no kernel runs): left out of ``OpCount.kernels``
VIEW_OPS = frozenset({"view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "alias", "slice",
                      "select", "unsqueeze", "squeeze", "as_strided", "reshape", "_reshape_alias", "split",
                      "unbind", "lift_fresh", "split_with_sizes", "chunk", "unflatten", "flatten"})


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@dataclass
class OpCount:
    """Operations one call dispatched to PyTorch's kernels.

    Attributes:
        matmuls: matrix multiplications (``mm``, ``addmm``, ``bmm``, ...). kernels: every operation that
            runs a kernel (views such as ``t`` or ``expand`` left out): about what a profiler lists.
        by_name: count per operation name, views included.
    """

    matmuls: int
    kernels: int
    by_name: dict[str, int]


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn()`` once and count the ATen operations it dispatches (a ``TorchDispatchMode``).

    The counts depend on the implementation (a loop over experts, a grouped kernel) and on how the
    torch version decomposes an operation: a measurement of this code, not a property of MoE layers.
    """
    with _OpCounter() as counter:
        fn()
    counts = dict(counter.counts)
    matmuls = sum(n for op, n in counts.items() if op in MATMUL_OPS)
    kernels = sum(n for op, n in counts.items() if op not in VIEW_OPS)
    return OpCount(matmuls, kernels, counts)


@dataclass
class LayerCost:
    """What one forward pass of an FFN or MoE layer over a batch costs, by instruments that do not move.

    Attributes:
        flops: floating-point operations of the forward pass (``torch.utils.flop_counter``: the matrix
            products, 2 per multiply-add).
        weight_bytes: every weight the layer holds, in bytes of its dtype.
        read_bytes: the weights this pass reads: the router, the shared expert and every routed expert that
            received at least one token (at a large batch, all of them).
        matmuls: separate matrix products when the experts run one after another (3 per SwiGLU expert that
            received a token, 1 for the router, 3 for the shared expert): the launches a grouped kernel merges.
        moved_bytes: token vectors copied to their experts and their outputs copied back (2 per routed slot,
            ``d_model`` numbers each); a dense layer moves none. Across devices this is the all-to-all.
        rows: tokens per expert matrix product, on average (a dense layer: every token).
    """

    flops: int
    weight_bytes: int
    read_bytes: int
    matmuls: int
    moved_bytes: int
    rows: float


@torch.no_grad()
def layer_cost(layer: nn.Module, x: torch.Tensor) -> LayerCost:
    """``LayerCost`` of ``layer`` (a bias-free gated ``FFN`` or a token-choice ``MoE``) on ``x`` ``(N, d_model)``."""
    from helpers.costs import measure_flops

    validate.float_tensor("x", x, min_dims=2)
    layer = layer.eval()
    size = x.element_size()
    flops = measure_flops(lambda: layer(x))
    weight_bytes = sum(p.numel() for p in layer.parameters()) * size
    n = x.shape[0]
    if isinstance(layer, FFN):
        matrices = 3 if layer.gated else 2
        return LayerCost(flops, weight_bytes, weight_bytes, matrices, 0, float(n))
    if not isinstance(layer, MoE):
        raise TypeError(f"layer must be an FFN or an MoE, got {type(layer).__name__}")
    routing = layer.route(x)
    used = routing.tokens_per_expert() > 0
    expert = sum(p.numel() for p in layer.experts[0].parameters()) * size
    shared = sum(p.numel() for p in layer.shared.parameters()) * size if layer.shared is not None else 0
    router = layer.router.weight.numel() * size
    matrices = 3 if layer.experts[0].gated else 2
    hit = int(used.sum())
    slots = int(routing.expert_index.numel())
    return LayerCost(flops, weight_bytes, router + shared + hit * expert,
                     matrices * hit + 1 + (matrices if layer.shared is not None else 0),
                     2 * slots * x.shape[-1] * size, slots / max(hit, 1))


# ----------------------------------------------------------------------------- configurations
def expert_combinations(n_experts: int, top_k: int, granularity: int = 1, n_shared: int = 0) -> int:
    """Sets of routed experts one token can use: ``C(m·N − s, m·k − s)`` (DeepSeekMoE's count)."""
    m = validate.positive_int("granularity", granularity)
    n, k = validate.positive_int("n_experts", n_experts), validate.int_in_range("top_k", top_k, 1, n_experts)
    s = validate.non_negative_int("n_shared", n_shared)
    if s >= m * k:
        raise ValueError(f"n_shared={s} must leave at least one routed choice (at most m·k − 1 = {m * k - 1})")
    return math.comb(m * n - s, m * k - s)


# ----------------------------------------------------------------------------- figures
def curves_figure(runs: Sequence[SeedRuns], colors: Sequence[str] | None = None, title: str = "",
                  styles: Sequence[str] | None = None):
    """Training-loss curves: the mean over seeds as a line, the band from the lowest to the highest seed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, r in enumerate(runs):
        color = None if colors is None else colors[i % len(colors)]
        style = "-" if styles is None else styles[i % len(styles)]
        steps = torch.arange(1, r.curves.shape[1] + 1).numpy()
        line, = ax.plot(steps, r.curves.mean(0).numpy(), color=color, ls=style, lw=1.8,
                        label=f"{r.name} ({r.curves.shape[0]} seeds)")
        ax.fill_between(steps, r.curves.min(0).values.numpy(), r.curves.max(0).values.numpy(),
                        color=line.get_color(), alpha=0.18)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("answer cross-entropy on the training facts\n(nats, log scale)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def balancing_figure(runs: Sequence[SeedRuns], seed_index: int = 0, colors: Sequence[str] | None = None):
    """Routing over training, one column per run: one seed's share of the tokens per expert and step
    (experts numbered as in the code, 0 to E − 1), above the busiest expert's load over the mean load
    (mean over seeds, band from the lowest to the highest seed)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(runs), figsize=(3.3 * len(runs), 6.2), squeeze=False, sharey="row",
                             gridspec_kw={"height_ratios": [1.1, 1]}, layout="constrained")
    shares = [r.loads[:, seed_index].double() / r.loads[:, seed_index].sum(-1, keepdim=True).double()
              for r in runs]
    vmax = max(float(s.max()) for s in shares)
    top = max(float(r.max_over_mean().max()) for r in runs)
    for col, (r, share) in enumerate(zip(runs, shares)):
        ax = axes[0, col]
        im = ax.imshow(share.T.numpy(), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=vmax,
                       interpolation="nearest", extent=(0.5, share.shape[0] + 0.5, -0.5, share.shape[1] - 0.5))
        ax.grid(False)
        ax.set_title(f"{r.name}\n(seed {r.seeds[seed_index]})", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_yticks(range(share.shape[1]))
        if col == 0:
            ax.set_ylabel("expert index")
        mom = r.max_over_mean()
        ax = axes[1, col]
        color = None if colors is None else colors[col % len(colors)]
        steps = torch.arange(1, mom.shape[0] + 1).numpy()
        line, = ax.plot(steps, mom.mean(1).numpy(), color=color, lw=1.6, label=f"mean of {mom.shape[1]} seeds")
        ax.fill_between(steps, mom.min(1).values.numpy(), mom.max(1).values.numpy(), color=line.get_color(),
                        alpha=0.2, label="lowest to highest seed")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0.9, top * 1.05)
        ax.set_xlabel("training step")
        if col == 0:
            ax.set_ylabel("busiest expert's load / mean load\n(1 = even)")
            ax.legend(frameon=False, fontsize=8)
    fig.colorbar(im, ax=axes[0, :].tolist(), shrink=0.9, label="share of the step's tokens")
    return fig


def configuration_figure(d_model: int, n_experts: int, top_k: int, d_ff: int, granularity: int, n_shared: int,
                         granularities: Sequence[int] = (1, 2, 4, 8, 16)):
    """DeepSeekMoE's knobs on one layer: sets of routed experts per token against the granularity m (left), and
    parameters and FLOPs per token at the chosen ``(m, s)`` relative to the plain layer (right)."""
    import matplotlib.pyplot as plt

    from helpers.moe import moe_layer_cost

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.1, 1]})
    shown = sorted({*granularities, granularity})
    for s, style in ((0, "-"), (n_shared, "--")) if n_shared else ((0, "-"),):
        ms = [m for m in shown if s < m * top_k and d_ff % m == 0]
        left.plot(ms, [expert_combinations(n_experts, top_k, m, s) for m in ms], style, marker="o",
                  color="#0072B2" if s == 0 else "#D55E00", label=f"s = {s} shared")
    chosen_sets = expert_combinations(n_experts, top_k, granularity, n_shared)
    left.plot([granularity], [chosen_sets], "o", ms=13, mfc="none", mec="black",
              label=f"m = {granularity}, s = {n_shared}: {chosen_sets:,} sets" if chosen_sets < 10**7
              else f"m = {granularity}, s = {n_shared}: {chosen_sets:.1e} sets")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks(shown, [str(m) for m in shown])
    left.set_xlabel("granularity m (each expert cut into m)")
    left.set_ylabel("sets of routed experts per token")
    left.set_title(f"N = {n_experts} experts of width {d_ff}, top-{top_k}: choices grow with m")
    left.legend(frameon=False, fontsize=9)
    base = moe_layer_cost(d_model, n_experts, top_k, d_ff)
    chosen = moe_layer_cost(d_model, n_experts, top_k, d_ff, granularity=granularity, n_shared=n_shared)
    rows = [("total parameters", base.total_params, chosen.total_params),
            ("active parameters", base.active_params, chosen.active_params),
            ("FLOPs per token", base.flops_per_token, chosen.flops_per_token)]
    ys = list(range(len(rows)))[::-1]
    ratios = [b / a for _, a, b in rows]
    right.barh(ys, ratios, color="#009E73", height=0.55)
    right.axvline(1.0, color="grey", ls="--", lw=1)
    for y, (label, a, b), r in zip(ys, rows, ratios):
        right.text(0.03, y, f"{a:,} → {b:,}  ({r:.3f}×)", va="center", ha="left", color="white", fontsize=9.5)
    right.set_yticks(ys, [label for label, _, _ in rows])
    right.set_xlim(0, max(1.25, 1.1 * max(ratios)))
    right.set_xlabel("relative to the plain layer (m = 1, s = 0)")
    right.set_title(f"m = {granularity}, s = {n_shared}: only the router grows")
    right.grid(axis="y", visible=False)
    fig.tight_layout()
    return fig
