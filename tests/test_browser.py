"""Notebooks 01 and 03 as a learner meets them: JupyterLab in a real (headless) browser.

The test starts JupyterLab on loopback (free port, random token) over a temporary
copy of the course (``helpers/``, ``figures/`` and notebooks 01 and 03 with their outputs
stripped, so nothing committed is touched and every output on screen comes from
this run), opens a notebook in Debian's Chromium driven by Playwright, runs
*Run → Run All Cells* from the menu, waits until the kernel is idle with no cell
queued, and checks what the learner would see:

* every code cell ran, and no cell shows an error or anything on stderr;
* at least one plot image is rendered in the outputs;
* the slider of ``helpers.plotting.interactive_plot`` is rendered (notebook 01: Swish's
  ``beta``; notebook 03: the neuron explorer's ``neuron``), and moving it with the
  keyboard redraws the plot (the image changes) without an error.

Second cases check that the same checks catch what can go wrong: a copy of notebook 01
with a ``1/0`` cell inserted halfway (a broken cell cannot pass unnoticed), and a copy
of notebook 03 whose explorer callback raises as soon as a control moves (a broken
explorer cannot pass unnoticed, although its first figure renders).

A quick check without a browser: JupyterLab 4 has the widget extension that ipywidgets 8 needs
(``jupyterlab_widgets`` 3, installed with ipywidgets), else sliders would show as text.

Screenshots and the server's log go to ``artifacts/`` (ignored by git). The server,
its kernels and the browser are shut down even when a check fails, and the test
fails if any of their processes is left behind.

Needs the Python package ``playwright`` and Chromium at ``/usr/bin/chromium``
(Debian package ``chromium``; another binary via ``FFN_CHROMIUM``). Without them the
test is skipped on a learner's machine, but fails under CI (``CI`` set), where
``.ci/run`` installs both. Run it alone with ``python -m pytest tests/test_browser.py``.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "notebooks/01_activations.ipynb"
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("FFN_CHROMIUM", "/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}
# What keeps Chromium quiet on a machine with a closed network (no first-run, sync or update traffic).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SLIDER = "beta"  # notebook 01: interactive_plot(draw, beta=(0.0, 10.0, 0.1, 1.0))
BROKEN_CELL = "1/0  # inserted by tests/test_browser.py: this cell must be reported"
EXPLORER_NOTEBOOK = "notebooks/03_key_value_memories.ipynb"
EXPLORER_SLIDER = "neuron"  # notebook 03: interactive_plot(draw_neuron, layer=..., neuron=(0, d_ff - 1, 1, FEATURED))
EXPLORER_CALL = "_ = interactive_plot(draw_neuron,"
# Put in front of the explorer's interactive_plot call in the broken copy: the first figure (at the defaults)
# still renders, every later one raises.
BROKEN_CALLBACK = (
    "_first_draw = draw_neuron\n\n\n"
    "def draw_neuron(layer, neuron):  # inserted by tests/test_browser.py: the callback fails once a control moves\n"
    "    if (layer, neuron) != (1, FEATURED):\n"
    "        raise RuntimeError('inserted by tests/test_browser.py: the explorer callback fails')\n"
    "    _first_draw(layer, neuron)\n\n\n")

# JupyterLab user settings for the run: render every cell (no windowing, so off-screen
# outputs are in the page) and no news or update pop-ups.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}

SERVER_START_S = 90
RUN_ALL_S = 150
RUN_ALL_03_S = 420  # notebook 03 computes more (knock-outs, 160 edits): allow for a loaded machine
SLIDER_S = 45


#: CI runs the browser test in one leg only (.ci/run sets this in the others): one JupyterLab run is enough to
#: prove the course as a learner meets it, and three would cost CI minutes for nothing new.
SKIP_ENV = "FFN_SKIP_BROWSER"


def require_browser_tools():
    """Skip (learner's machine, or a CI leg that sets ``FFN_SKIP_BROWSER=1``) or fail (CI) when Playwright or
    Chromium is missing."""
    if os.environ.get(SKIP_ENV, "").strip() == "1":
        pytest.skip(f"{SKIP_ENV}=1: the browser test runs in another CI leg")
    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the Python package playwright is not installed (python -m pip install playwright)")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        problems.append(f"no Chromium at {CHROMIUM} (Debian/Ubuntu: apt-get install chromium; "
                        "or set FFN_CHROMIUM to a Chromium binary)")
    if problems:
        message = "the browser test cannot run: " + "; ".join(problems)
        if IN_CI:
            pytest.fail(f"{message}. CI is set, so this is a failure, not a skip: .ci/run installs them.",
                        pytrace=False)
        pytest.skip(message)


# ----------------------------------------------------------------------------- processes


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, start time) for every process (Linux /proc; empty elsewhere)."""
    table = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[0], fields[19])
    return table


def descendants(pid: int) -> dict[int, str]:
    """Live descendants of ``pid`` as pid -> start time (so a reused pid is not mistaken for ours)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = {}, [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if table[child][1] != "Z":
                found[child] = table[child][2]
                stack.append(child)
    return found


def still_running(watched: dict[int, str]) -> list[int]:
    table = _proc_table()
    return sorted(pid for pid, start in watched.items()
                  if pid in table and table[pid][2] == start and table[pid][1] != "Z")


def describe(pids: list[int]) -> str:
    names = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = "?"
        names.append(f"{pid} ({command[:100]})")
    return ", ".join(names)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- the server


def strip_outputs(nb: dict) -> dict:
    """The notebook without outputs, counts or saved widget state: what shows after a run is from the run."""
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def with_failing_cell(nb: dict) -> dict:
    """A copy with a ``1/0`` code cell inserted halfway through the code cells."""
    nb = copy.deepcopy(nb)
    code = [i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"]
    at = code[len(code) // 2]
    nb["cells"].insert(at, {"cell_type": "code", "execution_count": None, "id": "inserted-failing-cell",
                            "metadata": {}, "outputs": [], "source": BROKEN_CELL})
    return nb


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    proc: subprocess.Popen
    log: Path
    notebooks: dict[str, str]
    watched: dict[int, str] = field(default_factory=dict)

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_states(self) -> list[str]:
        return [k["execution_state"] for k in self.api("/api/kernels")]

    def watch(self):
        """Remember the server's descendants (kernels) so teardown can prove they are gone."""
        self.watched.update(descendants(self.proc.pid))


def with_failing_callback(nb: dict) -> dict:
    """A copy of notebook 03 whose explorer callback raises for any control value but the defaults."""
    nb = copy.deepcopy(nb)
    cells = [cell for cell in nb["cells"] if cell["cell_type"] == "code" and EXPLORER_CALL in "".join(cell["source"])]
    assert len(cells) == 1, f"{EXPLORER_NOTEBOOK} should have one cell calling {EXPLORER_CALL!r}"
    cell = cells[0]
    cell["source"] = "".join(cell["source"]).replace(EXPLORER_CALL, BROKEN_CALLBACK + EXPLORER_CALL)
    return nb


def make_course_copy(root: Path) -> dict[str, str]:
    """Copy what notebooks 01 and 03 need into ``root``; return case -> notebook path relative to ``root``."""
    shutil.copytree(ROOT / "helpers", root / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    if (ROOT / "figures").is_dir():
        shutil.copytree(ROOT / "figures", root / "figures")
    (root / "notebooks").mkdir()
    cases = {}
    for notebook, broken_name, breaker in [(NOTEBOOK, "with_failing_cell", with_failing_cell),
                                           (EXPLORER_NOTEBOOK, "with_failing_callback", with_failing_callback)]:
        source = ROOT / notebook
        assert source.is_file(), f"{notebook} is missing"
        nb = strip_outputs(json.loads(source.read_text(encoding="utf-8")))
        broken = notebook.replace(".ipynb", f"_{broken_name}.ipynb")
        (root / notebook).write_text(json.dumps(nb, indent=1), encoding="utf-8")
        (root / broken).write_text(json.dumps(breaker(nb), indent=1), encoding="utf-8")
        prefix = notebook.split("/")[-1][:2]
        cases[f"{prefix}_as_committed"], cases[f"{prefix}_{broken_name}"] = notebook, broken
    return cases


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_browser_tools()
    base = tmp_path_factory.mktemp("jupyterlab")
    root, settings, runtime = base / "course", base / "settings", base / "runtime"
    root.mkdir()
    notebooks = make_course_copy(root)
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    token, port = secrets.token_hex(16), free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = base / "jupyterlab.log"
    # The learner's own Jupyter config and server files stay out of it; the kernel finds helpers/ in the copy.
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_CONFIG_DIR": str(base / "config")}
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.token={token}",
           "--ServerApp.ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root}", "--allow-root", "--LabApp.extension_manager=readonly",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}"]
    with open(log, "wb") as out:
        # Own process group: teardown can signal the server and anything it started together.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root,
                                start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, root, proc, log, notebooks)
    server.watched[proc.pid] = _proc_table().get(proc.pid, (0, "", ""))[2]
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with code {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                server.api("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
        yield server
    finally:
        stop_server(server)
        shutil.copy(log, ARTIFACTS / "browser_test_jupyterlab.log")
        left = still_running(server.watched)
        named = describe(left)  # before the kill below, which empties a process's command line
        for pid in left:  # never leave anything behind, and say so
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, f"processes left behind after shutting JupyterLab down: {named}"


def stop_server(server: Lab) -> None:
    """Shut kernels and server down politely, then by signal to the whole process group."""
    if server.proc.poll() is None:
        server.watch()
        try:
            for kernel in server.api("/api/kernels"):
                server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
            server.api("/api/shutdown", method="POST")
        except OSError:
            pass
        try:
            server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
    # Kernels run in their own sessions: give them a moment to notice (longer on a loaded machine), then they must
    # be gone.
    deadline = time.monotonic() + 40
    while still_running(server.watched) and time.monotonic() < deadline:
        time.sleep(0.3)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    # What this pytest process had started before (under pytest-xdist a worker runs other tests first, and
    # multiprocessing's resource tracker from a torch.distributed test lives as long as the worker) is not ours.
    before = descendants(os.getpid())

    def browser_processes():
        """Our new descendants that are not the server's (Playwright's driver, Chromium and its helpers)."""
        server = descendants(lab.proc.pid) | {lab.proc.pid: ""}
        return {pid: start for pid, start in descendants(os.getpid()).items()
                if pid not in server and before.get(pid) != start}

    with sync_playwright() as playwright:
        # Playwright gives each launch a fresh, empty user-data-dir of its own.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        ours = browser_processes()
        try:
            yield chromium
        finally:
            ours |= browser_processes()
            chromium.close()
    deadline = time.monotonic() + 10
    while still_running(ours) and time.monotonic() < deadline:
        time.sleep(0.2)
    lab.watched |= ours  # the lab fixture's teardown fails if any of them is still running


# ----------------------------------------------------------------------------- the learner's run


@dataclass
class Report:
    """What the page shows after Run All (and after moving the slider)."""
    prompts: list[str]
    errors: list[str]
    images: int
    slider: str | None = None
    slider_moved_to: str | None = None
    plot_changed: bool | None = None


def read_page(page) -> Report:
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
    # Tracebacks and stderr both render with the stderr MIME type, inside widgets' Output areas too.
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()
    errors += [f"widget failed to render: {t}" for t in
               page.locator(".jp-OutputArea-output").filter(has_text="Error displaying widget").all_inner_texts()]
    images = page.locator(".jp-OutputArea-output img").count()
    return Report(prompts=[p.strip() for p in prompts], errors=[e.strip()[-600:] for e in errors], images=images)


def problems(report: Report, *, expect_slider: bool = True, slider: str = SLIDER) -> list[str]:
    """Everything a learner would see go wrong; an empty list means the notebook works in the browser."""
    found = [f"error output: {text}" for text in report.errors]
    not_run = [i for i, p in enumerate(report.prompts, 1) if not p.strip("[]: ").isdigit()]
    if not_run:
        found.append(f"{len(not_run)} of {len(report.prompts)} code cells did not run (cells {not_run})")
    if report.images == 0:
        found.append("no plot image was rendered")
    if expect_slider:
        if report.slider is None:
            found.append(f"no ipywidgets slider labelled {slider!r} was rendered")
        elif not report.plot_changed:
            found.append(f"moving the {slider!r} slider from {report.slider} to {report.slider_moved_to} "
                         "did not change the plot")
    return found


def open_and_run_all(page, lab: Lab, notebook: str, seconds: float = RUN_ALL_S) -> None:
    # "reset": start from an empty workspace, so only this notebook is open in the page.
    page.goto(f"{lab.url}/lab/tree/{notebook}?token={lab.token}&reset")
    n_code = sum(c["cell_type"] == "code" for c in json.loads((lab.root / notebook).read_text())["cells"])
    page.locator(".jp-Notebook .jp-CodeCell").nth(n_code - 1).wait_for(state="attached", timeout=60_000)
    # Wait for the notebook's kernel session; accept "Select Kernel" if the file names no kernel.
    dialog, deadline = page.locator(".jp-Dialog .jp-mod-accept"), time.monotonic() + 60
    while not any(s["path"] == notebook for s in lab.api("/api/sessions")):
        if dialog.count():
            dialog.first.click()
        if time.monotonic() > deadline:
            pytest.fail(f"JupyterLab started no kernel for {notebook} within 60 s")
        time.sleep(0.3)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel:text-is('Run All Cells')").click()
    wait_until_idle(page, lab, seconds, started=lambda prompts: any(p != "[ ]:" for p in prompts))


def wait_until_idle(page, lab: Lab, seconds: float, started=lambda prompts: True) -> None:
    """Wait until the kernel reports idle and no cell is queued ([*]), twice in a row, 0.5 s apart."""
    deadline, calm = time.monotonic() + seconds, 0
    while calm < 2:
        if time.monotonic() > deadline:
            pytest.fail(f"the notebook was still running after {seconds} s; kernels: {lab.kernel_states()}")
        prompts = [p.strip() for p in page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]
        states = lab.kernel_states()
        busy = not states or any(s != "idle" for s in states) or any("*" in p for p in prompts)
        calm = 0 if busy or not started(prompts) else calm + 1
        time.sleep(0.5)


def plot_src(widget) -> str | None:
    """The ``src`` of the widget's plot, or None when there is none. The output area is redrawn while we look (a
    callback that raises clears it), so the image counted a moment ago may be gone: a short wait, then None."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    image = widget.locator(".widget-output img")
    if not image.count():
        return None
    try:
        return image.first.get_attribute("src", timeout=2000)
    except PlaywrightTimeout:
        return None


def move_slider(page, lab: Lab, report: Report, label: str = SLIDER) -> None:
    """Press End on the handle of the slider ``label`` (to its maximum) and see whether the plot is redrawn."""
    widget = page.locator(".widget-interact").filter(
        has=page.locator(f".widget-slider .widget-label:text-is('{label}')"))
    if widget.count() == 0:
        return
    widget = widget.first
    handle = widget.locator(".widget-slider").filter(has=page.locator(f".widget-label:text-is('{label}')")) \
        .locator(".noUi-handle").first
    handle.scroll_into_view_if_needed()
    report.slider = handle.get_attribute("aria-valuenow")
    before = plot_src(widget)
    handle.focus()
    page.keyboard.press("End")
    deadline = time.monotonic() + SLIDER_S
    while time.monotonic() < deadline:
        after = plot_src(widget)
        if after is not None and after != before:
            break
        time.sleep(0.3)
    wait_until_idle(page, lab, SLIDER_S)
    report.slider_moved_to = handle.get_attribute("aria-valuenow")
    report.plot_changed = before is not None and plot_src(widget) not in (None, before)
    widget.scroll_into_view_if_needed()


@contextlib.contextmanager
def lab_page(browser, lab, screenshot: str):
    """A fresh browser page for one case: yields ``(page, console)``, ``console`` collecting the browser's console
    errors (offline, the Colab badge image cannot load: not a problem). Afterwards it shows the first error output
    (else whatever the run ended on), saves a screenshot to ``artifacts/<screenshot>``, and frees the kernel."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text)
            if msg.type == "error" and "ERR_NAME_NOT_RESOLVED" not in msg.text else None)
    try:
        yield page, console
    finally:
        error = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        if error.count():
            error.first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / screenshot))
        lab.watch()
        for session in lab.api("/api/sessions"):  # free the kernel (CPU, memory) for the next case
            lab.api(f"/api/sessions/{session['id']}", method="DELETE")
        context.close()


@pytest.mark.parametrize("case", ["as_committed", "with_failing_cell"])
def test_notebook_01_in_jupyterlab(lab, browser, case):
    case = f"01_{case}"
    started = time.monotonic()
    with lab_page(browser, lab, f"browser_01_activations_{case[3:]}.png") as (page, console):
        open_and_run_all(page, lab, lab.notebooks[case])
        report = read_page(page)
        if case == "01_as_committed":
            move_slider(page, lab, report)
            report.errors = read_page(page).errors  # errors raised while redrawing count too
    found = problems(report, expect_slider=case == "01_as_committed")
    elapsed = time.monotonic() - started
    print(f"{case}: {len(report.prompts)} code cells, {report.images} images, slider {report.slider} -> "
          f"{report.slider_moved_to}, {elapsed:.1f} s; problems: {found}")
    if case == "01_as_committed":
        assert not found, "notebook 01 in JupyterLab:\n" + "\n".join(found) + \
            "\n(see artifacts/browser_01_activations_as_committed.png; browser console errors: " + \
            "; ".join(console[-5:]) + ")"
    else:
        assert any("ZeroDivisionError" in p for p in found), \
            f"the inserted 1/0 cell was not reported as an error; found: {found}"
        first_skipped = [p for p in found if "did not run" in p]
        assert first_skipped, "cells after the failing one should be reported as not run"


@pytest.mark.parametrize("case", ["as_committed", "with_failing_callback"])
def test_notebook_03_explorer_in_jupyterlab(lab, browser, case):
    """Run notebook 03, move the neuron explorer's ``neuron`` slider and see the figure redraw, without errors;
    on the copy whose callback raises once a control moves, the same checks must report it."""
    case = f"03_{case}"
    started = time.monotonic()
    with lab_page(browser, lab, f"browser_03_key_value_memories_{case[3:]}.png") as (page, console):
        open_and_run_all(page, lab, lab.notebooks[case], RUN_ALL_03_S)
        report = read_page(page)
        move_slider(page, lab, report, EXPLORER_SLIDER)
        report.errors = read_page(page).errors  # errors raised while redrawing count too
    found = problems(report, slider=EXPLORER_SLIDER)
    elapsed = time.monotonic() - started
    print(f"{case}: {len(report.prompts)} code cells, {report.images} images, neuron {report.slider} -> "
          f"{report.slider_moved_to}, {elapsed:.1f} s; problems: {found}")
    if case == "03_as_committed":
        assert not found, "notebook 03 in JupyterLab:\n" + "\n".join(found) + \
            "\n(see artifacts/browser_03_key_value_memories_as_committed.png; browser console errors: " + \
            "; ".join(console[-5:]) + ")"
    else:
        assert report.slider is not None, "the explorer's first figure should render before the callback breaks"
        assert any("RuntimeError" in p for p in found), \
            f"the explorer callback's RuntimeError was not reported as an error; found: {found}"


def test_jupyterlab_can_render_the_widgets():
    """JupyterLab 4 draws ipywidgets 8 through the jupyterlab_widgets 3 extension (pip installs it with ipywidgets)."""
    from importlib.metadata import PackageNotFoundError, version

    lab, widgets = version("jupyterlab"), version("ipywidgets")
    try:
        frontend = version("jupyterlab_widgets")
    except PackageNotFoundError:
        pytest.fail(f"ipywidgets {widgets} without jupyterlab_widgets: sliders would show as plain text in JupyterLab")
    if int(lab.split(".")[0]) >= 4 and int(widgets.split(".")[0]) >= 8:
        assert int(frontend.split(".")[0]) >= 3, \
            f"JupyterLab {lab} with ipywidgets {widgets} needs jupyterlab_widgets >= 3, found {frontend}"

