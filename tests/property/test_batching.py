"""Batching never changes a vector: random sentences (known and unknown words), random batch sizes and
orders give the same vectors (<= 1e-6) as encoding each sentence alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnserve.app.runtime.engine import Engine
from lnserve.app.runtime.text import OrderVocabulary

TOL = 1e-6
SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def engines(artifacts: dict[str, Path]) -> dict[str, Engine]:
    return {
        name: Engine.open(artifacts[name], backend="torch")
        for name in ("oe_order_lngru", "skipthoughts_lngru")
    }


def _vocab(engine: Engine) -> list[str]:
    vocab = engine.vocab
    words = vocab.worddict if isinstance(vocab, OrderVocabulary) else vocab.index
    return sorted(words)


def _sentences(vocab: list[str], *, min_words: int) -> st.SearchStrategy[list[str]]:
    word = st.one_of(st.sampled_from(vocab), st.text(alphabet="qxzé東", min_size=1, max_size=4))
    sentence = st.lists(word, min_size=min_words, max_size=9).map(" ".join)
    return st.lists(sentence, min_size=1, max_size=12)


def _check(engine: Engine, data: st.DataObject, *, eos: bool, min_words: int) -> None:
    sents = data.draw(_sentences(_vocab(engine), min_words=min_words), label="sentences")
    order = data.draw(st.permutations(range(len(sents))), label="order")
    batch_size = data.draw(st.integers(1, len(sents) + 1), label="batch_size")
    alone = np.concatenate([engine.encode_sentences([s], pretokenized=True, eos=eos) for s in sents])
    batched = engine.encode_sentences(
        [sents[i] for i in order], pretokenized=True, eos=eos, batch_size=batch_size
    )
    restored = np.empty_like(batched)
    restored[list(order)] = batched
    assert np.abs(restored - alone).max() <= TOL


@SETTINGS
@given(data=st.data())
def test_order_embedding_batching(engines: dict[str, Engine], data: st.DataObject) -> None:
    _check(engines["oe_order_lngru"], data, eos=True, min_words=0)


@pytest.mark.parametrize("eos", [False, True])
@SETTINGS
@given(data=st.data())
def test_skip_thoughts_batching(engines: dict[str, Engine], eos: bool, data: st.DataObject) -> None:
    _check(engines["skipthoughts_lngru"], data, eos=eos, min_words=0 if eos else 1)
