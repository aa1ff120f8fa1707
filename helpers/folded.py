"""Printed tables with one part in view and the rest folded (notebooks 03, 05 and 09).

``Folded(shown, folded, label)`` is a cell's last expression: in Jupyter (HTML) it shows ``shown`` and folds
``folded`` into a ``<details>`` block the learner opens with a click; its ``text/plain`` form holds both texts,
so a test that compares a cell's plain output (strict nbval) still checks every folded number.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

__all__ = ["Folded"]


@dataclass
class Folded:
    """``shown``: the text in view (a table, a one-line verdict); ``folded``: the text behind the click;
    ``label``: the click's words."""

    shown: str
    folded: str
    label: str = "the verdicts and checks behind this table (click)"

    def __repr__(self) -> str:
        return f"{self.shown}\n\n[{self.label}]\n{self.folded}"

    def _repr_html_(self) -> str:
        return (f"<pre>{html.escape(self.shown)}</pre><details><summary>{html.escape(self.label)}</summary>"
                f"<pre>{html.escape(self.folded)}</pre></details>")
