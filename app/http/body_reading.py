"""Reading a request's body before it is admitted: bounded in size, in time and per client.

A request takes a slot of ``max_inflight`` only once its whole body has arrived (the middleware reads it
here, then replays it to the app). So clients that send headers and a byte of a body, then go quiet, hold
no slot: 32 of them used to make every other request 429 ``overloaded`` for as long as they stayed. What
they can still hold is bounded here:

* time: the body must arrive within ``body_timeout_s`` of the headers, else 408 ``request_timeout``;
* number: one client address (an IPv6 /64) may have at most ``max_body_reads_per_client`` requests whose
  body is still arriving (the server waits for its bytes); one more is 429 ``overloaded`` unless its body
  is there whole already (or arrives whole within ``grace_s``, or the client's other bodies have arrived
  meanwhile). A body that arrives with its headers (nearly every request) is read at once. Behind Ray
  Serve's proxy no body is ever there at once (each read is a call to the proxy): the grace is what lets
  concurrent clients behind one address through there;
* size: ``max_body_bytes`` (413 ``request_too_large``), counted as it arrives (chunked bodies too).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope

from lnserve.app.http.errors import RequestTimeoutError
from lnserve.app.serving.errors import OverloadedError, RequestTooLargeError


def client_key(scope: Scope) -> str:
    """Whom a request counts against: its client address; IPv6 addresses by their /64 (one host's block)."""
    client = scope.get("client")
    host = str(client[0]) if client else ""
    if ":" not in host:  # IPv4 (or a unix socket's name): as is, without the cost of parsing it
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return host


class BodyReader:
    """Reads whole bodies within the limits; counts, per client, the bodies still arriving."""

    def __init__(
        self,
        *,
        max_bytes: int,
        timeout_s: float,
        per_client: int,
        grace_s: float = 0.0,
    ) -> None:
        self.max_bytes, self.timeout_s, self.per_client = max_bytes, timeout_s, per_client
        self.grace_s = grace_s  # how long a body of a client at its bound may take to arrive whole
        self._reading: Counter[str] = Counter()
        self.arriving = 0  # bodies arriving now (the lnserve_bodies_arriving gauge reads it)

    async def read(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body.

        Raises:
            RequestTimeoutError: it did not arrive within ``timeout_s``.
            RequestTooLargeError: it is larger than ``max_bytes``.
            OverloadedError: its client already has ``per_client`` bodies arriving and this one is not
                here whole yet.
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
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                message: Message = await (self._here_whole(receive, key) if crowded else receive())
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_bytes:
                    raise RequestTooLargeError(too_large(self.max_bytes))
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        except asyncio.CancelledError:
            if not expired:
                raise
            task.uncancel()
            raise RequestTimeoutError(
                f"the request body did not arrive within {self.timeout_s:g} s (body_timeout_s); "
                f"{size} bytes came"
            ) from None
        finally:
            timer.cancel()
            self._leave(key)

    async def _here_whole(self, receive: Receive, key: str) -> Message:
        """The whole body as one message, if it is here at once or arrives within ``grace_s``, or once the
        client's other bodies have arrived meanwhile (it is no longer at its bound); else OverloadedError."""
        chunks: list[bytes] = []
        size = 0

        async def whole() -> Message:
            nonlocal size
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return message  # the disconnect, for the caller
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_bytes:
                    raise RequestTooLargeError(too_large(self.max_bytes))
                if not message.get("more_body", False):
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        pending = asyncio.ensure_future(whole())
        try:
            if self.grace_s > 0:
                await asyncio.wait({pending}, timeout=self.grace_s)
            else:
                await asyncio.sleep(0)  # the read runs up to its first wait, if it has one
            if pending.done():
                return pending.result()
            others = self._reading[key] - 1
            if others < self.per_client:  # the client's other bodies arrived meanwhile: read on
                return await pending
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
