"""Deadlines uvicorn does not keep: how long a connection may take to send a request's headers and body.

uvicorn closes a keep-alive connection that stays idle *between* requests (``timeout_keep_alive``), but
arms no timer while a request is arriving: a client that opens a connection and sends nothing, or half a
header line, or headers and one byte of a body, held its connection (and, before the middleware read bodies
itself, a slot of ``max_inflight``) for as long as it liked. This protocol adds:

* a header deadline (``header_timeout_s``) from the connection's opening (first request) or the request's
  first byte (later ones): past it, a request that has begun is answered 408 ``request_timeout`` and the
  connection closed; one that never sent a byte is just closed;
* a body backstop (``body_timeout_s`` + 1 s) from the end of the headers: a body still arriving then is
  cut by closing the connection. The middleware answers a body it is reading at ``body_timeout_s`` with a
  JSON 408 first; the backstop is for bodies nobody reads (a request refused before its body, 401 / 413 /
  429, whose client keeps dripping it).

Only the httptools protocol (a dependency) gets it; under h11 (``http_parser``) only the head limits apply.
"""

from __future__ import annotations

import asyncio

from .head_limits import MAX_HEADER_BYTES, MAX_URL_BYTES, HttpToolsHeadLimits

_BACKSTOP_GRACE_S = 1.0  # after body_timeout_s: the middleware's JSON 408 goes first


class DeadlineProtocol(HttpToolsHeadLimits):
    """uvicorn's httptools protocol with a header deadline and a body backstop (see the module), the head
    limits (``lnserve.app.http.head_limits``), telling requests when their connection is lost
    (``lnserve.app.http.disconnects``)."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._begun = False  # bytes of a request have arrived (so a 408 answers something)
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True
        if self._header_timer is None:  # a later request on a kept-alive connection
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def on_headers_complete(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._begun = False
        self._body_timer = self.loop.call_later(self.body_timeout_s + _BACKSTOP_GRACE_S, self._body_late)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def refuse(self, status: int, code: str, message: str) -> None:
        self._cancel_timers()  # answered: no 408 nor backstop after it
        super().refuse(status, code, message)

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._begun:
            message = (
                f"the request headers did not arrive within {self.header_timeout_s:g} s (header_timeout_s)"
            )
            self.refuse(408, "request_timeout", message)
        else:
            self.transport.close()

    def _body_late(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(
    *,
    header_timeout_s: float,
    body_timeout_s: float,
    max_url_bytes: int = MAX_URL_BYTES,
    max_header_bytes: int = MAX_HEADER_BYTES,
) -> type[DeadlineProtocol]:
    """The protocol class for uvicorn's ``http`` option, with these deadlines and head limits."""
    return type(
        "DeadlineProtocol",
        (DeadlineProtocol,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "max_url_bytes": max_url_bytes,
            "max_header_bytes": max_header_bytes,
        },
    )
