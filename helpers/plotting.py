"""The course's figure style and the plots more than one notebook or figure uses.

Colours follow the Okabe-Ito palette (readable with colour-vision deficiency),
and each activation keeps the same colour everywhere in the course.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from helpers.activations import get_activation

PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

#: one colour per activation / variant name, used in every plot of the course
COLORS: dict[str, str] = {
    "relu": "#D55E00",
    "gelu": "#0072B2",
    "gelu_tanh": "#56B4E9",
    "silu": "#009E73",
    "swish": "#009E73",
    "sigmoid": "#CC79A7",
    "identity": "#7F7F7F",
    "glu": "#CC79A7",
    "bilinear": "#7F7F7F",
    "reglu": "#E69F00",
    "geglu": "#56B4E9",
    "swiglu": "#000000",
}

LABELS: dict[str, str] = {
    "relu": "ReLU",
    "gelu": "GELU (exact)",
    "gelu_tanh": "GELU (tanh approx.)",
    "silu": "SiLU / Swish (β=1)",
    "sigmoid": "sigmoid",
    "identity": "identity",
}

FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"


def use_course_style() -> None:
    """Apply the course's matplotlib defaults (sizes, grid, palette)."""
    matplotlib.rcParams.update({
        "figure.figsize": (7.0, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 150,
        "savefig.bbox": "tight",
        "font.size": 11,
        "axes.titlesize": 12,
        "axes.labelsize": 11,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
        "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    })


def plot_activations(ax: Axes, names: list[str], x: torch.Tensor | None = None, *, derivative: bool = False,
                     title: str | None = None) -> Axes:
    """Plot activation functions (or their derivatives, by autograd) on one axis.

    ``x`` is a 1-D grid (default: 401 points on [-4, 4]).
    """
    if x is None:
        x = torch.linspace(-4, 4, 401)
    for name in names:
        xg = x.detach().clone().requires_grad_(derivative)
        y = get_activation(name)(xg)
        if derivative:
            (y,) = torch.autograd.grad(y.sum(), xg)
        style = "--" if name == "gelu_tanh" else "-"
        ax.plot(x.numpy(), y.detach().numpy(), style, color=COLORS.get(name), label=LABELS.get(name, name), lw=2)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set_xlabel("input x")
    ax.set_ylabel("derivative d/dx" if derivative else "output f(x)")
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


def gelu_vs_relu_figure() -> Figure:
    """Two panels: ReLU and GELU (exact and tanh), then their slopes."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["relu", "gelu", "gelu_tanh"]
    plot_activations(left, names, title="GELU vs ReLU: values")
    plot_activations(right, names, derivative=True, title="GELU vs ReLU: slopes")
    right.legend(loc="upper left")
    left.annotate("GELU dips below 0\n(min ≈ −0.17 at x ≈ −0.75)", xy=(-0.75, -0.17), xytext=(-3.9, 1.6),
                  arrowprops={"arrowstyle": "->", "color": "0.3"}, fontsize=10)
    right.annotate("ReLU's slope jumps\nfrom 0 to 1 at x = 0", xy=(0, 0.9), xytext=(0.9, 0.3),
                   arrowprops={"arrowstyle": "->", "color": "0.3"}, fontsize=10)
    fig.suptitle("ReLU vs GELU: the tanh approximation is indistinguishable at this scale")
    fig.tight_layout()
    return fig


def _layer_column(ax: Axes, x: float, n: int, height: float, color: str, label: str, sub: str) -> None:
    gap = height / n
    for i in range(n):
        ax.add_patch(Rectangle((x - 0.18, -height / 2 + i * gap + 0.04), 0.36, gap - 0.08,
                               facecolor=color, edgecolor="0.2", lw=0.8))
    ax.text(x, height / 2 + 0.35, label, ha="center", va="bottom", fontsize=12, weight="bold")
    ax.text(x, -height / 2 - 0.3, sub, ha="center", va="top", fontsize=10)


def ffn_diagram_figure() -> Figure:
    """The expand-activate-contract picture of the position-wise FFN, with shapes.

    Drawn in the course's one weight layout, PyTorch's ``nn.Linear``: ``W1`` is
    ``(d_ff, d)`` (``ffn.w1.weight``, row i = key i), ``W2`` is ``(d, d_ff)``
    (``ffn.w2.weight``, column i = value i); ``y = W2·φ(W1·x + b1) + b2`` per token.
    """
    fig, ax = plt.subplots(figsize=(10, 5.0))
    ax.set_xlim(-0.6, 10.2)
    ax.set_ylim(-4.9, 3.9)
    ax.axis("off")
    cols = [
        (0.4, 4, 2.4, "#56B4E9", "x", "(B, T, d)\ninput"),
        (3.2, 16, 5.6, "#E69F00", "h = W₁x + b₁", "(B, T, d_ff = 4d)\nexpand"),
        (6.0, 16, 5.6, "#009E73", "m = φ(h)", "(B, T, d_ff)\nactivate: GELU/ReLU"),
        (8.8, 4, 2.4, "#56B4E9", "y = W₂m + b₂", "(B, T, d)\ncontract: output"),
    ]
    for x, n, height, color, label, sub in cols:
        _layer_column(ax, x, n, height, color, label, sub)
    arrows = ["W₁ (d_ff × d)\n= ffn.w1.weight", "φ elementwise", "W₂ (d × d_ff)\n= ffn.w2.weight"]
    for (x0, *_), (x1, *_), text in zip(cols, cols[1:], arrows):
        ax.add_patch(FancyArrowPatch((x0 + 0.3, 0), (x1 - 0.3, 0), arrowstyle="-|>", mutation_scale=18, lw=1.6,
                                     color="0.25"))
        ax.text((x0 + x1) / 2, 0.25, text, ha="center", va="bottom", fontsize=10,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9})
    ax.text(4.6, -4.6, "weights in nn.Linear's layout: row i of W₁ is key i, column i of W₂ is value i\n"
                       "a batch of tokens as rows X:  Y = φ(X W₁ᵀ + b₁) W₂ᵀ + b₂",
            ha="center", va="center", fontsize=10, color="0.25", linespacing=1.5)
    ax.set_title("The position-wise FFN: expand, activate, contract (the same weights at every position)", fontsize=12)
    return fig


def save_figure(fig: Figure, name: str, directory: Path | None = None) -> Path:
    """Save ``fig`` as ``<directory>/<name>.png`` (default: the repository's ``figures/``) and close it."""
    directory = FIGURES_DIR if directory is None else Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


STATIC_ENV = "FFN_STATIC_PLOTS"


def widgets_available() -> bool:
    """True when live controls can be shown: ipywidgets >= 7.7 imports and ``FFN_STATIC_PLOTS`` is not set.

    Set the environment variable ``FFN_STATIC_PLOTS=1`` before exporting a notebook
    to PDF or HTML: every explorer then draws one static figure at its defaults.
    """
    import os

    if os.environ.get(STATIC_ENV, "").strip() not in ("", "0"):
        return False
    try:
        import ipywidgets
    except ImportError:
        return False
    try:
        major, minor = (int(part) for part in ipywidgets.__version__.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (7, 7)


Control = tuple | list | bool


def _default(name: str, spec: Control):
    """The value a control starts at (and the static fallback uses); checks the spec's form."""
    if isinstance(spec, bool):
        return spec
    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"{name} must be a non-empty list of options, got []")
        first = spec[0]
        return first[1] if isinstance(first, tuple) and len(first) == 2 else first
    if isinstance(spec, tuple) and len(spec) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                           for v in spec):
        low, high, step, default = spec
        if not low <= default <= high or step <= 0:
            raise ValueError(f"{name} must be (min, max, step, default) with min <= default <= max and step > 0, "
                             f"got {spec!r}")
        return default
    raise ValueError(f"{name} must be (min, max, step, default) for a slider, a list of options for a dropdown "
                     f"(the first is the default; (label, value) pairs allowed) or True/False for a checkbox, "
                     f"got {spec!r}")


def interactive_plot(draw, *, static_copy: bool = True, **controls: Control):
    """Show ``draw(**values)`` with one control per keyword, or draw it once at the defaults.

    The one "interactive, else static" mechanism of the course: every slider,
    dropdown and checkbox in the notebooks goes through it.

    Each control is one of:

    * ``name=(min, max, step, default)``: a slider (integer when all four are ints);
    * ``name=[option, ...]``: a dropdown starting at the first option; options may
      be ``(label, value)`` pairs;
    * ``name=True`` or ``name=False``: a checkbox.

    ``draw`` makes a matplotlib figure and calls ``plt.show()``. With ipywidgets
    (>= 7.7: JupyterLab 4 with ipywidgets 8, Colab with 7.7) the figure redraws
    when a control moves; without them, or with ``FFN_STATIC_PLOTS=1`` (PDF/HTML
    export), ``draw`` runs once with the defaults, a static figure. Returns what
    ``ipywidgets.interact`` returns (``draw`` itself, its controls in ``.widget``),
    or ``None`` for the static figure. In a
    notebook, tag the cell ``nbval-ignore-output`` with a ``# nbval: ...`` reason:
    the live plot sits inside an Output widget, which nbval and the saved file
    record differently.

    By default (``static_copy=True``) the figure at the defaults is also stored as a PNG in the
    widget's own output (one display bundle with the widget view, the PNG and
    the text): a frontend with widgets shows the live controls, a static viewer
    of the saved notebook (GitHub, nbconvert without widget state) shows the PNG
    instead of ``interactive(children=...)``. ``static_copy=False`` shows the
    widget alone (``ipywidgets.interact``).
    """
    defaults = {name: _default(name, spec) for name, spec in controls.items()}
    if not widgets_available():
        draw(**defaults)
        return None
    import ipywidgets as widgets

    made = {}
    for name, spec in controls.items():
        if isinstance(spec, bool):
            made[name] = widgets.Checkbox(value=spec, description=name)
        elif isinstance(spec, list):
            made[name] = widgets.Dropdown(options=spec, value=defaults[name], description=name)
        else:
            low, high, step, default = spec
            kind = (widgets.IntSlider if all(isinstance(v, int) for v in spec) else widgets.FloatSlider)
            made[name] = kind(min=low, max=high, step=step, value=default, description=name,
                              continuous_update=False)
    if not static_copy:
        return widgets.interact(draw, **made)
    from IPython.display import display

    live = widgets.interactive(draw, **made)
    if hasattr(live, "_repr_mimebundle_"):
        bundle = dict(live._repr_mimebundle_())
    else:  # ipywidgets 7: the same bundle, spelled out
        bundle = {"text/plain": repr(live)[:110],
                  "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                               "model_id": live.model_id}}
    png = _png_at_defaults(draw, defaults)
    if png is not None:
        bundle["image/png"] = png
    display(bundle, raw=True)
    return live


def _png_at_defaults(draw, defaults: dict) -> str | None:
    """``draw(**defaults)`` rendered to a base64 PNG instead of shown (``None`` if it drew no figure)."""
    import base64
    import io
    from unittest import mock

    shown: list[Figure] = []
    with mock.patch.object(plt, "show", lambda *args, **kwargs: shown.append(plt.gcf())):
        draw(**defaults)
    if not shown:
        return None
    buffer = io.BytesIO()
    shown[-1].savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    for fig in set(shown):
        plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def show_figure(name: str, width: int = 800) -> None:
    """Display ``figures/<name>.png`` in the notebook.

    Use this instead of a markdown image link: Colab does not resolve relative
    image paths in markdown, but the setup cell has cloned the repository, so
    the file is on disk in every place the course runs.
    """
    from IPython.display import Image, display

    path = FIGURES_DIR / f"{name}.png"
    if not path.is_file():
        known = sorted(p.stem for p in FIGURES_DIR.glob("*.png"))
        raise ValueError(f"name must be one of the figures in figures/ {known}, got {name!r}")
    display(Image(filename=str(path), width=width))
