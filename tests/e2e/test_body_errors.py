"""Broken request bodies on every route that takes one (read from the live OpenAPI schema): 422
``invalid_request`` with a message that says what is wrong with the body, never FastAPI's character offset
as if it were a field (``"0: JSON decode error"``) and never the input itself."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server

JSON = "application/json"
BIG = b'{"sentences": [' + b'"a red circle", ' * 8000  # over 64 KiB: parsed in the worker process
# (name, body, content type, what the message must say)
BROKEN: list[tuple[str, bytes, str, str]] = [
    ("empty", b"", JSON, "the request body is missing"),
    ("not-json", b"nope", JSON, "the request body is not valid JSON: "),
    ("truncated", b'{"inputs": ["a"', JSON, "the request body is not valid JSON: "),
    ("trailing-comma", b'{"inputs": "a",}', JSON, "the request body is not valid JSON: "),
    ("large-truncated", BIG, JSON, "the request body is not valid JSON: "),
    ("array", b'["a red circle"]', JSON, "the request body must be a JSON object"),
    ("null", b"null", JSON, "the request body must be a JSON object"),
    ("string", b'"a red circle"', JSON, "the request body must be a JSON object"),
    (
        "text-plain",
        b'{"inputs": "a"}',
        "text/plain",
        "the request body must be a JSON object with Content-Type",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("bodies"))
    yield srv
    srv.stop()


def _body_routes(server: LiveServer) -> list[str]:
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    routes = [
        re.sub(r"\{[^}]+\}", "x", path)
        for path, ops in paths.items()
        for method, op in ops.items()
        if method == "post" and "requestBody" in op
    ]
    assert {"/encode", "/v1/embeddings", "/retrieve", "/galleries/x/items", "/embed", "/tokenize"} <= set(
        routes
    )
    return routes


@pytest.mark.parametrize(("name", "body", "ctype", "says"), BROKEN, ids=[b[0] for b in BROKEN])
def test_every_body_route_says_what_is_wrong_with_a_broken_body(
    server: LiveServer, name: str, body: bytes, ctype: str, says: str
) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for route in _body_routes(server):
            r = client.post(route, content=body, headers={"Content-Type": ctype})
            assert r.status_code == 422, (route, r.text)
            error = r.json()["error"]
            assert error["code"] == "invalid_request", (route, error)
            message = error["message"]
            assert message.startswith(says), (route, message)
            assert re.match(r"^\d+:", message) is None and "JSON decode error" not in message, (
                route,
                message,
            )
            assert "red circle" not in message and "nope" not in message, (route, message)
        assert client.get("/ready").status_code == 200


def test_a_field_error_names_the_field_and_the_index(server: LiveServer) -> None:
    r = httpx.post(server.url + "/encode", json={"sentences": ["a", 3]})
    assert r.status_code == 422
    assert r.json()["error"]["message"] == "sentences[1]: Input should be a valid string"
