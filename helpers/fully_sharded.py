r"""Fully sharded data parallelism (ZeRO stage 3, PyTorch FSDP): every rank holds 1/R of every weight.

Plain data parallelism gives each of ``R`` ranks a copy of the model and its own tokens, and sums the
gradients with an all-reduce. ZeRO (Rajbhandari et al. 2020) and PyTorch's FSDP (Zhao et al. 2023) also
*shard* the weights: rank ``r`` keeps the ``r``-th slice of every parameter (flattened, padded to a multiple
of ``R``). For each layer and step:

* forward: **all-gather** the full weights, run this rank's tokens through them, free them;
* backward: **all-gather** them again (they were freed), compute this rank's gradients;
* **reduce-scatter** the full gradients: rank ``r`` receives the sum over ranks of its own slice.

Each of the three collectives moves ``(R−1)/R`` of the weights through every rank: per step
``3·(R−1)/R·Ψ·bytes`` for ``Ψ`` weights (1.5× plain data parallelism's all-reduce, the ZeRO paper's count),
against ``6·Ψ·B_r`` training FLOPs for the ``B_r`` tokens a rank holds. Per byte sent that is
``2·B_r·R / ((R−1)·bytes)``: the weights cancel, and the ratio is the tokens per rank
(``fully_sharded_flops_per_byte``), the cleanest case of "bytes grow with weights, FLOPs with tokens".

``FullyShardedFFN`` does this for one ``helpers.ffn.FFN``: its parameters are this rank's flat shards; a
differentiable all-gather (``gather_shards``: all-gather forward, reduce-scatter backward) rebuilds each
weight, and a ``torch.autograd.graph.saved_tensors_hooks`` pair keeps a marker instead of the gathered weight
for the backward pass and gathers it again when the backward needs it (what FSDP's pre-backward hook does).
``fully_sharded_job`` runs it on the course's launcher (``helpers.distributed.launch``) beside the
tensor- and expert-parallel jobs; ``python -m helpers.fully_sharded`` runs it from a shell.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.distributed import Job, RankContext, Traffic, launch, record_traffic, to_cpu, traffic_log
from helpers.ffn import FFN
from helpers.tensor_parallel import FFNPass, max_relative_differences, reference_pass

__all__ = ["FullyShardedFFN", "FullyShardedResult", "fully_sharded_bytes_per_step", "fully_sharded_flops_per_byte",
           "fully_sharded_job", "gather_shards", "run_fully_sharded", "shard_of"]


# ----------------------------------------------------------------------------- the formulas

def fully_sharded_bytes_per_step(n_params: int, world_size: int, *, bytes_per_element: float = 4) -> float:
    """Bytes one rank sends per training step: two all-gathers and one reduce-scatter of every weight.

    ``3·(R−1)/R·Ψ·bytes`` (ring algorithms; 0 when ``R = 1``): independent of the tokens.
    """
    validate.positive_int("n_params", n_params)
    validate.positive_int("world_size", world_size)
    validate.positive_float("bytes_per_element", bytes_per_element)
    return 3 * (world_size - 1) / world_size * n_params * bytes_per_element


def fully_sharded_flops_per_byte(tokens_per_rank: int, world_size: int, *, bytes_per_element: float = 2) -> float:
    """Training FLOPs a rank does per byte it sends: ``6·Ψ·B_r / (3·(R−1)/R·Ψ·bytes) = 2·B_r·R / ((R−1)·bytes)``.

    The number of weights cancels; in bf16 and for many ranks it is about the tokens per rank.
    """
    validate.positive_int("tokens_per_rank", tokens_per_rank)
    validate.positive_float("bytes_per_element", bytes_per_element)
    if validate.positive_int("world_size", world_size) == 1:
        raise ValueError("world_size must be at least 2: one rank sends nothing")
    return 2 * tokens_per_rank * world_size / ((world_size - 1) * bytes_per_element)


# ----------------------------------------------------------------------------- shards and the two collectives

def shard_of(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s slice of ``tensor`` flattened and zero-padded to a multiple of ``world_size`` (1-D)."""
    validate.positive_int("world_size", world_size)
    validate.int_in_range("rank", rank, 0, world_size - 1)
    flat = tensor.detach().reshape(-1)
    size = -(-flat.numel() // world_size)
    padded = torch.cat([flat, flat.new_zeros(size * world_size - flat.numel())])
    return padded[rank * size:(rank + 1) * size].clone()


def _all_gather(shard: torch.Tensor, group: dist.ProcessGroup | None, phase: str) -> torch.Tensor:
    world = dist.get_world_size(group)
    parts = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(parts, shard.contiguous(), group=group)
    record_traffic("all_gather", phase, shard.numel() * world, (world - 1) * shard.numel() * shard.element_size())
    return torch.cat(parts)


_REDUCE_SCATTER_MISSING: set[str] = set()          # backends that raised "not supported" once (older gloo)


def _reduce_scatter(full: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """This rank's slice of the sum over ranks of ``full`` (1-D, a multiple of the world size long)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = list(full.chunk(world))
    backend = str(dist.get_backend(group))
    out = torch.empty_like(parts[rank])
    if backend not in _REDUCE_SCATTER_MISSING:
        try:
            dist.reduce_scatter(out, [p.contiguous() for p in parts], group=group)
        except RuntimeError as err:                    # a gloo build without reduce_scatter: sum, then slice
            if "support" not in str(err).lower():
                raise
            _REDUCE_SCATTER_MISSING.add(backend)
    if backend in _REDUCE_SCATTER_MISSING:
        summed = full.clone()
        dist.all_reduce(summed, group=group)
        out = summed.chunk(world)[rank].clone()
    record_traffic("reduce_scatter", "backward", full.numel(), (world - 1) * out.numel() * out.element_size())
    return out


class _GatherShards(torch.autograd.Function):
    """All-gather of a flat shard into the full tensor; its backward is the reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, shape: torch.Size, group: dist.ProcessGroup | None):  # type: ignore[override]
        ctx.group, ctx.padded = group, shard.numel() * dist.get_world_size(group)
        full = _all_gather(shard, group, "forward")
        return full[:shape.numel()].view(shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        flat = grad.reshape(-1)
        flat = torch.cat([flat, flat.new_zeros(ctx.padded - flat.numel())])
        return _reduce_scatter(flat, ctx.group), None, None


def gather_shards(shard: torch.Tensor, shape: torch.Size | tuple[int, ...],
                  group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The full tensor of ``shape`` from every rank's ``shard`` (differentiable: backward reduce-scatters).

    Call it on every rank of the group with that rank's ``shard_of`` the same tensor.
    """
    return _GatherShards.apply(shard, torch.Size(shape), group)


# ----------------------------------------------------------------------------- one FFN, fully sharded

class FullyShardedFFN(nn.Module):
    """Rank ``rank``'s share of an FFN: a flat 1/R slice of each of its parameters (``shard_of``).

    ``forward(x)`` (on every rank of the group, each with its own tokens) gathers the full weights, runs the
    FFN on ``x`` ``(..., d_model)`` and frees them: the backward pass gathers them again, and each shard's
    gradient arrives by reduce-scatter, summed over every rank's tokens.
    """

    def __init__(self, ffn: FFN, rank: int, world_size: int) -> None:
        super().__init__()
        if not isinstance(ffn, FFN):
            raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
        if ffn.dropout.p > 0 and ffn.training:
            raise ValueError(f"ffn must have no active dropout (dropout={ffn.dropout.p}): call ffn.eval() or use 0")
        self.rank, self.world_size, self.d_model, self.gated, self.act = rank, world_size, ffn.d_model, ffn.gated, ffn.act
        self.shapes = {name: p.shape for name, p in ffn.named_parameters()}
        self.shards = nn.ParameterDict({name.replace(".", "_"): nn.Parameter(shard_of(p, rank, world_size))
                                        for name, p in ffn.named_parameters()})

    def _shard(self, name: str) -> torch.Tensor:
        return self.shards[name.replace(".", "_")]

    def forward(self, x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        if not dist.is_initialized():
            raise RuntimeError("FullyShardedFFN.forward needs torch.distributed to be initialised: run it in the "
                               "workers started by run_fully_sharded or fully_sharded_job")
        validate.float_tensor("x", x, last_dim=self.d_model)
        weights = {name: gather_shards(self._shard(name), shape, group) for name, shape in self.shapes.items()}
        gathered = {w.untyped_storage().data_ptr(): name for name, w in weights.items()}

        def pack(t: torch.Tensor):                     # a gathered weight is not kept for backward: a marker is
            name = gathered.get(t.untyped_storage().data_ptr())
            return t if name is None else (name, t.size(), t.stride(), t.storage_offset())

        def unpack(saved):                             # ... and the backward gathers it again
            if isinstance(saved, torch.Tensor):
                return saved
            name, size, stride, offset = saved
            with torch.no_grad():
                full = _all_gather(self._shard(name).detach(), group, "backward")
            return full.as_strided(size, stride, offset)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            h = self.act(F.linear(x, weights["w1.weight"], weights.get("w1.bias")))
            if self.gated:
                h = h * F.linear(x, weights["w3.weight"], weights.get("w3.bias"))
            return F.linear(h, weights["w2.weight"], weights.get("w2.bias"))

    def extra_repr(self) -> str:
        return f"rank={self.rank} of {self.world_size}, gated={self.gated}"


# ----------------------------------------------------------------------------- one rank's job, and the result

def _fully_sharded_task(inputs: dict, ctx: RankContext) -> dict:
    """The job every rank runs (importable, for ``spawn``): this rank's tokens through the sharded FFN."""
    ffn = inputs["ffn"]
    module = FullyShardedFFN(ffn, ctx.rank, ctx.world_size).to(ctx.device)
    x = inputs["x"].tensor_split(ctx.world_size)[ctx.rank].to(ctx.device).requires_grad_(True)
    g = inputs["grad_output"].tensor_split(ctx.world_size)[ctx.rank].to(ctx.device)
    with traffic_log() as log:
        y = module(x, ctx.group)
        (y * g).sum().backward()
    return to_cpu({"output": y.detach(), "x_grad": x.grad, "traffic": list(log),
                   "grads": {name: module._shard(name).grad for name in module.shapes},
                   "held": sum(p.numel() for p in module.parameters())})


@dataclass
class FullyShardedResult(FFNPass):
    """``FFNPass`` of the sharded run (outputs and input gradients of every rank's tokens, gradients put back
    together to full shapes), plus what each rank sent (``traffic[r]``) and held (``held[r]`` numbers)."""

    traffic: list[list[Traffic]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    n_params: int = 0
    n_tokens: int = 0

    def bytes_sent(self, rank: int = 0, op: str | None = None) -> float:
        """Bytes rank ``rank`` sent in the step (only collectives ``op``, when given)."""
        return sum(t.bytes_sent for t in self.traffic[rank] if op is None or t.op == op)


def fully_sharded_job(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor) -> Job:
    """One fully sharded training step of ``ffn`` as a ``helpers.distributed.Job``.

    ``x`` ``(N, d_model)`` is split over the ranks by ``tensor_split`` (rank ``r`` gets the ``r``-th block of
    tokens); each rank runs ``(y · grad_output).sum()`` backward on its tokens. The summed gradients equal the
    single-process ones (``helpers.tensor_parallel.reference_pass``).
    """
    if not isinstance(ffn, FFN):
        raise TypeError(f"ffn must be a helpers.ffn.FFN, got {type(ffn).__name__}")
    validate.float_tensor("x", x, last_dim=ffn.d_model)
    if x.dim() != 2:
        raise ValueError(f"x must be (tokens, d_model), got shape {tuple(x.shape)}")
    if not isinstance(grad_output, torch.Tensor) or grad_output.shape != x.shape:
        raise ValueError(f"grad_output must be a tensor of x's shape {tuple(x.shape)}, got "
                         f"{tuple(getattr(grad_output, 'shape', ())) or type(grad_output).__name__}")
    shapes = {name: p.shape for name, p in ffn.named_parameters()}

    def collect(parts: list[dict]) -> FullyShardedResult:
        grads = {name: torch.cat([p["grads"][name] for p in parts])[:shape.numel()].view(shape)
                 for name, shape in shapes.items()}
        return FullyShardedResult(torch.cat([p["output"] for p in parts]), torch.cat([p["x_grad"] for p in parts]),
                                  grads, traffic=[p["traffic"] for p in parts], held=[p["held"] for p in parts],
                                  n_params=sum(s.numel() for s in shapes.values()), n_tokens=x.shape[0])

    inputs = {"ffn": ffn, "x": x.detach(), "grad_output": grad_output.detach()}
    return Job("fully-sharded", _fully_sharded_task, inputs, collect)


def run_fully_sharded(ffn: FFN, x: torch.Tensor, grad_output: torch.Tensor, *, world_size: int = 2,
                      timeout: float = 60.0, backend: str = "gloo") -> FullyShardedResult:
    """One fully sharded step of ``ffn`` over ``world_size`` processes (``helpers.distributed.launch``)."""
    return launch([fully_sharded_job(ffn, x, grad_output)], world_size=world_size, timeout=timeout,
                  backend=backend).results[0]


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.fully_sharded``: one sharded step in float32 and float64, against one process."""
    parser = argparse.ArgumentParser(prog="python -m helpers.fully_sharded", description=main.__doc__)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args(argv)
    problems = []
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(0)
        ffn = FFN.from_variant("swiglu", 32, 96, bias=False).to(dtype)      # no biases: every weight gathered twice
        gen = torch.Generator().manual_seed(1)
        problems.append((ffn, torch.randn(args.tokens, 32, generator=gen).to(dtype),
                         torch.randn(args.tokens, 32, generator=gen).to(dtype)))
    run = launch([fully_sharded_job(*p) for p in problems], world_size=args.world_size)
    ok = True
    for (ffn, x, g), result in zip(problems, run.results):
        bound = 1e-6 if x.dtype == torch.float32 else 1e-12
        worst = max(max_relative_differences(result, reference_pass(ffn, x, g)).values())
        formula = fully_sharded_bytes_per_step(result.n_params, args.world_size, bytes_per_element=x.element_size())
        print(f"{str(x.dtype).replace('torch.', '')}: largest relative difference to one process "
              f"{'< ' + format(bound, 'g') if worst <= bound else format(worst, '.1e')}; rank 0 sent "
              f"{result.bytes_sent(0):,.0f} bytes (formula {formula:,.0f}), held {result.held[0]:,} of "
              f"{result.n_params:,} weights")
        ok = ok and worst <= bound
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
