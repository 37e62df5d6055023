"""Giving freed memory back to the system after a model version is released.

A retired version's weights and onnxruntime sessions are freed by reference counting, but glibc's malloc
keeps freed arenas mapped: after a reload storm of a published-size model RSS stayed gigabytes high long
after every old version was gone. ``malloc_trim(0)`` returns the free pages; elsewhere (musl, macOS) it is
a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

log = logging.getLogger("lnserve.memory")


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Return the C heap's free pages to the system; True if the allocator supports it."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def release_memory() -> None:
    """``trim_heap`` in a thread: trimming a large heap takes milliseconds the event loop should not wait."""
    try:
        await asyncio.to_thread(trim_heap)
    except RuntimeError as exc:  # the default executor is shut down (interpreter exit)
        log.debug("heap not trimmed: %s", exc)
