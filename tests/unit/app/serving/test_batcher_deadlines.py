"""Queue deadlines in the real MicroBatcher: under overload (the worker held by a gate while jobs pile up),
a job that waited past its deadline is dropped when the next batch is formed: it gets DeadlineExceededError
(504) and the batch function never sees it; jobs within their deadline run. The per-request override
(``X-Request-Timeout-Ms``, through the request's timing context) beats the default."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lnserve.app.http.errors import http_status
from lnserve.app.serving.deadlines import parse_timeout_ms
from lnserve.app.serving.errors import DeadlineExceededError
from lnserve.app.serving.timing import RequestTiming, current_timing
from tests.unit.app.serving.test_batcher import Recorder, _batcher, _hold_worker, _until


class _Expired:
    def __init__(self) -> None:
        self.n = 0

    def batch(self, model: str, rows: int, tokens: int, waits: list[float]) -> None: ...

    def rejected(self, model: str) -> None: ...

    def cancelled(self, model: str) -> None: ...

    def expired(self, model: str) -> None:
        self.n += 1

    def depth(self, model: str, rows: int) -> None: ...


async def _submit_with_timeout(b: Any, payload: list[int], timeout_s: float | None) -> Any:
    """Submit as a request with ``X-Request-Timeout-Ms`` would (the middleware sets this context)."""
    current_timing.set(RequestTiming(timeout_s=timeout_s))
    return await b.submit("k", payload, rows=1, tokens=1)


def test_under_overload_no_batch_slot_goes_to_an_expired_job() -> None:
    async def main() -> None:
        rec, obs = Recorder(), _Expired()
        b = _batcher(rec, max_wait_s=0.0, deadline_s=30.0)
        b._observer = obs
        blocker = await _hold_worker(b, rec)
        loop = asyncio.get_running_loop()
        short = [asyncio.ensure_future(_submit_with_timeout(b, [i], 0.001)) for i in range(20)]
        kept = [asyncio.ensure_future(_submit_with_timeout(b, [100 + i], None)) for i in range(3)]
        await _until(lambda: b.depth == 23)
        enqueued = loop.time()
        await _until(lambda: loop.time() > enqueued + 0.01)  # the short deadlines have passed
        rec.gate.set()
        assert await blocker == [200]
        assert await asyncio.gather(*kept) == [[200 + 2 * i] for i in range(3)]
        for job in short:
            with pytest.raises(DeadlineExceededError) as err:
                await job
            assert http_status(err.value) == 504 and err.value.code == "deadline_exceeded"
        seen = [p for _, payloads in rec.calls for p in payloads]
        assert seen == [[100], [100], [101], [102]]  # the blocker and the three kept jobs only
        assert obs.n == 20 and b.depth == 0
        await b.close()

    asyncio.run(main())


def test_the_default_deadline_applies_without_a_header() -> None:
    async def main() -> None:
        rec = Recorder()
        b = _batcher(rec, max_wait_s=0.0, deadline_s=0.001)
        current_timing.set(RequestTiming(timeout_s=60.0))  # the blocker must not expire on a busy machine
        blocker = await _hold_worker(b, rec)
        loop = asyncio.get_running_loop()
        late = asyncio.ensure_future(_submit_with_timeout(b, [1], None))  # no header: the default
        patient = asyncio.ensure_future(_submit_with_timeout(b, [2], 60.0))  # the header overrides
        await _until(lambda: b.depth == 2)
        start = loop.time()
        await _until(lambda: loop.time() > start + 0.01)
        rec.gate.set()
        await blocker
        with pytest.raises(DeadlineExceededError):
            await late
        assert await patient == [4]
        assert [p for _, ps in rec.calls for p in ps] == [[100], [2]]
        await b.close()

    asyncio.run(main())


@pytest.mark.parametrize("value", ["0", "-5", "abc", "nan", "inf", "1e12", ""])
def test_bad_timeout_headers_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="X-Request-Timeout-Ms"):
        parse_timeout_ms(value)


def test_timeout_header_in_ms() -> None:
    assert parse_timeout_ms("250") == 0.25
