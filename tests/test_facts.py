"""Tests for helpers.facts: the shipped country table and its tokenised data set."""

from __future__ import annotations

import csv
import math
import re

import pytest
import torch

from helpers import facts as F

COLUMNS = ["country", "capital", "continent", "language", "currency"]
CONTINENTS = {"africa", "asia", "europe", "north_america", "south_america", "oceania"}
TOKEN = re.compile(r"^[a-z]+(_[a-z]+)*$")


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with open(F.DEFAULT_PATH, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


@pytest.fixture(scope="module")
def facts() -> list[F.Fact]:
    return F.load_facts()


@pytest.fixture(scope="module")
def data(facts) -> F.FactDataset:
    return F.make_dataset(facts)


# --- the CSV -----------------------------------------------------------------


def test_csv_shape(rows):
    assert 150 <= len(rows) <= 200
    assert all(len(r) == len(COLUMNS) and None not in r for r in rows)


def test_every_value_is_one_lowercase_token(rows):
    bad = [(r["country"], c, r[c]) for r in rows for c in COLUMNS if not TOKEN.match(r[c])]
    assert bad == []


def test_no_duplicate_countries_or_capitals(rows):
    countries = [r["country"] for r in rows]
    capitals = [r["capital"] for r in rows]
    assert len(set(countries)) == len(countries)
    assert len(set(capitals)) == len(capitals)


def test_continents_allowed(rows):
    assert {r["continent"] for r in rows} == CONTINENTS


def test_no_token_in_two_columns(rows):
    # e.g. a capital spelled like a country ("mexico") would confuse the model
    values = {c: {r[c] for r in rows} for c in COLUMNS}
    for i, a in enumerate(COLUMNS):
        for b in COLUMNS[i + 1 :]:
            assert values[a] & values[b] == set(), (a, b)


def test_many_to_one_relations_present(rows):
    currencies = [r["currency"] for r in rows]
    assert currencies.count("euro") > 5 and currencies.count("peso") > 2


# --- loading -----------------------------------------------------------------


def test_load_facts_all_relations(facts, rows):
    assert len(facts) == 4 * len(rows)
    assert facts[:4] == [
        F.Fact(rows[0]["country"], rel, rows[0][rel]) for rel in F.RELATIONS
    ]
    assert F.Fact("france", "capital", "paris") in facts


def test_load_facts_subset_of_relations(rows):
    capitals = F.load_facts(relations=["capital"])
    assert len(capitals) == len(rows)
    assert {f.relation for f in capitals} == {"capital"}


def test_load_from_other_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(F.load_facts()) > 0


def test_load_custom_path(tmp_path):
    path = tmp_path / "mini.csv"
    path.write_text("country,capital\nfrance,paris\nspain,madrid\n")
    assert F.load_facts(path, relations=["capital"]) == [
        F.Fact("france", "capital", "paris"),
        F.Fact("spain", "capital", "madrid"),
    ]
    with pytest.raises(ValueError, match="path"):
        F.load_facts(path)  # no continent column etc.


def test_relations_templates():
    assert set(F.RELATIONS) == {"capital", "continent", "language", "currency"}
    assert all(t.count("{subject}") == 1 for t in F.RELATIONS.values())


# --- errors ------------------------------------------------------------------


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        F.load_facts(missing)


def test_unknown_relation_lists_known():
    with pytest.raises(ValueError, match=r"relations.*'colour'.*capital"):
        F.load_facts(relations=["colour"])
    with pytest.raises(TypeError, match="relations"):
        F.load_facts(relations="capital")
    with pytest.raises(ValueError, match="relations"):
        F.load_facts(relations=[])


def test_bad_facts_arguments():
    with pytest.raises(ValueError, match="facts"):
        F.make_dataset([])
    with pytest.raises(ValueError, match="facts"):
        F.build_vocab([])
    with pytest.raises(TypeError, match=r"facts\[0\]"):
        F.build_vocab([("france", "capital", "paris")])
    with pytest.raises(ValueError, match="fact.relation.*'size'"):
        F.prompt_words(F.Fact("france", "size", "big"))
    with pytest.raises(TypeError, match="vocab"):
        F.make_dataset([F.Fact("france", "capital", "paris")], vocab=["<pad>"])


def test_unknown_word_named(facts):
    vocab = F.build_vocab(facts)
    with pytest.raises(ValueError, match="'atlantis'"):
        vocab.encode(["the", "atlantis"])
    with pytest.raises(ValueError, match="ids"):
        vocab.decode([len(vocab)])
    spain = F.build_vocab([F.Fact("spain", "capital", "madrid")])
    with pytest.raises(ValueError, match="'france'"):
        F.make_dataset([F.Fact("france", "capital", "paris")], spain)


# --- prompts and vocabulary --------------------------------------------------


def test_prompt_words():
    fact = F.Fact("france", "capital", "paris")
    assert F.prompt_words(fact) == ["<bos>", "the", "capital", "of", "france", "is"]
    assert F.prompt_words(F.Fact("peru", "currency", "sol"))[-2:] == ["is", "the"]


def test_vocab_specials_order_and_round_trip(facts):
    vocab = F.build_vocab(facts)
    assert vocab.tokens[:2] == ["<pad>", "<bos>"]
    assert (vocab.pad_id, vocab.bos_id) == (0, 1)
    assert len(vocab) == len(set(vocab.tokens))
    assert vocab.stoi == {t: i for i, t in enumerate(vocab.tokens)}
    assert vocab.decode(vocab.encode(vocab.tokens)) == vocab.tokens
    words = F.prompt_words(facts[0]) + [facts[0].obj]
    assert vocab.decode(vocab.encode(words)) == words
    assert vocab.decode(torch.tensor(vocab.encode(words))) == words


def test_vocab_is_deterministic_and_grouped(facts):
    vocab = F.build_vocab(facts)
    assert F.build_vocab(list(reversed(facts))).tokens == vocab.tokens
    n_template = len({w for t in F.RELATIONS.values() for w in t.split()} - {"{subject}"})
    templates = vocab.tokens[2 : 2 + n_template]
    assert templates == sorted(templates) and "capital" in templates
    subjects = sorted({f.subject for f in facts})
    assert vocab.tokens[2 + n_template : 2 + n_template + len(subjects)] == subjects


def test_vocab_covers_facts(facts):
    vocab = F.build_vocab(facts)
    expected = {"<pad>", "<bos>"} | {w for f in facts for w in F.prompt_words(f) + [f.obj]}
    assert set(vocab.tokens) == expected


# --- the data set ------------------------------------------------------------


def test_dataset_shapes(data, facts):
    n = len(facts)
    assert len(data) == n and data.facts == facts
    assert data.ids.shape[0] == n and data.ids.dtype == torch.long
    assert data.targets.shape == data.ids.shape and data.targets.dtype == torch.long
    assert data.answer_pos.shape == (n,) and data.answer_pos.dtype == torch.long
    assert data.answer_id.shape == (n,) and data.answer_id.dtype == torch.long
    longest = max(len(F.prompt_words(f)) + 1 for f in facts)
    assert data.ids.shape[1] == longest


def test_answer_positions(data):
    rows = torch.arange(len(data))
    assert torch.equal(data.ids[rows, data.answer_pos + 1], data.answer_id)
    assert torch.equal(data.targets[rows, data.answer_pos], data.answer_id)
    answers = [f.obj for f in data.facts]
    assert data.vocab.decode(data.answer_id) == answers


def test_targets_ignore_exactly_padding_and_last_token(data):
    vocab = data.vocab
    assert (data.ids[:, 0] == vocab.bos_id).all()
    real = data.ids != vocab.pad_id
    lengths = real.sum(dim=1)
    # padding only on the right
    positions = torch.arange(data.ids.shape[1])
    assert torch.equal(real, positions < lengths[:, None])
    has_target = positions < (lengths - 1)[:, None]
    assert torch.equal(data.targets == -100, ~has_target)
    assert torch.equal(data.targets[:, :-1][has_target[:, :-1]], data.ids[:, 1:][has_target[:, :-1]])


def test_prompt_text(data):
    n = data.facts.index(F.Fact("france", "capital", "paris"))
    assert data.prompt_text(n) == "the capital of france is"
    with pytest.raises(IndexError, match="n="):
        data.prompt_text(len(data))


def test_shared_vocab_across_subsets(facts):
    vocab = F.build_vocab(facts)
    capitals = [f for f in facts if f.relation == "capital"]
    sub = F.make_dataset(capitals, vocab)
    assert sub.vocab is vocab and len(sub) == len(capitals)


# --- token types ---------------------------------------------------------------


def test_token_types_cover_vocab(facts):
    vocab = F.build_vocab(facts)
    types = F.token_types(vocab, facts)
    assert list(types) == vocab.tokens
    allowed = {"special", "template", "country", *F.RELATIONS}
    assert set(types.values()) == allowed
    assert types["<bos>"] == "special"
    assert types["capital"] == "template"  # a prompt word, not the relation's answer
    assert types["france"] == "country"
    assert types["paris"] == "capital"
    assert types["europe"] == "continent"
    assert types["french"] == "language"
    assert types["euro"] == "currency"


def test_token_types_first_relation_wins():
    facts = [F.Fact("a", "capital", "x"), F.Fact("b", "currency", "x")]
    assert F.token_types(F.build_vocab(facts), facts)["x"] == "capital"


def test_token_types_rejects_unexplained_tokens(facts):
    vocab = F.build_vocab(facts)
    with pytest.raises(ValueError, match="vocab"):
        F.token_types(vocab, facts[:4])


def test_loss_floor_is_the_conditional_entropy_of_the_next_token():
    facts = [F.Fact("france", "capital", "paris"), F.Fact("spain", "capital", "madrid"),
             F.Fact("italy", "capital", "rome")]
    data = F.make_dataset(facts)
    # targets per sentence: the, capital, of, <country>, is, <answer>; only "<country>" after "... of" is a guess
    # among 3 equally likely words; everything else is certain
    expected = math.log(3) / (6 * 3) * 3
    assert F.loss_floor(data) == pytest.approx(expected)
    assert F.loss_floor(F.make_dataset(F.load_facts())) == pytest.approx(1.0256, abs=1e-4)
    with pytest.raises(TypeError, match="data must be a FactDataset"):
        F.loss_floor(facts)

