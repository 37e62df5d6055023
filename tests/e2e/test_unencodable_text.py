"""Text no response can be written with: a lone UTF-16 surrogate, legal as a JSON escape (``"\\ud800"``), in
every text field of every route that takes a JSON body, in small bodies (parsed inline) and large ones
(parsed in the worker process). ``/tokenize`` echoed it back and failed writing its answer (500
UnicodeEncodeError); now every body is read by one parser that refuses it: 422, and the server serves on."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from lnserve.app.http.body_parsing import INLINE_PARSE_BYTES
from tests.e2e.server import LiveServer, start_server

OE = "oe_order_gru"
LONE = ["\\ud800", "\\udfff", "a \\ud83d b", "\\ude00\\ud83d"]  # high, low, unpaired, reversed pair
PAIR = "\\ud83d\\ude00"  # a proper pair (an emoji): fine everywhere
IMAGE = [0.1] * 20  # dim_image of the fixture model
JSON_TYPE = {"Content-Type": "application/json"}


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


# -- raw bytes that are not UTF-8 ------------------------------------------------------------------------
# json.loads decodes bytes with "surrogatepass": a raw encoded surrogate (ED A0 80) became "\ud800" and
# /tokenize failed writing its answer (500 in orjson.dumps); the other invalid forms must be refused the same
ST = "skipthoughts_lngru"
NOT_UTF8 = {
    "raw high surrogate": b"\xed\xa0\x80",
    "raw low surrogate": b"a \xed\xbf\xbf b",
    "raw surrogate pair (CESU-8)": b"\xed\xa0\xbd\xed\xb8\x80",
    "overlong nul": b"\xc0\x80",
    "overlong slash": b"\xe0\x80\xaf",
    "lone continuation byte": b"x\x80y",
    "byte ff": b"\xff",
    "cut sequence": b"\xe2\x82",
    "past U+10FFFF": b"\xf4\x90\x80\x80",
}


def _raw_bodies(raw: bytes) -> dict[tuple[str, str], list[bytes]]:
    """Every route of the app that takes a JSON body (by its OpenAPI method and path) -> bodies that carry
    ``raw`` inside a JSON string in each of its text fields."""
    t = b'"' + raw + b'"'
    image = json.dumps(IMAGE).encode()
    return {
        ("post", "/encode"): [
            b'{"model": "%s", "sentences": ["ok", %s]}' % (ST.encode(), t),
            b'{"model": "%s", "sentences": [%s], "pretokenized": true}' % (OE.encode(), t),
            b'{"model": %s, "sentences": ["a"]}' % t,
        ],
        ("post", "/encode/images"): [b'{"model": %s, "features": [%s]}' % (t, image)],
        ("post", "/v1/embeddings"): [
            b'{"model": "%s", "input": %s}' % (ST.encode(), t),
            b'{"model": "%s", "input": ["a", %s]}' % (OE.encode(), t),
        ],
        ("post", "/tokenize"): [
            b'{"model": "%s", "sentences": [%s]}' % (ST.encode(), t),
            b'{"model": "%s", "sentences": [%s], "pretokenized": true}' % (ST.encode(), t),
            b'{"model": "%s", "sentences": [%s]}' % (OE.encode(), t),
            b'{"model": "%s", "sentences": [%s], "pretokenized": true}' % (OE.encode(), t),
            b'{"inputs": [%s]}' % t,  # TEI's body
        ],
        ("post", "/score"): [b'{"model": "%s", "captions": [%s], "images": [%s]}' % (OE.encode(), t, image)],
        ("post", "/galleries"): [
            b'{"name": %s, "kind": "captions", "model": "%s"}' % (t, OE.encode()),
            b'{"name": "g2", "kind": "captions", "model": %s}' % t,
        ],
        ("post", "/galleries/{name}/items"): [
            b'{"items": [{"text": %s, "id": "x"}]}' % t,
            b'{"items": [{"text": "a", "id": %s}]}' % t,
            b'{"items": [{"text": "a", "payload": {"k": %s}}]}' % t,
            b'{"items": [{"text": "a", "payload": {%s: 1}}]}' % t,
        ],
        ("post", "/retrieve"): [
            b'{"gallery": "caps", "query": {"text": %s}}' % t,
            b'{"gallery": "caps", "query": {"id": %s}}' % t,
            b'{"gallery": %s, "query": {"text": "a"}}' % t,
        ],
        ("post", "/embed"): [b'{"inputs": %s}' % t, b'{"inputs": ["a", %s]}' % t],
        ("post", "/embed_all"): [b'{"inputs": %s}' % t, b'{"inputs": ["a", %s]}' % t],
        ("post", "/decode"): [b'{"ids": [%s]}' % t],  # ids only: the text is in the wrong place, still 422
        ("post", "/similarity"): [b'{"inputs": {"source_sentence": %s, "sentences": ["a"]}}' % t],
        ("post", "/"): [
            b'{"inputs": %s}' % t,
            b'{"inputs": {"source_sentence": "a", "sentences": [%s]}}' % t,
        ],
        ("post", "/tei/tokenize"): [
            b'{"inputs": %s}' % t,
            b'{"inputs": [%s], "add_special_tokens": false}' % t,
        ],
    }


@pytest.fixture(scope="module")
def two_models(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    """A skip-thoughts model (the default: the TEI routes use it) and an order-embedding one."""
    tmp = tmp_path_factory.mktemp("raw")
    live = start_server(
        tmp,
        "--models",
        str(artifacts[ST]),
        "--models",
        str(artifacts[OE]),
        env={"LNSERVE_SCORER": "numpy", "LNSERVE_DEFAULT_MODEL": ST},
    )
    with httpx.Client(base_url=live.url, timeout=60) as c:
        assert c.post("/galleries", json={"name": "caps", "kind": "captions", "model": OE}).status_code == 201
    yield live
    live.stop()


def _large_raw(body: bytes) -> bytes:
    return body[:-1] + b" " * (INLINE_PARSE_BYTES + 10) + b"}"


def _is_refusal(r: httpx.Response) -> bool:
    """A 4xx with our JSON error body and a code."""
    if not 400 <= r.status_code < 500 or not r.headers.get("content-type", "").startswith("application/json"):
        return False
    return isinstance(r.json().get("error", {}).get("code"), str)


@pytest.mark.parametrize("size", ["small", "large"])
def test_bytes_that_are_not_utf8_are_refused_by_every_body_route(two_models: LiveServer, size: str) -> None:
    """The class: every route whose OpenAPI operation takes a body (the table must name each one) x every
    kind of invalid UTF-8 in every text field -> 422 invalid_request, never a 500; the server serves on."""
    with httpx.Client(base_url=two_models.url, timeout=60) as c:
        spec = c.get("/openapi.json").json()
        with_body = {
            (m, p) for p, ops in spec["paths"].items() for m, op in ops.items() if "requestBody" in op
        }
        assert with_body == set(_raw_bodies(b"x")), "a route takes a body: add it to _raw_bodies"
        for label, raw in NOT_UTF8.items():
            for (_, path), bodies in _raw_bodies(raw).items():
                for body in bodies:
                    sent = _large_raw(body) if size == "large" else body
                    r = c.post(path.replace("{name}", "caps"), content=sent, headers=JSON_TYPE)
                    assert r.status_code == 422, (label, path, body, r.status_code, r.text)
                    assert r.json()["error"]["code"] == "invalid_request", (label, path, r.text)
        assert c.get("/galleries/caps").json()["count"] == 0
        assert [g["name"] for g in c.get("/galleries").json()["galleries"]] == ["caps"]
        assert c.get("/health").status_code == 200
        ok = c.post("/tokenize", json={"model": ST, "sentences": ["still serving"]})
        assert ok.status_code == 200, ok.text


def test_bytes_that_are_not_utf8_in_a_url_are_refused_by_every_route(two_models: LiveServer) -> None:
    """The same bytes, percent-encoded, in every path and query parameter of every route in the schema:
    a 4xx with our JSON error, never a 500."""
    with httpx.Client(base_url=two_models.url, timeout=60) as c:
        spec = c.get("/openapi.json").json()
        checked = 0
        for path, ops in spec["paths"].items():
            for method, op in ops.items():
                params = op.get("parameters", [])
                for param in params:
                    for label, raw in NOT_UTF8.items():
                        bad = quote(raw, safe="")
                        url, query = path, {}
                        for p in params:  # the others valid, this one hostile
                            value = bad if p is param else ("caps" if p["name"] == "name" else "x")
                            if p["in"] == "path":
                                url = url.replace("{" + p["name"] + "}", value)
                            else:
                                query[p["name"]] = value
                        target = url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
                        r = c.request(method.upper(), target)
                        assert _is_refusal(r), (label, method, target, r.status_code, r.text)
                        checked += 1
        assert checked >= 9 * len(NOT_UTF8)
        assert c.get("/galleries/caps").status_code == 200
