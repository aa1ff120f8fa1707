"""helpers.plotting.interactive_plot(..., static_copy=True): one display bundle with the live widget's view, a PNG
of the figure at the defaults (for static viewers of the saved notebook) and its text; no figure left open.
"""
import base64

import matplotlib.pyplot as plt
import pytest

from helpers import plotting

pytest.importorskip("ipywidgets")


def _draw(a=1, label="x"):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, a], label=label)
    plt.show()


def test_static_copy_puts_a_png_beside_the_widget_view(monkeypatch):
    monkeypatch.delenv(plotting.STATIC_ENV, raising=False)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.append((objs, kw)))
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: plt.close("all"))     # as the inline backend does
    before = set(plt.get_fignums())
    live = plotting.interactive_plot(_draw, static_copy=True, a=(0, 3, 1, 2), label=["x", "y"])
    assert live is not None and len(shown) == 1
    (bundle,), kwargs = shown[0]
    assert kwargs.get("raw") is True
    assert {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"} <= set(bundle)
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == live.model_id
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(plt.get_fignums()) <= before, "the static copy's figure is closed"


def test_without_widgets_static_copy_draws_one_figure(monkeypatch):
    monkeypatch.setenv(plotting.STATIC_ENV, "1")
    calls = []
    assert plotting.interactive_plot(lambda a=1: calls.append(a), static_copy=True, a=(0, 3, 1, 2)) is None
    assert calls == [2]


def test_static_copy_is_the_default():
    import inspect
    assert inspect.signature(plotting.interactive_plot).parameters["static_copy"].default is True
