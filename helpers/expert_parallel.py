r"""Expert parallelism: a mixture of experts whose experts live in different processes.

Every process (rank) holds a copy of the router and ``n_experts / world_size``
of the experts (rank ``r`` owns the contiguous block ``r·E/W ... (r+1)·E/W − 1``),
plus its own share of the tokens. One forward pass of ``expert_parallel_forward``:

1. **route** the local tokens with the replicated router (``MoE.route``);
2. **plan**: sort the kept (token, slot) pairs by expert, hence by owner; the
   number of rows for each rank is the *split size* of the exchange;
3. **exchange counts** (``all_to_all_single`` on ``world_size`` integers), so
   every rank knows how many rows it will receive from each peer, then the
   expert id of every row;
4. **dispatch**: ``all_to_all_single`` with uneven splits sends each row to
   its expert's owner;
5. **compute**: every rank runs its own experts on the rows it received;
6. **combine**: the reverse ``all_to_all_single`` sends the results home, where
   they are weighted by the router and summed per token.

Steps 4 and 6 use ``torch.distributed.nn.functional.all_to_all_single``, which
autograd can differentiate: the backward pass of an all-to-all is the reverse
all-to-all of the gradients, so ``loss.backward()`` runs across processes.

This is the same program that runs on GPUs with the NCCL backend
(``dist.init_process_group("nccl")``, tensors on ``cuda``); here it runs on the
CPU with the gloo backend over the loopback interface. ``run_expert_parallel``
starts the workers from Python (also from a Jupyter kernel) with
``torch.multiprocessing``; ``python -m helpers.expert_parallel`` does the same
from a shell, and ``torchrun --nproc-per-node 2 -m helpers.expert_parallel``
runs one rank per process the way a cluster job would.
"""

from __future__ import annotations

import argparse
import multiprocessing.connection
import copy
import datetime
import os
import socket
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from helpers import validate

#: the loopback interface names gloo should use (Linux, macOS)
_LOOPBACK_NAMES = ("lo", "lo0")


# ----------------------------------------------------------------------------- ownership and plans

def _check_layout(n_experts: int, world_size: int) -> int:
    validate.positive_int("n_experts", n_experts)
    validate.positive_int("world_size", world_size)
    if n_experts % world_size:
        raise ValueError(f"n_experts must be a multiple of world_size so every rank owns the same number of "
                         f"experts, got n_experts={n_experts}, world_size={world_size}")
    return n_experts // world_size


def experts_of_rank(rank: int, n_experts: int, world_size: int) -> range:
    """The experts rank ``rank`` owns: a contiguous block of ``n_experts / world_size`` ids."""
    per_rank = _check_layout(n_experts, world_size)
    validate.int_in_range("rank", rank, 0, world_size - 1)
    return range(rank * per_rank, (rank + 1) * per_rank)


def owner_of(expert_index: torch.Tensor, n_experts: int, world_size: int) -> torch.Tensor:
    """Rank that owns each expert id: ``expert_index // (n_experts / world_size)`` (any shape, long)."""
    per_rank = _check_layout(n_experts, world_size)
    return torch.div(expert_index, per_rank, rounding_mode="floor")


def _check_routing_tensors(expert_index: torch.Tensor, kept: torch.Tensor, n_experts: int) -> None:
    if not isinstance(expert_index, torch.Tensor) or expert_index.dtype != torch.long or expert_index.dim() != 2:
        raise TypeError(f"expert_index must be a (N, k) torch.long tensor, got "
                        f"{getattr(expert_index, 'dtype', type(expert_index).__name__)} of shape "
                        f"{tuple(getattr(expert_index, 'shape', ()))}")
    if not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool or kept.shape != expert_index.shape:
        raise TypeError(f"kept must be a bool tensor with expert_index's shape {tuple(expert_index.shape)}, got "
                        f"{getattr(kept, 'dtype', type(kept).__name__)} of shape {tuple(getattr(kept, 'shape', ()))}")
    if expert_index.numel() and not (0 <= int(expert_index.min()) and int(expert_index.max()) < n_experts):
        raise ValueError(f"expert_index must hold expert ids in [0, {n_experts - 1}], got values from "
                         f"{int(expert_index.min())} to {int(expert_index.max())}")


def split_sizes(expert_index: torch.Tensor, kept: torch.Tensor, n_experts: int, world_size: int) -> list[int]:
    """Rows this process sends to each rank in the dispatch all-to-all (its ``input_split_sizes``).

    One row per *kept* (token, slot) pair: a token routed to two experts on the
    same rank is sent twice (once per slot); a dropped slot is not sent.

    Shapes: ``expert_index`` ``(N, k)`` long, ``kept`` ``(N, k)`` bool -> a list
    of ``world_size`` ints summing to ``kept.sum()``.
    """
    _check_layout(n_experts, world_size)
    _check_routing_tensors(expert_index, kept, n_experts)
    owners = owner_of(expert_index[kept], n_experts, world_size)
    return torch.bincount(owners, minlength=world_size).tolist()


@dataclass
class DispatchPlan:
    """Which rows leave this process, in the order they are sent (sorted by expert, hence by owner).

    ``token``, ``expert``, ``weight``: ``(S,)`` for the ``S`` kept slots; ``send_counts``: rows per rank.
    """

    token: torch.Tensor
    expert: torch.Tensor
    weight: torch.Tensor
    send_counts: list[int]


def plan_dispatch(expert_index: torch.Tensor, weight: torch.Tensor, kept: torch.Tensor, n_experts: int,
                  world_size: int) -> DispatchPlan:
    """Flatten the kept slots of a routing and order them for the all-to-all.

    Shapes: ``expert_index``, ``weight``, ``kept``: ``(N, k)``. Rows are sorted
    by expert id (stable, so tokens keep their order within an expert); since
    ranks own contiguous blocks of experts, this also groups them by rank.
    """
    sizes = split_sizes(expert_index, kept, n_experts, world_size)
    n_tokens, top_k = expert_index.shape
    token = torch.arange(n_tokens, device=expert_index.device).unsqueeze(1).expand(n_tokens, top_k)[kept]
    expert = expert_index[kept]
    order = torch.argsort(expert, stable=True)
    return DispatchPlan(token=token[order], expert=expert[order], weight=weight[kept][order], send_counts=sizes)


# ----------------------------------------------------------------------------- one process's forward

@dataclass
class DispatchRecord:
    """What one rank exchanged in one forward pass.

    ``send_counts[r]``: rows this rank sent to rank ``r`` in the dispatch
    (the row to itself is a local copy, not traffic); ``recv_counts[r]``: rows it
    received from rank ``r``, which it sends back in the combine step.
    """

    rank: int
    world_size: int
    n_tokens: int
    d_model: int
    element_size: int
    send_counts: list[int]
    recv_counts: list[int]

    @property
    def rows_to_others(self) -> int:
        return sum(self.send_counts) - self.send_counts[self.rank]

    @property
    def rows_from_others(self) -> int:
        return sum(self.recv_counts) - self.recv_counts[self.rank]

    @property
    def dispatch_bytes(self) -> int:
        """Bytes of token vectors this rank sent to other ranks."""
        return self.rows_to_others * self.d_model * self.element_size

    @property
    def combine_bytes(self) -> int:
        """Bytes of expert outputs this rank sent back to other ranks."""
        return self.rows_from_others * self.d_model * self.element_size

    @property
    def metadata_bytes(self) -> int:
        """Bytes of bookkeeping sent to other ranks: the split sizes and one int64 expert id per row."""
        return 8 * (self.world_size - 1) + 8 * self.rows_to_others

    @property
    def bytes_sent(self) -> int:
        """All bytes this rank sent to other ranks in one forward pass."""
        return self.dispatch_bytes + self.combine_bytes + self.metadata_bytes

    def bytes_per_token(self) -> float:
        """Activation bytes (dispatch + combine) sent per local token in one forward pass."""
        return (self.dispatch_bytes + self.combine_bytes) / max(self.n_tokens, 1)


def expected_bytes_per_token(d_model: int, top_k: int, world_size: int, *, bytes_per_element: int = 4,
                             backward: bool = False) -> float:
    """Activation bytes one rank sends per token when routing is uniform over the ranks.

    Each of the ``k`` slots leaves the process with probability ``(W−1)/W``:
    ``d`` elements go out in the dispatch, and on average as many come back in
    the combine, so ``2·k·d·bytes·(W−1)/W`` per token for the forward pass; the
    backward pass sends the same amount again (the reverse all-to-alls).
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("top_k", top_k)
    validate.positive_int("world_size", world_size)
    validate.positive_int("bytes_per_element", bytes_per_element)
    forward = 2 * top_k * d_model * bytes_per_element * (world_size - 1) / world_size
    return 2 * forward if backward else forward


def _all_to_all(rows: torch.Tensor, output_counts: list[int], input_counts: list[int],
                group: dist.ProcessGroup | None) -> torch.Tensor:
    """Differentiable uneven ``all_to_all_single`` over dim 0 of ``rows`` ``(S_in, d) -> (S_out, d)``."""
    import torch.distributed.nn.functional as dist_fn

    out = rows.new_empty((sum(output_counts), *rows.shape[1:]))
    with warnings.catch_warnings():
        # torch >= 2.10 marks this autograd-aware collective as deprecated in favour of a private module;
        # it still works the same, and the notebook must not print a warning.
        warnings.filterwarnings("ignore", message=r".*all_to_all_single is deprecated.*", category=FutureWarning)
        return dist_fn.all_to_all_single(out, rows.contiguous(), output_counts, input_counts,
                                         group=group if group is not None else dist.group.WORLD)


def _run_local_experts(moe: nn.Module, rows: torch.Tensor, expert: torch.Tensor, owned: range) -> torch.Tensor:
    """Apply expert ``expert[i]`` to ``rows[i]`` for the experts this rank owns. ``(S, d) -> (S, d)``."""
    if rows.shape[0] == 0:
        return rows * 0.0 if rows.requires_grad else rows.clone()
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert - owned.start, minlength=len(owned)).tolist()
    pieces = torch.split(rows[order], counts)
    outputs = [moe.experts[e](piece) for e, piece, n in zip(owned, pieces, counts) if n]
    grouped = torch.cat(outputs)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return grouped[inverse]


def expert_parallel_forward(moe: nn.Module, x: torch.Tensor,
                            group: dist.ProcessGroup | None = None) -> tuple[torch.Tensor, DispatchRecord]:
    """This rank's part of an expert-parallel MoE forward. Call it on every rank of ``group``.

    Args:
        moe: the course's ``helpers.moe.MoE`` (token-choice router); this rank
            needs the router and the experts ``experts_of_rank(rank, E, W)``.
        x: this rank's tokens, ``(..., d_model)``.
        group: the process group (default: the whole world).

    Returns ``(y, record)``: ``y`` has ``x``'s shape and equals the single-process
    ``MoE`` output on these tokens, ``y[n] = Σ_j kept·weight·expert(x[n])``;
    ``record`` counts what was exchanged. Differentiable: gradients flow back
    through both all-to-alls to ``x``, the router and the experts.
    """
    if not dist.is_initialized():
        raise RuntimeError("expert_parallel_forward needs torch.distributed to be initialised: call it inside the "
                           "workers started by run_expert_parallel, or under torchrun")
    validate.float_tensor("x", x, last_dim=moe.d_model)
    if getattr(moe, "router_type", "token") != "token":
        raise ValueError(f"expert parallelism here needs a token-choice router, got router={moe.router_type!r}")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    owned = experts_of_rank(rank, moe.n_experts, world_size)
    flat = x.reshape(-1, moe.d_model)

    routing = moe.route(flat)
    plan = plan_dispatch(routing.expert_index, routing.weight, routing.kept, moe.n_experts, world_size)

    # how many rows each peer will send here, then which expert each of those rows is for
    send_counts = torch.tensor(plan.send_counts, dtype=torch.long)
    recv_counts_t = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts_t, send_counts, group=group)
    recv_counts = recv_counts_t.tolist()
    recv_expert = torch.empty(sum(recv_counts), dtype=torch.long)
    dist.all_to_all_single(recv_expert, plan.expert.contiguous(), recv_counts, plan.send_counts, group=group)

    received = _all_to_all(flat[plan.token], recv_counts, plan.send_counts, group)        # dispatch
    processed = _run_local_experts(moe, received, recv_expert, owned)                      # compute
    returned = _all_to_all(processed, plan.send_counts, recv_counts, group)                # combine
    weighted = returned * plan.weight.to(returned.dtype).unsqueeze(1)
    y = torch.zeros_like(flat).index_add(0, plan.token, weighted)

    record = DispatchRecord(rank=rank, world_size=world_size, n_tokens=flat.shape[0], d_model=moe.d_model,
                            element_size=flat.element_size(), send_counts=plan.send_counts, recv_counts=recv_counts)
    return y.reshape(x.shape), record


class RemoteExpert(nn.Module):
    """Placeholder for an expert that lives in another process (calling it is a bug)."""

    def __init__(self, expert: int, owner: int) -> None:
        super().__init__()
        self.expert, self.owner = expert, owner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(f"expert {self.expert} lives on rank {self.owner}, not in this process")

    def extra_repr(self) -> str:
        return f"expert={self.expert}, owner=rank {self.owner}"


def shard_experts(moe: nn.Module, rank: int, world_size: int) -> range:
    """Keep only rank ``rank``'s experts in ``moe`` (in place); the others become ``RemoteExpert``s.

    Returns the expert ids this rank owns. The router stays: every rank routes its own tokens.
    """
    owned = experts_of_rank(rank, moe.n_experts, world_size)
    for e in range(moe.n_experts):
        if e not in owned:
            moe.experts[e] = RemoteExpert(e, e // len(owned))
    return owned


# ----------------------------------------------------------------------------- the reference

def shard_tokens(x: torch.Tensor, world_size: int) -> tuple[torch.Tensor, ...]:
    """Rank ``r``'s tokens: the ``r``-th ``torch.tensor_split`` piece of ``x`` flattened to ``(N, d)``."""
    validate.positive_int("world_size", world_size)
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] < world_size:
        raise ValueError(f"x must hold at least world_size={world_size} tokens, got {flat.shape[0]}")
    return torch.tensor_split(flat, world_size)


@dataclass
class MoEPass:
    """Output and gradients of one forward (+ backward) pass of an MoE on tokens ``x``.

    ``output`` and ``x_grad`` are ``(N, d_model)``; ``grads`` maps every parameter
    name of the MoE to its gradient (zeros for an expert that got no token).
    """

    output: torch.Tensor
    x_grad: torch.Tensor | None = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)


def single_process_pass(moe: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None = None, *,
                        groups: int = 1) -> MoEPass:
    """The reference: the ordinary ``MoE`` forward (and backward with ``grad_output``) in this process.

    With ``groups > 1`` the tokens are routed in ``groups`` separate calls, one per
    ``shard_tokens`` piece: the same grouping the expert-parallel run uses, which
    matters only when the MoE has a capacity (capacity is computed per call).
    ``moe`` is not modified (a copy is used).
    """
    ref = copy.deepcopy(moe)
    ref.zero_grad(set_to_none=True)
    xs = [s.detach().clone().requires_grad_(grad_output is not None) for s in shard_tokens(x, groups)]
    outs = [ref(s)[0] for s in xs]
    output = torch.cat(outs)
    if grad_output is None:
        return MoEPass(output.detach())
    (output * grad_output.reshape(output.shape)).sum().backward()
    grads = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in ref.named_parameters()}
    return MoEPass(output.detach(), torch.cat([s.grad for s in xs]), grads)


def max_differences(a: MoEPass, b: MoEPass) -> dict[str, float]:
    """Largest absolute difference of the outputs, the input gradients and every parameter's gradient."""
    diffs = {"output": (a.output - b.output).abs().max().item()}
    if a.x_grad is not None and b.x_grad is not None:
        diffs["x_grad"] = (a.x_grad - b.x_grad).abs().max().item()
    if a.grads and b.grads:
        if set(a.grads) != set(b.grads):
            raise ValueError(f"the two passes have gradients for different parameters: "
                             f"{sorted(set(a.grads) ^ set(b.grads))}")
        diffs["param_grads"] = max((a.grads[n] - b.grads[n]).abs().max().item() for n in a.grads)
    return diffs


# ----------------------------------------------------------------------------- one worker

def _use_loopback() -> None:
    """Pin gloo to the loopback interface (unless the user chose one), so no traffic leaves the machine."""
    if "GLOO_SOCKET_IFNAME" not in os.environ and hasattr(socket, "if_nameindex"):
        names = {name for _, name in socket.if_nameindex()}
        for name in _LOOPBACK_NAMES:
            if name in names:
                os.environ["GLOO_SOCKET_IFNAME"] = name
                break


def _rank_pass(moe: nn.Module, x_local: torch.Tensor, g_local: torch.Tensor | None,
               group: dist.ProcessGroup | None = None) -> dict:
    """Shard the experts, run the expert-parallel forward (+ backward) on this rank; gather its results."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    owned = shard_experts(moe, rank, world_size)
    moe.zero_grad(set_to_none=True)
    x_local = x_local.detach().clone().requires_grad_(g_local is not None)
    y, record = expert_parallel_forward(moe, x_local, group)
    result = {"output": y.detach(), "record": record, "x_grad": None, "grads": {}}
    if g_local is None:
        return result
    (y * g_local).sum().backward()
    result["x_grad"] = x_local.grad
    mine = {f"experts.{e}." for e in owned}
    for name, p in moe.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        if name.startswith("experts."):
            if any(name.startswith(prefix) for prefix in mine):
                result["grads"][name] = grad
        else:  # replicated (the router): every rank saw different tokens, so sum the gradients
            dist.all_reduce(grad, group=group)
            if rank == 0:
                result["grads"][name] = grad
    return result


def _exit_with_parent(parent_pid: int) -> None:
    """Stop this worker if the process that started it disappears (no orphan is left behind)."""
    def watch() -> None:
        while True:
            time.sleep(0.2)
            if os.getppid() != parent_pid:
                os._exit(3)
    threading.Thread(target=watch, daemon=True).start()


def _leave_now(code: int) -> None:
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


def _worker(rank: int, world_size: int, workdir: str, port: int, timeout: float, parent_pid: int,
            fail_rank: int | None, stall_rank: int | None) -> None:
    """Body of one worker process started by ``run_expert_parallel`` (must be importable for ``spawn``)."""
    folder = Path(workdir)
    log = open(folder / f"rank{rank}.log", "w")               # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)                                  # nothing a worker prints reaches the notebook
    os.dup2(log.fileno(), 2)
    _exit_with_parent(parent_pid)
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        _use_loopback()
        torch.set_num_threads(1)
        # collectives give up a little after the parent's own deadline, which stops us first
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout + 10))
        inputs = torch.load(folder / "inputs.pt", weights_only=False)
        x_local = shard_tokens(inputs["x"], world_size)[rank]
        g = inputs["grad_output"]
        g_local = None if g is None else shard_tokens(g, world_size)[rank]
        if rank == fail_rank:
            raise RuntimeError(f"rank {rank} stopped on purpose before sending its tokens (fail_rank={fail_rank})")
        if rank == stall_rank:
            time.sleep(10 * timeout)
        result = _rank_pass(inputs["moe"], x_local, g_local)
        torch.save(result, folder / f"rank{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        (folder / f"rank{rank}.error").write_text(f"{time.time()!r}\n{traceback.format_exc()}")
        traceback.print_exc()                                 # into this rank's log
        _leave_now(1)                                         # the parent reads the .error file
    _leave_now(0)


# ----------------------------------------------------------------------------- the launcher

class ExpertParallelError(RuntimeError):
    """A worker failed (``rank`` and its ``worker_traceback`` attached) or the run timed out."""

    def __init__(self, message: str, rank: int | None = None, worker_traceback: str = "",
                 worker_pids: list[int] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.worker_pids = worker_pids or []


class ExpertParallelTimeout(ExpertParallelError, TimeoutError):
    """The workers did not finish within the timeout (they were stopped)."""


@dataclass
class ExpertParallelResult(MoEPass):
    """``MoEPass`` of the distributed run, plus what each rank exchanged and how long it took."""

    records: list[DispatchRecord] = field(default_factory=list)
    seconds: float = 0.0
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


def _watch(processes: list, deadline: float, timeout: float, folder: Path) -> None:
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
                raise ExpertParallelError(f"expert-parallel worker rank {rank} of {world_size} died with exit "
                                          f"code {codes[rank]}; the other workers were stopped", rank, "", pids)
            rank, tb = cause
            raise ExpertParallelError(f"expert-parallel worker rank {rank} of {world_size} failed with "
                                      f"{_last_line(tb)}; the other workers were stopped", rank, tb, pids)
        if time.monotonic() > deadline:
            running = [r for r, p in enumerate(processes) if p.is_alive()]
            _stop(processes)
            raise ExpertParallelTimeout(f"the {world_size} expert-parallel workers did not finish within "
                                        f"{timeout:g} s (ranks still running: {running}); all of them were stopped",
                                        worker_pids=pids)
        multiprocessing.connection.wait([p.sentinel for p in processes if p.exitcode is None], timeout=0.1)


def run_expert_parallel(moe: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None = None, *,
                        world_size: int = 2, timeout: float = 60.0, fail_rank: int | None = None,
                        stall_rank: int | None = None) -> ExpertParallelResult:
    """Run ``moe`` on ``x`` split over ``world_size`` worker processes (gloo, CPU, loopback).

    Rank ``r`` gets the ``r``-th ``shard_tokens`` piece of the tokens and owns
    experts ``experts_of_rank(r, E, W)``; all ranks route, exchange, compute and
    combine with ``expert_parallel_forward``. With ``grad_output`` (the shape of
    ``x``) every rank also runs ``(y · grad_output).sum().backward()`` and the
    gradients are collected (the router's summed over the ranks).

    The workers are started with ``torch.multiprocessing`` (``spawn``: safe from
    Jupyter and on every OS). If a worker raises, the others are stopped and an
    ``ExpertParallelError`` names the rank and its error; if the run takes longer
    than ``timeout`` seconds, they are stopped and ``ExpertParallelTimeout`` is
    raised. Either way no worker process is left running.
    ``fail_rank`` / ``stall_rank`` make that rank raise / hang on purpose (to see this).

    Shapes: ``x`` ``(..., d_model)``; the result's ``output`` and ``x_grad`` are ``(N, d_model)``.
    """
    validate.float_tensor("x", x, last_dim=moe.d_model)
    _check_layout(moe.n_experts, world_size)
    validate.positive_float("timeout", timeout)
    for name, value in (("fail_rank", fail_rank), ("stall_rank", stall_rank)):
        if value is not None:
            validate.int_in_range(name, value, 0, world_size - 1)
    shard_tokens(x, world_size)
    if grad_output is not None:
        validate.float_tensor("grad_output", grad_output)
        if grad_output.shape != x.shape:
            raise ValueError(f"grad_output must have x's shape {tuple(x.shape)}, got {tuple(grad_output.shape)}")

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="expert_parallel_") as workdir:
        folder = Path(workdir)
        torch.save({"moe": moe, "x": x.detach(), "grad_output": None if grad_output is None else grad_output.detach()},
                   folder / "inputs.pt")
        context = mp.start_processes(
            _worker, args=(world_size, workdir, free_port(), timeout, os.getpid(), fail_rank, stall_rank),
            nprocs=world_size, join=False, start_method="spawn")
        processes = context.processes
        pids = [p.pid for p in processes]
        deadline = time.monotonic() + timeout
        try:
            _watch(processes, deadline, timeout, folder)
        finally:
            _stop(processes)
        parts = [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(world_size)]

    grads: dict[str, torch.Tensor] = {}
    for part in parts:
        grads.update(part["grads"])
    order = [name for name, _ in moe.named_parameters()]
    return ExpertParallelResult(
        output=torch.cat([p["output"] for p in parts]),
        x_grad=None if grad_output is None else torch.cat([p["x_grad"] for p in parts]),
        grads={name: grads[name] for name in order if name in grads},
        records=[p["record"] for p in parts],
        seconds=time.perf_counter() - start,
        worker_pids=pids,
    )


# ----------------------------------------------------------------------------- command line / torchrun

def demo_problem(d_model: int = 32, n_experts: int = 4, top_k: int = 2, n_tokens: int = 64,
                 seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small seeded MoE (SwiGLU experts, no capacity limit), tokens ``(n_tokens, d)`` and an output gradient."""
    from helpers.moe import MoE

    torch.manual_seed(seed)
    moe = MoE(d_model, n_experts, top_k).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n_tokens, d_model, generator=gen)
    g = torch.randn(n_tokens, d_model, generator=gen)
    return moe, x, g


def format_records(records: list[DispatchRecord]) -> str:
    """A small table: rows each rank sent where, and the bytes it sent to other ranks per token."""
    lines = [f"{'rank':>4} {'tokens':>6} {'rows to each rank':>18} {'bytes sent':>10} {'act. bytes/token':>16}"]
    for r in records:
        lines.append(f"{r.rank:>4} {r.n_tokens:>6} {str(r.send_counts):>18} {r.bytes_sent:>10} "
                     f"{r.bytes_per_token():>16.1f}")
    return "\n".join(lines)


def _report(diffs: dict[str, float], records: list[DispatchRecord], moe: nn.Module) -> str:
    world = records[0].world_size
    ok = all(v <= 1e-6 for v in diffs.values())
    expected = expected_bytes_per_token(moe.d_model, moe.top_k, world)
    return "\n".join([
        f"expert parallelism over {world} processes (gloo, loopback): {moe.n_experts} experts, top-{moe.top_k}, "
        f"d_model={moe.d_model}",
        format_records(records),
        f"uniform-routing estimate: {expected:.1f} activation bytes per token per rank (forward)",
        "max |distributed - single process|: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()),
        "OK: equal to the single-process MoE within 1e-6" if ok else "MISMATCH: differs by more than 1e-6",
    ])


def _torchrun_main(args: argparse.Namespace) -> int:
    _use_loopback()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        moe, x, g = demo_problem(args.d_model, args.experts, args.top_k, args.tokens, args.seed)
        reference = single_process_pass(moe, x, g)
        x_local, g_local = shard_tokens(x, world)[rank], shard_tokens(g, world)[rank]
        mine = _rank_pass(copy.deepcopy(moe), x_local, g_local)
        start = sum(s.shape[0] for s in shard_tokens(x, world)[:rank])
        rows = slice(start, start + x_local.shape[0])
        local = torch.tensor([
            (mine["output"] - reference.output[rows]).abs().max().item(),
            (mine["x_grad"] - reference.x_grad[rows]).abs().max().item(),
            max([(grad - reference.grads[n]).abs().max().item() for n, grad in mine["grads"].items()] or [0.0]),
        ], dtype=torch.float64)
        dist.all_reduce(local, op=dist.ReduceOp.MAX)
        records: list = [None] * world
        dist.all_gather_object(records, mine["record"])
        ok = bool(local.max() <= 1e-6)
        if rank == 0:
            print(_report(dict(zip(["output", "x_grad", "param_grads"], local.tolist())), records, moe), flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.expert_parallel`` (starts its own workers) or under ``torchrun`` (one rank per process)."""
    parser = argparse.ArgumentParser(prog="python -m helpers.expert_parallel", description=main.__doc__)
    parser.add_argument("--world-size", type=int, default=2, help="worker processes (without torchrun)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:     # started by torchrun
        return _torchrun_main(args)
    moe, x, g = demo_problem(args.d_model, args.experts, args.top_k, args.tokens, args.seed)
    result = run_expert_parallel(moe, x, g, world_size=args.world_size, timeout=args.timeout)
    diffs = max_differences(result, single_process_pass(moe, x, g))
    print(_report(diffs, result.records, moe))
    print(f"finished in {result.seconds:.1f} s (wall clock, including starting {args.world_size} processes)")
    return 0 if all(v <= 1e-6 for v in diffs.values()) else 1


if __name__ == "__main__":
    exit_code = main()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:   # a torchrun worker: skip the teardown race
        _leave_now(exit_code)
    sys.exit(exit_code)
