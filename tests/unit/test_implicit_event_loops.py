"""A loop that a library creates implicitly is closed with the test that made it (tests/conftest.py), so its
sockets never reach the garbage collector inside another test."""

from __future__ import annotations

import asyncio
import gc
import warnings

from tests.conftest import _policy_loop

MADE: list[asyncio.AbstractEventLoop] = []


def test_a_library_makes_an_implicit_loop() -> None:
    assert _policy_loop() is None
    MADE.append(asyncio.new_event_loop())
    asyncio.set_event_loop(MADE[0])  # what asyncio.get_event_loop() does for litellm's sync calls
    assert _policy_loop() is MADE[0]


def test_the_next_test_finds_it_closed_and_unset() -> None:
    assert MADE and MADE[0].is_closed() and _policy_loop() is None
    MADE.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        gc.collect()  # nothing left unclosed for a later collection to report
