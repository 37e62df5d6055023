"""Who a request comes from, everywhere: forwarded addresses only from ``trusted_proxies``.

Two halves of one rule. Every HTTP server lnserve runs or configures (``lnserve serve`` and the direct
ingress replicas through ``uvicorn_config``; Ray Serve's proxy through ``FORWARDED_ALLOW_IPS``) is run here
as uvicorn builds it, and must replace the peer's address with the forwarded one only for a trusted peer.
And no module but ``client_identity`` reads the client address or a forwarded header, so every place that
derives an identity (the per-client body bound, the access log, whatever comes next) gets it from there.
The end-to-end table over those places is ``tests/e2e/test_bodies_in_flight.py``.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from lnserve.app.http.server import uvicorn_config
from lnserve.app.scale.launch import forwarded_allow_ips
from lnserve.app.settings import Settings

ROOT = Path(__file__).resolve().parents[4]
PACKAGE = [ROOT / "lnserve", ROOT / "app", ROOT / "converters", ROOT / "models"]
ALLOWED = {ROOT / "app" / "http" / "client_identity.py"}
FORWARDED = "198.51.100.7"


def _lnserve(app: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> uvicorn.Config:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # the user's environment must not widen the setting
    return uvicorn_config(app, settings)


def _ray_proxy(app: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> uvicorn.Config:
    """As Serve's proxy builds its server (ray.serve._private.http_util), in the environment launch sets."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", forwarded_allow_ips(settings))
    return uvicorn.Config(app, lifespan="off", access_log=False, log_level=None, log_config=None)


SERVERS = {"lnserve serve / direct ingress": _lnserve, "Ray Serve's proxy": _ray_proxy}
CASES = [  # trusted_proxies, the peer, whose address the app sees
    ("", "127.0.0.1", "peer"),
    ("127.0.0.1", "127.0.0.1", "forwarded"),
    ("127.0.0.1", "127.0.0.2", "peer"),
    ("10.0.0.0/8", "10.1.2.3", "forwarded"),
    ("10.0.0.0/8", "127.0.0.1", "peer"),
    ("::1", "::1", "forwarded"),
]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize(("trusted", "peer", "expected"), CASES)
def test_every_server_believes_forwarded_addresses_only_from_trusted_proxies(
    server: str, trusted: str, peer: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["client"] = scope["client"][0]

    config = SERVERS[server](app, Settings(trusted_proxies=trusted), monkeypatch)
    config.load()
    scope = {
        "type": "http",
        "client": (peer, 5000),
        "headers": [(b"x-forwarded-for", FORWARDED.encode())],
    }
    asyncio.run(config.loaded_app(scope, None, None))
    assert seen["client"] == {"peer": peer, "forwarded": FORWARDED}[expected]


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name the headers)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


HEADERS = {"x-forwarded-for", "x-real-ip", "forwarded", "true-client-ip", "cf-connecting-ip"}


def _is(node: ast.AST, text: str) -> bool:
    return isinstance(node, ast.Constant) and node.value in (text, text.encode())


def _is_get(node: ast.AST, key: str) -> bool:
    """``<something>.get(key, ...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and _is(node.args[0], key)
    )


def _reads(tree: ast.AST) -> list[str]:
    """What in this module reads a client address or a forwarded header."""
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in docs:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            name = text.strip().lower()
            if name in HEADERS or (name.startswith("x-forwarded-") and " " not in name):
                out.append(f"line {node.lineno}: header {text!r}")
        if isinstance(node, ast.Subscript) and _is(node.slice, "client"):
            out.append(f"line {node.lineno}: ['client']")
        if _is_get(node, "client"):
            out.append(f"line {node.lineno}: .get('client')")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "client"
            and isinstance(node.value, ast.Name)
            and node.value.id in ("request", "req", "websocket", "conn", "connection")
        ):
            out.append(f"line {node.lineno}: {node.value.id}.client")
    return out


def test_only_client_identity_reads_the_client_address() -> None:
    found = {}
    for top in PACKAGE:
        for path in sorted(top.rglob("*.py")):
            if path not in ALLOWED and (reads := _reads(ast.parse(path.read_text(encoding="utf-8")))):
                found[str(path.relative_to(ROOT))] = reads
    assert not found, found


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scan itself: each way of reading an address is found (a blind scan would pass anything)."""
    code = (ROOT / "app" / "http" / "client_identity.py").read_text(encoding="utf-8")
    assert _reads(ast.parse(code)), "client_identity reads scope['client'] / .get('client')"
    samples = [
        'h = scope["client"][0]',
        'h = scope.get("client")',
        "h = request.client.host",
        'h = dict(headers).get(b"x-forwarded-for")',
        'h = headers["X-Real-IP"]',
    ]
    for sample in samples:
        assert _reads(ast.parse(sample)), sample
    assert not _reads(ast.parse('"""Reads X-Forwarded-For (prose)."""\nx = 1'))
