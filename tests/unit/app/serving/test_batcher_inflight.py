"""The in-flight wait (``inflight_wait_s``): an idle model with a small batch waits for requests the server
has already admitted, so that concurrent clients share one model call; a lone request never waits.

Deterministic on a busy machine: where a test needs the wait to happen, the wait is a minute long and the
test ends it by submitting the jobs it waits for; where a test needs no wait, a minute-long wait would
make it time out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lnserve.app.serving.batcher import BatchLimits, MicroBatcher
from tests.unit.app.serving.test_batcher import Recorder, _hold_worker, _until

LONG = 60.0  # a wait no test sits out


def _batcher(rec: Recorder, in_flight: list[int], **limits: Any) -> MicroBatcher:
    b = MicroBatcher(name="m", limits=BatchLimits(**limits), in_flight=lambda: in_flight[0])
    b.start(rec)
    return b


def test_requests_in_flight_join_the_batch_of_the_first_one() -> None:
    async def main() -> None:
        rec, in_flight = Recorder(), [3]  # three requests admitted by the server
        b = _batcher(rec, in_flight, inflight_wait_s=LONG)
        first = asyncio.ensure_future(b.submit("k", [1], rows=1, tokens=1))
        # until the collector has either run the job alone (no in-flight wait) or sits waiting with it
        await _until(lambda: rec.started == 1 or (b.depth == 1 and not b._wakeup.is_set()))
        others = [asyncio.ensure_future(b.submit("k", [i], rows=1, tokens=1)) for i in (2, 3)]
        assert await asyncio.wait_for(asyncio.gather(first, *others), 30) == [[2], [4], [6]]
        assert [len(p) for _, p in rec.calls] == [3]  # one model call for the three
        await b.close()

    asyncio.run(main())


def test_a_lone_request_never_waits() -> None:
    async def main() -> None:
        rec, in_flight = Recorder(), [1]  # only itself
        b = _batcher(rec, in_flight, inflight_wait_s=LONG)
        assert await asyncio.wait_for(b.submit("k", [1], rows=1, tokens=1), 30) == [2]
        await b.close()

    asyncio.run(main())


def test_the_wait_ends_after_inflight_wait_s_when_nobody_comes() -> None:
    async def main() -> None:
        rec, in_flight = Recorder(), [5]  # admitted, but they never reach this model
        b = _batcher(rec, in_flight, inflight_wait_s=0.05)
        assert await asyncio.wait_for(b.submit("k", [1], rows=1, tokens=1), 30) == [2]
        assert [len(p) for _, p in rec.calls] == [1]
        await b.close()

    asyncio.run(main())


def test_a_batch_of_a_sixteenth_of_max_batch_size_runs_at_once() -> None:
    async def main() -> None:
        rec, in_flight = Recorder(), [1]
        b = _batcher(rec, in_flight, inflight_wait_s=LONG, max_batch_size=64)
        blocker = await _hold_worker(b, rec)
        jobs = [asyncio.ensure_future(b.submit("k", [i], rows=1, tokens=1)) for i in range(4)]
        await _until(lambda: b.depth == 4)
        in_flight[0] = 40  # many more in flight: a batch of 4 rows (64 / 16) still does not wait for them
        rec.gate.set()
        await blocker
        assert await asyncio.wait_for(asyncio.gather(*jobs), 30) == [[2 * i] for i in range(4)]
        await b.close()

    asyncio.run(main())


def test_without_a_server_count_nothing_waits() -> None:
    async def main() -> None:
        rec = Recorder()
        b = MicroBatcher(name="m", limits=BatchLimits(inflight_wait_s=LONG))  # no in_flight: no wait
        b.start(rec)
        assert await asyncio.wait_for(b.submit("k", [1], rows=1, tokens=1), 30) == [2]
        await b.close()

    asyncio.run(main())
