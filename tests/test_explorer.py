"""helpers.explorer: the neuron explorer shows what the helpers compute, and draws one figure per neuron."""
import pytest
import torch

from helpers.explorer import NeuronExplorer, answer_lead, runner_up
from helpers.fact_model import load_fact_model
from helpers.facts import RELATIONS, load_facts, make_dataset
from helpers.interventions import knock_out
from helpers.memory import (answer_probability, collect, group_profile, peak_coefficients, prefix_mask,
                            token_positions, top_triggers)


@pytest.fixture(scope="module")
def facts_data():
    return make_dataset(load_facts())


def test_neuron_explorer_shows_what_the_helpers_compute(facts_data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = facts_data
    model, _ = load_fact_model(data)
    facts = data.facts
    subject_pos = token_positions(data.ids, torch.tensor([data.vocab.stoi[f.subject] for f in facts]))
    valid = prefix_mask(data.ids) & (torch.arange(data.ids.shape[1]) >= subject_pos[:, None])
    explorer = NeuronExplorer(model, data.ids, valid, data.answer_pos, data.answer_id, data.vocab.tokens,
                              [f.relation for f in facts], [f.subject for f in facts], k=5, n_facts=4)
    assert explorer.group_names == list(RELATIONS)
    trace = collect(model, data.ids)
    profile, _ = group_profile(peak_coefficients(trace.coefficients[1], valid), [f.relation for f in facts])
    assert torch.allclose(explorer.profiles[1], profile)
    assert torch.equal(explorer.triggers[0].examples, top_triggers(trace.coefficients[0], 5, valid).examples)
    rows, before, after = explorer.knock_out_effect(1, 151)
    with knock_out(model, 1, [151]):
        expected = answer_probability(model, data.ids[rows], data.answer_pos[rows], data.answer_id[rows])
    assert torch.allclose(after, expected) and len(rows) == 4
    assert torch.equal(before, answer_probability(model, data.ids[rows], data.answer_pos[rows],
                                                  data.answer_id[rows]))
    lead_rows, lead_before, lead_after = explorer.knock_out_lead(1, 151)      # the knock-out panel reads this
    assert torch.equal(lead_rows, rows)
    with knock_out(model, 1, [151]), torch.no_grad():
        logits = model(data.ids[rows])[torch.arange(len(rows)), data.answer_pos[rows]]
    answer = logits[torch.arange(len(rows)), data.answer_id[rows]]
    second = logits.scatter(1, data.answer_id[rows][:, None], float("-inf")).max(1).values
    assert torch.allclose(lead_after, answer - second, atol=1e-5)
    assert torch.allclose(lead_before, answer_lead(model, data.ids[rows], data.answer_pos[rows], data.answer_id[rows]))
    on, off = explorer.knock_out_logits(1, 151)                # every word's logit at those facts, on and off
    assert on.shape == off.shape == (len(rows), len(data.vocab.tokens)) and torch.allclose(off, logits, atol=1e-5)
    ids = torch.stack([data.answer_id[rows], runner_up(off, data.answer_id[rows])], 1)      # (n_facts, 2)
    gap = off.gather(1, ids)[:, 0] - off.gather(1, ids)[:, 1]
    assert torch.allclose(gap, lead_after, atol=1e-5)          # runner_up is the word the lead is measured against
    fig = explorer.figure(0, 191)
    assert len(fig.axes) == 4 and fig.axes[0].get_title(loc="left").startswith("Layer 0, neuron 191:")
    assert "lead over the runner-up" in fig.axes[-1].get_xlabel()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"neuron must be an int in \[0, 191\], got 192"):
        explorer.figure(1, 192)
