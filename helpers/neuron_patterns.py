"""What a layer's neurons' top triggers share, read against a baseline (notebook 03, sections 2 and Exercise 6).

A neuron's top-k triggers (``memory.top_triggers``) "share" a label when at least ``threshold`` of them carry it.
Prompts of one template share words and positions, so even an untrained network's neurons pass that test often:
these functions return the numbers to compare across trained and untrained networks, never a verdict.
"""

from collections.abc import Mapping, Sequence

import torch

from helpers import validate
from helpers.memory import pattern_neuron_share, pattern_share, top_triggers


def _counted(c: torch.Tensor, valid: torch.Tensor, name: str, rows: torch.Tensor | None,
             labels: Sequence[object]) -> tuple[torch.Tensor, torch.Tensor]:
    """The counted prompts' ``(coefficients, valid)`` of one labelling, checked to hold one label per prompt."""
    c_rows, valid_rows = (c, valid) if rows is None else (c[rows], valid[rows])
    if len(labels) != c_rows.shape[0]:
        raise ValueError(f"labellings[{name!r}] must give one label per counted prompt "
                         f"({c_rows.shape[0]}), got {len(labels)}")
    return c_rows, valid_rows


def pattern_share_table(coefficients: Sequence[torch.Tensor], valid: torch.Tensor,
                        labellings: Mapping[str, tuple[torch.Tensor | None, Sequence[object]]],
                        k: int = 10, threshold: float = 0.8) -> torch.Tensor:
    """``(n_models, n_labellings)`` float32: per model and labelling, the share of neurons whose top-k triggers carry
    one label in at least ``threshold`` of them (``memory.pattern_neuron_share``).

    Args:
        coefficients: one ``(N, T, d_ff)`` tensor per model (one layer each), on the same N prompts.
        valid: ``(N, T)`` bool, the positions that count as prefix ends.
        labellings: name -> ``(rows, labels)``: ``rows`` an ``(N,)`` bool mask of the prompts counted (``None``:
            all), ``labels`` one label per counted prompt (e.g. the subject's continent on prompts not asking it).
    """
    if not labellings:
        raise ValueError("labellings must name at least one (rows, labels) pair, got none")
    table = []
    for c in coefficients:
        row = []
        for name, (rows, labels) in labellings.items():
            c_rows, valid_rows = _counted(c, valid, name, rows, labels)
            row.append(pattern_neuron_share(c_rows, valid_rows, labels, k, threshold))
        table.append(row)
    return torch.tensor(table)


def random_set_share(labels: Sequence[object], k: int, n_sets: int, threshold: float,
                     generator: torch.Generator) -> float:
    """Share of ``n_sets`` random sets of ``k`` prompts (without replacement) in which at least ``threshold`` of
    the prompts carry one label: how often chance alone passes the test ``pattern_share_table`` applies."""
    validate.int_in_range("k", k, 1, len(labels))
    validate.int_in_range("n_sets", n_sets, 1, 10**7)
    sets = torch.stack([torch.randperm(len(labels), generator=generator)[:k] for _ in range(n_sets)])   # (n_sets, k)
    return (pattern_share(sets, labels) >= threshold).float().mean().item()


def selective_share(coefficients: torch.Tensor, profile: torch.Tensor, valid: torch.Tensor,
                    relation: torch.Tensor, k: int = 10, threshold: float = 0.8) -> float:
    """Of a layer's *relation neurons*, the share that are *selective*.

    A relation neuron's top-k triggers share a relation in at least ``threshold`` of them and its mean peak on
    that (majority) relation is positive; it is selective when its mean peak on every other relation is below half
    of that.

    Args:
        coefficients: ``(N, T, d_ff)`` one layer's coefficients; ``valid``: ``(N, T)`` bool.
        profile: ``(d_ff, R)`` mean peak per relation (Exercise 6's ``relation_profile``).
        relation: ``(N,)`` int64, each prompt's relation in ``0..R-1``.
    """
    validate.float_tensor("profile", profile, min_dims=2)
    examples = top_triggers(coefficients, k, valid).examples                         # (d_ff, k)
    own = torch.mode(relation[examples], dim=1).values                               # (d_ff,) majority relation
    own_mean = profile.gather(1, own[:, None])[:, 0]
    relation_neuron = (pattern_share(examples, relation.tolist()) >= threshold) & (own_mean > 0)
    best_other = profile.scatter(1, own[:, None], float("-inf")).max(dim=1).values
    n_relation = relation_neuron.sum().item()
    if n_relation == 0:
        raise ValueError("no neuron of this layer is a relation neuron: the share of selective ones is undefined")
    return ((best_other < 0.5 * own_mean) & relation_neuron).sum().item() / n_relation


def _top_shares(traces: Mapping[int, object], valid: torch.Tensor,
                labellings: Mapping[str, tuple[torch.Tensor | None, Sequence[object]]], layer: int,
                k: int) -> list[list[torch.Tensor]]:
    """Per model and labelling, the ``(d_ff,)`` share of each neuron's top-k triggers carrying its most common
    label (``memory.pattern_share``): the costly part of ``pattern_share_table``, done once for every threshold."""
    out = []
    for s in traces:
        c = traces[s].coefficients[layer]
        row = []
        for name, (rows, labels) in labellings.items():
            c_rows, valid_rows = _counted(c, valid, name, rows, labels)
            row.append(pattern_share(top_triggers(c_rows, k, valid_rows).examples, labels))
        out.append(row)
    return out


def share_families(trained: Mapping[int, object], untrained: Mapping[int, object], valid: torch.Tensor,
                   labellings: Mapping[str, tuple[torch.Tensor | None, Sequence[object]]], layers: Sequence[int],
                   k: int = 10, needed: Sequence[int] = (8,)) -> dict[int, tuple[dict, dict]]:
    """``share_family`` at several thresholds at once, ``{n: (family, means)}`` with ``n`` of the top ``k`` that
    must share (threshold ``n / k``); each neuron's top triggers are found once."""
    from helpers.stats import paired_difference
    if not labellings:
        raise ValueError("labellings must name at least one (rows, labels) pair, got none")
    out = {n: ({}, {}) for n in needed}
    for layer in layers:
        shares = [_top_shares(traces, valid, labellings, layer, k) for traces in (trained, untrained)]
        for n in needed:
            after, before = (torch.tensor([[(v * k >= n - 1e-6).float().mean().item() for v in row] for row in table])
                             for table in shares)
            family, means = out[n]
            family |= {f"layer {layer}, same {label}": paired_difference(after[:, j], before[:, j])
                       for j, label in enumerate(labellings)}
            means[layer] = (after.mean(0), before.mean(0))
    return out


def share_family(trained: Mapping[int, object], untrained: Mapping[int, object], valid: torch.Tensor,
                 labellings: Mapping[str, tuple[torch.Tensor | None, Sequence[object]]], layers: Sequence[int],
                 k: int = 10, threshold: float = 0.8) -> tuple[dict, dict]:
    """Trained − untrained share of neurons passing ``threshold`` (``pattern_share_table``), paired by seed, per
    layer and labelling. ``trained``, ``untrained``: ``{seed: memory.collect(...)}`` of the same seeds.
    Returns ``(family, means)``: ``family`` ``{"layer L, same <labelling>": PairedDifference}``; ``means``
    ``{L: (trained, untrained)}``, each an ``(n_labellings,)`` tensor of means over seeds."""
    validate.positive_float("threshold", threshold)
    return share_families(trained, untrained, valid, labellings, layers, k, (threshold * k,))[threshold * k]


def resolved_higher(families: Mapping[int, tuple[dict, dict]]) -> dict[int, int]:
    """For each ``n`` of ``share_families``' result, how many comparisons Holm resolves as trained above untrained."""
    from helpers.stats import holm
    return {n: sum(v.verdict == "higher" for v in holm(family)) for n, (family, _) in families.items()}


def random_basis_family(traces: Mapping[int, object], valid: torch.Tensor,
                        labellings: Mapping[str, tuple[torch.Tensor | None, Sequence[object]]], layers: Sequence[int],
                        k: int = 10, needed: int = 8, rotations: int = 3,
                        generator: torch.Generator | None = None) -> tuple[dict, dict]:
    """The random-basis control of trigger sharing: per seed and layer, the share of neurons whose top ``k``
    triggers have ``needed`` sharing a label, minus the same share for ``d_ff`` random orthonormal directions
    of the same coefficients (``c @ Q``, ``memory.random_orthonormal``, each column given a neuron's sign by
    ``memory.oriented``; mean over ``rotations`` bases).
    A random direction mixes all neurons, so what it shares is a property of the layer in any basis.
    Returns ``(family, means)``: ``{"layer L, same <label>: neurons − random directions": PairedDifference}``
    and ``{L: (neurons, random directions)}``, each an ``(n_labellings,)`` tensor of means over seeds."""
    from helpers.memory import oriented, random_orthonormal
    from helpers.stats import paired_difference
    validate.int_in_range("rotations", rotations, 1, 100)
    validate.int_in_range("needed", needed, 1, k)

    def passing(c: torch.Tensor) -> torch.Tensor:
        out = []
        for name, (rows, labels) in labellings.items():
            c_rows, valid_rows = _counted(c, valid, name, rows, labels)
            share = pattern_share(top_triggers(c_rows, k, valid_rows).examples, labels)
            out.append((share * k >= needed - 1e-6).float().mean().item())
        return torch.tensor(out)

    family, means = {}, {}
    for layer in layers:
        own, rotated = [], []
        for s in traces:
            c = traces[s].coefficients[layer]
            own.append(passing(c))
            # each random direction gets a neuron's sign: its largest excursion positive (memory.oriented)
            rotated.append(torch.stack([passing(c @ oriented(c, random_orthonormal(c.shape[-1], generator), valid))
                                        for _ in range(rotations)]).mean(0))
        own, rotated = torch.stack(own), torch.stack(rotated)
        family |= {f"layer {layer}, same {label}: neurons − random directions":
                   paired_difference(own[:, j], rotated[:, j]) for j, label in enumerate(labellings)}
        means[layer] = (own.mean(0), rotated.mean(0))
    return family, means
