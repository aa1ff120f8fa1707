r"""A deep stack of FFNs: what residual connections and LayerNorm placement do to the signal.

Notebook 02's depth experiment. ``L`` freshly initialised FFNs of width ``d_model`` are
applied one after another to a batch of token vectors ``x`` of shape ``(..., d_model)``,
with one of six update rules (``norm`` x ``residual``):

================  ==========================  ==========================
``norm``          ``residual=True``           ``residual=False``
================  ==========================  ==========================
``"none"``        x <- x + FFN(x)             x <- FFN(x)   (plain stack)
``"pre"``         x <- x + FFN(LN(x))         x <- FFN(LN(x))
``"post"``        x <- LN(x + FFN(x))         x <- LN(FFN(x))
================  ==========================  ==========================

``"pre"`` is GPT-2's placement (and the course's ``TinyGPT``); ``"post"`` is the original
Transformer's (Vaswani et al. 2017). ``trace_stack`` records, after every layer, the
standard deviation of the stream, how different the tokens still are from each other and
the standard deviation of what each FFN receives; ``plot_stack_trace`` draws that record.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator
from torch import nn

from helpers import validate
from helpers.ffn import FFN

#: LayerNorm placements: no LayerNorm, before the FFN (GPT-2), after the residual addition (original Transformer)
NORMS = ("none", "pre", "post")
NORM_LABELS = {"none": "no LayerNorm", "pre": "pre-LN", "post": "post-LN"}


def make_stack(depth: int, d_model: int, *, d_ff: int | None = None, seed: int = 0,
               activation: str = "gelu") -> tuple[nn.ModuleList, nn.ModuleList]:
    """``depth`` freshly initialised FFNs and as many LayerNorms, from ``torch.manual_seed(seed)``.

    Returns ``(ffns, norms)``: two ``nn.ModuleList`` of length ``depth``; FFN ``l`` maps
    ``(..., d_model) -> (..., d_model)`` through a hidden width ``d_ff`` (default ``4 * d_model``).
    The global random generator is left as it was.
    """
    validate.positive_int("depth", depth)
    validate.positive_int("d_model", d_model)
    validate.non_negative_int("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ffns = nn.ModuleList(FFN(d_model, d_ff, activation) for _ in range(depth))
    norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(depth))
    return ffns.eval(), norms.eval()


def _check_stack(ffns, norms, norm: str, residual: bool) -> None:
    validate.one_of("norm", norm, NORMS)
    if not isinstance(residual, bool):
        raise TypeError(f"residual must be a bool, got {residual!r} ({type(residual).__name__})")
    if len(ffns) != len(norms):
        raise ValueError(f"norms must have one LayerNorm per FFN ({len(ffns)}), got {len(norms)}")


def block_step(x: torch.Tensor, ffn: nn.Module, ln: nn.Module, *, norm: str = "pre",
               residual: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer of the stack: ``(..., d_model) -> (..., d_model)``.

    Returns ``(new_stream, ffn_input)``: the stream after the layer and what the FFN received
    (``LN(x)`` for pre-LN, ``x`` otherwise). See the module docstring for the six rules.
    """
    ffn_input = ln(x) if norm == "pre" else x
    update = ffn(ffn_input)
    out = x + update if residual else update
    if norm == "post":
        out = ln(out)
    return out, ffn_input


def stack_forward(x: torch.Tensor, ffns, norms, *, norm: str = "pre", residual: bool = True) -> torch.Tensor:
    """Run ``x`` ``(..., d_model)`` through every layer; returns the final stream ``(..., d_model)``."""
    _check_stack(ffns, norms, norm, residual)
    validate.float_tensor("x", x)
    for ffn, ln in zip(ffns, norms):
        x, _ = block_step(x, ffn, ln, norm=norm, residual=residual)
    return x


@dataclass
class StackTrace:
    """What ``trace_stack`` records; index ``l`` of ``stream_std``/``spread`` is after layer ``l`` (0 = input).

    * ``stream_std``: standard deviation of all entries of the stream, ``depth + 1`` floats;
    * ``spread``: standard deviation across tokens, averaged over channels (0 when every token
      carries the same vector), ``depth + 1`` floats;
    * ``input_std``: standard deviation of what FFN ``l`` received, ``depth`` floats (index 0 = layer 1).
    """

    norm: str
    residual: bool
    stream_std: list[float]
    spread: list[float]
    input_std: list[float]

    @property
    def label(self) -> str:
        """E.g. ``'pre-LN, residual'`` or ``'no LayerNorm, no residual'``."""
        return f"{NORM_LABELS[self.norm]}, {'residual' if self.residual else 'no residual'}"


def _spread(x: torch.Tensor) -> float:
    tokens = x.reshape(-1, x.shape[-1])
    return tokens.std(dim=0).mean().item() if tokens.shape[0] > 1 else 0.0


def trace_stack(x: torch.Tensor, ffns, norms, *, norm: str = "pre", residual: bool = True) -> StackTrace:
    """Run the stack without gradients and record the statistics of ``StackTrace`` after every layer.

    ``x``: ``(..., d_model)``, at least two tokens for a meaningful spread.
    """
    _check_stack(ffns, norms, norm, residual)
    validate.float_tensor("x", x)
    stream_std, spread, input_std = [x.std().item()], [_spread(x)], []
    with torch.no_grad():
        for ffn, ln in zip(ffns, norms):
            x, ffn_input = block_step(x, ffn, ln, norm=norm, residual=residual)
            input_std.append(ffn_input.std().item())
            stream_std.append(x.std().item())
            spread.append(_spread(x))
    return StackTrace(norm, residual, stream_std, spread, input_std)


def scaled_output_init(ffns, factor: float) -> nn.ModuleList:
    """A copy of ``ffns`` whose output projections ``w2.weight`` are multiplied by ``factor``.

    GPT-2's paper scales the weights of the residual layers at initialisation by ``1/sqrt(N)``,
    ``N`` the number of residual layers (a transformer block has two, so implementations such as
    nanoGPT use ``1/sqrt(2 * n_layers)`` on each output projection; in a stack of FFNs each FFN is
    one). The originals are left untouched.
    """
    validate.positive_float("factor", factor)
    scaled = copy.deepcopy(ffns)
    with torch.no_grad():
        for ffn in scaled:
            ffn.w2.weight.mul_(factor)
    return scaled


def residual_scale(n_residual_layers: int) -> float:
    """GPT-2's init factor for residual output projections, ``1 / sqrt(n_residual_layers)``."""
    return 1.0 / math.sqrt(validate.positive_int("n_residual_layers", n_residual_layers))


def plot_stack_trace(trace: StackTrace, *, noise_floor: float = 1e-7, note: str = "") -> Figure:
    """Two panels for one ``StackTrace``: the stream's std with the spread across tokens (one log axis), and
    each FFN's input std.

    The first two share a log scale; when they come near ``noise_floor`` (float32 rounding of vectors of
    size ~1), values below it are drawn at the floor, inside a grey band; otherwise the axis zooms in on the
    curves. Returns the figure (not shown).
    """
    depth = len(trace.input_std)
    layers = range(depth + 1)
    fig, (ax_s, ax_i) = plt.subplots(1, 2, figsize=(11, 3.8))
    floor = noise_floor / 10
    lowest = min(min(trace.stream_std), min(trace.spread))
    ax_s.semilogy(layers, [max(v, floor) for v in trace.stream_std], "-", color="#0072B2", lw=2,
                  label="std of the stream")
    ax_s.semilogy(layers, [max(v, floor) for v in trace.spread], ":", color="#D55E00", lw=2.5,
                  label="spread across tokens")
    top = max(max(trace.stream_std), max(trace.spread), 1.0)
    if lowest < 1e-3:  # the curves reach towards rounding noise: show it
        ax_s.axhspan(floor, noise_floor, color="0.9", label="float32 rounding noise")
        ax_s.set_ylim(floor, 3 * top)
    else:  # nothing small to show: zoom in so that a drift is visible
        ax_s.set_ylim(lowest / 3, 3 * top)
        ax_s.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax_s.yaxis.set_major_formatter(lambda v, _: f"{v:.0e}" if v < 0.01 else f"{v:g}")  # plain text: faster than
    ax_s.yaxis.set_minor_formatter(lambda v, _: "")                                     # mathtext, for explorers
    ax_s.set_xlabel("layer")
    ax_s.set_ylabel("standard deviation (log scale)")
    ax_s.set_title("The stream after each layer")
    ax_s.legend(fontsize=9, loc="best")
    ax_i.plot(range(1, depth + 1), trace.input_std, "o-" if depth <= 12 else "-", color="#009E73", lw=2)
    ax_i.set_ylim(0, max(1.2 * max(trace.input_std), 0.1))
    ax_i.set_xlim(0.5, depth + 0.5)
    ax_i.set_xlabel("layer")
    ax_i.set_ylabel("standard deviation of the FFN's input")
    ax_i.set_title("What each FFN receives")
    label = f"{trace.label}, {note}" if note else trace.label
    fig.suptitle(f"{depth} stacked FFNs, {label}: the stream ends at std {trace.stream_std[-1]:.3g}, "
                 f"tokens spread {trace.spread[-1]:.2g}", y=0.99)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.85, wspace=0.25)  # fixed: faster than tight_layout
    return fig


#: the settings ``compare_gradients`` measures: (norm, residual, W2 scaled by 1/sqrt(depth)?)
GRADIENT_SETTINGS = [("none", False, False), ("pre", False, False), ("post", False, False),
                     ("none", True, False), ("pre", True, False), ("post", True, False),
                     ("none", True, True), ("pre", True, True)]


def _fmt_small(value: float) -> str:
    """3 significant digits, or a bound below 1e-12 (the size of float32 rounding of products of tiny factors)."""
    if value == 0.0 or abs(value) < 1e-12:
        return "< 1e-12"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.1e}"


def compare_gradients(layer_grad_norms, x: torch.Tensor, target: torch.Tensor, ffns, norms) -> dict | None:
    """Run a learner's ``layer_grad_norms`` on every setting of ``GRADIENT_SETTINGS``; print a table, plot the curves.

    ``layer_grad_norms(x, target, ffns, norms, norm, residual)`` returns the ``(L,)`` norms of
    d loss / d W1 per layer (notebook 02, exercise 4). Each setting gets fresh copies of the
    FFNs, so stale gradients cannot leak from one setting into the next. Returns
    ``{(norm, residual, scaled): norms}``, or ``None`` (with a message) when the function is not
    written yet or fails.
    """
    depth = len(ffns)
    results = {}
    for norm, residual, scaled in GRADIENT_SETTINGS:
        stack = scaled_output_init(ffns, residual_scale(depth)) if scaled else copy.deepcopy(ffns)
        try:
            with torch.enable_grad():
                norms_l = layer_grad_norms(x, target, stack, norms, norm, residual)
        except NotImplementedError:
            print("Write layer_grad_norms above first (the checker must pass), then run this cell again.")
            return None
        except Exception as err:  # the learner's code: say so in one line instead of a traceback
            print(f"layer_grad_norms raised {type(err).__name__}: {err}. Make the checker above pass first.")
            return None
        results[(norm, residual, scaled)] = torch.as_tensor(norms_l).detach().double().flatten()

    print(f"{'setting':<40}{'layer 1':>10}{'layer ' + str(depth):>10}{'layer 1 / layer ' + str(depth):>20}")
    for (norm, residual, scaled), values in results.items():
        label = f"{NORM_LABELS[norm]}, {'residual' if residual else 'no residual'}"
        label += f", W2 × 1/√{depth}" if scaled else ""
        first, last = values[0].item(), values[-1].item()
        ratio = first / last if last > 0 else float("nan")
        print(f"{label:<40}{_fmt_small(first):>10}{_fmt_small(last):>10}{_fmt_small(ratio):>20}")

    fig, (ax_all, ax_res) = plt.subplots(1, 2, figsize=(14, 4.4))
    styles = {"none": "-", "pre": "--", "post": ":"}
    colors = {(False, False): "#D55E00", (True, False): "#0072B2", (True, True): "#009E73"}
    for (norm, residual, scaled), values in results.items():
        label = f"{NORM_LABELS[norm]}, {'residual' if residual else 'no residual'}" + (", scaled W2" if scaled else "")
        shown = torch.where(values > 0, values, torch.full_like(values, float("nan"))).numpy()  # 0: underflow
        for ax in (ax_all, ax_res) if residual else (ax_all,):
            ax.semilogy(range(1, depth + 1), shown, styles[norm], color=colors[(residual, scaled)],
                        lw=3 if norm == "post" else 2, label=label)         # dotted lines drawn thicker to be seen
    for ax in (ax_all, ax_res):
        ax.set_xlabel("layer (1 = where the input enters)")
        ax.set_ylabel("‖∂loss/∂W1‖ (log scale)")
    ax_all.set_title("All eight arrangements (a gap: the norm underflows float32)", fontsize=11)
    ax_res.set_title("With a residual path (zoomed)", fontsize=11)
    fig.suptitle(f"Gradient reaching each of {depth} stacked FFNs at initialisation", y=1.0)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    # one legend for both panels, below them: inside either panel it would cover a curve
    handles, labels = ax_all.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, 0.0))
    plt.show()
    return results
