"""Pure ASGI middleware (no BaseHTTPMiddleware, so handlers still see ``http.disconnect``).

Gives each request an id (``X-Request-ID``, echoed back), records metrics by route template and writes one
JSON access-log line per request (its client: ``client_identity``). Before a byte of the body is read it
refuses, each with its JSON error: a draining server (503 ``shutting_down``), a missing or wrong API key
(401), a ``Content-Length`` over ``max_body_bytes`` (413), and, when ``max_inflight`` requests are already
in flight, 429 ``overloaded`` with ``Retry-After``. Then it reads the whole body
(``lnserve.app.http.body_reading``: within ``body_timeout_s``, ``max_body_bytes``,
``max_body_reads_per_client`` and ``max_body_bytes_arriving``) and only then admits the request into
``max_inflight``: a client that sends a body slowly or never holds no slot. ``/health``, ``/ready`` and
``/metrics`` are never refused nor counted. While the app runs it answers requests still running at the
drain deadline with 503 ``shutting_down``, and turns an unexpected exception into the JSON 500 without
closing the keep-alive connection.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

from pydantic import SecretStr
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lnserve.errors import LnserveError

from ..log_setup import ACCESS_LOGGER
from ..serving.deadlines import parse_timeout_ms
from ..serving.errors import OverloadedError, RequestTooLargeError, UnauthorizedError
from ..serving.timing import RequestTiming, current_timing
from .api_key import key_matches
from .body_reading import BodyReader, has_body, replay, too_large
from .client_identity import client_host
from .errors import ShuttingDownError, error_response, http_status
from .lifecycle import Lifecycle
from .metrics import Metrics
from .request_ids import new_request_id

access_log = logging.getLogger(ACCESS_LOGGER)
log = logging.getLogger("lnserve.errors")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CLOSE = {"Connection": "close"}
# where a route finds its request's ``RequestTiming`` (``scope["state"]``, i.e. ``request.state``) to record
# the times its model jobs brought back with their results
REQUEST_TIMING = "timing"


class _Sender:
    """The ``send`` the app gets: adds ``X-Request-ID`` and the timing headers (queue / model time, batch
    size: recorded by the route from its results' times) and remembers the status and whether it started."""

    def __init__(self, send: Send, rid: str, timing: RequestTiming) -> None:
        self.send, self.rid, self.timing = send, rid, timing
        self.status, self.started = 500, False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status, self.started = message["status"], True
            extra = [(b"x-request-id", self.rid.encode()), *self.timing.headers()]
            message["headers"] = [*message.get("headers", []), *extra]
        await self.send(message)


class RequestContextMiddleware:
    """Request id, admission (drain, key, size, in-flight limit), metrics and access log for every request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        log_access: bool,
        max_inflight: int,
        retry_after_s: int,
        api_key: SecretStr | None,
        public_paths: frozenset[str],
        probe_paths: frozenset[str],
        lifecycle: Lifecycle,
        body_timeout_s: float = 30.0,
        max_body_reads_per_client: int = 8,
        body_arrival_grace_s: float = 0.0,
        max_body_bytes_arriving: int = 0,
        routes: Sequence[BaseRoute] = (),
        public_prefixes: tuple[str, ...] = (),
        cors: bool = False,
    ) -> None:
        """``routes``: the app's routes, to name the route of a request answered before the app ran.
        ``cors``: CORS is configured (its preflights pass without the key: browsers send none)."""
        self.app, self.metrics, self.max_body, self.log_access = app, metrics, max_body_bytes, log_access
        self.max_inflight, self.retry_after = max_inflight, retry_after_s
        self.key = api_key
        self.public, self.probes, self.lifecycle = public_paths, probe_paths, lifecycle
        self.routes, self.public_prefixes, self.cors = routes, public_prefixes, cors
        self.bodies = BodyReader(
            max_bytes=max_body_bytes,
            timeout_s=body_timeout_s,
            per_client=max_body_reads_per_client,
            grace_s=body_arrival_grace_s,
            max_total_bytes=max_body_bytes_arriving,
        )
        metrics.watch(
            inflight=lambda: lifecycle.inflight,
            bodies_arriving=lambda: self.bodies.arriving,
            body_bytes_arriving=lambda: self.bodies.bytes_arriving,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = _request_id(scope)
        timing = RequestTiming()
        scope.setdefault("state", {}).update({"request_id": rid, REQUEST_TIMING: timing})
        bad_timeout = _read_timeout(scope, timing)
        timing_token = current_timing.set(timing)  # its deadline goes in to the batcher; no times come back
        out = _Sender(send, rid, timing)
        counted = scope["path"] not in self.probes
        try:
            refusal = self._refusal(scope, rid, counted)
            if refusal is None and bad_timeout is not None:
                refusal = error_response(422, "invalid_input", bad_timeout, request_id=rid)
            if refusal is not None:
                await refusal(scope, receive, out)
                return
            if counted and has_body(scope) and not self._bodiless(scope):  # whole body first, then a slot
                try:
                    with self.lifecycle.cut_at_drain_deadline() as cut:
                        body = await self.bodies.read(scope, receive)
                except ClientDisconnect:  # gone while its body was read: nobody to answer, nothing to log
                    out.status = 499
                    return
                except LnserveError as exc:  # its body is unread: the connection cannot carry on
                    await self._refuse(exc, scope, receive, out)
                    return
                except TimeoutError:
                    if not cut.expired():
                        raise
                    msg = "the server is shutting down: the drain timeout ended before the body came"
                    await self._refuse(ShuttingDownError(msg), scope, receive, out)
                    return
                refusal = self._overloaded(rid)
                if refusal is not None:
                    await refusal(scope, receive, out)
                    return
                receive = replay(body, receive)
            self._admit(+1 if counted else 0)
            try:
                await self._run(scope, receive, out)
            finally:
                self._admit(-1 if counted else 0)
        finally:
            current_timing.reset(timing_token)
            route = self._route_path(scope)
            self._record(scope, rid, route, out.status, time.perf_counter() - start)
            self.metrics.timing(route, timing)

    async def _run(self, scope: Scope, receive: Receive, out: _Sender) -> None:
        """The app, cut at the drain deadline; what escapes it is answered here when nothing was sent yet."""
        try:
            with self.lifecycle.cut_at_drain_deadline() as cut:
                await self.app(scope, receive, out)
        except TimeoutError:
            if not cut.expired():
                raise
            if not out.started:  # cut by the drain deadline: a clear answer, not a dropped connection
                msg = "the server is shutting down: the drain timeout ended before this request finished"
                resp = error_response(503, ShuttingDownError.code, msg, request_id=out.rid, headers=_CLOSE)
                await resp(scope, receive, out)
        except ClientDisconnect:  # gone while its body was read: nobody to answer, nothing to log
            out.status = 499
        except Exception as exc:
            if out.started:  # part of a response is out: only closing the connection can signal the error
                raise
            log.error("unhandled error (request %s)", out.rid, exc_info=exc)
            # answered here, not re-raised to the server error middleware, so that uvicorn keeps the
            # keep-alive connection usable (it closed it, without Connection: close, on a re-raise)
            msg = f"internal error (request id {out.rid})"
            await error_response(500, "internal_error", msg, request_id=out.rid)(scope, receive, out)

    def _admit(self, delta: int) -> None:
        if delta:
            self.lifecycle.inflight += delta  # the batchers and the gauge read it (``inflight_wait_ms``)

    def _refusal(self, scope: Scope, rid: str, counted: bool) -> Response | None:
        """The error response for a request refused before its body is read, or None to admit it."""
        if counted and self.lifecycle.draining:
            msg = "the server is shutting down and takes no new requests"
            return error_response(503, ShuttingDownError.code, msg, request_id=rid, headers=_CLOSE)
        if self._key_refused(scope):
            msg = "missing or wrong API key (send Authorization: Bearer <key>)"
            headers = {"WWW-Authenticate": "Bearer"}
            return error_response(401, UnauthorizedError.code, msg, request_id=rid, headers=headers)
        length = _content_length(scope)
        if length is not None and length > self.max_body:
            return error_response(413, RequestTooLargeError.code, too_large(self.max_body), request_id=rid)
        return self._overloaded(rid) if counted else None

    def _overloaded(self, rid: str) -> Response | None:
        """429 when ``max_inflight`` requests are in flight: checked when the headers are in (an answer at
        once, before the body is read) and again when the body is (the request is admitted only then)."""
        inflight = self.lifecycle.inflight
        if inflight < self.max_inflight:
            return None
        self.metrics.overloaded.inc()
        msg = f"{inflight} requests in flight (max_inflight {self.max_inflight}); retry later"
        headers = {"Retry-After": str(self.retry_after)}
        return error_response(429, OverloadedError.code, msg, request_id=rid, headers=headers)

    async def _refuse(self, exc: LnserveError, scope: Scope, receive: Receive, out: _Sender) -> None:
        """Answer a request whose body could not be read whole, and close its connection."""
        headers = dict(_CLOSE)
        if isinstance(exc, OverloadedError):
            headers["Retry-After"] = str(self.retry_after)
        response = error_response(http_status(exc), exc.code, str(exc), request_id=out.rid, headers=headers)
        await response(scope, receive, out)

    def _route_path(self, scope: Scope) -> str:
        """The route template for metrics and logs: the router's, or for a request answered here before
        the app ran (a body too slow, too large), the route it would have reached."""
        route = scope.get("route")
        if route is None:
            route = next((r for r in self.routes if r.matches(scope)[0] == Match.FULL), None)
        return getattr(route, "path", None) or "unmatched"

    def _key_refused(self, scope: Scope) -> bool:
        """An API key is configured and this request (not public, not a CORS preflight) lacks it."""
        if self.key is None or self._public(scope) or self._preflight(scope):
            return False
        return not key_matches(_bearer_token(scope), self.key)

    def _public(self, scope: Scope) -> bool:
        path = scope["path"]
        return path in self.public or path.startswith(self.public_prefixes)

    def _bodiless(self, scope: Scope) -> bool:
        """No route here reads a body (the public paths: probes, the API's description; a CORS preflight):
        its body is never read ahead, the app answers at once (the connection's body backstop cuts a client
        that keeps sending it). Read ahead, a slow body held the answer of ``GET /docs`` for its length."""
        return self._public(scope) or self._preflight(scope)

    def _preflight(self, scope: Scope) -> bool:
        """A CORS preflight, where CORS is configured: the CORS middleware answers it without its body.
        Any other OPTIONS is a request like the rest (without the key: 401 before its body is read)."""
        if not self.cors or scope["method"] != "OPTIONS":
            return False
        names = {name for name, _ in scope.get("headers", ())}
        return b"origin" in names and b"access-control-request-method" in names

    def _record(self, scope: Scope, rid: str, route: str, status: int, seconds: float) -> None:
        self.metrics.request(route, scope["method"], status, seconds)
        if self.log_access:
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
                        "client": client_host(scope),
                    }
                },
            )


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1")
            if _SAFE_ID.match(given):
                return given
    return new_request_id()


def _bearer_token(scope: Scope) -> bytes:
    """The ``Authorization: Bearer`` credentials as sent, bytes untouched (b"" if none), split as FastAPI's
    ``HTTPBearer`` splits them."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token if scheme.lower() == b"bearer" else b""
    return b""


def _read_timeout(scope: Scope, timing: RequestTiming) -> str | None:
    """Put ``X-Request-Timeout-Ms`` (the request's queue deadline) into its timing; the reason if invalid."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-timeout-ms":
            try:
                timing.timeout_s = parse_timeout_ms(value.decode("latin-1"))
            except ValueError as exc:
                return str(exc)
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
