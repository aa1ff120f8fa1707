"""helpers.interventions: sub-updates, direct logit shifts, knock-outs (everywhere or at one position per row),
the knock-out control sets, and activation patching, checked against what the model computes by hand."""
import pytest
import torch

from helpers.interventions import (_size_matched, answer_and_rival_shifts, direct_logit_shifts, final_residual,
                                   knock_out, knockout_drops, knockout_sets, knockouts_at_sites, patched_ffn_output,
                                   patching_effect, removed_activity, removed_write, same_group_donors,
                                   shifts_by_reference, sub_updates)
from helpers.memory import answer_probability, collect
from helpers.transformer import GPTConfig, TinyGPT

VOCAB = 13


def tiny(variant="gelu", seed=0):
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_len=8, variant=variant)).eval()


def toy_ids(n=6, t=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (n, t), generator=g)
    ids[0, 5:] = 0          # a padded row
    return ids


def test_sub_updates_add_up_to_the_ffn_output():
    model, ids = tiny("swiglu"), toy_ids()
    su = sub_updates(model, ids, 1, position=3, example=2)
    assert torch.allclose(su.vectors.sum(0) + su.bias, su.output, atol=1e-5)
    assert (su.scores[su.order][:-1] >= su.scores[su.order][1:]).all()
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 6\], got 7"):
        sub_updates(model, ids, 1, position=7)
    with pytest.raises(ValueError, match=r"example must be an int in \[0, 5\], got 6"):
        sub_updates(model, ids, 1, position=0, example=6)


def test_knock_out_all_neurons_leaves_the_bias_and_restores_afterwards():
    model, ids = tiny(), toy_ids()
    d_ff = model.blocks[0].ffn.d_ff
    before = collect(model, ids)
    with knock_out(model, 0, list(range(d_ff))):
        silenced = collect(model, ids)
    bias = model.blocks[0].ffn.w2.bias.detach()
    assert torch.allclose(silenced.outputs[0], bias.expand_as(silenced.outputs[0]))
    assert torch.equal(collect(model, ids).logits, before.logits)      # the hook is gone


def test_knock_out_toward_a_mean_sets_the_coefficients_to_it():
    model, ids = tiny(), toy_ids()
    ffn = model.blocks[0].ffn
    mean = collect(model, ids).coefficients[0].mean(dim=(0, 1))                     # (d_ff,)
    chosen = [0, 3, 5]
    with knock_out(model, 0, chosen, toward=mean):
        moved = collect(model, ids)
    m = moved.coefficients[0]                                                        # the hook acts after these
    expected = m.clone()
    expected[..., chosen] = mean[chosen]
    assert torch.allclose(moved.outputs[0], expected @ ffn.w2.weight.detach().T + ffn.w2.bias.detach(), atol=1e-5)
    with pytest.raises(ValueError, match=r"toward must be a \(64,\) tensor"):
        with knock_out(model, 0, chosen, toward=torch.zeros(3)):
            pass


def test_the_mean_ablation_file_keeps_the_zero_file_sets_and_answers_its_own_question():
    from helpers import knockout_runs as k
    zero, mean = k.load(), k.load(k.data_path(ablation="mean"))
    for s in zero:          # same sets (the files were made on two CPU kernels: a size-matched cut may move a little)
        for site, sets in zero[s]["sets"].items():
            for name, (drop, activity, size, off) in sets.items():
                assert mean[s]["sets"][site][name][1] == pytest.approx(activity, rel=1e-2)
                assert mean[s]["sets"][site][name][3] == pytest.approx(off, rel=1e-2)
    changes = k.mean_ablation_changes(["L0 subject", "L0 last word", "L1 last word"], list(range(10)))
    assert changes["L0 subject: own − other"] == ("higher", "not resolved")


def test_knock_out_with_a_mask_per_row():
    model, ids = tiny(), toy_ids()
    d_ff = model.blocks[1].ffn.d_ff
    mask = torch.zeros(ids.shape[0], d_ff, dtype=torch.bool)
    mask[2, :10] = True
    with knock_out(model, 1, mask):
        masked = collect(model, ids).logits
    with knock_out(model, 1, list(range(10))):
        row_two = collect(model, ids[2:3]).logits
    unchanged = collect(model, ids).logits
    assert torch.allclose(masked[2], row_two[0], atol=1e-6)
    assert torch.allclose(masked[[0, 1, 3, 4, 5]], unchanged[[0, 1, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"a bool neurons mask must have shape \(N, d_ff=64\)"):
        with knock_out(model, 1, torch.zeros(3, 5, dtype=torch.bool)):
            pass
    with pytest.raises(ValueError, match=r"neurons must be in \[0, 63\]"):
        with knock_out(model, 1, [64]):
            pass


def test_direct_logit_shifts_of_the_last_block_add_up_to_its_effect_on_the_logits():
    """With the final norm's scale held fixed, the shifts of the sub-updates sum to what the whole FFN output
    adds to the logits, up to a constant for all words (β and the mean removed by the norm)."""
    model, ids = tiny(), toy_ids()
    su = sub_updates(model, ids, 1, position=4, example=1)
    h = final_residual(model, ids)[1, 4]
    shifts = direct_logit_shifts(model, su.vectors, h)                   # (d_ff, vocab)
    with torch.no_grad():
        norm = model.ln_f
        sigma = torch.sqrt(h.var(unbiased=False) + norm.eps)
        without = h - su.vectors.sum(0)                                  # the stream without the sub-updates
        logits = model.lm_head(norm.weight * (h - h.mean()) / sigma)
        logits_without = model.lm_head(norm.weight * (without - without.mean()) / sigma)
    assert torch.allclose(shifts.sum(0), logits - logits_without, atol=1e-4)


def test_final_residual_is_what_ln_f_receives():
    model, ids = tiny(), toy_ids()
    h = final_residual(model, ids)
    with torch.no_grad():
        assert torch.allclose(model.lm_head(model.ln_f(h)), model(ids), atol=1e-5)


def test_knock_out_at_one_position_per_row_touches_only_that_position():
    model, ids = tiny(), toy_ids()
    d_ff = model.blocks[0].ffn.d_ff
    mask = torch.zeros(ids.shape[0], d_ff, dtype=torch.bool)
    mask[:, :20] = True
    positions = torch.tensor([1, 2, 3, 4, 5, 6])
    before = collect(model, ids)
    with knock_out(model, 0, mask, positions=positions):
        after = collect(model, ids)
    rows = torch.arange(ids.shape[0])
    for n, t in zip(rows.tolist(), positions.tolist()):
        assert torch.equal(after.coefficients[0][n, :t], before.coefficients[0][n, :t])      # earlier positions
    hit = after.outputs[0][rows, positions]
    expected = before.outputs[0][rows, positions] - \
        (before.coefficients[0][rows, positions][:, :20] @ model.blocks[0].ffn.w2.weight[:, :20].T.detach())
    assert torch.allclose(hit, expected, atol=1e-5)
    # an index list silences the same neurons in every row, at each row's position
    with knock_out(model, 0, list(range(20)), positions=positions):
        same = collect(model, ids)
    assert torch.allclose(same.logits, after.logits)
    with pytest.raises(TypeError, match="positions must be a"):
        with knock_out(model, 0, [1], positions=[1, 2]):
            pass
    with pytest.raises(ValueError, match="the neurons mask has 6 rows but positions has 2"):
        with knock_out(model, 0, mask, positions=torch.tensor([1, 2])):
            pass


def test_knockout_sets():
    activity = torch.tensor([[5.0, 4.0, 3.0, 0.5, 0.1, 0.0],
                             [0.0, 0.2, 0.1, 3.0, 2.0, 1.0],
                             [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    donor = torch.tensor([1, 0, 0])
    sets = knockout_sets(activity, donor, 2, generator=torch.Generator().manual_seed(0))
    assert all(s.dtype == torch.float32 and s.shape == (3, 6) for s in sets.values())
    assert sets["own"][0].nonzero().flatten().tolist() == [0, 1]
    assert sets["other"][0].nonzero().flatten().tolist() == [3, 4]           # row 1's top two
    # row 0: the other set silences 0.5 + 0.1 = 0.6 of row 0's activity: 0.6 / 5 of its top neuron does the same
    assert sets["matched"][0].nonzero().flatten().tolist() == [0]
    assert sets["matched"][0, 0].item() == pytest.approx(0.12)
    # row 1: the other set (row 0's top: neurons 0, 1) silences 0.2; a fifteenth of its own top neuron (3.0) does
    assert sets["matched"][1].nonzero().flatten().tolist() == [3]
    assert sets["matched"][1, 3].item() == pytest.approx(0.2 / 3)
    assert torch.allclose(removed_activity(activity, sets["matched"]), removed_activity(activity, sets["other"]))
    assert (sets["random"].sum(1) == 2).all() and (sets["own"].sum(1) == 2).all()
    with pytest.raises(ValueError, match="donor must be a long tensor of shape"):
        knockout_sets(activity, torch.tensor([0, 1]), 2)
    with pytest.raises(ValueError, match=r"n_off must be an int in \[1, 6\], got 7"):
        knockout_sets(activity, donor, 7)


def test_knockout_sets_matched_silences_exactly_the_activity_of_the_other_set():
    """The own top-n activity is at least any n neurons' activity, so the matched set is a prefix of the own
    ranking (the last neuron in part), within the own top n, and silences exactly what the other set silences."""
    g = torch.Generator().manual_seed(3)
    activity = torch.nn.functional.gelu(torch.randn(50, 30, generator=g) * 2)
    donor = torch.randperm(50, generator=g)
    sets = knockout_sets(activity, donor, 8, generator=g)
    matched = sets["matched"]
    assert torch.allclose(removed_activity(activity, matched), removed_activity(activity, sets["other"]), atol=1e-5)
    assert ((matched > 0) <= (sets["own"] > 0)).all()          # only own neurons
    assert ((matched > 0) & (matched < 1)).sum(1).le(1).all()   # at most one neuron in part
    ranked = matched.gather(1, activity.argsort(dim=1, descending=True))
    assert (ranked[:, :-1] >= ranked[:, 1:]).all()              # a prefix of the own ranking


def test_knockout_sets_match_nothing_when_the_other_set_is_silent_at_this_fact():
    """Where the donor's top neurons sit in GELU's negative dip at this fact, the other set silences no firing,
    and so does the matched set (it removes nothing), while Σm alone would be negative and could not be matched."""
    activity = torch.tensor([[3.0, 2.0, -0.1, -0.1], [-0.1, -0.1, 3.0, 2.0]])
    sets = knockout_sets(activity, torch.tensor([1, 0]), 2)
    assert removed_activity(activity, sets["other"]).tolist() == [0.0, 0.0]
    assert sets["matched"].sum().item() == 0.0


def test_removed_write_is_the_length_of_the_vector_a_knock_out_takes_out():
    activity = torch.tensor([[2.0, -0.1, 1.0], [0.5, 3.0, 0.0]])
    values = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])                     # row i: value i
    removed = torch.tensor([[1.0, 1.0, 0.5], [0.0, 1.0, 1.0]])
    expected = torch.stack([(2.0 * values[0] - 0.1 * values[1] + 0.5 * values[2]).norm(), (3.0 * values[1]).norm()])
    assert torch.allclose(removed_write(activity, removed, values).float(), expected)


def test_size_matched_takes_out_a_write_as_long_as_the_other_set_does():
    """By hand: values are orthogonal, so the own prefix 3 e0, then 2 e1 in part, reaches the other set's length."""
    activity = torch.tensor([[3.0, 2.0, 1.0, 0.5], [0.0, 0.5, 2.0, 3.0]])
    values = torch.eye(4)
    sets = knockout_sets(activity, torch.tensor([1, 0]), 2, values=values)
    # row 0: "other" is row 1's top two (neurons 3, 2): it removes 1 e2 + 0.5 e3, length √1.25 < 3: part of neuron 0
    assert sets["size-matched"][0].nonzero().flatten().tolist() == [0]
    assert sets["size-matched"][0, 0].item() == pytest.approx(1.25 ** 0.5 / 3)
    # row 1: "other" (neurons 0, 1) removes 0.5 e1, length 0.5: a sixth of its top neuron (3.0)
    assert sets["size-matched"][1, 3].item() == pytest.approx(0.5 / 3)
    assert torch.allclose(removed_write(activity, sets["size-matched"], values),
                          removed_write(activity, sets["other"], values))


def test_size_matched_on_random_memories_a_prefix_of_the_own_ranking_and_the_other_sets_unchanged():
    g = torch.Generator().manual_seed(4)
    activity = torch.nn.functional.gelu(torch.randn(60, 30, generator=g) * 2)
    values, donor = torch.randn(30, 6, generator=g), torch.randperm(60, generator=g)
    plain = knockout_sets(activity, donor, 8, generator=torch.Generator().manual_seed(1))
    sets = knockout_sets(activity, donor, 8, generator=torch.Generator().manual_seed(1), values=values)
    assert all(torch.equal(plain[name], sets[name]) for name in plain) and set(sets) == set(plain) | {"size-matched"}
    size = sets["size-matched"]
    gap = removed_write(activity, size, values) - removed_write(activity, sets["other"], values)
    exact = gap.abs() < 1e-4
    assert exact.float().mean() > 0.8                                     # matched exactly where a prefix reaches it
    assert (size[~exact] == (activity[~exact] > 0).float()).all()          # elsewhere every firing own neuron is off
    assert ((size > 0) & (size < 1)).sum(1).le(1).all()                    # at most one neuron in part
    ranked = size.gather(1, activity.argsort(dim=1, descending=True))
    assert (ranked[:, :-1] >= ranked[:, 1:]).all()                         # a prefix of the own ranking
    # a short first pass (redone in full where it does not reach) gives the same shares
    target = removed_write(activity, sets["other"], values)
    assert torch.allclose(_size_matched(activity.double(), values.double(), target, first=3).float(), size)


def test_knockout_sets_for_chosen_rows_are_the_rows_of_the_full_sets():
    g = torch.Generator().manual_seed(5)
    activity = torch.nn.functional.gelu(torch.randn(20, 12, generator=g) * 2)
    values, donor, rows = torch.randn(12, 4, generator=g), torch.randperm(20, generator=g), torch.tensor([3, 0, 17])
    full = knockout_sets(activity, donor, 4, generator=torch.Generator().manual_seed(2), values=values)
    some = knockout_sets(activity, donor, 4, generator=torch.Generator().manual_seed(2), values=values, rows=rows)
    assert all(torch.equal(full[name][rows], some[name]) for name in full)
    with pytest.raises(ValueError, match=r"values must be a \(d_ff=12, d_model\) tensor"):
        knockout_sets(activity, donor, 4, values=values.T)


def test_knock_out_removes_a_share_of_each_coefficient():
    model, ids = tiny(), toy_ids()
    share = torch.zeros(ids.shape[0], 64)
    share[:, :5] = 0.5
    share[1, 7] = 1.0
    captured = {}
    with torch.no_grad(), knock_out(model, 0, share, positions=torch.full((ids.shape[0],), 2)):
        # registered after knock_out's pre-hook, so it sees the coefficients that reach w2
        handle = model.blocks[0].ffn.w2.register_forward_pre_hook(lambda m, inputs: captured.update(m=inputs[0]))
        model(ids)
    scaled = captured["m"].clone()
    with torch.no_grad():
        model(ids)
    handle.remove()
    full = captured["m"]
    assert torch.allclose(scaled[:, 2, :5], 0.5 * full[:, 2, :5]) and scaled[1, 2, 7] == 0
    assert torch.equal(scaled[:, 3], full[:, 3]) and torch.equal(scaled[:, 2, 8:], full[:, 2, 8:])
    with pytest.raises(ValueError, match=r"holds the share of each coefficient removed, in \[0, 1\]"):
        with knock_out(model, 0, share * 3):
            pass


def test_knockout_drops_are_the_drop_in_answer_probability():
    model, ids = tiny(), toy_ids()
    answer_pos, answer_id = torch.full((6,), 3), ids[:, 4]
    sets = knockout_sets(collect(model, ids).coefficients[1][:, 3], torch.tensor([1, 2, 3, 4, 5, 0]), 4)
    drops = knockout_drops(model, 1, ids, answer_pos, answer_id, answer_pos, sets)
    before = answer_probability(model, ids, answer_pos, answer_id)
    with knock_out(model, 1, sets["own"], positions=answer_pos):
        after = answer_probability(model, ids, answer_pos, answer_id)
    assert torch.allclose(drops["own"], before - after) and set(drops) == set(sets)


def test_same_group_donors_stay_in_their_group_and_never_pick_themselves():
    groups = torch.tensor([0, 1, 0, 1, 0, 2, 1])
    donor = same_group_donors(groups, torch.Generator().manual_seed(0))
    assert (groups[donor] == groups).all()
    assert (donor != torch.arange(7))[groups != 2].all() and donor[5] == 5     # a group of one is its own donor
    assert sorted(donor[groups == 0].tolist()) == [0, 2, 4]                      # each row is a donor once
    with pytest.raises(TypeError, match="groups must be a"):
        same_group_donors(torch.tensor([0.0, 1.0]))


def test_answer_and_rival_shifts_are_the_direct_logit_shifts_against_the_average_word():
    model, ids = tiny(), toy_ids()
    answer_pos, answer_id, groups = torch.full((6,), 3), ids[:, 4], torch.tensor([0, 0, 0, 1, 1, 1])
    answer, rivals = answer_and_rival_shifts(model, 1, ids, answer_pos, answer_id, groups)
    trace, rows = collect(model, ids), torch.arange(6)
    written = trace.outputs[1][rows, 3] - model.blocks[1].ffn.w2.bias.detach()
    shifts = direct_logit_shifts(model, written, final_residual(model, ids)[rows, 3])
    shifts = shifts - shifts.mean(dim=1, keepdim=True)
    assert torch.allclose(answer, shifts[rows, answer_id], atol=1e-6)
    for n in range(6):
        others = [int(a) for a in answer_id[groups == groups[n]].unique() if a != answer_id[n]]
        expected = shifts[n, others].mean() if others else torch.tensor(0.0)
        assert torch.allclose(rivals[n], expected, atol=1e-6)


def test_shifts_by_reference_measure_against_the_outside_words_the_vocabulary_or_the_median():
    model, ids = tiny(), toy_ids()
    answer_pos, answer_id, groups = torch.full((6,), 3), ids[:, 4], torch.tensor([0, 0, 0, 1, 1, 1])
    by_reference = shifts_by_reference(model, 1, ids, answer_pos, answer_id, groups)
    trace, rows = collect(model, ids), torch.arange(6)
    written = trace.outputs[1][rows, 3] - model.blocks[1].ffn.w2.bias.detach()
    raw = direct_logit_shifts(model, written, final_residual(model, ids)[rows, 3])
    for n in range(6):
        contest = answer_id[groups == groups[n]].unique()
        outside = torch.ones(raw.shape[1], dtype=torch.bool)
        outside[contest] = False
        others = [int(a) for a in contest if a != answer_id[n]]
        for reference, ref in [("outside", raw[n, outside].mean()), ("vocabulary", raw[n].mean()),
                               ("median", raw[n].median())]:
            answer, rivals = by_reference[reference]
            assert torch.allclose(answer[n], raw[n, answer_id[n]] - ref, atol=1e-5)
            expected = raw[n, others].mean() - ref if others else torch.tensor(0.0)
            assert torch.allclose(rivals[n], expected, atol=1e-5)
    plain = answer_and_rival_shifts(model, 1, ids, answer_pos, answer_id, groups, reference="outside")
    assert all(torch.equal(a, b) for a, b in zip(plain, by_reference["outside"]))
    with pytest.raises(ValueError, match="reference"):
        answer_and_rival_shifts(model, 1, ids, answer_pos, answer_id, groups, reference="mode")


def test_random_size_matched_removes_as_long_a_write_as_the_other_set_and_leaves_the_other_sets():
    g = torch.Generator().manual_seed(3)
    activity, values = torch.randn(12, 16, generator=g).relu(), torch.randn(16, 5, generator=g)
    donor = torch.arange(12).roll(1)
    plain = knockout_sets(activity, donor, 4, generator=torch.Generator().manual_seed(1), values=values)
    sets = knockout_sets(activity, donor, 4, generator=torch.Generator().manual_seed(1), values=values,
                         random_size_matched=True)
    assert all(torch.equal(plain[name], sets[name]) for name in plain)
    share = sets["random size-matched"]
    assert ((share >= 0) & (share <= 1)).all() and (share[activity <= 0] == 0).all()
    target, got = removed_write(activity, sets["other"], values), removed_write(activity, share, values)
    reached = removed_write(activity, torch.ones_like(activity), values) >= target
    assert torch.allclose(got[reached], target[reached], atol=1e-4)


def test_patched_ffn_output_replaces_one_position_per_row():
    model, ids = tiny(), toy_ids()
    donor_ids = ids.flip(0)
    donor = collect(model, donor_ids).outputs[1]
    positions = torch.tensor([0, 1, 2, 3, 4, 5])
    rows = torch.arange(ids.shape[0])
    before = collect(model, ids)
    seen = {}
    with patched_ffn_output(model, 1, positions, donor[rows, positions]):
        handle = model.blocks[1].ffn.register_forward_hook(lambda m, i, o: seen.update(out=o))   # runs after the patch
        patched = collect(model, ids)
        handle.remove()
    assert torch.allclose(seen["out"][rows, positions], donor[rows, positions])
    assert torch.allclose(seen["out"][0, 1:], before.outputs[1][0, 1:], atol=1e-6)   # other positions untouched
    assert torch.allclose(patched.logits[0, 1:], before.logits[0, 1:], atol=1e-5)   # layer 1 is the last block
    assert not torch.allclose(patched.logits[0, 0], before.logits[0, 0])
    assert torch.equal(collect(model, ids).logits, before.logits)                  # the hook is gone
    with pytest.raises(ValueError, match="replacement must be"):
        with patched_ffn_output(model, 1, positions, donor[0]):
            pass


def test_patching_effect_is_the_mean_probability_after_each_patch():
    model = tiny()
    ids = torch.tensor([[1, 3, 4, 5, 6], [1, 7, 4, 5, 6], [1, 8, 4, 5, 6]])   # one template, three subjects
    donor_ids = ids.roll(1, dims=0)
    answer_pos, answer_id = torch.full((3,), 3), torch.tensor([9, 10, 11])
    effect = patching_effect(model, ids, answer_pos, answer_id, donor_ids)
    assert effect.shape == (2, 5) and torch.isnan(effect[:, 4]).all()          # after the answer: not computed
    baseline = answer_probability(model, ids, answer_pos, answer_id).mean()
    assert effect[0, 0].item() == pytest.approx(baseline.item(), abs=1e-6)     # position 0 is the same everywhere
    donor = collect(model, donor_ids).outputs[0][:, 1]
    with patched_ffn_output(model, 0, torch.ones(3, dtype=torch.long), donor):
        expected = answer_probability(model, ids, answer_pos, answer_id).mean()
    assert effect[0, 1].item() == pytest.approx(expected.item(), abs=1e-6)
    some = patching_effect(model, ids, answer_pos, answer_id, donor_ids, positions=[1])
    assert torch.isnan(some[:, 0]).all() and some[1, 1].item() == pytest.approx(effect[1, 1].item(), abs=1e-6)
    with pytest.raises(ValueError, match="donor_ids must have the shape of ids"):
        patching_effect(model, ids, answer_pos, answer_id, donor_ids[:2])


@pytest.fixture
def gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=3, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_sub_updates_knock_out_and_patching(gpt2):
    ids = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(1))
    su = sub_updates(gpt2, ids, 0, position=4, example=1)
    assert torch.allclose(su.vectors.sum(0) + su.bias, su.output, atol=1e-5)
    base = answer_probability(gpt2, ids, torch.full((4,), 3), torch.tensor([1, 2, 3, 4]))
    with knock_out(gpt2, 1, list(range(128))):
        silenced = answer_probability(gpt2, ids, torch.full((4,), 3), torch.tensor([1, 2, 3, 4]))
    assert not torch.allclose(base, silenced)
    effect = patching_effect(gpt2, ids, torch.full((4,), 3), torch.tensor([1, 2, 3, 4]), ids.roll(1, dims=0))
    assert effect.shape == (3, 6) and not torch.isnan(effect[:, :4]).any()


def test_knockouts_at_sites_are_the_sets_and_drops_of_each_site_for_the_drawn_facts():
    model, ids = tiny(), toy_ids()
    answer_pos, answer_id, groups = torch.full((6,), 3), ids[:, 4], torch.tensor([0, 0, 0, 1, 1, 1])
    coefficients = collect(model, ids).coefficients
    sites = {"L1 at 3": (1, answer_pos), "L0 at 2": (0, torch.full((6,), 2))}
    got = knockouts_at_sites(model, coefficients, ids, answer_pos, answer_id, groups, sites, 4, n_facts=4, seed=3)
    g = torch.Generator().manual_seed(3)
    rows, donor = torch.randperm(6, generator=g)[:4], same_group_donors(groups, g)
    for site, (layer, pos) in sites.items():
        activity = coefficients[layer][torch.arange(6), pos]
        values = model.blocks[layer].ffn.w2.weight.detach().T
        sets = knockout_sets(activity, donor, 4, generator=g, values=values, rows=rows, random_size_matched=True)
        drops = knockout_drops(model, layer, ids[rows], answer_pos[rows], answer_id[rows], pos[rows], sets)
        for name, share in sets.items():
            drop, silenced, size, touched = got[site, name]
            assert torch.equal(drop, drops[name]) and torch.equal(touched, (share > 0).sum(1).float())
            assert torch.equal(silenced, removed_activity(activity[rows], share))
            assert torch.equal(size, removed_write(activity[rows], share, values))
        assert torch.equal(got[site, "shared"], (sets["own"] * sets["other"]).sum(1) / 4)


def test_promotion_by_group_splits_the_seed_means_by_group():
    from helpers.interventions import promotion_by_group, seed_means
    g = torch.Generator().manual_seed(0)
    groups = torch.tensor([0, 0, 1, 1, 1])
    by_seed = [{"outside": (torch.randn(5, generator=g), torch.randn(5, generator=g))} for _ in range(4)]
    answer, rivals = seed_means(by_seed)
    assert torch.allclose(answer, torch.stack([s["outside"][0].mean() for s in by_seed]))
    family = promotion_by_group(by_seed, groups, ["a", "b"])
    assert list(family) == ["a: answer", "a: rivals", "a: |answer| − |rivals|",
                            "b: answer", "b: rivals", "b: |answer| − |rivals|"]
    b_answer, b_rivals = seed_means(by_seed, rows=groups == 1)
    assert torch.allclose(family["b: rivals"].diffs.float(), b_rivals)
    assert torch.allclose(family["b: |answer| − |rivals|"].diffs.float(), b_answer.abs() - b_rivals.abs())
    # the pooled mean is the groups' means weighted by their sizes
    a_answer, _ = seed_means(by_seed, rows=groups == 0)
    assert torch.allclose(answer, (2 * a_answer + 3 * b_answer) / 5)
    with pytest.raises(ValueError, match="groups must have one entry per row"):
        promotion_by_group(by_seed, groups[:4], ["a", "b"])
    with pytest.raises(ValueError, match="groups must hold indices into names"):
        promotion_by_group(by_seed, groups, ["a"])


def test_promotion_grid_prints_each_groups_answer_and_rivals_with_holms_verdict():
    from helpers.interventions import promotion_by_group, promotion_grid
    from helpers.stats import holm
    g = torch.Generator().manual_seed(0)
    groups = torch.tensor([0, 0, 1, 1])
    by_seed = [{"outside": (torch.tensor([5.0, 5.0, 0.0, 0.0]) + 0.1 * torch.randn(4, generator=g),
                            torch.randn(4, generator=g))} for _ in range(6)]
    family = promotion_by_group(by_seed, groups, ["a", "b"], with_gap=False)
    assert list(family) == ["a: answer", "a: rivals", "b: answer", "b: rivals"]
    lines = promotion_grid(family, ["a", "b"]).splitlines()
    verdicts = {v.name: v for v in holm(family)}
    assert lines[0].startswith("Holm's step-down over 4 comparisons") and "answer" in lines[1] and "rivals" in lines[1]
    assert verdicts["a: answer"].verdict == "higher"                           # a's answer: +5 in every seed
    assert lines[2].startswith("  a ") and "▲ (up in  6/6" in lines[2]
    if not all(v.resolved for v in verdicts.values()):
        assert "the step-down stops at rank" in lines[-1]
    with pytest.raises(ValueError, match="family must hold"):
        promotion_grid(family, ["a"])


def test_random_direction_drops_subtract_a_vector_of_the_given_length_at_each_site():
    from helpers.interventions import random_direction_drops
    model, ids = tiny(), toy_ids()
    answer_pos, answer_id = torch.full((6,), 3), ids[:, 4]
    outputs = collect(model, ids).outputs
    sites = {"L1 at 3": (1, answer_pos), "L0 at 2": (0, torch.full((6,), 2))}
    zero = {site: torch.zeros(4) for site in sites}
    got = random_direction_drops(model, outputs, ids, answer_pos, answer_id, sites, zero, n_facts=4, seed=3)
    assert all(v.shape == (4,) and v.abs().max() < 1e-5 for v in got.values())       # length 0: nothing changes
    long = {site: torch.full((4,), 50.0) for site in sites}
    got = random_direction_drops(model, outputs, ids, answer_pos, answer_id, sites, long, n_facts=4, seed=3, draws=2)
    assert any(v.abs().max() > 1e-3 for v in got.values())
    again = random_direction_drops(model, outputs, ids, answer_pos, answer_id, sites, long, n_facts=4, seed=3, draws=2)
    assert all(torch.equal(got[s], again[s]) for s in sites)
    with pytest.raises(ValueError, match="one length per fact"):
        random_direction_drops(model, outputs, ids, answer_pos, answer_id, sites, {s: torch.ones(3) for s in sites},
                               n_facts=4, seed=3)


def test_margin_split_reads_the_model_the_attention_output_and_the_ffn_sum_at_each_answer():
    from helpers.interventions import margin_split
    model = tiny()
    ids = torch.randint(0, VOCAB, (5, 6), generator=torch.Generator().manual_seed(3))
    answer_pos, answer_id = torch.tensor([5, 4, 3, 5, 2]), torch.tensor([1, 2, 3, 1, 4])
    candidates = torch.tensor([1, 2, 3, 4, 7])
    lead = margin_split(model, 1, ids, answer_pos, answer_id, candidates)
    seen = {}
    handle = model.blocks[1].attn.register_forward_hook(lambda m, i, o: seen.update(a=o))
    with torch.no_grad():
        logits = model(ids)
    handle.remove()
    h = final_residual(model, ids)
    for n in range(5):
        t, a = int(answer_pos[n]), int(answer_id[n])
        rivals = candidates[candidates != a]

        def by_hand(scores):
            return scores[a] - scores[rivals].mean()

        su = sub_updates(model, ids, 1, t, example=n)
        assert torch.allclose(lead["model"][n], by_hand(logits[n, t]), atol=1e-5)
        assert torch.allclose(lead["ffn"][n], by_hand(direct_logit_shifts(model, su.vectors.sum(0), h[n, t])),
                              atol=1e-5)
        assert torch.allclose(lead["attention"][n], by_hand(direct_logit_shifts(model, seen["a"][n, t], h[n, t])),
                              atol=1e-5)
    with pytest.raises(TypeError, match="blocks"):
        margin_split(torch.nn.Sequential(model), 1, ids, answer_pos, answer_id, candidates)
