"""Reading a request's body before it is admitted: bounded in size, in time, per client and in total.

A request takes a slot of ``max_inflight`` only once its whole body has arrived (the middleware reads it
here, then replays it to the app). So clients that send headers and a byte of a body, then go quiet, hold
no slot: 32 of them used to make every other request 429 ``overloaded`` for as long as they stayed. What
they can still hold is bounded here:

* time: the body must arrive within ``body_timeout_s`` of the headers, else 408 ``request_timeout``;
* number: one client address (an IPv6 /64; ``client_identity``: forwarded headers count only from
  ``trusted_proxies``) may have at most ``max_body_reads_per_client`` requests whose body is still
  arriving (the server waits for its bytes); one more is 429 ``overloaded`` unless its body arrives whole
  within ``grace_s`` (``body_arrival_grace_ms``), or the client's other bodies have arrived meanwhile. Many
  clients share an address (NAT, a company proxy): a neighbour's body that comes a segment after its
  headers, as over any real network, is not refused for the slow bodies beside it; a request that is still
  not whole when the grace ends is refused, so an address holds at most ``per_client`` bodies for longer
  than the grace. Behind Ray Serve's proxy no body is ever there at once (each read is a call to the proxy);
* size: ``max_body_bytes`` (413 ``request_too_large``), counted as it arrives (chunked bodies too);
* memory: the bytes of all bodies still arriving, over every client, at most ``max_total_bytes``
  (``max_body_bytes_arriving``); the body whose bytes would pass it is 429 ``overloaded``. Many addresses
  with slow bodies each (or bodies in their grace) cannot hold more memory than that.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope

from ..serving.errors import OverloadedError, RequestTooLargeError
from .client_identity import client_key
from .errors import RequestTimeoutError

__all__ = ["BodyReader", "has_body", "replay", "too_large"]


class BodyReader:
    """Reads whole bodies within the limits; counts, per client, the bodies still arriving, and in all their
    bytes."""

    def __init__(
        self,
        *,
        max_bytes: int,
        timeout_s: float,
        per_client: int,
        grace_s: float = 0.0,
        max_total_bytes: int = 0,
    ) -> None:
        """``max_total_bytes`` 0: no bound on the bytes of all bodies arriving."""
        self.max_bytes, self.timeout_s, self.per_client = max_bytes, timeout_s, per_client
        self.grace_s = grace_s  # how long a body of a client at its bound may take to arrive whole
        self.max_total_bytes = max_total_bytes
        self._reading: Counter[str] = Counter()
        self.arriving = 0  # bodies arriving now (the lnserve_bodies_arriving gauge reads it)
        self.bytes_arriving = 0  # their bytes read so far (lnserve_body_bytes_arriving)

    async def read(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body.

        Raises:
            RequestTimeoutError: it did not arrive within ``timeout_s``.
            RequestTooLargeError: it is larger than ``max_bytes``.
            OverloadedError: its client already has ``per_client`` bodies arriving and this one is not
                here whole within the grace, or its bytes would take the bodies arriving past
                ``max_total_bytes``.
            ClientDisconnect: the client went away.
        """
        key = client_key(scope)
        # A body that is here returns from the first receive() without waiting, so it counts only for
        # that instant: the count of a client is, in effect, its requests waiting for body bytes. The
        # costlier check of whether this body would wait is made only for a client at its bound.
        crowded = bool(self.per_client) and self._reading[key] >= self.per_client
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:  # cheaper than asyncio.timeout on this path, which every request takes
            nonlocal expired
            expired = True
            task.cancel()

        self._enter(key)
        timer = asyncio.get_running_loop().call_later(self.timeout_s, expire)
        body = _Arriving(self)
        try:
            if crowded:
                await self._within_grace(receive, key, body)
            else:
                await body.read_all(receive)
            return body.joined()
        except asyncio.CancelledError:
            if not expired:
                raise
            task.uncancel()
            raise RequestTimeoutError(
                f"the request body did not arrive within {self.timeout_s:g} s (body_timeout_s); "
                f"{body.size} bytes came"
            ) from None
        finally:
            timer.cancel()
            body.release()
            self._leave(key)

    async def _within_grace(self, receive: Receive, key: str, body: _Arriving) -> None:
        """Read the body if it is here whole at once or within ``grace_s``, or once the client's other
        bodies have arrived meanwhile (it is no longer at its bound); else OverloadedError."""
        pending = asyncio.ensure_future(body.read_all(receive))
        try:
            if self.grace_s > 0:
                await asyncio.wait({pending}, timeout=self.grace_s)
            else:
                await asyncio.sleep(0)  # the read runs up to its first wait, if it has one
            if pending.done():
                pending.result()  # its error, if it failed
                return
            others = self._reading[key] - 1
            if others < self.per_client:  # the client's other bodies arrived meanwhile: read on
                await pending
                return
        except BaseException:
            pending.cancel()
            raise
        pending.cancel()
        raise OverloadedError(
            f"{others} requests from this client are still sending their bodies "
            f"(max_body_reads_per_client {self.per_client}); retry later"
        )

    def _enter(self, key: str) -> None:
        self._reading[key] += 1
        self.arriving += 1

    def _leave(self, key: str) -> None:
        self._reading[key] -= 1
        if not self._reading[key]:
            del self._reading[key]
        self.arriving -= 1


class _Arriving:
    """One body as it arrives: its chunks, counted against its own size bound and the reader's total."""

    __slots__ = ("chunks", "held", "reader", "size")

    def __init__(self, reader: BodyReader) -> None:
        self.reader = reader
        self.chunks: list[bytes] = []
        self.size = 0  # bytes that came
        self.held = 0  # of them, counted in reader.bytes_arriving

    async def read_all(self, receive: Receive) -> None:
        """Receive until the body is whole."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk: bytes = message.get("body", b"")
            more = bool(message.get("more_body", False))
            self.add(chunk, more=more)
            if not more:
                return

    def add(self, chunk: bytes, *, more: bool = True) -> None:
        """``more``: the body goes on after ``chunk``. Its last chunk is never refused for the total: the
        body is whole, its bytes are already in memory, and refusing a complete small body while others
        trickle in would let a few slow clients turn every other request away."""
        reader = self.reader
        self.size += len(chunk)
        if self.size > reader.max_bytes:
            raise RequestTooLargeError(too_large(reader.max_bytes))
        if more and reader.max_total_bytes and reader.bytes_arriving + len(chunk) > reader.max_total_bytes:
            raise OverloadedError(
                f"the bodies still arriving hold {reader.bytes_arriving} bytes "
                f"(max_body_bytes_arriving {reader.max_total_bytes}); retry later"
            )
        reader.bytes_arriving += len(chunk)
        self.held += len(chunk)
        self.chunks.append(chunk)

    def joined(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)

    def release(self) -> None:
        """The body is read (or refused): its bytes no longer count as arriving."""
        self.reader.bytes_arriving -= self.held
        self.held = 0
        self.chunks = []


def has_body(scope: Scope) -> bool:
    """The request declares a body: a Content-Length other than 0, or a Transfer-Encoding."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def too_large(max_bytes: int) -> str:
    return f"request body exceeds {max_bytes} bytes (max_body_bytes)"


def replay(body: bytes, receive: Receive) -> Receive:
    """The app's ``receive``: the body read already, then the connection's own messages (disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
