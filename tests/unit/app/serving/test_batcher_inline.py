"""Inline batches (``BatchLimits.inline_max_s``): a batch whose shape's model calls were measured under the
limit runs on the event loop, sparing the hop to the model's worker thread and back; any other batch, and
every batch of a shape never measured, runs in the worker thread as before.

Robust on a loaded machine: the cheap calls take microseconds against a limit of 0.2 s, the dear ones sleep
0.5 s; no test depends on how long anything else takes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable
from types import SimpleNamespace
from typing import Any

import pytest

from lnserve.app.serving.batcher import BatchLimits, CallCosts, MicroBatcher

LIMIT_S = 0.2
DEAR_S = 0.5


class Where:
    """run_batch that records the thread of each call; key ``"dear"`` sleeps past the limit, ``"boom"``
    raises."""

    def __init__(self) -> None:
        self.threads: list[tuple[Hashable, str]] = []

    def __call__(self, key: Hashable, payloads: list[Any]) -> list[Any]:
        self.threads.append((key, threading.current_thread().name))
        if key == "dear":
            time.sleep(DEAR_S)
        if key == "boom":
            raise RuntimeError("boom")
        return [[2 * x for x in p] for p in payloads]


async def _one_at_a_time(b: MicroBatcher, key: str, n: int) -> list[Any]:
    """``n`` one-row jobs of ``key``, each its own batch (sent after the previous one's answer)."""
    return [await b.submit(key, [i], rows=1, tokens=3) for i in range(n)]


@pytest.mark.parametrize("inline_max_s", [0.0, LIMIT_S])
def test_cheap_measured_shapes_run_on_the_loop_dear_and_unmeasured_ones_in_the_worker(
    inline_max_s: float,
) -> None:
    async def main() -> None:
        where = Where()
        b = MicroBatcher(name="m", limits=BatchLimits(inline_max_s=inline_max_s))
        b.start(where)
        loop_thread = threading.current_thread().name
        assert await _one_at_a_time(b, "cheap", 3) == [[0], [2], [4]]
        assert await _one_at_a_time(b, "dear", 2) == [[0], [2]]
        await b.close()
        threads = [(k, "loop" if t == loop_thread else "worker") for k, t in where.threads]
        if inline_max_s:  # measured once in the worker, then on the loop; the dear shape never leaves it
            assert threads == [("cheap", "worker"), ("cheap", "loop"), ("cheap", "loop"),
                               ("dear", "worker"), ("dear", "worker")]  # fmt: skip
        else:  # turned off: every batch in the worker, as before
            assert {t for _, t in threads} == {"worker"}

    asyncio.run(main())


def test_an_inline_batch_that_fails_fails_only_its_jobs_and_the_collector_survives() -> None:
    async def main() -> None:
        where = Where()
        b = MicroBatcher(name="m", limits=BatchLimits(inline_max_s=LIMIT_S))
        b.start(where)
        for _ in range(2):  # the second "boom" runs on the loop: measured (it failed fast) by the first
            with pytest.raises(RuntimeError, match="boom"):
                await b.submit("boom", [1], rows=1, tokens=1)
        assert where.threads[-1][1] == threading.current_thread().name
        assert await b.submit("k", [5], rows=1, tokens=1) == [10]
        assert b.failure is None
        await b.close()

    asyncio.run(main())


def test_a_shape_is_its_keys_rows_and_longest_job_each_to_a_power_of_two() -> None:
    """A batch of more rows or a longer sentence is a new shape, measured afresh in the worker, so a cheap
    small batch never lets a larger one onto the loop."""
    costs = CallCosts(window=2)

    def shape(key: str, *jobs: tuple[int, int]) -> Hashable:
        return CallCosts.shape({key: [SimpleNamespace(rows=r, tokens=t) for r, t in jobs]})

    assert shape("k", (1, 5), (1, 7)) == shape("k", (2, 6))  # 2 rows, longest 7 and 6: both under 8
    assert shape("k", (1, 5), (1, 9)) != shape("k", (1, 5), (1, 7))  # a job of 9 tokens: a longer shape
    assert shape("k", (3, 5)) != shape("k", (4, 5))  # 4 rows: the next power of two
    assert shape("k", (1, 5)) != shape("other", (1, 5))
    s = shape("k", (1, 5))
    assert costs.predicted(s) == float("inf")  # never measured: never inline
    costs.record(s, 0.004)
    costs.record(s, 0.001)
    assert costs.predicted(s) == 0.001  # the least of the last calls: a GIL wait inflates, never deflates
    costs.record(s, 0.003)
    costs.record(s, 0.002)  # the window (2) forgets 0.001
    assert costs.predicted(s) == 0.002
