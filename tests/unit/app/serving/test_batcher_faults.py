"""MicroBatcher faults: no caller may hang, whatever the batch function returns or wherever it fails.

The batch functions here are real (trivial) ones that misbehave the way a buggy or failing model would;
every wait has a deadline, so a hang is a failure, not a stuck test run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Hashable
from typing import Any, TypeVar

import pytest

from lnserve.app.http.errors import http_status
from lnserve.app.serving.batcher import BatchLimits, MicroBatcher
from lnserve.errors import LnserveError

T = TypeVar("T")
DEADLINE_S = 10.0  # far beyond any batch here: reaching it means a future was never resolved


async def _within_deadline(work: Awaitable[T]) -> T:
    return await asyncio.wait_for(work, DEADLINE_S)


def _gather(b: MicroBatcher, key: Hashable, n: int) -> Awaitable[list[Any]]:
    """``n`` concurrent one-row jobs; exceptions are returned, not raised."""
    jobs = [b.submit(key, [i], rows=1, tokens=1) for i in range(n)]
    return asyncio.gather(*jobs, return_exceptions=True)


def _status(result: Any) -> int | None:
    """The HTTP status an error result maps to (None for a result)."""
    return http_status(result) if isinstance(result, LnserveError) else None


def _doubles(payloads: list[Any]) -> list[Any]:
    return [[2 * x for x in p] for p in payloads]


@pytest.mark.parametrize(
    ("name", "run_batch"),
    [
        ("too few", lambda key, payloads: _doubles(payloads)[:-1]),
        ("too many", lambda key, payloads: [*_doubles(payloads), [0]]),
        ("none", lambda key, payloads: None),
    ],
)
def test_a_wrong_number_of_results_fails_the_group_and_nobody_hangs(name: str, run_batch: Any) -> None:
    async def main() -> None:
        b = MicroBatcher(name="m", limits=BatchLimits(max_wait_s=0.05))
        b.start(run_batch)
        results = await _within_deadline(_gather(b, "k", 4))
        assert all(_status(r) == 500 for r in results), (name, results)  # BatchError: internal_error
        assert "results for 4 jobs" in str(results[0])
        b.start(lambda key, payloads: _doubles(payloads))  # the collector survived: a good batch still runs
        assert await _within_deadline(b.submit("k", [3], rows=1, tokens=1)) == [6]
        await _within_deadline(b.close())

    asyncio.run(main())


def test_a_failing_group_does_not_leave_other_groups_hanging() -> None:
    """Groups after a malformed one in the same batch still get their results."""

    def run_batch(key: Hashable, payloads: list[Any]) -> list[Any]:
        return [] if key == "bad" else _doubles(payloads)

    async def main() -> None:
        b = MicroBatcher(name="m", limits=BatchLimits(max_wait_s=0.05))
        b.start(run_batch)
        bad, good = await _within_deadline(asyncio.gather(_gather(b, "bad", 2), _gather(b, "good", 2)))
        assert all(_status(r) == 500 for r in bad), bad
        assert good == [[0], [2]]
        await _within_deadline(b.close())

    asyncio.run(main())


def test_an_exception_as_a_result_fails_only_its_own_job() -> None:
    def run_batch(key: Hashable, payloads: list[Any]) -> list[Any]:
        return [ValueError(f"row {p[0]}") if p[0] == 1 else [2 * p[0]] for p in payloads]

    async def main() -> None:
        b = MicroBatcher(name="m", limits=BatchLimits(max_wait_s=0.05))
        b.start(run_batch)
        first, second, third = (asyncio.ensure_future(b.submit("k", [i], rows=1, tokens=1)) for i in range(3))
        with pytest.raises(ValueError, match="row 1"):  # raised to its caller, not handed over as a value
            await _within_deadline(second)
        assert await _within_deadline(first) == [0] and await _within_deadline(third) == [4]
        await _within_deadline(b.close())

    asyncio.run(main())


class _Observer:
    """A metrics observer that raises once the collector takes jobs off the queue (depth going down)."""

    def __init__(self) -> None:
        self.rows = 0

    def depth(self, model: str, rows: int) -> None:
        if rows < self.rows:
            raise RuntimeError("observer broke")
        self.rows = rows

    def batch(self, model: str, rows: int, tokens: int, waits: list[float]) -> None: ...

    def rejected(self, model: str) -> None: ...

    def cancelled(self, model: str) -> None: ...

    def expired(self, model: str) -> None: ...


def test_a_dead_collector_fails_queued_jobs_and_refuses_new_work_with_503() -> None:
    async def main() -> None:
        b = MicroBatcher(name="m", limits=BatchLimits(max_wait_s=0.05), observer=_Observer())
        b.start(lambda key, payloads: _doubles(payloads))
        results = await _within_deadline(_gather(b, "k", 3))
        assert all(_status(r) == 503 for r in results), results
        assert all(getattr(r, "code", None) == "model_unavailable" for r in results)
        with pytest.raises(Exception) as refused:
            await _within_deadline(b.submit("k", [1], rows=1, tokens=1))
        assert _status(refused.value) == 503, refused.value
        assert "observer broke" in str(refused.value)
        await _within_deadline(b.close())

    asyncio.run(main())


def test_a_cancelled_collector_reports_the_failure_to_its_owner() -> None:
    async def main() -> None:
        started, gate = threading.Event(), threading.Event()
        reasons: list[str] = []

        def run_batch(key: Hashable, payloads: list[Any]) -> list[Any]:
            started.set()
            gate.wait(DEADLINE_S)
            return _doubles(payloads)

        b = MicroBatcher(name="m", limits=BatchLimits(max_wait_s=0.0), on_failure=reasons.append)
        b.start(run_batch)
        running = asyncio.ensure_future(b.submit("k", [1], rows=1, tokens=1))
        assert await asyncio.to_thread(started.wait, DEADLINE_S)  # its batch now holds the worker thread
        queued = asyncio.ensure_future(b.submit("k", [2], rows=1, tokens=1))
        await asyncio.sleep(0)
        assert b.failure is None and b.depth == 1
        b._task.cancel()  # type: ignore[union-attr]  # the collector dies (as on an unexpected cancel)
        results = await _within_deadline(asyncio.gather(running, queued, return_exceptions=True))
        gate.set()
        assert [_status(r) for r in results] == [500, 503], results
        assert reasons == ["the batch collector was cancelled"] and b.failure == reasons[0]
        await _within_deadline(b.close())

    asyncio.run(main())
