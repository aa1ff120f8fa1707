"""Checkers for the exercises of notebook 08 (the FFN in real code).

Each ``check_*`` is a ``helpers.exercises.engine.Exercise``: call it on your function, e.g.
``check_gpt_oss_layout(gpt_oss_gate_up)``; it prints one line (not attempted / passed / what is wrong, with
the likely mistake when one explains every failing case). Three exercises are *debug* exercises: the notebook
gives a function with one bug of a kind that was reported in widely used code (``buggy=``, the function as
given). The checker passes the fix and climbs the engine's debug ladder: the function as given, and any first
failure, get the symptom only (the case and what differs); once a failure has been shown, a changed function
that still fails gets the wrong fix it recognises, or the class of bug. No message names the fix: the learner
finds it.

================================  ===========================================================  =============
checker                           your function                                                returns
================================  ===========================================================  =============
``check_gpt_oss_layout``          ``gpt_oss_gate_up(w1, w3)``                                  ``(d, 2f)``
``check_gpt2_loader``             ``attn_from_gpt2(c_attn_w, c_proj_w)``                       4 tensors
``check_padding_balance``         ``balance_loss(router_logits, expert_index, attention_mask)``  scalar
``check_group_limited``           ``group_limited_topk(scores, bias, k, n_group, topk_group)``  ``(N, k)``
``check_topk_mass``               ``mean_topk_mass(logits, k)``                                float
``check_score_on_input``          ``input_over_output(w1, w3, w2, x, s)``                      float
================================  ===========================================================  =============

The hidden cases cover the inputs each statement allows at their extremes: 1 × 1 and non-square weights,
float64 as well as float32, every token real or only one, padding routed to a single expert, k = 1 and k = E,
all groups kept, one group, biased scores that are all negative, a router at zero, one token, scores s
near 0 and at 1.
"""

from __future__ import annotations

import torch

from helpers.exercises.engine import Case, Corner, Domain, Exercise
from helpers.exercises.returns import python_float, same_dtype_as, tensor_dtype


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- exercise 1: gpt-oss's interleaved layout
def _gpt_oss_gate_up(w1: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    f, d = w1.shape
    out = w1.new_empty(d, 2 * f)
    out[:, 0::2] = w1.t()
    out[:, 1::2] = w3.t()
    return out


def _layout_cases() -> list[Case]:
    g = _generator(801)
    cases = []
    for f, d, dtype, scale in [(4, 3, torch.float32, 1.0), (1, 1, torch.float32, 1.0), (1, 5, torch.float32, 1.0),
                               (6, 1, torch.float32, 1.0), (3, 3, torch.float64, 1.0), (8, 16, torch.float32, 1e30),
                               (5, 2, torch.float64, 1e-30)]:
        w1 = torch.randn(f, d, generator=g, dtype=dtype) * scale
        w3 = torch.randn(f, d, generator=g, dtype=dtype) * scale
        cases.append(Case((w1, w3), note=f"W1, W3 of shape ({f}, {d}), {str(dtype).replace('torch.', '')}"))
    return cases


def _layout_wrong(kind: str):
    def wrong(w1, w3):
        if kind == "concatenated":
            return torch.cat([w1.t(), w3.t()], dim=1)
        if kind == "swapped":
            return _gpt_oss_gate_up(w3, w1)
        if kind == "not transposed":
            return torch.stack([w1, w3], dim=1).reshape(2 * w1.shape[0], w1.shape[1])
        return torch.stack([w1, w3], dim=-1).reshape(w1.shape[1], 2 * w1.shape[0])   # reshape, no transpose
    return wrong


check_gpt_oss_layout = Exercise(
    "Exercise 1 (gpt-oss layout)",
    _gpt_oss_gate_up,
    _layout_cases,
    [
        ("gate and up were concatenated side by side ([W1ᵀ | W3ᵀ], Llama 4's layout). gpt-oss interleaves them: "
         "column 2i is gate unit i, column 2i + 1 is up unit i.", _layout_wrong("concatenated")),
        ("gate and up are swapped: gpt-oss reads the gate from the even columns (gate_up[..., ::2]) and the up "
         "projection from the odd ones.", _layout_wrong("swapped")),
        ("the result is in nn.Linear's (out, in) orientation; gpt-oss stores its experts input × output, so "
         "transpose: the result has d_model rows.", _layout_wrong("not transposed")),
        ("a reshape (or view) is not a transpose: it keeps the memory order, so the shape is right but the "
         "numbers land in the wrong places. Transpose W1 and W3 first (.t() or .T).", _layout_wrong("reshape")),
    ],
    atol=0, rtol=0,
    domain=Domain(
        allows="W1 and W3 of one shape (d_ff, d_model), any d_ff, d_model ≥ 1, float32 or float64 (the same for both), "
               "any finite values; compared exactly (data movement, no arithmetic)",
        corners=(Corner("d_ff = d_model = 1 (every layout agrees)", lambda c: c.args[0].shape == (1, 1)),
                 Corner("d_ff = 1 < d_model", lambda c: c.args[0].shape[0] == 1 < c.args[0].shape[1]),
                 Corner("d_model = 1 < d_ff", lambda c: c.args[0].shape[1] == 1 < c.args[0].shape[0]),
                 Corner("square (d_ff = d_model > 1: a missing transpose keeps the shape)",
                        lambda c: c.args[0].shape[0] == c.args[0].shape[1] > 1),
                 Corner("float32", lambda c: c.args[0].dtype == torch.float32),
                 Corner("float64", lambda c: c.args[0].dtype == torch.float64),
                 Corner("huge values (|w| ~ 1e30)", lambda c: float(c.args[0].abs().max()) > 1e29),
                 Corner("tiny values (|w| ~ 1e-30)", lambda c: 0 < float(c.args[0].abs().max()) < 1e-29))),
    returns=same_dtype_as(0, advice="Build the result from w1 and w3 themselves (torch.stack, torch.cat, or an "
                                           "empty tensor made with dtype=w1.dtype)."),
)


# ---------------------------------------------------------------- exercise 2: a GPT-2 loader (debug)
def _attn_from_gpt2(c_attn_w, c_proj_w):
    d = c_proj_w.shape[0]
    w_q, w_k, w_v = c_attn_w.t().split(d, dim=0)
    return w_q, w_k, w_v, c_proj_w.t()


def _gpt2_buggy(c_attn_w, c_proj_w):
    d = c_proj_w.shape[0]
    w_q, w_k, w_v = c_attn_w.split(d, dim=1)
    return w_q, w_k, w_v, c_proj_w.t()


def _gpt2_reshaped(c_attn_w, c_proj_w):
    d = c_proj_w.shape[0]
    w_q, w_k, w_v = c_attn_w.reshape(3 * d, d).split(d, dim=0)
    return w_q, w_k, w_v, c_proj_w.t()


def _gpt2_out_untransposed(c_attn_w, c_proj_w):
    w_q, w_k, w_v, _ = _attn_from_gpt2(c_attn_w, c_proj_w)
    return w_q, w_k, w_v, c_proj_w


def _gpt2_nothing_transposed(c_attn_w, c_proj_w):
    w_q, w_k, w_v, _ = _gpt2_buggy(c_attn_w, c_proj_w)
    return w_q, w_k, w_v, c_proj_w


def _gpt2_cases() -> list[Case]:
    g = _generator(802)
    cases = []
    for d, dtype in [(4, torch.float32), (3, torch.float32), (8, torch.float64), (1, torch.float32),
                     (2, torch.float32), (16, torch.float32)]:
        args = (torch.randn(d, 3 * d, generator=g, dtype=dtype), torch.randn(d, d, generator=g, dtype=dtype))
        cases.append(Case(args, note=f"d_model={d}, {str(dtype).replace('torch.', '')}"))
    return cases


def _gpt2_bug_shows(fn, args, value) -> bool:
    """The class shows when a returned weight is a Conv1D block as stored (input × output), not transposed:
    some output equals one of c_attn's three blocks or c_proj where that block is not symmetric."""
    c_attn_w, c_proj_w = args
    d = c_proj_w.shape[0]
    blocks = [*c_attn_w.split(d, dim=1), c_proj_w]
    return any(isinstance(w, torch.Tensor) and w.shape == b.shape and torch.equal(w, b) and not torch.equal(b, b.t())
               for w in value for b in blocks)


check_gpt2_loader = Exercise(
    "Exercise 2 (GPT-2 loader)",
    _attn_from_gpt2,
    _gpt2_cases,
    [
        ("a reshape (or view) to (3d, d) keeps the memory order: the shapes come out right, but each weight's "
         "entries land in other places than the layer's.", _gpt2_reshaped),
        ("W_q, W_k and W_v are right now, but W_o no longer is: c_proj is stored the way c_attn is, and it is "
         "square too.", _gpt2_out_untransposed),
        ("none of the four weights is in nn.Linear's layout now: each is returned as Conv1D stores it, and every "
         "block here is square, so only the values show it.", _gpt2_nothing_transposed),
    ],
    atol=0, rtol=0, kind="debug", buggy=_gpt2_buggy,
    domain=Domain(
        allows="Conv1D weights c_attn_w (d, 3d) and c_proj_w (d, d), any d ≥ 1, float32 or float64 (the same dtype "
               "for both); the answer is compared exactly (data movement, no arithmetic)",
        corners=(Corner("d_model = 1 (every block 1 × 1: the bug cannot show)",
                        lambda c: c.args[1].shape == (1, 1)),
                 Corner("d_model = 2 (the smallest layer where a layout shows)", lambda c: c.args[1].shape == (2, 2)),
                 Corner("d_model ≥ 16", lambda c: c.args[1].shape[0] >= 16),
                 Corner("float32 weights", lambda c: c.args[0].dtype == torch.float32),
                 Corner("float64 weights", lambda c: c.args[0].dtype == torch.float64),
                 Corner("c_proj not symmetric (a W_o in the other layout shows)",
                        lambda c: c.args[1].shape[0] > 1 and not torch.equal(c.args[1], c.args[1].t())))),
    bug_class="a weight read in the other layout: Conv1D stores input × output, nn.Linear output × input, and a "
              "square block looks the same either way",
    bug_shows=_gpt2_bug_shows,
)


# ---------------------------------------------------------------- exercise 3: padding in the balance loss (debug)
def _balance_loss(router_logits, expert_index, attention_mask):
    keep = attention_mask.bool()
    probs = torch.softmax(router_logits[keep], dim=-1)
    n_experts = probs.shape[-1]
    chosen = expert_index[keep]
    counts = torch.bincount(chosen.reshape(-1), minlength=n_experts).to(probs.dtype)
    f = counts / chosen.numel()
    return n_experts * (f * probs.mean(0)).sum()


def _balance_buggy(router_logits, expert_index, attention_mask):
    """The notebook's function as given: the attention mask is never read."""
    probs = torch.softmax(router_logits, dim=-1)
    n_experts = probs.shape[-1]
    counts = torch.bincount(expert_index.reshape(-1), minlength=n_experts).float()
    f = counts / expert_index.numel()
    return n_experts * (f * probs.mean(dim=0)).sum()


def _balance_wrong(kind: str):
    def wrong(router_logits, expert_index, attention_mask):
        keep = attention_mask.bool()
        probs = torch.softmax(router_logits, dim=-1)
        n_experts = probs.shape[-1]
        mask_f = kind in ("counts only", "divided by all", "f per token")
        mask_p = kind in ("probs only", "divided by all", "f per token")
        chosen = expert_index[keep] if mask_f else expert_index
        counts = torch.bincount(chosen.reshape(-1), minlength=n_experts).to(probs.dtype)
        f = counts / (expert_index.numel() if kind == "divided by all" else chosen.numel())
        if kind == "f per token":
            f = counts / keep.sum()
        p = (probs * keep[:, None]).sum(0) / (keep.numel() if kind == "divided by all" else keep.sum()) \
            if mask_p else probs.mean(0)
        return n_experts * (f * p).sum()
    return wrong


def _balance_cases() -> list[Case]:
    g = _generator(803)
    cases = []
    for n, e, k, pad, scale in [(12, 4, 2, "half", 1.0), (8, 6, 1, "none", 2.0), (10, 5, 5, "half", 1.0),
                                (9, 8, 2, "all but one", 3.0), (16, 4, 1, "tail", 0.5), (6, 3, 2, "one", 1.0),
                                (20, 8, 2, "to one expert", 2.0)]:
        logits = torch.randn(n, e, generator=g) * scale
        mask = torch.ones(n, dtype=torch.long)
        if pad == "half":
            mask[torch.randperm(n, generator=g)[: n // 2]] = 0
        elif pad == "all but one":
            mask[:] = 0
            mask[n // 2] = 1
        elif pad == "tail":
            mask[n - 5:] = 0
        elif pad == "one":
            mask[0] = 0
        elif pad == "to one expert":                      # padding tokens all prefer expert 0, as in real runs
            mask[n // 2:] = 0
            logits[n // 2:, 0] += 6.0
        index = torch.topk(logits, k, dim=-1).indices
        cases.append(Case((logits, index, mask), note=f"N={n}, E={e}, k={k}, padding: {pad}"))
    return cases


def _padding_to_one_expert(case: Case) -> bool:
    """At least 4 padding tokens, and over three quarters of them put the same expert first."""
    first = case.args[1][case.args[2] == 0][:, 0]
    return len(first) >= 4 and int(torch.bincount(first).max()) * 4 > 3 * len(first)


def _padding_bug_shows(fn, args, value) -> bool:
    """The class shows when the answer moves if the padding tokens are removed from the batch, or if what they
    hold (their logits and experts) is redrawn: a loss over the real tokens does neither."""
    logits, index, mask = args
    keep = mask.bool()
    if keep.all():
        return False
    value = float(value)

    def moved(other: float) -> bool:
        return abs(float(other) - value) > 1e-4 * max(1.0, abs(value))
    if moved(fn(logits[keep].clone(), index[keep].clone(), mask[keep].clone())):
        return True
    g = _generator(813)
    pad = int((~keep).sum())
    redrawn_logits, redrawn_index = logits.clone(), index.clone()
    redrawn_logits[~keep] = torch.randn(pad, logits.shape[1], generator=g, dtype=logits.dtype) * 3
    redrawn_index[~keep] = torch.stack([torch.randperm(logits.shape[1], generator=g)[: index.shape[1]]
                                        for _ in range(pad)]).to(index.dtype)
    return moved(fn(redrawn_logits, redrawn_index, mask.clone()))


check_padding_balance = Exercise(
    "Exercise 3 (padding in the balance loss)",
    _balance_loss,
    _balance_cases,
    [
        ("only the counts f leave the padding out; the mean router probability P still averages over the "
         "padding rows.", _balance_wrong("counts only")),
        ("only P leaves the padding out; the routed shares f still count the slots of the padding tokens.",
         _balance_wrong("probs only")),
        ("the padding rows were zeroed, but f and P are still divided by all N tokens (N·k slots): an even load "
         "over the real tokens no longer gives 1.", _balance_wrong("divided by all")),
        ("the padding is left out, but f is divided by the number of real tokens, not by their N_real·k slots "
         "(transformers' normalisation): at an even load it gives k, where this statement's f gives 1.",
         _balance_wrong("f per token")),
    ],
    kind="debug", buggy=_balance_buggy,
    domain=Domain(
        allows="float32 router_logits (N, E), int64 expert_index (N, k) with k distinct experts per token, 1 ≤ k ≤ E, "
               "and an int64 attention_mask (N,) of 1s and 0s with at least one real token (1); any amount of padding",
        corners=(Corner("no padding (every token real)", lambda c: bool(c.args[2].bool().all())),
                 Corner("one real token", lambda c: int(c.args[2].sum()) == 1),
                 Corner("half the batch or more is padding",
                        lambda c: int((c.args[2] == 0).sum()) * 2 >= len(c.args[2])),
                 Corner("k = 1", lambda c: c.args[1].shape[1] == 1),
                 Corner("k = E (every expert chosen: padding cannot move f)",
                        lambda c: c.args[1].shape[1] == c.args[0].shape[1]),
                 Corner("most padding tokens choose one expert first (as in real runs)", _padding_to_one_expert))),
    bug_class="padding counted as data: tokens whose attention_mask is 0 still enter the averages",
    bug_shows=_padding_bug_shows,
    returns=tensor_dtype(torch.float32, advice="Keep the arithmetic in router_logits' dtype."),
)


# ---------------------------------------------------------------- exercise 4: group-limited routing (debug)
def _group_limited(scores, bias, k, n_group, topk_group, fill=float("-inf")):
    n, e = scores.shape
    choice = scores + bias
    groups = choice.view(n, n_group, e // n_group)
    group_score = groups.topk(min(2, e // n_group), dim=-1).values.sum(-1)
    keep = group_score.topk(topk_group, dim=-1).indices
    mask = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = mask[:, :, None].expand(n, n_group, e // n_group).reshape(n, e)
    choice = choice.masked_fill(~mask, fill)
    return choice.topk(k, dim=-1).indices.sort(dim=-1).values


def _group_buggy(scores, bias, k, n_group, topk_group):
    return _group_limited(scores, bias, k, n_group, topk_group, fill=0.0)


def _group_mask_before_bias(scores, bias, k, n_group, topk_group):
    n, e = scores.shape
    groups = (scores + bias).view(n, n_group, e // n_group)
    keep = groups.topk(min(2, e // n_group), dim=-1).values.sum(-1).topk(topk_group, dim=-1).indices
    mask = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = mask[:, :, None].expand(n, n_group, e // n_group).reshape(n, e)
    choice = scores.masked_fill(~mask, 0.0) + bias
    return choice.topk(k, dim=-1).indices.sort(dim=-1).values


def _group_no_limit(scores, bias, k, n_group, topk_group):
    return (scores + bias).topk(k, dim=-1).indices.sort(dim=-1).values


def _group_unbiased_groups(scores, bias, k, n_group, topk_group):
    n, e = scores.shape
    groups = scores.view(n, n_group, e // n_group)
    keep = groups.topk(min(2, e // n_group), dim=-1).values.sum(-1).topk(topk_group, dim=-1).indices
    mask = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = mask[:, :, None].expand(n, n_group, e // n_group).reshape(n, e)
    return (scores + bias).masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices.sort(dim=-1).values


def _group_descending(scores, bias, k, n_group, topk_group):
    return _group_limited(scores, bias, k, n_group, topk_group).flip(-1)


def _group_topk_order(scores, bias, k, n_group, topk_group):
    n, e = scores.shape
    choice = scores + bias
    groups = choice.view(n, n_group, e // n_group)
    keep = groups.topk(min(2, e // n_group), dim=-1).values.sum(-1).topk(topk_group, dim=-1).indices
    mask = torch.zeros(n, n_group, dtype=torch.bool).scatter(1, keep, True)
    mask = mask[:, :, None].expand(n, n_group, e // n_group).reshape(n, e)
    return choice.masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices


def _group_cases() -> list[Case]:
    g = _generator(804)
    cases = []
    for n, e, k, n_group, topk_group, bias_kind in [
            (10, 8, 2, 4, 2, "very negative"), (12, 16, 4, 4, 2, "mixed"), (1, 8, 3, 4, 2, "very negative"),
            (6, 8, 1, 4, 1, "very negative"), (8, 12, 4, 3, 1, "very negative"), (9, 8, 2, 1, 1, "mixed"),
            (7, 8, 3, 4, 4, "very negative"), (10, 16, 8, 8, 4, "zero"), (11, 8, 4, 4, 2, "mixed"),
            (5, 8, 2, 4, 2, "very positive")]:
        scores = torch.sigmoid(torch.randn(n, e, generator=g) * 2)
        if bias_kind == "zero":
            bias = torch.zeros(e)
        elif bias_kind == "mixed":                       # biased scores from -0.5 up: some below 0
            bias = torch.rand(e, generator=g) - 0.5
        elif bias_kind == "very positive":
            bias = 99.5 + 0.5 * torch.rand(e, generator=g)
        else:                                            # the statement's lowest bias: every biased score < -98
            bias = -100.0 + 0.5 * torch.rand(e, generator=g)
        cases.append(Case((scores, bias, k, n_group, topk_group),
                          note=f"N={n}, E={e}, k={k}, {n_group} groups keep {topk_group}, {bias_kind} bias"))
    cases += _rounding_cases(g)
    return cases


def _rounding_cases(g: torch.Generator) -> list[Case]:
    """The bias at -100 and scores below float32's resolution there (about 4e-6): score + bias is exactly -100.0,
    so a finite fill of -100 ties with the kept experts; k takes every expert of the kept groups. Each row's one
    or two high scores sit in groups first and last, on either expert of a group, so whichever way topk breaks
    the tie some row picks a dropped expert."""
    cases = []
    for n, e, k, n_group, topk_group, highs in [(8, 8, 2, 4, 1, 1), (6, 12, 8, 3, 2, 2)]:
        scores = 1e-8 + 3e-6 * torch.rand(n, e, generator=g)
        size = e // n_group
        for row in range(n):
            groups = torch.randperm(n_group, generator=g)[:highs].tolist()
            if row < 2:                              # the first and the last group kept, on both rows' sides
                groups[0] = 0 if row == 0 else n_group - 1
            for grp in groups:
                scores[row, grp * size + (row // 2) % size] = 0.5 + 0.4 * float(torch.rand(1, generator=g))
        bias = torch.full((e,), -100.0)
        cases.append(Case((scores, bias, k, n_group, topk_group),
                          note=f"N={n}, E={e}, k={k}, {n_group} groups keep {topk_group}, bias -100 with scores "
                               f"below 4e-6 (score + bias rounds to -100)"))
    return cases


def _group_symptom(args, value) -> bool:
    """The symptom: some row's experts are not the top k (by biased score) of any topk_group groups that
    contain them, for any rule that ranks a group at least as high as one it beats expert for expert (its best,
    its top-two sum, its mean): an expert of a dropped group beat a kept one."""
    scores, bias, k, n_group, topk_group = args
    choice = (scores + bias).double()
    n, e = choice.shape
    size = e // n_group
    picked = torch.as_tensor(value).reshape(n, -1).long()
    for row in range(n):
        chosen = sorted(set(picked[row].tolist()))
        if len(chosen) != picked.shape[1] or not all(0 <= j < e for j in chosen):
            return False                                  # not a set of experts: another kind of mistake
        groups = {j // size for j in chosen}
        if len(groups) > topk_group:
            return True
        lowest = min(float(choice[row, j]) for j in chosen)
        inside = [j for gr in groups for j in range(gr * size, (gr + 1) * size) if j not in chosen]
        if any(float(choice[row, j]) > lowest for j in inside):
            return True                                   # a better expert of the same groups was passed over
        ranked = [choice[row, gr * size:(gr + 1) * size].sort(descending=True).values for gr in range(n_group)]
        if any(bool((ranked[h] >= ranked[gr]).all()) for gr in groups for h in range(n_group) if h not in groups):
            return True                                   # a dropped group beats a kept one expert for expert
        spare = sum(1 for gr in range(n_group) if gr not in groups
                    and float(choice[row, gr * size:(gr + 1) * size].max()) < lowest)
        if spare < topk_group - len(groups):
            return True                                   # any further kept group would hold a better expert
    return False


def _both_signs(case: Case) -> bool:
    """Some token's biased scores are positive for one expert and negative for another."""
    biased = case.args[0] + case.args[1]
    return bool(((biased > 0).any(-1) & (biased < 0).any(-1)).any())


def _group_bug_shows(fn, args, value) -> bool:
    """The class shows when both the symptom and the cause show. The symptom: ``_group_symptom``. The cause: moving
    every bias by the same large amount changes the experts chosen; with the dropped groups filled with -inf such a
    shift changes no comparison, while a finite fill beats every kept expert once the biases are lowered far
    enough, and loses once they are raised. The learner's ``fn`` runs on float64 inputs (no float32 rounding
    between the calls)."""
    if not _group_symptom(args, value):
        return False
    scores, bias, k, n_group, topk_group = args
    scores64, bias64 = scores.double(), bias.double()
    shift = 1e4 + float((scores64 + bias64).abs().max())

    def chosen(b: torch.Tensor) -> list[list[int]]:
        picked = torch.as_tensor(fn(scores64.clone(), b, k, n_group, topk_group)).reshape(scores.shape[0], -1)
        return [sorted(row) for row in picked.long().tolist()]

    unshifted = chosen(bias64.clone())
    return chosen(bias64 - shift) != unshifted or chosen(bias64 + shift) != unshifted


check_group_limited = Exercise(
    "Exercise 4 (group-limited routing)",
    _group_limited,
    _group_cases,
    [
        ("the dropped groups were masked before the bias was added, so a masked expert scores 0 + bias, and a "
         "large enough bias still makes it win.", _group_mask_before_bias),
        ("the group limit is gone: the top k is taken over all experts, whatever group they are in.",
         _group_no_limit),
        ("the groups were ranked by the scores without the bias; DeepSeek-V3 ranks groups (and experts) by "
         "scores + bias, the bias only leaves the combine weights alone.", _group_unbiased_groups),
        ("the right experts, in decreasing order; the statement asks for each row's indices in increasing order.",
         _group_descending),
        ("the right experts, in topk's order (best score first); the statement asks for each row's indices in "
         "increasing order.", _group_topk_order),
    ],
    kind="debug", buggy=_group_buggy,
    domain=Domain(
        allows="float32 sigmoid scores (N, E) in (0, 1), a float32 bias (E,) with values from -100 to 100, n_group "
               "dividing E with at least 2 experts per group, 1 ≤ topk_group ≤ n_group, 1 ≤ k ≤ the experts of the "
               "kept groups; int64 indices (N, k) sorted increasing",
        corners=(Corner("bias near -100 (every biased score below 0)", lambda c: float(c.args[1].min()) <= -99.5),
                 Corner("bias near 100", lambda c: float(c.args[1].max()) >= 99.5),
                 Corner("no bias (all zero)", lambda c: not bool(c.args[1].any())),
                 Corner("biased scores of both signs in one row", _both_signs),
                 Corner("k = 1", lambda c: c.args[2] == 1),
                 Corner("k = every expert of the kept groups",
                        lambda c: c.args[2] == c.args[4] * c.args[0].shape[1] // c.args[3] and c.args[4] < c.args[3]),
                 Corner("one group (n_group = 1)", lambda c: c.args[3] == 1),
                 Corner("every group kept (topk_group = n_group > 1)", lambda c: c.args[4] == c.args[3] > 1),
                 Corner("one group kept of several", lambda c: c.args[4] == 1 < c.args[3]),
                 Corner("2 experts per group (the fewest allowed)", lambda c: c.args[0].shape[1] // c.args[3] == 2),
                 Corner("one token (N = 1)", lambda c: c.args[0].shape[0] == 1),
                 Corner("a score lost in float32 rounding on a bias of -100 (score + bias == -100.0)",
                        lambda c: bool(((c.args[0] + c.args[1]) == -100.0).any())))),
    returns=tensor_dtype(torch.int64, advice="Keep topk's or sort's int64 indices (no .int() or .float())."),
    bug_class="a masked entry that does not always lose: whether an expert of a dropped group can be chosen "
              "depends on the biases",
    bug_shows=_group_bug_shows,
)


# ---------------------------------------------------------------- exercise 5: the mass of the top k (investigate)
def _topk_mass(logits: torch.Tensor, k: int) -> float:
    probs = torch.softmax(logits.double(), dim=-1)
    return float(probs.topk(k, dim=-1).values.sum(-1).mean())


def _mass_cases() -> list[Case]:
    g = _generator(805)
    cases = []
    for n, e, k, scale in [(20, 16, 2, 0.0), (30, 8, 2, 1.0), (1, 6, 3, 4.0), (25, 128, 8, 0.02),
                           (10, 5, 5, 2.0), (15, 10, 1, 20.0), (12, 7, 3, 1000.0), (8, 1, 1, 1.0)]:
        logits = torch.randn(n, e, generator=g) * scale
        cases.append(Case((logits, k), note=f"logits ({n}, {e}) of scale {scale:g}, k={k}"))
    return cases


check_topk_mass = Exercise(
    "Exercise 5 (the top-k mass)",
    _topk_mass,
    _mass_cases,
    [
        ("that is the top-k mass after renormalising, which is always 1; the question is how much of the "
         "softmax the chosen experts hold *without* it (norm_topk_prob=False).",
         lambda logits, k: 1.0),
        ("the softmax went over the tokens (dim=0); each token's probabilities are a softmax over its experts "
         "(the last dimension).",
         lambda logits, k: float(torch.softmax(logits.double(), 0).topk(k, -1).values.sum(-1).mean())),
        ("the top-k raw logits were summed; take the softmax over the experts first, then the k largest "
         "probabilities.", lambda logits, k: float(logits.double().topk(k, -1).values.sum(-1).mean())),
        ("that is the top-k mass of the first token only; average the sum of the k largest probabilities over "
         "all tokens.", lambda logits, k: float(torch.softmax(logits.double()[0], -1).topk(k).values.sum())),
    ],
    kind="investigate", precision=torch.float32,
    domain=Domain(
        allows="float32 logits (N, E), N, E ≥ 1, any finite values (large enough to overflow an unshifted exp), "
               "ties allowed, an int k with 1 ≤ k ≤ E; float32 or float64 arithmetic",
        corners=(Corner("k = 1", lambda c: c.args[1] == 1),
                 Corner("k = E (the mass is 1)", lambda c: c.args[1] == c.args[0].shape[1]),
                 Corner("E = 1", lambda c: c.args[0].shape[1] == 1),
                 Corner("one token (N = 1)", lambda c: c.args[0].shape[0] == 1),
                 Corner("a router at zero (every logit tied)", lambda c: not bool(c.args[0].any())),
                 Corner("logits that overflow an unshifted exp (|logit| > 710)",
                        lambda c: float(c.args[0].abs().max()) > 710),
                 Corner("small logits (|logit| < 0.1: near k/E)",
                        lambda c: 0 < float(c.args[0].abs().max()) < 0.1))),
    returns=python_float(),
)


# ---------------------------------------------------------------- exercise 6: where the score goes (investigate)
def _swiglu(w1, w3, w2, x):
    return torch.nn.functional.linear(torch.nn.functional.silu(x @ w1.t()) * (x @ w3.t()), w2)


def _input_over_output(w1, w3, w2, x, s):
    w1, w3, w2, x = (t.double() for t in (w1, w3, w2, x))
    return float(_swiglu(w1, w3, w2, s * x).norm() / (s * _swiglu(w1, w3, w2, x)).norm())


def _score_cases() -> list[Case]:
    g = _generator(806)
    cases = []
    for d, f, n, s in [(8, 16, 20, 0.5), (8, 16, 20, 1.0), (4, 8, 1, 0.1), (16, 32, 10, 0.9), (6, 12, 5, 0.01),
                       (8, 8, 7, 0.3), (8, 4, 6, 1e-4), (1, 1, 3, 0.7)]:
        w1, w3 = torch.randn(f, d, generator=g) / d ** 0.5, torch.randn(f, d, generator=g) / d ** 0.5
        w2 = torch.randn(d, f, generator=g) / f ** 0.5
        x = torch.randn(n, d, generator=g)
        cases.append(Case((w1, w3, w2, x, s), note=f"d_model={d}, d_ff={f}, {n} tokens, s={s:g}"))
    return cases


def _per_token_ratio(w1, w3, w2, x, s) -> float:
    """A learner's slip: the ratio taken per token (row norms), then averaged."""
    w1, w3, w2, x = (t.double() for t in (w1, w3, w2, x))
    return float((_swiglu(w1, w3, w2, s * x).norm(dim=-1) / (s * _swiglu(w1, w3, w2, x)).norm(dim=-1)).mean())


check_score_on_input = Exercise(
    "Exercise 6 (where the score goes)",
    _input_over_output,
    _score_cases,
    [
        ("the ratio is upside down: divide ‖expert(s·x)‖ (Llama 4) by ‖s·expert(x)‖ (Mixtral, the course).",
         lambda w1, w3, w2, x, s: 1.0 / _input_over_output(w1, w3, w2, x, s)),
        ("the expert was left out: s·x against s·x is 1; compare the expert's outputs, expert(s·x) against "
         "s·expert(x).", lambda w1, w3, w2, x, s: 1.0),
        ("expert(s·x) was compared with expert(x): the score is left out of the denominator, which should be "
         "s·expert(x) (the course's MoE multiplies the expert's output by s).",
         lambda w1, w3, w2, x, s: float(_swiglu(*(t.double() for t in (w1, w3, w2)), s * x.double()).norm()
                                        / _swiglu(*(t.double() for t in (w1, w3, w2, x))).norm())),
        ("that is the ratio of squared norms (the square of the asked ratio): ‖·‖ is the Frobenius norm itself, "
         "torch.linalg.norm or .norm(), not the sum of squares.",
         lambda w1, w3, w2, x, s: _input_over_output(w1, w3, w2, x, s) ** 2),
        ("that is the mean of each token's ratio; the statement asks for one ratio of Frobenius norms over the "
         "whole batch, ‖expert(s·x)‖ / ‖s·expert(x)‖ with each norm taken over all tokens at once.",
         _per_token_ratio),
    ],
    rtol=1e-5, atol=1e-7, kind="investigate",
    domain=Domain(
        allows="float32 SwiGLU weights W1, W3 (d_ff, d_model), W2 (d_model, d_ff) and tokens x (N, d_model), not all "
               "zero, any d_model, d_ff, N ≥ 1, a score 0 < s ≤ 1; float32 or float64 arithmetic (relative 1e-5)",
        corners=(Corner("s = 1 (the ratio is 1)", lambda c: c.args[4] == 1.0),
                 Corner("s near 0 (s ≤ 1e-4: FFN(s·x) is of order s²)", lambda c: c.args[4] <= 1e-4),
                 Corner("one token (N = 1)", lambda c: c.args[3].shape[0] == 1),
                 Corner("d_model = d_ff = 1", lambda c: c.args[0].shape == (1, 1)),
                 Corner("d_ff < d_model", lambda c: c.args[0].shape[0] < c.args[0].shape[1]))),
    returns=python_float(),
)


EXERCISES = [check_gpt_oss_layout, check_gpt2_loader, check_padding_balance, check_group_limited, check_topk_mass,
             check_score_on_input]
