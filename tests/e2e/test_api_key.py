"""The API key over a real server: one rule for the API's description (``/docs``, ``/redoc``, their assets
and ``/openapi.json`` are public, every operation needs the key), keys with non-ASCII characters,
compared as the UTF-8 bytes clients send, and every request without the key answered before its body is
read, whatever its method and route (an OPTIONS without the key had its 4 MB body read, then got 405)."""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from lnserve.app.http.main import create_app
from lnserve.app.http.routes import ROUTER_MODULES
from lnserve.app.settings import Settings
from tests.e2e.rawhttp import RawConnection
from tests.e2e.server import LiveServer, start_server

KEY = "clé-ключ-🔑"


def _auth(raw: bytes) -> dict[str, bytes]:
    return {"Authorization": b"Bearer " + raw}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("key"), env={"LNSERVE_API_KEY": KEY})
    yield srv
    srv.stop()


def test_the_api_description_is_public_and_every_operation_needs_the_key(keyed: LiveServer) -> None:
    with httpx.Client(base_url=keyed.url, timeout=60) as c:
        schema = c.get("/openapi.json")
        assert schema.status_code == 200
        for page in ("/docs", "/redoc"):
            r = c.get(page)
            assert r.status_code == 200 and "text/html" in r.headers["content-type"], (page, r.text[:200])
            assets = re.findall(r'(?:src|href)="(/[^"]+)"', r.text)
            assert assets, page
            for asset in assets:  # the page's own scripts and styles load without the key too
                assert c.get(asset).status_code == 200, asset
        for path, operations in schema.json()["paths"].items():
            for method in operations:
                if path in ("/health", "/ready", "/metrics"):
                    continue
                concrete = re.sub(r"\{[^}]+\}", "x", path)
                r = c.request(method.upper(), concrete, json={})
                assert r.status_code == 401, (method, path, r.status_code)
                assert r.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("path", ["/models", "/info"])
def test_a_non_ascii_key_matches_as_utf8_and_only_so(keyed: LiveServer, path: str) -> None:
    url = keyed.url + path
    assert httpx.get(url, headers=_auth(KEY.encode("utf-8")), timeout=60).status_code == 200
    for wrong in (KEY.encode("utf-8")[:-1], "clé".encode("latin-1"), KEY.upper().encode()):
        r = httpx.get(url, headers=_auth(wrong), timeout=60)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", wrong
    r = httpx.post(
        keyed.url + "/encode", json={"sentences": ["a red circle"]}, headers=_auth(KEY.encode()), timeout=60
    )
    assert r.status_code == 200, r.text


# PROPFIND: a method no route has that the parser knows; FROB: one httptools' parser refuses (400)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "FROB")
PUBLIC = ("/health", "/ready", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
BODY_BYTES = 4_000_000  # under max_body_bytes (4 MiB): a body the server would read
ANSWER_S = 5.0  # well under body_timeout_s (30 s): an answer this soon did not wait for the body


def every_path() -> list[str]:
    """Every route of the app (hidden ones too, parameters filled in), the static mount, unknown paths."""
    app = create_app(Settings())
    templates = {route.path for route in app.routes if hasattr(route, "path")}
    for name in ROUTER_MODULES:
        router = importlib.import_module(f"lnserve.app.http.routes.{name}").router
        templates |= {route.path for route in router.routes if hasattr(route, "path")}
    paths = {re.sub(r"\{[^}]+\}", "x", t) for t in templates}
    return sorted(paths | {"/static-offline-docs/x.js", "/no/such/route", "/encode/", "*"})


def _head_only(conn: RawConnection) -> tuple[int, dict[str, str]]:
    """The status and headers of the next answer (a HEAD's has no body; the body is not needed)."""
    status_line = conn.file.readline()
    assert status_line, "the server closed the connection without an answer"
    headers: dict[str, str] = {}
    while (line := conn.file.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


@pytest.mark.parametrize("method", METHODS)
def test_without_the_key_every_method_and_route_is_answered_before_its_body(
    keyed: LiveServer, method: str
) -> None:
    """Headers announcing a 4 MB body, one byte of it, no key: the answer comes at once (401 for every
    path that is not public, whatever the method), not after the body (it is never sent)."""
    for path in every_path():
        with RawConnection(keyed.url, timeout=ANSWER_S + 5) as conn:
            start = time.monotonic()
            conn.send_head(method, path, {"Content-Type": "application/json"}, BODY_BYTES)
            conn.sock.sendall(b"{")
            status, _ = _head_only(conn)
            took = time.monotonic() - start
        where = f"{method} {path}"
        assert took < ANSWER_S and status != 408, (where, status, took)
        if path == "*" or method == "FROB":  # the parser may refuse these (400): before the body too
            assert status in (400, 401), (where, status)
        elif not (path in PUBLIC or path.startswith("/static-offline-docs/")):
            assert status == 401, (where, status)


@pytest.fixture(scope="module")
def keyed_cors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"LNSERVE_API_KEY": KEY, "LNSERVE_CORS_ORIGINS": "http://app.example"}
    srv = start_server(tmp_path_factory.mktemp("cors"), env=env)
    yield srv
    srv.stop()


def test_only_a_cors_preflight_passes_without_the_key(keyed_cors: LiveServer) -> None:
    """Browsers send no key with a preflight: with CORS on, a preflight is answered without it (at once,
    its body unread); any other OPTIONS needs the key like every request."""
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    with RawConnection(keyed_cors.url, timeout=ANSWER_S + 5) as conn:
        conn.send_head("OPTIONS", "/encode", preflight, BODY_BYTES)
        conn.sock.sendall(b"{")
        status, headers = _head_only(conn)
    assert status == 200 and headers.get("access-control-allow-origin") == "http://app.example", headers
    r = httpx.options(keyed_cors.url + "/encode", headers={"Origin": "http://app.example"}, timeout=60)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
