"""Tokenizers recorded in each model's manifest.

- ``whitespace``: ``str.split()``, exactly what the original encode paths do (used for pre-tokenized input).
- ``coco``: raw captions in the Karpathy COCO token style: lowercase, punctuation removed, whitespace split.
- ``treebank``: NLTK's Treebank word tokenizer for skip-thoughts raw text. The original also ran the Punkt
  sentence splitter first; Punkt's data cannot be downloaded here, so sentences are not split (a line is
  tokenised as one sentence). Within a sentence the result matches ``word_tokenize``.
"""

from __future__ import annotations

import re
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


def treebank_tokens(text: str) -> list[str]:
    return _treebank()(text)


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
