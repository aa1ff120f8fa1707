r"""Tensor parallelism: one FFN split across processes (Megatron-LM's column-then-row split).

With the course's ``nn.Linear`` layout (``W1``, ``W3``: ``(d_ff, d_model)``;
``W2``: ``(d_model, d_ff)``) and ``W`` ranks, rank ``r`` keeps one contiguous
block ``B_r`` of the ``d_ff`` hidden units:

* the **rows** ``B_r`` of ``W1`` (and ``W3``) and of ``b1`` (``b3``): in Megatron's
  ``Y = X·A`` notation, ``A = W1ᵀ`` split by *columns*;
* the **columns** ``B_r`` of ``W2``: ``W2ᵀ`` split by *rows*.

Each rank computes ``H_r = φ(X W1[B_r]ᵀ + b1[B_r])`` (a gated FFN multiplies by
``X W3[B_r]ᵀ + b3[B_r]``) and its partial output ``Y_r = H_r W2[:, B_r]ᵀ``, with
no communication: a hidden unit needs only its own key, and φ acts unit by
unit. The output is ``Y = Σ_r Y_r + b2``: one all-reduce (sum), and ``b2`` is
added once, after it. Backward needs the conjugate: every rank used the same
``X``, so ``∂L/∂X`` is the sum of the ranks' partial gradients, one more
all-reduce. Megatron calls the two operators *g* (all-reduce forward, identity
backward) and *f* (identity forward, all-reduce backward):
``helpers.distributed.reduce_from_parallel`` and ``copy_to_parallel``.

Splitting ``W1`` the other way (by ``d_model``) would leave every rank with a
partial pre-activation, and ``φ(a + b) ≠ φ(a) + φ(b)``: a sum would be needed
*before* the non-linearity, a second communication per FFN.

The processes come from the course's one launcher, ``helpers.distributed.launch``
(the same one ``helpers.expert_parallel`` uses): ``run_tensor_parallel`` from
Python, ``python -m helpers.tensor_parallel`` from a shell, and
``torchrun --nproc-per-node 2 -m helpers.tensor_parallel``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.distributed import (Job, RankContext, Traffic, copy_to_parallel, init_from_env, launch, leave_now,
                                 reduce_from_parallel, ring_all_reduce_bytes, to_cpu, traffic_log)
from helpers.ffn import FFN

__all__ = ["FFNPass", "TensorParallelFFN", "TensorParallelResult", "hidden_block", "max_relative_differences",
           "reference_pass", "run_tensor_parallel", "tensor_parallel_bytes_per_token", "tensor_parallel_job",
           "tensor_parallel_partials"]


def _check_ffn(ffn: nn.Module) -> None:
    if not isinstance(ffn, FFN):
        raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
    if ffn.dropout.p > 0 and ffn.training:
        raise ValueError(f"ffn must have no active dropout (dropout={ffn.dropout.p}): call ffn.eval() or use 0")


def hidden_block(rank: int, d_ff: int, world_size: int) -> range:
    """The hidden units rank ``rank`` keeps: the ``rank``-th ``torch.tensor_split`` block of ``range(d_ff)``.

    Blocks differ in size by at most one (the first ``d_ff mod W`` are the larger).
    """
    validate.positive_int("d_ff", d_ff)
    validate.positive_int("world_size", world_size)
    if world_size > d_ff:
        raise ValueError(f"world_size must be at most d_ff={d_ff} (one hidden unit per rank at least), "
                         f"got {world_size}")
    validate.int_in_range("rank", rank, 0, world_size - 1)
    base, extra = divmod(d_ff, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


class TensorParallelFFN(nn.Module):
    """Rank ``rank``'s share of an FFN: rows ``B`` of W1 (W3) and b1 (b3), columns ``B`` of W2, and b2.

    Built from a full ``helpers.ffn.FFN`` (copies of the slices: the full FFN is
    not modified). ``partial(x)`` is this rank's ``H_B W2[:, B]ᵀ`` (no ``b2``);
    ``forward(x)`` (call it on every rank of the group, with the same ``x``) is
    the full FFN's output: f, partial, g (all-reduce), then ``+ b2``.

    Shapes: ``x`` ``(..., d_model)`` -> ``(..., d_model)``.
    """

    def __init__(self, ffn: FFN, rank: int, world_size: int) -> None:
        super().__init__()
        _check_ffn(ffn)
        block = hidden_block(rank, ffn.d_ff, world_size)
        rows = slice(block.start, block.stop)
        self.rank, self.world_size, self.block = rank, world_size, block
        self.d_model, self.d_ff_local, self.gated = ffn.d_model, len(block), ffn.gated
        self.act = ffn.act

        def copy(t: torch.Tensor | None) -> nn.Parameter | None:
            return None if t is None else nn.Parameter(t.detach().clone())

        self.w1 = copy(ffn.w1.weight[rows])                  # (d_ff/W, d_model): rows of W1
        self.b1 = copy(None if ffn.w1.bias is None else ffn.w1.bias[rows])
        self.w3 = copy(None if ffn.w3 is None else ffn.w3.weight[rows])
        self.b3 = copy(None if ffn.w3 is None or ffn.w3.bias is None else ffn.w3.bias[rows])
        self.w2 = copy(ffn.w2.weight[:, rows])               # (d_model, d_ff/W): columns of W2
        self.b2 = copy(ffn.w2.bias)                          # (d_model,): added once, after the sum

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's partial output ``φ(x W1[B]ᵀ + b1[B]) (⊙ (x W3[B]ᵀ + b3[B])) W2[:, B]ᵀ``, no ``b2``."""
        validate.float_tensor("x", x, last_dim=self.d_model)
        h = self.act(F.linear(x, self.w1, self.b1))
        if self.gated:
            h = h * F.linear(x, self.w3, self.b3)
        return F.linear(h, self.w2)

    def forward(self, x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        if not dist.is_initialized():
            raise RuntimeError("TensorParallelFFN.forward needs torch.distributed to be initialised: run it in the "
                               "workers started by run_tensor_parallel, or under torchrun (partial() runs anywhere)")
        y = reduce_from_parallel(self.partial(copy_to_parallel(x, group)), group)     # g(partial(f(x)))
        return y if self.b2 is None else y + self.b2

    def extra_repr(self) -> str:
        return (f"rank={self.rank} of {self.world_size}, hidden units {self.block.start}..{self.block.stop - 1}, "
                f"gated={self.gated}")


def tensor_parallel_partials(ffn: FFN, x: torch.Tensor, world_size: int) -> list[torch.Tensor]:
    """Every rank's partial output, computed in this process (no communication): their sum ``+ b2`` is ``ffn(x)``.

    Shapes: ``x`` ``(..., d_model)``; a list of ``world_size`` tensors of ``x``'s shape.
    """
    _check_ffn(ffn)
    return [TensorParallelFFN(ffn, r, world_size).to(x.device).partial(x) for r in range(world_size)]


def tensor_parallel_bytes_per_token(d_model: int, world_size: int, *, bytes_per_element: int = 4,
                                    backward: bool = False) -> float:
    """Bytes one rank sends per token for one tensor-parallel FFN: ring all-reduces of ``d_model`` numbers.

    Forward: one all-reduce of the output (g), ``2·(W−1)/W·d·bytes``; backward
    adds one of the input's gradient (f), as much again.
    """
    validate.positive_int("d_model", d_model)
    forward = ring_all_reduce_bytes(d_model, world_size, bytes_per_element)
    return 2 * forward if backward else forward


# ----------------------------------------------------------------------------- the reference and the comparison

@dataclass
class FFNPass:
    """Output ``(N, d)``, input gradient ``(N, d)`` and every parameter's gradient (full shapes) of one pass."""

    output: torch.Tensor
    x_grad: torch.Tensor | None = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)


def reference_pass(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor) -> FFNPass:
    """The single-process FFN: ``y = ffn(x)`` and the gradients of ``(y · grad_output).sum()``."""
    import copy

    ref = copy.deepcopy(ffn)
    ref.zero_grad(set_to_none=True)
    xx = x.detach().clone().requires_grad_(True)
    y = ref(xx)
    (y * grad_output).sum().backward()
    return FFNPass(y.detach(), xx.grad, {n: p.grad.clone() for n, p in ref.named_parameters()})


def max_relative_differences(a: FFNPass, b: FFNPass) -> dict[str, float]:
    """``max |a − b| / max |b|`` for the output, the input gradient and the worst parameter gradient."""
    def rel(u: torch.Tensor, v: torch.Tensor) -> float:
        return float((u - v).abs().max() / v.abs().max().clamp_min(torch.finfo(v.dtype).tiny))

    if set(a.grads) != set(b.grads):
        raise ValueError(f"the two passes have gradients for different parameters: {sorted(set(a.grads) ^ set(b.grads))}")
    return {"output": rel(a.output, b.output), "x_grad": rel(a.x_grad, b.x_grad),
            "param_grads": max(rel(a.grads[n], b.grads[n]) for n in b.grads)}


# ----------------------------------------------------------------------------- one rank's job

def _rank_pass(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor, ctx: RankContext) -> dict:
    shard = TensorParallelFFN(ffn, ctx.rank, ctx.world_size).to(ctx.device)
    x = x.detach().to(ctx.device).requires_grad_(True)
    with traffic_log() as log:
        y = shard(x, ctx.group)
        (y * grad_output.to(ctx.device)).sum().backward()
    grads = {name: p.grad for name, p in shard.named_parameters()}
    return to_cpu({"output": y.detach(), "x_grad": x.grad, "grads": grads, "traffic": list(log),
                   "block": (shard.block.start, shard.block.stop)})


def _tensor_parallel_task(inputs: dict, ctx: RankContext) -> dict:
    """The job every rank runs (importable, for ``spawn``): all tokens through this rank's share."""
    return _rank_pass(inputs["ffn"], inputs["x"], inputs["grad_output"], ctx)


@dataclass
class TensorParallelResult(FFNPass):
    """``FFNPass`` of the distributed run (gradients reassembled to full shapes), plus what was sent.

    ``ranks_agree``: every rank ended with the same output and input gradient
    (bit for bit, as an all-reduce guarantees). ``traffic[r]``: the collectives
    rank ``r`` called (``helpers.distributed.Traffic``).
    """

    ranks_agree: bool = False
    traffic: list[list[Traffic]] = field(default_factory=list)
    n_tokens: int = 0
    seconds: float = 0.0
    worker_pids: list[int] = field(default_factory=list)

    def bytes_per_token(self, rank: int = 0) -> float:
        """Bytes rank ``rank`` sent per token (forward + backward), by the ring all-reduce count."""
        return sum(t.bytes_sent for t in self.traffic[rank]) / max(self.n_tokens, 1)


def tensor_parallel_job(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor) -> Job:
    """The tensor-parallel pass as a ``helpers.distributed.Job``: every rank sees all of ``x``.

    Each rank keeps its block of hidden units (``hidden_block``), runs
    ``TensorParallelFFN`` forward and ``(y · grad_output).sum()`` backward. The
    result is a ``TensorParallelResult`` whose gradients have the full FFN's names
    and shapes (the ranks' slices put back together; ``b2``'s is the same on every rank).
    """
    _check_ffn(ffn)
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    if not isinstance(grad_output, torch.Tensor) or grad_output.shape != x.shape:
        raise ValueError(f"grad_output must be a tensor of x's shape {tuple(x.shape)}, got "
                         f"{tuple(getattr(grad_output, 'shape', ())) or type(grad_output).__name__}")
    n_tokens = x.reshape(-1, ffn.d_model).shape[0]

    def collect(parts: list[dict]) -> TensorParallelResult:
        first = parts[0]
        agree = all(torch.equal(p["output"], first["output"]) and torch.equal(p["x_grad"], first["x_grad"])
                    for p in parts)
        cat0 = lambda key: torch.cat([p["grads"][key] for p in parts], dim=0)      # noqa: E731
        grads = {"w1.weight": cat0("w1")}
        if "b1" in first["grads"]:
            grads["w1.bias"] = cat0("b1")
        if "w3" in first["grads"]:
            grads["w3.weight"] = cat0("w3")
            if "b3" in first["grads"]:
                grads["w3.bias"] = cat0("b3")
        grads["w2.weight"] = torch.cat([p["grads"]["w2"] for p in parts], dim=1)
        if "b2" in first["grads"]:
            grads["w2.bias"] = first["grads"]["b2"]
        order = [name for name, _ in ffn.named_parameters()]
        return TensorParallelResult(first["output"], first["x_grad"], {n: grads[n] for n in order},
                                    ranks_agree=agree, traffic=[p["traffic"] for p in parts], n_tokens=n_tokens)

    inputs = {"ffn": ffn, "x": x.detach(), "grad_output": grad_output.detach()}
    return Job("tensor-parallel", _tensor_parallel_task, inputs, collect)


def run_tensor_parallel(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor, *, world_size: int = 2,
                        timeout: float = 60.0, backend: str = "gloo", fail_rank: int | None = None,
                        stall_rank: int | None = None) -> TensorParallelResult:
    """Run ``ffn`` forward and backward split over ``world_size`` processes (``helpers.distributed.launch``).

    A failing worker raises ``helpers.distributed.ParallelError`` (its rank and
    error), a hanging one ``ParallelTimeout`` after ``timeout`` s; no worker is left running.
    """
    run = launch([tensor_parallel_job(ffn, x, grad_output)], world_size=world_size, timeout=timeout,
                 backend=backend, fail_rank=fail_rank, stall_rank=stall_rank)
    result = run.results[0]
    result.seconds, result.worker_pids = run.seconds, run.worker_pids
    return result


# ----------------------------------------------------------------------------- command line / torchrun

def demo_problem(d_model: int = 32, d_ff: int = 128, variant: str = "swiglu", n_tokens: int = 16, seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> tuple[FFN, torch.Tensor, torch.Tensor]:
    """A seeded FFN with biases, tokens ``(n_tokens, d_model)`` and an output gradient, in ``dtype``."""
    torch.manual_seed(seed)
    ffn = FFN.from_variant(variant, d_model, d_ff, bias=True).to(dtype)
    with torch.no_grad():                       # non-zero biases, so a misplaced bias shows
        for p in ffn.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.5)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n_tokens, d_model, generator=gen).to(dtype)
    g = torch.randn(n_tokens, d_model, generator=gen).to(dtype)
    return ffn, x, g


def _report(rel: dict[str, float], dtype: torch.dtype, world: int, agree: bool, bytes_per_token: float,
            d_model: int) -> str:
    bound = 1e-6 if dtype == torch.float32 else 1e-12
    ok = all(v <= bound for v in rel.values()) and agree
    return "\n".join([
        f"tensor parallelism over {world} processes, {str(dtype).replace('torch.', '')}: "
        + ", ".join(f"{k} {v <= bound}" for k, v in rel.items()) + f" (relative difference <= {bound:g})",
        f"all ranks hold the same output and input gradient: {agree}",
        f"sent per token and rank, forward + backward: {bytes_per_token:.0f} bytes "
        f"(formula {tensor_parallel_bytes_per_token(d_model, world, bytes_per_element=4 if dtype == torch.float32 else 8, backward=True):.0f})",
        "OK: equal to the single-process FFN" if ok else "MISMATCH",
    ]), ok


def _torchrun_main(args: argparse.Namespace) -> int:
    ctx = init_from_env(args.timeout)
    ok_all = True
    try:
        for dtype in (torch.float32, torch.float64):
            ffn, x, g = demo_problem(args.d_model, args.d_ff, args.variant, args.tokens, args.seed, dtype)
            reference = reference_pass(ffn, x, g)
            mine = _rank_pass(ffn, x, g, ctx)
            full = [None] * ctx.world_size
            dist.all_gather_object(full, mine)
            if ctx.rank == 0:
                result = tensor_parallel_job(ffn, x, g).collect(full)
                text, ok = _report(max_relative_differences(result, reference), dtype, ctx.world_size,
                                   result.ranks_agree, result.bytes_per_token(), args.d_model)
                print(text, flush=True)
                ok_all = ok_all and ok
        flag = torch.tensor([float(ok_all)], device=ctx.device)
        dist.broadcast(flag, 0)
        ok_all = bool(flag.item())
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0 if ok_all else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.tensor_parallel`` (starts its own workers) or under ``torchrun`` (one rank per process)."""
    parser = argparse.ArgumentParser(prog="python -m helpers.tensor_parallel", description=main.__doc__)
    parser.add_argument("--world-size", type=int, default=2, help="worker processes (without torchrun)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--d-ff", type=int, default=128)
    parser.add_argument("--variant", default="swiglu")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:     # started by torchrun
        return _torchrun_main(args)
    problems = [demo_problem(args.d_model, args.d_ff, args.variant, args.tokens, args.seed, dtype)
                for dtype in (torch.float32, torch.float64)]
    run = launch([tensor_parallel_job(*p) for p in problems], world_size=args.world_size, timeout=args.timeout)
    ok_all = True
    for (ffn, x, g), result in zip(problems, run.results):
        text, ok = _report(max_relative_differences(result, reference_pass(ffn, x, g)), x.dtype, args.world_size,
                           result.ranks_agree, result.bytes_per_token(), args.d_model)
        print(text)
        ok_all = ok_all and ok
    print(f"finished in {run.seconds:.1f} s (wall clock, including starting {args.world_size} processes)")
    return 0 if ok_all else 1


if __name__ == "__main__":
    exit_code = main()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:   # a torchrun worker: skip the teardown race
        leave_now(exit_code)
    sys.exit(exit_code)
