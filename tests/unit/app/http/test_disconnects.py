"""A client that goes away frees its queue room at once: through the connection's ``ConnectionLoss`` (our
uvicorn protocol) without a watcher task, and through the watcher of ``receive()`` under other servers.
Real ``MicroBatcher``s; the worker is held by a gate so that the job stays queued (no timing windows)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any

import pytest
from starlette.requests import Request
from starlette.types import Message

from lnserve.app.http.disconnects import EXTENSION, ConnectionLoss, cancel_on_disconnect
from lnserve.app.serving.batcher import BatchLimits, MicroBatcher
from lnserve.app.serving.errors import ClientClosedError
from tests.support.poll import wait_until_async


class Gated:
    """run_batch that doubles numbers once its gate opens; counts the calls that began."""

    def __init__(self) -> None:
        self.gate, self.started = threading.Event(), 0

    def __call__(self, key: Hashable, payloads: list[Any]) -> list[Any]:
        self.started += 1
        assert self.gate.wait(60), "the test never opened the gate"
        return [[2 * x for x in p] for p in payloads]


async def _queued_behind_a_busy_worker() -> tuple[MicroBatcher, Gated, asyncio.Future[Any]]:
    run = Gated()
    batcher = MicroBatcher(name="m", limits=BatchLimits(max_batch_size=1))
    batcher.start(run)
    blocker = asyncio.ensure_future(batcher.submit("k", [1], rows=1, tokens=1))
    await wait_until_async(lambda: run.started == 1, "the worker to be busy")
    return batcher, run, blocker


def _request(loss: ConnectionLoss | None = None, receive: Any = None) -> Request:
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/encode", "headers": []}
    if loss is not None:
        scope["extensions"] = {EXTENSION: loss}
    return Request(scope, receive) if receive is not None else Request(scope)


def test_a_lost_connection_withdraws_the_queued_job_and_frees_its_room() -> None:
    async def main() -> None:
        batcher, run, blocker = await _queued_behind_a_busy_worker()
        loss = ConnectionLoss()
        waiting = asyncio.ensure_future(
            cancel_on_disconnect(_request(loss), batcher.submit("k", [2], rows=1, tokens=1))
        )
        await wait_until_async(lambda: batcher.depth == 1, "the job to queue")
        loss.signal()
        with pytest.raises(ClientClosedError):
            await waiting
        assert batcher.depth == 0  # withdrawn at once, while the worker is still busy
        run.gate.set()
        assert await blocker == [2]
        # the connection is gone: later work on it is refused before it queues (and never runs)
        work = batcher.submit("k", [3], rows=1, tokens=1)
        with pytest.raises(ClientClosedError):
            await cancel_on_disconnect(_request(loss), work)
        assert batcher.depth == 0
        await batcher.close()

    asyncio.run(main())


def test_work_that_finishes_first_is_returned_and_leaves_nothing_registered() -> None:
    async def main() -> None:
        run = Gated()
        run.gate.set()
        batcher = MicroBatcher(name="m", limits=BatchLimits())
        batcher.start(run)
        loss = ConnectionLoss()
        assert await cancel_on_disconnect(_request(loss), batcher.submit("k", [4], rows=1, tokens=1)) == [8]
        assert not loss._waiters
        loss.signal()  # a loss after the answer cancels nothing
        await asyncio.sleep(0)
        await batcher.close()

    asyncio.run(main())


def test_a_request_cancelled_by_someone_else_too_stays_cancelled() -> None:
    # the drain deadline (or the server) cancelling the request is not a client that went away
    async def main() -> None:
        batcher, run, blocker = await _queued_behind_a_busy_worker()
        loss = ConnectionLoss()
        waiting = asyncio.ensure_future(
            cancel_on_disconnect(_request(loss), batcher.submit("k", [2], rows=1, tokens=1))
        )
        await wait_until_async(lambda: batcher.depth == 1, "the job to queue")
        waiting.cancel()
        loss.signal()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert batcher.depth == 0
        run.gate.set()
        await blocker
        await batcher.close()

    asyncio.run(main())


def test_without_a_connection_loss_a_watcher_of_receive_frees_the_room() -> None:
    # any other ASGI server (uvicorn's h11, Ray Serve's proxy): the next message is http.disconnect
    async def main() -> None:
        batcher, run, blocker = await _queued_behind_a_busy_worker()
        gone = asyncio.Event()

        async def receive() -> Message:
            await gone.wait()
            return {"type": "http.disconnect"}

        waiting = asyncio.ensure_future(
            cancel_on_disconnect(_request(receive=receive), batcher.submit("k", [2], rows=1, tokens=1))
        )
        await wait_until_async(lambda: batcher.depth == 1, "the job to queue")
        gone.set()
        with pytest.raises(ClientClosedError):
            await waiting
        assert batcher.depth == 0
        run.gate.set()
        await blocker
        await batcher.close()

    asyncio.run(main())
