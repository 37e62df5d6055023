"""``render`` writes exactly what one ``orjson.dumps`` call writes, in pieces, and stops at the bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnserve.app.http.answers import hits_bytes, render, vectors_bytes
from lnserve.app.http.errors import AnswerTooLargeError

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=6),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_render_is_orjson_in_pieces(value: Any) -> None:
    assert render(value, 1 << 40) == orjson.dumps(value)


@pytest.mark.parametrize("shape", [(0,), (3,), (0, 4), (1, 4), (300, 700), (2, 3, 4)])
def test_render_writes_arrays_as_orjson_does(shape: tuple[int, ...]) -> None:
    arr = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    answer = {"model": "m", "vectors": arr, "counts": [1, 2]}
    assert render(answer, 1 << 40) == orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)


def test_what_orjson_cannot_write_is_written_as_stored() -> None:
    """Payloads are any JSON: integers past 64 bits too."""
    assert render({"results": [[{"payload": {"n": 2**70}}]]}, 1 << 20) == (
        b'{"results":[[{"payload":{"n":1180591620717411303424}}]]}'
    )


def test_render_stops_at_the_bound() -> None:
    hits = [[{"id": str(i), "score": 0.5, "payload": "x" * 1000} for i in range(1000)] for _ in range(50)]
    body = render(hits, 60 << 20)
    with pytest.raises(AnswerTooLargeError):
        render(hits, len(body) - 1)
    assert len(render(hits, len(body))) == len(body)


def test_the_estimates_up_front_bound_the_written_answer() -> None:
    """Vectors: never more than the estimate (so a request let through is never refused later); hits: never
    less (so a request refused up front could not have fitted)."""
    rng = np.random.default_rng(1)
    for scale in (1e-30, 1e-6, 1.0, 1e30):
        vecs = (rng.standard_normal((8, 33)) * scale).astype(np.float32)
        assert len(orjson.dumps(vecs, option=orjson.OPT_SERIALIZE_NUMPY)) <= vectors_bytes(8, 33)
    hits = [[{"id": "a", "score": 0.0, "payload": None}] * 5] * 3
    assert len(orjson.dumps(hits)) >= hits_bytes(3, 5, 100)
