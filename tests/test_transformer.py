import pytest
import torch

from helpers.ffn import FFN
from helpers.transformer import GPTConfig, TinyGPT, answer_accuracy, train_lm


def toy_data(n=32, t=6, vocab=11):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (n, t), generator=g)
    targets = torch.roll(ids, -1, dims=1)   # learnable: predict the next token of a cyclic sequence
    targets[:, -1] = -100
    return ids, targets


def test_shapes_and_ffn_is_the_course_ffn():
    model = TinyGPT(GPTConfig(vocab_size=11, d_model=16, n_heads=2, variant="swiglu"))
    assert all(isinstance(b.ffn, FFN) and b.ffn.variant == "swiglu" for b in model.blocks)
    ids, _ = toy_data()
    assert model(ids).shape == (32, 6, 11)


def test_training_is_deterministic_and_learns():
    ids, targets = toy_data()
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyGPT(GPTConfig(vocab_size=11, d_model=16, n_heads=2))
        runs.append(train_lm(model, ids, targets, steps=60, lr=1e-2, batch_size=16, progress=False))
    assert runs[0] == runs[1]
    assert runs[0][-1] < 0.5 * runs[0][0]


def test_ffn_factory_and_records():
    class Recorder(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ffn = FFN(d)

        def forward(self, x):
            return self.ffn(x), {"calls": 1}

    model = TinyGPT(GPTConfig(vocab_size=11, d_model=16, n_heads=2), ffn_factory=lambda i: Recorder(16))
    ids, _ = toy_data()
    model(ids)
    assert model.ffn_records() == [{"calls": 1}, {"calls": 1}]


def test_answer_accuracy():
    model = TinyGPT(GPTConfig(vocab_size=11, d_model=16, n_heads=2))
    ids, _ = toy_data()
    acc = answer_accuracy(model, ids, torch.zeros(32, dtype=torch.long), ids[:, 1])
    assert 0.0 <= acc <= 1.0


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 0}, "vocab_size must be a positive int, got 0"),
    ({"vocab_size": 5, "d_model": 10, "n_heads": 4}, "d_model must be divisible by n_heads"),
    ({"vocab_size": 5, "variant": "mlp"}, "variant must be one of"),
])
def test_bad_config(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GPTConfig(**kwargs)


def test_bad_ids():
    model = TinyGPT(GPTConfig(vocab_size=11, d_model=16, n_heads=2, max_len=4))
    with pytest.raises(TypeError, match="ids must be a"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="more than max_len=4"):
        model(torch.zeros(2, 5, dtype=torch.long))
