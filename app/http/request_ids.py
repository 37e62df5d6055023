"""Request ids for requests that bring none (``X-Request-ID``): 32 lowercase hex characters, as before.

``uuid4().hex`` read 16 bytes from the OS's random source per request (measured: 3% of the event loop's
time per ``/encode`` request under load, benchmarks/http_load.py). An id only has to be unique, to find one
request's log lines and metrics among the others; it grants nothing (the API key does that), so it need not
be unpredictable per request. Here it is a random 64-bit prefix drawn once per process (and again in a
forked child, which must not repeat its parent's ids) followed by a 64-bit counter: unique within a process
for 2**64 requests, and two processes (replicas, restarts) collide only if their prefixes do (about 1 in
2**32 after 2**32 processes). A client that knows one id can guess the next ones of the same process; it
learns no more than how many requests the process has answered.
"""

from __future__ import annotations

import itertools
import os
import secrets


class RequestIds:
    """A per-process random prefix and a counter: ``next()`` is unique, cheap and 32 hex characters."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_ids = RequestIds()


def _reseed() -> None:
    global _ids
    _ids = RequestIds()


os.register_at_fork(after_in_child=_reseed)


def new_request_id() -> str:
    """A fresh request id (see the module)."""
    return _ids.next()
