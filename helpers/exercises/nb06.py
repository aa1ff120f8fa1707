"""Checkers for notebook 06 (the FFN at scale): FLOPs, chunking memory, a tensor-parallel split, all-to-all
splits, the arithmetic intensity of an MoE step.

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it with your function,
e.g. ``check_model_flops(model_flops_per_token)``; it prints one line.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.exercises.engine import Case, Exercise
from helpers.chunking import peak_saved_bytes
from helpers.expert_parallel import split_sizes

# ----------------------------------------------------------------------------- 1. FLOPs per token


def _model_flops(n_layers: int, d_model: int, d_ff: int, n_ctx: int, gated: bool, training: bool, *,
                 mac: int = 2, context: int = 4, ffn_matrices: int | None = None, factor: int | None = None,
                 layers: bool = True) -> int:
    matrices = ffn_matrices if ffn_matrices is not None else (3 if gated else 2)
    per_layer = mac * (4 * d_model * d_model + matrices * d_model * d_ff) + context * n_ctx * d_model * mac // 2
    total = per_layer * (n_layers if layers else 1)
    return total * (factor if factor is not None else (3 if training else 1))


def model_flops_reference(n_layers: int, d_model: int, d_ff: int, n_ctx: int, gated: bool, training: bool) -> int:
    """Matmul FLOPs per token of ``n_layers`` transformer blocks (embeddings and unembedding excluded).

    Per layer, forward: attention projections ``8·d²`` (Q, K, V, output), attention
    scores and mixing ``4·n_ctx·d`` (QKᵀ and AV over the full square, as PyTorch's
    FLOP counter counts them), FFN ``4·d·d_ff`` (dense) or ``6·d·d_ff`` (gated).
    Training (forward + backward) is three times the forward.
    """
    return _model_flops(n_layers, d_model, d_ff, n_ctx, gated, training)


def _flops_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(606)
    cases = [Case((12, 768, 3072, 1024, False, False), note="GPT-2 small forward (12 layers, d=768, n_ctx=1024)")]
    for _ in range(7):
        n_layers = int(torch.randint(1, 48, (1,), generator=gen))
        d = 64 * int(torch.randint(1, 33, (1,), generator=gen))
        gated = bool(torch.randint(0, 2, (1,), generator=gen))
        d_ff = (8 * d) // 3 if gated else 4 * d
        n_ctx = 2 ** int(torch.randint(7, 15, (1,), generator=gen))
        training = bool(torch.randint(0, 2, (1,), generator=gen))
        cases.append(Case((n_layers, d, d_ff, n_ctx, gated, training)))
    cases.append(Case((2, 64, 256, 4096, True, True), note="a tiny gated model at a long context, training"))
    return cases


check_model_flops = Exercise(
    "Exercise 1 (FLOPs per token)",
    model_flops_reference,
    _flops_cases,
    mistakes=[
        ("a multiply-add is 2 FLOPs (one multiply, one add); you counted it as 1.",
         lambda *a: _model_flops(*a, mac=1)),
        ("the attention scores QKᵀ and the mixing AV add 4·n_ctx·d per layer and token; you left them out "
         "(that is the 6N-style estimate, which holds only when d_model ≫ n_ctx/12).",
         lambda *a: _model_flops(*a, context=0)),
        ("you counted only the causal half of the attention square (2·n_ctx·d); count the full QKᵀ and AV "
         "products, 4·n_ctx·d, as the FLOP counter does.",
         lambda *a: _model_flops(*a, context=2)),
        ("a gated FFN has three weight matrices (W1, W3, W2): 6·d·d_ff per token, not 4·d·d_ff.",
         lambda *a: _model_flops(*a, ffn_matrices=2)),
        ("training = forward + backward = 3× the forward (the backward needs two products per weight "
         "matrix), not 2×.",
         lambda n, d, f, t, g, training: _model_flops(n, d, f, t, g, training, factor=2 if training else 1)),
        ("multiply the per-layer count by n_layers.",
         lambda *a: _model_flops(*a, layers=False)),
    ],
    atol=0, rtol=0,
)

# ----------------------------------------------------------------------------- 2. peak bytes, chunked + checkpointed


def peak_bytes_reference(n_tokens: int, d_model: int, d_ff: int, n_chunks: int) -> int:
    """Peak saved bytes (fp32) of a GELU FFN trained in ``n_chunks`` checkpointed chunks.

    The chunk inputs (``T·d``) are kept; the largest chunk (``ceil(T/n)`` tokens)
    is recomputed in the backward pass, adding its hidden tensors ``2·d_ff`` per token.
    """
    return peak_saved_bytes(n_tokens, d_model, d_ff, "gelu", n_chunks)


def _peak_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(608)
    cases = [Case((4096, 64, 256, 8), note="T=4096, d_model=64, d_ff=256, 8 chunks")]
    for _ in range(6):
        t = int(torch.randint(50, 5000, (1,), generator=gen))
        d = 16 * int(torch.randint(1, 33, (1,), generator=gen))
        n = int(torch.randint(2, 40, (1,), generator=gen))
        cases.append(Case((t, d, 4 * d, n)))
    cases.append(Case((1000, 32, 128, 7), note="T=1000 in 7 chunks (they cannot all be equal)"))
    return cases


check_peak_bytes = Exercise(
    "Exercise 2 (peak saved bytes with chunking + checkpointing)",
    peak_bytes_reference,
    _peak_cases,
    mistakes=[
        ("checkpointing keeps every chunk's input until the backward pass: add the T·d_model floats of the "
         "kept inputs.",
         lambda t, d, f, n: 4 * math.ceil(t / n) * 2 * f),
        ("that is chunking without checkpointing: every chunk's activations stay saved, T·(d + 2·d_ff) floats. "
         "With checkpointing only one chunk is recomputed at a time.",
         lambda t, d, f, n: 4 * t * (d + 2 * f)),
        ("when T is not a multiple of n_chunks the chunks differ in size: the peak comes from the largest one, "
         "ceil(T / n_chunks) tokens, not T // n_chunks.",
         lambda t, d, f, n: 4 * (t * d + (t // n) * 2 * f)),
        ("the recomputed chunk's input is a view of x, already kept: count the chunk's hidden tensors "
         "(2·d_ff per token) only, not its input a second time.",
         lambda t, d, f, n: 4 * (t * d + math.ceil(t / n) * (d + 2 * f))),
        ("the answer is in bytes: multiply the number of float32 elements by 4.",
         lambda t, d, f, n: t * d + math.ceil(t / n) * 2 * f),
    ],
    atol=0, rtol=0,
)

# ----------------------------------------------------------------------------- 3. a tensor-parallel split


def _blocks(d_ff: int, n_parts: int, kind: str = "contiguous") -> list[torch.Tensor]:
    units = torch.arange(d_ff)
    if kind == "round_robin":
        return [units[r::n_parts] for r in range(n_parts)]
    if kind == "floor":
        size = d_ff // n_parts
        return [units[r * size:(r + 1) * size] for r in range(n_parts)]
    return list(torch.tensor_split(units, n_parts))


def _tp(x, w1, b1, w2, b2, n_parts, *, kind="contiguous", b2_where="once"):
    parts = []
    for block in _blocks(w1.shape[0], n_parts, kind):
        w1_r, b1_r, w2_r = w1[block], b1[block], w2[:, block]      # rows of W1, columns of W2 (nn.Linear layout)
        h = F.gelu(x @ w1_r.T + b1_r)
        part = h @ w2_r.T
        parts.append(part + b2 if b2_where == "every" else part)
    total = sum(parts)
    y = total + b2 if b2_where == "once" else total
    return parts, y


def tensor_parallel_reference(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                              b2: torch.Tensor, n_parts: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Rank r's partial output and the full output of a GELU FFN split over ``n_parts`` ranks.

    ``x`` ``(N, d)``, ``w1`` ``(d_ff, d)``, ``b1`` ``(d_ff,)``, ``w2`` ``(d, d_ff)``, ``b2`` ``(d,)``. Rank r
    keeps the r-th ``torch.tensor_split`` block B of the hidden units: partial ``GELU(x W1[B]ᵀ + b1[B]) W2[:, B]ᵀ``
    ``(N, d)`` without b2; the output is the sum of the partials plus b2, added once.
    """
    return _tp(x, w1, b1, w2, b2, n_parts)


def _tp_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(610)

    def case(n: int, d: int, d_ff: int, parts: int, note: str) -> Case:
        args = (torch.randn(n, d, generator=gen, dtype=torch.float64),
                torch.randn(d_ff, d, generator=gen, dtype=torch.float64) / d ** 0.5,
                torch.randn(d_ff, generator=gen, dtype=torch.float64),
                torch.randn(d, d_ff, generator=gen, dtype=torch.float64) / d_ff ** 0.5,
                torch.randn(d, generator=gen, dtype=torch.float64), parts)
        return Case(args, note=note)

    return [case(4, 8, 32, 2, "the example: 4 tokens, d=8, d_ff=32, 2 ranks"),
            case(1, 16, 64, 4, "one token, 4 ranks"),
            case(6, 12, 30, 4, "d_ff=30 over 4 ranks (blocks of 8, 8, 7, 7)"),
            case(5, 8, 16, 1, "a single rank: the plain FFN"),
            case(3, 4, 5, 5, "one hidden unit per rank"),
            case(7, 10, 45, 3, "d_ff=45 over 3 ranks"),
            case(9, 6, 50, 8, "d_ff=50 over 8 ranks (blocks of 7 and 6)")]


check_tensor_parallel = Exercise(
    "Exercise 3 (a tensor-parallel split of the FFN)",
    tensor_parallel_reference,
    _tp_cases,
    mistakes=[
        ("you added b2 in every rank's partial output, so the sum holds n_parts·b2: b2 belongs to the full "
         "output, added once after the sum (Megatron adds it after the all-reduce).",
         lambda *a: _tp(*a, b2_where="every")),
        ("the output is the sum of the partials plus b2: you left b2 out.",
         lambda *a: _tp(*a, b2_where="none")),
        ("rank r keeps a contiguous block of hidden units (the r-th torch.tensor_split block), not every "
         "n_parts-th unit: the sum is right, but each rank's partial output differs.",
         lambda *a: _tp(*a, kind="round_robin")),
        ("blocks of d_ff // n_parts units drop the last d_ff mod n_parts units when d_ff does not divide "
         "evenly: torch.tensor_split makes blocks that differ by at most one and cover every unit.",
         lambda *a: _tp(*a, kind="floor")),
    ],
    atol=1e-10, rtol=1e-10, kind="investigate",
)

# ----------------------------------------------------------------------------- 4. all-to-all split sizes


def split_sizes_reference(expert_index: torch.Tensor, kept: torch.Tensor, n_experts: int,
                          world_size: int) -> list[int]:
    """Rows sent to each rank: kept (token, slot) pairs per owner, rank r owning experts r·E/W … (r+1)·E/W − 1."""
    return split_sizes(expert_index, kept, n_experts, world_size)


def _as_int_list(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()] if not value.is_floating_point() else value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


class _SplitSizesExercise(Exercise):
    """Accepts a list, a tuple or a 1-D tensor of counts (converted to a list before comparing)."""

    def evaluate(self, fn):  # type: ignore[override]
        if callable(fn):
            learner = fn

            def fn(*args, **kwargs):
                return _as_int_list(learner(*args, **kwargs))
        return super().evaluate(fn)


def _routing_case(gen: torch.Generator, n_tokens: int, n_experts: int, top_k: int, world_size: int,
                  drop: float) -> Case:
    scores = torch.rand(n_tokens, n_experts, generator=gen)
    expert_index = scores.topk(top_k, dim=-1).indices
    kept = torch.rand(n_tokens, top_k, generator=gen) >= drop
    return Case((expert_index, kept, n_experts, world_size),
                note=f"{n_tokens} tokens, {n_experts} experts, top-{top_k}, world_size={world_size}")


def _split_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(609)
    example = Case((torch.tensor([[0, 3], [1, 0], [2, 3]]), torch.tensor([[True, True], [True, False], [True, True]]),
                    4, 2), note="the example in the prompt")
    configs = [(40, 8, 2, 2, 0.2), (33, 6, 3, 3, 0.3), (64, 8, 1, 4, 0.1), (25, 4, 2, 2, 0.0), (50, 12, 2, 3, 0.25)]
    return [example] + [_routing_case(gen, *c) for c in configs]


def _round_robin(expert_index, kept, n_experts, world_size):
    return torch.bincount(expert_index[kept] % world_size, minlength=world_size).tolist()


def _unique_tokens(expert_index, kept, n_experts, world_size):
    owners = expert_index // (n_experts // world_size)
    return [int(((owners == r) & kept).any(dim=1).sum()) for r in range(world_size)]


check_split_sizes = _SplitSizesExercise(
    "Exercise 4 (all-to-all split sizes)",
    split_sizes_reference,
    _split_cases,
    mistakes=[
        ("dropped slots (kept == False) are not sent anywhere: count only the kept ones.",
         lambda ei, kept, e, w: split_sizes(ei, torch.ones_like(kept), e, w)),
        ("experts are assigned to ranks in contiguous blocks (rank r owns experts r·E/W … (r+1)·E/W − 1), "
         "not round-robin (expert % world_size).",
         _round_robin),
        ("count (token, slot) pairs, not tokens: a token whose two chosen experts live on the same rank is "
         "sent there twice, once per slot.",
         _unique_tokens),
        ("you counted rows per expert (length n_experts); the all-to-all needs rows per rank (length world_size).",
         lambda ei, kept, e, w: torch.bincount(ei[kept], minlength=e).tolist()),
        ("every slot of a token is sent, not only its first choice (column 0 of expert_index).",
         lambda ei, kept, e, w: split_sizes(ei[:, :1], kept[:, :1], e, w)),
    ],
    atol=0, rtol=0,
)

# ----------------------------------------------------------------------------- 5. arithmetic intensity of an MoE step


def _intensity(expert_index, n_experts, d_model, d_ff, gated, bytes_per_element, *, mac=2, read="used",
               use_bytes=True):
    n, k = expert_index.shape
    matrices = 3 if gated else 2
    flops = mac * n * k * matrices * d_model * d_ff
    if read == "all":
        experts_read = n_experts
    elif read == "per_slot":
        experts_read = n * k
    elif read == "expected":
        experts_read = n_experts * (1 - (1 - k / n_experts) ** n)
    else:
        experts_read = int(torch.unique(expert_index).numel())
    n_bytes = experts_read * matrices * d_model * d_ff * (bytes_per_element if use_bytes else 1)
    return flops / n_bytes


def intensity_reference(expert_index: torch.Tensor, n_experts: int, d_model: int, d_ff: int, gated: bool,
                        bytes_per_element: int) -> float:
    """FLOPs per byte of expert weights read by one MoE forward step with this routing.

    ``expert_index`` ``(N, k)``: the k distinct experts each of the N tokens uses. Every expert holds the
    same matrices (2 dense, 3 gated, each d_model × d_ff); an expert some token uses is read once for the
    whole step; each token does one multiply-add (2 FLOPs) per weight of each of its k experts.
    """
    return _intensity(expert_index, n_experts, d_model, d_ff, gated, bytes_per_element)


def _intensity_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(611)

    def routed(n: int, e: int, k: int) -> torch.Tensor:
        return torch.rand(n, e, generator=gen).topk(k, dim=-1).indices

    return [
        Case((torch.tensor([[0, 3], [3, 5], [0, 5], [3, 0]]), 10, 64, 256, True, 2),
             note="the example: 4 tokens, experts {0, 3, 5} used, bf16"),
        Case((torch.tensor([[6, 7]]), 8, 32, 96, False, 4), note="one token (decode), the last two experts"),
        Case((torch.tensor([[2]] * 16), 4, 16, 48, True, 4), note="16 tokens, all on expert 2 (top-1)"),
        Case((routed(64, 8, 2), 8, 128, 512, True, 2), note="64 tokens, 8 experts, top-2: every expert used"),
        Case((routed(3, 16, 3), 16, 8, 40, False, 1), note="3 tokens, 16 experts, top-3, int8"),
        Case((routed(10, 64, 1), 64, 24, 24, True, 4), note="10 tokens, 64 experts, top-1"),
        Case((routed(5, 8, 2), 8, 16, 64, False, 2), note="5 tokens, 8 experts, top-2"),
    ]


check_moe_intensity = Exercise(
    "Exercise 5 (arithmetic intensity of an MoE step)",
    intensity_reference,
    _intensity_cases,
    mistakes=[
        ("only the experts some token uses are read in this step; you counted all n_experts (they are all "
         "in memory, but unused ones are not read).",
         lambda *a: _intensity(*a, read="all")),
        ("an expert's weights are read once per step and serve every token routed to it; you counted one read "
         "per (token, slot), which gives 2 / bytes_per_element whatever the batch.",
         lambda *a: _intensity(*a, read="per_slot")),
        ("count the experts this routing actually uses (e.g. torch.unique(expert_index)), not the "
         "uniform-routing average E·(1 − (1 − k/E)^N).",
         lambda *a: _intensity(*a, read="expected")),
        ("a multiply-add is 2 FLOPs; you counted it as 1.",
         lambda *a: _intensity(*a, mac=1)),
        ("the answer is FLOPs per *byte*: multiply the elements read by bytes_per_element.",
         lambda *a: _intensity(*a, use_bytes=False)),
    ],
    atol=0, rtol=1e-9, kind="investigate",
)
