"""Reading a request's body before it is admitted: bounded in size, in time and per client.

A request takes a slot of ``max_inflight`` only once its whole body has arrived (the middleware reads it
here, then replays it to the app). So clients that send headers and a byte of a body, then go quiet, hold
no slot: 32 of them used to make every other request 429 ``overloaded`` for as long as they stayed. What
they can still hold is bounded here:

* time: the body must arrive within ``body_timeout_s`` of the headers, else 408 ``request_timeout``;
* number: one client address (an IPv6 /64) may have at most ``max_body_reads_per_client`` requests whose
  body is still arriving (the server waits for its bytes); one more is 429 ``overloaded``. A body that
  arrives with its headers (nearly every request) is there at the first read and never takes one;
* size: ``max_body_bytes`` (413 ``request_too_large``), counted as it arrives (chunked bodies too).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope

from lnserve.app.errors import OverloadedError, RequestTimeoutError, RequestTooLargeError


def client_key(scope: Scope) -> str:
    """Whom a request counts against: its client address; IPv6 addresses by their /64 (one host's block)."""
    client = scope.get("client")
    host = str(client[0]) if client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
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
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        """``on_change(n)``: told the number of bodies arriving whenever it changes (a metrics gauge)."""
        self.max_bytes, self.timeout_s, self.per_client = max_bytes, timeout_s, per_client
        self._reading: Counter[str] = Counter()
        self._on_change = on_change
        self.arriving = 0

    async def read(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body.

        Raises:
            RequestTimeoutError: it did not arrive within ``timeout_s``.
            RequestTooLargeError: it is larger than ``max_bytes``.
            OverloadedError: its client already has ``per_client`` bodies arriving.
            ClientDisconnect: the client went away.
        """
        chunks: list[bytes] = []
        size = 0
        with self._slot(scope) as take:
            try:
                async with asyncio.timeout(self.timeout_s):
                    while True:
                        message: Message = await self._next(receive, take)
                        if message["type"] == "http.disconnect":
                            raise ClientDisconnect()
                        chunk = message.get("body", b"")
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise RequestTooLargeError(too_large(self.max_bytes))
                        chunks.append(chunk)
                        if not message.get("more_body", False):
                            return b"".join(chunks)
            except TimeoutError:
                raise RequestTimeoutError(
                    f"the request body did not arrive within {self.timeout_s:g} s (body_timeout_s); "
                    f"{size} bytes came"
                ) from None

    @staticmethod
    async def _next(receive: Receive, take: Callable[[], None]) -> Message:
        """The next message; a read that has to wait for the client first ``take``s a slot. (What has
        arrived is there at once: a body sent with its headers never waits, so never takes one.)"""
        pending = asyncio.ensure_future(receive())
        await asyncio.sleep(0)  # the read runs up to its first wait
        if not pending.done():
            try:
                take()
            except BaseException:
                pending.cancel()
                raise
        return await pending

    @contextmanager
    def _slot(self, scope: Scope) -> Iterator[Callable[[], None]]:
        """``take()`` marks the body as still arriving (once); the mark is released on exit."""
        key = client_key(scope)
        taken = False

        def take() -> None:
            nonlocal taken
            if taken:
                return
            if self.per_client and self._reading[key] >= self.per_client:
                raise OverloadedError(
                    f"{self._reading[key]} requests from this client are still sending their bodies "
                    f"(max_body_reads_per_client {self.per_client}); retry later"
                )
            self._reading[key] += 1
            self._count(+1)
            taken = True

        try:
            yield take
        finally:
            if taken:
                self._reading[key] -= 1
                if not self._reading[key]:
                    del self._reading[key]
                self._count(-1)

    def _count(self, delta: int) -> None:
        self.arriving += delta
        if self._on_change is not None:
            self._on_change(self.arriving)


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
