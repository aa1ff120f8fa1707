"""The course's fact table and its tokenised data set.

``data/countries.csv`` lists one country per row with four facts about it:
its capital, continent, main official language and currency. Each fact
becomes a short sentence, for example::

    <bos> the capital of france is paris

A tiny transformer trained to predict the last word must store the facts
somewhere, which makes it a convenient specimen for studying FFN neurons as
key-value memories (Geva et al. 2021).

Every value in the table is a single lowercase word (multi-word names are
joined with underscores: ``united_kingdom``, ``buenos_aires``), so tokens
are simply words and the answer is always exactly one token.

Typical use::

    facts = load_facts()                 # 4 facts per country
    vocab = build_vocab(facts)
    data = make_dataset(facts, vocab)    # data.ids: (N, T) token ids
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

DEFAULT_PATH = Path(__file__).parent / "data" / "countries.csv"

RELATIONS: dict[str, str] = {
    "capital": "the capital of {subject} is",
    "continent": "{subject} is located in",
    "language": "the official language of {subject} is",
    "currency": "the currency of {subject} is the",
}
"""Relation name (also the CSV column holding its answers) -> prompt template."""

PAD = "<pad>"
BOS = "<bos>"
IGNORE_INDEX = -100  # the target value that torch's cross_entropy skips


@dataclass(frozen=True)
class Fact:
    """One fact: ``relation(subject) = obj``, e.g. ``Fact("france", "capital", "paris")``."""

    subject: str
    relation: str
    obj: str


def _check_relation(relation: str, name: str = "relation") -> None:
    if relation not in RELATIONS:
        raise ValueError(
            f"{name}={relation!r} is not a known relation; known: {list(RELATIONS)}"
        )


def _check_facts(facts: Sequence[Fact]) -> None:
    if isinstance(facts, (str, bytes)) or not isinstance(facts, Sequence):
        raise TypeError(f"facts must be a sequence of Fact, got {type(facts).__name__}")
    if len(facts) == 0:
        raise ValueError("facts is empty; expected at least one Fact")
    for i, fact in enumerate(facts):
        if not isinstance(fact, Fact):
            raise TypeError(f"facts[{i}] must be a Fact, got {type(fact).__name__}: {fact!r}")


def _template_words(relations: Sequence[str]) -> list[str]:
    """The words of the given relations' templates, without the subject slot."""
    words = []
    for relation in relations:
        words += [w for w in RELATIONS[relation].split() if w != "{subject}"]
    return words


def load_facts(
    path: str | Path | None = None, relations: Sequence[str] | None = None
) -> list[Fact]:
    """Read the country table and return its facts.

    Args:
        path: the CSV file; ``None`` means the table shipped beside this module
            (works from any current directory). The file needs a ``country``
            column and one column per requested relation.
        relations: which relations to keep, e.g. ``["capital"]``; ``None``
            means all of ``RELATIONS``.

    Returns:
        The facts in file order, and for each country in the order of
        ``relations``: ``[france/capital, france/continent, ..., next country]``.
    """
    if relations is None:
        relations = list(RELATIONS)
    if isinstance(relations, str) or not isinstance(relations, Sequence):
        raise TypeError(
            f"relations must be a list of relation names, got {relations!r}"
        )
    if len(relations) == 0:
        raise ValueError(f"relations is empty; choose from {list(RELATIONS)}")
    for relation in relations:
        _check_relation(relation, name="relations entry")

    path = DEFAULT_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r}: no such fact table")

    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ["country", *relations] if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"path={str(path)!r} lacks the column(s) {missing}")
        facts = []
        for line, row in enumerate(reader, start=2):
            for column in ["country", *relations]:
                value = row[column]
                if not value or value != value.strip() or " " in value:
                    raise ValueError(
                        f"path={str(path)!r} line {line}: {column}={value!r} "
                        "is not a single word"
                    )
            facts += [Fact(row["country"], r, row[r]) for r in relations]
    if not facts:
        raise ValueError(f"path={str(path)!r} has no data rows")
    return facts


def prompt_words(fact: Fact) -> list[str]:
    """The prompt for ``fact`` as words, starting with ``<bos>`` and without the answer.

    ``Fact("france", "capital", "paris")`` ->
    ``["<bos>", "the", "capital", "of", "france", "is"]``.
    """
    if not isinstance(fact, Fact):
        raise TypeError(f"fact must be a Fact, got {type(fact).__name__}: {fact!r}")
    _check_relation(fact.relation, name="fact.relation")
    return [BOS, *RELATIONS[fact.relation].format(subject=fact.subject).split()]


class Vocab:
    """A word-level vocabulary: ``tokens[i]`` is the word with id ``i``.

    ``<pad>`` always has id 0 and ``<bos>`` id 1.
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        if tokens[:2] != [PAD, BOS]:
            raise ValueError(f"tokens must start with {[PAD, BOS]}, got {tokens[:2]}")
        if len(set(tokens)) != len(tokens):
            duplicates = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"tokens has duplicates: {duplicates}")
        self.tokens: list[str] = tokens
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.pad_id: int = self.stoi[PAD]
        self.bos_id: int = self.stoi[BOS]

    def encode(self, words: Sequence[str]) -> list[int]:
        """Words -> ids. An unknown word raises ``ValueError`` naming it."""
        if isinstance(words, str):
            raise TypeError(f"words must be a list of words, not the string {words!r}")
        ids = []
        for word in words:
            if word not in self.stoi:
                raise ValueError(f"words contains {word!r}, which is not in the vocabulary")
            ids.append(self.stoi[word])
        return ids

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Ids -> words. Accepts a list of ints or a 1-D tensor."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        words = []
        for i in ids:
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"ids contains {i}, outside 0..{len(self.tokens) - 1}")
            words.append(self.tokens[i])
        return words

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens)"


def build_vocab(facts: Sequence[Fact]) -> Vocab:
    """Build the vocabulary for ``facts``, in a fixed order.

    Order: ``<pad>``, ``<bos>``, the words of the templates used (sorted),
    the subjects (sorted), then the answers (sorted). A word already placed
    is not added again, so the same facts always give the same ids.
    """
    _check_facts(facts)
    for f in facts:
        _check_relation(f.relation, name="fact.relation")
    relations = [r for r in RELATIONS if any(f.relation == r for f in facts)]
    groups = [
        [PAD, BOS],
        sorted(set(_template_words(relations))),
        sorted({f.subject for f in facts}),
        sorted({f.obj for f in facts}),
    ]
    tokens: list[str] = []
    for group in groups:
        tokens += [t for t in group if t not in tokens]
    return Vocab(tokens)


@dataclass
class FactDataset:
    """Facts as padded token-id tensors, ready for next-token training.

    Row ``n`` holds ``<bos> prompt... answer`` for ``facts[n]``, then padding.

    Attributes:
        ids: ``(N, T)`` long, token ids, right-padded with ``vocab.pad_id``;
            ``T`` is the longest sequence.
        targets: ``(N, T)`` long, ``targets[n, t] = ids[n, t + 1]`` (the next
            token), or -100 (ignored by ``cross_entropy``) at padding and at
            the last real token, which has no next token.
        answer_pos: ``(N,)`` long, the position whose next-token prediction is
            the answer: ``ids[n, answer_pos[n] + 1] == answer_id[n]``.
        answer_id: ``(N,)`` long, the id of the answer token.
        facts: the ``N`` facts, in row order.
        vocab: the vocabulary used.
    """

    ids: torch.Tensor
    targets: torch.Tensor
    answer_pos: torch.Tensor
    answer_id: torch.Tensor
    facts: list[Fact]
    vocab: Vocab

    def __len__(self) -> int:
        return len(self.facts)

    def prompt_text(self, n: int) -> str:
        """Row ``n``'s prompt as text, without ``<bos>`` or the answer: "the capital of france is"."""
        if not -len(self) <= n < len(self):
            raise IndexError(f"n={n} is out of range for {len(self)} facts")
        return " ".join(prompt_words(self.facts[n])[1:])


def make_dataset(facts: Sequence[Fact], vocab: Vocab | None = None) -> FactDataset:
    """Tokenise ``facts`` (one row each, same order) into a ``FactDataset``.

    ``vocab=None`` builds one with ``build_vocab(facts)``.
    """
    _check_facts(facts)
    if vocab is None:
        vocab = build_vocab(facts)
    elif not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a Vocab or None, got {type(vocab).__name__}")

    sequences = [vocab.encode(prompt_words(f) + [f.obj]) for f in facts]
    n_rows, width = len(sequences), max(len(s) for s in sequences)
    ids = torch.full((n_rows, width), vocab.pad_id, dtype=torch.long)
    targets = torch.full((n_rows, width), IGNORE_INDEX, dtype=torch.long)
    for n, seq in enumerate(sequences):
        length = len(seq)
        ids[n, :length] = torch.tensor(seq)
        targets[n, : length - 1] = ids[n, 1:length]
    lengths = torch.tensor([len(s) for s in sequences])
    answer_pos = lengths - 2  # the answer is the last token; it is predicted one step earlier
    answer_id = ids[torch.arange(n_rows), lengths - 1]
    return FactDataset(ids, targets, answer_pos, answer_id, list(facts), vocab)


def token_types(vocab: Vocab, facts: Sequence[Fact]) -> dict[str, str]:
    """Label every vocabulary token with what it is, for colouring plots.

    Labels: ``"special"`` (``<pad>``, ``<bos>``), ``"template"`` (a prompt word),
    ``"country"`` (a subject), or the relation whose answer it is
    (``"capital"``, ``"continent"``, ``"language"``, ``"currency"``).
    A token that fits several labels gets the first in that order, with
    relations taken in ``RELATIONS`` order (in the shipped table no answer
    belongs to two relations). A token not explained by ``facts`` raises
    ``ValueError``.
    """
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a Vocab, got {type(vocab).__name__}")
    _check_facts(facts)
    labels: dict[str, str] = {}
    candidates = [("special", [PAD, BOS]), ("template", _template_words(list(RELATIONS)))]
    candidates.append(("country", [f.subject for f in facts]))
    for relation in RELATIONS:
        candidates.append((relation, [f.obj for f in facts if f.relation == relation]))
    for label, words in candidates:
        for word in words:
            labels.setdefault(word, label)
    unexplained = [t for t in vocab.tokens if t not in labels]
    if unexplained:
        raise ValueError(f"vocab has tokens that facts does not explain: {unexplained[:10]}")
    return {t: labels[t] for t in vocab.tokens}


def loss_floor(data: FactDataset) -> float:
    """The lowest mean cross-entropy (nats) any next-token model can reach on ``data``'s training targets.

    Training counts every next token, and a prefix such as "<bos> the capital of" is followed by 152
    different countries in the data: no model can know which. The best possible prediction after each
    distinct prefix is the empirical distribution of what follows it there, so the floor is the conditional
    entropy ``H(next token | prefix)`` averaged over all targets (ignored targets, ``-100``, excluded).
    """
    if not isinstance(data, FactDataset):
        raise TypeError(f"data must be a FactDataset, got {type(data).__name__}")
    followers: dict[tuple[int, ...], dict[int, int]] = {}
    for row, targets in zip(data.ids.tolist(), data.targets.tolist()):
        for t, target in enumerate(targets):
            if target != IGNORE_INDEX:
                counts = followers.setdefault(tuple(row[: t + 1]), {})
                counts[target] = counts.get(target, 0) + 1
    total = sum(sum(c.values()) for c in followers.values())
    if total == 0:
        raise ValueError("data has no targets to predict")
    nats = 0.0
    for counts in followers.values():
        n = sum(counts.values())
        nats -= sum(k * math.log(k / n) for k in counts.values())
    return nats / total
