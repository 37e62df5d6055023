"""Pure ASGI middleware (no BaseHTTPMiddleware, so handlers still see ``http.disconnect``).

Gives each request an id (``X-Request-ID``, echoed back), enforces the body size limit, records metrics by
route template and writes one JSON access-log line per request.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lnserve.app.errors import RequestTooLargeError, error_response
from lnserve.app.log_setup import ACCESS_LOGGER
from lnserve.app.metrics import Metrics

access_log = logging.getLogger(ACCESS_LOGGER)
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestContextMiddleware:
    """Request id, body limit, metrics and access log for every HTTP request."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_body_bytes: int, log_access: bool) -> None:
        self.app, self.metrics, self.max_body, self.log_access = app, metrics, max_body_bytes, log_access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = rid
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            length = _content_length(scope)
            if length is not None and length > self.max_body:
                resp = error_response(413, RequestTooLargeError.code, self._too_large(), request_id=rid)
                await resp(scope, receive, send_wrapper)
            else:
                await self.app(scope, self._limited(receive), send_wrapper)
        finally:
            self._record(scope, rid, status, time.perf_counter() - start)

    def _too_large(self) -> str:
        return f"request body exceeds {self.max_body} bytes (max_body_bytes)"

    def _limited(self, receive: Receive) -> Receive:
        """Count streamed (chunked) bodies too: Content-Length may be absent."""
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    # an HTTPException passes through FastAPI's body parsing untouched (-> 413)
                    raise HTTPException(status_code=413, detail=self._too_large())
            return message

        return wrapped

    def _record(self, scope: Scope, rid: str, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        self.metrics.request(route, scope["method"], status, seconds)
        if self.log_access:
            client: Any = scope.get("client")
            access_log.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "fields": {
                        "request_id": rid,
                        "method": scope["method"],
                        "path": scope["path"],
                        "route": route,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 3),
                        "client": client[0] if client else None,
                    }
                },
            )


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1")
            if _SAFE_ID.match(given):
                return given
    return uuid.uuid4().hex


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
