"""Regenerate every image in ``figures/``: ``python -m helpers.tools.figures [--out DIR]``.

Each entry of ``FIGURES`` maps a file name (without ``.png``) to a function
returning a matplotlib figure; the README and notebooks refer to these files.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

from helpers.plotting import FIGURES_DIR, ffn_diagram_figure, gelu_vs_relu_figure, save_figure, use_course_style

FIGURES: dict[str, Callable[[], matplotlib.figure.Figure]] = {
    "ffn_expand_activate_contract": ffn_diagram_figure,
    "gelu_vs_relu": gelu_vs_relu_figure,
}


def regenerate(out: Path | None = None) -> list[Path]:
    """Draw every figure in ``FIGURES`` into ``out`` (default ``figures/``); return the paths written."""
    matplotlib.use("Agg")
    use_course_style()
    return [save_figure(make(), name, out) for name, make in FIGURES.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES_DIR, help="folder to write into (default: figures/)")
    args = parser.parse_args(argv)
    for path in regenerate(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
