"""Checkers for notebook 06 (the FFN at scale): a model's FLOPs per token, the largest tensor-parallel degree
whose traffic hides behind a link, a tensor-parallel split, all-to-all split sizes, the arithmetic intensity of
an MoE step, the decode batch that reaches a target intensity despite the KV cache.

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it with your function,
e.g. ``check_model_flops(flops_per_token)``; it prints one line. Each declares the domain its statement allows
(``Domain``) and its hidden cases reach every corner of it; ``EXERCISES`` lists them in the notebook's order.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn.functional as F

from helpers.exercises.engine import Case, Corner, Domain, Exercise
from helpers.exercises.returns import Returns, python_float, python_int
from helpers.expert_parallel import split_sizes

# ----------------------------------------------------------------------------- 1. FLOPs per token, Llama-style
def _llama_flops(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, n_ctx: int,
                 training: bool, *, mac: int = 2, kv: str = "gqa", scores: str = "full", ffn_matrices: int = 3,
                 factor: int | None = None, layers: bool = True, context_once: bool = False) -> int:
    d_kv = n_kv_heads * (d_model // n_heads) if kv == "gqa" else d_model
    projections = 2 * d_model * d_model + 2 * d_model * d_kv                   # Q and output; K and V
    context = {"full": 2 * n_ctx * d_model, "causal": n_ctx * d_model,       # QKᵀ and AV (multiply-adds)
               "kv": 2 * n_ctx * d_kv, "none": 0}[scores]
    times = factor if factor is not None else (3 if training else 1)
    weights = mac * (projections + ffn_matrices * d_model * d_ff) * times
    per_layer = weights + mac * context * (1 if context_once else times)
    return per_layer * (n_layers if layers else 1)


def model_flops_reference(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, n_ctx: int,
                          training: bool) -> int:
    """Matmul FLOPs per token of ``n_layers`` Llama-style blocks (embeddings and unembedding left out).

    Per layer and token, forward: Q and the output map ``d_model × d_model`` each; K and V
    ``d_model × n_kv_heads·head_dim`` each (grouped-query attention, ``head_dim = d_model // n_heads``);
    the scores QKᵀ and the mixing AV over the full ``n_ctx × n_ctx`` square for all ``n_heads`` query
    heads (``2·n_ctx·d_model`` multiply-adds); a SwiGLU FFN, three ``d_model × d_ff`` matrices. One
    multiply-add = 2 FLOPs; training (forward + backward) = 3 × forward. Python ints in, a Python int out.
    """
    return _llama_flops(n_layers, d_model, n_heads, n_kv_heads, d_ff, n_ctx, training)


#: Llama-3-8B (config.json of meta-llama/Meta-Llama-3-8B): 32 layers, d_model 4096, 32 heads, 8 KV heads,
#: d_ff 14336 (3.5·d_model), context 8192
LLAMA3_8B = dict(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, n_ctx=8192)


def _flops_cases() -> list[Case]:
    llama = tuple(LLAMA3_8B.values())
    cases = [Case(llama + (False,), note="Llama-3-8B forward at n_ctx=8192"),
             Case(llama + (True,), note="Llama-3-8B training at n_ctx=8192"),
             Case((12, 768, 12, 12, 2048, 1024, True), note="12 layers, d=768, 12 heads, 12 KV heads (no grouping)"),
             Case((4, 512, 8, 1, 1376, 2048, False), note="multi-query attention (1 KV head), d=512"),
             Case((2, 256, 4, 2, 704, 1, True), note="a context of one token"),
             Case((1, 64, 4, 2, 172, 512, False), note="one layer"),
             Case((1, 8, 2, 1, 24, 3, True), note="a tiny block: d=8, 2 heads, 1 KV head, n_ctx=3"),
             Case((3, 48, 1, 1, 130, 17, False), note="a single attention head (head size = d_model = 48)"),
             Case((126, 16384, 128, 8, 53248, 131072, True), note="126 layers, d=16384, n_ctx=131072, training"),
             Case((95, 12291, 51, 17, 40961, 300_000_000_001, True),
                  note="n_ctx = 300,000,000,001, odd sizes: a count beyond 2**53, where a float loses its last digits")]
    gen = torch.Generator().manual_seed(606)
    for _ in range(3):
        heads = 2 ** int(torch.randint(1, 6, (1,), generator=gen))
        d = heads * 16 * int(torch.randint(1, 9, (1,), generator=gen))
        kv = heads // 2 ** int(torch.randint(0, 3, (1,), generator=gen))
        cases.append(Case((int(torch.randint(1, 40, (1,), generator=gen)), d, heads, max(kv, 1),
                           int(torch.randint(d, 4 * d, (1,), generator=gen)),
                           2 ** int(torch.randint(6, 15, (1,), generator=gen)),
                           bool(torch.randint(0, 2, (1,), generator=gen)))))
    return cases


def _flops_args(case: Case) -> dict:
    return dict(zip(("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "n_ctx", "training"), case.args))


FLOPS_DOMAIN = Domain(
    allows="Python ints n_layers, d_model, n_heads, n_kv_heads, d_ff, n_ctx >= 1 with d_model a multiple of n_heads "
           "and n_heads a multiple of n_kv_heads (1 <= n_kv_heads <= n_heads); training a bool; a Python int out",
    corners=(
        Corner("n_kv_heads = n_heads (no grouping)", lambda c: _flops_args(c)["n_kv_heads"] == _flops_args(c)["n_heads"] > 1),
        Corner("n_kv_heads = 1 < n_heads (multi-query)", lambda c: _flops_args(c)["n_kv_heads"] == 1 < _flops_args(c)["n_heads"]),
        Corner("1 < n_kv_heads < n_heads (grouped)", lambda c: 1 < _flops_args(c)["n_kv_heads"] < _flops_args(c)["n_heads"]),
        Corner("a single head (n_heads = 1)", lambda c: _flops_args(c)["n_heads"] == 1),
        Corner("a context of one token", lambda c: _flops_args(c)["n_ctx"] == 1),
        Corner("one layer", lambda c: _flops_args(c)["n_layers"] == 1),
        Corner("training (forward + backward)", lambda c: _flops_args(c)["training"] is True),
        Corner("forward only", lambda c: _flops_args(c)["training"] is False),
        Corner("a large model at a long context (d = 16384, n_ctx = 131072)",
               lambda c: _flops_args(c)["d_model"] >= 16384 and _flops_args(c)["n_ctx"] >= 131072),
        Corner("d_ff not a multiple of d_model", lambda c: _flops_args(c)["d_ff"] % _flops_args(c)["d_model"] != 0),
        Corner("a count beyond 2**53 (exact only in integers)", lambda c: model_flops_reference(*c.args) > 2 ** 53),
    ))


check_model_flops = Exercise(
    "Exercise 1 (FLOPs per token of a Llama-style model)",
    model_flops_reference,
    _flops_cases,
    mistakes=[
        ("a multiply-add is 2 FLOPs (one multiply, one add); you counted it as 1.",
         lambda *a: _llama_flops(*a, mac=1)),
        ("with grouped-query attention K and V are d_model × n_kv_heads·head_dim, not d_model × d_model: "
         "only Q and the output map are square.",
         lambda *a: _llama_flops(*a, kv="mha")),
        ("the scores QKᵀ and the mixing AV run for every query head, n_heads·head_dim = d_model wide: "
         "2·n_ctx·d_model multiply-adds, whatever the number of KV heads.",
         lambda *a: _llama_flops(*a, scores="kv")),
        ("attention's context term has n_ctx·d_model multiply-adds in your count, half of it: the causal half of "
         "the square, or QKᵀ without the mixing AV. Count both products over the full square, 2·n_ctx·d_model, as "
         "the statement (and the FLOP counter) does.",
         lambda *a: _llama_flops(*a, scores="causal")),
        ("the scores QKᵀ and the mixing AV add 4·n_ctx·d_model FLOPs per layer and token; you left them out "
         "(that is the 6N-style estimate).",
         lambda *a: _llama_flops(*a, scores="none")),
        ("a SwiGLU FFN has three weight matrices (W1, W3, W2): 6·d_model·d_ff FLOPs per token, not 4·d_model·d_ff.",
         lambda *a: _llama_flops(*a, ffn_matrices=2)),
        ("training = forward + backward = 3× the forward (the backward needs two products per weight "
         "matrix), not 2×.",
         lambda *a: _llama_flops(*a[:6], a[6], factor=2 if a[6] else 1)),
        ("in training the scores QKᵀ and the mixing AV also run backward, 3× their forward FLOPs like every other "
         "product; you tripled only the weight matrices.",
         lambda *a: _llama_flops(*a, context_once=True)),
        ("multiply the per-layer count by n_layers.",
         lambda *a: _llama_flops(*a, layers=False)),
        ("your count went through floating point: above 2**53 a float cannot hold every integer, so keep the "
         "arithmetic in integers (// rather than /).", lambda *a: int(float(model_flops_reference(*a)))),
    ],
    atol=0, rtol=0, domain=FLOPS_DOMAIN, returns=python_int(),
)

# ----------------------------------------------------------------------------- 2. the largest hidden TP degree


def _tp_degree(d_model: int, d_ff: int, k: int, gated: bool, bytes_per_element: int, link_ratio: int,
               max_ranks: int, *, per_rank: bool = True, all_reduces: int = 2, ring: bool = True, cap: bool = True,
               strict: bool = False, matrices: int | None = None, use_k: bool = True, byte_size: int | None = None,
               floor_at_one: bool = True, passes: int = 3) -> int:
    """A learner's loop over R with one sentence of the statement changed (the defaults: the statement's count)."""
    top = 2 * passes * (matrices or (3 if gated else 2)) * (k if use_k else 1) * d_ff   # FLOPs per token / d_model
    s = bytes_per_element if byte_size is None else byte_size
    if not cap:
        return 1 + top // (4 * s * link_ratio)

    def per_byte(r: int) -> Fraction:                  # FLOPs per byte sent by one of r ranks (d_model cancels)
        return Fraction(top, r if per_rank else 1) / Fraction(all_reduces * 2 * s * (r - 1 if ring else r), r)

    best = 1 if floor_at_one else 0
    for r in range(2, max_ranks + 1):
        if not (per_byte(r) > link_ratio if strict else per_byte(r) >= link_ratio):
            break
        best = r
    return best


def largest_tp_degree_reference(d_model: int, d_ff: int, k: int, gated: bool, bytes_per_element: int,
                                link_ratio: int, max_ranks: int) -> int:
    """The largest tensor-parallel degree ``R`` (1 ≤ R ≤ ``max_ranks``) whose traffic hides behind a link.

    Training a token's ``k`` experts of width ``d_ff`` costs ``c·k·d_model·d_ff`` FLOPs (``c`` = 18 gated, 12
    dense: 3 passes × 2 FLOPs per multiply-add × 3 or 2 matrices); a rank does ``1/R`` of them and sends
    ``4·(R−1)/R·d_model`` numbers of ``bytes_per_element`` bytes (two ring all-reduces: after ``W2`` forward,
    before ``W1`` backward). FLOPs per byte sent: ``c·k·d_ff / (4·s·(R−1))``, which reaches ``link_ratio`` while
    ``R − 1 ≤ c·k·d_ff // (4·s·link_ratio)``; ``d_model`` cancels. ``R = 1`` sends nothing. Python ints (and a
    bool) in, a Python int out.
    """
    c = 18 if gated else 12
    return min(max_ranks, 1 + c * k * d_ff // (4 * bytes_per_element * link_ratio))


def _tp_slack(case: Case) -> tuple[int, int]:
    """(c·k·d_ff, 4·s·link_ratio): the ratio at R is their quotient over R − 1."""
    _d, d_ff, k, gated, s, ratio, _cap = case.args
    return (18 if gated else 12) * k * d_ff, 4 * s * ratio


def _tp_uncapped(case: Case) -> int:
    top, unit = _tp_slack(case)
    return 1 + top // unit


def _float_ratio_degree(d_model: int, d_ff: int, k: int, gated: bool, bytes_per_element: int, link_ratio: int,
                        max_ranks: int) -> int:
    """The statement's ratio in floating point, R by R: a hair low at some exact fits (161.99999... for 162)."""
    c, best = (18 if gated else 12), 1
    for r in range(2, max_ranks + 1):
        if (c * k * d_model * d_ff / r) / (4 * (r - 1) / r * d_model * bytes_per_element) < link_ratio:
            break
        best = r
    return best


def _degree_cases() -> list[Case]:
    mixtral = (4096, 14336, 2, True, 2)
    cases = [
        Case(mixtral + (2198, 8), note="Mixtral's experts (k = 2, gated, bf16) behind NVLink (2,198 FLOPs per byte), "
                                       "at most 8 GPUs"),
        Case(mixtral + (2198, 64), note="the same with up to 64 ranks"),
        Case(mixtral + (19780, 64), note="Mixtral's experts behind InfiniBand (19,780 FLOPs per byte)"),
        Case((7168, 2048, 8, True, 2, 19780, 64), note="DeepSeek-V3's experts (k = 8, d_ff = 2048) behind InfiniBand"),
        Case((768, 3072, 1, False, 2, 19780, 8), note="a GPT-2-small dense FFN behind InfiniBand"),
        Case((512, 1000, 1, True, 2, 250, 16), note="d_ff = 1000, gated, link ratio 250: R = 10 reaches it exactly"),
        Case((512, 1000, 1, True, 2, 251, 16), note="the same with a link ratio of 251"),
        Case((1024, 4096, 1, False, 4, 100, 1024), note="dense, float32, link ratio 100"),
        Case((2048, 8192, 4, True, 1, 2198, 1024), note="k = 4, 1-byte numbers, NVLink's ratio"),
        Case(mixtral + (2198, 1), note="a single rank allowed (max_ranks = 1)"),
        Case((64, 64, 1, False, 2, 1, 1024), note="a link ratio of 1"),
        Case((8192, 10 ** 6, 256, True, 1, 10 ** 5, 1024), note="d_ff = 10^6, k = 256, link ratio 10^5: capped"),
        Case((8192, 10 ** 6, 16, True, 4, 10 ** 5, 1024), note="d_ff = 10^6, k = 16, float32, link ratio 10^5"),
        Case((1, 1, 1, True, 1, 10 ** 5, 1024), note="d_model = d_ff = k = 1"),
        Case((4096, 8, 1, False, 1, 1, 1024), note="d_ff = 8, dense, a link ratio of 1: R = 25 exactly"),
        Case((4096, 144, 1, True, 1, 162, 1024), note="d_ff = 144, gated, 1-byte numbers, link ratio 162: R = 5 "
                                                      "reaches it exactly (18·144 = 162·4·4)"),
    ]
    gen = torch.Generator().manual_seed(606)
    for _ in range(3):
        draw = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))    # noqa: E731
        cases.append(Case((128 * draw(1, 64), 256 * draw(1, 200), draw(1, 9), bool(draw(0, 2)), [1, 2, 4][draw(0, 3)],
                           draw(50, 20000), [8, 16, 64, 1024][draw(0, 4)])))
    return cases


def _tp_answer(case: Case) -> int:
    return largest_tp_degree_reference(*case.args)


TP_DEGREE_DOMAIN = Domain(
    allows="Python ints 1 <= d_model, 1 <= d_ff <= 10**6, 1 <= k <= 256, bytes_per_element in (1, 2, 4), "
           "1 <= link_ratio <= 10**5, 1 <= max_ranks <= 1024, gated a bool; training FLOPs 18 (gated) or 12 "
           "(dense) ·k·d_model·d_ff per token, 1/R per rank; 4·(R−1)/R·d_model numbers sent per token and rank; "
           "the largest R <= max_ranks with FLOPs per byte sent >= link_ratio (R = 1 always); a Python int out",
    corners=(
        Corner("no R > 1 hides (answer 1)", lambda c: _tp_uncapped(c) == 1),
        Corner("max_ranks binds (answer max_ranks > 1, a larger R would hide)",
               lambda c: 1 < c.args[6] < _tp_uncapped(c)),
        Corner("max_ranks = 1", lambda c: c.args[6] == 1),
        Corner("an answer above 1 below max_ranks", lambda c: 1 < _tp_uncapped(c) < c.args[6]),
        Corner("the ratio at the answer equals link_ratio (R > 1)",
               lambda c: _tp_uncapped(c) > 1 and _tp_slack(c)[0] % _tp_slack(c)[1] == 0 and _tp_answer(c) > 1),
        Corner("an exact fit whose ratio float division rounds below link_ratio",
               lambda c: _tp_answer(c) > 1 and _float_ratio_degree(*c.args) < _tp_answer(c)),
        Corner("link_ratio one above a tie", lambda c: c.args[5] > 1 and _tp_slack(c)[0] % (
            4 * c.args[4] * (c.args[5] - 1)) == 0 and _tp_slack(c)[0] // (4 * c.args[4] * (c.args[5] - 1)) > 1),
        Corner("gated", lambda c: c.args[3] is True),
        Corner("dense (not gated)", lambda c: c.args[3] is False),
        Corner("bytes_per_element = 1", lambda c: c.args[4] == 1),
        Corner("bytes_per_element = 2", lambda c: c.args[4] == 2),
        Corner("bytes_per_element = 4", lambda c: c.args[4] == 4),
        Corner("link_ratio = 1", lambda c: c.args[5] == 1),
        Corner("link_ratio = 10**5", lambda c: c.args[5] == 10 ** 5),
        Corner("d_ff = 10**6 with k = 256 (the largest products)", lambda c: c.args[1] == 10 ** 6 and c.args[2] == 256),
        Corner("d_model = d_ff = k = 1", lambda c: c.args[0] == c.args[1] == c.args[2] == 1),
        Corner("max_ranks = 1024", lambda c: c.args[6] == 1024),
    ))


check_tp_degree = Exercise(
    "Exercise 2 (the largest tensor-parallel degree a link hides)",
    largest_tp_degree_reference,
    _degree_cases,
    mistakes=[
        ("under tensor parallelism a rank computes only its block of hidden units, 1/R of a token's FLOPs; counting "
         "all of them gives expert parallelism's ratio, which does not fall to 0 as R grows (section 4.1).",
         lambda *a: _tp_degree(*a, per_rank=False)),
        ("you count half the bytes a rank sends, 2·(R−1)/R·d_model numbers instead of 4·(R−1)/R·d_model: training "
         "sends two all-reduces per token (the output's forward, after W2; the input gradient's backward, before "
         "W1), and in each a ring has every rank send 2·(R−1)/R of the d_model numbers (section 4.1).",
         lambda *a: _tp_degree(*a, all_reduces=1)),
        ("you count the forward pass only (6·k·d_model·d_ff FLOPs gated, 4·… dense, and one all-reduce): training "
         "does three times the forward's FLOPs (18·…, 12·…) and sends two all-reduces per token, so the forward's "
         "FLOPs per byte are 2/3 of training's (section 4.5).",
         lambda *a: _tp_degree(*a, passes=1, all_reduces=1)),
        ("in a ring all-reduce each rank sends 2·(R−1)/R·d_model numbers, not 2·d_model (4·(R−1)/R·d_model for "
         "the step's two, not 4·d_model): the (R−1)/R leaves R − 1 in the denominator.",
         lambda *a: _tp_degree(*a, ring=False)),
        ("a gated expert has three matrices (18·d_model·d_ff training FLOPs per token), a dense one two (12·…; "
         "section 1): read `gated`.",
         lambda *a: _tp_degree(*a, matrices=3)),
        ("a dense expert has two matrices: 12·d_model·d_ff training FLOPs per token, 18 only when gated "
         "(section 1).",
         lambda *a: _tp_degree(*a, matrices=2)),
        ("each token goes through k experts: k times the FLOPs for the same two all-reduces.",
         lambda *a: _tp_degree(*a, use_k=False)),
        ("the ratio is per byte: each number sent takes bytes_per_element bytes.",
         lambda *a: _tp_degree(*a, byte_size=1)),
        ("a ratio equal to link_ratio hides (at least, >=): the answer keeps that R.",
         lambda *a: _tp_degree(*a, strict=True)),
        ("at an exact fit (FLOPs per byte equal to link_ratio) your ratio, computed with float division, comes out "
         "a hair below link_ratio (161.99999... for 162) and drops an R that hides: compare whole numbers "
         "(both sides of the ratio multiplied out) so the tie is exact.",
         _float_ratio_degree),
        ("R cannot pass max_ranks (the link's reach: NVLink joins 8 GPUs).",
         lambda *a: _tp_degree(*a, cap=False)),
        ("R = 1 sends nothing, so it always hides: the answer is at least 1, never 0.",
         lambda *a: _tp_degree(*a, floor_at_one=False)),
    ],
    atol=0, rtol=0, domain=TP_DEGREE_DOMAIN, returns=python_int(),
)

# ----------------------------------------------------------------------------- 3. a tensor-parallel split


def _blocks(d_ff: int, n_parts: int, kind: str = "contiguous") -> list[torch.Tensor]:
    units = torch.arange(d_ff)
    if kind == "round_robin":
        return [units[r::n_parts] for r in range(n_parts)]
    if kind == "chunk":
        return list(torch.chunk(units, n_parts))
    if kind == "floor":
        size = d_ff // n_parts
        return [units[r * size:(r + 1) * size] for r in range(n_parts)]
    return list(torch.tensor_split(units, n_parts))


def _tp(x, w1, b1, w2, b2, n_parts, *, kind="contiguous", b2_where="once", gelu="none"):
    parts = []
    for block in _blocks(w1.shape[0], n_parts, kind):
        w1_r, b1_r, w2_r = w1[block], b1[block], w2[:, block]      # rows of W1, columns of W2 (nn.Linear layout)
        h = F.gelu(x @ w1_r.T + b1_r, approximate=gelu)
        part = h @ w2_r.T
        parts.append(part + b2 if b2_where == "every" else part)
    total = sum(parts)
    y = total + b2 if b2_where == "once" else total
    return parts, y


def tensor_parallel_reference(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                              b2: torch.Tensor, n_parts: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Rank r's partial output and the full output of a GELU FFN split over ``n_parts`` ranks.

    ``x`` ``(B, d)``, ``w1`` ``(d_ff, d)``, ``b1`` ``(d_ff,)``, ``w2`` ``(d, d_ff)``, ``b2`` ``(d,)``, all
    float64. Rank r keeps the r-th ``torch.tensor_split`` block U of the hidden units: partial
    ``GELU(x W1[U]ᵀ + b1[U]) W2[:, U]ᵀ`` ``(B, d)`` without b2; the output is the sum of the partials plus b2,
    added once. Every tensor returned is float64.
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

    return [case(4, 8, 32, 2, "4 tokens, d=8, d_ff=32, 2 ranks"),
            case(1, 16, 64, 4, "one token, 4 ranks"),
            case(6, 12, 30, 4, "d_ff=30 over 4 ranks (blocks of 8, 8, 7, 7)"),
            case(5, 8, 16, 1, "a single rank: the plain FFN"),
            case(3, 4, 5, 5, "one hidden unit per rank"),
            case(7, 10, 45, 3, "d_ff=45 over 3 ranks"),
            case(9, 6, 50, 8, "d_ff=50 over 8 ranks (blocks of 7 and 6)"),
            case(2, 3, 7, 7, "d_ff=7, one unit per rank, 7 ranks"),
            case(3, 5, 12, 5, "d_ff=12 over 5 ranks (blocks of 3, 3, 2, 2, 2)"),
            case(4, 6, 24, 24, "d_ff=24 over 24 ranks (one unit each)")]


def _tp_sizes(case: Case) -> tuple[int, int, int]:
    x, w1, *_ = case.args
    return x.shape[0], w1.shape[0], case.args[5]


TP_DOMAIN = Domain(
    allows="float64 tensors x (B, d), w1 (d_ff, d), b1 (d_ff,), w2 (d, d_ff), b2 (d,) with B, d >= 1, and an int "
           "1 <= n_parts <= d_ff; exact GELU; a list of n_parts float64 (B, d) partials and the float64 (B, d) output",
    corners=(
        Corner("n_parts = 1 (the plain FFN)", lambda c: _tp_sizes(c)[2] == 1),
        Corner("n_parts = d_ff (one unit per rank)", lambda c: _tp_sizes(c)[2] == _tp_sizes(c)[1] > 1),
        Corner("d_ff not a multiple of n_parts", lambda c: _tp_sizes(c)[1] % _tp_sizes(c)[2] != 0),
        Corner("torch.chunk would make fewer than n_parts blocks",
               lambda c: len(torch.chunk(torch.arange(_tp_sizes(c)[1]), _tp_sizes(c)[2])) < _tp_sizes(c)[2]),
        Corner("a batch of one token", lambda c: _tp_sizes(c)[0] == 1),
        Corner("pre-activations beyond ±2, where GELU's tanh form is furthest from the exact one",
               lambda c: bool(((c.args[0] @ c.args[1].T + c.args[2]).abs() > 2).any())),
    ))


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
        ("torch.chunk makes blocks of ceil(d_ff / n_parts) units, so when n_parts does not divide d_ff its last "
         "block is short, or it returns fewer than n_parts blocks (12 units over 5 ranks: 3, 3, 3, 3); "
         "torch.tensor_split makes n_parts blocks whose sizes differ by at most one.",
         lambda *a: _tp(*a, kind="chunk")),
        ("the statement asks for the exact GELU, x·Φ(x) (F.gelu's default); you used its tanh approximation.",
         lambda *a: _tp(*a, gelu="tanh")),
    ],
    atol=1e-10, rtol=1e-10, domain=TP_DOMAIN,
)

# ----------------------------------------------------------------------------- 4. all-to-all split sizes


def split_sizes_reference(expert_index: torch.Tensor, kept: torch.Tensor, n_experts: int,
                          world_size: int) -> list[int]:
    """Rows sent to each rank: kept (token, slot) pairs per owner, rank r owning experts r·E/R … (r+1)·E/R − 1 (R = world_size).

    ``expert_index`` ``(B, k)`` int64, ``kept`` ``(B, k)`` bool, ``n_experts`` a multiple of ``world_size`` (ints).
    A list of ``world_size`` Python ints (a 1-D integer tensor is accepted too); a rank sent nothing gets 0.
    """
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
    example = Case((torch.tensor([[0, 5], [1, 7], [6, 3]]), torch.tensor([[True, True], [True, False], [True, True]]),
                    8, 2), note="the example in the prompt")
    configs = [(40, 8, 2, 2, 0.2), (33, 6, 3, 3, 0.3), (64, 8, 1, 4, 0.1), (25, 4, 2, 2, 0.0), (50, 12, 2, 3, 0.25)]
    edges = [
        Case((torch.tensor([[1, 0], [0, 1], [1, 2]]), torch.ones(3, 2, dtype=torch.bool), 8, 4),
             note="8 experts on 4 ranks, every row for ranks 0 and 1: ranks 2 and 3 get nothing"),
        Case((torch.tensor([[5, 4], [7, 6]]), torch.ones(2, 2, dtype=torch.bool), 8, 2),
             note="every row for the last rank"),
        Case((torch.tensor([[2, 0], [1, 3]]), torch.zeros(2, 2, dtype=torch.bool), 4, 2), note="every slot dropped"),
        Case((torch.tensor([[3, 1, 0, 2]]), torch.tensor([[True, True, False, True]]), 4, 4),
             note="one token, k = E = 4, one expert per rank"),
        Case((torch.tensor([[6], [1], [6]]), torch.tensor([[True], [True], [False]]), 8, 1), note="a single rank, k=1"),
        Case((torch.tensor([[3, 2], [2, 3], [0, 1]]), torch.ones(3, 2, dtype=torch.bool), 4, 2),
             note="both slots of a token on the same rank"),
    ]
    return [example] + [_routing_case(gen, *c) for c in configs] + edges


def _round_robin(expert_index, kept, n_experts, world_size):
    return torch.bincount(expert_index[kept] % world_size, minlength=world_size).tolist()


def _unique_tokens(expert_index, kept, n_experts, world_size):
    owners = expert_index // (n_experts // world_size)
    return [int(((owners == r) & kept).any(dim=1).sum()) for r in range(world_size)]


def _split_parts(case: Case):
    expert_index, kept, n_experts, world_size = case.args
    return expert_index, kept, n_experts, world_size, split_sizes_reference(*case.args)


SPLITS_DOMAIN = Domain(
    allows="expert_index an int64 (B, k) tensor of distinct experts per row in [0, E), B >= 1, 1 <= k <= E; kept a "
           "bool (B, k) tensor; ints n_experts = E and world_size = W with 1 <= W <= E and E a multiple of W; a list "
           "of W Python ints (a 1-D integer tensor or a tuple accepted)",
    corners=(
        Corner("world_size = 1", lambda c: _split_parts(c)[3] == 1),
        Corner("world_size = n_experts (one expert per rank)", lambda c: _split_parts(c)[3] == _split_parts(c)[2] > 1),
        Corner("k = 1", lambda c: _split_parts(c)[0].shape[1] == 1),
        Corner("k = n_experts", lambda c: _split_parts(c)[0].shape[1] == _split_parts(c)[2]),
        Corner("every slot dropped", lambda c: not bool(_split_parts(c)[1].any())),
        Corner("no slot dropped", lambda c: bool(_split_parts(c)[1].all())),
        Corner("the first rank receives nothing", lambda c: _split_parts(c)[4][0] == 0 < sum(_split_parts(c)[4])),
        Corner("the last rank receives nothing", lambda c: _split_parts(c)[4][-1] == 0 < sum(_split_parts(c)[4])),
        Corner("a batch of one token", lambda c: _split_parts(c)[0].shape[0] == 1),
        Corner("both slots of a token on one rank", lambda c: bool(
            ((_split_parts(c)[0] // (_split_parts(c)[2] // _split_parts(c)[3])).unsqueeze(2)
             == (_split_parts(c)[0] // (_split_parts(c)[2] // _split_parts(c)[3])).unsqueeze(1)).sum(dim=(1, 2))
            .gt(_split_parts(c)[0].shape[1]).any())),
        Corner("the last expert (E − 1) kept", lambda c: bool(
            (_split_parts(c)[0][_split_parts(c)[1]] == _split_parts(c)[2] - 1).any())),
    ))


check_split_sizes = _SplitSizesExercise(
    "Exercise 4 (all-to-all split sizes)",
    split_sizes_reference,
    _split_cases,
    mistakes=[
        ("dropped slots (kept == False) are not sent anywhere: count only the kept ones.",
         lambda ei, kept, e, w: split_sizes(ei, torch.ones_like(kept), e, w)),
        ("experts are assigned to ranks in contiguous blocks (rank r owns experts r·E/R … (r+1)·E/R − 1, R = world_size), "
         "not round-robin (expert % world_size).",
         _round_robin),
        ("count (token, slot) pairs, not tokens: a token whose two chosen experts live on the same rank is "
         "sent there twice, once per slot.",
         _unique_tokens),
        ("you counted rows per expert (length n_experts); the all-to-all needs rows per rank (length world_size).",
         lambda ei, kept, e, w: torch.bincount(ei[kept], minlength=e).tolist()),
        ("every slot of a token is sent, not only its first choice (column 0 of expert_index).",
         lambda ei, kept, e, w: split_sizes(ei[:, :1], kept[:, :1], e, w)),
        ("rank r owns the E/R experts r·E/R … (r+1)·E/R − 1, so an expert's owner is expert // (n_experts // "
         "world_size), not expert // world_size (the two agree only when E/R = R).",
         lambda ei, kept, e, w: torch.bincount(ei[kept] // w, minlength=w).tolist()),
        ("an expert's owner is expert // (n_experts // world_size): expert // world_size groups the experts in "
         "blocks of world_size, not the E/R experts each rank owns (the two agree only when E/R = R).",
         lambda ei, kept, e, w: [int(((ei // w == r) & kept).sum()) for r in range(w)]),
        ("a rank that receives nothing still needs its 0: count with torch.bincount(..., minlength=world_size).",
         lambda ei, kept, e, w: torch.bincount(ei[kept] // (e // w)).tolist()),
    ],
    atol=0, rtol=0, domain=SPLITS_DOMAIN,
    returns=Returns("a list of Python ints (or a 1-D integer tensor)",
                    lambda v: isinstance(v, list) and all(type(i) is int for i in v),
                    advice="Count with integers: torch.bincount gives an int64 tensor, .tolist() Python ints."),
)

# ----------------------------------------------------------------------------- 5. arithmetic intensity of an MoE step


def _intensity(expert_index, n_experts, d_model, d_ff, gated, bytes_per_element, *, mac=2, read="used",
               use_bytes=True, slots=True, floor=False):
    n, k = expert_index.shape
    matrices = 3 if gated else 2
    flops = mac * n * (k if slots else 1) * matrices * d_model * d_ff
    if read == "all":
        experts_read = n_experts
    elif read == "per_slot":
        experts_read = n * k
    elif read == "expected":
        experts_read = n_experts * (1 - (1 - k / n_experts) ** n)
    elif read == "balanced":                            # as if the B·k slots were spread evenly
        experts_read = min(n_experts, n * k)
    else:
        experts_read = int(torch.unique(expert_index).numel())
    n_bytes = experts_read * matrices * d_model * d_ff * (bytes_per_element if use_bytes else 1)
    return float(flops // n_bytes) if floor else flops / n_bytes


def intensity_reference(expert_index: torch.Tensor, n_experts: int, d_model: int, d_ff: int, gated: bool,
                        bytes_per_element: int) -> float:
    """FLOPs per byte of expert weights read by one MoE forward step with this routing.

    ``expert_index`` ``(B, k)`` int64: the k distinct experts each of the B tokens uses; the other arguments
    are Python ints (``gated`` a bool). Every expert holds the same matrices (2 dense, 3 gated, each
    d_model × d_ff); an expert some token uses is read once for the whole step; each token does one
    multiply-add (2 FLOPs) per weight of each of its k experts. A Python float out.
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
        Case((routed(3, 6, 6), 6, 12, 36, True, 2), note="3 tokens, k = E = 6: every token uses every expert"),
        Case((routed(4096, 256, 8), 256, 64, 32, True, 2), note="4096 tokens, 256 experts, top-8"),
        Case((torch.tensor([[1, 4, 2]] * 5), 5, 8, 8, False, 2), note="5 tokens on the same 3 of 5 experts"),
    ]


def _intensity_parts(case: Case):
    expert_index, n_experts = case.args[:2]
    return expert_index.shape[0], expert_index.shape[1], n_experts, int(torch.unique(expert_index).numel())


INTENSITY_DOMAIN = Domain(
    allows="expert_index an int64 (B, k) tensor of distinct experts per row in [0, E), B >= 1, 1 <= k <= E; Python "
           "ints n_experts = E, d_model, d_ff >= 1 and bytes_per_element in {1, 2, 4}; gated a bool; a Python float out",
    corners=(
        Corner("one token (decode)", lambda c: _intensity_parts(c)[0] == 1),
        Corner("every token on the same k experts (the fewest read)",
               lambda c: _intensity_parts(c)[0] > 1 and _intensity_parts(c)[3] == _intensity_parts(c)[1]),
        Corner("every expert read", lambda c: _intensity_parts(c)[3] == _intensity_parts(c)[2]),
        Corner("k = 1", lambda c: _intensity_parts(c)[1] == 1),
        Corner("k = E", lambda c: _intensity_parts(c)[1] == _intensity_parts(c)[2]),
        Corner("gated", lambda c: c.args[4] is True),
        Corner("dense", lambda c: c.args[4] is False),
        Corner("1 byte per number", lambda c: c.args[5] == 1),
        Corner("2 bytes per number", lambda c: c.args[5] == 2),
        Corner("4 bytes per number", lambda c: c.args[5] == 4),
        Corner("an intensity below 1 FLOP per byte", lambda c: intensity_reference(*c.args) < 1),
        Corner("an intensity that is not a whole number", lambda c: intensity_reference(*c.args) % 1 != 0),
        Corner("the last expert (E − 1) used", lambda c: int(c.args[0].max()) == c.args[1] - 1),
    ))


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
        ("count the experts this routing actually uses (e.g. torch.unique(expert_index)), not min(E, B·k) as if "
         "the slots were spread evenly: tokens often share experts.",
         lambda *a: _intensity(*a, read="balanced")),
        ("a multiply-add is 2 FLOPs; you counted it as 1.",
         lambda *a: _intensity(*a, mac=1)),
        ("the answer is FLOPs per *byte*: multiply the elements read by bytes_per_element.",
         lambda *a: _intensity(*a, use_bytes=False)),
        ("each token uses k experts: its FLOPs are k times one expert's (count the B·k slots, not the B tokens).",
         lambda *a: _intensity(*a, slots=False)),
        ("the intensity is rarely a whole number: divide with /, not // (the example's 8 slots over 3 experts "
         "give 2.667 at 2 bytes).",
         lambda *a: _intensity(*a, floor=True)),
    ],
    atol=0, rtol=1e-6, kind="investigate", domain=INTENSITY_DOMAIN,
    returns=python_float(),
)

# ----------------------------------------------------------------------------- 6. the decode batch that reaches a target


def _sequences(target, context, n_weights, bytes_per_weight, n_layers, d_model, kv_bytes_per_token, *,
               cache="own", attention=4, round_up=True, strict=False, none=0):
    flops_each = 2 * n_weights + attention * n_layers * context * d_model     # FLOPs one sequence brings
    need = target * bytes_per_weight * n_weights                              # B·margin must reach this
    if cache == "shared":                           # one cache read for the whole batch: a fixed cost, like weights
        return -(-target * (bytes_per_weight * n_weights + context * kv_bytes_per_token) // flops_each)
    margin = flops_each - target * context * kv_bytes_per_token    # what each sequence adds over target·its bytes
    if margin <= 0:
        return none
    return need // margin + 1 if strict else -(-need // margin) if round_up else need // margin


def decode_batch_reference(target: int, context: int, n_weights: int, bytes_per_weight: int, n_layers: int,
                           d_model: int, kv_bytes_per_token: int) -> int:
    """The fewest sequences ``B`` whose decode step does at least ``target`` FLOPs per byte read; 0 if no ``B`` does.

    A step of ``B`` sequences, each with ``context`` tokens in its KV cache, does
    ``B·(2·n_weights + 4·n_layers·context·d_model)`` FLOPs (the weights, then attention's scores and mixing) and
    reads ``bytes_per_weight·n_weights + B·context·kv_bytes_per_token`` bytes (the weights once, every sequence's
    own cache). Solving ``FLOPs >= target·bytes`` for ``B``: ``B·m >= target·bytes_per_weight·n_weights`` with the
    margin ``m = 2·n_weights + 4·n_layers·context·d_model − target·context·kv_bytes_per_token``; ``m <= 0`` means
    no batch (the intensity tends to ``target`` or less). Python ints in, a Python int out.
    """
    return _sequences(target, context, n_weights, bytes_per_weight, n_layers, d_model, kv_bytes_per_token)


#: Llama-3-8B in bf16 (helpers.inference.dense_param_counts): the 7,504,924,672 weights a decode step reads and
#: multiplies (all but the input embedding), 32 layers of width 4096, 128 KiB of KV cache per token of context
LLAMA3_8B_DECODE = dict(n_weights=7_504_924_672, bytes_per_weight=2, n_layers=32, d_model=4096,
                        kv_bytes_per_token=131_072)


def _decode_cases() -> list[Case]:
    llama = tuple(LLAMA3_8B_DECODE.values())
    cases = [Case((295, 128) + llama, note="Llama-3-8B in bf16 at 128 tokens of context, target 295 (H100's ridge)"),
             Case((295, 1024) + llama, note="Llama-3-8B at 1,024 tokens of context"),
             Case((295, 393) + llama, note="Llama-3-8B at 393 tokens: the last context some batch brings to 295"),
             Case((295, 394) + llama, note="Llama-3-8B at 394 tokens"),
             Case((295, 0) + llama, note="an empty cache (context 0)"),
             Case((8, 10, 1000, 2, 1, 4, 27), note="a limit exactly at the target: 2·1000 + 4·1·10·4 = 8·10·27"),
             Case((5, 1, 1000, 2, 1, 4, 403), note="a limit just above the target (a margin of 1 FLOP)"),
             Case((1, 1000, 10 ** 9, 1, 10, 1024, 1000), note="a target of 1 FLOP per byte, 1-byte weights"),
             Case((1000, 1000, 10 ** 12, 4, 126, 16384, 516_096),
                  note="10^12 4-byte weights, 126 layers, d=16384, a target of 1000"),
             Case((590, 131072, 405 * 10 ** 9, 1, 126, 16384, 1), note="131,072 tokens of context, 1 byte of cache "
                                                                           "per token"),
             Case((295, 256, 69_503_975_424, 2, 80, 8192, 327_680), note="a Llama-3-70B-like model at 256 tokens"),
             Case((295, 16, 124_439_808, 4, 12, 768, 73_728), note="a GPT-2-small-like model in float32, 16 tokens"),
             Case((590, 700) + llama[:4] + (65_536,), note="Llama-3-8B with a 1-byte cache, target 590"),
             Case((295, 1024, 10 ** 9, 2, 32, 4096, 8396),
                  note="10^9 weights whose cache leaves a margin of 607,232 FLOPs: 971,623 sequences, near the "
                       "stated bound of 10^6")]
    gen = torch.Generator().manual_seed(612)
    for _ in range(3):
        draw = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))    # noqa: E731
        layers, width = draw(2, 64), 128 * draw(2, 64)
        cases.append(Case((draw(50, 700), draw(1, 600), draw(10 ** 8, 10 ** 11), [1, 2, 4][draw(0, 3)], layers,
                           width, 2 * layers * 128 * draw(1, 9) * 2)))
    return cases


def _decode_margin(case: Case) -> int:
    t, ctx, n, s, layers, d, kv = case.args
    return 2 * n + 4 * layers * ctx * d - t * ctx * kv


DECODE_DOMAIN = Domain(
    allows="Python ints: 1 <= target <= 1000, 0 <= context <= 131072, 1 <= n_weights <= 10**12, bytes_per_weight in "
           "{1, 2, 4}, 1 <= n_layers <= 200, 1 <= d_model <= 32768, 1 <= kv_bytes_per_token <= 10**7; a step of B "
           "sequences does B·(2·n_weights + 4·n_layers·context·d_model) FLOPs and reads bytes_per_weight·n_weights "
           "+ B·context·kv_bytes_per_token bytes; the smallest B >= 1 with FLOPs >= target·bytes, or 0, which the inputs keep below 10**6; a "
           "Python int out (the bounds keep target·bytes_per_weight·n_weights below 2**53, so float division is exact "
           "enough)",
    corners=(
        Corner("an empty cache (context = 0)", lambda c: c.args[1] == 0),
        Corner("no batch reaches the target (answer 0)", lambda c: decode_batch_reference(*c.args) == 0),
        Corner("the limit exactly at the target (a margin of 0)", lambda c: _decode_margin(c) == 0),
        Corner("a margin of 1 (the limit just above the target)", lambda c: _decode_margin(c) == 1),
        Corner("the answer reaches the target exactly (B·margin = target·bytes_per_weight·n_weights, B > 1)",
               lambda c: _decode_margin(c) > 0 and decode_batch_reference(*c.args) > 1 and
               c.args[0] * c.args[3] * c.args[2] % _decode_margin(c) == 0),
        Corner("one sequence is enough (answer 1)", lambda c: decode_batch_reference(*c.args) == 1),
        Corner("an answer near the stated bound of 10**6 (a search that stops early gives up)",
               lambda c: 950_000 < decode_batch_reference(*c.args) < 10 ** 6),
        Corner("the context where the answer turns 0 and its neighbour", lambda c: c.args[1] in (393, 394)),
        Corner("bytes_per_weight = 1", lambda c: c.args[3] == 1),
        Corner("bytes_per_weight = 2", lambda c: c.args[3] == 2),
        Corner("bytes_per_weight = 4", lambda c: c.args[3] == 4),
        Corner("target = 1", lambda c: c.args[0] == 1),
        Corner("target = 1000 with n_weights = 10**12 (the largest products)",
               lambda c: c.args[0] == 1000 and c.args[2] == 10 ** 12),
        Corner("context = 131072", lambda c: c.args[1] == 131072),
        Corner("kv_bytes_per_token = 1", lambda c: c.args[6] == 1),
    ))


check_decode_batch = Exercise(
    "Exercise 6 (the decode batch that reaches the ridge)",
    decode_batch_reference,
    _decode_cases,
    mistakes=[
        ("every sequence reads its own KV cache and does attention over its context; you counted only the weights "
         "(that gives target·bytes_per_weight/2 whatever the context).",
         lambda t, ctx, n, s, layers, d, kv: -(-t * s // 2)),
        ("the cache is not shared by the batch: each sequence reads its own, B·context·kv_bytes_per_token bytes "
         "(a cache read once per step would let a large enough batch reach any target).",
         lambda *a: _sequences(*a, cache="shared")),
        ("each sequence also does 4·n_layers·context·d_model FLOPs of attention (scores and mixing over its whole "
         "context); you left them out.",
         lambda *a: _sequences(*a, attention=0)),
        ("the statement counts attention's scores and mixing over the whole context, 4·n_layers·context·d_model "
         "FLOPs per sequence; you counted half of it.",
         lambda *a: _sequences(*a, attention=2)),
        ("when no batch reaches the target, the answer is 0 (you returned -1).",
         lambda *a: _sequences(*a, none=-1)),
        ("when each sequence adds no more FLOPs than target·its own cache bytes (a margin of 0 or less), no batch "
         "reaches the target, however large, and the answer is 0; you returned 1.",
         lambda *a: _sequences(*a, none=1)),
        ("a step that reaches the target exactly counts (FLOPs >= target·bytes): at an exact fit the answer is "
         "target·bytes_per_weight·n_weights / margin, not one more.",
         lambda *a: _sequences(*a, strict=True)),
        ("round the batch up: the smallest B with B·margin >= target·bytes_per_weight·n_weights is the ceiling of "
         "their ratio, not the floor.",
         lambda *a: _sequences(*a, round_up=False)),
    ],
    atol=0, rtol=0, kind="investigate", domain=DECODE_DOMAIN,
)

#: every exercise of notebook 06, in the notebook's order
EXERCISES = [check_model_flops, check_tp_degree, check_tensor_parallel, check_split_sizes, check_moe_intensity,
             check_decode_batch]
