"""Property-based API test: schemathesis drives the live server from its own OpenAPI schema.

Checks: no 5xx, documented status codes, content types and headers, and every response body matching the
schema (including error bodies). A few dozen examples per operation keep it quick.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.server import LiveServer, start_server

KEY = "schema-key"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"LNSERVE_API_KEY": KEY, "LNSERVE_MAX_SENTENCES": "32", "LNSERVE_MAX_BODY_BYTES": "65536"}
    srv = start_server(tmp_path_factory.mktemp("schema"), env=env)
    _add_galleries(srv)
    yield srv
    srv.stop()


def _add_galleries(live: LiveServer) -> None:
    """Galleries to list, describe and search (generated names mostly miss them: 404s, which is fine)."""
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        dim_image = c.get("/models").json()["models"][0]["dim_image"]
        for name, kind, item in (
            ("schema-images", "images", {"image": [0.5] * dim_image}),
            ("schema-captions", "captions", {"text": "a red circle on the left"}),
        ):
            assert c.post("/galleries", json={"name": name, "kind": kind}).status_code == 201
            r = c.post(f"/galleries/{name}/items", json={"items": [{"id": "1", **item}]})
            assert r.status_code == 200, r.text


def _operations(live: LiveServer) -> list[Any]:
    """Every operation of the live schema, so routers added later (retrieval) are covered too."""
    api = schemathesis.openapi.from_url(live.url + "/openapi.json")
    return [result.ok() for result in api.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms_to_its_schema(live: LiveServer, mode: GenerationMode) -> None:
    """schemathesis's pytest plugin does not run under pytest 9 yet, so drive hypothesis directly."""
    ops = _operations(live)
    assert {f"{op.method.upper()} {op.path}" for op in ops} >= {
        "POST /encode",
        "POST /v1/embeddings",
        "POST /retrieve",
        "POST /galleries/{name}/items",
    }
    for op in ops:

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            case.call_and_validate(
                base_url=live.url, headers={"Authorization": f"Bearer {KEY}"}, checks=CHECKS, timeout=30
            )

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # an operation with no inputs has no negative cases
