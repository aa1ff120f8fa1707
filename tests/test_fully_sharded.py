"""Fully sharded data parallelism: shards, the formulas, and a real sharded step on 2 and 3 gloo processes equal to
one process, sending what the formula says (two all-gathers and one reduce-scatter of every weight)."""
import pytest
import torch

from helpers.distributed import launch
from helpers.ffn import FFN
from helpers.fully_sharded import (FullyShardedFFN, fully_sharded_bytes_per_step, fully_sharded_flops_per_byte,
                                   fully_sharded_job, shard_of)
from helpers.tensor_parallel import max_relative_differences, reference_pass


def test_shards_cover_the_flat_tensor_once_padded_with_zeros():
    t = torch.arange(10.0).reshape(2, 5)
    for world in (1, 2, 3, 4, 10, 12):
        shards = [shard_of(t, r, world) for r in range(world)]
        assert len({s.numel() for s in shards}) == 1
        flat = torch.cat(shards)
        assert torch.equal(flat[:10], t.reshape(-1)) and not flat[10:].any()
    with pytest.raises(ValueError, match="rank must be an int in"):
        shard_of(t, 2, 2)


def test_formulas():
    assert fully_sharded_bytes_per_step(1000, 1) == 0
    assert fully_sharded_bytes_per_step(1000, 4, bytes_per_element=2) == 3 * 0.75 * 1000 * 2
    assert fully_sharded_flops_per_byte(2048, 2, bytes_per_element=2) == 4096         # 2·B_r·R/((R−1)·s)
    assert fully_sharded_flops_per_byte(2000, 1001, bytes_per_element=2) == pytest.approx(2002)   # ≈ B_r, bf16
    d, d_ff, tokens, world = 64, 256, 100, 8                                            # weights cancel:
    flops = 12 * d * d_ff * tokens                                                      # dense FFN, training
    assert flops / fully_sharded_bytes_per_step(2 * d * d_ff, world, bytes_per_element=2) == pytest.approx(
        fully_sharded_flops_per_byte(tokens, world, bytes_per_element=2))
    with pytest.raises(ValueError, match="world_size must be at least 2"):
        fully_sharded_flops_per_byte(10, 1)


def test_bad_input_is_explained():
    ffn = FFN.from_variant("gelu", 4, 8)
    with pytest.raises(TypeError, match="ffn must be a helpers.ffn.FFN"):
        fully_sharded_job(torch.nn.Linear(4, 4), torch.randn(2, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match="grad_output must be a tensor of x's shape"):
        fully_sharded_job(ffn, torch.randn(2, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match="x must be"):
        fully_sharded_job(ffn, torch.randn(2, 4, 4), torch.randn(2, 4, 4))
    with pytest.raises(RuntimeError, match="needs torch.distributed to be initialised"):
        FullyShardedFFN(ffn, 0, 2)(torch.randn(2, 4))


def _problem(variant, d, d_ff, n, bias, dtype, seed):
    torch.manual_seed(seed)
    ffn = FFN.from_variant(variant, d, d_ff, bias=bias).to(dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return ffn, torch.randn(n, d, generator=gen).to(dtype), torch.randn(n, d, generator=gen).to(dtype)


@pytest.mark.parametrize("world", [2, 3])
def test_a_sharded_step_equals_one_process_and_sends_what_the_formula_says(world):
    problems = [_problem("swiglu", 16, 48, 9, False, torch.float64, 0),        # no biases: the formula exactly
                _problem("gelu", 8, 30, 7, True, torch.float32, 1)]            # padding; biases gathered once
    run = launch([fully_sharded_job(*p) for p in problems], world_size=world, timeout=120)
    for (ffn, x, g), result, bound in zip(problems, run.results, (1e-12, 1e-6)):
        assert max(max_relative_differences(result, reference_pass(ffn, x, g)).values()) <= bound
        n_params = sum(p.numel() for p in ffn.parameters())
        assert result.n_params == n_params and sum(result.held) >= n_params and max(result.held) <= -(-n_params // world) * 4
    plain, biased = run.results
    size = plain.output.element_size()
    for rank in range(world):
        ops = [(t.op, t.phase) for t in plain.traffic[rank]]
        assert ops.count(("all_gather", "forward")) == 3 and ops.count(("all_gather", "backward")) == 3   # again
        assert ops.count(("reduce_scatter", "backward")) == 3
        assert plain.bytes_sent(rank) == pytest.approx(fully_sharded_bytes_per_step(3 * 16 * 48, world,
                                                                                     bytes_per_element=size))
        gathered_again = [t for t in biased.traffic[rank] if t.op == "all_gather" and t.phase == "backward"]
        assert len(gathered_again) == 2                                   # W1 and W2; b1, b2 are not saved
