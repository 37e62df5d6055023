"""Text no response can be written with: a lone UTF-16 surrogate, legal as a JSON escape (``"\\ud800"``), in
every text field of every route that takes a JSON body, in small bodies (parsed inline) and large ones
(parsed in the worker process). ``/tokenize`` echoed it back and failed writing its answer (500
UnicodeEncodeError); now every body is read by one parser that refuses it: 422, and the server serves on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from lnserve.app.http.body_parsing import INLINE_PARSE_BYTES
from tests.e2e.server import LiveServer, start_server

OE = "oe_order_gru"
LONE = ["\\ud800", "\\udfff", "a \\ud83d b", "\\ude00\\ud83d"]  # high, low, unpaired, reversed pair
PAIR = "\\ud83d\\ude00"  # a proper pair (an emoji): fine everywhere
IMAGE = [0.1] * 20  # dim_image of the fixture model


def _bodies(text: str) -> dict[str, str]:
    """Each JSON-body route with ``text`` (already a JSON string body, escapes and all) in a text field."""
    t = f'"{text}"'
    return {
        "/encode": f'{{"model": "{OE}", "sentences": ["ok", {t}]}}',
        "/v1/embeddings": f'{{"model": "{OE}", "input": {t}}}',
        "/tokenize": f'{{"model": "{OE}", "sentences": [{t}], "pretokenized": true}}',
        "/score": f'{{"model": "{OE}", "captions": [{t}], "images": [{json.dumps(IMAGE)}]}}',
        "/galleries": f'{{"name": "g", "kind": "captions", "model": "{OE}", "unused": {t}}}',
        "/galleries/caps/items": f'{{"items": [{{"text": {t}, "id": "x"}}]}}',
        "/galleries/caps/items#payload": f'{{"items": [{{"text": "a", "payload": {{"k": {t}}}}}]}}',
        "/retrieve": f'{{"gallery": "caps", "query": {{"text": {t}}}}}',
        "/retrieve#id": f'{{"gallery": "caps", "query": {{"id": {t}}}}}',
        "/encode#model": f'{{"model": {t}, "sentences": ["a"]}}',
    }


def _large(body: str) -> str:
    """The same body past the inline-parse size: padded with whitespace, which JSON ignores."""
    return body[:-1] + " " * (INLINE_PARSE_BYTES + 10) + "}"


@pytest.fixture(scope="module")
def server(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    tmp = tmp_path_factory.mktemp("text")
    live = start_server(tmp, "--models", str(artifacts[OE]), env={"LNSERVE_SCORER": "numpy"})
    with httpx.Client(base_url=live.url, timeout=60) as c:
        assert c.post("/galleries", json={"name": "caps", "kind": "captions", "model": OE}).status_code == 201
    yield live
    live.stop()


def _post(c: httpx.Client, route: str, body: str) -> httpx.Response:
    return c.post(route.split("#")[0], content=body.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_lone_surrogate_is_refused_by_every_route(server: LiveServer, size: str) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for text in LONE:
            for route, body in _bodies(text).items():
                r = _post(c, route, _large(body) if size == "large" else body)
                assert r.status_code == 422, (route, text, r.status_code, r.text)
                assert r.json()["error"]["code"] == "invalid_request", (route, r.text)
        assert c.get("/galleries/caps").json()["count"] == 0
        assert c.get("/health").status_code == 200


def test_a_surrogate_pair_is_text_like_any_other(server: LiveServer) -> None:
    """The check is for unpaired surrogates only: an emoji written as an escaped pair is served, and echoed
    back by /tokenize as the character it is."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        bodies = _bodies(PAIR)
        for route in ("/encode", "/v1/embeddings", "/tokenize", "/score", "/retrieve"):
            r = _post(c, route, bodies[route])
            assert r.status_code == 200, (route, r.text)
        tokens = _post(c, "/tokenize", bodies["/tokenize"]).json()["sentences"][0]["tokens"]
        assert tokens[0]["token"] == "\U0001f600"
        r = _post(c, "/galleries/caps/items", bodies["/galleries/caps/items"])
        assert r.status_code == 200, r.text
        assert c.get("/galleries/caps/items/x").json()["payload"] == {"text": "\U0001f600"}
