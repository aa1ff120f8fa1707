r"""Verdicts over seeds: is a difference between two training recipes larger than the seed-to-seed noise?

Every notebook that trains judges its results the same way (COURSE_DESIGN.md, "How a claim is made"):

* **Paired** (``paired_difference``): both recipes ran with the same seeds, so everything but the change
  starts the same. The differences ``d_s = a_s - b_s`` have mean ``d̄`` and standard error
  ``se = sd(d) / sqrt(n)``; ``t = d̄ / se`` on ``n - 1`` degrees of freedom.
* **Unpaired** (``welch``): two independent groups of runs, possibly of different sizes and spreads.
  ``se = sqrt(s_a²/n_a + s_b²/n_b)``, ``t = (ā - b̄) / se``, with Welch–Satterthwaite degrees of freedom
  ``df = se⁴ / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1))`` (not an integer in general).

**One verdict rule for the whole course.** A section reads a *family* of comparisons (every difference it
states); ``holm`` judges them together with Holm's step-down at 5 %, two-sided: sort the comparisons by their
p-value, compare the smallest with ``5 % / m``, the next with ``5 % / (m - 1)``, ... and stop at the first that
fails; it and every later one are "not resolved". In t terms, the comparison of rank ``j`` must pass
``|t| > t_critical(df, 0.05 / (m - j + 1))``, its *Holm threshold* (``holm_table`` prints it beside ``t`` and how
many seeds point each way). A family of one is the plain t test: ``|t|`` above ``t_critical(df)`` (4.303 for 3
paired seeds, 2.776 for 5, 2.262 for 10). "Resolved" means exactly this, nothing stricter or looser. Holm keeps
the chance of any false verdict in the family at 5 % or less, whatever the comparisons' correlation, and never
resolves fewer than Bonferroni (every comparison at ``5 % / m``).

``t_critical`` inverts Student's t distribution numerically (no scipy): the CDF is the regularised incomplete
beta function, evaluated by its continued fraction, and the quantile is found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from helpers import validate

__all__ = ["t_cdf", "t_critical", "p_value", "PairedDifference", "paired_difference", "null_verdict_rate", "interval",
           "Welch", "welch", "Verdict", "holm", "holm_table", "ranks", "spearman",
           "spearman_null", "spearman_holm"]


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


def p_value(t: float, df: float) -> float:
    """The two-sided p-value of ``t`` on ``df`` degrees of freedom, ``P(|T| ≥ |t|)`` (``nan`` for a ``nan`` t)."""
    if not (math.isfinite(t) and math.isfinite(df) and df > 0):
        return float("nan")
    return min(1.0, 2.0 * t_cdf(-abs(t), df))


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

    @property
    def higher(self) -> int:
        """In how many seeds the recipe is higher."""
        return int((self.diffs > 0).sum())

    @property
    def p(self) -> float:
        """The two-sided p-value of the paired t (``nan`` for a single seed or no spread)."""
        return p_value(self.t, self.df) if self.df >= 1 else float("nan")

    def verdict(self, threshold: float | None = None) -> str:
        """``"lower"`` or ``"higher"`` when ``|t|`` exceeds ``threshold`` (default: the two-sided 5 % critical
        value for ``n_seeds - 1`` degrees of freedom, the plain paired t test), else ``"not resolved"``.
        A section with several comparisons judges them together with ``holm``."""
        if threshold is not None:
            validate.positive_float("threshold", threshold)
        if self.n < 2 or not math.isfinite(self.t):
            return "not resolved"
        limit = self.critical() if threshold is None else threshold
        if abs(self.t) <= limit:
            return "not resolved"
        return "lower" if self.t < 0 else "higher"


def null_verdict_rate(n_seeds: int, draws: int = 20_000, seed: int = 0) -> float:
    """How often the paired t (``PairedDifference.verdict()``) reaches a verdict when nothing differs: 5 % at any
    seed count, by construction. Simulated: ``draws`` sets of ``n_seeds`` paired differences drawn from one
    normal distribution centred on 0 (a seeded float64 generator)."""
    validate.positive_int("draws", draws)
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 2:
        raise ValueError(f"n_seeds must be an int >= 2, got {n_seeds!r}")
    diffs = torch.randn(draws, n_seeds, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    t = diffs.mean(dim=1) / (diffs.std(dim=1) / math.sqrt(n_seeds))
    return (t.abs() > t_critical(n_seeds - 1)).double().mean().item()


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

    @property
    def p(self) -> float:
        """The two-sided p-value of Welch's t (``nan`` when undefined)."""
        return p_value(self.t, self.df)

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


def interval(comparison: PairedDifference | Welch, level: float = 0.05) -> tuple[float, float]:
    """The two-sided ``1 - level`` confidence interval of a comparison's mean difference, ``mean ± t_crit · se``
    (paired: ``n - 1`` degrees of freedom; Welch: its Welch–Satterthwaite ``df``). A "not resolved" verdict is not
    "equal": the interval says how large a difference the runs still allow (one comparison's interval, not
    corrected for a family). For a family of ``m`` judged by ``holm``, ``level = 0.05 / m`` gives Bonferroni's
    simultaneous intervals: each comparison ``holm`` leaves "not resolved" has one that contains 0. ``(nan, nan)``
    when undefined (one seed, or no spread in a Welch comparison)."""
    if isinstance(comparison, PairedDifference):
        mean, df = comparison.mean, comparison.df
    elif isinstance(comparison, Welch):
        mean, df = comparison.diff, comparison.df
    else:
        raise TypeError(f"comparison must be a PairedDifference or a Welch, got {type(comparison).__name__}")
    if not (df >= 1 and math.isfinite(df) and math.isfinite(comparison.se) and comparison.se > 0):
        return float("nan"), float("nan")
    half = t_critical(df, level) * comparison.se
    return mean - half, mean + half


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


# ---------------------------------------------------------------- a family of comparisons: Holm's step-down
Comparison = PairedDifference | Welch


@dataclass(frozen=True)
class Verdict:
    """One comparison of a family, judged by ``holm``.

    Attributes:
        name: what was compared (``"SwiGLU − ReLU"``). comparison: the ``PairedDifference`` or ``Welch``.
        rank: 1 for the smallest p-value of the family. threshold: the ``|t|`` its rank had to exceed,
            ``t_critical(df, level / (m - rank + 1))``. verdict: ``"lower"``, ``"higher"`` or ``"not resolved"``
            (also when Holm's step-down stopped at an earlier rank).
    """

    name: str
    comparison: Comparison
    rank: int
    threshold: float
    verdict: str

    @property
    def resolved(self) -> bool:
        return self.verdict != "not resolved"

    def line(self, width: int = 0, unit: str = "", digits: int = 3, t_cap: float | None = None,
             compact: bool = False) -> str:
        """``name  mean  seeds lower/higher  t  (Holm threshold)  → verdict``, one line.

        ``t_cap``: print a ``|t|`` above it as a bound (``> +20``), for a t whose later digits move with the
        CPU's rounding (a difference far larger than its spread); the verdict is unchanged. ``compact``: a
        shorter line, ``name  mean  l lower, h higher of n  t … vs threshold  → verdict`` (fits ~100 columns)."""
        c = self.comparison
        if isinstance(c, PairedDifference):
            mean, seeds = c.mean, f"lower in {c.lower:>2}/{c.n}, higher in {c.higher:>2}/{c.n}"
            if compact:
                seeds = f"{c.lower:>2} lower, {c.higher:>2} higher of {c.n}"
        else:
            mean, seeds = c.diff, f"{c.n_a} vs {c.n_b} runs"
        if t_cap is not None and math.isfinite(c.t) and abs(c.t) > t_cap:
            t = f"{'>' if c.t > 0 else '<'} {math.copysign(t_cap, c.t):+g}".rjust(6)
        else:
            t = f"{c.t:+6.2f}" if math.isfinite(c.t) else "   nan"
        if compact:
            return (f"{self.name:<{width}}  {mean:+.{digits}f}{unit}  {seeds}  t {t} vs {self.threshold:.2f}  "
                    f"→ {self.verdict}")
        return (f"{self.name:<{width}}  {mean:+.{digits}f}{unit}  {seeds}  t {t} (Holm threshold "
                f"{self.threshold:.2f})  → {self.verdict}")


def holm(comparisons: Mapping[str, Comparison], level: float = 0.05) -> list[Verdict]:
    """Judge a family of comparisons with Holm's step-down at ``level`` (two-sided), in the given order.

    ``comparisons`` maps a name to a ``PairedDifference`` or ``Welch``. The comparison of rank ``j`` (by
    p-value, smallest first; ties keep the given order) is resolved when its ``|t|`` exceeds
    ``t_critical(df, level / (m - j + 1))`` and every smaller p-value was resolved too. A comparison with no
    t (one seed, no spread) ranks last and is not resolved.
    """
    validate.positive_float("level", level)
    if not level < 1:
        raise ValueError(f"level must be below 1, got {level!r}")
    items = list(comparisons.items())
    if not items:
        raise ValueError("comparisons must name at least one comparison")
    for name, c in items:
        if not isinstance(c, (PairedDifference, Welch)):
            raise ValueError(f"comparisons[{name!r}] must be a PairedDifference or Welch, got {type(c).__name__}")
    m = len(items)

    def key(i: int) -> tuple[float, int]:
        p = items[i][1].p
        return (p if math.isfinite(p) else 2.0, i)

    order = sorted(range(m), key=key)
    out: dict[int, Verdict] = {}
    going = True
    for rank, i in enumerate(order, start=1):
        name, c = items[i]
        df = c.df
        threshold = t_critical(df, level / (m - rank + 1)) if math.isfinite(df) and df > 0 else float("nan")
        t = c.t
        passed = going and math.isfinite(t) and math.isfinite(threshold) and abs(t) > threshold
        going = passed
        verdict = ("lower" if t < 0 else "higher") if passed else "not resolved"
        out[i] = Verdict(name, c, rank, threshold, verdict)
    return [out[i] for i in range(m)]


def holm_table(comparisons: Mapping[str, Comparison], unit: str = "", digits: int = 3,
               level: float = 0.05, t_cap: float | None = None, compact: bool = False,
               units: Mapping[str, str] | None = None) -> str:
    """``holm``'s verdicts as printed lines: a header naming the family's size, then one line per comparison.

    ``t_cap`` (optional): a ``|t|`` above it prints as a bound, ``> +20`` (``Verdict.line``). ``compact``
    (optional): shorter lines, each t followed by ``vs`` its Holm threshold (named in the header). ``units``
    (optional): comparison name → its unit, for a family that mixes units (the others print ``unit``). When a
    not-resolved row's ``|t|`` clears its own threshold (the step-down stopped earlier), a last line names the
    rank where it stopped."""
    if t_cap is not None:
        validate.positive_float("t_cap", t_cap)
    verdicts = holm(comparisons, level)
    width = max(len(v.name) for v in verdicts)
    resolved = sum(v.resolved for v in verdicts)
    head = (f"Holm's step-down over {len(verdicts)} comparison{'s' if len(verdicts) != 1 else ''} "
            f"({100 * level:g} % two-sided{'; t vs its Holm threshold' if compact else ''}): {resolved} resolved")
    units = units or {}
    lines = [head] + ["  " + v.line(width, units.get(v.name, unit), digits, t_cap, compact) for v in verdicts]
    stopped = [v for v in verdicts if not v.resolved]
    if any(abs(v.comparison.t) > v.threshold for v in stopped):   # a later row clears its threshold: say why
        v = min(stopped, key=lambda v: v.rank)
        lines.append(f"  the step-down stops at rank {v.rank} of {len(verdicts)} ({v.name}: |t| "
                     f"{abs(v.comparison.t):.2f} below its threshold {v.threshold:.2f});\n  rows after it stay not "
                     f"resolved even where t clears their threshold")
    return "\n".join(lines)


def ranks(values: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """``(n,)`` float64 ranks 1..n of ``values`` (one per run); tied values share their mean rank."""
    values = _as_runs("values", values)
    order = values.argsort(stable=True)
    rank = torch.empty_like(values)
    rank[order] = torch.arange(1, len(values) + 1, dtype=torch.float64)
    for v in values.unique():                                    # ties: the mean of the ranks they span
        tied = values == v
        rank[tied] = rank[tied].mean()
    return rank


def spearman(a: torch.Tensor | Sequence[float], b: torch.Tensor | Sequence[float]) -> float:
    """Spearman's rank correlation ρ of two paired samples ``(n,)``: Pearson's r of their ranks (ties share
    their mean rank). It describes how monotone the relation is over these runs; it is not a verdict."""
    ra, rb = ranks(a), ranks(b)
    if ra.shape != rb.shape or len(ra) < 3:
        raise ValueError(f"a and b must hold the same number (>= 3) of runs, got {len(ra)} and {len(rb)}")
    ra, rb = ra - ra.mean(), rb - rb.mean()
    if ra.norm() == 0 or rb.norm() == 0:
        raise ValueError("a and b must each hold at least two different values (a rank correlation needs a spread)")
    return float(ra @ rb / (ra.norm() * rb.norm()))


def spearman_null(n: int) -> dict[float, float]:
    """The exact null distribution of Spearman's |ρ| for ``n`` untied paired runs: ``{|ρ|: P(|ρ_null| >= |ρ|)}``
    over all ``n!`` equally likely orders, counted by dynamic programming over which ranks are used (no sampling)."""
    if not 3 <= n <= 14:
        raise ValueError(f"n must be from 3 to 14 runs (2**n states), got {n}")
    top = sum((i - (n - 1 - i)) ** 2 for i in range(n))                  # the largest Σd² (reversed order)
    counts = torch.zeros(2 ** n, top + 1, dtype=torch.int64)            # counts[used ranks, Σd² so far]
    counts[0, 0] = 1
    for used in range(2 ** n):
        i = bin(used).count("1")                                        # the next run's position
        for v in range(n):
            if not used >> v & 1:
                d = (i - v) ** 2
                counts[used | 1 << v, d:] += counts[used, :top + 1 - d]
    counts = counts[-1].tolist()
    total = sum(counts)
    null: dict[float, int] = {}
    for s, c in enumerate(counts):
        if c:
            r = round(abs(1 - 6 * s / (n * (n * n - 1))), 12)
            null[r] = null.get(r, 0) + c
    return {r: sum(c for q, c in null.items() if q >= r) / total for r in sorted(null)}


def spearman_holm(rhos: dict[str, float], n: int, alpha: float = 0.05) -> dict[str, tuple[float, bool]]:
    """Holm's step-down over Spearman correlations of ``n`` paired runs each, two-sided at ``alpha``: the
    correlations in order of |ρ|, the j-th (from 0) judged at ``alpha / (m - j)`` against ``spearman_null(n)``
    (ties in the data treated as untied), stopping at the first that fails. Returns ``{name: (the |ρ| it had
    to reach, resolved)}``."""
    null = spearman_null(n)
    out, going = {}, True
    for j, name in enumerate(sorted(rhos, key=lambda k: -abs(rhos[k]))):
        level = alpha / (len(rhos) - j)
        cut = min(r for r, p in null.items() if p <= level)
        going = going and abs(rhos[name]) >= cut - 1e-9
        out[name] = (cut, going)
    return out
