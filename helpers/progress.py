"""Progress bars that read finished in a saved notebook.

``tqdm.auto`` draws a widget in Jupyter, but a saved notebook keeps the text the
widget had when it was first shown ("0/24"), so a committed notebook shows a
frozen, empty bar. ``progress`` is plain text ``tqdm`` instead, written to
stdout inside a notebook: it updates live in JupyterLab and Colab (each update
overwrites the line with a carriage return), the saved notebook renders the
final state ``100%|██████████| 24/24 [...]``, and nbval, which collapses
carriage returns the same way, compares that final line (its timings are
masked by ``tests/nbval_sanitize.cfg``). Outside a notebook (scripts, the
benchmarks) it writes to stderr, as tqdm usually does.

Use it like tqdm::

    for step in progress(range(200), desc="training"):
        ...
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tqdm.std import tqdm


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, nbval, nbclient)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except AttributeError:
        return False
    return ip is not None and type(ip).__name__ in {"ZMQInteractiveShell", "Shell"}


def progress(iterable: Iterable | None = None, *, desc: str = "", total: int | None = None,
             disable: bool = False, **kwargs) -> tqdm:
    """A tqdm bar over ``iterable`` that the saved notebook shows finished.

    Args:
        iterable: what to loop over (its ``len`` sets the total when it has one).
        desc: the bar's label.
        total: the number of items, when ``iterable`` has no ``len``.
        disable: no bar at all (the loop still runs).
        kwargs: passed on to tqdm (``mininterval``, ``leave``, ...).

    Returns:
        the ``tqdm`` object: iterate over it, or call ``update``/``set_postfix``.
    """
    kwargs.setdefault("mininterval", 0.5)
    if in_notebook():
        kwargs.setdefault("file", sys.stdout)
    return tqdm(iterable, desc=desc, total=total, disable=disable, **kwargs)
