"""The dictionary pkl that skip-thoughts ``training/vocab.py`` writes: two consecutive protocol-0 pickles in
one file, ``worddict`` (OrderedDict word -> 2, 3, ... by descending count) then ``wordcount``.

Reading goes through the restricted unpickler, both pickles, and nothing may follow them. Writing produces
the bytes Python 2's ``cPickle.dump`` writes for those OrderedDicts (byte strings, memo numbering and all), so
the original ``training/tools.py`` loads the file under Python 2 exactly as it loads its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lnserve.errors import brief

from .errors import CorruptFileError
from .legacy_files import require_file
from .safe_pickle import py2_strings, safe_load

SPECIAL_WORDS = ("<eos>", "UNK")  # rows 0 and 1 of Wemb; never worddict keys in a vocab.py dictionary


@dataclass
class WordDictionary:
    """``worddict`` in stored order (keys recovered as text) and the size of ``wordcount``."""

    words: list[str]  # words[k] has index k + 2
    wordcount_size: int


def read_word_dictionary(path: Path) -> WordDictionary:
    """Both pickles of a ``vocab.py`` dictionary, checked: an OrderedDict of text -> 2, 3, ... in order, then
    a dict; a third pickle or any trailing byte is refused."""
    require_file(path)
    source = str(path)
    with path.open("rb") as f:
        raw = safe_load(f, source=f"{source} (first pickle, worddict)")
        worddict = py2_strings(raw)
        where = f.tell()
        if not f.read(1):
            raise CorruptFileError(
                f"{path}: holds one pickle; a vocab.py dictionary holds two (worddict, then wordcount)"
            )
        f.seek(where)
        wordcount = safe_load(f, source=f"{source} (second pickle, wordcount)")
        if f.read(1):
            raise CorruptFileError(
                f"{path}: bytes follow the two pickles (worddict, wordcount) of a vocab.py dictionary"
            )
    if not isinstance(worddict, dict):
        raise CorruptFileError(f"{path}: the first pickle is a {type(worddict).__name__}, not the worddict")
    if len(worddict) != len(raw):  # py2_strings rebuilt it: keys equal once decoded merged into one
        raise CorruptFileError(f"{path}: two worddict keys are the same word once decoded as UTF-8")
    if not isinstance(wordcount, dict):
        raise CorruptFileError(f"{path}: the second pickle is a {type(wordcount).__name__}, not wordcount")
    for word, count in wordcount.items():
        if not isinstance(word, str) or type(count) is not int or count < 0:
            raise CorruptFileError(
                f"{path}: wordcount[{brief(word)}] is {brief(count, 40)}; wordcount maps words to counts"
            )
    words: list[str] = []
    for expected, (word, index) in enumerate(worddict.items(), start=2):
        if not isinstance(word, str):
            raise CorruptFileError(f"{path}: worddict key {expected - 2} is a {type(word).__name__}")
        if type(index) is not int or index != expected:
            raise CorruptFileError(
                f"{path}: worddict[{brief(word)}] is {brief(index, 40)}; a vocab.py dictionary "
                f"numbers its words 2, 3, ... in order (expected {expected})"
            )
        words.append(word)
    return WordDictionary(words, len(wordcount))


def write_word_dictionary(f: IO[bytes], worddict: Mapping[str, int], wordcount: Mapping[str, int]) -> None:
    """``pkl.dump(worddict, f); pkl.dump(wordcount, f)`` as Python 2.7's cPickle writes them (protocol 0,
    keys as UTF-8 byte strings)."""
    for mapping in (worddict, wordcount):
        f.write(_py2_ordered_dict_pickle(mapping))


def _py2_ordered_dict_pickle(mapping: Mapping[str, int]) -> bytes:
    # cPickle: OrderedDict.__reduce__ -> (OrderedDict, ([[k, v], ...],)); memo ids count from 1; strings of
    # fewer than 2 bytes are never memoised; the argument tuple is not memoised.
    out = [b"ccollections\nOrderedDict\np1\n((lp2\n"]
    memo = 3
    for word, value in mapping.items():
        if type(value) is not int:
            raise TypeError(f"values must be int, got {type(value).__name__}")
        raw = word.encode("utf-8")
        out.append(b"(lp%d\n" % memo)
        memo += 1
        out.append(b"S" + _py2_repr(raw) + b"\n")
        if len(raw) >= 2:
            out.append(b"p%d\n" % memo)
            memo += 1
        out.append(b"aI%d\naa" % value)
    out.append(b"tRp%d\n." % memo)
    return b"".join(out)


def _py2_repr(raw: bytes) -> bytes:
    """Python 2's ``repr`` of a byte string (what protocol 0 writes after ``S``)."""
    quote = b'"' if b"'" in raw and b'"' not in raw else b"'"
    parts = [quote]
    for byte in raw:
        ch = bytes([byte])
        if ch == quote or ch == b"\\":
            parts.append(b"\\" + ch)
        elif ch == b"\t":
            parts.append(b"\\t")
        elif ch == b"\n":
            parts.append(b"\\n")
        elif ch == b"\r":
            parts.append(b"\\r")
        elif byte < 0x20 or byte >= 0x7F:
            parts.append(b"\\x%02x" % byte)
        else:
            parts.append(ch)
    parts.append(quote)
    return b"".join(parts)
