"""Withdrawing a request's work when its client goes away, without a task per request to watch for it.

A client that disconnects while its sentences wait in a model's queue must free their room at once (the
batcher withdraws a job whose caller is cancelled). ``cancel_on_disconnect`` used to run the work and a
watcher of ``receive()`` as two extra tasks per request and wait for the first to finish (measured: with
the drain timer, ~13% of the event loop's time per ``/encode`` request under load,
benchmarks/http_load.py). Our uvicorn protocol (``LossSignallingProtocol``, under ``DeadlineProtocol``)
now tells the request itself: it puts the connection's ``ConnectionLoss`` into each request's scope
(``scope["extensions"]["lnserve.connection_loss"]``) and, when the connection is lost, cancels the tasks
registered there. The work runs in the request's own task. Under any other ASGI server (uvicorn's h11
fallback, Ray Serve's proxy, an in-process client) the scope has no such entry and the watcher task stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..serving.errors import ClientClosedError

T = TypeVar("T")
EXTENSION = "lnserve.connection_loss"
_GONE = "client disconnected before its result was ready"


class _Waiter:
    """One task waiting for work on the connection; cancelled (once) if the connection is lost."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task, self.fired = task, False

    def fire(self) -> None:
        self.fired = True
        self.task.cancel()


class ConnectionLoss:
    """One connection's loss, told to the requests that wait on it."""

    __slots__ = ("_waiters", "lost")

    def __init__(self) -> None:
        self.lost = False
        self._waiters: set[_Waiter] = set()

    def add(self, waiter: _Waiter) -> None:
        self._waiters.add(waiter)

    def discard(self, waiter: _Waiter) -> None:
        self._waiters.discard(waiter)

    def signal(self) -> None:
        """The connection is gone: cancel every task waiting on it."""
        self.lost = True
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            waiter.fire()


def connection_loss(scope: Scope) -> ConnectionLoss | None:
    """The request's connection's ``ConnectionLoss``, where the server provides one."""
    extensions = scope.get("extensions")
    return extensions.get(EXTENSION) if extensions else None


class LossSignallingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a ``ConnectionLoss`` per connection in each request's scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.loss = ConnectionLoss()
        super().connection_made(transport)

    def on_headers_complete(self) -> None:
        # the object itself, not a dict of it as the ASGI typing has extension values: one lookup less
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[EXTENSION] = self.loss
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.loss.signal()


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first; then cancel it (freeing its queue slot) and
    raise ``ClientClosedError``."""
    loss = connection_loss(request.scope)
    if loss is None:
        return await _watched(request, work)
    if loss.lost:
        if asyncio.iscoroutine(work):
            work.close()
        raise ClientClosedError(_GONE)
    task = asyncio.current_task()
    assert task is not None
    waiter, cancelling = _Waiter(task), task.cancelling()
    loss.add(waiter)
    try:
        return await work
    except asyncio.CancelledError:
        # cancelled by the loss alone (not also by the drain deadline or the server): the client is gone
        if waiter.fired and task.uncancel() <= cancelling:
            raise ClientClosedError(_GONE) from None
        raise
    finally:
        loss.discard(waiter)


async def _watched(request: Request, work: Awaitable[T]) -> T:
    """``cancel_on_disconnect`` for a server without ``ConnectionLoss``: a task watches ``receive()``. The
    body has been read by then, so the next ASGI message can only be ``http.disconnect``."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the request itself was cancelled (drain deadline): so is its work
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise ClientClosedError(_GONE)
    return task.result()
