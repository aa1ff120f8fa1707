"""The notebooks' setup cell as Google Colab runs it, without Colab and without the network.

A learner who clicks "Open in Colab" gets a runtime with no course files: the setup
cell (``helpers.env.SETUP_CELL``, the first code cell of every notebook) must clone
the course into ``./ffn-course``, make ``helpers`` importable, install only what
Colab lacks (never torch, numpy, matplotlib or ipywidgets, which Colab ships), and do
nothing more when it runs again.

Each case runs the cell in a fresh Python process in an empty directory (Colab's
``/content``) with

* a stand-in ``google.colab`` package, imported before the cell as Colab does
  (the cell's ``"google.colab" in sys.modules`` test sees it);
* ``FFN_COURSE_REPO`` pointed at a ``file://`` git repository holding a snapshot of
  this working tree's ``helpers/`` (so the test checks the code under test);
* every subprocess the cell or ``helpers/env.py`` starts recorded (not those of libraries they import,
  e.g. a CUDA build of torch runs ``ldconfig -p`` when it loads), and pip commands recorded but never run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.env import RUNTIME_PACKAGES, SETUP_CELL, VERSION_LINE_PREFIX

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}
COLAB_SHIPS = ["torch", "numpy", "matplotlib", "ipywidgets"]

# Runs in the child process: fake Colab, record subprocesses, hide modules on request, run the cell N times.
DRIVER = textwrap.dedent('''
    import importlib.util, json, os, subprocess, sys
    from pathlib import Path

    import google.colab  # the stand-in package: present in sys.modules, as in a Colab runtime

    out_file, runs, hidden = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split(",")) - {""}
    calls = []

    real_find_spec = importlib.util.find_spec
    def find_spec(name, package=None):
        """Pretend the hidden modules are not installed (what Colab would lack)."""
        return None if name.split(".")[0] in hidden else real_find_spec(name, package)
    importlib.util.find_spec = find_spec

    import traceback
    HELPERS_ENV = str(Path("helpers") / "env.py")

    def started_by_the_course():
        """True when the command comes from the setup cell or ``helpers/env.py`` itself, not from a library
        they import (e.g. a CUDA build of torch runs ``ldconfig -p`` while it loads): that is not the cell's doing."""
        for frame in reversed(traceback.extract_stack()[:-2]):
            name = frame.filename
            if name.endswith("subprocess.py"):
                continue
            return name == "<setup cell>" or name.endswith(HELPERS_ENV)
        return False

    class RecordingPopen(subprocess.Popen):
        """Record the course's own commands; run git for real, replace pip by a no-op (nothing is installed)."""
        def __init__(self, args, *rest, **kwargs):
            argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
            if started_by_the_course():
                calls.append(argv)
            if "pip" in argv or Path(argv[0]).name.startswith("pip"):
                code = "import sys; sys.exit(1)" if os.environ.get("FAKE_PIP_FAILS") else "pass"
                args = [sys.executable, "-c", code]
            super().__init__(args, *rest, **kwargs)
    subprocess.Popen = RecordingPopen

    cell = Path(sys.argv[4]).read_text(encoding="utf-8")
    per_run = []
    for _ in range(runs):
        start = len(calls)
        namespace = {"__name__": "__main__"}
        exec(compile(cell, "<setup cell>", "exec"), namespace)
        per_run.append(calls[start:])
    import helpers
    json.dump({"calls": per_run, "helpers": helpers.__file__, "root": str(namespace["ROOT"]),
               "device": str(namespace["DEVICE"]), "sys_path_roots": sys.path.count(str(namespace["ROOT"]))},
              open(out_file, "w"))
''')


def require_git():
    if shutil.which("git") is None:
        if IN_CI:
            pytest.fail("git is needed to test the Colab setup cell (CI is set: failing, not skipping)")
        pytest.skip("git is not installed: the Colab setup cell clones the course with git")


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A fake Colab: the stand-in google.colab package, the driver, the cell and a local course 'remote'."""
    require_git()
    base = tmp_path_factory.mktemp("colab")
    package = base / "site" / "google" / "colab"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text('"""Stand-in for Google Colab\'s package (tests only)."""\n')
    (base / "driver.py").write_text(DRIVER)
    (base / "setup_cell.py").write_text(SETUP_CELL, encoding="utf-8")

    remote = base / "remote"
    shutil.copytree(ROOT / "helpers", remote / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", remote)
    (base / "gitconfig").write_text("")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(base / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0"}
    git = ["git", "-c", "user.name=ffn-course tests", "-c", "user.email=tests@ffn-course.invalid"]
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "."], ["commit", "--quiet", "-m", "snapshot"]):
        subprocess.run([*git, *args], cwd=remote, env=env, check=True, capture_output=True)
    env.update({"FFN_COURSE_REPO": remote.as_uri(), "PYTHONPATH": str(base / "site"), "MPLBACKEND": "Agg"})
    return base, env


def run_setup(colab, content: Path, runs: int = 1, hidden=()) -> tuple[dict, str]:
    """Run the setup cell ``runs`` times in one fresh Python process inside ``content``."""
    base, env = colab
    content.mkdir(exist_ok=True)
    out = content.parent / f"result-{len(list(content.parent.glob('result-*')))}.json"
    proc = subprocess.run([sys.executable, str(base / "driver.py"), str(out), str(runs), ",".join(hidden),
                           str(base / "setup_cell.py")], cwd=content, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, f"the setup cell failed in the fake Colab:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text()), proc.stdout


def run_failing_setup(colab, content: Path, hidden=(), **env) -> str:
    """Run the setup cell once where it must fail; returns its stderr (the traceback a learner sees)."""
    base, base_env = colab
    content.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, str(base / "driver.py"), str(content.parent / "failed.json"), "1",
                           ",".join(hidden), str(base / "setup_cell.py")], cwd=content, env={**base_env, **env},
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0, "the setup cell should have failed"
    return proc.stderr


def clones(calls):
    return [c for c in calls if c[:2] == ["git", "clone"]]


def installs(calls):
    return [c for c in calls if "pip" in c or Path(c[0]).name.startswith("pip")]


def test_setup_cell_fetches_the_course_once_and_installs_nothing_colab_has(colab, tmp_path):
    content = tmp_path / "content"
    first, stdout = run_setup(colab, content, runs=2)  # run the cell, then run it again in the same kernel
    clone = content / "ffn-course"

    # 1. fetched the course into ./ffn-course (a clone of FFN_COURSE_REPO) and imported helpers from it
    assert [len(clones(calls)) for calls in first["calls"]] == [1, 0], first["calls"]
    assert clones(first["calls"][0])[0][-2:] == [colab[1]["FFN_COURSE_REPO"], "ffn-course"]
    assert (clone / "helpers" / "__init__.py").is_file()
    assert Path(first["root"]) == clone
    assert Path(first["helpers"]).resolve() == (clone / "helpers" / "__init__.py").resolve()
    assert first["sys_path_roots"] == 1, "re-running the cell should not add the course to sys.path again"
    assert first["device"] == "cpu"
    assert stdout.count(VERSION_LINE_PREFIX) == 2, stdout

    # 2. installed nothing: everything the course imports is already there, as on Colab
    assert not installs(sum(first["calls"], [])), f"pip was called: {installs(sum(first['calls'], []))}"

    # 3. a fresh kernel (runtime restarted, files kept) does not clone again
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout
    second, _ = run_setup(colab, content, runs=1)
    assert second["calls"] == [[]], f"second run should run no command, ran {second['calls']}"
    assert Path(second["helpers"]).resolve() == (clone / "helpers" / "__init__.py").resolve()
    assert subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout == head
    assert sorted(p.name for p in content.iterdir()) == ["ffn-course"], "the cell should create nothing else"


def test_setup_cell_installs_only_what_colab_lacks(colab, tmp_path):
    """If a runtime lacked tqdm, the cell would pip-install tqdm alone, never one of Colab's own packages."""
    result, _ = run_setup(colab, tmp_path / "content", hidden=["tqdm"])
    pip = installs(sum(result["calls"], []))
    assert len(pip) == 1, pip
    assert pip[0][:4] == [sys.executable, "-m", "pip", "install"], pip
    requested = [arg for arg in pip[0][4:] if not arg.startswith("-")]
    assert requested == [RUNTIME_PACKAGES["tqdm"]]
    for name in COLAB_SHIPS:
        assert not any(arg.lower().startswith(name) for arg in requested), f"would reinstall {name}"


def test_setup_cell_says_what_failed_when_the_course_cannot_be_fetched(colab, tmp_path):
    """Offline (or a wrong address), the trial saw git's message and a bare CalledProcessError; the cell now
    raises one error that names what failed (the fetch, from where, git's own words) and what to do."""
    nowhere = (tmp_path / "no-such-repo").as_uri()
    err = run_failing_setup(colab, tmp_path / "content", FFN_COURSE_REPO=nowhere)
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: Could not fetch the course from {nowhere} (fatal: "), last
    assert last.endswith("Check that this runtime is online and the address is right, then run this cell again."), last
    assert "CalledProcessError" not in err
    assert not (tmp_path / "content" / "ffn-course").exists()


def test_setup_says_what_failed_when_pip_cannot_install(colab, tmp_path):
    err = run_failing_setup(colab, tmp_path / "content", hidden=["tqdm"], FAKE_PIP_FAILS="1")
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: Could not install {RUNTIME_PACKAGES['tqdm']} with pip (exit status 1"), last
    assert "then run the setup cell again." in last and "CalledProcessError" not in err
