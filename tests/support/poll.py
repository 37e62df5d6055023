"""One way for tests to wait for something that happens in another thread or process: poll a condition
against a deadline (wall-clock, never a count of tries: a busy machine is slow, not wrong)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool], what: str, *, timeout: float = 120.0, every: float = 0.01
) -> None:
    """Return once ``condition()`` holds (checked every ``every`` seconds); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


async def wait_until_async(
    condition: Callable[[], bool], what: str, *, timeout: float = 30.0, every: float = 0.001
) -> None:
    """``wait_until`` inside an event loop: yields to the loop (and worker threads) between checks."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(every)
