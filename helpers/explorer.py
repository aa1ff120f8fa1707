"""Notebook 03's neuron explorer: everything about one FFN neuron on one figure.

For any layer and neuron of a model ``helpers.memory.find_ffns`` understands: its top trigger prefixes (what
its key responds to), its mean peak activation per group of examples (e.g. per relation: the whole
distribution, not only the top of it), the tokens its value promotes and suppresses most, and what switching
this one neuron off does to the facts it fires on most. Everything is computed once in the constructor (one
batched forward pass per layer for all the knock-outs), so redrawing for another neuron runs no model; the
notebook puts ``NeuronExplorer.figure`` behind two sliders with ``helpers.plotting.interactive_plot``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from helpers import validate
from helpers.interventions import knock_out
from helpers.memory import (_ids, answer_probability, collect, find_ffns, group_profile, logits_of,
                            peak_coefficients, top_triggers, value_logits)


def answer_lead(model: nn.Module, ids: torch.Tensor, answer_pos: torch.Tensor,
                answer_id: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the answer's logit minus the largest other logit at its position (negative: not the argmax).

    Unlike P(answer), the lead keeps moving when P is near 1, so it shows what a knock-out costs a fact the
    model is sure of."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = logits_of(model, _ids(ids).to(device))[torch.arange(ids.shape[0]), answer_pos].cpu()  # (N, V)
    model.train(was_training)
    answer = logits.gather(1, answer_id[:, None])[:, 0]
    return answer - logits.scatter(1, answer_id[:, None], float("-inf")).amax(1)


def runner_up(logits: torch.Tensor, answer_id: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the word with the largest logit other than the answer, for ``logits (N, V)``, ``answer_id (N,)``."""
    return logits.scatter(1, answer_id[:, None], float("-inf")).argmax(1)


class NeuronExplorer:
    """Everything notebook 03's neuron explorer shows, computed once so that a redraw is instant.

    For any layer and neuron: its top trigger prefixes, its mean peak activation per group of examples
    (e.g. per relation), the tokens its value promotes and suppresses most, and what switching it off does
    to the answers of the facts it fires on most.

    Args:
        model: a model ``find_ffns`` understands. ids: ``(N, T)`` examples. valid: ``(N, T)`` bool prefix ends.
        answer_pos, answer_id: ``(N,)`` where each example's answer is predicted, and the answer.
        tokens: the vocabulary's words (``tokens[i]`` is token ``i``). groups: one label per example.
        row_labels: a short text per example (for the knock-out panel).
        k: how many triggers to list. n_tokens: promoted and suppressed tokens shown. n_facts: facts knocked out.
        biases: how values are read (see ``project_to_vocab``). group_kind: what a group is, for the figure's title.
    """

    def __init__(self, model: nn.Module, ids: torch.Tensor, valid: torch.Tensor, answer_pos: torch.Tensor,
                 answer_id: torch.Tensor, tokens: Sequence[str], groups: Sequence[object],
                 row_labels: Sequence[str], *, k: int = 8, n_tokens: int = 6, n_facts: int = 8,
                 biases: bool = False, group_kind: str = "relation") -> None:
        self.model, self.memories = model, find_ffns(model)
        self.ids, self.valid = _ids(ids), valid
        self.answer_pos, self.answer_id = answer_pos, answer_id
        self.tokens, self.row_labels = list(tokens), list(row_labels)
        self.n_tokens, self.n_facts, self.biases, self.group_kind = n_tokens, n_facts, biases, group_kind
        trace = collect(model, ids)
        rows = torch.arange(ids.shape[0])
        self.triggers = [top_triggers(c, k, valid) for c in trace.coefficients]          # (d_ff, k) each
        self.profiles, self.group_names = [], []
        for c in trace.coefficients:
            profile, names = group_profile(peak_coefficients(c, valid), groups)
            self.profiles.append(profile)                                                 # (d_ff, G)
            self.group_names = names
        self.at_answer = [c[rows, answer_pos] for c in trace.coefficients]                # (N, d_ff) each
        self.values = [value_logits(model, layer, biases=biases) for layer in range(self.memories.n_layers)]
        self.p_before = answer_probability(model, ids, answer_pos, answer_id)              # (N,)
        self.lead_before = answer_lead(model, ids, answer_pos, answer_id)                   # (N,)
        # every neuron's knock-out, precomputed: one batched forward pass per layer, each row of the batch
        # silencing one neuron at one of the n_facts facts it fires on most (so a redraw runs no model)
        self.ko_rows, self.ko_after, self.ko_lead_after = [], [], []
        for layer, at in enumerate(self.at_answer):
            d_ff = at.shape[1]
            top_rows = at.topk(min(n_facts, at.shape[0]), dim=0).indices.T                  # (d_ff, n_facts)
            flat = top_rows.reshape(-1)                                                      # (d_ff·n_facts,)
            mask = torch.zeros(flat.shape[0], d_ff, dtype=torch.bool)
            mask[torch.arange(flat.shape[0]), torch.arange(d_ff).repeat_interleave(top_rows.shape[1])] = True
            with knock_out(model, layer, mask):
                after = answer_probability(model, self.ids[flat], answer_pos[flat], answer_id[flat])
                lead_after = answer_lead(model, self.ids[flat], answer_pos[flat], answer_id[flat])
            self.ko_rows.append(top_rows)
            self.ko_after.append(after.view(d_ff, -1))                                      # (d_ff, n_facts)
            self.ko_lead_after.append(lead_after.view(d_ff, -1))                            # (d_ff, n_facts)

    @property
    def n_layers(self) -> int:
        return self.memories.n_layers

    def knock_out_effect(self, layer: int, neuron: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``n_facts`` examples where ``neuron`` fires most at the answer position, and P(answer) for
        each before and after switching that one neuron off: ``(rows, p_before, p_after)``."""
        ffn = self.memories.layer(layer)
        validate.int_in_range("neuron", neuron, 0, ffn.d_ff - 1)
        rows = self.ko_rows[layer][neuron]
        return rows, self.p_before[rows], self.ko_after[layer][neuron]

    def knock_out_lead(self, layer: int, neuron: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``knock_out_effect``, with the answer's lead over the runner-up (logits, ``answer_lead``) in
        place of P(answer): ``(rows, lead_before, lead_after)``."""
        rows, _, _ = self.knock_out_effect(layer, neuron)
        return rows, self.lead_before[rows], self.ko_lead_after[layer][neuron]

    def knock_out_logits(self, layer: int, neuron: int) -> tuple[torch.Tensor, torch.Tensor]:
        """At the facts of ``knock_out_effect``, every word's logit at the answer position with the neuron on
        and off: ``(on, off)``, each ``(n_facts, vocab)``. Shows *which* words the neuron moves: whether a
        word it suppresses is ever the answer's runner-up there (``runner_up``)."""
        rows, _, _ = self.knock_out_effect(layer, neuron)
        positions = torch.arange(len(rows)), self.answer_pos[rows]
        with torch.no_grad():
            on = logits_of(self.model, self.ids[rows])[positions]
            with knock_out(self.model, layer, [neuron]):
                off = logits_of(self.model, self.ids[rows])[positions]
        return on, off

    def figure(self, layer: int, neuron: int):
        """One figure about one neuron: its top triggers (across the top), its mean peak per group, what its
        value promotes and suppresses, and what switching it off does to the facts it fires on most."""
        import matplotlib.pyplot as plt

        ffn = self.memories.layer(layer)
        validate.int_in_range("neuron", neuron, 0, ffn.d_ff - 1)
        fig = plt.figure(figsize=(13, 6.2), layout="constrained")
        grid = fig.add_gridspec(2, 3, height_ratios=[0.3, 1])
        text_ax = fig.add_subplot(grid[0, :])
        group_ax, value_ax, ko_ax = (fig.add_subplot(grid[1, j]) for j in range(3))

        tr = self.triggers[layer]
        text_ax.axis("off")
        rows = []
        for e, p, v in zip(tr.examples[neuron].tolist(), tr.positions[neuron].tolist(),
                           tr.coefficients[neuron].tolist()):
            words = [w for w in (self.tokens[i] for i in self.ids[e, :p + 1].tolist()) if w not in ("<bos>", "<pad>")]
            prefix = " ".join(words)
            prefix = prefix if len(prefix) <= 44 else "…" + prefix[-43:]
            rows.append((v, prefix, self.tokens[int(self.ids[e, p + 1])]))
        width = max(len(prefix) for _, prefix, _ in rows)
        lines = [f"m = {v:5.2f}  {prefix:{width}s}  → {word}" for v, prefix, word in rows]
        half = (len(lines) + 1) // 2
        for column, chunk in enumerate([lines[:half], lines[half:]]):
            text_ax.text(0.5 * column, 1.0, "\n".join(chunk), va="top", ha="left", family="monospace", fontsize=9,
                         transform=text_ax.transAxes)
        text_ax.set_title(f"Layer {layer}, neuron {neuron}: its top {len(lines)} trigger prefixes → the next token",
                          loc="left", fontsize=12)

        profile = self.profiles[layer][neuron]
        names = [str(n) for n in self.group_names]
        group_ax.bar(names, profile.tolist(), color=["#0072B2" if v >= 0 else "#D55E00" for v in profile.tolist()])
        group_ax.axhline(0, color="0.4", lw=0.8)
        group_ax.tick_params(axis="x", rotation=30)
        group_ax.set(ylabel="mean peak coefficient m", title=f"Where it fires: mean peak per {self.group_kind}")

        logits = self.values[layer][neuron]
        top, bottom = logits.topk(self.n_tokens), logits.topk(self.n_tokens, largest=False)
        order = torch.cat([top.indices, bottom.indices.flip(0)])
        heights = logits[order]
        ys = list(range(len(order)))
        value_ax.barh(ys, heights.tolist(), color=["#009E73" if v > 0 else "#D55E00" for v in heights.tolist()])
        value_ax.set_yticks(ys, [self.tokens[i] for i in order.tolist()], fontsize=9)
        value_ax.invert_yaxis()
        value_ax.axvline(0, color="0.4", lw=0.8)
        read = "lm_head(ln_f(v))" if self.biases else "no biases"
        value_ax.set(xlabel=f"logit of its value ({read})", title="What it writes: most promoted / suppressed")

        rows, before, after = self.knock_out_lead(layer, neuron)
        change = (after - before).tolist()
        ys = list(range(len(rows)))
        limit = max(0.5, 2.2 * max(abs(c) for c in change))             # room for a label beyond the longest bar
        ko_ax.barh(ys, change, color=["#009E73" if c < 0 else "#D55E00" for c in change])
        for y, (c, b) in enumerate(zip(change, before.tolist())):          # each label at its bar's end
            ko_ax.text(c + (0.02 if c >= 0 else -0.02) * limit, y, f"{b:.1f} → {b + c:.1f}", va="center",
                       ha="left" if c >= 0 else "right", fontsize=9)
        labels = [self.row_labels[r] if len(self.row_labels[r]) <= 26 else self.row_labels[r][:25] + "…"
                  for r in rows.tolist()]
        ko_ax.set_yticks(ys, labels, fontsize=9)
        ko_ax.invert_yaxis()
        ko_ax.axvline(0, color="0.4", lw=0.8)
        ko_ax.set(xlim=(-limit, limit), xlabel="change in the answer's lead over the runner-up (logits)",
                  title=f"Only it off: its top {len(rows)} facts")
        from matplotlib.patches import Patch
        ko_ax.legend(handles=[Patch(color="#009E73", label="lead shrinks: on, it helped the answer"),
                              Patch(color="#D55E00", label="lead grows: on, it helped the runner-up")],
                     fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
        return fig
