r"""The course's one machinery for running code in several processes (expert and tensor parallelism).

Two pieces:

* **differentiable collectives** (``all_to_all_rows``, ``copy_to_parallel``,
  ``reduce_from_parallel``): small ``torch.autograd.Function`` wrappers around
  the public, long-stable ``torch.distributed`` calls (``all_to_all_single``,
  ``all_reduce``), each with its backward written out. PyTorch's own
  differentiable wrappers in ``torch.distributed.nn.functional`` are deprecated
  (torch ≥ 2.10 warns) in favour of the *functional collectives*
  (``torch.distributed._functional_collectives``), which are built for
  ``torch.compile`` and whose ``all_to_all_single`` only recently gained a
  backward; writing the ten-line ``Function`` is what Megatron-LM and MegaBlocks
  do, works on gloo and NCCL, and on every torch version the course supports.
* **a launcher** (``launch``): starts ``world_size`` worker processes with
  ``torch.multiprocessing`` (``spawn``: safe from Jupyter and on every OS), has
  them join one process group, runs one or more *jobs* in it (one launch can run
  the expert-parallel and the tensor-parallel demo), collects what each rank
  returns, and guarantees that no worker outlives the call: a failing worker
  raises ``ParallelError`` naming its rank and error, a hanging one
  ``ParallelTimeout`` after ``timeout`` seconds; either way the others are
  stopped. Under ``torchrun`` the same jobs run with ``init_from_env``.

Devices: with the ``gloo`` backend everything runs on the CPU; with ``nccl``
every rank calls ``torch.cuda.set_device(local_rank)`` and its job puts its
module and tensors on ``ctx.device`` (``cuda:local_rank``), because NCCL only
moves CUDA tensors, each rank on its own GPU.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing.connection
import os
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import validate

#: the loopback interface names gloo should use (Linux, macOS)
_LOOPBACK_NAMES = ("lo", "lo0")
BACKENDS = ("gloo", "nccl")


# ----------------------------------------------------------------------------- what the collectives send

@dataclass(frozen=True)
class Traffic:
    """One collective call seen by ``traffic_log``: what this rank sent to *other* ranks.

    ``op``: ``"all_to_all"``, ``"all_reduce"``, ``"all_gather"`` or ``"reduce_scatter"``; ``phase``:
    ``"forward"`` or ``"backward"``; ``elements``: the numbers in the tensor handed to the collective;
    ``bytes_sent``: exact for an all-to-all (the rows addressed to other ranks), the ring algorithm's
    ``2·(W−1)/W·elements·bytes`` for an all-reduce and ``(W−1)/W·elements·bytes`` (of the full tensor)
    for an all-gather or a reduce-scatter.
    """

    op: str
    phase: str
    elements: int
    bytes_sent: float


_TRAFFIC: list[list[Traffic]] = []


class traffic_log:  # noqa: N801 - used like a function: ``with traffic_log() as log:``
    """Record every differentiable collective of this module called inside the ``with`` block (a list)."""

    def __enter__(self) -> list[Traffic]:
        self.log: list[Traffic] = []
        _TRAFFIC.append(self.log)
        return self.log

    def __exit__(self, *exc: object) -> None:
        _TRAFFIC.remove(self.log)


def _note(op: str, phase: str, elements: int, bytes_sent: float) -> None:
    for log in _TRAFFIC:
        log.append(Traffic(op, phase, elements, bytes_sent))


def record_traffic(op: str, phase: str, elements: int, bytes_sent: float) -> None:
    """Add one collective call to every open ``traffic_log`` (for collectives written in other modules)."""
    _note(op, phase, elements, bytes_sent)


def _all_to_all_bytes(rows: torch.Tensor, input_counts: list[int], group: dist.ProcessGroup | None) -> float:
    own = input_counts[dist.get_rank(group)]
    row = math.prod(rows.shape[1:])                     # numbers per row (1 for a 1-D tensor)
    return (sum(input_counts) - own) * row * rows.element_size()


# ----------------------------------------------------------------------------- differentiable collectives

class _AllToAllRows(torch.autograd.Function):
    """Uneven all-to-all over dim 0; its backward is the reverse all-to-all of the gradients."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, output_counts: list[int], input_counts: list[int],
                group: dist.ProcessGroup | None) -> torch.Tensor:  # type: ignore[override]
        ctx.output_counts, ctx.input_counts, ctx.group = output_counts, input_counts, group
        out = rows.new_empty((sum(output_counts), *rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), output_counts, input_counts, group=group)
        _note("all_to_all", "forward", rows.numel(), _all_to_all_bytes(rows, input_counts, group))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        back = grad.new_empty((sum(ctx.input_counts), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), ctx.input_counts, ctx.output_counts, group=ctx.group)
        _note("all_to_all", "backward", grad.numel(), _all_to_all_bytes(grad, ctx.output_counts, ctx.group))
        return back, None, None, None


def all_to_all_rows(rows: torch.Tensor, output_counts: Sequence[int], input_counts: Sequence[int],
                    group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Differentiable uneven ``all_to_all_single``: ``(S_in, ...) -> (S_out, ...)``.

    Rows ``input_counts[0]`` first go to rank 0, the next ``input_counts[1]`` to
    rank 1, ...; ``output_counts[r]`` rows arrive from rank ``r``. The backward
    pass sends the gradients back the same way reversed (swap the counts).
    """
    return _AllToAllRows.apply(rows, list(output_counts), list(input_counts), group)


class _CopyToParallel(torch.autograd.Function):
    """Megatron's *f*: identity forward; all-reduce (sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        _note("all_reduce", "backward", grad.numel(),
              ring_all_reduce_bytes(grad.numel(), dist.get_world_size(ctx.group), grad.element_size()))
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's *g*: all-reduce (sum) forward; identity in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:  # type: ignore[override]
        out = x.clone()
        dist.all_reduce(out, group=group)
        _note("all_reduce", "forward", out.numel(),
              ring_all_reduce_bytes(out.numel(), dist.get_world_size(group), out.element_size()))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None


def copy_to_parallel(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's *f* operator: ``x`` unchanged; in backward, sum the ranks' gradients of ``x``.

    Every rank uses the same (replicated) ``x`` for its own slice of the hidden
    units, so the true gradient of ``x`` is the sum of the ranks' partial ones.
    """
    return _CopyToParallel.apply(x, group)


def reduce_from_parallel(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Megatron's *g* operator: the sum of ``x`` over the ranks; in backward, the gradient unchanged."""
    return _ReduceFromParallel.apply(x, group)


def ring_all_reduce_bytes(n_elements: int, world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes each rank sends in a ring all-reduce of ``n_elements`` numbers: ``2·(W−1)/W·n·bytes``.

    A reduce-scatter (``W−1`` steps of ``n/W``) then an all-gather (as many): the
    bandwidth-optimal algorithm NCCL uses for large messages. 0 when ``W = 1``.
    """
    validate.non_negative_int("n_elements", n_elements)
    validate.positive_int("world_size", world_size)
    validate.positive_int("bytes_per_element", bytes_per_element)
    return 2 * (world_size - 1) / world_size * n_elements * bytes_per_element


# ----------------------------------------------------------------------------- devices, process groups

@dataclass(frozen=True)
class RankContext:
    """Where a job runs: this process's ``rank`` of ``world_size``, its ``device`` and the ``group``."""

    rank: int
    world_size: int
    device: torch.device
    backend: str = "gloo"
    group: Any = None


def device_for(backend: str, local_rank: int) -> torch.device:
    """The device a rank works on: the CPU for gloo; ``cuda:local_rank`` for NCCL (after ``set_device``)."""
    validate.one_of("backend", backend, BACKENDS)
    if backend == "gloo":
        return torch.device("cpu")
    if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
        raise RuntimeError(f"backend='nccl' needs one CUDA GPU per rank on each machine; rank {local_rank} has none "
                           f"(torch.cuda.device_count() = {torch.cuda.device_count()}). Use backend='gloo' on a CPU.")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def use_loopback() -> None:
    """Pin gloo to the loopback interface (unless the user chose one), so no traffic leaves the machine."""
    if "GLOO_SOCKET_IFNAME" not in os.environ and hasattr(socket, "if_nameindex"):
        names = {name for _, name in socket.if_nameindex()}
        for name in _LOOPBACK_NAMES:
            if name in names:
                os.environ["GLOO_SOCKET_IFNAME"] = name
                break


def init_from_env(timeout: float = 60.0, backend: str | None = None) -> RankContext:
    """Join the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ...).

    ``backend``: ``None`` picks NCCL when every local rank has a GPU, else gloo.
    """
    if backend is None:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "gloo"
    device = device_for(backend, int(os.environ.get("LOCAL_RANK", "0")))
    if backend == "gloo":
        use_loopback()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return RankContext(dist.get_rank(), dist.get_world_size(), device, backend)


def leave_now(code: int) -> None:
    """End a worker process now, without the interpreter's teardown (results or error are already written).

    With torch 2.13, gloo's worker threads can still hold the last collective's
    tensors when Python finalises; freeing them then needs the GIL, which the
    finalising interpreter refuses, and the process aborts (SIGABRT, "terminate
    called without an active exception") after its work was done. Leaving with
    ``os._exit`` once everything is written avoids that race (the same one
    pytorch/pytorch#179291 describes).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ----------------------------------------------------------------------------- jobs and the worker

#: a job's body: ``task(inputs, ctx) -> dict`` of CPU tensors/objects; a module-level function (``spawn`` imports it)
Task = Callable[[Any, RankContext], dict]


@dataclass
class Job:
    """One piece of work every rank runs in the same process group.

    ``task(inputs, ctx)`` runs on every rank and returns a dict (tensors on the
    CPU) that ``collect(parts)`` turns into the job's result, ``parts[r]`` being
    rank ``r``'s dict. ``task`` must be importable (defined in a module, not in a
    notebook), because ``spawn`` starts fresh interpreters.
    """

    name: str
    task: Task
    inputs: Any
    collect: Callable[[list[dict]], Any]


def _exit_with_parent(parent_pid: int) -> None:
    """Stop this worker if the process that started it disappears (no orphan is left behind)."""
    def watch() -> None:
        while True:
            time.sleep(0.2)
            if os.getppid() != parent_pid:
                os._exit(3)
    threading.Thread(target=watch, daemon=True).start()


def _worker(rank: int, world_size: int, workdir: str, port: int, timeout: float, parent_pid: int,
            backend: str, tasks: list[Task], fail_rank: int | None, stall_rank: int | None) -> None:
    """Body of one worker process started by ``launch`` (must be importable for ``spawn``)."""
    folder = Path(workdir)
    log = open(folder / f"rank{rank}.log", "w")               # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)                                  # nothing a worker prints reaches the notebook
    os.dup2(log.fileno(), 2)
    _exit_with_parent(parent_pid)
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        device = device_for(backend, rank)                     # one machine: local rank = rank
        if backend == "gloo":
            use_loopback()
        torch.set_num_threads(1)
        # collectives give up a little after the parent's own deadline, which stops us first
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout + 10))
        ctx = RankContext(rank, world_size, device, backend)
        inputs = torch.load(folder / "inputs.pt", weights_only=False)
        if rank == fail_rank:
            raise RuntimeError(f"rank {rank} stopped on purpose before sending its tokens (fail_rank={fail_rank})")
        if rank == stall_rank:
            time.sleep(10 * timeout)
        for j, task in enumerate(tasks):
            torch.save(task(inputs[j], ctx), folder / f"rank{rank}.job{j}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        (folder / f"rank{rank}.error").write_text(f"{time.time()!r}\n{traceback.format_exc()}")
        traceback.print_exc()                                 # into this rank's log
        leave_now(1)                                          # the parent reads the .error file
    leave_now(0)


# ----------------------------------------------------------------------------- the launcher

class ParallelError(RuntimeError):
    """A worker failed (``rank`` and its ``worker_traceback`` attached) or the run timed out."""

    def __init__(self, message: str, rank: int | None = None, worker_traceback: str = "",
                 worker_pids: list[int] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.worker_pids = worker_pids or []


class ParallelTimeout(ParallelError, TimeoutError):
    """The workers did not finish within the timeout (they were stopped)."""


@dataclass
class Launch:
    """What ``launch`` returns: one result per job (in order), the wall-clock seconds, the workers' pids."""

    results: list[Any]
    seconds: float
    worker_pids: list[int] = field(default_factory=list)


def pid_alive(pid: int) -> bool:
    """True if a process with this id is running (a zombie, exited but not yet reaped, counts as gone)."""
    validate.positive_int("pid", pid)
    if os.name == "nt":                                        # os.kill(pid, 0) would interrupt it on Windows
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)   # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        ctypes.windll.kernel32.CloseHandle(handle)
        return code.value == 259                               # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                                    # exists, but belongs to someone else
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(processes: list) -> None:
    """Make sure every worker is gone: terminate, wait, then kill what is left."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)


def _root_cause(folder: Path) -> tuple[int, str] | None:
    """The worker that failed first, from the ``rankN.error`` files (a peer often fails after it)."""
    failures = []
    for path in folder.glob("rank*.error"):
        stamp, _, tb = path.read_text().partition("\n")
        failures.append((float(stamp), int(path.stem[4:]), tb))
    if not failures:
        return None
    _, rank, tb = min(failures)
    return rank, tb


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no message)"


def _watch(processes: list, deadline: float, timeout: float, folder: Path, label: str) -> None:
    """Wait until every worker has exited cleanly; raise as soon as one fails or the deadline passes."""
    world_size = len(processes)
    pids = [p.pid for p in processes]
    while True:
        codes = [p.exitcode for p in processes]
        if all(code == 0 for code in codes):
            return
        failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            _stop(processes)
            cause = _root_cause(folder)
            if cause is None:   # killed by a signal before it could say why
                rank = failed[0]
                raise ParallelError(f"{label} worker rank {rank} of {world_size} died with exit code {codes[rank]}; "
                                    f"the other workers were stopped", rank, "", pids)
            rank, tb = cause
            raise ParallelError(f"{label} worker rank {rank} of {world_size} failed with {_last_line(tb)}; "
                                f"the other workers were stopped", rank, tb, pids)
        if time.monotonic() > deadline:
            running = [r for r, p in enumerate(processes) if p.is_alive()]
            _stop(processes)
            raise ParallelTimeout(f"the {world_size} {label} workers did not finish within {timeout:g} s "
                                  f"(ranks still running: {running}); all of them were stopped", worker_pids=pids)
        multiprocessing.connection.wait([p.sentinel for p in processes if p.exitcode is None], timeout=0.1)


def launch(jobs: Sequence[Job], *, world_size: int = 2, timeout: float = 60.0, backend: str = "gloo",
           fail_rank: int | None = None, stall_rank: int | None = None, label: str | None = None) -> Launch:
    """Run ``jobs`` one after the other on ``world_size`` fresh worker processes in one process group.

    Every worker joins the group (gloo over the loopback interface, or NCCL with
    one GPU per rank), runs ``job.task(job.inputs, ctx)`` for each job, and
    writes what it returns; the parent then calls ``job.collect(parts)``.
    If a worker raises, the others are stopped and ``ParallelError`` names the
    rank and its error; after ``timeout`` seconds ``ParallelTimeout`` is raised.
    Either way no worker process is left running. ``fail_rank`` / ``stall_rank``
    make that rank raise / hang on purpose before the first job (to see this).
    ``label`` names the workers in messages (default: the jobs' names).
    """
    if not jobs:
        raise ValueError("jobs must list at least one Job, got none")
    validate.positive_int("world_size", world_size)
    validate.positive_float("timeout", timeout)
    validate.one_of("backend", backend, BACKENDS)
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise RuntimeError(f"backend='nccl' needs world_size={world_size} CUDA GPUs on this machine, found "
                           f"{torch.cuda.device_count()}; use backend='gloo' to run on the CPU")
    for name, value in (("fail_rank", fail_rank), ("stall_rank", stall_rank)):
        if value is not None:
            validate.int_in_range(name, value, 0, world_size - 1)
    label = label or " and ".join(dict.fromkeys(job.name for job in jobs))     # each name once, in order

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ffn_parallel_") as workdir:
        folder = Path(workdir)
        torch.save([job.inputs for job in jobs], folder / "inputs.pt")
        context = mp.start_processes(
            _worker, args=(world_size, workdir, free_port(), timeout, os.getpid(), backend,
                           [job.task for job in jobs], fail_rank, stall_rank),
            nprocs=world_size, join=False, start_method="spawn")
        processes = context.processes
        pids = [p.pid for p in processes]
        try:
            _watch(processes, time.monotonic() + timeout, timeout, folder, label)
        finally:
            _stop(processes)
        parts = [[torch.load(folder / f"rank{r}.job{j}.pt", weights_only=False) for r in range(world_size)]
                 for j in range(len(jobs))]
    seconds = time.perf_counter() - start
    return Launch([job.collect(p) for job, p in zip(jobs, parts)], seconds, pids)


def to_cpu(value: Any) -> Any:
    """Move tensors (also inside dicts, lists, tuples) to the CPU, so the parent can load them anywhere."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value
