"""Hidden cases: what one is (``Case``), the domain a statement allows and its corners (``Domain``, ``Corner``),
and random inputs for them, shared by the notebooks' checkers.

Every function draws from a seeded ``torch.Generator``, so a checker's hidden cases are the same on every run.
The masks and adversarial rows are the extremes a task statement allows and a careless answer misses:
rows of different real lengths, rows whose allowed values are all negative (GELU's dip) or all below -1, and
symmetric positive definite matrices whose eigenvalues span several orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import math

import torch

from helpers.exercises.compare import describe_value


@dataclass
class Case:
    """One hidden test input: positional and keyword arguments for the learner's function."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        """Short human description of the input, e.g. ``input of shape (3, 5)``."""
        if self.note:
            return self.note
        parts = [describe_value(a) for a in self.args]
        parts += [f"{k}={describe_value(v)}" for k, v in self.kwargs.items()]
        return "input " + ", ".join(parts) if parts else "no input"


@dataclass(frozen=True)
class Corner:
    """One corner of an exercise's declared domain, and a test that a hidden case reaches it.

    ``name`` says it in the statement's words (``"k = F (every feature kept)"``, ``"ties wider than k"``,
    ``"logits near 100 (an unshifted exp overflows)"``); ``reached(case)`` looks at the case's real arguments
    (not its note) and says whether it sits in that corner.
    """

    name: str
    reached: Callable[[Case], bool]


@dataclass(frozen=True)
class Domain:
    """What an exercise's statement allows, and the corners its hidden cases must cover.

    ``allows`` is the statement's promise in words: shapes, dtypes, every value range, ties, sizes, the stated
    arithmetic. ``corners`` are the extremes of that promise (each end of each range, the widest ties, the
    smallest sizes, ...): ``Exercise.uncovered()`` lists those no hidden case reaches, and a test keeps it
    empty for every exercise of the course. A statement that allows more than the checker can judge is narrowed,
    not left wider than its cases.
    """

    allows: str
    corners: tuple[Corner, ...]


def randint(gen: torch.Generator, low: int, high: int) -> int:
    """One int in [low, high] from ``gen``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def valid_mask(gen: torch.Generator, N: int, T: int, last_allowed: bool = False,
               padded: bool = False) -> torch.Tensor:
    """Rows of different real lengths; a prefix needs a next token, so the last real position is out.

    With ``last_allowed`` some rows may also end a prefix at the very last position ``T - 1`` (the task
    statement allows any mask with at least one True per row). With ``padded`` every row ends in padding
    (real length at most ``T - 1``).
    """
    lengths = torch.randint(2, T if padded else T + 1, (N,), generator=gen)
    valid = torch.arange(T).unsqueeze(0) < (lengths - 1).unsqueeze(1)
    if last_allowed:
        valid[torch.rand(N, generator=gen) < 0.5, -1] = True
    return valid


def negative_rows(coefficients: torch.Tensor, valid: torch.Tensor, gen: torch.Generator,
                   share: float = 0.4) -> None:
    """In place, for ``coefficients`` ``(N, T, d_ff)`` and ``valid`` ``(N, T)``: in a share of the rows (at
    least one) every allowed value is negative (GELU's small dip, -0.17..0), and every position that is not
    allowed holds a large positive value. Masking with 0 instead of -inf then picks a forbidden position."""
    N, _, d_ff = coefficients.shape
    rows = torch.zeros(N, dtype=torch.bool)
    rows[torch.randperm(N, generator=gen)[: max(1, round(share * N))]] = True
    allowed = rows.unsqueeze(1) & valid                                            # (N, T)
    coefficients[allowed] = -0.17 * torch.rand(int(allowed.sum()), d_ff, generator=gen)
    coefficients[~valid] = coefficients[~valid].abs() + 2.0


def below_minus_one(coefficients: torch.Tensor, valid: torch.Tensor, gen: torch.Generator,
                    nearest: float = 1e-2) -> None:
    """In place: every allowed value becomes one below -1 (from -1.05 down to about -1e30, the extremes a
    float32 input allows and GELU never makes), and every position that is not allowed holds -0.5 (above
    all of them, below 0). A stand-in such as -1, -1e4 or -1e9 for the forbidden positions then wins, as 0
    does: only -inf always loses. ``nearest``: the allowed values start at -1.05 - nearest (1e11: every one
    below -1e11)."""
    allowed = valid.unsqueeze(-1).expand_as(coefficients)
    n = int(allowed.sum())
    coefficients[allowed] = -1.05 - torch.logspace(math.log10(nearest), 30, n)[torch.randperm(n, generator=gen)]
    coefficients[~allowed] = -0.5


def spd(gen: torch.Generator, d: int, low: float, high: float) -> torch.Tensor:
    """A random symmetric positive definite ``(d, d)`` float64 matrix with eigenvalues spread from low to high."""
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    eigenvalues = torch.logspace(torch.log10(torch.tensor(low)).item(), torch.log10(torch.tensor(high)).item(), d,
                                 dtype=torch.float64)
    return (q * eigenvalues) @ q.T
