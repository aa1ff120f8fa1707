r"""Gated FFNs: the gate's gradient, what they save for backward, and a matched-parameter comparison.

A gated unit multiplies two projections of the same input,
``h = φ(a) · b`` with ``a = W1 x`` (the gate, through φ) and ``b = W3 x``
(the content, linear). Its derivatives couple the two branches::

    ∂h/∂b = φ(a)           the content branch learns only as much as the gate is open
    ∂h/∂a = φ'(a) · b      the gate learns only as much as there is content to pass

``compare_variants`` trains the course's ``TinyGPT`` once per (variant, seed)
with nothing else changed (same data, same full batch every step, same
optimiser, same seed → same attention and embedding initialisation) and
records the answer-token loss along the way, for a comparison in the spirit
of Shazeer (2020), Table 1 (``SHAZEER_2020_65K`` with its run-to-run standard
deviations ``SHAZEER_2020_65K_SD``, and ``SHAZEER_2020_524K``).
``pairwise_gaps`` puts every gap between two of the paper's variants next to its noise (a t statistic
beside the 5 % critical value of ``helpers.stats.t_critical``).
``saved_activation_names`` says which tensors autograd keeps for one FFN.

Notebook 04's race (8 variants × 30 seeds, about 4 min of CPU on one core: too long for a notebook) is
stored in ``RACE_RESULTS_PATH`` and read back with ``load_race``. The file is made by::

    python -m helpers.gating --race-results          # RACE_SETTINGS, seeds 0-29, all 8 variants

(``--seeds``, ``--variants``, ``--steps`` and ``--out`` make a smaller run; the tests make one).
The same seed on another CPU kernel (``ATEN_CPU_CAPABILITY``) gives curves within about 0.02 nats.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.activations import ACTIVATIONS, get_activation
from helpers.facts import FactDataset, load_facts, make_dataset
from helpers.ffn import FFN, VARIANTS
from helpers.transformer import GPTConfig, TinyGPT, train_lm
from helpers.progress import progress as progress_bar
from helpers.costs import torch_threads
from helpers.stats import t_critical

#: Shazeer (2020), Table 1: held-out log-perplexity on C4 (T5 base, d_model 768,
#: d_ff 3072 dense / 2048 gated, no biases) after 65,536 training steps: the mean
#: of four runs per variant (facts sheet of COURSE_DESIGN.md).
SHAZEER_2020_65K: dict[str, float] = {
    "relu": 1.997, "gelu": 1.983, "swish": 1.994, "glu": 1.982,
    "bilinear": 1.960, "geglu": 1.942, "swiglu": 1.944, "reglu": 1.953,
}
#: The standard deviation between those four runs (the numbers in parentheses in Table 1).
SHAZEER_2020_65K_SD: dict[str, float] = {
    "relu": 0.005, "gelu": 0.005, "swish": 0.003, "glu": 0.006,
    "bilinear": 0.005, "geglu": 0.004, "swiglu": 0.010, "reglu": 0.003,
}
#: The same table after 524,288 steps: no standard deviation is given for this column.
SHAZEER_2020_524K: dict[str, float] = {
    "relu": 1.677, "gelu": 1.679, "swish": 1.683, "glu": 1.663,
    "bilinear": 1.648, "geglu": 1.633, "swiglu": 1.636, "reglu": 1.645,
}

def gate_gradients(a: torch.Tensor, b: torch.Tensor, grad_h: torch.Tensor,
                   activation: str = "silu") -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients reaching the two branches of ``h = φ(a) · b`` (by autograd).

    Args:
        a: gate pre-activations ``W1 x``, shape ``(...)`` (a 0-dim tensor too).
        b: content values ``W3 x``, same shape.
        grad_h: the gradient arriving at ``h`` from above, same shape.
        activation: φ, a name from ``helpers.activations.ACTIVATIONS`` (``"silu"``: SwiGLU).

    Returns:
        ``(grad_a, grad_b) = (grad_h · φ'(a) · b, grad_h · φ(a))``, each of shape ``(...)``.
        Works the same inside ``torch.no_grad()`` or with autograd switched off.
    """
    validate.float_tensor("a", a, min_dims=0)
    validate.float_tensor("b", b, min_dims=0)
    validate.float_tensor("grad_h", grad_h, min_dims=0)
    if not a.shape == b.shape == grad_h.shape:
        raise ValueError(f"a, b and grad_h must have the same shape, got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(grad_h.shape)}")
    phi = get_activation(validate.one_of("activation", activation, ACTIVATIONS))
    with torch.inference_mode(False), torch.enable_grad():    # whatever the caller's autograd state
        a = a.detach().clone().requires_grad_(True)
        b = b.detach().clone().requires_grad_(True)
        h = phi(a) * b
        grad_a, grad_b = torch.autograd.grad(h, (a, b), grad_outputs=grad_h.detach())
    return grad_a, grad_b


@torch.no_grad()
def answer_loss(model: nn.Module, data: FactDataset) -> float:
    """Mean cross-entropy (nats) of the answer token over every fact in ``data``.

    The prompt words are a template the model learns in a few steps; the answer
    (e.g. the capital) is the part that has to be *stored*. Leaves ``model`` in
    eval mode.
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    model.eval()
    device = next(model.parameters()).device
    logits = model(data.ids.to(device))                        # (N, T, vocab)
    rows = torch.arange(len(data), device=device)
    answer_logits = logits[rows, data.answer_pos.to(device)]   # (N, vocab)
    return F.cross_entropy(answer_logits, data.answer_id.to(device)).item()


@dataclass
class VariantComparison:
    """Results of ``compare_variants``.

    Attributes:
        variants, seeds: what was trained (every variant with every seed).
        Use ``final`` (the loss after the last step) or ``run_mean`` (the loss averaged
        over the run) per variant, and ``paired_difference`` to compare two variants seed by seed.
        eval_steps: the optimisation steps at which the answer loss was measured (0 = at initialisation).
        curves: variant -> ``(n_seeds, n_evals)`` answer loss at ``eval_steps``.
        ffn_params: variant -> parameters of one FFN block.
        model_params: variant -> parameters of the whole model.
        d_ff: variant -> hidden width.
        settings: how the runs were made (``compare_variants``' keyword arguments, the relation trained
            on, the torch version); empty when not recorded.
    """

    variants: list[str]
    seeds: list[int]
    eval_steps: list[int]
    curves: dict[str, torch.Tensor] = field(default_factory=dict)
    ffn_params: dict[str, int] = field(default_factory=dict)
    model_params: dict[str, int] = field(default_factory=dict)
    d_ff: dict[str, int] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def select(self, seeds: Sequence[int]) -> "VariantComparison":
        """The same comparison restricted to ``seeds`` (in that order), e.g. the first three of ten."""
        if isinstance(seeds, (str, int)) or len(seeds) == 0:
            raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
        rows = []
        for s in seeds:
            if s not in self.seeds:
                raise ValueError(f"seed {s!r} was not run; seeds run: {self.seeds}")
            rows.append(self.seeds.index(s))
        index = torch.tensor(rows)
        return VariantComparison(list(self.variants), list(seeds), list(self.eval_steps),
                                 {v: c[index] for v, c in self.curves.items()}, dict(self.ffn_params),
                                 dict(self.model_params), dict(self.d_ff), dict(self.settings))

    def final(self, variant: str) -> torch.Tensor:
        """``(n_seeds,)`` answer loss after the last step."""
        return self.curves[validate.one_of("variant", variant, self.variants)][:, -1]

    def run_mean(self, variant: str) -> torch.Tensor:
        """``(n_seeds,)`` answer loss averaged over every evaluation of the run (the area under the curve)."""
        return self.curves[validate.one_of("variant", variant, self.variants)].mean(dim=1)


def compare_variants(data: FactDataset, variants: Sequence[str], seeds: Sequence[int] = (0, 1, 2), *,
                     d_model: int = 24, n_layers: int = 1, n_heads: int = 2, bias: bool = False,
                     steps: int = 100, lr: float = 1e-2, eval_every: int = 5,
                     num_threads: int | None = 1, progress: bool = True) -> VariantComparison:
    """Train one ``TinyGPT`` per (variant, seed) on ``data`` and record the answer loss.

    Everything but the FFN variant is held fixed: full-batch AdamW on the same
    rows every step, ``steps`` steps at ``lr``; the model is built right after
    ``torch.manual_seed(seed)``. Dense variants get ``d_ff = 4·d_model``, gated
    ones the parameter-matched ``int(2·4·d_model/3)``.

    Args:
        data: the training facts (also the evaluation set: see ``answer_loss``).
        variants: names from ``helpers.ffn.VARIANTS``. seeds: one run per seed and variant.
        eval_every: measure the answer loss every this many steps (and at step 0).
        num_threads: torch threads while training (``None``: unchanged). These matrices
            are tiny, so one thread is as fast as two and gives the same numbers on any machine.
        progress: one tqdm bar over the runs.
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    if isinstance(variants, str) or len(variants) == 0:
        raise ValueError(f"variants must be a non-empty list of variant names, got {variants!r}")
    for v in variants:
        validate.one_of("variants entry", v, VARIANTS)
    if isinstance(seeds, (str, int)) or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    for s in seeds:
        validate.non_negative_int("seeds entry", s)
    validate.positive_int("steps", steps)
    validate.int_in_range("eval_every", eval_every, 1, steps)
    result = VariantComparison(list(variants), list(seeds), [0] + list(range(eval_every, steps + 1, eval_every)))
    result.settings = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, bias=bias, steps=steps, lr=lr,
                           eval_every=eval_every)
    runs = [(v, s) for v in variants for s in seeds]
    with torch_threads(num_threads):
        for variant, seed in progress_bar(runs, desc="variant × seed runs", disable=not progress):
            torch.manual_seed(seed)
            config = GPTConfig(len(data.vocab), d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                               max_len=data.ids.shape[1], variant=variant, bias=bias)
            model = TinyGPT(config)
            curve = [answer_loss(model, data)]

            def on_step(step: int, m: nn.Module, loss: float) -> None:
                if (step + 1) % eval_every == 0:
                    curve.append(answer_loss(m, data))
                    m.train()

            train_lm(model, data.ids, data.targets, steps=steps, lr=lr, seed=seed, progress=False,
                     on_step=on_step)
            result.curves.setdefault(variant, []).append(curve)
            ffn = model.blocks[0].ffn
            result.ffn_params[variant] = ffn.param_count()
            result.model_params[variant] = sum(p.numel() for p in model.parameters())
            result.d_ff[variant] = ffn.d_ff
    result.curves = {v: torch.tensor(c) for v, c in result.curves.items()}
    return result


# ---------------------------------------------------------------- notebook 04's race, stored
#: The race of notebook 04: the capital facts, a one-block model, 100 full-batch AdamW steps.
RACE_RELATION = "capital"
RACE_SETTINGS: dict = dict(d_model=24, n_layers=1, n_heads=2, bias=False, steps=100, lr=5e-3, eval_every=5)
RACE_VARIANTS: tuple[str, ...] = ("relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu")
RACE_SEEDS: tuple[int, ...] = tuple(range(30))
#: Where ``python -m helpers.gating --race-results`` writes the race and ``load_race`` reads it.
RACE_RESULTS_PATH = Path(__file__).parent / "data" / "gating_race.json"
_DIGITS = 5       # losses are stored to 1e-5 nats: far below what another CPU kernel changes (~1e-2)


def race_data(relation: str = RACE_RELATION) -> FactDataset:
    """The facts the race trains on (and scores): one relation of the course's fact table."""
    return make_dataset(load_facts(relations=[relation]))


def run_race(variants: Sequence[str] = RACE_VARIANTS, seeds: Sequence[int] = RACE_SEEDS, *,
             relation: str = RACE_RELATION, progress: bool = True, **overrides) -> VariantComparison:
    """``compare_variants`` on ``race_data(relation)`` with ``RACE_SETTINGS`` (``overrides`` replace some)."""
    unknown = set(overrides) - set(RACE_SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: {sorted(RACE_SETTINGS)}")
    result = compare_variants(race_data(relation), variants, seeds, progress=progress,
                              **{**RACE_SETTINGS, **overrides})
    result.settings["relation"] = relation
    return result


def save_race(result: VariantComparison, path: str | Path) -> Path:
    """Write ``result`` as JSON (losses rounded to 1e-5 nats), with the settings and the machine it ran on."""
    if not isinstance(result, VariantComparison):
        raise TypeError(f"result must be a VariantComparison, got {type(result).__name__}")
    path = Path(path)
    record = {
        "made_by": "python -m helpers.gating --race-results",
        "settings": result.settings,
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        "threads": 1},
        "variants": result.variants, "seeds": result.seeds, "eval_steps": result.eval_steps,
        "d_ff": result.d_ff, "ffn_params": result.ffn_params, "model_params": result.model_params,
        "answer_loss": {v: [[round(float(x), _DIGITS) for x in row] for row in result.curves[v].tolist()]
                        for v in result.variants},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def load_race(path: str | Path | None = None) -> VariantComparison:
    """Read a race written by ``save_race`` (default: the stored race of notebook 04, ``RACE_RESULTS_PATH``)."""
    path = RACE_RESULTS_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no race results at {path}; make them with python -m helpers.gating --race-results")
    record = json.loads(path.read_text(encoding="utf-8"))
    curves = {v: torch.tensor(record["answer_loss"][v], dtype=torch.float64) for v in record["variants"]}
    return VariantComparison(record["variants"], record["seeds"], record["eval_steps"], curves,
                             record["ffn_params"], record["model_params"], record["d_ff"],
                             {**record["settings"], "environment": record["environment"]})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m helpers.gating --race-results``: run notebook 04's race and store it."""
    parser = argparse.ArgumentParser(prog="python -m helpers.gating", description=main.__doc__)
    parser.add_argument("--race-results", action="store_true", required=True,
                        help="train every (variant, seed) of the race and write the answer-loss curves")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(RACE_SEEDS), help="default: 0 to 29")
    parser.add_argument("--variants", nargs="+", default=list(RACE_VARIANTS), choices=sorted(VARIANTS),
                        help="default: the 8 variants of the notebook")
    parser.add_argument("--steps", type=int, default=RACE_SETTINGS["steps"],
                        help=f"training steps per run (default {RACE_SETTINGS['steps']})")
    parser.add_argument("--out", default=str(RACE_RESULTS_PATH), help=f"default: {RACE_RESULTS_PATH}")
    args = parser.parse_args(argv)
    overrides = {"steps": args.steps}
    if args.steps < RACE_SETTINGS["eval_every"]:
        overrides["eval_every"] = args.steps
    result = run_race(args.variants, args.seeds, **overrides)
    print(f"wrote {len(args.variants)} variants × {len(args.seeds)} seeds to {save_race(result, args.out)}")
    return 0



@dataclass
class Gap:
    """One pair of variants, ordered by their mean (``better`` has the lower loss).

    ``se`` is the standard error of the difference of two means of ``n_runs`` runs each,
    ``sqrt(sd_better² + sd_worse²) / sqrt(n_runs)``; ``t = gap / se``; ``df = 2·(n_runs - 1)``.
    """

    better: str
    worse: str
    gap: float          # worse mean - better mean (>= 0)
    se: float           # standard error of that difference
    df: int             # degrees of freedom of the two-sample t statistic

    @property
    def t(self) -> float:
        """The gap in standard errors of the difference."""
        return self.gap / self.se

    def critical(self) -> float:
        """``t_{0.975, df}``, the two-sided 5 % threshold."""
        return t_critical(self.df)

    def resolved(self, threshold: float | None = None) -> bool:
        """The gap exceeds ``threshold`` standard errors (default: the 5 % critical t for ``df``)."""
        return self.t > (self.critical() if threshold is None else threshold)


def pairwise_gaps(means: dict[str, float], sds: dict[str, float], n_runs: int = 4) -> list[Gap]:
    """Every pair of keys, each gap measured in standard errors of the difference.

    ``means`` are means of ``n_runs`` runs and ``sds`` the standard deviations between those runs
    (Shazeer's Table 1: four runs at 65,536 steps). The noise on a difference of two such means is
    ``sqrt(sd_a² + sd_b²) / sqrt(n_runs)``; a gap whose ``t`` stays below the 5 % critical value
    (2.447 for 4 + 4 runs) is not a ranking. Returns the ``n·(n-1)/2`` pairs, keys taken in order of
    their means (ties keep the order of ``means``), the better one first.

    Judge *all* pairs, not a chain of neighbours: two neighbours can each be unresolved while the ends
    of the chain are far apart. With many pairs, about one in twenty unrelated ones passes the 5 % test
    by chance (1.4 of 28 for eight variants): say how many were made.
    """
    keys = list(means)
    if len(keys) < 2:
        raise ValueError(f"means must have at least two entries, got {len(keys)}")
    if not isinstance(n_runs, int) or isinstance(n_runs, bool) or not n_runs >= 2:
        raise ValueError(f"n_runs must be an int of at least 2, got {n_runs!r}")
    missing = [k for k in keys if k not in sds]
    if missing:
        raise ValueError(f"sds lacks {missing}")
    for k in keys:
        if not sds[k] > 0:
            raise ValueError(f"sds[{k!r}] must be positive, got {sds[k]!r}")
    order = sorted(keys, key=lambda k: means[k])
    return [Gap(a, b, means[b] - means[a], math.sqrt(sds[a] ** 2 + sds[b] ** 2) / math.sqrt(n_runs),
                2 * (n_runs - 1))
            for i, a in enumerate(order) for b in order[i + 1:]]


def saved_activation_names(ffn: FFN, x: torch.Tensor) -> list[str]:
    """Name every activation autograd keeps for the backward pass of ``ffn(x)``.

    Names: ``x`` (the input), ``a`` (``W1 x``), ``b`` (``W3 x``, gated only), ``φ(a)``,
    and ``h`` for the tensor entering ``W2`` when it is a new one (the product
    ``φ(a)·b`` of a gated FFN). A tensor saved by two operations is listed once;
    the weights are left out. For Bilinear, ``φ(a)`` is ``a`` itself.

    Args:
        ffn: a ``helpers.ffn.FFN``. x: ``(..., d_model)`` input (give it ``requires_grad``
            to see what flows back to earlier layers).
    """
    if not isinstance(ffn, FFN):
        raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    params = {p.untyped_storage().data_ptr() for p in ffn.parameters()}
    caught: dict[str, torch.Tensor] = {}
    saved: list[torch.Tensor] = []

    def keep_output(name: str):
        def hook(module, inputs, output):
            caught[name] = output
        return hook

    def keep_input(module, inputs):
        caught["h"] = inputs[0]

    handles = [ffn.w1.register_forward_hook(keep_output("a")), ffn.w2.register_forward_pre_hook(keep_input)]
    if ffn.w3 is not None:
        handles.append(ffn.w3.register_forward_hook(keep_output("b")))
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            ffn(x)
    finally:
        for handle in handles:
            handle.remove()
    ptr = {name: t.untyped_storage().data_ptr() for name, t in caught.items()}
    ptr["x"] = x.untyped_storage().data_ptr()
    names, seen = [], set()
    for t in saved:
        p = t.untyped_storage().data_ptr()
        if p in params or p in seen:
            continue
        seen.add(p)
        if p == ptr["x"]:
            names.append("x")
        elif p == ptr["a"]:
            names.append("a = φ(a)" if ffn.activation_name == "identity" else "a")
        elif p == ptr.get("b"):
            names.append("b")
        elif p == ptr["h"]:
            names.append("h = φ(a)·b" if ffn.gated else "φ(a)")
        else:
            names.append("φ(a)")
    order = ["x", "a", "a = φ(a)", "φ(a)", "b", "h = φ(a)·b"]
    return sorted(names, key=order.index)


if __name__ == "__main__":
    raise SystemExit(main())
