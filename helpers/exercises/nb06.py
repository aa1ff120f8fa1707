"""Checkers for notebook 06 (the FFN at scale): FLOPs, saved activations, chunking memory, all-to-all splits.

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it with your function,
e.g. ``check_model_flops(model_flops_per_token)``; it prints one line.
"""

from __future__ import annotations

import math

import torch

from helpers.exercises.engine import Case, Exercise
from helpers.chunking import peak_saved_bytes
from helpers.expert_parallel import split_sizes
from helpers.gating import saved_per_token

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

# ----------------------------------------------------------------------------- 2. saved floats per token

_SAVED_VARIANTS = ("relu", "gelu", "swish", "reglu", "geglu", "swiglu")


def saved_floats_reference(d_model: int, d_ff: int, variant: str) -> int:
    """Elements autograd saves per token in one FFN forward (``helpers.gating.saved_per_token``)."""
    return saved_per_token(variant, d_model, d_ff)


def _saved_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(607)
    cases = [Case((16, 64, "gelu"), note="d_model=16, d_ff=64, 'gelu'")]
    for variant in _SAVED_VARIANTS:
        d = 8 * int(torch.randint(1, 65, (1,), generator=gen))
        d_ff = int(torch.randint(d, 5 * d, (1,), generator=gen))
        cases.append(Case((d, d_ff, variant), note=f"d_model={d}, d_ff={d_ff}, {variant!r}"))
    return cases


def _gated(variant: str) -> bool:
    return variant.endswith("glu")


def _dense_count(variant: str) -> int:
    return 1 if variant.startswith("re") else 2


check_saved_floats = Exercise(
    "Exercise 2 (saved activations per token)",
    saved_floats_reference,
    _saved_cases,
    mistakes=[
        ("you forgot the input x: W1 (and W3) keep it for their weight gradients, d_model floats per token.",
         lambda d, f, v: saved_per_token(v, d, f) - d),
        ("GELU and SiLU need their input a for their own backward, on top of φ(a) that W2 keeps; only ReLU can "
         "rebuild its slope from its output (so ReLU keeps one d_ff tensor, GELU two).",
         lambda d, f, v: d + f * (1 + (2 if _gated(v) else 0))),
        ("a gated FFN also keeps the linear branch b = W3x and the product h = φ(a)·b (the product's backward "
         "needs both factors, W2 needs h): two more d_ff tensors than the dense one.",
         lambda d, f, v: d + f * _dense_count(v)),
        ("count elements (floats), not bytes: no factor 4 here.",
         lambda d, f, v: 4 * saved_per_token(v, d, f)),
    ],
    atol=0, rtol=0,
)

# ----------------------------------------------------------------------------- 3. peak bytes, chunked + checkpointed


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
    "Exercise 3 (peak saved bytes with chunking + checkpointing)",
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
