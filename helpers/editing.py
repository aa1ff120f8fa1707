r"""Edit a fact with a rank-one change of one FFN's value matrix (ROME, Meng et al. 2022).

Read the contracting map of layer ``l`` as a linear associative memory: it maps
a key ``k`` (the memory coefficients, ``(d_ff,)``) to a value ``W k`` (``W`` =
``W2``, ``(d_model, d_ff)``; the bias ``b2`` is left alone). To make it map one
new key ``k*`` to a chosen ``v*`` while disturbing the other keys as little as
possible (least squares, weighted by the key statistics ``C = E[k kᵀ]``),
ROME's closed form is

    Ŵ = W + Λ (C⁻¹ k*)ᵀ,        Λ = (v* − W k*) / ((C⁻¹ k*)ᵀ k*),

after which ``Ŵ k* = v*`` exactly, and any other key ``k`` receives
``(Ŵ − W) k = (v* − W k*) · α(k)`` with ``α(k) = (C⁻¹k*)ᵀk / (C⁻¹k*)ᵀk*``: small for keys unlike ``k*`` in
the metric of ``C⁻¹`` (whitened by the key statistics). With ``C = I`` the edit ignores those statistics and
spills onto every key that resembles ``k*`` in raw coordinates (notebook 03, Exercise 5).

Steps, each a function here:

1. ``key_second_moment``: ``C`` from many keys, regularised (``+ λ I``) when rank-deficient.
2. ``optimise_deltas``: choose ``δ = v* − W k*`` by gradient descent so that the edited
   model gives the new answer, optionally while *keeping* other answers. Because the
   keys of layer ``l`` do not depend on layer ``l``'s own output, the edited model is
   exactly the original one with ``α(k_t) δ`` added to the FFN output at every position
   ``t``: the optimisation sees the real edit, not an approximation.
3. ``rank_one_update``: the closed form (batched over many edits).
4. ``edited``: a context manager that applies ``Ŵ`` temporarily; ``edit_effects`` (and the older
   ``edit_outcomes``) measure efficacy, specificity and what happened to chosen other facts.

``mean_keys`` averages a key over several prompts (ROME averages the subject's key over prefixes), and
``rome_edits`` runs steps 2-3 for E edits at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validate
from helpers.memory import _ids, find_ffns, logits_of


def key_second_moment(keys: torch.Tensor, ridge: float = 1e-3) -> torch.Tensor:
    """``C = E[k kᵀ] + λ I`` from keys ``(M, d_ff)``; returns ``(d_ff, d_ff)``.

    ``λ = ridge · trace(E[k kᵀ]) / d_ff`` (a share of the mean eigenvalue), so ``C`` is
    invertible even when fewer than ``d_ff`` independent keys were seen.
    """
    validate.float_tensor("keys", keys, min_dims=2)
    if keys.dim() != 2:
        raise ValueError(f"keys must be (M, d_ff), got shape {tuple(keys.shape)}")
    validate.non_negative_float("ridge", ridge)
    keys = keys.double()
    second = keys.T @ keys / keys.shape[0]
    lam = ridge * second.diagonal().mean()
    return (second + lam * torch.eye(second.shape[0], dtype=second.dtype)).float()


def rank_one_update(W: torch.Tensor, C: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor) -> torch.Tensor:
    """ROME's closed form: ``Ŵ = W + Λ (C⁻¹k*)ᵀ`` with ``Λ = (v* − W k*) / ((C⁻¹k*)ᵀ k*)``.

    Shapes: ``W`` ``(d_out, d_in)``, ``C`` ``(d_in, d_in)``; one edit: ``k_star`` ``(d_in,)``,
    ``v_star`` ``(d_out,)`` -> ``(d_out, d_in)``; E edits at once: ``k_star`` ``(E, d_in)``,
    ``v_star`` ``(E, d_out)`` -> ``(E, d_out, d_in)`` (each edit applied alone to ``W``).
    """
    validate.float_tensor("W", W, min_dims=2)
    d_out, d_in = W.shape
    validate.float_tensor("C", C, last_dim=d_in, last_dim_name="d_in", min_dims=2)
    validate.float_tensor("k_star", k_star, last_dim=d_in, last_dim_name="d_in")
    validate.float_tensor("v_star", v_star, last_dim=d_out, last_dim_name="d_out")
    if k_star.shape[:-1] != v_star.shape[:-1]:
        raise ValueError(f"k_star and v_star must hold the same number of edits, got shapes "
                         f"{tuple(k_star.shape)} and {tuple(v_star.shape)}")
    u = torch.linalg.solve(C, k_star.unsqueeze(-1)).squeeze(-1)           # C⁻¹k*: (..., d_in)
    residual = v_star - k_star @ W.T                                      # v* − W k*: (..., d_out)
    lam = residual / (u * k_star).sum(-1, keepdim=True)                   # Λ: (..., d_out)
    return W + lam.unsqueeze(-1) * u.unsqueeze(-2)


def edit_scales(C: torch.Tensor, k_star: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``α(k) = (C⁻¹k*)ᵀk / (C⁻¹k*)ᵀk*``: how much of an edit's ``δ`` a key ``k`` receives.

    Shapes: ``k_star`` ``(E, d_ff)``, ``keys`` ``(E, ..., d_ff)`` -> ``(E, ...)``. ``α(k*) = 1``.
    """
    u = torch.linalg.solve(C, k_star.T).T                                 # (E, d_ff)
    denominator = (u * k_star).sum(-1)                                    # (E,)
    shape = (u.shape[0],) + (1,) * (keys.dim() - 2) + (u.shape[1],)
    return (keys * u.reshape(shape)).sum(-1) / denominator.reshape(shape[:-1])


def mean_keys(keys: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One key per edit, averaged over several prompts, as ROME averages the subject's key over contexts.

    ``keys``: ``(N, T, d_ff)`` one layer's coefficients; ``rows``: bool ``(E, N)``, the prompts of each edit
    (e.g. every prompt about its subject); ``positions``: ``(N,)`` where each prompt's key is read (e.g. the
    subject). Returns ``(E, d_ff)``.
    """
    if not isinstance(rows, torch.Tensor) or rows.dtype != torch.bool or rows.dim() != 2 or \
            rows.shape[1] != keys.shape[0] or not rows.any(dim=1).all():
        raise ValueError(f"rows must be a bool mask (E, N={keys.shape[0]}) with at least one row per edit")
    at = keys[torch.arange(keys.shape[0]), positions]                                # (N, d_ff)
    weights = rows.to(at.dtype)
    return weights @ at / weights.sum(dim=1, keepdim=True)


@dataclass
class EditPrompts:
    """The prompts that steer the choice of ``δ``, for E edits at once.

    Attributes:
        ids: ``(R, T)`` prompts. edit: ``(R,)`` which edit each row belongs to (0..E-1).
        answer_pos: ``(R,)`` where the answer is predicted. target: ``(R,)`` the answer wanted there.
        weight: ``(R,)`` loss weight (e.g. 1 for the edited fact, a keep weight for facts to keep).
        scales: ``(R, T)`` ``α`` at every position (``edit_scales``).
    """

    ids: torch.Tensor
    edit: torch.Tensor
    answer_pos: torch.Tensor
    target: torch.Tensor
    weight: torch.Tensor
    scales: torch.Tensor


def edit_prompts(ids: torch.Tensor, answer_pos: torch.Tensor, keys: torch.Tensor, C: torch.Tensor,
                 k_star: torch.Tensor, edit_rows: torch.Tensor, new_ids: torch.Tensor,
                 keep_rows: list[torch.Tensor] | torch.Tensor | None = None, keep_ids: torch.Tensor | None = None,
                 keep_weight: float = 1.0) -> EditPrompts:
    """Assemble the ``EditPrompts`` for E edits of a data set of facts.

    Args:
        ids, answer_pos: the data set, ``(N, T)`` and ``(N,)``.
        keys: ``(N, T, d_ff)`` the edited layer's memory coefficients on ``ids``.
        C: ``(d_ff, d_ff)`` key second moment. k_star: ``(E, d_ff)`` the key of each edit.
        edit_rows: ``(E,)`` the row whose answer changes; new_ids: ``(E,)`` its new answer.
        keep_rows: optional, per edit, rows whose answer must stay ``keep_ids[row]`` (``keep_ids``: ``(N,)``),
            each weighted by ``keep_weight`` in the loss: a list of E index tensors, or a bool mask ``(E, N)``.
    """
    E = edit_rows.shape[0]
    if isinstance(keep_rows, torch.Tensor) and keep_rows.dtype == torch.bool:
        if keep_rows.shape != (E, ids.shape[0]):
            raise ValueError(f"a keep_rows mask must have shape (E, N) = {(E, ids.shape[0])}, got "
                             f"{tuple(keep_rows.shape)}")
        keep_rows = [torch.nonzero(row)[:, 0] for row in keep_rows]
    if k_star.shape[0] != E or new_ids.shape[0] != E:
        raise ValueError(f"k_star, edit_rows and new_ids must describe the same number of edits, got "
                         f"{k_star.shape[0]}, {E}, {new_ids.shape[0]}")
    rows, edit, target, weight = list(edit_rows.tolist()), list(range(E)), list(new_ids.tolist()), [1.0] * E
    if keep_rows is not None:
        if keep_ids is None or len(keep_rows) != E:
            raise ValueError("keep_rows needs one entry per edit and keep_ids the answers to keep")
        validate.non_negative_float("keep_weight", keep_weight)
        for e, extra in enumerate(keep_rows):
            for row in extra.tolist():
                rows.append(row)
                edit.append(e)
                target.append(int(keep_ids[row]))
                weight.append(keep_weight)
    rows_t, edit_t = torch.tensor(rows), torch.tensor(edit)
    scales = edit_scales(C, k_star[edit_t], keys[rows_t])
    return EditPrompts(ids[rows_t], edit_t, answer_pos[rows_t], torch.tensor(target), torch.tensor(weight), scales)


def optimise_deltas(model: nn.Module, layer: int, prompts: EditPrompts, n_edits: int, *, steps: int = 40,
                    lr: float = 0.5, l2: float = 0.0) -> torch.Tensor:
    """Choose ``δ_e = v*_e − W k*_e`` for ``n_edits`` edits at once; returns ``(n_edits, d_model)``.

    Minimises, over all rows r, ``weight_r · CE(logits_r[answer_pos_r], target_r)`` summed
    per edit, plus ``l2 · ||δ_e||²``, where the model runs with ``scales[r, t] · δ_{edit_r}``
    added to layer ``layer``'s FFN output: exactly what the rank-one edit will do.
    Adam, ``steps`` steps, full batch. The model's weights are not changed.

    How this differs from ROME's ``compute_v``: ROME optimises δ added to the FFN output at the subject's
    last token alone, and only then solves for ``Ŵ``; here δ is optimised through the rank-one edit itself,
    so the edit's effect at every other position (``α(k_t) δ``) is already in the loss. That is exact
    because layer ``l``'s keys do not depend on layer ``l``'s own output.
    """
    memories = find_ffns(model)
    ffn = memories.layer(layer)
    validate.positive_int("n_edits", n_edits)
    validate.positive_int("steps", steps)
    validate.positive_float("lr", lr)
    validate.non_negative_float("l2", l2)
    ids = _ids(prompts.ids, "prompts.ids")
    if int(prompts.edit.max()) >= n_edits or int(prompts.edit.min()) < 0:
        raise ValueError(f"prompts.edit must hold edit numbers in [0, {n_edits - 1}]")
    d_model = ffn.values.shape[1]
    delta = torch.zeros(n_edits, d_model, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)
    scales = prompts.scales.unsqueeze(-1)                                  # (R, T, 1)
    rows = torch.arange(ids.shape[0])

    def add_delta(module, inputs, output):
        return output + scales * delta[prompts.edit].unsqueeze(1)

    handle = ffn.module.register_forward_hook(add_delta)
    was_training = model.training
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        for _ in range(steps):
            logits = logits_of(model, ids)[rows, prompts.answer_pos]
            losses = F.cross_entropy(logits, prompts.target, reduction="none") * prompts.weight
            loss = losses.sum() + l2 * (delta ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        handle.remove()
        for p in model.parameters():
            p.requires_grad_(True)
        model.train(was_training)
    return delta.detach()


def rome_edits(model: nn.Module, layer: int, keys: torch.Tensor, C: torch.Tensor, k_stars: torch.Tensor,
               ids: torch.Tensor, answer_pos: torch.Tensor, edit_rows: torch.Tensor, new_ids: torch.Tensor, *,
               keep_rows: list[torch.Tensor] | torch.Tensor | None = None, keep_ids: torch.Tensor | None = None,
               keep_weight: float = 1.0, steps: int = 40, lr: float = 0.5, l2: float = 3e-3) -> torch.Tensor:
    """E rank-one edits of ``layer``'s ``W2``, each made alone: ``(E, d_model, d_ff)``, one ``Ŵ`` per edit.

    The steps of the module docstring: ``keys`` ``(N, T, d_ff)`` are the layer's coefficients on ``ids``, ``C``
    their second moment (``key_second_moment``), ``k_stars`` ``(E, d_ff)`` the edited keys; ``δ`` comes from
    ``optimise_deltas`` (with the keep term when ``keep_rows`` is given, see ``edit_prompts``), then
    ``Ŵ = rank_one_update(W, C, k*, W k* + δ)``.
    """
    prompts = edit_prompts(ids, answer_pos, keys, C, k_stars, edit_rows, new_ids, keep_rows=keep_rows,
                           keep_ids=keep_ids, keep_weight=keep_weight)
    deltas = optimise_deltas(model, layer, prompts, n_edits=k_stars.shape[0], steps=steps, lr=lr, l2=l2)
    W = find_ffns(model).layer(layer).value_matrix.detach()
    return rank_one_update(W, C, k_stars, k_stars @ W.T + deltas)


@dataclass
class EditEffects:
    """What E edits, each applied alone, did to the predictions on chosen rows.

    Attributes:
        success: ``(E,)`` bool, the edited fact now gets its new answer.
        unchanged: ``(E, R)`` bool, row ``rows[r]``'s prediction is the same as before the edit.
        rows: ``(R,)`` the rows that were evaluated.
    """

    success: torch.Tensor
    unchanged: torch.Tensor
    rows: torch.Tensor

    def kept(self, among: torch.Tensor) -> torch.Tensor:
        """``(E,)`` per edit, the share of unchanged predictions among the rows ``among`` marks: a bool mask
        ``(E, N)`` over the whole data set (e.g. every other subject's facts), restricted to ``rows``."""
        chosen = among[:, self.rows].float()
        return (self.unchanged.float() * chosen).sum(1) / chosen.sum(1)


def edit_effects(model: nn.Module, layer: int, W_hats: torch.Tensor, ids: torch.Tensor, answer_pos: torch.Tensor,
                 edit_rows: torch.Tensor, new_ids: torch.Tensor,
                 rows: torch.Tensor | None = None) -> EditEffects:
    """Apply each ``W_hats[e]`` (``(E, d_model, d_ff)``) alone and compare the predictions on ``rows`` of ``ids``
    (default: every row; an empty tensor checks only the edited facts) with the unedited model's;
    ``edit_rows[e]`` should get ``new_ids[e]``."""
    rows = torch.arange(ids.shape[0]) if rows is None else rows
    checked = rows.numel() > 0
    before = predictions(model, ids[rows], answer_pos[rows]) if checked else None
    success, unchanged = [], []
    for e in range(W_hats.shape[0]):
        with edited(model, layer, W_hats[e]):
            target = predictions(model, ids[edit_rows[e:e + 1]], answer_pos[edit_rows[e:e + 1]])
            after = predictions(model, ids[rows], answer_pos[rows]) if checked else None
        success.append(bool(target[0] == new_ids[e]))
        unchanged.append(after == before if checked else torch.zeros(0, dtype=torch.bool))
    return EditEffects(torch.tensor(success), torch.stack(unchanged), rows)


@contextmanager
def edited(model: nn.Module, layer: int, W_hat: torch.Tensor) -> Iterator[None]:
    """Inside the ``with`` block, layer ``layer``'s value matrix ``W2`` ``(d_model, d_ff)`` is ``W_hat``."""
    ffn = find_ffns(model).layer(layer)
    W = ffn.value_matrix
    if W_hat.shape != W.shape:
        raise ValueError(f"W_hat must have the shape of W2, {tuple(W.shape)}, got {tuple(W_hat.shape)}")
    saved = W.detach().clone()
    with torch.no_grad():
        W.copy_(W_hat)
    try:
        yield
    finally:
        with torch.no_grad():
            W.copy_(saved)


@torch.no_grad()
def predictions(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the model's top next token at ``answer_pos`` of each row."""
    was_training = model.training
    model.eval()
    logits = logits_of(model, _ids(ids))
    model.train(was_training)
    return logits[torch.arange(ids.shape[0]), answer_pos].argmax(-1)


@dataclass
class EditOutcome:
    """What one edit did to a data set of facts.

    Attributes:
        success: the edited fact now gets the new answer.
        kept_other_subjects: share of facts about other subjects whose prediction did not change.
        kept_same_subject: share of the same subject's other facts whose prediction did not change.
    """

    success: bool
    kept_other_subjects: float
    kept_same_subject: float


def edit_outcomes(model: nn.Module, layer: int, W_hats: torch.Tensor, ids: torch.Tensor, answer_pos: torch.Tensor,
                  edit_rows: torch.Tensor, new_ids: torch.Tensor, subject_of_row: torch.Tensor) -> list[EditOutcome]:
    """Apply each ``W_hats[e]`` ``(E, d_model, d_ff)`` alone and compare predictions on every row of ``ids``.

    ``edit_rows[e]`` is the row of the edited fact, ``new_ids[e]`` its new answer, ``subject_of_row``
    ``(N,)`` an integer subject code per row (rows with the edited row's code are "same subject").
    """
    before = predictions(model, ids, answer_pos)
    outcomes = []
    for e in range(W_hats.shape[0]):
        with edited(model, layer, W_hats[e]):
            after = predictions(model, ids, answer_pos)
        row = int(edit_rows[e])
        same = subject_of_row == subject_of_row[row]
        same[row] = False
        other = subject_of_row != subject_of_row[row]
        unchanged = after == before
        outcomes.append(EditOutcome(bool(after[row] == new_ids[e]), unchanged[other].float().mean().item(),
                                    unchanged[same].float().mean().item()))
    return outcomes


def template_ids(vocab, subjects: list[str], template: str) -> torch.Tensor:
    """``(S, T)`` long: ``<bos>`` and the words of ``template.format(subject)`` for each subject, e.g. a held-out
    paraphrase such as ``"the official capital of {} is"`` that no training row contains. ``vocab`` is a
    ``helpers.facts.Vocab``; every word must be in it (``vocab.encode`` names the one that is not); the
    answer is predicted at the last position."""
    rows = [vocab.encode([vocab.tokens[vocab.bos_id], *template.format(subject).split()]) for subject in subjects]
    if len({len(r) for r in rows}) != 1:
        raise ValueError("template must give every subject a prompt of the same length (one-word subjects)")
    return torch.tensor(rows)


@dataclass
class Preferences:
    """ROME's "prefers the new answer" test on prompts the edits were not trained on, before and after each edit.

    Attributes:
        edited_before, edited_after: ``(E,)`` bool, the edited subject's prompt gives the new answer a higher
            logit than its true answer.
        untouched_before, untouched_after: ``(E,)`` float, the share of the other subjects' prompts whose logit
            for edit ``e``'s new answer beats their own true answer (the control: what the edit does to facts
            it should leave alone).
    """

    edited_before: torch.Tensor
    edited_after: torch.Tensor
    untouched_before: torch.Tensor
    untouched_after: torch.Tensor


@torch.no_grad()
def preferences(model: nn.Module, layer: int, W_hats: torch.Tensor, ids: torch.Tensor, true_ids: torch.Tensor,
                edited_subjects: torch.Tensor, new_ids: torch.Tensor) -> Preferences:
    """Apply each ``W_hats[e]`` (``(E, d_model, d_ff)``) alone and read the last position of ``ids``
    (``(S, T)``, one prompt per subject, e.g. ``template_ids``); ``true_ids`` ``(S,)`` are the prompts' true
    answers, ``edited_subjects`` ``(E,)`` the edited subject's row of ``ids``, ``new_ids`` ``(E,)`` its new answer."""
    was_training = model.training
    model.eval()
    S, E = ids.shape[0], W_hats.shape[0]
    rows = torch.arange(S)

    def beats(logits: torch.Tensor, e: int) -> torch.Tensor:    # (S,) the new answer beats each true answer
        return logits[:, new_ids[e]] > logits[rows, true_ids]

    before = logits_of(model, ids)[:, -1]
    out = {name: [] for name in ("edited_before", "edited_after", "untouched_before", "untouched_after")}
    for e in range(E):
        with edited(model, layer, W_hats[e]):
            after = logits_of(model, ids)[:, -1]
        others = rows != edited_subjects[e]
        for when, logits in (("before", before), ("after", after)):
            b = beats(logits, e)
            out[f"edited_{when}"].append(b[edited_subjects[e]])
            out[f"untouched_{when}"].append(b[others].float().mean())
    model.train(was_training)
    return Preferences(**{name: torch.stack(values) for name, values in out.items()})
