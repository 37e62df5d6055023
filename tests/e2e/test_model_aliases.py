"""``LNSERVE_MODEL_ALIASES`` on a real server (one process and ``--ray``): an alias is another name for its
model, never an entry of its own. Every route that takes a model name (a ``model`` body field or a model
path parameter, found in the OpenAPI schema so that a new one cannot be missed) answers about the real
model when given the alias; a reload by alias reloads the real model, which keeps serving by its name, by
default and by alias, past the time old versions used to retire (a reload by alias used to store the new
version under the alias and retire the real model: 503 ``shutting_down`` on every request 5 s later);
``/models``, ``/info``, ``/ready`` and ``/metrics`` name each model once, by its own name; ``/v1/models``
lists the models, then the aliases (its contract since aliases exist)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.engines import ENGINES, engine_args, start_timeout
from tests.e2e.server import LiveServer, start_server

KEY = "alias-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "demo-lngru"
ALIAS = "text-embedding-ada-002"
GALLERY = "aliased"
SENTENCE = "a red circle on the left"
IMAGE = [1.0] * 120  # the demo model's dim_image
OLD_GRACE_S = 5.0  # how long a reloaded model's old version used to take jobs before it was closed


@dataclass(frozen=True)
class Use:
    """One route that takes a model name, called with ``name`` (None: no name, the default model)."""

    method: str
    path: str  # the OpenAPI template
    call: Callable[[httpx.Client, str | None], httpx.Response]
    model_of: Callable[[dict[str, Any]], Any] | None  # the model an answer names, if it names one


def _named(body: dict[str, Any], name: str | None) -> dict[str, Any]:
    return body if name is None else {**body, "model": name}


USES = [
    Use(
        "post",
        "/encode",
        lambda c, n: c.post("/encode", json=_named({"sentences": [SENTENCE]}, n)),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/encode/images",
        lambda c, n: c.post("/encode/images", json=_named({"features": [IMAGE]}, n)),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/tokenize",
        lambda c, n: c.post("/tokenize", json=_named({"sentences": [SENTENCE]}, n)),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/score",
        lambda c, n: c.post("/score", json=_named({"captions": [SENTENCE], "images": [IMAGE]}, n)),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/v1/embeddings",
        lambda c, n: c.post("/v1/embeddings", json=_named({"input": SENTENCE}, n)),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/galleries",
        lambda c, n: c.post(
            "/galleries", json=_named({"name": f"{GALLERY}-{time.monotonic_ns()}", "kind": "captions"}, n)
        ),
        lambda a: a["model"],
    ),
    Use(
        "post",
        "/galleries/{name}/items",
        lambda c, n: c.post(f"/galleries/{GALLERY}/items", json=_named({"items": [{"text": SENTENCE}]}, n)),
        None,
    ),
    Use(
        "post",
        "/retrieve",
        lambda c, n: c.post("/retrieve", json=_named({"gallery": GALLERY, "query": {"text": SENTENCE}}, n)),
        None,
    ),
    Use(
        "get",
        "/v1/models/{model_id}",
        lambda c, n: c.get(f"/v1/models/{n or MODEL}"),
        None,  # OpenAI's shape names the id asked for (the alias is listed by /v1/models)
    ),
]
RELOAD = ("post", "/models/{name}/reload")


@pytest.fixture(scope="module", params=ENGINES)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(
        tmp_path_factory.mktemp("aliases"),
        *engine_args(request.param),
        env={"LNSERVE_API_KEY": KEY, "LNSERVE_MODEL_ALIASES": f"{ALIAS}={MODEL}"},
        timeout=start_timeout(request.param),
    )
    yield srv
    srv.stop()


def _takes_a_model_name(schema: dict[str, Any]) -> set[tuple[str, str]]:
    """(method, path) of every operation with a ``model`` body field or a model path parameter."""
    refs = schema.get("components", {}).get("schemas", {})

    def props(s: dict[str, Any]) -> set[str]:
        s = refs[s["$ref"].rsplit("/", 1)[1]] if "$ref" in s else s
        found = set(s.get("properties", {}))
        for alt in s.get("anyOf", []) + s.get("oneOf", []):
            found |= props(alt)
        return found

    out = set()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            named = "model_id" in params or (path.startswith("/models/") and bool(params))
            if named or "model" in (props(body) if body else set()):
                out.add((method, path))
    return out


def _check(c: httpx.Client, use: Use, name: str | None, when: str) -> None:
    r = use.call(c, name)
    assert r.status_code in (200, 201), f"{when}: {use.method.upper()} {use.path} as {name!r}: {r.text}"
    if use.model_of is not None:
        assert use.model_of(r.json()) == MODEL, f"{when}: {use.path} as {name!r} answered {r.text[:200]}"


def _listed_once(c: httpx.Client, server: LiveServer) -> None:
    models = [m["name"] for m in c.get("/models").json()["models"]]
    assert models.count(MODEL) == 1 and ALIAS not in models, models
    info = [m["name"] for m in c.get("/info").json()["models"]]
    assert info == models, info
    ready = c.get("/ready").json()["models"]
    assert list(ready) == models, ready
    ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
    assert ids == [*models, ALIAS], ids
    metrics = httpx.get(server.url + "/metrics", timeout=30).text
    assert not re.search(rf'model="{re.escape(ALIAS)}"', metrics), "an alias became a metrics label"


def test_every_route_that_takes_a_model_name_resolves_an_alias(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as c:
        schema = c.get("/openapi.json").json()
        covered = {(u.method, u.path) for u in USES} | {RELOAD}
        assert _takes_a_model_name(schema) == covered, "a route that takes a model name is not in the table"
        r = c.post("/galleries", json={"name": GALLERY, "kind": "captions", "model": ALIAS})
        assert r.status_code == 201 and r.json()["model"] == MODEL, r.text

        for use in USES:
            _check(c, use, ALIAS, "before the reload")
        _listed_once(c, server)
        before = next(m for m in c.get("/models").json()["models"] if m["name"] == MODEL)

        r = c.post(f"/models/{ALIAS}/reload")
        assert r.status_code == 200, r.text
        assert r.json()["name"] == MODEL and r.json()["default"] is True, r.text
        after = next(m for m in c.get("/models").json()["models"] if m["name"] == MODEL)
        assert after["loaded_at"] > before["loaded_at"], (before, after)
        _listed_once(c, server)

        time.sleep(OLD_GRACE_S + 1.5)  # past the moment the old version used to be closed
        for use in USES:
            for name in (MODEL, None, ALIAS):
                _check(c, use, name, "after a reload by alias")
        _listed_once(c, server)
        assert c.get("/ready").status_code == 200
        r = c.post("/models/nope/reload")
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
