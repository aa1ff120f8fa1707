import pytest
import torch

from helpers.mixtral_pooled import pooled_balance_loss

hf = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")


@pytest.mark.parametrize("top_k", [1, 2])
def test_it_matches_transformers_on_random_logits(top_k):
    g = torch.Generator().manual_seed(top_k)
    layers = tuple(torch.randn(50, 8, generator=g, requires_grad=True) for _ in range(3))
    ours, theirs = pooled_balance_loss(layers, 8, top_k), hf.load_balancing_loss_func(layers, 8, top_k)
    assert torch.allclose(ours, theirs, atol=1e-6)
    for a, b in zip(torch.autograd.grad(ours, layers), torch.autograd.grad(theirs, layers)):
        assert torch.allclose(a, b, atol=1e-6)


def test_it_matches_transformers_on_notebook_05s_two_layers():
    n, e = 64, 8
    favourite = torch.nn.functional.one_hot(torch.arange(n) % 4, e).float()
    layer0 = (torch.randn(n, e, generator=torch.Generator().manual_seed(1)) + 6 * favourite).requires_grad_()
    layer1 = layer0.detach().roll(4, dims=1).requires_grad_()
    ours = pooled_balance_loss((layer0, layer1), e, 1)
    theirs = hf.load_balancing_loss_func((layer0, layer1), num_experts=e, top_k=1)
    assert torch.allclose(ours, theirs, atol=1e-6) and abs(ours.item() - 1.0) < 1e-6
