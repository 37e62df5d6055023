"""Readers and writers of the skip-thoughts training format (issue 26): the word2vec stream in both layouts
and across every read boundary, the vocab.py dictionary round trip, and the expansion fit."""

from __future__ import annotations

import collections
import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from lnserve.converters.vocab_expansion import fit_linear_map
from lnserve.converters.vocab_pickle import read_word_dictionary, write_word_dictionary
from lnserve.converters.word2vec import iter_blocks, read_header
from tests.conftest import LEGACY, golden
from tests.support.word2vec_files import word2vec_bytes

SRC = LEGACY / "skipthoughts_training_lngru"


def _read_all(path: Path, **kw: int) -> tuple[list[str], np.ndarray]:
    blocks = list(iter_blocks(read_header(path), **kw))
    return [w for b in blocks for w in b.words], np.concatenate([b.vectors for b in blocks])


def test_word2vec_layouts_and_read_boundaries_agree(tmp_path: Path) -> None:
    words, vectors = _read_all(SRC / "w2v.bin")
    assert words == json.loads((LEGACY / "inputs_training.json").read_text())["w2v_words_in_file_order"]
    gensim_layout = tmp_path / "gensim.bin"
    gensim_layout.write_bytes(word2vec_bytes(words, vectors, newline=False))
    for path, chunk, block in (
        (SRC / "w2v.bin", 1201, 7),
        (gensim_layout, 1500, 64),
        (SRC / "w2v.bin", 4099, 1),
    ):
        got_words, got_vectors = _read_all(path, read_chunk=chunk, block_records=block)
        assert got_words == words and np.array_equal(got_vectors, vectors)


def test_dictionary_writer_reproduces_vocab_py_bytes() -> None:
    """Python 2's cPickle bytes, exactly: the fixture came from vocab.save_dictionary under Python 2.7."""
    raw = (SRC / "dictionary.pkl").read_bytes()
    f = io.BytesIO(raw)
    fix = lambda m: collections.OrderedDict(  # noqa: E731
        (k.encode("latin1").decode("utf-8"), v) for k, v in m.items()
    )
    worddict, wordcount = (fix(pickle.load(f, encoding="latin1")) for _ in range(2))
    out = io.BytesIO()
    write_word_dictionary(out, worddict, wordcount)
    assert out.getvalue() == raw
    assert read_word_dictionary(SRC / "dictionary.pkl").words == list(worddict)


def test_fit_matches_the_original_regression() -> None:
    gold = golden("skipthoughts_training_lngru")
    inputs = json.loads((LEGACY / "inputs_training.json").read_text())
    words, vectors = _read_all(SRC / "w2v.bin")
    w2v = dict(zip(words, vectors, strict=True))
    order = inputs["worddict_words_in_index_order"]
    with np.load(SRC / "model.npz") as npz:
        wemb = npz["Wemb"]
    fit_words = inputs["regression_words_in_fit_order"]
    x = np.stack([w2v[w] for w in fit_words])
    y = wemb[[order.index(w) + 2 for w in fit_words]]
    fit = fit_linear_map(x, y)
    assert fit.words_shared == int(gold["regression_n"])
    assert np.abs(fit.coef.T - gold["regression_coef"]).max() <= 1e-5
    assert np.abs(fit.intercept - gold["regression_intercept"]).max() <= 1e-5


@pytest.mark.parametrize("newline", [True, False])
def test_a_file_with_exactly_one_record_reads(tmp_path: Path, newline: bool) -> None:
    path = tmp_path / "one.bin"
    path.write_bytes(word2vec_bytes(["naïve"], np.ones((1, 300)), newline=newline))
    assert _read_all(path)[0] == ["naïve"]


def test_expansion_plan_keeps_the_first_of_duplicated_words_and_skips_phrases(tmp_path: Path) -> None:
    """gensim keeps the first vector of a repeated word; phrases (``_``) get no predicted row, but a model
    word with ``_`` is in the fit (spec §5.4)."""
    from lnserve.converters.vocab_expansion import plan_expansion

    rng = np.random.default_rng(1)
    words = ["</s>", "ice_cream", "dog", "robots", "hot_dog", "robots", "Dog"]
    vectors = rng.standard_normal((len(words), 300)).astype(np.float32)
    path = tmp_path / "w.bin"
    path.write_bytes(word2vec_bytes(words, vectors))
    plan = plan_expansion(read_header(path), {"<eos>": 0, "UNK": 1, "dog": 2, "ice_cream": 3})
    assert plan.words == ["</s>", "robots", "Dog"] and plan.duplicates == 1
    assert plan.predict.tolist() == [True, False, False, True, False, False, True]
    assert plan.fit_rows.tolist() == [2, 3]
    assert np.array_equal(plan.fit_vectors, vectors[[2, 1]])


def test_two_keys_that_decode_to_one_word_are_refused(tmp_path: Path) -> None:
    """Python 2 byte-string keys are recovered as UTF-8 text: b'caf\\xc3\\xa9' and u'caf\\xe9' become one
    word, which would give one word two rows; the dictionary is refused, naming why."""
    from lnserve.converters.errors import CorruptFileError

    path = tmp_path / "dict.pkl"
    # protocol 0 as cPickle writes an OrderedDict: a byte-string key (latin-1 text here) and a unicode key
    worddict = collections.OrderedDict([("caf\xc3\xa9", 2), ("café", 3)])
    path.write_bytes(pickle.dumps(worddict, protocol=0) + pickle.dumps({}, protocol=0))
    with pytest.raises(CorruptFileError, match="same word once decoded"):
        read_word_dictionary(path)
