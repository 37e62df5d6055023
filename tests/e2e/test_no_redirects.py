"""No answer of the server is a redirect, on any route and with any method (a real demo server).

Starlette's trailing-slash redirect turned a correctly encoded ``DELETE /galleries/shop/items/..%2F`` (item
id ``../``) into ``307 Location: /galleries/shop/items/..``; the client (curl -L, httpx, fetch) resolved the
dot segment and sent ``DELETE /galleries/shop``: the whole gallery went. The same redirect made a delete of
id ``x/`` remove item ``x``. Paths are now matched as sent: a path no route takes is a 404 (405 for a route
without that method), never a 3xx. The table walks every route of the app (and the API description's
pages) with every method, as sent and with the variants that redirects were made of (a trailing ``/``, an
encoded ``/`` or dot segment in a parameter).
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from lnserve.app.http.main import create_app
from lnserve.app.http.routes import ROUTER_MODULES
from lnserve.app.settings import Settings
from tests.e2e.server import LiveServer, start_server

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "FROB")
PARAM = re.compile(r"\{[^}]+\}")
# what a path parameter is replaced with: plain, and the ids the redirect was made of
PARAM_VALUES = ("x", "..%2F", "x%2F", "%2E%2E%2F", "%2E%2E", "..")


def every_route_path() -> list[str]:
    """Every path template of the app: its own routes (the API description's pages, the static mount) and
    those of every router it includes, hidden ones too."""
    app = create_app(Settings())
    paths = {route.path for route in app.routes if hasattr(route, "path")}
    for name in ROUTER_MODULES:
        router = importlib.import_module(f"lnserve.app.http.routes.{name}").router
        paths |= {route.path for route in router.routes if hasattr(route, "path")}
    return sorted(paths)


def path_variants(template: str) -> list[str]:
    """The route's path as sent by clients, and the variants a trailing-slash redirect was made of."""
    concrete = (
        [PARAM.sub(value, template) for value in PARAM_VALUES] if PARAM.search(template) else [template]
    )
    variants = set()
    for path in concrete:
        path = path or "/"
        variants |= {path, path.rstrip("/") + "/", path.rstrip("/") or "/"}
    return sorted(variants)


ROUTES = every_route_path()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("redirects"))  # no API key: requests reach the routing
    yield srv
    srv.stop()


def test_the_walk_finds_the_routes() -> None:
    """The enumeration finds every kind of route (a change to how routes are declared must not empty it)."""
    assert {"/encode", "/galleries/{name}/items/{item_id}", "/docs", "/health", "/v1/embeddings"} <= set(
        ROUTES
    ), ROUTES
    assert len(ROUTES) >= 25


@pytest.mark.parametrize("template", ROUTES)
def test_no_route_answers_any_method_with_a_redirect(server: LiveServer, template: str) -> None:
    with httpx.Client(base_url=server.url, timeout=60, follow_redirects=False) as c:
        for path in path_variants(template):
            for method in METHODS:
                r = c.request(method, path)
                assert not 300 <= r.status_code < 400, (method, path, r.status_code, r.headers)
                assert r.status_code < 500, (method, path, r.status_code, r.text[:300])


def _shop(c: httpx.Client) -> None:
    r = c.post("/galleries", json={"name": "shop", "kind": "captions", "model": "demo-lngru"})
    assert r.status_code == 201, r.text
    items = [{"id": "x", "text": "a red circle"}, {"id": "y", "text": "a blue square"}]
    r = c.post("/galleries/shop/items", json={"items": items})
    assert r.status_code == 200, r.text


def _survived(c: httpx.Client) -> None:
    r = c.get("/galleries/shop")
    assert r.status_code == 200 and r.json()["count"] == 2, r.text
    for item in ("x", "y"):
        assert c.get(f"/galleries/shop/items/{item}").status_code == 200, item


def test_deleting_item_dot_dot_slash_following_redirects_leaves_the_gallery(server: LiveServer) -> None:
    """The attack as reported: item ids ``../`` and ``x/``, correctly percent-encoded, deleted by clients that
    follow redirects; the gallery and both its items survive, and the answer says no route matched."""
    with httpx.Client(base_url=server.url, timeout=60, follow_redirects=True) as c:
        _shop(c)
        for item in ("..%2F", "x%2F", "%2E%2E%2F", "..%2F..%2F"):
            for method in ("DELETE", "GET"):
                r = c.request(method, f"/galleries/shop/items/{item}")
                assert r.status_code == 404 and not r.history, (method, item, r.status_code, r.history)
                assert r.json()["error"]["code"] == "not_found", r.text
                assert "no route matches" in r.json()["error"]["message"], r.text
            _survived(c)
        if shutil.which("curl"):  # the client of the report
            for item in ("..%2F", "x%2F"):
                out = subprocess.run(
                    ["curl", "-sS", "-L", "-o", "/dev/null", "-w", "%{http_code} %{num_redirects}",
                     "-X", "DELETE", f"{server.url}/galleries/shop/items/{item}"],
                    capture_output=True, text=True, timeout=60, check=True,
                )  # fmt: skip
                assert out.stdout == "404 0", (item, out.stdout, out.stderr)
            _survived(c)
        assert c.delete("/galleries/shop/items/x").status_code == 204  # the item itself, by its own path
        assert c.delete("/galleries/shop").status_code == 204
