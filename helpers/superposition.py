r"""The toy model of superposition (Elhage et al. 2022), small enough to train many copies at once.

``n`` features ``x ∈ [0, 1]^n`` are sparse: each is 0 with probability ``S`` (the sparsity) and uniform on
``[0, 1]`` otherwise, independently. They are squeezed into ``m < n`` dimensions and read back out:

    h  = W x                 (m,)    W: (m, n); column i is the direction given to feature i
    x' = ReLU(Wᵀ h + b)      (n,)    the same W reads the features back; b: (n,)

and trained to minimise ``Σ_i I_i (x_i − x'_i)²`` with importances ``I_i = decay**i`` (feature 0 matters
most). With dense features (``S = 0``) the best the model can do is give its ``m`` dimensions to the ``m``
most important features and drop the rest, like PCA. With sparse features it pays to give *more* features a
direction than there are dimensions, accepting some interference between them (the ReLU and a negative bias
filter most of it out, because two features are rarely active together): that is **superposition**.

What is read off the trained ``W`` (Elhage et al.'s quantities):

* ``feature_norms``: ``‖W_i‖``, about 1 for a feature that has a direction, about 0 for a dropped one;
* ``interference``: ``Σ_{j≠i} (Ŵ_i·W_j)²``, how much the other features lie along feature i's direction;
* ``dimensions_per_feature``: ``m / ‖W‖_F²``, 1 when each represented feature has a dimension of its own,
  ½ for antipodal pairs, lower still as more features share the space.

``train_toy_models`` trains every (sparsity, seed) pair side by side as one batched model: copies with the
same seed start from the same weights at every sparsity (so sparsities can be compared seed by seed), and
each copy draws its own data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers import validate
from helpers.progress import progress as progress_bar

__all__ = ["ToyModels", "train_toy_models", "train_toy_with", "feature_norms", "interference", "dimensions_per_feature",
           "feature_dimensionality",
           "toy_hidden", "best_cosines", "random_cosine_median", "planted_features", "planted_pairs", "PHASES",
           "phase_diagram", "load_phase", "make_phase"]


@dataclass
class ToyModels:
    """Toy models trained side by side: instance ``i`` has sparsity ``sparsity[i]`` and seed ``seed[i]``.

    Attributes:
        W: ``(I, m, n)`` each instance's weights; ``W[i][:, j]`` is feature j's direction.
        b: ``(I, n)`` each instance's output bias.
        sparsity: ``(I,)`` the probability that a feature is 0.
        seed: ``(I,)`` the seed of its initial weights (shared by the copies of one seed).
        importance: ``(n,)`` the loss weight of each feature.
        losses: ``(steps, I)`` each instance's loss at each step (on that step's fresh batch).
    """

    W: torch.Tensor
    b: torch.Tensor
    sparsity: torch.Tensor
    seed: torch.Tensor
    importance: torch.Tensor
    losses: torch.Tensor

    def index(self, sparsity: float, seed: int) -> int:
        """The instance trained with ``sparsity`` (matched to 1e-9) and ``seed``."""
        hits = ((self.sparsity - sparsity).abs() < 1e-9) & (self.seed == seed)
        if not hits.any():
            raise ValueError(f"no instance with sparsity={sparsity!r} and seed={seed!r}; sparsities "
                             f"{sorted(set(self.sparsity.tolist()))}, seeds {sorted(set(self.seed.tolist()))}")
        return int(hits.nonzero()[0, 0])

    def at(self, sparsity: float) -> torch.Tensor:
        """``(n_seeds,)`` instance indices of one sparsity, in seed order."""
        rows = ((self.sparsity - sparsity).abs() < 1e-9).nonzero()[:, 0]
        if rows.numel() == 0:
            raise ValueError(f"no instance with sparsity={sparsity!r}")
        return rows[self.seed[rows].argsort()]


def train_toy_models(n_features: int = 20, n_hidden: int = 5, sparsities: Sequence[float] = (0.0, 0.7, 0.9, 0.99),
                     seeds: Sequence[int] = range(5), *, importance_decay: float = 0.9, steps: int = 1000,
                     batch_size: int = 256, lr: float = 1e-2, dtype: torch.dtype = torch.float64,
                     progress: bool = True, train_seeds: Sequence[int] | None = None) -> ToyModels:
    """Train one toy model per (sparsity, seed), all in one batched loop (AdamW, fresh data every step).

    Initial weights are Xavier-normal from ``torch.Generator().manual_seed(seed)``, the same for every sparsity
    of a seed; the data of all instances come from one generator seeded with ``min(seeds)``. Deterministic on a
    given machine; in float64 (the default) also the same on every CPU kernel to many digits, which float32's
    vectorised kernels do not give after many steps. Returns a ``ToyModels`` with ``len(sparsities) · len(seeds)``
    instances, sparsity-major. ``train_seeds`` (a subset of ``seeds``): train only those seeds' copies, on the
    data the full run would give them (the batch of every seed is still drawn), so a seed-0 check reproduces the
    seed 0 of the full run at a fraction of its cost.
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    validate.int_in_range("n_hidden", n_hidden, 1, max(1, validate.positive_int("n_features", n_features) - 1))
    validate.positive_int("steps", steps)
    validate.positive_int("batch_size", batch_size)
    validate.positive_float("lr", lr)
    validate.probability("importance_decay", importance_decay, allow_one=True)
    sparsities = [validate.probability("sparsity", s) for s in sparsities]
    seeds = [validate.non_negative_int("seed", s) for s in seeds]
    if not sparsities or not seeds:
        raise ValueError("sparsities and seeds must each have at least one entry")
    train_seeds = seeds if train_seeds is None else list(train_seeds)
    if not train_seeds or any(s not in seeds for s in train_seeds):
        raise ValueError(f"train_seeds must be a non-empty subset of seeds {seeds}, got {train_seeds}")
    n_sparsities, n_drawn = len(sparsities), len(sparsities) * len(seeds)
    kept = torch.tensor([s in train_seeds for s in seeds]).repeat(n_sparsities)     # (I_all,): instances trained
    sparsity = torch.tensor(sparsities).repeat_interleave(len(seeds))[kept]        # (I,)
    seed = torch.tensor(seeds).repeat(n_sparsities)[kept]                          # (I,)
    std = (2.0 / (n_features + n_hidden)) ** 0.5
    start = torch.stack([torch.randn(n_hidden, n_features, generator=torch.Generator().manual_seed(s)) * std
                         for s in seeds]).to(dtype)                                  # (n_seeds, m, n)
    W = start.repeat(n_sparsities, 1, 1)[kept].clone().requires_grad_()             # (I, m, n)
    b = torch.zeros(len(sparsity), n_features, dtype=dtype, requires_grad=True)     # (I, n)
    importance = importance_decay ** torch.arange(n_features, dtype=dtype)          # (n,)
    keep = (1.0 - sparsity)[:, None, None].to(dtype)                                # P(feature is on)
    gen = torch.Generator().manual_seed(min(seeds))
    opt = torch.optim.AdamW([W, b], lr=lr)
    losses = []
    for _ in progress_bar(range(steps), desc="toy models", disable=not progress):
        u = torch.rand((n_drawn, batch_size, n_features), generator=gen, dtype=dtype)[kept]   # (I, B, n)
        x = torch.where(u < keep, u / keep, 0.0)           # on with probability 1 - S, then uniform on [0, 1)
        out = torch.relu(torch.bmm(torch.bmm(x, W.transpose(1, 2)), W) + b[:, None, :])    # (I, B, n)
        loss = (importance * (x - out) ** 2).mean(dim=1).sum(-1)                            # (I,)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
        losses.append(loss.detach())
    return ToyModels(W.detach(), b.detach(), sparsity, seed, importance, torch.stack(losses))


def train_toy_with(forward, sparsity: float, seed: int = 0, n_features: int = 20, n_hidden: int = 5,
                   steps: int = 1000) -> torch.Tensor | str:
    """Train one toy model with a learner's ``forward(W, b, x, importance) -> (x_hat, loss)`` (notebook 09's
    Exercise 6) in place of the course's, with ``train_toy_models``' recipe: the same Xavier start, AdamW at
    rate 0.01, 256 fresh inputs a step drawn as ``train_toy_models(sparsities=[sparsity], seeds=[seed])`` draws
    them, importance 0.9^i, float64. Returns the trained ``W`` ``(n_hidden, n_features)``, or a sentence saying
    why it could not train (a loss autograd cannot differentiate)."""
    sparsity = validate.probability("sparsity", sparsity)
    gen_w = torch.Generator().manual_seed(validate.non_negative_int("seed", seed))
    std = (2.0 / (n_features + n_hidden)) ** 0.5
    W = (torch.randn(n_hidden, n_features, generator=gen_w) * std).double().requires_grad_()
    b = torch.zeros(n_features, dtype=torch.float64, requires_grad=True)
    importance = 0.9 ** torch.arange(n_features, dtype=torch.float64)
    keep, gen = 1.0 - sparsity, torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW([W, b], lr=1e-2)
    with torch.enable_grad():
        for _ in range(steps):
            u = torch.rand((1, 256, n_features), generator=gen, dtype=torch.float64)[0]
            x = torch.where(u < keep, u / keep, 0.0)
            loss = forward(W, b, x, importance)[1]
            if not (torch.is_tensor(loss) and loss.requires_grad and loss.numel() == 1):
                return ("the loss must be a 1-element tensor that autograd can differentiate (do not turn it into a "
                        "Python float with float() or .item()), so the training can call loss.backward().")
            opt.zero_grad(set_to_none=True)
            loss.reshape(()).backward()
            opt.step()
    return W.detach()


def feature_norms(W: torch.Tensor) -> torch.Tensor:
    """``‖W_i‖`` for every feature: ``(..., m, n) -> (..., n)``."""
    validate.float_tensor("W", W, min_dims=2)
    return W.norm(dim=-2)


def interference(W: torch.Tensor) -> torch.Tensor:
    """``Σ_{j≠i} (Ŵ_i·W_j)²`` for every feature i (``Ŵ_i`` = W_i / ‖W_i‖): ``(..., m, n) -> (..., n)``.

    0 when no other feature has a component along feature i's direction; a dropped feature (``‖W_i‖ ≈ 0``)
    counts as 0.
    """
    validate.float_tensor("W", W, min_dims=2)
    norms = W.norm(dim=-2, keepdim=True)                                     # (..., 1, n)
    unit = W / norms.clamp_min(1e-6)
    overlap = unit.transpose(-1, -2) @ W                                     # (..., n, n): Ŵ_i · W_j
    overlap = overlap - torch.diag_embed(torch.diagonal(overlap, dim1=-2, dim2=-1))
    return (overlap ** 2).sum(dim=-1) * (norms[..., 0, :] > 1e-6)


def dimensions_per_feature(W: torch.Tensor) -> torch.Tensor:
    """``m / ‖W‖_F²``: ``(..., m, n) -> (...)``. 1 = a dimension per represented feature; ½ = antipodal pairs."""
    validate.float_tensor("W", W, min_dims=2)
    return W.shape[-2] / (W ** 2).sum(dim=(-2, -1))


def feature_dimensionality(W: torch.Tensor) -> torch.Tensor:
    """Elhage et al.'s (2022) dimensionality of each feature, ``D_i = ‖W_i‖² / Σ_j (Ŵ_i · W_j)²``
    (``Ŵ_i = W_i / ‖W_i‖``, the sum over all j including i): ``(..., m, n) -> (..., n)``. 1 for a feature with a
    dimension to itself, ½ for one of an antipodal pair, 2/5 for one of a pentagon; 0 for a column of zeros."""
    validate.float_tensor("W", W, min_dims=2)
    norms = W.norm(dim=-2)                                                        # (..., n)
    unit = W / norms.clamp_min(1e-12).unsqueeze(-2)
    overlap = (unit.transpose(-2, -1) @ W) ** 2                                   # (..., n, n): (Ŵ_i · W_j)²
    return torch.where(norms > 0, norms ** 2 / overlap.sum(-1).clamp_min(1e-300), torch.zeros_like(norms))


def toy_hidden(W: torch.Tensor, sparsity: float, n: int, seed: int = 0) -> torch.Tensor:
    """``(n, m)``: the hidden vectors ``h = W x`` of ``n`` inputs drawn as the toy model's training data is
    (each feature 0 with probability ``sparsity``, else uniform on [0, 1]), keeping only inputs with at least
    one feature on. ``W``: ``(m, n_features)``, one model's weights."""
    validate.float_tensor("W", W, min_dims=2)
    validate.positive_int("n", n)
    sparsity = validate.probability("sparsity", sparsity)
    gen = torch.Generator().manual_seed(validate.non_negative_int("seed", seed))
    kept: list[torch.Tensor] = []
    while sum(len(k) for k in kept) < n:
        shape = (4 * n, W.shape[1])
        x = torch.rand(shape, generator=gen) * (torch.rand(shape, generator=gen) >= sparsity)
        kept.append(x[(x > 0).any(1)])
    return torch.cat(kept)[:n].to(W.dtype) @ W.T


def best_cosines(true: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
    """For every true direction (column of ``true (m, n)``), its largest cosine with any column of
    ``found (m, F)``: ``(n,)``. 1 means a found direction points exactly along the true one."""
    validate.float_tensor("true", true, min_dims=2)
    validate.float_tensor("found", found, min_dims=2)
    if true.shape[0] != found.shape[0]:
        raise ValueError(f"true (m, n) and found (m, F) must have the same m, got {tuple(true.shape)} and "
                         f"{tuple(found.shape)}")
    unit = torch.nn.functional.normalize
    return (unit(true, dim=0).T @ unit(found, dim=0)).max(dim=1).values


def random_cosine_median(d: int, grid: int = 100_000) -> float:
    """The median |cos| between two independent, uniformly random unit vectors in ``d >= 2`` dimensions: the
    overlap scale that features placed at random would show. Exact up to the quadrature (the cosine has density
    proportional to (1 − t²)^((d − 3)/2) on [−1, 1]); in 5 dimensions about 0.35, in 48 about 0.10."""
    if not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    t = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid                 # midpoints on [0, 1]
    density = (1 - t * t) ** ((d - 3) / 2)
    cdf = density.cumsum(0) / density.sum()
    return float(t[int(torch.searchsorted(cdf, torch.tensor(0.5, dtype=torch.float64)))])


def mean_squared_cosine(units: torch.Tensor) -> float:
    """The mean cos² over all pairs of the unit columns of ``units`` (d, N): how much N directions overlap."""
    gram = units.T @ units
    off = ~torch.eye(gram.shape[0], dtype=torch.bool)
    return float((gram[off] ** 2).mean())


def frame_bound(n: int, m: int) -> float:
    """The least possible mean cos² over pairs of ``n`` unit vectors in ``m`` dimensions (Welch's bound,
    reached by a tight frame): (n − m) / (m (n − 1)), 0 when n <= m. Random directions average 1/m."""
    if n < 2 or m < 1:
        raise ValueError(f"need n >= 2 and m >= 1, got n={n}, m={m}")
    return max(n - m, 0) / (m * (n - 1))


def planted_features(n_true: int = 96, d: int = 48, n_rows: int = 1345, mean_on: float = 4.0,
                     seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Data with known features in superposition, at a real layer's width: ``n_true`` random unit directions in
    ``d`` dimensions (``n_true > d`` puts them in superposition); in each of ``n_rows`` rows each feature is on
    with probability ``mean_on / n_true``, with a size uniform on [0, 1].

    Returns ``(X, T)``: ``X (n_rows, d)`` float64, the rows ``Σ_i size_i T[:, i]``; ``T (d, n_true)`` float64, the
    planted directions (what a dictionary should recover, ``best_cosines(T, W_dec)``)."""
    n_true, d, n_rows = (validate.positive_int(name, v) for name, v in (("n_true", n_true), ("d", d),
                                                                       ("n_rows", n_rows)))
    mean_on = validate.positive_float("mean_on", mean_on)
    if mean_on > n_true:
        raise ValueError(f"mean_on must be at most n_true ({n_true}), got {mean_on}")
    gen = torch.Generator().manual_seed(100 + validate.non_negative_int("seed", seed))
    T = torch.nn.functional.normalize(torch.randn(d, n_true, generator=gen, dtype=torch.float64), dim=0)
    on = torch.rand(n_rows, n_true, generator=gen, dtype=torch.float64) < mean_on / n_true
    sizes = torch.rand(n_rows, n_true, generator=gen, dtype=torch.float64)
    return (on * sizes) @ T.T, T


def planted_pairs(n_true: int = 96, d: int = 48, n_rows: int = 1345, mean_on: float = 4.0,
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input-output pairs with known key-value features, for a transcoder: feature ``i`` has a random unit key
    ``K[:, i]`` in the input and an independent random unit value ``V[:, i]`` in the output; in each row it is on
    with probability ``mean_on / n_true``, with a size uniform on [0, 1] shared by both sides.

    Returns ``(X, Y, V)``: ``X, Y (n_rows, d)`` float64, the rows ``Σ_i size_i K[:, i]`` and ``Σ_i size_i V[:, i]``;
    ``V (d, n_true)`` float64, the planted values (what a transcoder's decoder should recover)."""
    n_true, d, n_rows = (validate.positive_int(name, v) for name, v in (("n_true", n_true), ("d", d),
                                                                       ("n_rows", n_rows)))
    mean_on = validate.positive_float("mean_on", mean_on)
    if mean_on > n_true:
        raise ValueError(f"mean_on must be at most n_true ({n_true}), got {mean_on}")
    gen = torch.Generator().manual_seed(200 + validate.non_negative_int("seed", seed))
    K, V = (torch.nn.functional.normalize(torch.randn(d, n_true, generator=gen, dtype=torch.float64), dim=0)
            for _ in range(2))
    on = torch.rand(n_rows, n_true, generator=gen, dtype=torch.float64) < mean_on / n_true
    A = on * torch.rand(n_rows, n_true, generator=gen, dtype=torch.float64)
    return A @ K.T, A @ V.T, V


PHASES = ("not represented", "superposed", "own dimension")


def phase_diagram(importances: Sequence[float], densities: Sequence[float], seeds: Sequence[int] = range(3), *,
                  steps: int = 2000, lr: float = 1e-2, eval_size: int = 20_000) -> torch.Tensor:
    """Elhage et al.'s phase change in the smallest toy: 2 features, 1 dimension (``W`` is ``(1, 2)``), feature 0
    of importance 1, feature 1 of importance ``r``, both on with probability ``density`` (= 1 − S). Every
    (density, r, seed) is trained side by side (AdamW, 256 fresh inputs a step, float64); per (density, r) the seed
    with the lowest loss on ``eval_size`` fresh inputs is kept and its feature 1 classified by the columns'
    lengths: ``‖W_1‖ < 0.5`` not represented (0), both ``≥ 0.5`` superposed (1, they share the one dimension,
    pointing opposite ways), ``‖W_0‖ < 0.5 ≤ ‖W_1‖`` its own dimension (2). Returns ``(len(densities),
    len(importances))`` int64 codes, indices into ``PHASES``."""
    validate.positive_int("steps", steps)
    grid = [(d, r, s) for d in densities for r in importances for s in seeds]
    density = torch.tensor([validate.probability("density", d, allow_one=True) for d, _, _ in grid], dtype=torch.float64)
    importance = torch.stack([torch.tensor([1.0, validate.positive_float("importance", r)], dtype=torch.float64)
                              for _, r, _ in grid])                                  # (I, 2)
    W = torch.stack([torch.randn(1, 2, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
                     for _, _, s in grid]).requires_grad_()                          # (I, 1, 2)
    b = torch.zeros(len(grid), 2, dtype=torch.float64, requires_grad=True)
    gen, opt = torch.Generator().manual_seed(0), torch.optim.AdamW([W, b], lr=lr)

    def loss_on(batch: int) -> torch.Tensor:
        u = torch.rand((len(grid), batch, 2), generator=gen, dtype=torch.float64)
        x = torch.where(u < density[:, None, None], u / density[:, None, None], 0.0)
        out = torch.relu(torch.bmm(torch.bmm(x, W.transpose(1, 2)), W) + b[:, None, :])
        return (importance[:, None, :] * (x - out) ** 2).mean(dim=1).sum(-1)          # (I,)

    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_on(256).sum().backward()
        opt.step()
    with torch.no_grad():
        final = loss_on(eval_size).reshape(len(densities), len(importances), len(seeds))
        norms = W.detach()[:, 0, :].abs().reshape(len(densities), len(importances), len(seeds), 2)
    best = final.argmin(-1, keepdim=True)                                             # (D, R, 1)
    n0, n1 = (norms[..., j].gather(-1, best)[..., 0] for j in (0, 1))                 # (D, R) each
    return torch.where(n1 < 0.5, 0, torch.where(n0 >= 0.5, 1, 2))


#: Where ``python -m helpers.superposition --phase`` writes the phase diagram notebook 09 draws.
PHASE_PATH = Path(__file__).parent / "data" / "phase_diagram.json"
PHASE_IMPORTANCES = tuple(round(10 ** (e / 4), 4) for e in range(-4, 5))   # 0.1 to 10, 9 steps
PHASE_DENSITIES = tuple(round(10 ** (e / 4), 4) for e in range(-8, 1))     # 0.01 to 1, 9 steps


def make_phase(path: Path = PHASE_PATH) -> dict:
    """Run ``phase_diagram`` on the shipped grid (3 seeds, 2,000 steps; ~12 s of one core) and write it."""
    torch.set_num_threads(1)
    codes = phase_diagram(PHASE_IMPORTANCES, PHASE_DENSITIES)
    result = {"made_by": "python -m helpers.superposition --phase", "importances": list(PHASE_IMPORTANCES),
              "densities": list(PHASE_DENSITIES), "phases": list(PHASES), "codes": codes.tolist()}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load_phase(path: Path = PHASE_PATH) -> dict:
    """The shipped phase diagram (see ``make_phase``): ``codes[i][j]`` at ``densities[i]``, ``importances[j]``."""
    return json.loads(Path(path).read_text())


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="notebook 09's shipped toy results")
    parser.add_argument("--phase", action="store_true", help="write helpers/data/phase_diagram.json")
    if parser.parse_args().phase:
        make_phase()
