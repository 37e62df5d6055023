"""Sentences -> token ids or word-table rows, exactly as the original encode paths look words up."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...models.tokenize import get_tokenizer, whitespace_tokens
from .errors import EncodeInputError

EOS_ID, UNK_ID = 0, 1
# Where a token's vector comes from (``POST /tokenize``): the model's own vocabulary, the vocabulary
# expansion (word2vec rows), the UNK vector, or None where the artifact does not record it (published tables).
MODEL, EXPANSION, UNK = "model", "expansion", "unk"


def tokenizer_for(name: str, *, pretokenized: bool) -> Callable[[str], list[str]]:
    """Pre-tokenized input is split on whitespace only (the original behaviour)."""
    return whitespace_tokens if pretokenized else get_tokenizer(name)


class OrderVocabulary:
    """worddict lookup: unknown words and ids >= n_words become UNK (1); ``<eos>`` is id 0."""

    unk: int | None = UNK_ID
    _words: dict[int, str] | None = None

    def __init__(self, worddict: dict[str, int], n_words: int) -> None:
        self.worddict, self.n_words = worddict, n_words

    def ids(self, tokens: Sequence[str], *, eos: bool) -> list[int]:
        ids = []
        for w in tokens:
            i = self.worddict.get(w, UNK_ID)
            ids.append(i if i < self.n_words else UNK_ID)
        if eos:
            ids.append(EOS_ID)
        return ids

    def source(self, token: str) -> str | None:
        i = self.worddict.get(token)
        return MODEL if i is not None and i < self.n_words else UNK

    def word(self, i: int) -> str | None:
        """The word of id ``i`` (``<eos>`` 0, ``UNK`` 1), or None where ``i`` is no id of this model."""
        if not 0 <= i < self.n_words:
            return None
        if i == EOS_ID:
            return "<eos>"
        if self._words is None:  # built on the first decode: most servers never decode
            self._words = {v: w for w, v in self.worddict.items() if v < self.n_words}
        return self._words.get(i, "UNK")


def unk_counts(seqs: Sequence[Sequence[int]], unk: int | None) -> list[int]:
    """Per sequence, how many steps the model ran on the UNK id or row: words it does not know (a user asking
    about words outside the vocabulary gets an arbitrary answer and should be able to see why)."""
    return [0 if unk is None else sum(1 for i in seq if i == unk) for seq in seqs]


class TableVocabulary:
    """dictionary.txt lookup into the word tables: missing words take the ``UNK`` row (case-sensitive)."""

    _words: dict[int, str] | None = None

    def __init__(self, words: Sequence[str], *, model_rows: int | None = None) -> None:
        self.index = {w: i for i, w in enumerate(words)}  # a duplicated word keeps the later row
        self.model_rows = model_rows  # rows below it are the model's own, the rest expansion rows
        self.unk: int | None = self.index.get("UNK")
        self.eos = self.index.get("<eos>")

    def ids(self, tokens: Sequence[str], *, eos: bool) -> list[int]:
        rows = []
        for w in tokens:
            i = self.index.get(w, self.unk)
            if i is None:
                raise EncodeInputError(
                    f"word {w!r} is not in the dictionary and the dictionary has no 'UNK' row"
                )
            rows.append(i)
        if eos:
            if self.eos is None:
                raise EncodeInputError("eos requested but the dictionary has no '<eos>' row")
            rows.append(self.eos)
        return rows

    def source(self, token: str) -> str | None:
        i = self.index.get(token)
        if i is None:
            return UNK
        if self.model_rows is None:
            return None
        return MODEL if i < self.model_rows else EXPANSION

    def word(self, i: int) -> str | None:
        """The word of table row ``i``, or None where ``i`` is no row of the tables."""
        if self._words is None:  # built on the first decode: most servers never decode
            self._words = {v: w for w, v in self.index.items()}
        return self._words.get(i) if i >= 0 else None
