"""MicroBatcher with a real (trivial) run_batch: gathering, order, limits, backpressure, disconnects.

Deterministic on a busy machine: no test depends on a batching window. A gate holds the worker busy while
jobs queue behind it, and the tests poll the queue depth (with a deadline) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from lnserve.app.http.errors import http_status
from lnserve.app.serving.batcher import BatchLimits, MicroBatcher
from lnserve.app.serving.errors import QueueFullError, ShuttingDownError
from tests.support.poll import wait_until_async


class Recorder:
    """run_batch that doubles numbers, remembers each call and can be held closed by a gate.

    ``started`` counts calls that have begun (set before the gate), so a test knows the worker is busy
    without sleeping; the gate only opens when the test says so.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Hashable, list[Any]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = 0
        self.thread_names: set[str] = set()

    def __call__(self, key: Hashable, payloads: list[Any]) -> list[Any]:
        self.started += 1
        assert self.gate.wait(60), "the test never opened the gate"
        self.thread_names.add(threading.current_thread().name)
        self.calls.append((key, payloads))
        if key == "boom":
            raise RuntimeError("boom")
        return [[2 * x for x in p] for p in payloads]


def _batcher(rec: Recorder, **limits: Any) -> MicroBatcher:
    b = MicroBatcher(name="m", limits=BatchLimits(**limits))
    b.start(rec)
    return b


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    await wait_until_async(condition, "the batcher", timeout=timeout)


async def _hold_worker(b: MicroBatcher, rec: Recorder) -> asyncio.Future[Any]:
    """Run a batch that blocks in the worker until ``rec.gate`` opens: later jobs queue up behind it."""
    rec.gate.clear()
    blocker = asyncio.ensure_future(b.submit("blocker", [100], rows=1, tokens=1))
    await _until(lambda: rec.started == 1 and b.depth == 0)
    return blocker


def test_jobs_queued_while_the_model_runs_share_the_next_batch_in_order() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0)
        blocker = await _hold_worker(b, rec)
        jobs = [asyncio.ensure_future(b.submit("k", [i, i + 1], rows=2, tokens=2)) for i in range(5)]
        await _until(lambda: b.depth == 10)
        rec.gate.set()
        assert await blocker == [200]
        assert await asyncio.gather(*jobs) == [[2 * i, 2 * i + 2] for i in range(5)]
        assert [(k, len(p)) for k, p in rec.calls] == [("blocker", 1), ("k", 5)]  # one batch for all five
        assert rec.thread_names == {"lnserve-m_0"}
        await b.close()

    asyncio.run(main())


def test_batch_limits_and_keys_split_batches() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0, max_batch_size=4, max_batch_tokens=100)
        blocker = await _hold_worker(b, rec)
        jobs = [
            asyncio.ensure_future(b.submit("a" if i % 2 else "b", [i], rows=1, tokens=1)) for i in range(8)
        ]
        await _until(lambda: b.depth == 8)
        rec.gate.set()
        await blocker
        assert await asyncio.gather(*jobs) == [[2 * i] for i in range(8)]
        # two batches of 4 jobs (max_batch_size), each split into one call per key, in arrival order
        assert rec.calls[1:] == [
            ("b", [[0], [2]]),
            ("a", [[1], [3]]),
            ("b", [[4], [6]]),
            ("a", [[5], [7]]),
        ]
        await b.close()

    asyncio.run(main())


def test_queue_full_raises_and_a_lone_large_job_is_admitted() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0, max_queue=3)
        blocker = await _hold_worker(b, rec)
        big = asyncio.ensure_future(b.submit("k", [1, 2, 3, 4, 5], rows=5, tokens=5))  # alone: admitted
        await _until(lambda: b.depth == 5)
        with pytest.raises(QueueFullError) as info:
            await b.submit("k", [9], rows=1, tokens=1)
        assert http_status(info.value) == 429 and info.value.retry_after == 1
        rec.gate.set()
        await blocker
        assert await big == [2, 4, 6, 8, 10]
        await b.close()

    asyncio.run(main())


def test_cancelled_job_leaves_the_queue_at_once() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0, max_queue=1)
        blocker = await _hold_worker(b, rec)
        gone = asyncio.ensure_future(b.submit("k", [1], rows=1, tokens=1))
        await _until(lambda: b.depth == 1)
        gone.cancel()
        await _until(lambda: b.depth == 0)
        kept = asyncio.ensure_future(b.submit("k", [3], rows=1, tokens=1))  # room again
        await _until(lambda: b.depth == 1)
        rec.gate.set()
        await blocker
        assert await kept == [6]
        assert [p for _, ps in rec.calls[1:] for p in ps] == [[3]]  # the withdrawn job never ran
        await b.close()

    asyncio.run(main())


def test_failing_group_fails_only_its_jobs_and_the_collector_survives() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0)
        blocker = await _hold_worker(b, rec)
        ok = asyncio.ensure_future(b.submit("k", [1], rows=1, tokens=1))
        bad = asyncio.ensure_future(b.submit("boom", [2], rows=1, tokens=1))
        await _until(lambda: b.depth == 2)  # both in the next batch, as two groups
        rec.gate.set()
        await blocker
        assert await ok == [2]
        with pytest.raises(RuntimeError, match="boom"):
            await bad
        assert await b.submit("k", [5], rows=1, tokens=1) == [10]
        await b.close()

    asyncio.run(main())


def test_close_drains_queued_jobs_then_refuses_new_ones() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0, max_batch_size=1)
        rec.gate.clear()
        jobs = [asyncio.ensure_future(b.submit("k", [i], rows=1, tokens=1)) for i in range(3)]
        await _until(lambda: rec.started == 1 and b.depth == 2)
        closing = asyncio.ensure_future(b.close())
        await asyncio.sleep(0)  # tasks start in order: close() has now run up to its first await
        with pytest.raises(ShuttingDownError):
            await b.submit("k", [9], rows=1, tokens=1)
        rec.gate.set()
        await closing
        assert [j.result() for j in jobs] == [[0], [2], [4]]

    asyncio.run(main())
