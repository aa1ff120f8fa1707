"""Links a learner clicks: Colab and Binder badges and every relative link or image in the docs.

* Each notebook's Open-in-Colab badge (``notebooks/`` and ``notebooks/solutions/``)
  opens that very notebook under the repository slug ``helpers.env.REPO_SLUG``.
* Every Colab, Binder or GitHub link to this repository names an existing file.
* Every relative link or image in the README, other Markdown files and the notebooks'
  markdown cells resolves, relative to the file, to a file or folder that exists.
* The README's Binder badge launches this repository, and the README says that
  Binder builds ``environment.yml`` (that the file parses and installs
  ``requirements.txt`` is tested in ``tests/test_repo.py``).

Other web links are not fetched (the tests run offline).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from helpers.env import REPO_SLUG

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
SKIP_DIRS = {".git", "artifacts", "ffn-course", ".pytest_cache", ".ipynb_checkpoints", ".benchmarks"}
MARKDOWN_FILES = sorted(p for p in ROOT.rglob("*.md") if not SKIP_DIRS & set(p.relative_to(ROOT).parts))

COLAB = "https://colab.research.google.com/github/"
BINDER = "https://mybinder.org/v2/gh/"
GITHUB = "https://github.com/"
EXTERNAL_ASSETS = {"https://colab.research.google.com/assets/colab-badge.svg", "https://mybinder.org/badge_logo.svg"}

# "](target)" of inline links and images (also the outer and inner targets of a badge
# "[![alt](image)](link)"), "[ref]: target" definitions, and HTML src/href attributes.
INLINE = re.compile(r"\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML = re.compile(r"""<(?:img|a|source)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.I)
FENCED = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def markdown_of(path: Path) -> str:
    """The Markdown a learner reads in ``path``: the file, or a notebook's markdown cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def link_targets(markdown: str) -> list[str]:
    text = INLINE_CODE.sub("", FENCED.sub("", markdown))
    return [t for pattern in (INLINE, REFERENCE, HTML) for t in pattern.findall(text) if t]


def repo_path_of(url: str) -> str | None:
    """The file a Colab/Binder/GitHub link to this repository opens, '' for the repository itself;
    None for other web links. Raises AssertionError for a link to this service with a wrong slug."""
    parts = urlsplit(url)
    if url.startswith(COLAB):
        prefix = f"{COLAB}{REPO_SLUG}/blob/main/"
        assert url.startswith(prefix), f"Colab link {url} should start with {prefix}"
        return unquote(parts.path.split("/blob/main/", 1)[1])
    if url.startswith(BINDER):
        prefix = f"{BINDER}{REPO_SLUG}/"
        assert url.startswith(prefix), f"Binder link {url} should start with {prefix}"
        query = parse_qs(parts.query)
        if "labpath" in query:
            return query["labpath"][0]
        if "urlpath" in query:
            return re.sub(r"^(lab/tree|tree|notebooks|lab)/?", "", query["urlpath"][0].split("?")[0])
        return ""
    if url.startswith(f"{GITHUB}{REPO_SLUG}/blob/") or url.startswith(f"{GITHUB}{REPO_SLUG}/tree/"):
        return unquote(parts.path.split("/", 5)[5]) if parts.path.count("/") >= 5 else ""
    return None


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in link_targets(markdown_of(path)):
        if target.startswith(("#", "mailto:", "attachment:")) or target in EXTERNAL_ASSETS:
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # a URL
            try:
                in_repo = repo_path_of(target)
            except AssertionError as err:
                broken.append(str(err))
                continue
            if in_repo is not None and not (ROOT / in_repo).exists():
                broken.append(f"{target} opens {in_repo}, which does not exist in the repository")
            continue
        relative = unquote(target.split("#")[0].split("?")[0])
        resolved = ((ROOT / relative.lstrip("/")) if relative.startswith("/") else (path.parent / relative)).resolve()
        shown = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved
        if not resolved.exists():
            broken.append(f"{target} (resolved to {shown}) does not exist")
        elif not resolved.is_relative_to(ROOT):
            broken.append(f"{target} points outside the repository")
    return broken


def test_the_link_checker_sees_links():
    """Guard the regular expressions: badges, images, references and HTML are all found."""
    sample = (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://x/y.ipynb)\n"
        "![figure](../figures/a.png \"title\") and [code](helpers/ffn.py#L3) [ref][1] `[not](a-link)`\n"
        "[1]: notebooks/solutions/\n<img src=\"figures/b.png\" width=300>\n```\n[nor](this)\n```\n")
    assert link_targets(sample) == [
        "https://colab.research.google.com/assets/colab-badge.svg", "https://x/y.ipynb", "../figures/a.png",
        "helpers/ffn.py#L3", "notebooks/solutions/", "figures/b.png"], sample
    assert repo_path_of(f"{BINDER}{REPO_SLUG}/HEAD?urlpath=lab/tree/notebooks/01_activations.ipynb") \
        == "notebooks/01_activations.ipynb"
    assert repo_path_of(f"{COLAB}{REPO_SLUG}/blob/main/notebooks/x.ipynb") == "notebooks/x.ipynb"
    assert repo_path_of("https://arxiv.org/abs/1606.08415") is None
    with pytest.raises(AssertionError, match="should start with"):
        repo_path_of(f"{COLAB}someone/else/blob/main/notebooks/x.ipynb")


@pytest.mark.parametrize("path", MARKDOWN_FILES + NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_and_repository_links_resolve(path):
    assert not broken_links(path), f"{path.relative_to(ROOT)}: broken links:\n" + "\n".join(broken_links(path))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_colab_badge_opens_this_notebook(path):
    first_cell = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    badges = [t for t in link_targets(first_cell) if t.startswith(COLAB)]
    own = f"{COLAB}{REPO_SLUG}/blob/main/{path.relative_to(ROOT).as_posix()}"
    assert badges == [own], f"the title cell's Colab badge should be exactly {own}, found {badges}"


def test_readme_colab_links_match_their_table_rows():
    for line in README.read_text(encoding="utf-8").splitlines():
        colab = [t for t in link_targets(line) if t.startswith(COLAB)]
        local = [t for t in link_targets(line) if t.startswith("notebooks/") and t.endswith(".ipynb")]
        for url in colab:
            assert (ROOT / repo_path_of(url)).is_file(), f"{url} opens a notebook that does not exist"
            assert not local or repo_path_of(url) in local, f"row links {local} but its Colab badge opens {url}"


def test_readme_binder_badge_and_environment():
    text = README.read_text(encoding="utf-8")
    binder = [t for t in link_targets(text) if t.startswith("https://mybinder.org/v2/")]
    assert binder, "the README should have a Binder badge"
    for url in binder:
        assert url.startswith(f"{BINDER}{REPO_SLUG}/"), f"Binder badge {url} should launch {BINDER}{REPO_SLUG}/..."
        assert (ROOT / repo_path_of(url)).exists(), f"Binder badge {url} opens a path that does not exist"
    paragraphs = re.split(r"\n\s*\n", text)
    assert any("Binder" in p and "environment.yml" in p for p in paragraphs), \
        "the README should say, next to Binder, that Binder builds environment.yml"
