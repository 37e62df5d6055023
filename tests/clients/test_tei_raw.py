"""The TEI protocol as raw requests (what TEI deployments and load tests send): ``/embed``, ``/similarity``,
``POST /`` in both shapes, ``/tei/tokenize``, ``/info``; TEI's statuses with lnserve's error body; the same
API key and metrics as ``/encode``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.clients.conftest import SENTENCES, encode
from tests.e2e.server import LiveServer, start_server


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["code"] == code and body["request_id"]
    return str(body["message"])


def test_embed_string_and_list(http: httpx.Client, server: LiveServer) -> None:
    one = http.post("/embed", json={"inputs": SENTENCES[0]})
    assert one.status_code == 200 and one.headers["content-type"] == "application/json"
    np.testing.assert_allclose(one.json(), encode(server, SENTENCES[:1], normalize=True), atol=1e-6)
    many = http.post("/embed", json={"inputs": SENTENCES, "normalize": False})
    np.testing.assert_allclose(many.json(), encode(server, SENTENCES, normalize=False), atol=1e-6)
    assert http.post("/embed", json={"inputs": SENTENCES, "dimensions": 64}).status_code == 200
    assert "x-inference-time-ms" in many.headers  # through the micro-batcher, as /encode


def test_root_takes_both_shapes(http: httpx.Client, server: LiveServer) -> None:
    vecs = encode(server, SENTENCES, normalize=True)
    r = http.post("/", json={"inputs": SENTENCES})
    np.testing.assert_allclose(r.json(), vecs, atol=1e-6)
    body = {"inputs": {"source_sentence": SENTENCES[0], "sentences": SENTENCES[1:]}}
    sims = http.post("/", json=body).json()
    np.testing.assert_allclose(sims, vecs[1:] @ vecs[0], atol=1e-5)
    assert http.post("/similarity", json=body).json() == sims


def test_truncation_direction(http: httpx.Client, server: LiveServer) -> None:
    """Over max_tokens: 413 unless truncate; right keeps the first tokens, left the last (eos stays last)."""
    long = " ".join(["red circle"] * 130 + ["blue square"] * 130)  # 520 words + eos; max_tokens 256
    _error(http.post("/embed", json={"inputs": long}), 413, "sentence_too_long")
    right = http.post("/embed", json={"inputs": long, "truncate": True}).json()
    left = http.post("/embed", json={"inputs": long, "truncate": True, "truncation_direction": "Left"}).json()
    head = " ".join(["red circle"] * 127 + ["red"])  # the first 255 words
    tail = " ".join(["square"] + ["blue square"] * 127)  # the last 255 words
    np.testing.assert_allclose(right, encode(server, [head], normalize=True), atol=1e-6)
    np.testing.assert_allclose(left, encode(server, [tail], normalize=True), atol=1e-6)


def test_errors_have_tei_statuses_and_our_body(http: httpx.Client) -> None:
    _error(http.post("/embed", json={"inputs": ["a"] * 300}), 413, "too_many_sentences")
    _error(
        http.post("/", json={"inputs": {"source_sentence": "a", "sentences": ["b"] * 300}}),
        413,
        "too_many_sentences",
    )
    message = _error(http.post("/embed", json={"inputs": [[97, 32, 114]]}), 422, "token_ids_unsupported")
    assert "own vocabularies" in message
    _error(http.post("/embed", json={"inputs": "a", "dimensions": 32}), 422, "invalid_input")
    _error(http.post("/embed", json={"inputs": "a", "prompt_name": "query"}), 422, "invalid_input")
    _error(http.post("/embed", json={"inputs": []}), 422, "invalid_input")
    _error(http.post("/embed", json={"normalize": True}), 422, "invalid_request")
    _error(http.post("/similarity", json={"inputs": "a"}), 422, "invalid_request")
    big = {"inputs": ["a red circle " * 2000] * 200}  # over max_body_bytes (4 MiB)
    _error(http.post("/embed", json=big), 413, "request_too_large")


def test_over_limit_large_bodies_get_413(http: httpx.Client) -> None:
    """Bodies over 64 KiB (validated in the body-parsing worker) over max_sentences get TEI's 413 too."""
    row = "a red circle on the left " * 12  # ~300 bytes: 300 rows make a body well over 64 KiB
    bodies = {
        "/embed": {"inputs": [row] * 300},
        "/similarity": {"inputs": {"source_sentence": row, "sentences": [row] * 300}},
        "/": {"inputs": {"source_sentence": row, "sentences": [row] * 300}},
    }
    for path, body in bodies.items():
        _error(http.post(path, json=body), 413, "too_many_sentences")
    assert http.post("/embed", json={"inputs": [row] * 200}).status_code == 200  # large but within the limits


def test_tei_tokenize(http: httpx.Client) -> None:
    tokens = http.post("/tei/tokenize", json={"inputs": "A dog on a bus!"}).json()
    ours = http.post("/tokenize", json={"sentences": ["A dog on a bus!"]}).json()["sentences"][0]["tokens"]
    assert [(t["id"], t["text"]) for t in tokens[0]] == [(t["id"], t["token"]) for t in ours]
    assert [t["special"] for t in tokens[0]] == [False] * 5 + [True]  # the demo appends <eos>
    assert all(t["start"] is None and t["stop"] is None for t in tokens[0])
    plain = http.post("/tei/tokenize", json={"inputs": ["a red circle"], "add_special_tokens": False}).json()
    assert [t["text"] for t in plain[0]] == ["a", "red", "circle"]


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": "A dog on a bus!"},
        {"inputs": ["A dog on a bus!", "a red circle"], "add_special_tokens": False},
        {"inputs": "a red circle", "prompt_name": None, "unknown_field": 1},  # TEI ignores unknown fields
    ],
)
def test_tokenize_takes_tei_s_body_too(http: httpx.Client, body: dict[str, object]) -> None:
    """A TEI client calling ``POST /tokenize`` (TEI's path) got lnserve's 422: the route tells the two bodies
    apart by field (``inputs``: TEI's) and answers each in its own shape."""
    r = http.post("/tokenize", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == http.post("/tei/tokenize", json=body).json()
    ours = http.post("/tokenize", json={"sentences": ["A dog on a bus!"]})
    assert ours.status_code == 200 and ours.json()["sentences"][0]["tokens"][0]["token"] == "a"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"inputs": 5}, "invalid_request"),
        ({"inputs": []}, "invalid_input"),
        ({"inputs": "a", "sentences": ["a"]}, "invalid_request"),  # both shapes at once: lnserve's, refused
        ({"inputs": "a", "prompt_name": "query"}, "invalid_input"),
    ],
)
def test_tokenize_refuses_a_bad_tei_body_with_our_error(
    http: httpx.Client, body: dict[str, object], code: str
) -> None:
    _error(http.post("/tokenize", json=body), 422, code)


def test_decode_inverts_tokenize(http: httpx.Client) -> None:
    tokens = http.post("/tokenize", json={"inputs": ["A red circle on the left!", "a red circle"]}).json()
    ids = [[t["id"] for t in sentence] for sentence in tokens]
    assert http.post("/decode", json={"ids": ids}).json() == ["a red circle on the left", "a red circle"]
    assert http.post("/decode", json={"ids": ids[1], "skip_special_tokens": False}).json() == [
        "a red circle <eos>"
    ]
    unknown = http.post("/tokenize", json={"inputs": "a zyzzyva"}).json()[0]
    assert http.post("/decode", json={"ids": [t["id"] for t in unknown]}).json() == ["a UNK"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"ids": [2, 10**9]}, 422, "invalid_input"),
        ({"ids": [-1]}, 422, "invalid_input"),
        ({"ids": ["a"]}, 422, "invalid_request"),
        ({"ids": [[2]] * 300}, 413, "too_many_sentences"),
        ({"ids": [2] * 300}, 413, "sentence_too_long"),
    ],
)
def test_decode_refuses_ids_the_model_does_not_have(
    http: httpx.Client, body: dict[str, object], status: int, code: str
) -> None:
    _error(http.post("/decode", json=body), status, code)


def test_info_has_tei_fields_beside_ours(http: httpx.Client) -> None:
    info = http.get("/info").json()
    assert info["model_id"] == info["default_model"] == "demo-lngru"
    assert info["model_sha"] == info["models"][0]["sha256"] and info["model_dtype"] == "float32"
    assert info["model_type"] == {"embedding": {"pooling": "last"}}
    assert info["max_input_length"] == info["limits"]["max_tokens"]
    assert info["max_client_batch_size"] == info["limits"]["max_sentences"]
    assert info["max_batch_tokens"] == info["limits"]["max_batch_tokens"]
    assert info["max_concurrent_requests"] == info["limits"]["max_inflight"]


def test_tei_routes_are_counted_in_metrics(http: httpx.Client) -> None:
    http.post("/embed", json={"inputs": "a red circle"})
    metrics = http.get("/metrics").text
    assert 'route="/embed"' in metrics


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("keyed"), env={"LNSERVE_API_KEY": "s3cret"})
    yield srv
    srv.stop()


def test_api_key_guards_tei_as_encode(keyed: LiveServer, tmp_path: Path) -> None:
    for path, body in (
        ("/embed", {"inputs": "a"}),
        ("/", {"inputs": "a"}),
        ("/tei/tokenize", {"inputs": "a"}),
        ("/tokenize", {"inputs": "a"}),
        ("/decode", {"ids": [2]}),
        ("/embed_all", {"inputs": "a"}),
    ):
        _error(httpx.post(keyed.url + path, json=body), 401, "unauthorized")
        r = httpx.post(keyed.url + path, json=body, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200, r.text
