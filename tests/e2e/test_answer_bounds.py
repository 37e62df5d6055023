"""What one request may make the server write is bounded (``LNSERVE_MAX_ANSWER_BYTES``), on every route whose
answer grows with the request: a 13 KB ``/retrieve`` (256 queries, ``k=1000``, 1 KB payloads) made a 268 MB
answer. Over the bound is 413 ``answer_too_large``: before any work where the size is known up front (vectors,
score matrices, hits without payloads: no token is encoded), else while the answer is written (payloads,
echoed tokens); the server serves on. The table must name every route that takes a body."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server

OE = "oe_order_gru"  # output_dim 16, dim_image 20
LIMIT = 64 << 10
IMAGE = [0.1] * 20
PAYLOAD = {"text": "p" * 300}
N_ITEMS = 300

Case = tuple[str, dict[str, Any]]  # path, JSON body
# route -> (a request under the bound, one refused up front or None, one refused while its answer is written
# or None); or the reason its answer cannot grow past the bound
BOUNDED: dict[tuple[str, str], tuple[Case, Case | None, Case | None] | str] = {
    ("post", "/encode"): (
        ("/encode", {"model": OE, "sentences": ["a b"] * 10}),
        ("/encode", {"model": OE, "sentences": ["a b"] * 256}),  # 256 x 16 floats x 16 bytes > 64 KiB
        None,
    ),
    ("post", "/encode/images"): (
        ("/encode/images", {"model": OE, "features": [IMAGE] * 10}),
        ("/encode/images", {"model": OE, "features": [IMAGE] * 256}),
        None,
    ),
    ("post", "/v1/embeddings"): (
        ("/v1/embeddings", {"model": OE, "input": ["a b"] * 10}),
        ("/v1/embeddings", {"model": OE, "input": ["a b"] * 256}),
        None,
    ),
    ("post", "/embed"): (("/embed", {"inputs": ["a b"] * 10}), ("/embed", {"inputs": ["a b"] * 256}), None),
    ("post", "/"): (("/", {"inputs": ["a b"] * 10}), ("/", {"inputs": ["a b"] * 256}), None),
    ("post", "/score"): (
        ("/score", {"model": OE, "captions": ["a"] * 10, "images": [IMAGE] * 10}),
        ("/score", {"model": OE, "captions": ["a"] * 100, "images": [IMAGE] * 100}),
        None,
    ),
    ("post", "/retrieve"): (
        ("/retrieve", {"gallery": "caps", "query": {"text": "a b"}, "k": 20}),
        # 256 x 300 hits take 3 MB without their payloads: refused before encoding a query
        ("/retrieve", {"gallery": "caps", "queries": [{"text": "a b"}] * 256, "k": 1000}),
        # 2 x 300 hits take 24 KB without payloads, 220 KB with them: refused while written
        ("/retrieve", {"gallery": "caps", "queries": [{"text": "a b"}] * 2, "k": 1000}),
    ),
    ("post", "/tokenize"): (
        ("/tokenize", {"model": OE, "sentences": ["a b c"] * 10}),
        None,
        ("/tokenize", {"model": OE, "sentences": [" ".join(["a"] * 200)] * 64}),  # 12,800 tokens echoed
    ),
    ("post", "/tei/tokenize"): (
        ("/tei/tokenize", {"inputs": ["a b c"] * 10}),
        None,
        ("/tei/tokenize", {"inputs": [" ".join(["a"] * 200)] * 64}),
    ),
    ("post", "/embed_all"): (
        ("/embed_all", {"inputs": ["a b"] * 10}),
        ("/embed_all", {"inputs": ["a b c d e f g"] * 32}),  # 256 states (eos included) x 16 floats
        None,
    ),
    ("post", "/decode"): (
        ("/decode", {"ids": [[1, 2, 3]] * 10}),
        None,
        ("/decode", {"ids": [[1] * 200] * 256}),  # 51,200 words echoed
    ),
    ("post", "/similarity"): "one number per sentence: at most max_sentences x 16 bytes",
    ("post", "/galleries"): "the gallery's description: a fixed size",
    ("post", "/galleries/{name}/items"): "the ids added: at most max_sentences ids of 256 characters",
}


@pytest.fixture(scope="module")
def server(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("answers")
    live = start_server(
        tmp,
        "--models",
        str(artifacts[OE]),
        env={"LNSERVE_SCORER": "numpy", "LNSERVE_MAX_ANSWER_BYTES": str(LIMIT)},
    )
    with httpx.Client(base_url=live.url, timeout=60) as c:
        assert c.post("/galleries", json={"name": "caps", "kind": "captions", "model": OE}).status_code == 201
        for start in range(0, N_ITEMS, 150):
            items = [{"text": f"a b {i}", "payload": PAYLOAD} for i in range(start, start + 150)]
            assert c.post("/galleries/caps/items", json={"items": items}).status_code == 200
    yield live
    live.stop()


def _tokens(c: httpx.Client) -> float:
    """Tokens the server has encoded (lnserve_tokens_total)."""
    lines = c.get("/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("lnserve_tokens_total"))


def _refused(r: httpx.Response) -> None:
    assert r.status_code == 413, (r.request.url, r.status_code, r.text[:300])
    assert r.json()["error"]["code"] == "answer_too_large", r.text
    assert "max_answer_bytes" in r.json()["error"]["message"]


def test_the_table_names_every_route_that_takes_a_body(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        spec = c.get("/openapi.json").json()
    with_body = {(m, p) for p, ops in spec["paths"].items() for m, op in ops.items() if "requestBody" in op}
    assert with_body == set(BOUNDED), "a route takes a body: say in BOUNDED how its answer is bounded"


@pytest.mark.parametrize("route", [r for r, v in BOUNDED.items() if not isinstance(v, str)], ids=str)
def test_every_answer_that_grows_with_the_request_is_bounded(
    server: LiveServer, route: tuple[str, str]
) -> None:
    under, up_front, while_written = BOUNDED[route]  # type: ignore[misc]
    with httpx.Client(base_url=server.url, timeout=120) as c:
        r = c.post(under[0], json=under[1])
        assert r.status_code == 200, r.text[:300]
        assert len(r.content) <= LIMIT
        if up_front is not None:
            before = _tokens(c)
            _refused(c.post(up_front[0], json=up_front[1]))
            assert _tokens(c) == before, "refused after encoding: the size was known up front"
        if while_written is not None:
            _refused(c.post(while_written[0], json=while_written[1]))
        assert c.get("/health").status_code == 200
        assert c.post(under[0], json=under[1]).status_code == 200
