r"""Verdicts over seeds: is a difference between two training recipes larger than the seed-to-seed noise?

Every notebook that trains judges its results the same way (COURSE_DESIGN.md, "How a claim is made"):

* **Paired** (``paired_difference``): both recipes ran with the same seeds, so everything but the change
  starts the same. The differences ``d_s = a_s - b_s`` have mean ``d̄`` and standard error
  ``se = sd(d) / sqrt(n)``; ``t = d̄ / se`` on ``n - 1`` degrees of freedom.
* **Unpaired** (``welch``): two independent groups of runs, possibly of different sizes and spreads.
  ``se = sqrt(s_a²/n_a + s_b²/n_b)``, ``t = (ā - b̄) / se``, with Welch–Satterthwaite degrees of freedom
  ``df = se⁴ / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1))`` (not an integer in general).

A difference is called **resolved** when ``|t|`` exceeds the two-sided 5 % critical value ``t_critical(df)``
(4.303 for 3 paired seeds, 2.776 for 5, 2.262 for 10). A paired verdict also asks for the same sign in every
seed unless ``every_seed=False``; that condition makes it far stricter as seeds grow (``null_verdict_rate``).
With many comparisons, about one in twenty unrelated ones passes by chance: say how many were made.

``t_critical`` inverts Student's t distribution numerically (no scipy): the CDF is the regularised incomplete
beta function, evaluated by its continued fraction, and the quantile is found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers import validate

__all__ = ["t_cdf", "t_critical", "PairedDifference", "paired_difference", "null_verdict_rate", "Welch", "welch"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), for ``x < (a+1)/(a+b+2)``."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """``P(T ≤ t)`` for Student's t with ``df > 0`` degrees of freedom (``df`` may be fractional)."""
    validate.positive_float("df", df)
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_critical(df: float, level: float = 0.05) -> float:
    """The two-sided critical value ``t_{1-level/2, df}``: a difference is resolved when ``|t|`` exceeds it.

    ``t_critical(2) = 4.303``, ``t_critical(4) = 2.776``, ``t_critical(9) = 2.262``; ``df`` may be fractional
    (Welch). Found by bisection on ``t_cdf`` to better than 1e-9.
    """
    validate.positive_float("df", df)
    validate.positive_float("level", level)
    if not level < 1:
        raise ValueError(f"level must be below 1, got {level!r}")
    target = 1.0 - level / 2.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < target else (lo, mid)
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def _as_runs(name: str, values: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """One float64 value per run, as a 1-D tensor."""
    if not isinstance(values, torch.Tensor):
        try:
            values = torch.tensor([float(v) for v in values], dtype=torch.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a 1-D tensor or sequence of numbers (one per run)") from None
    validate.float_tensor(name, values)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"{name} must be 1-D with one entry per run, got shape {tuple(values.shape)}")
    return values.double()


@dataclass
class PairedDifference:
    """Recipe minus baseline, seed by seed (within a seed everything but the change starts the same).

    Attributes:
        diffs: ``(n_seeds,)`` the differences (negative: the recipe's value is lower).
        mean: their mean. se: the standard error of that mean, ``sd / sqrt(n_seeds)``
            (``nan`` for a single seed). lower: in how many seeds the recipe is lower.
    """

    diffs: torch.Tensor
    mean: float
    se: float
    lower: int

    @property
    def n(self) -> int:
        return int(self.diffs.numel())

    @property
    def df(self) -> int:
        """Degrees of freedom of the paired t statistic, ``n_seeds - 1``."""
        return self.n - 1

    @property
    def t(self) -> float:
        """The paired t statistic ``mean / se`` (``nan`` for a single seed or no spread)."""
        return self.mean / self.se if self.n > 1 and math.isfinite(self.se) and self.se > 0 else float("nan")

    def critical(self) -> float:
        """``t_{0.975, n-1}``, the two-sided 5 % threshold for ``|t|`` (``nan`` for a single seed)."""
        return t_critical(self.df) if self.df >= 1 else float("nan")

    def verdict(self, threshold: float | None = None, every_seed: bool = True) -> str:
        """``"lower"`` or ``"higher"`` when ``|t|`` exceeds ``threshold`` (default: the two-sided 5 % critical
        value for ``n_seeds - 1`` degrees of freedom) and, with ``every_seed`` (the default), the sign is the
        same in every seed; otherwise ``"not resolved"``.

        The sign condition alone passes with probability ``2**(1 - n)`` when nothing differs, so with it the
        rule's false-positive rate is at most ``min(5 %, 2**(1 - n))``: about 5 % at 3 seeds, 0.2 % at 10, and
        it grows stricter (and less powerful) with every seed. ``every_seed=False`` is the plain paired t test,
        5 % at every seed count (``null_verdict_rate`` measures both)."""
        if threshold is not None:
            validate.positive_float("threshold", threshold)
        if self.n < 2 or not math.isfinite(self.t):
            return "not resolved"
        limit = self.critical() if threshold is None else threshold
        all_lower = self.lower == self.n
        all_higher = self.lower == 0 and bool((self.diffs > 0).all())
        if -self.t > limit and (all_lower or not every_seed):
            return "lower"
        if self.t > limit and (all_higher or not every_seed):
            return "higher"
        return "not resolved"


def null_verdict_rate(n_seeds: int, every_seed: bool = True, draws: int = 20_000, seed: int = 0) -> float:
    """How often ``PairedDifference.verdict(every_seed=...)`` reaches a verdict when nothing differs.

    Simulated: ``draws`` sets of ``n_seeds`` paired differences drawn from one normal distribution centred on 0
    (a seeded float64 generator). Multiply by the number of comparisons for the verdicts expected by chance."""
    validate.positive_int("draws", draws)
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 2:
        raise ValueError(f"n_seeds must be an int >= 2, got {n_seeds!r}")
    diffs = torch.randn(draws, n_seeds, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    t = diffs.mean(dim=1) / (diffs.std(dim=1) / math.sqrt(n_seeds))
    passed = t.abs() > t_critical(n_seeds - 1)
    if every_seed:
        passed &= (diffs < 0).all(dim=1) | (diffs > 0).all(dim=1)
    return passed.double().mean().item()


def paired_difference(values: torch.Tensor | Sequence[float],
                      baseline: torch.Tensor | Sequence[float]) -> PairedDifference:
    """Seed-by-seed ``values - baseline`` for two ``(n_seeds,)`` tensors (or lists) of the same seeds."""
    values, baseline = _as_runs("values", values), _as_runs("baseline", baseline)
    if values.shape != baseline.shape:
        raise ValueError(f"values and baseline must have the same length (one entry per seed), got "
                         f"{values.numel()} and {baseline.numel()}")
    diffs = values - baseline
    n = diffs.numel()
    se = diffs.std().item() / math.sqrt(n) if n > 1 else float("nan")
    return PairedDifference(diffs, diffs.mean().item(), se, int((diffs < 0).sum()))


@dataclass
class Welch:
    """Welch's unpaired comparison of two groups of runs, ``a - b``.

    Attributes:
        diff: ``mean(a) - mean(b)``. se: its standard error ``sqrt(s_a²/n_a + s_b²/n_b)``.
        df: Welch–Satterthwaite degrees of freedom (fractional). n_a, n_b: runs per group.
    """

    diff: float
    se: float
    df: float
    n_a: int
    n_b: int

    @property
    def t(self) -> float:
        """``diff / se`` (``nan`` when neither group varies)."""
        return self.diff / self.se if self.se > 0 else float("nan")

    def critical(self) -> float:
        """The two-sided 5 % critical value for ``df`` (``nan`` when undefined)."""
        return t_critical(self.df) if math.isfinite(self.df) and self.df > 0 else float("nan")

    def verdict(self) -> str:
        """``"lower"`` / ``"higher"`` (a below / above b) when ``|t|`` exceeds the critical value, else
        ``"not resolved"``."""
        t, crit = self.t, self.critical()
        if not (math.isfinite(t) and math.isfinite(crit)) or abs(t) <= crit:
            return "not resolved"
        return "lower" if t < 0 else "higher"


def welch(a: torch.Tensor | Sequence[float], b: torch.Tensor | Sequence[float]) -> Welch:
    """Welch's t for two independent groups of runs (each at least two runs)."""
    a, b = _as_runs("a", a), _as_runs("b", b)
    if a.numel() < 2 or b.numel() < 2:
        raise ValueError(f"a and b need at least two runs each, got {a.numel()} and {b.numel()}")
    va, vb = a.var().item() / a.numel(), b.var().item() / b.numel()
    se = math.sqrt(va + vb)
    denom = va * va / (a.numel() - 1) + vb * vb / (b.numel() - 1)
    df = (va + vb) ** 2 / denom if denom > 0 else float("nan")
    return Welch(a.mean().item() - b.mean().item(), se, df, a.numel(), b.numel())
