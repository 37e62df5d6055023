"""A middleware for Ray Serve's HTTP proxy: failures of the engine become lnserve's 503, not a bare 500.

When a replica dies with requests in flight (killed, out of memory, its node lost), the proxy returns from
those requests without answering (uvicorn then sends a bare 500), or answers a plain-text 5xx. Every
response that lnserve's own app produces carries ``X-Lnserve-Replica`` (``scale.deployment.ReplicaHeader``),
so a 5xx without it comes from the engine: it is replaced by the service's error shape, ``503
replica_unavailable`` with ``Retry-After``. Such a request may or may not have taken effect (a write may
have committed before its replica died), which is what this 503 means: retry; a retried write with the same
ids then answers 409 ``duplicate_item`` if it had been applied.

Serve installs it from ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=lnserve.app.scale.proxy:middlewares``
(``lnserve serve --ray`` sets it for a local instance; on a cluster, export it before ``ray start``).
"""

from __future__ import annotations

import uuid

import orjson
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CALLBACK = "lnserve.app.scale.proxy:middlewares"
REPLICA_HEADER = b"x-lnserve-replica"
CODE = "replica_unavailable"
RETRY_AFTER_S = 1


def middlewares() -> list[Middleware]:
    """The proxy callback: what Serve adds to its HTTP proxy."""
    return [Middleware(EngineErrors)]


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _one_request_id(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The replica's ``X-Request-ID`` (the one its error bodies carry); Serve's proxy appends its own."""
    seen = False
    out = []
    for name, value in headers:
        if name.lower() == b"x-request-id":
            if seen:
                continue
            seen = True
        out.append((name, value))
    return out


class EngineErrors:
    """Rewrites a 5xx that no lnserve replica produced into ``503 replica_unavailable``; one request id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = started = False

        async def send_checked(message: Message) -> None:
            nonlocal replaced, started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                if message["status"] >= 500 and _header(headers, REPLICA_HEADER) is None:
                    replaced = True
                    await self._send_503(scope, headers, send)
                    return
                message["headers"] = _one_request_id(headers)
            elif replaced:
                return  # the engine's own body: already answered
            await send(message)

        try:
            await self.app(scope, receive, send_checked)
        except Exception:
            if started:
                raise
            await self._send_503(scope, [], send)
            return
        if (
            not started
        ):  # the proxy gave up on a lost replica without answering: uvicorn would send a bare 500
            await self._send_503(scope, [], send)

    @staticmethod
    async def _send_503(scope: Scope, headers: list[tuple[bytes, bytes]], send: Send) -> None:
        rid = _header(headers, b"x-request-id") or _header(scope.get("headers", []), b"x-request-id")
        request_id = rid.decode("latin-1") if rid else uuid.uuid4().hex
        body = orjson.dumps(
            {
                "error": {
                    "code": CODE,
                    "message": "the replica serving this request is unavailable (it may have died); "
                    "retry: a write may already have been applied (a retry with the same ids then gets "
                    "409 duplicate_item)",
                    "request_id": request_id,
                }
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(RETRY_AFTER_S).encode()),
                    (b"x-request-id", request_id.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
