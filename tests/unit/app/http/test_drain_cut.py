"""The drain deadline's cut of a request (``Lifecycle.cut_at_drain_deadline``): asyncio.timeout's behaviour,
armed only when a drain begins."""

from __future__ import annotations

import asyncio

import pytest

from lnserve.app.http.lifecycle import Lifecycle


def test_a_request_in_flight_is_cut_at_the_drain_deadline() -> None:
    async def main() -> None:
        lifecycle = Lifecycle()
        cut_seen = asyncio.Event()

        async def request() -> None:
            with lifecycle.cut_at_drain_deadline():
                cut_seen.set()
                await asyncio.sleep(60)
            raise AssertionError("not cut")

        task = asyncio.ensure_future(request())
        await cut_seen.wait()
        lifecycle.begin_drain(asyncio.get_running_loop().time() + 0.05)
        with pytest.raises(TimeoutError):
            await task
        assert task.cancelling() == 0  # the cut's cancel was taken back
        assert not lifecycle._cuts

    asyncio.run(main())


def test_a_cut_entered_during_the_drain_is_armed_at_once() -> None:
    async def main() -> None:
        lifecycle = Lifecycle()
        lifecycle.begin_drain(asyncio.get_running_loop().time() + 0.05)
        with pytest.raises(TimeoutError), lifecycle.cut_at_drain_deadline() as cut:
            await asyncio.sleep(60)
        assert cut.expired()

    asyncio.run(main())


def test_without_a_drain_nothing_is_cut_and_other_cancels_pass_through() -> None:
    async def main() -> None:
        lifecycle = Lifecycle()
        with lifecycle.cut_at_drain_deadline() as cut:
            await asyncio.sleep(0.01)
        assert not cut.expired() and not lifecycle._cuts

        async def request() -> None:
            with lifecycle.cut_at_drain_deadline():
                await asyncio.sleep(60)

        task = asyncio.ensure_future(request())
        await asyncio.sleep(0.01)
        task.cancel()  # the server's own cancel, not the drain's: stays a cancellation
        with pytest.raises(asyncio.CancelledError):
            await task
        # a request that ends before the deadline leaves no timer behind
        with lifecycle.cut_at_drain_deadline() as cut:
            lifecycle.begin_drain(asyncio.get_running_loop().time() + 0.05)
        await asyncio.sleep(0.1)
        assert not cut.expired()

    asyncio.run(main())
