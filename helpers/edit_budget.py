"""How a ROME edit's budget trades efficacy against specificity (notebook 03, section 8).

Notebook 03 reads ``paraphrase_answers``, ``trace_and_edits`` (the keep and sites runs beside the causal trace),
``keep_summary`` (the 152-edit keep runs) and ``freeze_summary`` (section 10's path test); the budgets and
single-key runs are no longer read there; they stay shipped and tested.

The notebook edits 32 capitals in layer 0 of each of the ten fact models, at the country, with 40 Adam steps
and a small ``||δ||²`` penalty. Would a larger budget make the edit take where the causal trace points elsewhere,
and at what cost? ``budget_runs`` repeats those edits at other budgets (40, 200 or 1000 steps, with and
without the penalty) and records, per seed and budget,
the efficacy (share of edits that now give the new capital), the share of the other countries' capitals
whose prediction is unchanged (specificity) and the size of the write, the median over edits of
``||δ|| / ||W k*||`` (``δ = Ŵk* − Wk*``). Too slow to run live for ten seeds; made by

    python -m helpers.edit_budget          # writes helpers/data/edit_budget.json (a few minutes of CPU)

and checked in the notebook by recomputing one seed.

``site_runs`` records, per seed, the notebook's own 40-step edits at both sites (the country and the last word
"is"): efficacy, capitals kept, the held-out paraphrase test and the mean α at "is". Made by

    python -m helpers.edit_budget --sites  # writes helpers/data/edit_sites.json (about a minute of CPU)

and checked in the notebook by recomputing seed 0.

``keep_runs`` records, per seed, the notebook's 40-step country edits without and with the keep term (the
edited country's other facts held at their answers): efficacy, capitals kept and the country's own other facts
kept, per relation. Made by

    python -m helpers.edit_budget --keep   # writes helpers/data/edit_keep.json (a few minutes of CPU)

and checked in the notebook against its live seed 0. The same with every one of the 152 capitals edited, to
settle the efficacy verdict that 32 edits leave close:

    python -m helpers.edit_budget --keep --edits 152   # writes helpers/data/edit_keep_152.json (~4 min of CPU)

``paraphrase_answers`` says what the model answers on the held-out paraphrase before and after the same country
edits (a language, mostly: the logit comparison of ``site_runs`` is between two unlikely words). Made by

    python -m helpers.edit_budget --answers   # writes helpers/data/edit_answers.json (about a minute of CPU)

``freeze_runs`` is section 10's path test of the same 32 country edits: how many take as they are, with layer
1's attention output at "is" held at its unedited value, and with layer 0's FFN output at "is" held instead (the
edit's direct route through the key at "is"). Made by

    python -m helpers.edit_budget --freeze   # writes helpers/data/edit_freeze.json (about a minute of CPU)

``spearman_holm`` (from ``helpers.stats``) judges rank correlations across seeds (trace against edit
success) under Holm's step-down, against the exact null of Spearman's ρ (``spearman_null``).
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from typing import NamedTuple
from pathlib import Path

import torch

from helpers.stats import spearman, spearman_holm, spearman_null  # spearman_holm, _null re-exported: the tests call them from here
from helpers.editing import (edit_effects, edit_scales, edited, key_second_moment, mean_keys, preferences, rome_edits,
                             template_ids)
from helpers.facts import RELATIONS, FactDataset, load_facts, make_dataset
from helpers.memory import collect, find_ffns, token_positions

DATA_PATH = Path(__file__).parent / "data" / "edit_budget.json"
SITES_PATH = Path(__file__).parent / "data" / "edit_sites.json"
KEEP_PATH = Path(__file__).parent / "data" / "edit_keep.json"
ANSWERS_PATH = Path(__file__).parent / "data" / "edit_answers.json"
FREEZE_PATH = Path(__file__).parent / "data" / "edit_freeze.json"
HELD = {"layer 1 attention at 'is' held": (1, "attn"), "layer 0 FFN at 'is' held": (0, "ffn")}
"""``freeze_runs``' conditions: name -> (block, sublayer) whose output at the prompt's last word is held at its
unedited value while the edit is applied."""
PARAPHRASE = "the official capital of {} is"
"""The held-out paraphrase of the capital prompt: no training prompt reads like this."""
MORE_PARAPHRASES = ("the capital located in {} is", "in {} the official capital is")
"""Two more held-out templates, to check that the paraphrase result is not one template's."""
OTHER_PROMPTS = {"currency": "the currency of {} is the", "official language": "the official language of {} is",
                 "located in": "{} is located in"}
"""The paraphrase test's control: the edited country's training prompts of the other relations, where neither
capital is the answer. If "the new capital beats the true one" rises as much there, the edit changes what the
model writes after the country, not the capital fact alone."""
BUDGETS: dict[str, dict] = {"40 steps, penalty": dict(steps=40, l2=3e-3),
                            "40 steps, no penalty": dict(steps=40, l2=0.0),
                            "200 steps, penalty": dict(steps=200, l2=3e-3),
                            "200 steps, no penalty": dict(steps=200, l2=0.0),
                            "1000 steps, no penalty": dict(steps=1000, l2=0.0)}
"""Budget name -> ``rome_edits`` arguments (the notebook's is the first)."""


def capital_edits(data: FactDataset, n_edits: int = 32, seed: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """The notebook's edits: ``(edit_rows, new_ids)``, each ``(n_edits,)`` long: random capital facts, each
    moved to another country's capital (the draw of notebook 03, cell "E, gen = 32, ...")."""
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    capital_rows = torch.nonzero(relation_of == list(RELATIONS).index("capital"))[:, 0]
    gen = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(capital_rows), generator=gen)[:n_edits]
    shift = torch.randint(1, len(capital_rows), (n_edits,), generator=gen)
    return capital_rows[pick], data.answer_id[capital_rows[(pick + shift) % len(capital_rows)]]


class _Edits(NamedTuple):
    """The notebook's capital edits and the masks every study below scores them with (rows index ``data.facts``)."""
    relation_of: torch.Tensor      # (facts,) relation index
    same_subject: torch.Tensor     # (facts, facts) bool
    subject_pos: torch.Tensor      # (facts,) the subject's position in each prompt
    capital_rows: torch.Tensor     # (countries,) the capital facts
    edit_rows: torch.Tensor        # (E,) the edited capital facts
    new_ids: torch.Tensor          # (E,) their new answers
    other_capitals: torch.Tensor   # (E, facts) bool: other countries' capital facts
    keys: torch.Tensor             # (facts, T, d_ff) the layer's key coefficients
    C: torch.Tensor                # (d_ff, d_ff) their second moment over real tokens, ridge 1e-3


def _edits(model: torch.nn.Module, data: FactDataset, layer: int, n_edits: int = 32) -> _Edits:
    relation_of = torch.tensor([list(RELATIONS).index(f.relation) for f in data.facts])
    subjects = sorted({f.subject for f in data.facts})
    subject_of = torch.tensor([subjects.index(f.subject) for f in data.facts])
    same_subject = subject_of[:, None] == subject_of[None, :]
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in data.facts]))
    capital_rows = torch.nonzero(relation_of == list(RELATIONS).index("capital"))[:, 0]
    edit_rows, new_ids = capital_edits(data, n_edits)
    other_capitals = (relation_of == relation_of[edit_rows[0]])[None, :] & ~same_subject[edit_rows]
    keys = collect(model, data.ids).coefficients[layer]
    C = key_second_moment(keys[data.ids != data.vocab.pad_id], ridge=1e-3)
    return _Edits(relation_of, same_subject, subject_pos, capital_rows, edit_rows, new_ids, other_capitals, keys, C)


def budget_runs(model: torch.nn.Module, data: FactDataset, budgets: dict[str, dict] | None = None,
                layer: int = 0) -> dict[str, dict[str, float]]:
    """``{budget: {"efficacy", "capitals_kept", "delta_ratio"}}`` (floats) for one model: the ``capital_edits``
    made at the country (its key averaged over the country's prompts, ``C`` from every real token's key, ridge
    1e-3), each applied alone; capitals kept is the mean over edits of the share of other countries' capital
    predictions unchanged; ``delta_ratio`` the median over edits of ``||Ŵk* − Wk*|| / ||Wk*||``, each
    ``(d_model,)``."""
    budgets = BUDGETS if budgets is None else budgets
    _, same_subject, subject_pos, capital_rows, edit_rows, new_ids, other_capitals, keys, C = _edits(model, data, layer)
    k_stars = mean_keys(keys, same_subject[edit_rows], subject_pos)
    W = find_ffns(model).layer(layer).value_matrix.detach()           # (d_model, d_ff)
    Wk = k_stars @ W.T                                                 # (E, d_model)
    out = {}
    for name, kwargs in budgets.items():
        W_hats = rome_edits(model, layer, keys, C, k_stars, data.ids, data.answer_pos, edit_rows, new_ids, **kwargs)
        fx = edit_effects(model, layer, W_hats, data.ids, data.answer_pos, edit_rows, new_ids, capital_rows)
        out[name] = {"efficacy": fx.success.float().mean().item(),
                     "capitals_kept": fx.kept(other_capitals).mean().item(),
                     "delta_ratio": ((torch.einsum("emf,ef->em", W_hats, k_stars) - Wk).norm(dim=1)
                                     / Wk.norm(dim=1)).median().item()}
    return out


def make(seeds: Sequence[int], path: Path = DATA_PATH) -> dict:
    """Run ``budget_runs`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): budget_runs(load_fact_model(data, seed=s)[0], data) for s in seeds}
    result = {"made_by": "python -m helpers.edit_budget", "budgets": BUDGETS, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load(path: Path = DATA_PATH) -> dict[int, dict[str, dict[str, float]]]:
    """The shipped runs: ``{seed: {budget: {"efficacy", "capitals_kept", "delta_ratio"}}}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def live_gap(model0: torch.nn.Module, data: FactDataset, live: dict[int, dict[str, float]],
             rerun: str = "40 steps, no penalty", runs: dict | None = None) -> float:
    """Largest |file − live| difference: ``live`` (``{seed: {"efficacy", "capitals_kept"}}``, computed by the
    notebook at its own budget, the first of ``BUDGETS``) against the file, and the ``rerun`` budget run now on
    ``model0`` (the fact model of seed 0) against the file's seed 0."""
    runs = load() if runs is None else runs
    first = next(iter(BUDGETS))
    gaps = [abs(runs[s][first][k] - v) for s, values in live.items() for k, v in values.items()]
    fresh = budget_runs(model0, data, {rerun: BUDGETS[rerun]})[rerun]
    return max(gaps + [abs(runs[0][rerun][k] - fresh[k]) for k in fresh])


def answers_gap(live0: dict[str, float], path: Path = ANSWERS_PATH) -> float:
    """Largest difference between ``paraphrase_answers`` of seed 0 computed live and the file's seed 0: counts
    absolute, probabilities relative (they are ~1e-8)."""
    shipped = load_answers(path)[0]
    return max(abs(v - shipped[k]) / (abs(shipped[k]) if k.startswith("P(") else 1) for k, v in live0.items())


def shipped_gaps(model0: torch.nn.Module, data: FactDataset, promo: dict, sites: dict, live_edits: dict[str, float],
                 answers0: dict[str, float], n_off: int, W_hats0: torch.Tensor | None = None) -> str:
    """Notebook 03's check of every shipped multi-seed file it reads against seed 0 (``model0``) recomputed now,
    as one line ``"shipped − recomputed, max difference: <file> <gap>, ..."`` (a gap under 0.01 shown as ``< 0.01``). ``promo``: ``promotion_runs.load()``;
    ``sites``: ``load_sites()``; ``live_edits``: the notebook's live 32 ROME edits (``{"efficacy",
    "capitals_kept", "own <relation>": share}``); ``answers0``: its live ``paraphrase_answers``; ``n_off``: the
    knock-out set size; ``W_hats0``: the live 32 edits of seed 0 (``(32, d_model, d_ff)``), for the path test
    (``freeze_runs``; left out if ``None``). The tests rerun each file's command."""
    from helpers import knockout_attribution, knockout_runs, promotion_runs
    seeds = sorted(sites)
    gaps = {"promotion": promotion_runs.live_gap(model0, data, promo),
            "knock-outs": knockout_runs.live_gap(model0, data, n_offs=[n_off]),
            "attribution": knockout_attribution.live_gap(model0, data),
            "edit sites": live_sites_gap(model0, data, sites[0]),
            "edits without keep term": max(abs(load_keep()[0]["plain"][k] - v) for k, v in live_edits.items()),
            "budgets": live_gap(model0, data, {s: {"efficacy": sites[s]["country"],
                                                   "capitals_kept": sites[s]["kept country"]} for s in seeds}),
            "paraphrase answers": answers_gap(answers0)}
    if W_hats0 is not None:
        live = freeze_runs(model0, data, W_hats=W_hats0)
        gaps["path test"] = max(abs(v - load_freeze()[0][k]) for k, v in live.items())
    # below 0.01 a gap is rounding: a CPU with other vector units can flip a near-tie in a ranking (attribution's)
    return "shipped − recomputed, max difference: " + ", ".join(
        f"{k} {'< 0.01' if v < 0.01 else f'{v:.3f}'}" for k, v in gaps.items())


def site_runs(model: torch.nn.Module, data: FactDataset, layer: int = 0,
              paraphrase: str = PARAPHRASE, controls: bool = True,
              at: Sequence[str] = ("country", "is")) -> dict[str, object]:
    """The notebook's 40-step edits (``capital_edits``, the penalty, each applied alone) in ``layer`` of one
    model, at the country (key averaged over the country's prompts) and at "is" (the capital prompt's last-word
    key): ``{site: efficacy, "kept " + site: share of other countries' capitals kept (mean over edits),
    "paraphrase " + site: {"edited_before", "edited_after", "untouched_before", "untouched_after"}: the shares of
    ``preferences`` on ``paraphrase``, "alpha": the mean α that the other countries' last-word keys receive from
    the edits at "is", "more paraphrases": {template: {site: the same four shares}} for ``MORE_PARAPHRASES``,
    "other prompts": {name: the same four shares after the edit at the country} for ``OTHER_PROMPTS``}``,
    all floats. ``controls=False`` leaves out "other prompts"; ``at=("country",)`` leaves out the edits at "is"
    and "alpha" (the notebook's live check, to save time)."""
    _, same_subject, subject_pos, capital_rows, edit_rows, new_ids, other_capitals, keys, C = _edits(model, data, layer)
    pick = (capital_rows[None, :] == edit_rows[:, None]).int().argmax(1)        # each edit's row of capital_rows
    countries = [data.facts[int(r)].subject for r in capital_rows]
    templates = {t: template_ids(data.vocab, countries, t) for t in (paraphrase, *MORE_PARAPHRASES)}
    out: dict[str, object] = {"more paraphrases": {t: {} for t in MORE_PARAPHRASES}}
    if controls:
        out["other prompts"] = {}
    shares_of = ("edited_before", "edited_after", "untouched_before", "untouched_after")
    for site, k in [("country", mean_keys(keys, same_subject[edit_rows], subject_pos)),
                    ("is", keys[edit_rows, data.answer_pos[edit_rows]])]:
        if site not in at:
            continue
        W_hats = rome_edits(model, layer, keys, C, k, data.ids, data.answer_pos, edit_rows, new_ids)
        fx = edit_effects(model, layer, W_hats, data.ids, data.answer_pos, edit_rows, new_ids, capital_rows)
        out[site], out[f"kept {site}"] = fx.success.float().mean().item(), fx.kept(other_capitals).mean().item()
        for template, ids in templates.items():
            prefs = preferences(model, layer, W_hats, ids, data.answer_id[capital_rows], pick, new_ids)
            shares = {name: getattr(prefs, name).float().mean().item() for name in shares_of}
            if template == paraphrase:
                out[f"paraphrase {site}"] = shares
            else:
                out["more paraphrases"][template][site] = shares
        if site == "country" and controls:
            for name, template in OTHER_PROMPTS.items():
                prefs = preferences(model, layer, W_hats, template_ids(data.vocab, countries, template),
                                    data.answer_id[capital_rows], pick, new_ids)
                out["other prompts"][name] = {k: getattr(prefs, k).float().mean().item() for k in shares_of}
    if "is" in at:
        is_keys = keys[capital_rows, data.answer_pos[capital_rows]].expand(len(edit_rows), -1, -1)
        out["alpha"] = edit_scales(C, k, is_keys)[other_capitals[:, capital_rows]].mean().item()
    return out


def make_sites(seeds: Sequence[int], path: Path = SITES_PATH) -> dict:
    """Run ``site_runs`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): site_runs(load_fact_model(data, seed=s)[0], data) for s in seeds}
    result = {"made_by": "python -m helpers.edit_budget --sites", "paraphrases": [PARAPHRASE, *MORE_PARAPHRASES],
              "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def paraphrase_answers(model: torch.nn.Module, data: FactDataset, W_hats: torch.Tensor, edit_rows: torch.Tensor,
                       new_ids: torch.Tensor, layer: int = 0, template: str = PARAPHRASE) -> dict[str, float]:
    """What the model answers on ``template`` for the E edited countries, unedited and with each edit
    ``W_hats[e]`` ``(E, d_model, d_ff)`` applied alone (``edit_rows``, ``new_ids``: ``(E,)``, as in
    ``capital_edits``): ``{"language first": edited countries whose top word unedited is a language,
    "P(true) before": median P(true capital) unedited, "new first": edits after which the new capital is the top
    word, "new first of capitals": ... the top capital, "P(new) after": median P(new capital)}``; counts out of E."""
    from helpers.editing import edited
    relation_of = [f.relation for f in data.facts]
    capital_ids = data.answer_id[[n for n, r in enumerate(relation_of) if r == "capital"]]
    languages = set(data.answer_id[[n for n, r in enumerate(relation_of) if r == "language"]].tolist())
    ids = template_ids(data.vocab, [data.facts[int(r)].subject for r in edit_rows], template)   # (E, T)
    true_ids = data.answer_id[edit_rows]
    with torch.no_grad():
        before = model(ids)[:, -1].softmax(-1)                                                   # (E, vocab)
        after = []
        for e in range(len(edit_rows)):
            with edited(model, layer, W_hats[e]):
                after.append(model(ids[e:e + 1])[0, -1].softmax(-1))
    after = torch.stack(after)                                                                   # (E, vocab)
    rows = torch.arange(len(edit_rows))
    return {"language first": sum(int(w) in languages for w in before.argmax(1)),
            "P(true) before": before[rows, true_ids].median().item(),
            "new first": int((after.argmax(1) == new_ids).sum()),
            "new first of capitals": int((capital_ids[after[:, capital_ids].argmax(1)] == new_ids).sum()),
            "P(new) after": after[rows, new_ids].median().item()}


def answer_runs(model: torch.nn.Module, data: FactDataset, layer: int = 0) -> dict[str, float]:
    """``paraphrase_answers`` for the notebook's 40-step country edits (``capital_edits``) in one model."""
    _, same_subject, subject_pos, _, edit_rows, new_ids, _, keys, C = _edits(model, data, layer)
    k = mean_keys(keys, same_subject[edit_rows], subject_pos)
    W_hats = rome_edits(model, layer, keys, C, k, data.ids, data.answer_pos, edit_rows, new_ids)
    return paraphrase_answers(model, data, W_hats, edit_rows, new_ids, layer)


def make_answers(seeds: Sequence[int], path: Path = ANSWERS_PATH) -> dict:
    """Run ``answer_runs`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): answer_runs(load_fact_model(data, seed=s)[0], data) for s in seeds}
    result = {"made_by": "python -m helpers.edit_budget --answers", "paraphrase": PARAPHRASE, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load_answers(path: Path = ANSWERS_PATH) -> dict[int, dict[str, float]]:
    """The shipped answer runs: ``{seed: answer_runs(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def load_sites(path: Path = SITES_PATH) -> dict[int, dict[str, object]]:
    """The shipped site runs: ``{seed: site_runs(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def sites_gap(live: dict[str, object], shipped: dict[str, object]) -> float:
    """Largest |live − shipped| over every number of two ``site_runs`` results (``inf`` if their keys differ)."""
    def flat(run, prefix=()):
        return {key: w for k, v in run.items()
                for key, w in (flat(v, (*prefix, k)).items() if isinstance(v, dict) else [((*prefix, k), v)])}
    a, b = flat(live), flat(shipped)
    return max(abs(a[k] - b[k]) for k in a) if set(a) == set(b) else float("inf")


def live_sites_gap(model0: torch.nn.Module, data: FactDataset, shipped0: dict[str, object]) -> float:
    """The notebook's live check of the site runs: ``site_runs`` on ``model0`` (the fact model of seed 0) at the
    country only, without the control prompts (shipped only; ``python -m helpers.edit_budget --sites`` remakes
    them, and the tests rerun it) against the file's seed 0, ``shipped0``: ``sites_gap`` over every number the
    rerun holds."""
    live = site_runs(model0, data, controls=False, at=("country",))
    shipped = {k: v for k, v in shipped0.items() if k in live}
    shipped["more paraphrases"] = {t: {"country": v["country"]} for t, v in shipped0["more paraphrases"].items()}
    return sites_gap(live, shipped)


def keep_runs(model: torch.nn.Module, data: FactDataset, layer: int = 0,
              n_edits: int = 32) -> dict[str, dict[str, float]]:
    """The notebook's 40-step country edits (``capital_edits(data, n_edits)``, the penalty, each applied alone;
    ``n_edits=152``: every capital) in ``layer``,
    ``"plain"`` (new answer only) and ``"keep"`` (with the keep term on the edited country's other facts):
    ``{name: {"efficacy", "capitals_kept", "own <relation>" for each relation but capital: the share of the
    edited countries' facts of that relation whose prediction is unchanged (mean over edits)}}``."""
    relation_of, same_subject, subject_pos, _, edit_rows, new_ids, other_capitals, keys, C = _edits(model, data, layer,
                                                                                                   n_edits)
    its_other = same_subject[edit_rows] & (torch.arange(len(data.facts))[None, :] != edit_rows[:, None])
    checked = torch.nonzero(other_capitals.any(0) | same_subject[edit_rows].any(0))[:, 0]
    k_stars = mean_keys(keys, same_subject[edit_rows], subject_pos)
    out = {}
    for name, keep in [("plain", None), ("keep", its_other)]:
        W_hats = rome_edits(model, layer, keys, C, k_stars, data.ids, data.answer_pos, edit_rows, new_ids,
                            keep_rows=keep, keep_ids=data.answer_id)
        fx = edit_effects(model, layer, W_hats, data.ids, data.answer_pos, edit_rows, new_ids, checked)
        out[name] = {"efficacy": fx.success.float().mean().item(), "capitals_kept": fx.kept(other_capitals).mean().item(),
                     **{f"own {r}": fx.kept(its_other & (relation_of == i)).mean().item()
                        for i, r in enumerate(RELATIONS) if r != "capital"}}
    return out


def keep_path(n_edits: int = 32) -> Path:
    """The shipped keep-term file for ``n_edits`` edits per seed (the notebook's 32: ``KEEP_PATH``)."""
    return KEEP_PATH if n_edits == 32 else KEEP_PATH.with_name(f"edit_keep_{n_edits}.json")


def make_keep(seeds: Sequence[int], path: Path | None = None, n_edits: int = 32) -> dict:
    """Run ``keep_runs`` with ``n_edits`` edits for the fact models of ``seeds`` and write them to ``path``
    (default ``keep_path(n_edits)``) as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): keep_runs(load_fact_model(data, seed=s)[0], data, n_edits=n_edits) for s in seeds}
    command = "python -m helpers.edit_budget --keep" + ("" if n_edits == 32 else f" --edits {n_edits}")
    result = {"made_by": command, "n_edits": n_edits, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(keep_path(n_edits) if path is None else path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load_keep(path: Path = KEEP_PATH) -> dict[int, dict[str, dict[str, float]]]:
    """The shipped keep-term runs: ``{seed: keep_runs(...)}`` (``keep_path(152)``: every capital edited)."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


# ---------------------------------------------------------------- reading the shipped runs (notebook 03, section 8)
def keep_values(runs: dict, name: str, what: str, seeds: Sequence[int]) -> list[float]:
    """One value per seed from ``load_keep()``: ``what`` ("efficacy", "capitals_kept", or "own": the mean over
    the edited country's three other relations) for ``name`` ("plain" or "keep")."""
    out = []
    for s in seeds:
        run = runs[s][name]
        own = [v for k, v in run.items() if k.startswith("own")]
        out.append(sum(own) / len(own) if what == "own" else run[what])
    return out


def keep_summary(runs: dict, seeds: Sequence[int], n_edits: int = 32) -> str:
    """One printed line from ``load_keep()`` runs: how much of the edited country's own currency the plain edit
    keeps (lowest-highest over ``seeds``, and in how many seeds below 1; ``n_edits``: edits per seed in ``runs``,
    32 or 152 for ``keep_path(152)``), then with the keep term − without it,
    paired by seed, Holm over the five measures (efficacy, other capitals kept, the country's own three
    relations kept): each measure's mean change and verdict."""
    from helpers.stats import holm, paired_difference
    currency = [runs[s]["plain"]["own currency"] for s in seeds]
    what = {"efficacy": "efficacy", "capitals_kept": "other capitals kept",
            **{f"own {r}": f"own {r}" for r in RELATIONS if r != "capital"}}
    verdicts = holm({name: paired_difference([runs[s]["keep"][k] for s in seeds],
                                             [runs[s]["plain"][k] for s in seeds]) for k, name in what.items()})
    order = sorted(verdicts, key=lambda v: -abs(v.comparison.mean))
    key = {name: k for k, name in what.items()}
    mean = {(v.name, arm): sum(runs[s][arm][key[v.name]] for s in seeds) / len(seeds) for v in order
            for arm in ("plain", "keep")}
    return (f"{len(currency)} seeds, {n_edits} edits each: own currency kept {min(currency):.2f}–{max(currency):.2f} "
            f"(below 1 in {sum(c < 1 for c in currency)}/{len(currency)} seeds)\n"
            f"with the keep term − without (mean without → with), paired, Holm over {len(verdicts)}:"
            + "".join(f"\n  {v.name:20s} {v.comparison.mean:+.3f}  "
                      f"({mean[v.name, 'plain']:.2f} → {mean[v.name, 'keep']:.2f}; higher in "
                      f"{v.comparison.higher:>2}, lower in {v.comparison.lower:>2} of {v.comparison.n} seeds)  "
                      f"{'not resolved' if v.verdict == 'not resolved' else 'resolved'}" for v in order))


def trace_and_edits(trace: dict[str, Sequence[float]], runs: dict, sites: dict, seeds: Sequence[int]) -> str:
    """Notebook 03's locate-then-edit table: per seed, the causal trace at each site (``trace``: ``{"country",
    "is"}``, P(right capital) with layer 0's FFN patched there) beside the 40-step edits made there
    (``runs``: ``load_keep()``, ``sites``: ``load_sites()``): edits that take and what they keep; then Spearman's
    ρ over the seeds of each site's trace against its edit's outcome, Holm over the two (``spearman_holm``)."""
    rows = {"trace: L0 FFN at <country> patched": trace["country"],
            "edit at <country>: edits that take": keep_values(runs, "plain", "efficacy", seeds),
            "  country's other facts kept": keep_values(runs, "plain", "own", seeds),
            "trace: L0 FFN at 'is' patched": trace["is"],
            "edit at 'is': edits that take": [sites[s]["is"] for s in seeds],
            "  other countries' capitals kept": [sites[s]["kept is"] for s in seeds]}
    tests = {"<country>: trace vs edits that take": (rows["trace: L0 FFN at <country> patched"],
                                                      rows["edit at <country>: edits that take"]),
             "'is': trace vs other capitals kept": (rows["trace: L0 FFN at 'is' patched"],
                                                    rows["  other countries' capitals kept"])}
    rho = {name: spearman(*pair) for name, pair in tests.items()}
    verdicts = spearman_holm(rho, len(seeds))
    return (f"{'seed':36s}" + " ".join(f"{s:4d}" for s in seeds)
            + "".join(f"\n{label:36s}" + " ".join(f"{v:4.2f}" for v in values) for label, values in rows.items())
            + f"\nSpearman ρ over {len(seeds)} seeds, Holm over {len(rho)} (exact null):"
            + "".join(f"\n  {name:36s} ρ {rho[name]:+.2f} (|ρ| had to reach {verdicts[name][0]:.2f})  "
                      f"{'resolved' if verdicts[name][1] else 'not resolved'}" for name in rho))


# ---------------------------------------------------------------- section 10: which path carries the edit to "is"
def freeze_runs(model: torch.nn.Module, data: FactDataset, layer: int = 0,
                W_hats: torch.Tensor | None = None) -> dict[str, int]:
    """The notebook's 32 country edits (``keep_runs``' "plain" edits), each applied alone, scored at the edited
    prompt's last word "is": ``{"as is": edits that take, <HELD name>: edits that take with that sublayer's
    output at "is" held at its unedited value, "changed, " + <HELD name>: edits whose outcome (takes or not)
    differs from "as is"}``, all ints out of 32. ``W_hats`` ``(32, d_model, d_ff)``: those edits if already made
    (the notebook's live seed-0 edits), else made here."""
    if W_hats is None:
        _, same_subject, subject_pos, _, edit_rows, new_ids, _, keys, C = _edits(model, data, layer)
        k_stars = mean_keys(keys, same_subject[edit_rows], subject_pos)
        W_hats = rome_edits(model, layer, keys, C, k_stars, data.ids, data.answer_pos, edit_rows, new_ids)
    else:
        edit_rows, new_ids = capital_edits(data, W_hats.shape[0])
    ids, pos = data.ids[edit_rows], data.answer_pos[edit_rows]
    modules = {name: getattr(model.blocks[b], part) for name, (b, part) in HELD.items()}
    unedited: dict[str, torch.Tensor] = {}

    def record(name):
        def hook(module, inputs, output):
            unedited[name] = output.detach().clone()
        return hook

    def hold(name, e):
        def hook(module, inputs, output):
            output = output.clone()
            output[0, pos[e]] = unedited[name][e, pos[e]]
            return output
        return hook

    def top(e, hooks=()):
        handles = [m.register_forward_hook(h) for m, h in hooks]
        try:
            with torch.no_grad():
                return int(model(ids[e:e + 1])[0, pos[e]].argmax())
        finally:
            for h in handles:
                h.remove()

    was_training = model.training
    model.eval()
    handles = [m.register_forward_hook(record(name)) for name, m in modules.items()]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    takes = {"as is": [], **{name: [] for name in HELD}}
    for e in range(len(edit_rows)):
        with edited(model, layer, W_hats[e]):
            takes["as is"].append(top(e) == int(new_ids[e]))
            for name, m in modules.items():
                takes[name].append(top(e, [(m, hold(name, e))]) == int(new_ids[e]))
    model.train(was_training)
    out = {name: sum(t) for name, t in takes.items()}
    out.update({f"changed, {name}": sum(a != b for a, b in zip(takes[name], takes["as is"])) for name in HELD})
    return out


def make_freeze(seeds: Sequence[int], path: Path = FREEZE_PATH) -> dict:
    """Run ``freeze_runs`` for the fact models of ``seeds`` and write them to ``path`` as JSON."""
    from helpers.fact_model import load_fact_model
    torch.set_num_threads(1)
    data = make_dataset(load_facts())
    runs = {str(s): freeze_runs(load_fact_model(data, seed=s)[0], data) for s in seeds}
    result = {"made_by": "python -m helpers.edit_budget --freeze", "n_edits": 32, "runs": runs,
              "environment": {"torch": torch.__version__, "python": platform.python_version()}}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load_freeze(path: Path = FREEZE_PATH) -> dict[int, dict[str, int]]:
    """The shipped path test: ``{seed: freeze_runs(...)}``."""
    return {int(s): r for s, r in json.loads(Path(path).read_text())["runs"].items()}


def freeze_summary(runs: dict, seeds: Sequence[int]) -> str:
    """Notebook 03's path test, printed: per seed, how many of the 32 country edits take as they are and with
    each ``HELD`` sublayer's output at "is" held at its unedited value, and for layer 0's FFN (the direct route)
    the most edits whose outcome it changes in any one seed."""
    rows = {"as is": "as is", "layer 1 attention at 'is' held": "with layer 1's attention at 'is' held",
            "layer 0 FFN at 'is' held": "layer 1's attention alone (L0 FFN held)"}
    lines = [f"{'edits at <country> that take (of 32), seed':44s}" + "".join(f"{s:4d}" for s in seeds)]
    for key, label in rows.items():
        line = f"  {label:42s}" + "".join(f"{runs[s][key]:4d}" for s in seeds)
        if key == "layer 0 FFN at 'is' held":
            line += f"   (at most {max(runs[s][f'changed, {key}'] for s in seeds)} edits change per seed)"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--edits", type=int, default=32, help="with --keep: edits per seed (152: every capital)")
    parser.add_argument("--sites", action="store_true", help="the notebook's edits at both sites (edit_sites.json)")
    parser.add_argument("--answers", action="store_true", help="what the model answers on the paraphrase "
                                                               "(edit_answers.json)")
    parser.add_argument("--keep", action="store_true", help="the country edits with and without the keep term "
                                                            "(edit_keep.json)")
    parser.add_argument("--freeze", action="store_true", help="the country edits with a sublayer's output at 'is' "
                                                              "held (edit_freeze.json)")
    args = parser.parse_args()
    if args.freeze:
        make_freeze(args.seeds, args.out or FREEZE_PATH)
    elif args.answers:
        make_answers(args.seeds, args.out or ANSWERS_PATH)
    elif args.keep:
        make_keep(args.seeds, args.out, args.edits)
    elif args.sites:
        make_sites(args.seeds, args.out or SITES_PATH)
    else:
        make(args.seeds, args.out or DATA_PATH)


