"""helpers.real_code: every converter against transformers' real module, and the Colab upgrade of transformers.

Each converter must give a module whose output equals the course's layer to float32 rounding on random
inputs (several seeds, shapes, k), and each documented difference (Llama 4's score on the input, gpt-oss's
α and clamp, DeepSeek-V3's groups and scale, Qwen3-MoE's flag) must really change the output.
"""
import subprocess

import pytest
import torch

from helpers import env, real_code
from helpers.ffn import FFN
from helpers.moe import MoE

pytest.importorskip("transformers")

TOL = 1e-5


def _x(seed: int, n: int = 37, d: int = 12) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def _agree(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> None:
    assert a.shape == b.shape
    assert real_code.max_abs_diff(a, b) < tol, real_code.max_abs_diff(a, b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpt2_mlp_equals_the_course_ffn(seed):
    torch.manual_seed(seed)
    ffn = FFN.from_variant("gelu_tanh", 12, 40)
    _agree(real_code.run(real_code.gpt2_mlp(ffn), _x(seed)), real_code.run(ffn, _x(seed)))


def test_gpt2_mlp_stores_the_transpose():
    ffn = FFN.from_variant("gelu_tanh", 12, 40)
    mlp = real_code.gpt2_mlp(ffn)
    assert torch.equal(mlp.c_fc.weight, ffn.w1.weight.t()) and torch.equal(mlp.c_proj.weight, ffn.w2.weight.t())


@pytest.mark.parametrize("seed", [0, 1])
def test_llama_mlp_equals_the_course_swiglu(seed):
    torch.manual_seed(seed)
    ffn = FFN.from_variant("swiglu", 12, 32, bias=False)
    _agree(real_code.run(real_code.llama_mlp(ffn), _x(seed)), real_code.run(ffn, _x(seed)))


@pytest.mark.parametrize("n_experts, top_k", [(4, 1), (8, 2), (6, 6)])
def test_mixtral_block_equals_the_course_moe(n_experts, top_k):
    """k = 1 differs: Mixtral renormalises one weight to 1, the course keeps the probability (Switch)."""
    torch.manual_seed(n_experts)
    moe = MoE(12, n_experts, top_k, d_ff=16).eval()
    block = real_code.mixtral_block(moe)
    if top_k == 1:
        ones = MoE(12, n_experts, 1, d_ff=16).eval()
        ones.load_state_dict(moe.state_dict())
        routing = moe.route(_x(3))
        assert bool((routing.weight < 1).all())                       # the course keeps p < 1 at k = 1
        assert real_code.max_abs_diff(real_code.run(block, _x(3)), real_code.run(moe, _x(3))) > 1e-3
    else:
        _agree(real_code.run(block, _x(3)), real_code.run(moe, _x(3)))


@pytest.mark.parametrize("renormalise", [True, False])
def test_qwen3_block_follows_norm_topk_prob(renormalise):
    torch.manual_seed(4)
    moe = MoE(12, 8, 3, d_ff=16, renormalise=renormalise).eval()
    _agree(real_code.run(real_code.qwen3_moe_block(moe), _x(4)), real_code.run(moe, _x(4)))
    other = real_code.run(real_code.qwen3_moe_block(moe, norm_topk_prob=not renormalise), _x(4))
    assert real_code.max_abs_diff(other, real_code.run(moe, _x(4))) > 1e-3


def _deepseek_moe(seed: int) -> MoE:
    torch.manual_seed(seed)
    moe = MoE(12, 9, 4, d_ff=16, n_shared=1, score="sigmoid").eval()  # 8 routed, top-3, one shared
    with torch.no_grad():
        moe.selection_bias.copy_(0.4 * torch.randn(8))
    return moe


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_deepseek_v3_equals_the_course_moe_with_bias(seed):
    moe = _deepseek_moe(seed)
    block = real_code.deepseek_v3_moe(moe)
    assert torch.equal(block.gate.e_score_correction_bias, moe.selection_bias)
    _agree(real_code.run(block, _x(seed)), real_code.run(moe, _x(seed)))


def test_deepseek_v3_scale_multiplies_the_routed_part_and_groups_change_the_choice():
    moe, x = _deepseek_moe(5), _x(5, n=64)
    y, shared = real_code.run(moe, x), real_code.run(moe.shared, x)
    scaled = real_code.run(real_code.deepseek_v3_moe(moe, routed_scaling_factor=2.5), x)
    _agree(scaled - shared, 2.5 * (y - shared))
    grouped = real_code.run(real_code.deepseek_v3_moe(moe, n_group=4, topk_group=2), x)
    assert int(((grouped - y).abs().amax(-1) > 1e-5).sum()) > 0
    every_group = real_code.run(real_code.deepseek_v3_moe(moe, n_group=4, topk_group=4), x)
    _agree(every_group, y)                                           # keeping every group is no limit


def test_deepseek_v3_converter_refuses_what_it_cannot_express():
    with pytest.raises(ValueError):
        real_code.deepseek_v3_moe(MoE(12, 8, 2, d_ff=16, score="sigmoid"))            # no shared expert
    with pytest.raises(ValueError):
        real_code.deepseek_v3_moe(MoE(12, 8, 2, d_ff=16, n_shared=1, score="sigmoid"))  # top-1 routed


@pytest.mark.parametrize("seed", [0, 1])
def test_llama4_scores_the_input(seed):
    torch.manual_seed(seed)
    moe = MoE(12, 5, 2, d_ff=16, n_shared=1, score="sigmoid").eval()   # 4 routed, top-1, one shared
    block, x = real_code.llama4_moe(moe), _x(seed)
    _agree(real_code.run(block, x), real_code.llama4_style_forward(moe, x))
    assert real_code.max_abs_diff(real_code.run(block, x), real_code.run(moe, x)) > 1e-3


@pytest.mark.parametrize("seed", [0, 1])
def test_gpt_oss_equals_the_course_moe_without_alpha_and_clamp(seed):
    torch.manual_seed(seed)
    moe = MoE(12, 6, 2, d_ff=16, bias=True).eval()
    x = _x(seed)
    _agree(real_code.run(real_code.gpt_oss_mlp(moe), x), real_code.run(moe, x))
    assert real_code.max_abs_diff(real_code.run(real_code.gpt_oss_mlp(moe, alpha=1.702), x),
                                  real_code.run(moe, x)) > 1e-3
    _agree(real_code.run(real_code.gpt_oss_mlp(moe, limit=7.0), x), real_code.run(moe, x))    # nothing beyond 7
    assert real_code.max_abs_diff(real_code.run(real_code.gpt_oss_mlp(moe, limit=7.0), 20 * x),
                                  real_code.run(moe, 20 * x)) > 1e-3


def test_gpt_oss_with_its_own_activation_matches_openais_formula():
    """alpha=1.702, limit=7 reproduce the reference ``swiglu`` of OpenAI's gpt-oss code on one expert."""
    torch.manual_seed(7)
    moe = MoE(12, 4, 4, d_ff=16, bias=True).eval()                   # k = E: every expert, weights = softmax
    block, x = real_code.gpt_oss_mlp(moe, alpha=1.702, limit=7.0), 5 * _x(7)
    with torch.no_grad():
        probs = torch.softmax(moe.router(x), -1)
    # OpenAI's formula clamps u' = u - 1 to [-7, 7] before adding 1: same as clamping u to [-6, 8]
    with torch.no_grad():
        expected_exact = torch.zeros_like(x)
        for e, ffn in enumerate(moe.experts):
            g = ffn.w1(x).clamp(max=7.0)
            u = (ffn.w3(x) - 1.0).clamp(-7.0, 7.0) + 1.0
            expected_exact += probs[:, e:e + 1] * ffn.w2(g * torch.sigmoid(1.702 * g) * u)
    _agree(real_code.run(block, x), expected_exact, 1e-4)


def test_layout_helpers():
    w1, w3 = torch.randn(5, 3), torch.randn(5, 3)
    inter = real_code.interleaved_gate_up(w1, w3)
    assert inter.shape == (3, 10) and torch.equal(inter[:, 0::2], w1.t()) and torch.equal(inter[:, 1::2], w3.t())
    assert torch.equal(real_code.fused_gate_up(w1, w3), torch.cat([w1, w3]))
    assert torch.equal(real_code.conv1d_weight(w1), w1.t())
    assert not torch.equal(w1.reshape(3, 5), w1.t())                  # the reshape bug shown in section 1


def test_bound_is_a_threshold_not_digits():
    assert real_code.bound(3.2e-7) == real_code.bound(9e-7) == "< 1e-06"
    assert real_code.bound(0.18) == "= 0.18"


def test_default_config_fields_read_the_defaults():
    assert real_code.default_config_fields("DeepSeek-V3")["routed_scaling_factor"] == 2.5
    assert real_code.default_config_fields("LLaMA")["width"] == 11008
    assert real_code.default_config_fields("GPT-2")["width"] == 4 * 768


def test_modules_print_nothing(capfd):
    """Building and running every module writes nothing to stdout or stderr (no transformers chatter)."""
    torch.manual_seed(0)
    x = _x(0)
    real_code.run(real_code.mixtral_block(MoE(12, 4, 2, d_ff=16).eval()), x)
    real_code.run(real_code.gpt_oss_mlp(MoE(12, 4, 2, d_ff=16, bias=True).eval()), x)
    real_code.run(real_code.deepseek_v3_moe(_deepseek_moe(0)), x)
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)


# ------------------------------------------------------------------ Colab: a transformers older than the bound
def test_version_tuple():
    assert env._version_tuple("5.6.0") == (5, 6, 0)
    assert env._version_tuple("5.23.0.dev0") == (5, 23, 0)
    assert env._version_tuple("4.57.1") < env._version_tuple("5.6")


def test_colab_upgrades_an_old_transformers_once(monkeypatch):
    calls = []
    versions = {"transformers": "4.57.1"}
    monkeypatch.setattr(env, "_installed_version", lambda name: versions.get(name, "99.0"))
    monkeypatch.setattr(env, "missing_packages", lambda: [])
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    assert env.install_missing() == [env.RUNTIME_PACKAGES["transformers"]]
    assert calls and calls[0][:4] == [env.sys.executable, "-m", "pip", "install"] and "--quiet" in calls[0]
    assert calls[0][-1] == "transformers>=5.6"
    versions["transformers"] = "5.23.0"                              # after the upgrade: nothing more to do
    assert env.install_missing() == [] and len(calls) == 1


def test_colab_leaves_a_new_enough_or_absent_transformers_to_the_import_check(monkeypatch):
    monkeypatch.setattr(env, "_installed_version", lambda name: None)
    assert env.outdated_packages() == []
    monkeypatch.setattr(env, "_installed_version", lambda name: "5.6.0")
    assert env.outdated_packages() == []


def test_the_bound_is_the_documented_minimum():
    major_minor = ".".join(real_code.MIN_TRANSFORMERS.split(".")[:2])
    assert env.RUNTIME_PACKAGES["transformers"] == f"transformers>={major_minor}"


def test_conventions_table_reads_what_the_modules_use():
    """gpt-oss never reads hidden_act (its activation comes from swiglu_alpha/limit); Llama 4 never calls the
    aux loss although its configuration carries router_aux_loss_coef; DeepSeek-V3's bias is never updated."""
    torch.manual_seed(0)
    oss = real_code.gpt_oss_mlp(MoE(12, 4, 2, d_ff=16, bias=True).eval())
    l4 = real_code.llama4_moe(MoE(12, 5, 2, d_ff=16, n_shared=1, score="sigmoid").eval())
    mixtral = real_code.mixtral_block(MoE(12, 4, 2, d_ff=16).eval())
    ds = real_code.deepseek_v3_moe(_deepseek_moe(0))
    assert real_code.activation_read_by(oss, "gpt-oss") == "(u+1)·gσ(1.702g), clamp 7"
    assert real_code.activation_read_by(mixtral, "Mixtral") == "silu"
    assert real_code.balancing_in(l4, "Llama 4") == "none (field unused)"
    assert real_code.balancing_in(mixtral, "Mixtral") == "aux ×0.001, off"
    assert real_code.balancing_in(oss, "gpt-oss").startswith("aux ×")
    assert real_code.balancing_in(ds, "DeepSeek-V3") == "bias, not updated"
    table = real_code.conventions_table({"Llama 4": l4, "gpt-oss": oss})
    assert "clamp 7" in table and "field unused" in table and "layout*" in table
    narrow = real_code.conventions_table({"Llama 4": l4, "gpt-oss": oss}, footnote=False, layout=False)
    assert "layout*" not in narrow and max(map(len, narrow.splitlines())) <= 110


def test_tokens_moved_by_grouping_counts_rerouted_tokens_and_keeps_the_random_state():
    """One group containing every expert reroutes nothing; four groups of which two are kept reroute some
    tokens; the caller's random stream is untouched."""
    torch.manual_seed(0)
    x = torch.randn(20, 8)
    state = torch.random.get_rng_state()
    assert real_code.tokens_moved_by_grouping(x, seeds=[0, 1], n_group=1, topk_group=1) == [0, 0]
    moved = real_code.tokens_moved_by_grouping(x, seeds=[0, 1])
    assert len(moved) == 2 and all(0 < m <= 20 for m in moved)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert "typed by the course" not in real_code.conventions_table(
        {"gpt-oss": real_code.gpt_oss_mlp(MoE(8, 4, 2, d_ff=16, bias=True).eval())}, footnote=False)


# ------------------------------------------------------------------ a whole model: GPT-2 -> TinyGPT by a key map
def test_a_whole_gpt2_converts_to_tinygpt_by_the_key_map_and_the_logits_agree():
    hf = real_code.tiny_gpt2(seed=1)
    ids = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = hf(ids).logits
    model, copied = real_code.tiny_gpt_from_gpt2(hf)
    assert copied == len(hf.state_dict()) == len(model.state_dict())
    with torch.no_grad():
        assert real_code.gap(model(ids), logits) == "< 1e-06"
        wrong, _ = real_code.tiny_gpt_from_gpt2(hf, transpose=False)
        assert real_code.max_abs_diff(wrong(ids), logits) > 0.1


def test_the_file_save_pretrained_writes_lacks_the_tied_head_and_the_converter_says_so(tmp_path):
    from safetensors.torch import load_file
    hf = real_code.tiny_gpt2(seed=2)
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in saved
    with pytest.raises(KeyError, match="lm_head.weight"):
        real_code.tiny_gpt_from_gpt2(hf, state_dict=saved)
    saved["lm_head.weight"] = saved["transformer.wte.weight"]
    model, copied = real_code.tiny_gpt_from_gpt2(hf, state_dict=saved)
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert copied == len(model.state_dict())
        assert real_code.gap(model(ids), hf(ids).logits) == "< 1e-06"


def test_the_key_map_refuses_a_key_it_does_not_know():
    hf = real_code.tiny_gpt2()
    hf.register_buffer("extra", torch.zeros(1))
    with pytest.raises(KeyError, match="no entry of GPT2_KEY_MAP for 'extra'"):
        real_code.tiny_gpt_from_gpt2(hf)


def test_draw_layouts_reads_each_familys_tensors_out_of_the_real_modules():
    import matplotlib
    matplotlib.use("Agg")
    layouts = real_code._layout_codes()
    gate_up, down, _ = layouts["gpt-oss:\ngate_up_proj[e] (d, 2f)"]
    assert gate_up[:, 0].tolist() == [100.0, 101.0] and gate_up[:, 1].tolist() == [300.0, 301.0]  # g, u interleaved
    assert layouts["Llama 4:\ngate_up_proj[e] (d, 2f)"][0][0].tolist() == [100, 110, 120, 300, 310, 320]
    assert down.shape == (3, 2)
    fig = real_code.draw_layouts()
    assert len(fig.axes) == 10
    matplotlib.pyplot.close(fig)


def test_routing_weight_dtypes_reads_each_routers_output_dtype_without_changing_it():
    moe = MoE(4, 4, 2, d_ff=8).eval()
    blocks = {"Mixtral": real_code.mixtral_block(moe), "Qwen3-MoE": real_code.qwen3_moe_block(moe),
              "gpt-oss": real_code.gpt_oss_mlp(MoE(4, 4, 2, d_ff=8, bias=True).eval())}
    line = real_code.routing_weight_dtypes(blocks)
    assert line == "routing weights of a bfloat16 copy: Mixtral float32, Qwen3-MoE bfloat16, gpt-oss bfloat16"
    assert all(p.dtype == torch.float32 for b in blocks.values() for p in b.parameters())
