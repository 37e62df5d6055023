"""Bounds on a request's head (request target, headers), kept by both of uvicorn's HTTP parsers.

uvicorn sets no limit of its own on the request target or the headers under httptools, and both grow by
concatenation as they arrive (uvicorn's URL, httptools' header value), so the cost grows with the square of
the size: one connection sending an 85 MB header held the event loop for seconds (``/health`` waited
5.5 s) before any API key was checked. Here, as mature servers do:

* the request target over ``max_url_bytes`` is refused with 414 ``uri_too_long``, counted as it arrives;
* headers over ``max_header_bytes`` in all (names, values and their separators) with 431
  ``header_too_large``: exactly when they are complete, and while they are still arriving once the bytes
  received for the head pass both limits together (the part of the head that came in the packet that
  began it is not counted there: the bound is then at most one read larger);
* a chunked body's trailers (header lines after the last chunk, grown the same way) like headers: 431
  once the bytes after the head that are not body pass the header limit;
* anything the parser cannot read with 400 ``bad_request``;

each with our JSON error, the connection closed (``lnserve.app.http.protocol_errors``). Under h11 the
same limits apply (its ``max_incomplete_event_size`` bounds an unfinished head; a finished one is checked
exactly).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from .disconnects import LossSignallingProtocol
from .errors import HeadRefused
from .protocol_errors import Refusals

MAX_URL_BYTES = 8192
MAX_HEADER_BYTES = 65536
_REQUEST_LINE_SLACK = 64  # method, spaces, version and line end around the target
_MALFORMED = "malformed HTTP request"


def url_too_long(limit: int) -> HeadRefused:
    return HeadRefused(414, "uri_too_long", f"the request target is over {limit} bytes (max_url_bytes)")


def headers_too_large(limit: int) -> HeadRefused:
    message = f"the request headers are over {limit} bytes in all (max_header_bytes)"
    return HeadRefused(431, "header_too_large", message)


def malformed(reason: str | None) -> HeadRefused:
    return HeadRefused(400, "bad_request", f"{_MALFORMED}: {reason}" if reason else _MALFORMED)


class HttpToolsHeadLimits(Refusals, LossSignallingProtocol):
    """uvicorn's httptools protocol (with the connection-loss signal) keeping the head limits and answering
    every parser refusal with our JSON error."""

    max_url_bytes = MAX_URL_BYTES
    max_header_bytes = MAX_HEADER_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._init_refusals()
        self._in_head = self._fresh = False
        self._head_bytes = self._url_bytes = self._header_bytes = self._unparsed_bytes = 0
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with our refusals; bytes of an unfinished head are counted (see the module)."""
        if self.discarding(data):
            return
        self._unset_keepalive_if_required()
        began_in_head, self._fresh = self._in_head, False
        if not self._in_head:  # body bytes reset it (on_body); a chunked body's trailers never do
            self._unparsed_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            refusal = exc.__context__
            if not isinstance(refusal, HeadRefused):  # the parser's own reason, or a callback's failure
                callback = isinstance(exc, httptools.HttpParserCallbackError)
                refusal = malformed(None if callback else str(exc))
            self.refuse(refusal.status, refusal.code, refusal.message)
            return
        if self._in_head and began_in_head and not self._fresh:
            self._head_bytes += len(data)
            if self._head_bytes - self._url_bytes > self.max_header_bytes + _REQUEST_LINE_SLACK:
                refusal = headers_too_large(self.max_header_bytes)
                self.refuse(refusal.status, refusal.code, refusal.message)
        elif not self._in_head and self._unparsed_bytes > self.max_header_bytes + _REQUEST_LINE_SLACK:
            # after the head, bytes that are not body: a chunked body's trailers (header lines that
            # httptools grows by concatenation, as it does the head's), or chunk framing without data
            refusal = headers_too_large(self.max_header_bytes)
            self.refuse(refusal.status, refusal.code, refusal.message)

    def on_message_begin(self) -> None:
        self._in_head = self._fresh = True
        self._head_bytes = self._url_bytes = self._header_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self.max_url_bytes:
            raise url_too_long(self.max_url_bytes)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4  # ": " and the line end
        if self._header_bytes > self.max_header_bytes:
            raise headers_too_large(self.max_header_bytes)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head, self._unparsed_bytes = False, 0
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._unparsed_bytes = 0
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._unparsed_bytes = 0
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """Anything else of uvicorn's that refuses a request: our JSON 400."""
        refusal = malformed(None)
        self.refuse(refusal.status, refusal.code, refusal.message)


class _LimitedConnection(h11.Connection):
    """h11's server side, checking a finished request head against the limits; ``refusal`` records why
    the last event failed."""

    def __init__(self, max_url_bytes: int, max_header_bytes: int) -> None:
        limit = max_url_bytes + max_header_bytes + _REQUEST_LINE_SLACK
        super().__init__(h11.SERVER, max_incomplete_event_size=limit)
        self.max_url_bytes, self.max_header_bytes = max_url_bytes, max_header_bytes
        self.refusal: HeadRefused | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            # h11 quotes the offending line as a bytearray's repr: the reason alone is clearer
            reason = str(exc).split(": bytearray(", 1)[0]
            self.refusal = self._unfinished_head() if exc.error_status_hint == 431 else malformed(reason)
            raise
        if isinstance(event, h11.Request):
            names = {name for name, _ in event.headers}
            if len(event.target) > self.max_url_bytes:
                self.refusal = url_too_long(self.max_url_bytes)
            elif sum(len(n) + len(v) + 4 for n, v in event.headers.raw_items()) > self.max_header_bytes:
                self.refusal = headers_too_large(self.max_header_bytes)
            elif b"content-length" in names and b"transfer-encoding" in names:
                # h11 would let the chunked framing win; a front proxy may have used the length (request
                # smuggling): refused, as httptools refuses it
                self.refusal = malformed("Transfer-Encoding can't be present with Content-Length")
            if self.refusal is not None:
                raise h11.RemoteProtocolError(self.refusal.message, error_status_hint=self.refusal.status)
        return event

    def _unfinished_head(self) -> HeadRefused:
        """An unfinished head over h11's bound: a 414 while its request line is still unfinished."""
        buffered, _ = self.trailing_data
        line_end = buffered.find(b"\n", 0, self.max_url_bytes + _REQUEST_LINE_SLACK)
        if line_end < 0:
            return url_too_long(self.max_url_bytes)
        return headers_too_large(self.max_header_bytes)


class H11HeadLimits(Refusals, H11Protocol):
    """uvicorn's h11 protocol keeping the head limits and answering every refusal with our JSON error."""

    max_url_bytes = MAX_URL_BYTES
    max_header_bytes = MAX_HEADER_BYTES

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.conn: _LimitedConnection = _LimitedConnection(self.max_url_bytes, self.max_header_bytes)
        self._init_refusals()

    def data_received(self, data: bytes) -> None:
        if self.discarding(data):
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        refusal = self.conn.refusal or malformed(None)
        self.refuse(refusal.status, refusal.code, refusal.message)


def h11_protocol(*, max_url_bytes: int, max_header_bytes: int) -> type[H11HeadLimits]:
    """The h11 protocol class for uvicorn's ``http`` option, with these limits."""
    return type(
        "H11HeadLimits",
        (H11HeadLimits,),
        {"max_url_bytes": max_url_bytes, "max_header_bytes": max_header_bytes},
    )
