"""Notebook setup: the same few lines at the top of every notebook end here.

The notebook's setup cell only has to make ``helpers`` importable (it walks up
from the working directory to the repository root, or, in Google Colab, clones
the repository once). ``setup()`` then does the rest:

* in Colab, installs the course's runtime packages that Colab lacks (normally
  none: Colab ships torch, numpy, matplotlib, tqdm, ipywidgets and transformers),
  upgrades transformers if Colab's is older than the course's bound (once: the
  next run finds it new enough), and never touches Colab's own torch;
* seeds Python, NumPy and torch;
* runs torch on one CPU thread (see ``setup``);
* applies the course's plotting style;
* returns the device the course computes on: the CPU, always (see ``pick_device``);
* prints one line with the versions and the device.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import random
import subprocess
import sys

#: Where the course lives; the notebooks' setup cell and Colab badges use the same slug.
REPO_SLUG = "ffn-course/ffn-course"
REPO_URL = f"https://github.com/{REPO_SLUG}.git"

#: import name -> pip requirement, for what the notebooks import at run time.
RUNTIME_PACKAGES: dict[str, str] = {
    "numpy": "numpy>=2.1",
    "matplotlib": "matplotlib>=3.10",
    "torch": "torch>=2.11",
    "tqdm": "tqdm>=4.66",
    "ipywidgets": "ipywidgets>=7.7.1",
    "transformers": "transformers>=5.6",
}

#: Runtime packages that are upgraded in Colab when the installed version is below their bound (not only
#: when missing). Colab ships ``transformers`` but may ship a release older than notebook 08 needs; Colab's
#: own torch, numpy, matplotlib and ipywidgets are never touched.
UPGRADE_IF_OLDER: tuple[str, ...] = ("transformers",)

VERSION_LINE_PREFIX = "Course environment:"

#: ``FFN_FLUSH_DENORMAL=1`` makes ``setup`` flush subnormal floats to zero, as some CPUs and kernels do: the tests
#: run notebook 01 that way to prove its stored outputs do not depend on how a CPU treats subnormal numbers.
FLUSH_DENORMAL_ENV = "FFN_FLUSH_DENORMAL"


def in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def missing_packages() -> list[str]:
    """Requirements (pip specs) of the runtime packages that cannot be imported here."""
    return [spec for module, spec in RUNTIME_PACKAGES.items() if importlib.util.find_spec(module) is None]


def _version_tuple(text: str) -> tuple[int, ...]:
    """``"5.6.0"`` -> ``(5, 6, 0)``; stops at the first part that is not a number (``"5.7.0.dev0"`` -> 5, 7, 0)."""
    parts = []
    for part in text.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(parts)


def _installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (without importing it), or ``None``."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def outdated_packages() -> list[str]:
    """Requirements (pip specs) of the ``UPGRADE_IF_OLDER`` packages installed below their lower bound."""
    outdated = []
    for module in UPGRADE_IF_OLDER:
        spec = RUNTIME_PACKAGES[module]
        installed = _installed_version(module)
        if installed is not None and _version_tuple(installed) < _version_tuple(spec.split(">=")[1]):
            outdated.append(spec)
    return outdated


def install_missing(quiet: bool = True) -> list[str]:
    """pip-install only the runtime packages that are missing or, for ``UPGRADE_IF_OLDER``, too old.

    Returns what was installed (pip specs); nothing, and no pip call, when everything is there.
    """
    missing = missing_packages()
    missing += [spec for spec in outdated_packages() if spec not in missing]
    if missing:
        cmd = [sys.executable, "-m", "pip", "install", *(["--quiet"] if quiet else []), *missing]
        done = subprocess.run(cmd)
        if done.returncode != 0:
            raise RuntimeError(f"Could not install {', '.join(missing)} with pip (exit status {done.returncode}; "
                               f"pip's message is above). Check that this runtime is online, then run the setup "
                               f"cell again.")
    return missing


def seed_everything(seed: int = 0) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and, if present, CUDA)."""
    import numpy as np
    import torch

    from helpers import validate

    validate.non_negative_int("seed", seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device():
    """The course's device: ``torch.device('cpu')``, also on a GPU runtime.

    The course's models are tiny (a few thousand to a few hundred thousand parameters): on a GPU each step would
    be dominated by kernel launches, and the stored outputs are written for the CPU (matrix products on a GPU sum
    in another order and may use TF32). So every notebook runs on the CPU wherever it is opened; the version line
    says so when a GPU is present.
    """
    import torch

    return torch.device("cpu")


def version_line(device) -> str:
    """One line naming Python, torch, NumPy and the device (differs by machine: not compared by nbval)."""
    import numpy as np
    import torch

    gpu = " (a GPU is present; the course runs on the CPU)" if torch.cuda.is_available() else ""
    return (f"{VERSION_LINE_PREFIX} Python {platform.python_version()} | torch {torch.__version__} | "
            f"numpy {np.__version__} | device: {device}{gpu} | CPU threads: {torch.get_num_threads()}")


def setup(seed: int = 0, *, threads: int | None = 1, quiet: bool = False):
    """Prepare a notebook: install what Colab lacks, seed, style plots, return the device (the CPU).

    ``threads``: CPU threads for torch. The course's models are tiny, so one thread
    is as fast as several (more threads mostly wait for each other, badly so on a
    busy machine), and it fixes the order of floating-point sums, so the printed
    numbers are the same on machines with different core counts. ``None`` keeps
    torch's default; the benchmarks choose their own setting.
    """
    if in_colab():
        install_missing()
    import torch

    from helpers import validate
    from helpers.plotting import use_course_style

    if threads is not None:
        torch.set_num_threads(validate.positive_int("threads", threads))
    if os.environ.get(FLUSH_DENORMAL_ENV, "").strip() == "1":    # a test runs notebooks as on a flush-to-zero CPU
        torch.set_flush_denormal(True)
    seed_everything(seed)
    use_course_style()
    device = pick_device()
    if not quiet:
        print(version_line(device))
    return device


#: The first code cell of every notebook, character for character (a test checks this).
#: It must run before ``helpers`` is importable, so it only finds or fetches the
#: repository and hands over to ``setup()``. ``FFN_COURSE_REPO`` overrides the URL
#: (tests point it at a local clone).
SETUP_CELL = '''\
# Setup (identical in every notebook): find the course's `helpers` package, or fetch the course in Colab.
import os, subprocess, sys
from pathlib import Path

REPO_URL = os.environ.get("FFN_COURSE_REPO", "https://github.com/ffn-course/ffn-course.git")
if "google.colab" in sys.modules and not Path("ffn-course/helpers").is_dir():
    fetch = subprocess.run(["git", "clone", "--quiet", "--depth", "1", REPO_URL, "ffn-course"],
                           capture_output=True, text=True)
    if fetch.returncode != 0:
        raise RuntimeError(f"Could not fetch the course from {REPO_URL} ({' '.join(fetch.stderr.split())}). Check "
                           "that this runtime is online and the address is right, then run this cell again.")
ROOT = next((p for p in [Path.cwd(), *Path.cwd().parents, Path.cwd() / "ffn-course"]
             if (p / "helpers" / "__init__.py").is_file()), None)
if ROOT is None:
    raise RuntimeError("Cannot find the course's helpers/ folder: open this notebook from inside the course repository.")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers.env import setup
DEVICE = setup(seed=0)'''
