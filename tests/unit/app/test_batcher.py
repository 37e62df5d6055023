"""MicroBatcher with a real (trivial) run_batch: gathering, order, limits, backpressure, disconnects."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any

import pytest

from lnserve.app.batcher import BatchLimits, MicroBatcher, QueueFullError, ShuttingDownError


class Recorder:
    """run_batch that doubles numbers, remembers each call and can be held closed by a gate."""

    def __init__(self) -> None:
        self.calls: list[tuple[Hashable, list[Any]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.thread_names: set[str] = set()

    def __call__(self, key: Hashable, payloads: list[Any]) -> list[Any]:
        self.gate.wait(5)
        self.thread_names.add(threading.current_thread().name)
        self.calls.append((key, payloads))
        if key == "boom":
            raise RuntimeError("boom")
        return [[2 * x for x in p] for p in payloads]


def _batcher(rec: Recorder, **limits: Any) -> MicroBatcher:
    b = MicroBatcher(name="m", limits=BatchLimits(**limits))
    b.start(rec)
    return b


def test_concurrent_jobs_share_a_batch_and_keep_their_order() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.05)
        results = await asyncio.gather(*(b.submit("k", [i, i + 1], rows=2, tokens=2) for i in range(5)))
        assert results == [[2 * i, 2 * i + 2] for i in range(5)]
        assert len(rec.calls) == 1 and len(rec.calls[0][1]) == 5
        assert rec.thread_names == {"lnserve-m_0"}
        await b.close()

    asyncio.run(main())


def test_batch_limits_and_keys_split_batches() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.05, max_batch_size=4, max_batch_tokens=100)
        jobs = [b.submit("a" if i % 2 else "b", [i], rows=1, tokens=1) for i in range(8)]
        assert await asyncio.gather(*jobs) == [[2 * i] for i in range(8)]
        assert all(sum(len(p) for p in payloads) <= 4 for _, payloads in rec.calls)
        assert all(len({k}) == 1 for k, _ in rec.calls)  # one key per call
        await b.close()

    asyncio.run(main())


def test_queue_full_raises_and_a_lone_large_job_is_admitted() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.2, max_queue=3)
        big = asyncio.ensure_future(b.submit("k", [1, 2, 3, 4, 5], rows=5, tokens=5))
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError) as info:
            await b.submit("k", [9], rows=1, tokens=1)
        assert info.value.http_status == 429 and info.value.retry_after == 1
        assert await big == [2, 4, 6, 8, 10]
        await b.close()

    asyncio.run(main())


def test_cancelled_job_leaves_the_queue_at_once() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.2, max_queue=1)
        gone = asyncio.ensure_future(b.submit("k", [1], rows=1, tokens=1))
        await asyncio.sleep(0.01)
        assert b.depth == 1
        gone.cancel()
        await asyncio.sleep(0)
        assert b.depth == 0
        assert await b.submit("k", [3], rows=1, tokens=1) == [6]  # room again
        assert [p for _, ps in rec.calls for p in ps] == [[3]]  # the withdrawn job never ran
        await b.close()

    asyncio.run(main())


def test_failing_group_fails_only_its_jobs_and_the_collector_survives() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.05)
        ok, bad = await asyncio.gather(
            b.submit("k", [1], rows=1, tokens=1),
            b.submit("boom", [2], rows=1, tokens=1),
            return_exceptions=True,
        )
        assert ok == [2] and isinstance(bad, RuntimeError)
        assert await b.submit("k", [5], rows=1, tokens=1) == [10]
        await b.close()

    asyncio.run(main())


def test_close_drains_queued_jobs_then_refuses_new_ones() -> None:
    async def main() -> None:
        rec = Recorder()
        rec.gate.clear()
        b = _batcher(rec, max_wait_s=0.0, max_batch_size=1)
        jobs = [asyncio.ensure_future(b.submit("k", [i], rows=1, tokens=1)) for i in range(3)]
        await asyncio.sleep(0.01)
        closing = asyncio.ensure_future(b.close())
        await asyncio.sleep(0.01)
        with pytest.raises(ShuttingDownError):
            await b.submit("k", [9], rows=1, tokens=1)
        rec.gate.set()
        await closing
        assert [j.result() for j in jobs] == [[0], [2], [4]]

    asyncio.run(main())
