"""Running a submission top to bottom in a fresh Jupyter kernel, with time limits, and cleaning up.

``execute`` runs a notebook's code cells in place with nbclient (errors are kept as outputs, so
every cell runs), stops at a total time limit or a per-cell one, and reports which cell timed
out, killed the kernel or raised. On any ending, the kernel and every process it started are
killed (a learner's cell may start a server or a subprocess). A notebook runs in its own folder
when ``helpers`` can be found above it, else in the course's ``notebooks/`` folder.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.exercises.matching import COURSE_NOTEBOOKS

# notebook statuses
RAN = "ran to the end"
CELL_ERROR = "a cell raised"
TIMED_OUT = "timed out"
KERNEL_DIED = "kernel died"
KERNEL_FAILED = "kernel failed to start"
NOT_A_NOTEBOOK = "not a notebook"


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process we can see (``/proc``, else ``ps``)."""
    table: dict[int, tuple[int, str]] = {}
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                table[int(entry.name)] = (int(fields[1]), fields[19])  # ppid, start time (clock ticks)
        return table
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,lstart="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return table
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = (int(parts[1]), parts[2] if len(parts) > 2 else "")
    return table


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children, grandchildren, ...), with their start times."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: dict[int, str] = {}
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child not in found:
            found[child] = table[child][1]
            stack.extend(children.get(child, []))
    return found


def kill_survivors(processes: dict[int, str]) -> list[int]:
    """SIGKILL each process of ``processes`` that still runs (the same process: same start time)."""
    killed = []
    table = _process_table()
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def _kernel_pid(client: Any) -> int | None:
    km = getattr(client, "km", None)
    provisioner = getattr(km, "provisioner", None)
    pid = getattr(provisioner, "pid", None) or getattr(getattr(km, "kernel", None), "pid", None)
    return int(pid) if pid else None


def working_folder(path: Path) -> Path:
    """The notebook's own folder when ``helpers`` can be found above it, else the course's notebooks folder."""
    folder = path.resolve().parent
    if any((p / "helpers" / "__init__.py").is_file() for p in [folder, *folder.parents]):
        return folder
    return COURSE_NOTEBOOKS


@dataclass
class Run:
    """What happened when a notebook ran: its status, the cell it stopped at, the cells that raised."""

    status: str = RAN
    note: str = ""
    stopped_at: int | None = None            # index of the cell that timed out / killed the kernel
    errors: dict[int, str] = field(default_factory=dict)  # cell index -> "Name: value"
    limit: str = ""                          # on a time-out, the limit hit: "120 s for one cell", "the notebook's 300 s"


def _error_text(output: Any) -> str:
    text = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip().rstrip(":")
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def execute(nb: Any, workdir: Path, *, timeout: float, cell_timeout: float | None, kernel_name: str,
            env: dict[str, str]) -> Run:
    """Run ``nb``'s code cells in place, in a fresh kernel; stop at ``timeout`` seconds in total.

    The outputs saved in the file are cleared first, so every output read afterwards comes from this run.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    run = Run()
    for cell in nb.cells:  # outputs saved in the file were not made by this run: a cell never reached shows none
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(nb, kernel_name=kernel_name, allow_errors=True, record_timing=False,
                            shutdown_kernel="immediate", startup_timeout=120,
                            resources={"metadata": {"path": str(workdir)}})
    deadline = time.monotonic() + timeout
    started: dict[int, str] = {}
    try:
        # the kernel's own log (not the cells' output) would clutter the grader's report
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            pid = _kernel_pid(client)
            try:
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        run.status, run.stopped_at, run.limit = TIMED_OUT, index, f"the notebook's {timeout:g} s"
                        break
                    per_cell = bool(cell_timeout) and cell_timeout < remaining
                    client.timeout = max(1, int(math.ceil(cell_timeout if per_cell else remaining)))
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        run.status, run.stopped_at = TIMED_OUT, index
                        run.limit = f"{cell_timeout:g} s for one cell" if per_cell else f"the notebook's {timeout:g} s"
                        break
                    except DeadKernelError:
                        run.status, run.stopped_at = KERNEL_DIED, index
                        break
                    for output in cell.get("outputs", []):
                        if output.get("output_type") == "error":
                            run.errors.setdefault(index, _error_text(output))
            finally:
                if pid:
                    started = {**descendants(pid), pid: _process_table().get(pid, (0, ""))[1]}
    except Exception as err:  # the kernel could not start, or the client broke: a verdict, not a traceback
        if run.status == RAN and run.stopped_at is None:
            run.status = KERNEL_FAILED
            run.note = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    finally:
        kill_survivors(started)
    if run.status == RAN and run.errors:
        run.status = CELL_ERROR
    return run
