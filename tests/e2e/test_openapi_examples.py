"""Every operation of the OpenAPI schema, sent as its examples say (what Swagger's "Try it out" sends), to a
real demo server: each answers 2xx. Bodies without an example made Swagger send ``"model": "string"``.

The examples run in the order Swagger lists them, the deletions last (items before their gallery):
``POST /galleries``' example makes ``my-captions``, which the item routes' examples add to and delete from."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server

KEY = "examples-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("examples"), env={"LNSERVE_API_KEY": KEY})
    yield srv
    srv.stop()


def _first_example(param: dict[str, Any]) -> Any:
    examples = param.get("examples") or {}
    assert examples, f"parameter {param['name']} has no example"
    return next(iter(examples.values()))["value"]


def _body_examples(op: dict[str, Any], components: dict[str, Any]) -> list[Any]:
    if "requestBody" not in op:
        return [None]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    assert schema.get("examples"), f"body {schema.get('title')} has no example"
    return list(schema["examples"])


def _requests(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], Any]]:
    """(method, url, query, body) for every example of every operation, in Swagger's order, deletions last."""
    components = schema["components"]["schemas"]
    out = []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            params = op.get("parameters", [])
            url = path
            for p in params:
                if p["in"] == "path":
                    url = url.replace("{" + p["name"] + "}", str(_first_example(p)))
            query = {p["name"]: _first_example(p) for p in params if p["in"] == "query" and p.get("required")}
            assert "{" not in url, url
            out += [(method.upper(), url, query, body) for body in _body_examples(op, components)]
    keep = [r for r in out if r[0] != "DELETE"]
    deletes = sorted((r for r in out if r[0] == "DELETE"), key=lambda r: -len(r[1]))
    return keep + deletes


def test_every_operation_runs_as_its_examples_say(server: LiveServer) -> None:
    schema = httpx.get(server.url + "/openapi.json").json()
    requests = _requests(schema)
    assert len({(m, re.sub(r"\?.*", "", u)) for m, u, _, _ in requests}) >= 25
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
        for method, url, query, body in requests:
            r = c.request(method, url, params=query, json=body)
            assert 200 <= r.status_code < 300, (method, url, query, body, r.status_code, r.text[:500])
