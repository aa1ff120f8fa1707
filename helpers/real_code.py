r"""From the course's ``FFN`` and ``MoE`` to Hugging Face ``transformers``' own modules (notebook 08).

One small converter per family builds transformers' module from a tiny configuration (no download, no
pretrained weights) and copies the course's weights into it, so the two can be run on the same input and
compared. The course keeps PyTorch's ``nn.Linear`` layout everywhere: ``W1``, ``W3`` are ``(d_ff, d_model)``,
``W2`` is ``(d_model, d_ff)`` and ``y = W2 (φ(W1 x) ⊙ W3 x)``. What each family stores instead:

=============  ===========================  =================================================================
family         module                       weights (E experts, d = d_model, f = expert width)
=============  ===========================  =================================================================
GPT-2          ``GPT2MLP``                  ``c_fc.weight`` (d, f) = W1ᵀ and ``c_proj.weight`` (f, d) = W2ᵀ
                                            (``Conv1D``: input × output), biases; tanh GELU (``gelu_new``)
LLaMA          ``LlamaMLP``                 ``gate_proj`` = W1, ``up_proj`` = W3, ``down_proj`` = W2 (nn.Linear)
Mixtral        ``MixtralSparseMoeBlock``    ``gate.weight`` (E, d) = router; ``experts.gate_up_proj`` (E, 2f, d)
                                            = [W1; W3] stacked over experts; ``experts.down_proj`` (E, d, f)
Qwen3-MoE      ``Qwen3MoeSparseMoeBlock``   as Mixtral; ``norm_topk_prob`` switches renormalisation
DeepSeek-V3    ``DeepseekV3MoE``            as Mixtral, plus ``gate.e_score_correction_bias`` (E,) and
                                            ``shared_experts.{gate,up,down}_proj``
Llama 4        ``Llama4TextMoe``            ``router.weight`` (E, d); ``experts.gate_up_proj`` (E, d, 2f) =
                                            [W1ᵀ W3ᵀ] (transposed); ``experts.down_proj`` (E, f, d) = W2ᵀ;
                                            ``shared_expert``
gpt-oss        ``GptOssMLP``                ``router.weight`` (E, d) and ``router.bias``; ``experts.gate_up_proj``
                                            (E, d, 2f) with W1ᵀ and W3ᵀ *interleaved* column by column, biases
=============  ===========================  =================================================================

A whole model goes the same way, key by key: ``GPT2_KEY_MAP`` and ``tiny_gpt_from_gpt2`` turn a
``GPT2LMHeadModel`` into the course's ``TinyGPT``. ``draw_layouts`` draws the table above for one expert.

Every MoE here is built with ``experts_implementation="eager"``: transformers then runs the module's own,
readable expert loop, and prints nothing about choosing one. ``run(module, x)`` calls any of these modules
(or the course's) on a ``(tokens, d_model)`` batch and returns a plain ``(tokens, d_model)`` tensor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import torch
from torch import nn

from helpers.ffn import FFN
from helpers.moe import MoE
from helpers.precision import bound, gap, max_abs_diff  # noqa: F401  (re-exported for notebook 08)

#: The oldest transformers release whose modules and configuration fields notebook 08 uses behave as in the
#: newest (5.6.0: DeepSeek-V3's group mask fills with -inf, Mixtral's router returns raw logits).
MIN_TRANSFORMERS = "5.6.0"


# --------------------------------------------------------------------------- layouts
def conv1d_weight(linear_weight: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``Conv1D`` weight from an ``nn.Linear`` weight: ``(out, in) -> (in, out)``, a transpose.

    ``Conv1D`` computes ``x @ W + b``; ``nn.Linear`` computes ``x @ Wᵀ + b``. A ``reshape`` to the same
    shape is *not* a transpose: it keeps the memory order and scrambles which weight meets which input.
    """
    return linear_weight.t().contiguous()


def fused_gate_up(w1: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    """Mixtral/Qwen3/DeepSeek-V3's ``gate_up_proj[e]``: ``[W1; W3]`` stacked along rows, ``(2f, d)``."""
    return torch.cat([w1, w3], dim=0)


def interleaved_gate_up(w1: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    """gpt-oss's ``gate_up_proj[e]``: ``(d, 2f)``, column ``2i`` is row i of W1, column ``2i + 1`` row i of W3.

    ``w1``, ``w3``: ``(f, d)`` (``nn.Linear`` layout), any float dtype; the result keeps it.
    """
    f, d = w1.shape
    out = w1.new_empty(d, 2 * f)
    out[:, 0::2] = w1.t()
    out[:, 1::2] = w3.t()
    return out


# --------------------------------------------------------------------------- running and comparing
def run(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module`` on ``x`` ``(N, d_model)`` without autograd; returns ``(N, d_model)``.

    transformers' MoE blocks take ``(batch, seq, d_model)`` and some return a tuple (Llama 4: output and
    router logits; gpt-oss: output and router scores); the course's ``MoE`` returns ``(output, stats)``.
    The first element is the layer's output.
    """
    with torch.no_grad():
        out = module(x[None])
    if isinstance(out, tuple):
        out = out[0]
    return out.reshape(x.shape)


# --------------------------------------------------------------------------- configurations
def _config(cls_name: str, **fields):
    import transformers

    return getattr(transformers, cls_name)(**fields)


def _moe_config(cls_name: str, moe: MoE, **fields):
    """A tiny configuration for ``moe``'s sizes; eager experts (transformers' readable loop)."""
    return _config(cls_name, hidden_size=moe.d_model, num_attention_heads=1, num_key_value_heads=1,
                   hidden_act="silu", experts_implementation="eager", **fields)


def _check_plain_swiglu_moe(moe: MoE, family: str, *, bias: bool = False, score: str = "softmax") -> None:
    if moe.variant != "swiglu" or moe.experts[0].has_bias != bias or moe.router_type != "token" \
            or moe.capacity_factor is not None or moe.score != score:
        raise ValueError(f"{family} needs a dropless token-choice SwiGLU MoE with score={score!r}"
                         f"{' and biases' if bias else ' without biases'}")


def _copy_experts_stacked(experts: nn.Module, ffns) -> None:
    for e, ffn in enumerate(ffns):
        experts.gate_up_proj[e].copy_(fused_gate_up(ffn.w1.weight, ffn.w3.weight))
        experts.down_proj[e].copy_(ffn.w2.weight)


def _copy_mlp(mlp: nn.Module, ffn: FFN) -> None:
    mlp.gate_proj.weight.copy_(ffn.w1.weight)
    mlp.up_proj.weight.copy_(ffn.w3.weight)
    mlp.down_proj.weight.copy_(ffn.w2.weight)


# --------------------------------------------------------------------------- dense FFNs
def gpt2_mlp(ffn: FFN) -> nn.Module:
    """transformers' ``GPT2MLP`` holding ``ffn``'s weights (``ffn``: dense, ``gelu_tanh``, with biases)."""
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    if ffn.gated or ffn.activation_name != "gelu_tanh" or not ffn.has_bias:
        raise ValueError("GPT-2's MLP is dense, with biases and the tanh GELU ('gelu_tanh')")
    config = _config("GPT2Config", n_embd=ffn.d_model, n_inner=ffn.d_ff, n_head=1, resid_pdrop=0.0,
                     activation_function="gelu_new")
    mlp = GPT2MLP(ffn.d_ff, config).eval()
    with torch.no_grad():
        mlp.c_fc.weight.copy_(conv1d_weight(ffn.w1.weight))
        mlp.c_fc.bias.copy_(ffn.w1.bias)
        mlp.c_proj.weight.copy_(conv1d_weight(ffn.w2.weight))
        mlp.c_proj.bias.copy_(ffn.w2.bias)
    return mlp


def llama_mlp(ffn: FFN) -> nn.Module:
    """transformers' ``LlamaMLP`` holding ``ffn``'s weights (``ffn``: SwiGLU, no biases)."""
    from transformers.models.llama.modeling_llama import LlamaMLP

    if not ffn.gated or ffn.activation_name != "silu" or ffn.has_bias:
        raise ValueError("LLaMA's MLP is SwiGLU without biases (FFN.from_variant('swiglu', d, bias=False))")
    config = _config("LlamaConfig", hidden_size=ffn.d_model, intermediate_size=ffn.d_ff, num_attention_heads=1,
                     num_key_value_heads=1, hidden_act="silu", mlp_bias=False)
    mlp = LlamaMLP(config).eval()
    with torch.no_grad():
        _copy_mlp(mlp, ffn)
    return mlp


# --------------------------------------------------------------------------- MoE layers
def mixtral_block(moe: MoE) -> nn.Module:
    """transformers' ``MixtralSparseMoeBlock`` with ``moe``'s router and experts (softmax, top-k, renormalised)."""
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    _check_plain_swiglu_moe(moe, "Mixtral")
    config = _moe_config("MixtralConfig", moe, intermediate_size=moe.d_ff, num_local_experts=moe.n_experts,
                         num_experts_per_tok=moe.top_k)
    block = MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        _copy_experts_stacked(block.experts, moe.experts)
    return block


def qwen3_moe_block(moe: MoE, norm_topk_prob: bool | None = None) -> nn.Module:
    """transformers' ``Qwen3MoeSparseMoeBlock`` with ``moe``'s weights.

    ``norm_topk_prob`` defaults to ``moe.renormalise`` (the same function); pass the other value to see
    what the flag changes.
    """
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    _check_plain_swiglu_moe(moe, "Qwen3-MoE")
    norm = moe.renormalise if norm_topk_prob is None else norm_topk_prob
    config = _moe_config("Qwen3MoeConfig", moe, moe_intermediate_size=moe.d_ff, num_experts=moe.n_experts,
                         num_experts_per_tok=moe.top_k, norm_topk_prob=norm)
    block = Qwen3MoeSparseMoeBlock(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        _copy_experts_stacked(block.experts, moe.experts)
    return block


def deepseek_v3_moe(moe: MoE, *, n_group: int = 1, topk_group: int = 1,
                    routed_scaling_factor: float = 1.0) -> nn.Module:
    """transformers' ``DeepseekV3MoE`` with ``moe``'s router, ``selection_bias``, routed and shared experts.

    ``moe``: ``score="sigmoid"``, ``n_shared ≥ 1``, ``top_k ≥ 2`` routed (DeepSeek-V3 normalises the chosen
    affinities at every k; the course only from k = 2). With the defaults (one group, scale 1) the module
    computes the course's function; ``n_group``/``topk_group`` turn on group-limited routing and
    ``routed_scaling_factor`` scales the routed experts' sum (DeepSeek-V3: 8, 4 and 2.5).
    """
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    _check_plain_swiglu_moe(moe, "DeepSeek-V3", score="sigmoid")
    if moe.shared is None or moe.top_k < 2 or not moe.renormalise:
        raise ValueError("DeepSeek-V3's layer has shared experts and normalises the chosen affinities: "
                         "use MoE(..., score='sigmoid', n_shared>=1) with at least 2 routed experts per token")
    config = _moe_config("DeepseekV3Config", moe, moe_intermediate_size=moe.d_ff, n_routed_experts=moe.n_experts,
                         num_experts_per_tok=moe.top_k, n_shared_experts=moe.n_shared, n_group=n_group,
                         topk_group=topk_group, routed_scaling_factor=routed_scaling_factor, norm_topk_prob=True,
                         q_lora_rank=None, kv_lora_rank=4, qk_rope_head_dim=2, qk_nope_head_dim=2, v_head_dim=2)
    block = DeepseekV3MoE(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        block.gate.e_score_correction_bias.copy_(moe.selection_bias)
        _copy_experts_stacked(block.experts, moe.experts)
        _copy_mlp(block.shared_experts, moe.shared)
    return block


def llama4_moe(moe: MoE) -> nn.Module:
    """transformers' ``Llama4TextMoe`` with ``moe``'s weights: top-1 sigmoid router and one shared expert.

    ``moe``: ``MoE(d, n_experts=E + 1, top_k=2, n_shared=1, score="sigmoid")`` (E routed experts, top-1,
    one shared expert of the same width). The module multiplies the router score into the expert's *input*;
    the course's ``MoE`` into its *output* (``llama4_style_forward`` does it Llama 4's way).
    """
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    _check_plain_swiglu_moe(moe, "Llama 4", score="sigmoid")
    if moe.top_k != 1 or moe.n_shared != 1 or moe.shared.d_ff != moe.d_ff:
        raise ValueError("Llama 4's layer routes top-1 beside one shared expert of the experts' width: "
                         "use MoE(d, n_experts=E + 1, top_k=2, n_shared=1, score='sigmoid')")
    config = _config("Llama4TextConfig", hidden_size=moe.d_model, intermediate_size=moe.d_ff,
                     intermediate_size_mlp=moe.d_ff, num_local_experts=moe.n_experts, num_experts_per_tok=1,
                     num_attention_heads=1, num_key_value_heads=1, head_dim=moe.d_model, hidden_act="silu")
    block = Llama4TextMoe(config).eval()
    with torch.no_grad():
        block.router.weight.copy_(moe.router.weight)
        for e, ffn in enumerate(moe.experts):
            block.experts.gate_up_proj[e].copy_(torch.cat([ffn.w1.weight.t(), ffn.w3.weight.t()], dim=1))
            block.experts.down_proj[e].copy_(ffn.w2.weight.t())
        _copy_mlp(block.shared_expert, moe.shared)
    return block


def llama4_style_forward(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The course's top-1 sigmoid ``MoE`` computed Llama 4's way: ``shared(x) + expert(σ · x)``.

    ``x``: ``(N, d_model)``. The course's own forward gives ``shared(x) + σ · expert(x)``.
    """
    with torch.no_grad():
        routing = moe.route(x)
        y = moe.shared(x)
        for e, ffn in enumerate(moe.experts):
            rows = (routing.expert_index[:, 0] == e).nonzero().flatten()
            if rows.numel():
                y[rows] += ffn(x[rows] * routing.weight[rows, :1].to(x.dtype))
    return y


def gpt_oss_mlp(moe: MoE, *, alpha: float = 1.0, limit: float = math.inf) -> nn.Module:
    """transformers' ``GptOssMLP`` with ``moe``'s weights (``moe``: SwiGLU experts with biases, top-k ≥ 2).

    gpt-oss's experts compute ``(up + 1) · gate · σ(α · gate)`` with ``gate ≤ limit`` and ``|up| ≤ limit``
    clamped. The converter stores ``b3 − 1`` as the up bias, so the ``+ 1`` gives back the course's ``W3 x
    + b3`` exactly; with ``alpha=1`` and ``limit=inf`` the module then computes the course's function, and
    ``alpha=1.702, limit=7.0`` (gpt-oss's values) show what its activation changes. The router gets a zero
    bias (the course's router has none); softmax over the top-k logits equals the course's renormalised
    top-k softmax.
    """
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    _check_plain_swiglu_moe(moe, "gpt-oss", bias=True)
    if moe.top_k < 2 or not moe.renormalise:
        raise ValueError("gpt-oss renormalises over its top-k (k = 4): use top_k >= 2 with renormalise=True")
    config = _moe_config("GptOssConfig", moe, intermediate_size=moe.d_ff, num_local_experts=moe.n_experts,
                         num_experts_per_tok=moe.top_k, head_dim=moe.d_model)
    block = GptOssMLP(config).eval()
    block.experts.alpha, block.experts.limit = alpha, limit
    with torch.no_grad():
        block.router.weight.copy_(moe.router.weight)
        block.router.bias.zero_()
        for e, ffn in enumerate(moe.experts):
            block.experts.gate_up_proj[e].copy_(interleaved_gate_up(ffn.w1.weight, ffn.w3.weight))
            block.experts.gate_up_proj_bias[e, 0::2] = ffn.w1.bias
            block.experts.gate_up_proj_bias[e, 1::2] = ffn.w3.bias - 1.0
            block.experts.down_proj[e].copy_(ffn.w2.weight.t())
            block.experts.down_proj_bias[e].copy_(ffn.w2.bias)
    return block


# --------------------------------------------------------------------------- conventions, read from the code
#: family -> (configuration class, attribute holding the expert width, attribute holding the number of experts)
_CONFIGS = {
    "GPT-2": ("GPT2Config", "n_inner", None),
    "LLaMA": ("LlamaConfig", "intermediate_size", None),
    "Mixtral": ("MixtralConfig", "intermediate_size", "num_local_experts"),
    "Qwen3-MoE": ("Qwen3MoeConfig", "moe_intermediate_size", "num_experts"),
    "DeepSeek-V3": ("DeepseekV3Config", "moe_intermediate_size", "n_routed_experts"),
    "Llama 4": ("Llama4TextConfig", "intermediate_size", "num_local_experts"),
    "gpt-oss": ("GptOssConfig", "intermediate_size", "num_local_experts"),
}


def default_config_fields(family: str) -> dict[str, object]:
    """What transformers' configuration class for ``family`` says by default (no arguments)."""
    cls_name, width_attr, experts_attr = _CONFIGS[family]
    config = _config(cls_name)
    d = getattr(config, "hidden_size")
    width = getattr(config, width_attr) or 4 * d                 # GPT-2: n_inner=None means 4·d
    fields: dict[str, object] = {"d_model": d, "width": width,
                                 "activation": getattr(config, "hidden_act", None)
                                 or getattr(config, "activation_function", None)}
    if experts_attr is not None:
        fields["experts"] = getattr(config, experts_attr)
        fields["top_k"] = getattr(config, "num_experts_per_tok")
    for name in ("norm_topk_prob", "n_shared_experts", "n_group", "topk_group", "routed_scaling_factor",
                 "router_aux_loss_coef", "output_router_logits"):
        if hasattr(config, name):
            fields[name] = getattr(config, name)
    return fields


def parameter_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """``name -> shape`` of every parameter and buffer of ``module`` (how its weights are laid out)."""
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
    shapes.update({name: tuple(b.shape) for name, b in module.named_buffers()})
    return shapes


#: What each family does that no configuration field records, written by the course from the module's
#: ``forward`` in transformers 5.23 (layout note, how experts are scored, when the weights are renormalised).
_FROM_CODE = {
    "GPT-2": ("Conv1D, input × output", "—", "—"),
    "LLaMA": ("nn.Linear, gate/up/down", "—", "—"),
    "Mixtral": ("fused [W1; W3] per expert", "softmax", "always"),
    "Qwen3-MoE": ("fused [W1; W3] per expert", "softmax", "norm_topk_prob"),
    "DeepSeek-V3": ("fused [W1; W3] per expert", "sigmoid + bias", "norm_topk_prob"),
    "Llama 4": ("[W1ᵀ W3ᵀ], input × output", "sigmoid, top-1", "— (top-1)"),
    "gpt-oss": ("interleaved, input × output", "softmax of top-k", "always"),
}


def routing_weight_dtypes(blocks: Mapping[str, nn.Module], dtype: torch.dtype = torch.bfloat16) -> str:
    """The dtype of the routing weights each block's router returns when it and its input are cast to ``dtype``.

    ``blocks``: name -> an MoE block whose router (``gate`` or ``router``) returns (logits, weights, indices),
    as Mixtral's, Qwen3-MoE's and gpt-oss's do; each router is copied, never changed. One printable line.
    """
    import copy

    parts = []
    for name, block in blocks.items():
        router = block.gate if hasattr(block, "gate") else block.router
        router = copy.deepcopy(router).to(dtype)
        with torch.no_grad():
            weights = router(torch.randn(4, router.weight.shape[1], dtype=dtype))[1]
        parts.append(f"{name} {str(weights.dtype).removeprefix('torch.')}")
    return f"routing weights of a {str(dtype).removeprefix('torch.')} copy: " + ", ".join(parts)


def _modeling_source(module: nn.Module) -> str:
    """The source of the modeling file ``module``'s class is defined in."""
    import inspect
    import sys

    return inspect.getsource(sys.modules[type(module).__module__])


def activation_read_by(module: nn.Module, family: str) -> str:
    """The activation the module computes, from the configuration field its modeling file actually reads.

    gpt-oss's file never reads ``hidden_act``: its experts compute ``(clamp(u, ±limit) + 1) · g σ(α g)`` with
    ``g ≤ limit``, from ``swiglu_alpha`` and ``swiglu_limit`` (older 5.x releases write the two constants into
    the file); every other family reads ``hidden_act`` (GPT-2: ``activation_function``).
    """
    import re

    source = _modeling_source(module)
    config = _config(_CONFIGS[family][0])
    if "config.swiglu_limit" in source:
        return f"(u+1)·gσ({config.swiglu_alpha:g}g), clamp {config.swiglu_limit:g}"
    alpha = re.search(r"self\.alpha = ([0-9.]+)", source)     # transformers 5.6-5.x: the constants in the file
    limit = re.search(r"self\.limit = ([0-9.]+)", source)
    if alpha and limit:
        return f"(u+1)·gσ({float(alpha.group(1)):g}g), clamp {float(limit.group(1)):g}"
    return getattr(config, "hidden_act", None) or config.activation_function


def balancing_in(module: nn.Module, family: str) -> str:
    """What transformers' modeling file does about load balancing, read from its source.

    An auxiliary loss only when the file calls ``load_balancing_loss_func`` (then gated by the configuration's
    ``output_router_logits``, "off" when it is False, scaled by ``router_aux_loss_coef``); a correction bias when the module holds an
    ``e_score_correction_bias`` buffer (loaded with the weights; "not updated": transformers has no rule for it).
    A configuration field the file never reads (Llama 4's ``router_aux_loss_coef``) does not count.
    """
    source = _modeling_source(module)
    config = _config(_CONFIGS[family][0])
    if re.search(r"(?<!def )load_balancing_loss_func\(", source):
        on = "on" if config.output_router_logits else "off"
        return f"aux ×{config.router_aux_loss_coef:g}, {on}"
    if any(name.endswith("e_score_correction_bias") for name, _ in module.named_buffers()):
        return "bias, not updated"
    if _CONFIGS[family][2] is None:
        return "—"
    return "none (field unused)" if hasattr(config, "router_aux_loss_coef") else "none"


def tokens_moved_by_grouping(x: torch.Tensor, seeds=range(6), *, n_routed: int = 16, top_k: int = 4,
                             d_ff: int = 32, bias_std: float = 0.3, n_group: int = 4, topk_group: int = 2) -> list[int]:
    """How many tokens group-limited routing reroutes, over random DeepSeek-style layers.

    ``x``: (N, d) tokens. For each seed, a fresh ``MoE`` with sigmoid scores, one shared and ``n_routed`` routed
    experts of width ``d_ff``, ``top_k`` routed per token and a selection bias drawn with spread ``bias_std``,
    run as ``DeepseekV3MoE`` with one group and with the ``topk_group`` best of ``n_group``. Returns, per seed,
    the number of tokens whose output changes (max |Δ| > 1e-6). The global random state is left as it was.
    """
    moved = []
    with torch.random.fork_rng():
        for seed in seeds:
            torch.manual_seed(seed)
            layer = MoE(x.shape[-1], n_routed + 1, top_k + 1, d_ff=d_ff, n_shared=1, score="sigmoid").eval()
            with torch.no_grad():
                layer.selection_bias.copy_(bias_std * torch.randn(n_routed))
            change = (run(deepseek_v3_moe(layer, n_group=n_group, topk_group=topk_group), x)
                      - run(deepseek_v3_moe(layer), x))
            moved.append(int((change.abs().amax(-1) > 1e-6).sum()))
    return moved


def conventions_table(modules: dict[str, nn.Module], footnote: bool = True, layout: bool = True) -> str:
    """One row per family: layout, activation, scoring, renormalisation, shared experts, balancing.

    ``modules``: family -> a tiny instance. Read from transformers' modeling file: the activation (the field
    the file reads, with its default value) and the balancing (whether the file calls the aux loss or holds a
    correction bias). Read from the configuration class's defaults: ``norm_topk_prob``,
    ``routed_scaling_factor`` and the shared experts. Written by the course from each module's ``forward``
    (``_FROM_CODE``): the layout note, the scores and when renormalisation happens. ``footnote=False`` leaves
    out the two lines saying so (for a page that says it in prose); ``layout=False`` leaves out the layout
    column (for a page that draws the layouts, ``draw_layouts``).
    """
    lay = 29 if layout else 0
    head = (f"{'family':<12}{'layout*' if layout else '':<{lay}}{'activation':<26}{'scores*':<17}{'renormalise*':<26}"
            f"{'shared':<7}balancing")
    rows = [head]
    for family, module in modules.items():
        c = default_config_fields(family)
        stored, scoring, renorm = _FROM_CODE[family]
        if renorm == "norm_topk_prob":
            renorm = f"norm_topk_prob={c['norm_topk_prob']}"
            if "routed_scaling_factor" in c:
                renorm += f", ×{c['routed_scaling_factor']:g}"
        shared = ("1" if family == "Llama 4" else str(c.get("n_shared_experts", 0))) if "experts" in c else "—"
        rows.append(f"{family:<12}{stored if layout else '':<{lay}}{activation_read_by(module, family):<26}"
                    f"{scoring:<17}{renorm:<26}{shared:<7}{balancing_in(module, family)}")
    rows.insert(1, "-" * max(len(row) for row in rows))
    if footnote:
        rows.append("* typed by the course from each module's forward (transformers 5.23). activation, balancing: "
                    "found in the modeling file's source,")
        rows.append("  values from the configuration defaults. norm_topk_prob, ×γ, shared: the configuration defaults.")
    return "\n".join(rows)


# --------------------------------------------------------------------------- a whole model
#: transformers' GPT-2 keys -> the course's ``TinyGPT`` keys (``{i}`` is the layer). "T": the weight is a
#: ``Conv1D`` (input × output) and is transposed into ``nn.Linear``'s layout. ``lm_head.weight`` is tied to
#: ``transformer.wte.weight`` in GPT-2 and untied in ``TinyGPT``, so it is copied from the same tensor.
GPT2_KEY_MAP: dict[str, tuple[str, bool]] = {
    "transformer.wte.weight": ("tok_emb.weight", False),
    "transformer.wpe.weight": ("pos_emb.weight", False),
    "transformer.h.{i}.ln_1.weight": ("blocks.{i}.ln1.weight", False),
    "transformer.h.{i}.ln_1.bias": ("blocks.{i}.ln1.bias", False),
    "transformer.h.{i}.attn.c_attn.weight": ("blocks.{i}.attn.qkv.weight", True),
    "transformer.h.{i}.attn.c_attn.bias": ("blocks.{i}.attn.qkv.bias", False),
    "transformer.h.{i}.attn.c_proj.weight": ("blocks.{i}.attn.proj.weight", True),
    "transformer.h.{i}.attn.c_proj.bias": ("blocks.{i}.attn.proj.bias", False),
    "transformer.h.{i}.ln_2.weight": ("blocks.{i}.ln2.weight", False),
    "transformer.h.{i}.ln_2.bias": ("blocks.{i}.ln2.bias", False),
    "transformer.h.{i}.mlp.c_fc.weight": ("blocks.{i}.ffn.w1.weight", True),
    "transformer.h.{i}.mlp.c_fc.bias": ("blocks.{i}.ffn.w1.bias", False),
    "transformer.h.{i}.mlp.c_proj.weight": ("blocks.{i}.ffn.w2.weight", True),
    "transformer.h.{i}.mlp.c_proj.bias": ("blocks.{i}.ffn.w2.bias", False),
    "transformer.ln_f.weight": ("ln_f.weight", False),
    "transformer.ln_f.bias": ("ln_f.bias", False),
    "lm_head.weight": ("lm_head.weight", False),
}


def tiny_gpt2(*, vocab_size: int = 50, d_model: int = 16, n_layers: int = 2, n_heads: int = 2,
              max_len: int = 16, initializer_range: float = 0.2, seed: int = 0) -> nn.Module:
    """A random ``GPT2LMHeadModel`` from a tiny configuration (no download), dropout off, in eval mode.

    ``initializer_range`` (GPT-2: 0.02) is raised so that the logits of random weights are of size about 1.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=max_len, n_embd=d_model, n_layer=n_layers,
                        n_head=n_heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, initializer_range=initializer_range)
    with torch.random.fork_rng():                 # the caller's random stream is left as it was
        model = GPT2LMHeadModel(config).eval()
    # Our own draw, the same under every transformers release (their initialisers differ between versions):
    # matrices N(0, initializer_range), LayerNorm scales 1 and every bias small.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * initializer_range)
            elif name.endswith(".weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    return model


def tiny_gpt_from_gpt2(hf_model: nn.Module, *, transpose: bool = True,
                       state_dict: Mapping[str, torch.Tensor] | None = None):
    """The course's ``TinyGPT`` holding a ``GPT2LMHeadModel``'s weights, through ``GPT2_KEY_MAP``.

    Every key of the source is renamed by the map (``{i}`` matched to the layer index) and every key of the
    target must be filled once: an unmapped, unused or twice-filled key raises, naming it. ``transpose=False``
    copies the ``Conv1D`` weights with a ``reshape`` instead of a transpose (the bug of section 1, shapes
    right). ``state_dict`` converts other tensors than the model's own, e.g. the file ``save_pretrained`` wrote
    (which holds the tied ``lm_head.weight`` only as ``transformer.wte.weight``). Returns ``(model, n_copied)``.
    """
    from helpers.transformer import GPTConfig, TinyGPT

    c = hf_model.config
    model = TinyGPT(GPTConfig(vocab_size=c.vocab_size, d_model=c.n_embd, n_layers=c.n_layer, n_heads=c.n_head,
                              max_len=c.n_positions, variant="gelu_tanh", bias=True)).eval()
    target = model.state_dict()
    patterns = [(re.compile("^" + re.escape(src).replace(r"\{i\}", r"(\d+)") + "$"), dst, t)
                for src, (dst, t) in GPT2_KEY_MAP.items()]
    filled = set()
    source = hf_model.state_dict() if state_dict is None else state_dict
    for key, value in source.items():
        match = next(((m, dst, t) for p, dst, t in patterns if (m := p.match(key))), None)
        if match is None:
            raise KeyError(f"no entry of GPT2_KEY_MAP for {key!r}")
        m, dst, t = match
        name = dst.replace("{i}", m.group(1)) if m.groups() else dst
        if name not in target or name in filled:
            raise KeyError(f"{key!r} maps to {name!r}, which TinyGPT lacks or already has")
        filled.add(name)
        if t:
            value = value.t() if transpose else value.reshape(value.shape[1], value.shape[0])
        target[name] = value.detach().clone()
    missing = set(target) - filled
    if missing:
        raise KeyError(f"TinyGPT keys filled by no GPT-2 key: {sorted(missing)}")
    model.load_state_dict(target)
    return model, len(filled)


# --------------------------------------------------------------------------- the layouts, drawn
def _layout_codes(d: int = 2, f: int = 3) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each family's (gate/up tensor, down tensor) for one expert whose entries are codes: 1ij for W1[i, j],
    3ij for W3[i, j], 2ij for W2[i, j]. Read out of the real modules the converters build."""
    i, j = torch.arange(f)[:, None], torch.arange(d)[None, :]
    w1, w3, w2 = 100. + 10 * i + j, 300. + 10 * i + j, 200. + 10 * j.T + i.T
    def filled(moe):
        with torch.no_grad():
            for name, w in (("w1", w1), ("w3", w3), ("w2", w2)):
                getattr(moe.experts[0], name).weight.copy_(w)
        return moe
    dense = FFN.from_variant("gelu_tanh", d, f)
    with torch.no_grad():
        dense.w1.weight.copy_(w1), dense.w2.weight.copy_(w2)
    mix = mixtral_block(filled(MoE(d, 2, 2, d_ff=f))).experts
    l4 = llama4_moe(filled(MoE(d, 3, 2, d_ff=f, n_shared=1, score="sigmoid"))).experts
    oss = gpt_oss_mlp(filled(MoE(d, 2, 2, d_ff=f, bias=True))).experts
    gpt2 = gpt2_mlp(dense)
    course = torch.cat([w1, torch.full((1, d), math.nan), w3])
    return {"course: w1 / w3 (f, d)": (course, w2, "w2 (d, f)"),
            "GPT-2: c_fc (d, f)": (gpt2.c_fc.weight, gpt2.c_proj.weight, "c_proj (f, d)"),
            "Mixtral, Qwen3, DeepSeek:\ngate_up_proj[e] (2f, d)": (mix.gate_up_proj[0], mix.down_proj[0],
                                                                  "down_proj[e] (d, f)"),
            "Llama 4:\ngate_up_proj[e] (d, 2f)": (l4.gate_up_proj[0], l4.down_proj[0], "down_proj[e] (f, d)"),
            "gpt-oss:\ngate_up_proj[e] (d, 2f)": (oss.gate_up_proj[0], oss.down_proj[0], "down_proj[e] (f, d)")}


def draw_layouts(d: int = 2, f: int = 3):
    """One expert (``d`` inputs, ``f`` hidden units) as each family stores it: top row the gate/up tensor,
    bottom row the down tensor. Entry ``g ij`` is the course's ``W1[i, j]``, ``u ij`` is ``W3[i, j]``, ``w ij``
    is ``W2[i, j]``; colours: gate, up, down. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from helpers.plotting import PALETTE

    layouts = _layout_codes(d, f)
    fig, axes = plt.subplots(2, len(layouts), figsize=(14, 6), height_ratios=(2 * f + 1, f),
                             layout="constrained")
    cmap = ListedColormap([PALETTE[0], PALETTE[2], PALETTE[1]])
    for col, (title, (gate_up, down, down_name)) in enumerate(layouts.items()):
        for row, t in enumerate((gate_up, down)):
            ax, codes = axes[row, col], t.detach().double()
            ax.imshow((codes // 100).numpy(), cmap=cmap, vmin=1, vmax=3)
            for (r, c), v in zip(torch.cartesian_prod(*map(torch.arange, codes.shape)).tolist(), codes.flatten()):
                if not math.isnan(v):
                    name = "guw"[[1, 3, 2].index(int(v) // 100)]
                    ax.text(c, r, f"{name}{int(v) % 100:02d}", ha="center", va="center", color="white", fontsize=10)
            rows = 2 * f + 1 if row == 0 else f                  # the same cell size in every panel
            ax.set(xticks=[], yticks=[], xlim=(-0.5, 2 * f + 0.5), ylim=(rows - 0.5, -0.5))
            ax.set_title(title if row == 0 else down_name, loc="left")
            ax.set_frame_on(False)
    fig.suptitle("One expert as each family stores it (g21 = W1[2, 1]; u: W3, w: W2)", fontsize=12)
    return fig
