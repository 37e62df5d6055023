"""Refusals at the HTTP protocol layer, before a request reaches the app: our JSON error, then a lingering
close.

uvicorn answers what its parser refuses with ``text/plain`` "Invalid HTTP request received." and closes the
socket at once. Here every such refusal (a malformed request, a request target or headers over their limit,
headers that arrive too late) is the service's one error body (``{"error": {"code", "message"}}``, codes in
``lnserve.app.http.errors.HTTP_STATUSES``) with ``Connection: close``. The connection is then half-closed
and what the client still sends is discarded for a moment (``LINGER_S``, at most ``LINGER_BYTES``) before
it is closed: closing a socket with unread bytes in it resets the connection, and a client still sending
its oversized headers would lose the answer to the reset.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging

log = logging.getLogger("lnserve.http")

LINGER_S = 2.0  # how long a refused connection is drained before it is closed
LINGER_BYTES = 256 << 10  # past this much discarded input, closed at once (a client that will not stop)
_MESSAGE_CHARS = 200  # parser messages may quote hostile input: bounded


def raw_error_response(status: int, code: str, message: str) -> bytes:
    """The whole HTTP/1.1 response: our JSON error body, ``Connection: close``."""
    body = json.dumps({"error": {"code": code, "message": message[:_MESSAGE_CHARS]}}).encode()
    phrase = http.HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class Refusals:
    """Mixed into uvicorn's protocols: ``refuse`` answers once and closes with a linger; ``discarding``
    says the connection was refused, so whatever still arrives is dropped unparsed."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def _init_refusals(self) -> None:
        self.refused = False
        self._discarded = 0
        self._linger: asyncio.TimerHandle | None = None

    def refuse(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` with our JSON error and close the connection (after a short linger)."""
        if self.refused:
            return
        self.refused = True
        log.info("refused a request at the HTTP layer: %d %s: %s", status, code, message[:_MESSAGE_CHARS])
        if self.transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)  # uvicorn's current request on the connection
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()  # an answer is being sent: ours cannot go between its bytes
            return
        self.transport.write(raw_error_response(status, code, message))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def discarding(self, data: bytes) -> bool:
        """True when the connection was refused: ``data`` is dropped (and the connection closed once too
        much has come)."""
        if not self.refused:
            return False
        self._discarded += len(data)
        if self._discarded > LINGER_BYTES:
            self.transport.close()
        return True

    def _stop_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def connection_lost(self, exc: Exception | None) -> None:
        """The linger's timer goes with the connection (then uvicorn's own, next in the protocol's bases)."""
        self._stop_linger()
        super().connection_lost(exc)  # type: ignore[misc]
