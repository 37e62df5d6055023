"""What the server (``lnserve.app.http.server``) and the app tell each other about starting and stopping.

* Drain: on SIGTERM the server calls ``begin_drain(deadline)``. Every request in flight runs inside
  ``cut_at_drain_deadline``; at the deadline the middleware answers those still running with a JSON 503
  ``shutting_down`` (``Connection: close``), so uvicorn never has to cancel them itself (which answered a
  plain-text 500) and the process exits soon after the deadline.
* Fatal startup errors: a model that cannot load while the server starts calls ``startup_failed``; the
  server stops and ``lnserve serve`` reports the error as one line, exit 2.

Without a server (the app in-process, in tests) nothing calls ``begin_drain`` and ``on_fatal`` is unset.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from lnserve.errors import LnserveError


class Lifecycle:
    """Drain state and the fatal startup error, shared by the server and the app."""

    def __init__(self) -> None:
        self.draining = False
        self.deadline: float | None = None  # event-loop time at which requests in flight are cut
        self._scopes: set[asyncio.Timeout] = set()
        self.fatal: LnserveError | None = None
        self.on_fatal: Callable[[], None] | None = None  # set by the server: stop serving
        self.inflight = 0  # requests admitted by the middleware and not yet answered (probes not counted)

    def begin_drain(self, deadline: float) -> None:
        """Shutdown has begun: refuse new requests, cut the ones in flight at ``deadline`` (loop time)."""
        self.draining, self.deadline = True, deadline
        for scope in self._scopes:
            scope.reschedule(deadline)

    @asynccontextmanager
    async def cut_at_drain_deadline(self) -> AsyncIterator[asyncio.Timeout]:
        """Run a request; ``TimeoutError`` (with the yielded scope ``expired()``) if the drain cut it."""
        async with asyncio.timeout(self.deadline) as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    def startup_failed(self, error: LnserveError) -> None:
        """A model could not be loaded at startup: the process must stop, reporting ``error``."""
        if self.fatal is None:
            self.fatal = error
        if self.on_fatal is not None:
            self.on_fatal()
