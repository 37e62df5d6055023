"""The API key over a real server: one rule for the API's description (``/docs``, ``/redoc``, their assets
and ``/openapi.json`` are public, every operation needs the key), and keys with non-ASCII characters,
compared as the UTF-8 bytes clients send."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

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
