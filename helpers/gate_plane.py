"""One hidden unit over the plane: what a dense unit and a gated unit compute when a token is a point (notebook 04).

With ``d_model = 2`` a token is a point ``x`` of the plane, and an FFN with ``d_ff = 1`` has one hidden unit.
Its gate direction ``w1`` (row 0 of ``W1``) and content direction ``w3`` (row 0 of ``W3``) are unit vectors at
chosen angles; ``a = w1·x``, ``b = w3·x``. A dense unit computes ``m = φ(a)`` (stripes across ``w1``), a gated unit
``m = φ(a)·b`` (zero on the line ``b = 0``, sign-changing across it, shaped by φ on the gate's closed side
``a < 0``). ``hidden_map`` colours a grid of the plane with ``m``; ``draw_unit_maps`` draws one panel per
variant; ``unit_checks`` states the picture's claims as numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import Normalize

from helpers import validate
from helpers.ffn import FFN, VARIANT_NAMES as NAMES, VARIANTS

#: Degrees of the gate direction w1 and of the content direction w3 in the section's figure.
GATE_ANGLE, CONTENT_ANGLE = 20.0, 110.0
#: Arrow colours that no variant uses (indigo for the gate, olive for the content).
GATE_ARROW, CONTENT_ARROW = "#332288", "#999933"
#: The plane shown is [-LIMIT, LIMIT]²; colours are clipped at ±LIMIT.
LIMIT = 3.0


def unit_vector(degrees: float) -> torch.Tensor:
    """``(1, 2)``: the unit vector at ``degrees`` (one row of a weight matrix with ``d_model = 2``)."""
    t = math.radians(degrees)
    return torch.tensor([[math.cos(t), math.sin(t)]])


def one_unit(variant: str, gate_angle: float = GATE_ANGLE, content_angle: float = CONTENT_ANGLE) -> FFN:
    """An ``FFN`` with ``d_model = 2`` and a single hidden unit whose directions are the two angles (no biases)."""
    unit = FFN.from_variant(validate.one_of("variant", variant, VARIANTS), d_model=2, d_ff=1, bias=False)
    with torch.no_grad():
        unit.w1.weight.copy_(unit_vector(gate_angle))
        if unit.gated:
            unit.w3.weight.copy_(unit_vector(content_angle))
    return unit


def plane_grid(points: int = 241, limit: float = LIMIT) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X1, X2, grid)``: ``(points, points)`` coordinates and the ``(points, points, 2)`` tokens of the square."""
    validate.positive_int("points", points)
    side = torch.linspace(-limit, limit, points)
    x1, x2 = torch.meshgrid(side, side, indexing="xy")
    return x1, x2, torch.stack([x1, x2], dim=-1)


@torch.no_grad()
def hidden_map(variant: str, grid: torch.Tensor, gate_angle: float = GATE_ANGLE,
               content_angle: float = CONTENT_ANGLE) -> torch.Tensor:
    """The unit's value ``m(x)`` at every token of ``grid`` ``(..., 2)``: shape ``(...)``."""
    return one_unit(variant, gate_angle, content_angle).hidden(grid)[..., 0]


def _inner_points(lines, margin: float = 0.75) -> list[tuple[float, float]]:
    """One point per contour piece, the middle of its part inside ``margin × LIMIT``: where ``clabel`` puts that
    piece's label, so no label is clipped at a panel's edge (pieces wholly near the edge get none)."""
    points = []
    for pieces in lines.allsegs:
        for piece in pieces:
            inside = piece[(np.abs(piece) < margin * LIMIT).all(axis=1)]
            if len(inside):
                points.append(tuple(inside[len(inside) // 2]))
    return points


def draw_unit_maps(axes: Sequence[Axes], variants: Sequence[str], gate_angle: float = GATE_ANGLE,
                   content_angle: float = CONTENT_ANGLE, points: int = 241):
    """One panel per variant: ``m(x)`` on one diverging colour scale (clipped at ±``LIMIT``), contours labelled
    with their value of ``m`` (at ±0.25, ±1, ±2; dashed where negative), and the gate (indigo) and content (olive)
    directions as arrows. Returns the last image, for a colour bar."""
    x1, x2, grid = plane_grid(points)
    norm = Normalize(-LIMIT, LIMIT, clip=True)
    image = None
    for ax, name in zip(axes, variants):
        m = hidden_map(name, grid, gate_angle, content_angle).numpy()
        image = ax.imshow(m, origin="lower", extent=(-LIMIT, LIMIT, -LIMIT, LIMIT), cmap="RdBu_r", norm=norm)
        lines = ax.contour(x1.numpy(), x2.numpy(), m, levels=[-2, -1, -0.25, 0.25, 1, 2], colors="k",
                           linewidths=0.6)                    # dashed where m < 0 (matplotlib's default)
        ax.clabel(lines, fontsize=7, fmt="%g", manual=_inner_points(lines))   # each line's value of m, inside
        arrows = [(gate_angle, GATE_ARROW)] + ([(content_angle, CONTENT_ARROW)] if VARIANTS[name][1] else [])
        for angle, color in arrows:
            u = unit_vector(angle)[0]
            ax.arrow(0, 0, 1.6 * u[0].item(), 1.6 * u[1].item(), width=0.06, color=color,
                     length_includes_head=True)
        ax.set_title(f"{NAMES[name]}: " + ("φ(a)·b" if VARIANTS[name][1] else "φ(a)"), fontsize=11)
        ax.set_xticks([-LIMIT, 0, LIMIT])
        ax.set_yticks([-LIMIT, 0, LIMIT])
        ax.grid(False)
    return image


@dataclass
class UnitChecks:
    """The figure's claims for one unit, as numbers.

    Attributes:
        spread_along_gate_line: max − min of ``m`` along the line ``a = 1`` (0 for a dense unit: it depends on
            ``a`` alone). on_content_zero: max ``|m|`` on the line ``b = 0`` (``None`` for a dense unit).
        closed_side: ``(min, max)`` of ``m`` where ``a < 0`` inside the square (``None`` for a dense unit).
    """

    spread_along_gate_line: float
    on_content_zero: float | None
    closed_side: tuple[float, float] | None


@torch.no_grad()
def unit_checks(variant: str, gate_angle: float = GATE_ANGLE, content_angle: float = CONTENT_ANGLE) -> UnitChecks:
    """Measure ``variant``'s unit along ``a = 1``, on ``b = 0`` and on the closed side ``a < 0`` of the square."""
    unit = one_unit(variant, gate_angle, content_angle)
    along = torch.linspace(-LIMIT, LIMIT, 61)[:, None]
    on_gate_line = along * unit_vector(gate_angle + 90) + unit_vector(gate_angle)          # a = 1, b varies
    m = unit.hidden(on_gate_line)
    spread = (m.max() - m.min()).item()
    if not unit.gated:
        return UnitChecks(spread, None, None)
    on_zero = unit.hidden(along * unit_vector(content_angle + 90)).abs().max().item()     # b = 0, a varies
    _, _, grid = plane_grid()
    closed = (grid @ unit_vector(gate_angle).T)[..., 0] < 0
    values = unit.hidden(grid)[..., 0][closed]
    return UnitChecks(spread, on_zero, (values.min().item(), values.max().item()))


# ---------------------------------------------------------------- can one dense unit do what one gated unit does?
def gated_target(x: torch.Tensor, gate_angle: float = GATE_ANGLE, content_angle: float = CONTENT_ANGLE) -> torch.Tensor:
    """``(...)``: ``ReLU(a)·b`` at the tokens ``x`` ``(..., 2)``: "how far a is open, signed by which way b points"
    (one ReGLU unit computes it exactly; it depends on two directions)."""
    a = x @ unit_vector(gate_angle).to(x.dtype)[0]
    return torch.relu(a) * (x @ unit_vector(content_angle).to(x.dtype)[0])


def fit_unit(variant: str, seed: int, *, steps: int = 300, lr: float = 0.03, n: int = 512,
             n_test: int = 4096) -> float:
    """Train ONE hidden unit of ``variant`` (an ``FFN(d_model=2, d_ff=1, bias=True)``'s hidden value ``m``, read
    out as ``c·m + c0``) with Adam, full batch, on ``n`` Gaussian tokens to ``gated_target``, from ``seed``'s
    initialisation (float64). Returns the error on ``n_test`` fresh tokens over the target's variance:
    0 is exact, 1 no better than a constant."""
    generator = torch.Generator().manual_seed(validate.int_in_range("seed", seed, 0, 2**31))
    x, x_test = torch.randn(n, 2, generator=generator, dtype=torch.float64), torch.randn(
        n_test, 2, generator=generator, dtype=torch.float64)
    torch.manual_seed(seed)
    unit = FFN.from_variant(validate.one_of("variant", variant, VARIANTS), d_model=2, d_ff=1, bias=True).double()
    readout = torch.nn.Linear(1, 1, dtype=torch.float64)
    optimizer = torch.optim.Adam([*unit.parameters(), *readout.parameters()], lr=lr)
    y, y_test = gated_target(x), gated_target(x_test)
    for _ in range(validate.positive_int("steps", steps)):
        loss = torch.nn.functional.mse_loss(readout(unit.hidden(x))[:, 0], y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return (torch.nn.functional.mse_loss(readout(unit.hidden(x_test))[:, 0], y_test) / y_test.var()).item()


@torch.no_grad()
def best_one_direction(step_degrees: float = 2.0, n: int = 200_000, bins: int = 200) -> float:
    """A floor for ANY dense unit, whatever its φ: a dense unit is a function of one direction ``w·x``, and the
    best such function is the mean of ``gated_target`` given ``w·x`` (estimated in ``bins`` equal-count bins of
    ``n`` Gaussian tokens). Returns the smallest error over the target's variance across directions every
    ``step_degrees``."""
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = gated_target(x)
    best = 1.0
    for degrees in torch.arange(0.0, 180.0, validate.positive_float("step_degrees", step_degrees)).tolist():
        by_projection = y[(x @ unit_vector(degrees).to(x.dtype)[0]).argsort()][: n - n % bins].view(bins, -1)
        best = min(best, ((by_projection - by_projection.mean(1, keepdim=True)) ** 2).mean().item() / y.var().item())
    return best
