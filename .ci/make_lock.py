"""Write requirements-lock.txt: the exact versions of requirements.txt and everything they pull in, as installed.

Run it in the environment that produced the committed notebook outputs (CI's pinned leg), after re-executing the
notebooks: `python .ci/make_lock.py`. A teacher reproduces that environment with
`python -m pip install -r requirements.txt -c requirements-lock.txt` (torch: see the README for the CPU build).
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, str]:
    """name -> installed version, for ``roots`` and all their (non-extra, applicable) dependencies."""
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = _canonical(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist.version
        for req in dist.requires or []:
            if ";" in req:
                marker = req.split(";", 1)[1]
                if "extra" in marker:
                    continue
                try:
                    from packaging.markers import Marker
                    if not Marker(marker).evaluate():
                        continue
                except Exception:
                    pass
            todo.append(_name(req))
    return found


def main() -> None:
    reqs = [_name(line) for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    pins = closure(reqs)
    torch_version = pins.get("torch", "")
    lines = ["# The exact versions the committed notebook outputs were made with (CI's pinned leg; written by",
             "# `python .ci/make_lock.py`). Use as constraints: `pip install -r requirements.txt -c requirements-lock.txt`.",
             f"# Python {sys.version.split()[0]}; torch {torch_version} (the CPU build: see the README).",
             "# The nvidia-*/triton packages of torch's CUDA build are left out: they are not needed on a CPU build."]
    for name in sorted(pins):
        if name.startswith("nvidia-") or name in {"triton", "cuda-bindings", "cuda-pathfinder"}:
            continue
        version = pins[name].split("+")[0]
        lines.append(f"{name}=={version}")
    (ROOT / "requirements-lock.txt").write_text("\n".join(lines) + "\n")
    print(f"wrote requirements-lock.txt: {len(lines) - 4} pins")


if __name__ == "__main__":
    main()
