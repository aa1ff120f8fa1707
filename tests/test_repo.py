"""Repository-level promises: layout, dependencies in step, the README's commands, figures present."""
import re
from pathlib import Path

import yaml

from helpers import env
from helpers.tools import figures

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOP_LEVEL = {"notebooks", "figures", "helpers", "tests", "environment.yml", "requirements.txt", "README.md", ".ci",
             "pytest.ini", ".gitignore", "requirements-lock.txt", ".git", "artifacts", ".benchmarks", ".pytest_cache", "ffn-course"}


def requirement_names(lines):
    names = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if line:
            name = re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower()
            names[name] = line
    return names


REQS = requirement_names((ROOT / "requirements.txt").read_text().splitlines())


def test_only_expected_top_level_entries():
    assert {p.name for p in ROOT.iterdir()} <= TOP_LEVEL


def test_requirements_have_lower_bounds_and_no_caps():
    assert {"numpy", "matplotlib", "torch", "jupyterlab", "nbval", "ipywidgets", "tqdm", "pytest"} <= set(REQS)
    for name, spec in REQS.items():
        assert ">=" in spec and "<" not in spec.replace(">=", "") and "==" not in spec, spec


def test_environment_yml_installs_requirements_txt():
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = spec["dependencies"]
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1 and requirement_names(pip_sections[0]) == REQS, \
        "environment.yml's pip list must name the same packages and bounds as requirements.txt"
    python = [d for d in deps if isinstance(d, str) and d.startswith("python")]
    assert python and "<" not in python[0], "do not cap Python (Colab runs 3.13)"
    assert "pip" in deps


def test_runtime_packages_are_in_requirements():
    for spec in env.RUNTIME_PACKAGES.values():
        name = requirement_names([spec])
        assert name.items() <= REQS.items(), spec


def test_readme_shows_the_ci_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^TEST_COMMAND='([^']+)'", ci, re.M).group(1)
    assert "python -m pytest" in command and f"\n{command}\n" in README


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_lower_bounds_are_the_versions_ci_tests():
    """CI's 'colab' leg installs .ci/lowest.txt: each requirement's lower bound, exactly (Colab's versions)."""
    lowest = _pins(ROOT / ".ci" / "lowest.txt")
    assert set(lowest) == set(REQS), "pin every requirement at its lower bound in .ci/lowest.txt"
    for name, spec in REQS.items():
        bound = spec.split(">=")[1].strip()
        assert lowest[name] == bound or lowest[name].startswith(bound + ".") and set(lowest[name][len(bound):]) <= set(".0"), \
            f"{name}: requirements.txt says >= {bound}, CI tests {lowest[name]}"


def test_lock_file_pins_every_requirement_within_its_bounds():
    lock = _pins(ROOT / "requirements-lock.txt")
    for name, spec in REQS.items():
        assert name in lock, f"requirements-lock.txt lacks {name} (python .ci/make_lock.py)"
        bound = tuple(int(x) for x in spec.split(">=")[1].strip().split("."))
        pinned = tuple(int(x) for x in re.match(r"[\d.]+", lock[name]).group(0).strip(".").split("."))
        assert pinned >= bound, f"{name}: locked {lock[name]} is below the lower bound {spec}"
    assert "requirements-lock.txt" in README and "-c requirements-lock.txt" in README


def test_readme_figures_exist_and_registry_is_complete():
    referenced = set(re.findall(r"figures/([\w\-]+\.png)", README))
    assert referenced, "the README should show the course's figures"
    for name in referenced | {f"{n}.png" for n in figures.FIGURES}:
        assert (ROOT / "figures" / name).is_file(), f"figures/{name} is missing: run python -m helpers.tools.figures"


def test_figures_regenerate(tmp_path):
    written = figures.regenerate(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{n}.png" for n in figures.FIGURES)
    assert all(p.stat().st_size > 10_000 for p in written)


def test_package_docstring_lists_every_course_module():
    """helpers/__init__.py is the package's table of contents: every module of the course library is in it."""
    import re

    import helpers

    listed = set(re.findall(r"^(\w+)\s+\S", helpers.__doc__.split("The course library")[1], re.M))
    modules = {p.stem for p in (ROOT / "helpers").glob("*.py")} - {"__init__", "__main__", "grade"}
    assert modules <= listed, f"not in helpers/__init__.py's list: {sorted(modules - listed)}"
    assert listed <= modules, f"listed but missing: {sorted(listed - modules)}"
