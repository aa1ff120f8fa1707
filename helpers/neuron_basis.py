r"""Is a trained FFN's neuron basis special? The key–value reading tested against a random basis.

Notebook 02, section 10. ``FFN(x) = Σ_i m_i v_i + b2`` (``m = φ(W1 x + b1)``, ``v_i = W2[:, i]``) holds for
every FFN: it is ``W2 m`` written column by column. The output is just as well a sum over any other basis of the
hidden space: for an orthogonal ``Q`` (``d_ff × d_ff``) the *pseudo-units* with coefficients ``m' = Q m`` and
values ``V' = W2 Qᵀ`` give ``V' m' = W2 m``, the same output, but no activation function acts on them and they
have no keys. A test of the reading "unit i checks its key and writes its value" says something only where
these pseudo-units could come out differently from the neurons.

For fact ``n`` of a table (key ``k_n``, value ``v_n``, ``helpers.width.random_facts``) and unit ``i``,
``c[n, i] = m_i(k_n) (v_i · v_n) / |v_n|²`` is the share of ``v_n`` that unit ``i`` writes (``writes_along``);
a fact is *recalled* when the output lies closer to ``v_n`` than to any other value of the table. The tests:

* **necessity** (``knockout``): zero each fact's ``k`` largest writers along its value (per fact), in the
  neuron basis, in a random orthogonal basis, and ``k`` random neurons as the floor;
* **sufficiency** (``keep_only``): keep only each fact's ``k`` largest writers, zero every other unit;
* **selectivity** (``switched_on``, ``towards_when_on``): how many facts switch each neuron on (pre-activation
  above 0), and, of the units a fact switches on (weighted by how strongly), how many write towards its value;
  the control is the same FFN before training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers import validate
from helpers.ffn import FFN
from helpers.stats import PairedDifference, paired_difference
from helpers.width import init_ffn, random_facts


@dataclass
class Units:
    """An FFN's output on a table, split into units: ``coefficients @ values.T + bias``.

    coefficients: ``(n_facts, d_ff)``, one row per fact (``m`` for neurons, ``m Qᵀ`` rotated);
    values: ``(d_model, d_ff)``, column ``i`` is unit ``i``'s value (``W2`` for neurons, ``W2 Qᵀ``);
    bias: ``(d_model,)``, ``b2``.
    """

    coefficients: torch.Tensor
    values: torch.Tensor
    bias: torch.Tensor

    def output(self, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``(n_facts, d_model)``: the output with the units where ``keep`` (bool, like ``coefficients``) is False
        zeroed, fact by fact; every unit when ``keep`` is None."""
        m = self.coefficients if keep is None else self.coefficients.masked_fill(~keep, 0.0)
        return m @ self.values.T + self.bias


def neuron_units(ffn: FFN, keys: torch.Tensor) -> Units:
    """The neurons of a dense ``ffn`` (with biases) on ``keys`` ``(n_facts, d_model)``, computed in float64 (a
    float32 forward pass rounds differently from one CPU kernel to another; float64 makes ties and signs stable)."""
    validate.float_tensor("keys", keys, last_dim=ffn.d_model)
    with torch.no_grad():
        w1, b1 = ffn.w1.weight.double(), ffn.w1.bias.double()
        m = ffn.act(keys.double() @ w1.T + b1)
        return Units(m, ffn.w2.weight.double().clone(), ffn.w2.bias.double().clone())


def random_rotation(n: int, seed: int) -> torch.Tensor:
    """A random orthogonal ``(n, n)`` float64 matrix, uniform over rotations and reflections (QR of a Gaussian matrix
    with the signs of R's diagonal moved into Q), from a seeded generator."""
    validate.positive_int("n", n)
    validate.non_negative_int("seed", seed)
    g = torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    return q * torch.sign(torch.diagonal(r))


def rotated(units: Units, q: torch.Tensor) -> Units:
    """Pseudo-units ``m' = Q m``, ``V' = W2 Qᵀ``: the same output (``V' m' = W2 m``), another basis."""
    d_ff = units.coefficients.shape[1]
    if q.shape != (d_ff, d_ff):
        raise ValueError(f"q must be ({d_ff}, {d_ff}), got {tuple(q.shape)}")
    q = q.to(units.coefficients.dtype)
    return Units(units.coefficients @ q.T, units.values @ q.T, units.bias)


def writes_along(units: Units, targets: torch.Tensor) -> torch.Tensor:
    """``(n_facts, d_ff)``: ``c[n, i]``, the share of ``targets[n]`` (fact n's value) that unit ``i`` writes."""
    targets = targets.to(units.values.dtype)
    return units.coefficients * (targets @ units.values) / targets.pow(2).sum(dim=1, keepdim=True)


def recall(out: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of facts whose output ``out[n]`` lies closer to ``targets[n]`` than to any other target."""
    targets = targets.to(out.dtype)
    return (torch.cdist(out, targets).argmin(dim=1) == torch.arange(len(targets))).float().mean().item()


def top_writers(c: torch.Tensor, k: int) -> torch.Tensor:
    """Bool ``(n_facts, d_ff)``: True at each fact's ``k`` largest ``c[n, i]``."""
    validate.int_in_range("k", k, 1, c.shape[1])
    return torch.zeros_like(c, dtype=torch.bool).scatter(1, c.topk(k, dim=1).indices, True)


def random_writers(shape: tuple[int, int], k: int, seed: int) -> torch.Tensor:
    """Bool ``shape``: True at ``k`` random units per fact (a seeded generator)."""
    order = torch.rand(shape, generator=torch.Generator().manual_seed(seed)).argsort(dim=1)
    return torch.zeros(shape, dtype=torch.bool).scatter(1, order[:, :k], True)


def switched_on(ffn: FFN, keys: torch.Tensor) -> torch.Tensor:
    """``(n_facts, d_ff)`` bool: which units each fact's key switches on (pre-activation ``k_i·x + b1_i > 0``,
    computed in float64)."""
    with torch.no_grad():
        return keys.double() @ ffn.w1.weight.double().T + ffn.w1.bias.double() > 0


def towards_when_on(ffn: FFN, keys: torch.Tensor, targets: torch.Tensor) -> float:
    """Of the (fact, unit) pairs where the fact switches the unit on, the share where the unit writes towards the
    fact's value (``c[n, i] > 0``), each pair weighted by how strongly the unit is on (its coefficient
    ``m[n, i]``: a barely-on unit writes almost nothing): 1 if every switched-on unit wrote its facts' values,
    about ½ by chance."""
    on = switched_on(ffn, keys)
    units = neuron_units(ffn, keys)
    c = writes_along(units, targets)
    weight = units.coefficients.clamp(min=0) * on
    return ((weight * (c > 0)).sum() / weight.sum().clamp(min=1e-300)).item()


@dataclass
class BasisTests:
    """The tests of the module docstring over seeds (index ``s`` of every list or row is ``seeds[s]``).

    knockout[basis], keep_only[basis]: ``(len(ks), n_seeds)`` recall with each fact's ``k`` largest writers zeroed /
    with only them kept; ``basis`` is ``"neurons"``, ``"rotated"`` (a random orthogonal basis) or ``"random
    neurons"`` (k random neurons per fact). intact: recall with nothing zeroed. on_share[state]: ``(n_seeds,
    d_ff)`` share of facts that switch each neuron on, ``state`` ``"trained"`` or ``"untrained"`` (the same FFN
    before training); towards[state]: ``(n_seeds,)`` ``towards_when_on``.
    """

    d_ff: int
    n_facts: int
    ks: list[int]
    seeds: list[int]
    intact: list[float]
    knockout: dict[str, torch.Tensor]
    keep_only: dict[str, torch.Tensor]
    on_share: dict[str, torch.Tensor]
    towards: dict[str, torch.Tensor]

    def mean(self, test: str, basis: str, k: int) -> float:
        """Mean over seeds of ``knockout`` or ``keep_only`` recall for ``basis`` at ``k``."""
        table = getattr(self, validate.one_of("test", test, ("knockout", "keep_only")))
        return table[basis][self.ks.index(k)].mean().item()

    def family(self, k_knockout: int = 1, k_keep: int = 8) -> dict[str, PairedDifference]:
        """The section's comparisons, paired by seed (each "A − B"), for ``helpers.stats.holm_table``."""
        i, j = self.ks.index(k_knockout), self.ks.index(k_keep)
        ko, keep, on = self.knockout, self.keep_only, self.on_share
        return {
            f"top {k_knockout} zeroed: neurons − random ones": paired_difference(ko["neurons"][i],
                                                                                  ko["random neurons"][i]),
            f"top {k_knockout} zeroed: neurons − rotated": paired_difference(ko["neurons"][i], ko["rotated"][i]),
            f"top {k_keep} kept: neurons − rotated": paired_difference(keep["neurons"][j], keep["rotated"][j]),
            "facts per unit: trained − untrained": paired_difference(on["trained"].mean(dim=1),
                                                                     on["untrained"].mean(dim=1)),
            "towards v_n: trained − untrained": paired_difference(self.towards["trained"], self.towards["untrained"]),
        }


def lookup_table_ffn(keys: torch.Tensor, values: torch.Tensor) -> FFN:
    """A hand-built FFN that stores a table as separate lookups: the positive control of the tests.

    keys: ``(n_facts, d_model)``, values: ``(n_facts, d_model)``. Unit ``n`` (ReLU, ``d_ff = n_facts``) has key
    ``k_n`` scaled, and a bias that puts its threshold halfway between ``k_n · k_n`` and the largest ``k_n · k_j``
    of another key, so only fact ``n`` switches it on (with ``m = 1``); its value is ``v_n``; ``b2 = 0``. A key that
    another key outscores on its own unit (``k_n · k_j >= k_n · k_n``; see ``outscored``) cannot be stored along
    ``k_n``: its unit is silenced (key 0, bias -1), so every unit passes its own key or none.
    """
    validate.float_tensor("keys", keys, min_dims=2)
    n, d_model = keys.shape
    if keys.dim() != 2 or values.shape != keys.shape:
        raise ValueError(f"keys and values must both be (n_facts, d_model), got {tuple(keys.shape)} and "
                         f"{tuple(values.shape)}")
    gram = keys @ keys.T
    own = gram.diag()
    other = gram.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).max(dim=1).values if n > 1 else own - 2
    threshold = (own + other) / 2
    silent = other >= own                                  # outscored: no threshold along k_n passes k_n alone
    scale = torch.where(silent, 0.0, 1 / (own - threshold).clamp_min(1e-3))   # m = 1 on the unit's own key
    ffn = FFN(d_model, n, activation="relu").eval()
    with torch.no_grad():
        ffn.w1.weight.copy_(keys * scale[:, None])
        ffn.w1.bias.copy_(torch.where(silent, -1.0, -threshold * scale))
        ffn.w2.weight.copy_(values.T)
        ffn.w2.bias.zero_()
    return ffn


def outscored(keys: torch.Tensor) -> torch.Tensor:
    """``(n_facts,)`` bool: key ``n`` is outscored on its own direction, ``max_{j != n} k_n · k_j >= k_n · k_n``.

    keys: ``(n_facts, d_model)``. Such a key cannot switch on a ReLU unit along ``k_n`` without another key doing so.
    """
    validate.float_tensor("keys", keys, min_dims=2)
    gram = keys @ keys.T
    others = gram.masked_fill(torch.eye(len(keys), dtype=torch.bool), float("-inf"))
    return others.max(dim=1).values >= gram.diag()


def basis_tests(ffns: Sequence[FFN], seeds: Sequence[int], *, n_facts: int = 256,
                ks: Sequence[int] = (1, 2, 4, 8, 16, 32)) -> BasisTests:
    """Run every test on trained FFNs of one width, FFN ``s`` on its own table ``random_facts(n_facts, d_model,
    seeds[s])`` (``helpers.width``: ``memorisation_sweep(...).ffns[d_ff]`` or ``load_ffns()``).

    The rotation for seed ``s`` is ``random_rotation(d_ff, 1000 + s)``; the random neurons come from seed ``s``;
    the untrained FFN is ``init_ffn(d_model, d_ff, s)``, the one training started from.
    """
    if not ffns or len(ffns) != len(seeds):
        raise ValueError(f"ffns and seeds must be non-empty and of one length, got {len(ffns)} and {len(seeds)}")
    d_model, d_ff = ffns[0].d_model, ffns[0].d_ff
    ks = [validate.int_in_range("k", k, 1, d_ff) for k in ks]
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    names = ("neurons", "rotated", "random neurons")
    knockout = {b: torch.zeros(len(ks), len(seeds), dtype=torch.float64) for b in names}
    keep_only = {b: torch.zeros(len(ks), len(seeds), dtype=torch.float64) for b in names}
    on_share = {s: torch.zeros(len(seeds), d_ff, dtype=torch.float64) for s in ("trained", "untrained")}
    towards = {s: torch.zeros(len(seeds), dtype=torch.float64) for s in ("trained", "untrained")}
    intact = []
    for s, (ffn, seed) in enumerate(zip(ffns, seeds)):
        keys, targets = random_facts(n_facts, d_model, seed)
        before = init_ffn(d_model, d_ff, seed).eval()
        neurons = neuron_units(ffn, keys)
        bases = {"neurons": neurons, "rotated": rotated(neurons, random_rotation(d_ff, 1000 + seed))}
        writes = {b: writes_along(u, targets) for b, u in bases.items()}
        intact.append(recall(neurons.output(), targets))
        for i, k in enumerate(ks):
            masks = {b: top_writers(c, k) for b, c in writes.items()}
            masks["random neurons"] = random_writers(tuple(writes["neurons"].shape), k, seed)
            for b, mask in masks.items():
                units = bases.get(b, neurons)
                knockout[b][i, s] = recall(units.output(keep=~mask), targets)
                keep_only[b][i, s] = recall(units.output(keep=mask), targets)
        for state, model in (("trained", ffn), ("untrained", before)):
            on_share[state][s] = switched_on(model, keys).double().mean(dim=0)
            towards[state][s] = towards_when_on(model, keys, targets)
    return BasisTests(d_ff, n_facts, ks, seeds, intact, knockout, keep_only, on_share, towards)


_STYLE = {"neurons": ("#0072B2", "o-"), "rotated": ("#D55E00", "s--"), "random neurons": ("0.5", "^:")}
_LABEL = {"neurons": "neurons (top writers)", "rotated": "random orthogonal basis (top writers)",
          "random neurons": "random neurons"}


def basis_tests_figure(tests: BasisTests, steps: int | None = None, control: BasisTests | None = None):
    """Three panels: recall with each fact's top-k writers zeroed, recall with only them kept (mean over seeds,
    every basis), and the share of facts that switch each neuron on, trained against untrained. ``steps``
    (optional): the training steps, named in the title. ``control`` (optional): the same tests, same ``ks``, of
    the lookup tables (``lookup_table_ffn``), its neurons drawn in black on the first two panels. Returns the figure (not shown)."""
    import matplotlib.pyplot as plt

    fig, (ax_ko, ax_keep, ax_on) = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, table, title in ((ax_ko, tests.knockout, "Necessary? Zero each fact's top k writers"),
                             (ax_keep, tests.keep_only, "Sufficient? Keep only each fact's top k writers")):
        for basis, rows in table.items():
            color, style = _STYLE[basis]
            ax.plot(tests.ks, 100 * rows.mean(dim=1), style, color=color, lw=2, ms=5, label=_LABEL[basis])
        if control is not None:
            if list(control.ks) != list(tests.ks):
                raise ValueError(f"control must use the same ks as tests, got {control.ks} and {tests.ks}")
            rows = getattr(control, "knockout" if ax is ax_ko else "keep_only")["neurons"]
            ax.plot(tests.ks, 100 * rows.mean(dim=1), "D-", color="black", lw=1.5, ms=4, mfc="white",
                    label=f"lookup table's neurons (top writers, of {control.d_ff})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(tests.ks, [str(k) for k in tests.ks])
        ax.xaxis.set_minor_formatter(lambda v, _: "")
        ax.set(ylim=(-3, 103), xlabel=f"k (of {tests.d_ff} units)", ylabel="facts recalled (%)", title=title)
    fig.legend(*ax_ko.get_legend_handles_labels(), fontsize=9, loc="lower center", ncol=4, frameon=False,
               bbox_to_anchor=(0.36, -0.01))
    bins = torch.linspace(0, 1, 26)
    for state, color, kind in (("untrained", "0.7", "stepfilled"), ("trained", "#0072B2", "step")):
        ax_on.hist(tests.on_share[state].flatten().numpy(), bins=bins.numpy(), color=color, histtype=kind, lw=2,
                   label=f"{state} (all {len(tests.seeds)} seeds)")
    ax_on.axvline(1 / tests.n_facts, color="#D55E00", ls=":", lw=2, label="a detector of one fact")
    ax_on.set(xlabel="share of the facts that switch the unit on", ylabel="units",
              title="Selective? Facts per unit")
    ax_on.set_ylim(0, 1.4 * ax_on.get_ylim()[1])               # room for the legend above the bars
    ax_on.legend(fontsize=9, loc="upper right")
    trained = "trained" if steps is None else f"trained {steps} steps"
    fig.suptitle(f"Tests of the key–value reading: FFNs of {tests.d_ff} units {trained} on {tests.n_facts} facts, "
                 f"mean of {len(tests.seeds)} seeds", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 1))                 # room for the shared legend below
    return fig


def writers_figure(neurons: Units, pseudo: Units, targets: torch.Tensor, fact: int = 0):
    """What every unit writes along one fact's value, ``c[fact, i]`` sorted, for the neurons and for pseudo-units of
    a random orthogonal basis (the same output). Returns the figure (not shown)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.4))
    for units, basis in ((neurons, "neurons"), (pseudo, "rotated")):
        c = writes_along(units, targets)[fact].sort(descending=True).values
        color, style = _STYLE[basis]
        ax.plot(range(len(c)), c.numpy(), style[0] + "-", color=color, ms=3, lw=1, label=_LABEL[basis].split(" (")[0])
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xlabel=f"unit, sorted by what it writes (all {neurons.coefficients.shape[1]})",
           ylabel=f"c[{fact}, i]: share of v_{fact} written",
           title=f"Fact {fact}: what each unit writes along v_{fact}")
    ax.legend(fontsize=9)
    return fig
