"""Notebook 09, after Exercise 7: train a toy sparse autoencoder end to end with the learner's own
``training_step`` and inspect what it found.

The data and start are section 2's: the hidden vectors ``h = W x`` of one toy model (``toy_hidden``, 2,000
inputs, float64) and ``train_dictionaries``' random start (unit keys centred on the mean input, unit random
values, ``b_dec`` = the mean). The loop is the simplest one: each step draws ``batch_size`` rows with replacement
(the same draws as the course's loop for that seed) and calls ``step(W_enc, b_enc, W_dec, b_dec, batch, k, lr)``,
plain gradient descent at a constant rate. Only the optimiser differs from section 2's Adam loop, so the two
results can be set side by side.

``train_with_step`` never raises for a faulty ``step``: it returns a sentence saying what went wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from helpers import validate
from helpers.dictionary import _random_start, firing_counts, fvu, topk_codes
from helpers.superposition import best_cosines, feature_norms, toy_hidden

__all__ = ["train_with_step", "own_run_lines"]


def _reconstruct(params: Sequence[torch.Tensor], h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    W_enc, b_enc, W_dec, b_dec = params
    codes = topk_codes(h @ W_enc.T + b_enc, k)
    return codes, codes @ W_dec.T + b_dec


def train_with_step(step: Callable, W_true: torch.Tensor, sparsity: float = 0.99, *, n_inputs: int = 2000,
                    n_directions: int = 40, k: int = 1, steps: int = 2000, batch_size: int = 64, lr: float = 0.1,
                    seed: int = 0, report_at: Sequence[int] = (0, 250, 500, 1000, 2000)) -> dict | str:
    """Train a TopK autoencoder on the toy model ``W_true`` ``(m, n)``'s hidden vectors with ``step``.

    Returns ``{"fvu": {step: FVU on all inputs}, "recovered": int, "represented": int, "random": int,
    "used": int, "dead": int, "n_directions": int}``: the recovered count is of the represented true features
    (``‖W_i‖ > 0.5``) that some learned value matches at cosine > 0.95; ``random`` the same for as many random
    directions; ``used`` the directions active on some input. Or a sentence saying why it could not train.
    """
    validate.positive_int("steps", steps)
    W_true = W_true.detach().double()
    h = toy_hidden(W_true, sparsity, n=n_inputs, seed=seed)                          # (n_inputs, m)
    params = [t.double() for t in _random_start(h, h, n_directions, seed)]
    gen = torch.Generator().manual_seed(10_000 + seed)
    curve = {}
    for t in range(steps + 1):
        if t in report_at:
            curve[t] = fvu(h, _reconstruct(params, h, k)[1])
        if t == steps:
            break
        batch = h[torch.randint(0, len(h), (batch_size,), generator=gen)]
        try:
            out = step(*params, batch.clone(), k, lr)
            new = [torch.as_tensor(p, dtype=torch.float64).detach() for p in out[:4]]
        except Exception as error:  # noqa: BLE001 - the learner's code: report, never raise
            return f"your training_step failed at step {t}: {type(error).__name__}: {error}"
        if [p.shape for p in new] != [p.shape for p in params]:
            return (f"your training_step returned parameters of shapes {[tuple(p.shape) for p in new]}, expected "
                    f"{[tuple(p.shape) for p in params]}")
        if not all(torch.isfinite(p).all() for p in new):
            return f"the parameters stopped being finite at step {t + 1}: check the step's sign and size"
        params = new
    codes, _ = _reconstruct(params, h, k)
    used = int((firing_counts(codes) > 0).sum())
    represented = feature_norms(W_true) > 0.5
    random = torch.randn(W_true.shape[0], n_directions, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    return {"fvu": curve, "represented": int(represented.sum()),
            "recovered": int((best_cosines(W_true[:, represented], params[2]) > 0.95).sum()),
            "random": int((best_cosines(W_true[:, represented], random) > 0.95).sum()),
            "used": used, "dead": n_directions - used, "n_directions": n_directions}


def own_run_lines(run: dict | str) -> str:
    """The printable summary of ``train_with_step``'s result (or its sentence)."""
    if isinstance(run, str):
        return run
    steps = "".join(f"{t:>8,}" for t in run["fvu"])
    values = "".join(f"{v:8.1%}" for v in run["fvu"].values())
    return (f"step {steps}\nFVU  {values}\n"
            f"recovered at cosine > 0.95: {run['recovered']} of the {run['represented']} represented features "
            f"({run['n_directions']} random directions: {run['random']})\n"
            f"directions used: {run['used']} of {run['n_directions']}; dead (won no input): {run['dead']}")
