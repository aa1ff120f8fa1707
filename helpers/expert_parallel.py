r"""Expert parallelism: a mixture of experts whose experts live in different processes.

Every rank holds a copy of the router, the experts ``r·E/W ... (r+1)·E/W − 1`` and its
own tokens. ``expert_parallel_forward``: **route** the local tokens (``MoE.route``);
**plan** the kept (token, slot) pairs sorted by expert, hence by owner (the split
sizes); swap the counts, then **dispatch** the rows with an uneven
``all_to_all_single``; **compute** the owned experts on the rows received;
**combine**: the reverse all-to-all brings the results home, weighted and summed per
token. Both exchanges go through ``helpers.distributed.all_to_all_rows``, whose
backward is the reverse all-to-all, so ``loss.backward()`` runs across processes.

Every tensor a rank creates lives on its tokens' device, so the same code runs on
GPUs with NCCL; here it runs on the CPU with gloo over the loopback interface. The
processes come from ``helpers.distributed.launch``: ``run_expert_parallel`` from
Python, ``python -m helpers.expert_parallel`` from a shell, or
``torchrun --nproc-per-node 2 -m helpers.expert_parallel`` one rank per process.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from helpers import validate
from helpers.distributed import (Job, ParallelError, ParallelTimeout, RankContext, all_to_all_rows, free_port,
                                 init_from_env, launch, leave_now, pid_alive, to_cpu)

ExpertParallelError, ExpertParallelTimeout = ParallelError, ParallelTimeout     # the launcher's errors, kept names

__all__ = ["DispatchPlan", "DispatchRecord", "ExpertParallelError", "ExpertParallelResult", "ExpertParallelTimeout",
           "MoEPass", "RemoteExpert", "expected_bytes_per_token", "expert_parallel_forward", "expert_parallel_job",
           "experts_of_rank", "format_records", "free_port", "max_differences", "owner_of", "pid_alive",
           "plan_dispatch", "run_expert_parallel", "shard_experts", "shard_tokens", "single_process_pass",
           "split_sizes"]

# ----------------------------------------------------------------------------- ownership and plans

def _check_layout(n_experts: int, world_size: int) -> int:
    if validate.positive_int("n_experts", n_experts) % validate.positive_int("world_size", world_size):
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

    One row per *kept* (token, slot) pair (two slots on one rank are two rows; a dropped slot
    is not sent). ``expert_index`` ``(N, k)`` long, ``kept`` ``(N, k)`` bool -> ``world_size`` ints.
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
    """The kept slots of a routing (all ``(N, k)``), sorted by expert id (stable), hence grouped by rank."""
    sizes = split_sizes(expert_index, kept, n_experts, world_size)
    n_tokens, top_k = expert_index.shape
    token = torch.arange(n_tokens, device=expert_index.device).unsqueeze(1).expand(n_tokens, top_k)[kept]
    expert = expert_index[kept]
    order = torch.argsort(expert, stable=True)
    return DispatchPlan(token=token[order], expert=expert[order], weight=weight[kept][order], send_counts=sizes)


# ----------------------------------------------------------------------------- one process's forward

@dataclass
class DispatchRecord:
    """What one rank exchanged in one forward pass: ``send_counts[r]`` rows to rank ``r`` in the dispatch
    (to itself: a local copy, not traffic), ``recv_counts[r]`` rows from rank ``r`` (sent back in the combine).
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

    Each of the ``k`` slots leaves with probability ``(W−1)/W``: ``d`` numbers out in the dispatch and
    as many back in the combine, ``2·k·d·bytes·(W−1)/W`` forward; the backward pass sends as much again.
    """
    validate.positive_int("d_model", d_model)
    validate.positive_int("top_k", top_k)
    validate.positive_int("world_size", world_size)
    validate.positive_int("bytes_per_element", bytes_per_element)
    forward = 2 * top_k * d_model * bytes_per_element * (world_size - 1) / world_size
    return 2 * forward if backward else forward


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
    """This rank's part of an expert-parallel MoE forward; call it on every rank of ``group`` (default: all).

    ``moe`` is the course's ``helpers.moe.MoE`` (token-choice router; this rank needs the router and the
    experts ``experts_of_rank(rank, E, W)``), ``x`` this rank's tokens ``(..., d_model)``. Returns ``(y,
    record)``: ``y`` (``x``'s shape) equals the single-process output on these tokens; ``record`` counts what
    was exchanged. Differentiable through both all-to-alls, to ``x``, the router and the experts.
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
    # (on the tokens' device: NCCL only moves CUDA tensors)
    send_counts = torch.tensor(plan.send_counts, dtype=torch.long, device=flat.device)
    recv_counts_t = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts_t, send_counts, group=group)
    recv_counts = recv_counts_t.tolist()              # on a GPU this waits for the exchange (a host sync)
    recv_expert = torch.empty(sum(recv_counts), dtype=torch.long, device=flat.device)
    dist.all_to_all_single(recv_expert, plan.expert.contiguous(), recv_counts, plan.send_counts, group=group)

    received = all_to_all_rows(flat[plan.token], recv_counts, plan.send_counts, group)    # dispatch
    processed = _run_local_experts(moe, received, recv_expert, owned)                      # compute
    returned = all_to_all_rows(processed, plan.send_counts, recv_counts, group)           # combine
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


# ----------------------------------------------------------------------------- one rank's job

def _rank_pass(moe: nn.Module, x_local: torch.Tensor, g_local: torch.Tensor | None,
               group: dist.ProcessGroup | None = None, device: torch.device | str = "cpu") -> dict:
    """Shard the experts, run the forward (+ backward) on ``device`` (``cuda:local_rank`` under NCCL); CPU results."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    owned = shard_experts(moe, rank, world_size)
    moe.to(device)
    moe.zero_grad(set_to_none=True)
    x_local = x_local.detach().to(device).requires_grad_(g_local is not None)
    y, record = expert_parallel_forward(moe, x_local, group)
    result = {"output": y.detach(), "record": record, "x_grad": None, "grads": {}}
    if g_local is None:
        return to_cpu(result)
    (y * g_local.to(device)).sum().backward()
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
    return to_cpu(result)


def _expert_parallel_task(inputs: dict, ctx: RankContext) -> dict:
    """The job every rank runs (importable, for ``spawn``): its token shard through ``_rank_pass``."""
    x_local = shard_tokens(inputs["x"], ctx.world_size)[ctx.rank]
    g = inputs["grad_output"]
    g_local = None if g is None else shard_tokens(g, ctx.world_size)[ctx.rank]
    return _rank_pass(inputs["moe"], x_local, g_local, ctx.group, ctx.device)


@dataclass
class ExpertParallelResult(MoEPass):
    """``MoEPass`` of the distributed run, plus what each rank exchanged and how long it took."""

    records: list[DispatchRecord] = field(default_factory=list)
    seconds: float = 0.0
    worker_pids: list[int] = field(default_factory=list)


def expert_parallel_job(moe: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None = None, *,
                        world_size: int = 2) -> Job:
    """The expert-parallel pass as a ``helpers.distributed.Job`` (to run with other jobs in one launch).

    Rank ``r`` gets the ``r``-th ``shard_tokens`` piece of ``x`` and owns ``experts_of_rank(r, E, W)``
    (``world_size`` must be the launch's); with ``grad_output`` every rank also runs
    ``(y · grad_output).sum().backward()``. Result: an ``ExpertParallelResult`` in token order, the
    router's gradient summed over the ranks.
    """
    validate.float_tensor("x", x, last_dim=moe.d_model)
    _check_layout(moe.n_experts, world_size)
    shard_tokens(x, world_size)
    if grad_output is not None:
        validate.float_tensor("grad_output", grad_output)
        if grad_output.shape != x.shape:
            raise ValueError(f"grad_output must have x's shape {tuple(x.shape)}, got {tuple(grad_output.shape)}")
    order = [name for name, _ in moe.named_parameters()]

    def collect(parts: list[dict]) -> ExpertParallelResult:
        grads: dict[str, torch.Tensor] = {}
        for part in parts:
            grads.update(part["grads"])
        return ExpertParallelResult(
            output=torch.cat([p["output"] for p in parts]),
            x_grad=None if grad_output is None else torch.cat([p["x_grad"] for p in parts]),
            grads={name: grads[name] for name in order if name in grads},
            records=[p["record"] for p in parts])

    inputs = {"moe": moe, "x": x.detach(), "grad_output": None if grad_output is None else grad_output.detach()}
    return Job("expert-parallel", _expert_parallel_task, inputs, collect)


def run_expert_parallel(moe: nn.Module, x: torch.Tensor, grad_output: torch.Tensor | None = None, *,
                        world_size: int = 2, timeout: float = 60.0, backend: str = "gloo",
                        fail_rank: int | None = None, stall_rank: int | None = None) -> ExpertParallelResult:
    """Run ``moe`` on ``x`` ``(..., d_model)`` split over ``world_size`` worker processes (gloo, or NCCL on GPUs).

    One ``expert_parallel_job`` started by ``helpers.distributed.launch``: a failing worker raises
    ``ExpertParallelError`` (its rank and error), a run longer than ``timeout`` s ``ExpertParallelTimeout``;
    either way no worker is left running. ``fail_rank`` / ``stall_rank`` make that rank raise / hang on purpose.
    """
    job = expert_parallel_job(moe, x, grad_output, world_size=world_size)
    run = launch([job], world_size=world_size, timeout=timeout, backend=backend, fail_rank=fail_rank,
                 stall_rank=stall_rank)
    result = run.results[0]
    result.seconds, result.worker_pids = run.seconds, run.worker_pids
    return result


# ----------------------------------------------------------------------------- command line / torchrun

def demo_problem(d_model: int = 32, n_experts: int = 4, top_k: int = 2, n_tokens: int = 64,
                 seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small seeded MoE (SwiGLU experts, no capacity limit), tokens ``(n_tokens, d)`` and an output gradient."""
    from helpers.moe import MoE

    torch.manual_seed(seed)
    moe = MoE(d_model, n_experts, top_k).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    return moe, torch.randn(n_tokens, d_model, generator=gen), torch.randn(n_tokens, d_model, generator=gen)


def format_records(records: list[DispatchRecord], *, split_metadata: bool = False) -> str:
    """A small table: rows each rank sent where, and the bytes it sent to other ranks per token.

    ``split_metadata``: show the bytes sent as activations + metadata (``metadata_bytes``) instead of their sum.
    """
    sent = "bytes sent (+ metadata)" if split_metadata else "bytes sent"
    lines = [f"{'rank':>4} {'tokens':>6} {'rows to each rank':>18} {sent:>{len(sent)}} {'act. bytes/token':>16}"]
    for r in records:
        value = (f"{r.dispatch_bytes + r.combine_bytes:,} + {r.metadata_bytes:,}" if split_metadata
                 else str(r.bytes_sent))
        lines.append(f"{r.rank:>4} {r.n_tokens:>6} {str(r.send_counts):>18} {value:>{max(len(sent), 10)}} "
                     f"{r.bytes_per_token():>16.1f}")
    return "\n".join(lines)


def _report(diffs: dict[str, float], records: list[DispatchRecord], moe: nn.Module) -> str:
    world = records[0].world_size
    ok = all(v <= 1e-6 for v in diffs.values())
    expected = expected_bytes_per_token(moe.d_model, moe.top_k, world)
    return "\n".join([
        f"expert parallelism over {world} processes: {moe.n_experts} experts, top-{moe.top_k}, d_model={moe.d_model}",
        format_records(records),
        f"uniform-routing estimate: {expected:.1f} activation bytes per token per rank (forward)",
        "max |distributed - single process| <= 1e-6: " + ", ".join(f"{k} {v <= 1e-6}" for k, v in diffs.items()),
        "OK: equal to the single-process MoE within 1e-6" if ok else "MISMATCH: differs by more than 1e-6",
    ])


def _torchrun_main(args: argparse.Namespace) -> int:
    ctx = init_from_env(args.timeout)
    rank, world = ctx.rank, ctx.world_size
    try:
        moe, x, g = demo_problem(args.d_model, args.experts, args.top_k, args.tokens, args.seed)
        reference = single_process_pass(moe, x, g)
        x_local, g_local = shard_tokens(x, world)[rank], shard_tokens(g, world)[rank]
        mine = _rank_pass(copy.deepcopy(moe), x_local, g_local, device=ctx.device)
        start = sum(s.shape[0] for s in shard_tokens(x, world)[:rank])
        rows = slice(start, start + x_local.shape[0])
        local = torch.tensor([
            (mine["output"] - reference.output[rows]).abs().max().item(),
            (mine["x_grad"] - reference.x_grad[rows]).abs().max().item(),
            max([(grad - reference.grads[n]).abs().max().item() for n, grad in mine["grads"].items()] or [0.0]),
        ], dtype=torch.float64, device=ctx.device)
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
        leave_now(exit_code)
    sys.exit(exit_code)
