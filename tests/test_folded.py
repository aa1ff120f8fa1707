"""helpers.folded: the shown text in view, the rest in <details>; text/plain keeps both."""
from helpers.folded import Folded


def test_plain_text_keeps_every_line_and_html_folds_the_rest():
    f = Folded("table\n  a 1", "verdicts\n  b < 2", label="more")
    assert repr(f) == "table\n  a 1\n\n[more]\nverdicts\n  b < 2"
    page = f._repr_html_()
    assert page.startswith("<pre>table") and "<details><summary>more</summary>" in page and "b &lt; 2" in page
