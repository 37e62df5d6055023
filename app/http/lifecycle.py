"""What the server (``lnserve.app.http.server``) and the app tell each other about starting and stopping.

* Drain: on SIGTERM the server calls ``begin_drain(deadline)``. Every request in flight runs inside
  ``cut_at_drain_deadline``; at the deadline the middleware answers those still running with a JSON 503
  ``shutting_down`` (``Connection: close``), so uvicorn never has to cancel them itself (which answered a
  plain-text 500) and the process exits soon after the deadline.
* Fatal startup errors: a model that cannot load while the server starts calls ``startup_failed``; the
  server stops and ``lnserve serve`` reports the error as one line, exit 2.
* Loaded: when the background start-up has loaded every model the app calls ``loaded``; the server
  freezes what start-up left alive out of the garbage collector's passes (``on_loaded``).

Without a server (the app in-process, in tests) nothing calls ``begin_drain`` and ``on_fatal`` and
``on_loaded`` are unset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lnserve.errors import LnserveError


class DrainCut:
    """A request's cut at the drain deadline: ``asyncio.timeout``'s behaviour (the task cancelled at the
    deadline, ``TimeoutError`` out of the block), armed only once a drain begins. Entered and left by every
    request, so it is a plain ``with`` block with no timer until then: an ``asyncio.timeout`` in an
    ``asynccontextmanager``, twice per request, measured a few % of the event loop's time per ``/encode``
    request under load (benchmarks/http_load.py)."""

    __slots__ = ("_cancelling", "_expired", "_handle", "_lifecycle", "_task")

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lifecycle = lifecycle
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False

    def __enter__(self) -> DrainCut:
        task = asyncio.current_task()
        assert task is not None
        self._task, self._cancelling = task, task.cancelling()
        self._lifecycle._cuts.add(self)
        if self._lifecycle.deadline is not None:
            self.arm(self._lifecycle.deadline)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._lifecycle._cuts.discard(self)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        # as asyncio.timeout: the cancel is taken back whatever came out, so it never outlives the block
        if self._expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    def arm(self, deadline: float) -> None:
        """Cut the request at ``deadline`` (event-loop time)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_at(deadline, self._expire)

    def expired(self) -> bool:
        """The drain deadline cut the request (its ``TimeoutError`` is the drain's)."""
        return self._expired

    def _expire(self) -> None:
        self._handle = None
        self._expired = True
        self._task.cancel()


class Lifecycle:
    """Drain state and the fatal startup error, shared by the server and the app."""

    def __init__(self) -> None:
        self.draining = False
        self.deadline: float | None = None  # event-loop time at which requests in flight are cut
        self._cuts: set[DrainCut] = set()
        self.fatal: LnserveError | None = None
        self.on_fatal: Callable[[], None] | None = None  # set by the server: stop serving
        self.on_loaded: Callable[[], None] | None = None  # set by the server: start-up is over
        self.inflight = 0  # requests admitted by the middleware and not yet answered (probes not counted)

    def begin_drain(self, deadline: float) -> None:
        """Shutdown has begun: refuse new requests, cut the ones in flight at ``deadline`` (loop time)."""
        self.draining, self.deadline = True, deadline
        for cut in list(self._cuts):
            cut.arm(deadline)

    def cut_at_drain_deadline(self) -> DrainCut:
        """``with`` it around a request: ``TimeoutError`` (with ``expired()`` true) if the drain cut it."""
        return DrainCut(self)

    def startup_failed(self, error: LnserveError) -> None:
        """A model could not be loaded at startup: the process must stop, reporting ``error``."""
        if self.fatal is None:
            self.fatal = error
        if self.on_fatal is not None:
            self.on_fatal()

    def loaded(self) -> None:
        """Every model has loaded (the background start-up is over; ``/ready`` says so)."""
        if self.on_loaded is not None:
            self.on_loaded()
