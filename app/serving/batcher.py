"""Dynamic micro-batching: concurrent requests for one model share a model call.

Requests become jobs in a bounded queue. One collector task per model takes the head job, waits at most
``max_wait_s`` (from the head job's arrival) for company, then, while other requests are in flight in the
server (``in_flight()`` counts more than the jobs queued), at most ``inflight_wait_s`` more for them to
queue too, and takes jobs in arrival order up to
``max_batch_size`` rows / ``max_batch_tokens`` tokens, groups them by key (jobs with different options
cannot share a call), and runs each group in the model's single worker thread, so the event loop never
blocks and a model's batches run in order. While a batch runs, new jobs queue up and form the next batch:
under load batches grow by themselves. Without the in-flight wait, closed-loop clients settle into
half-size batches that alternate (half the clients queue while the other half's batch runs, and each half
is taken the moment the model frees up, just before the other half's clients send again); a lone request
never waits for it, so idle latency is unchanged.

Inline batches: a batch whose shape (its keys, rows and longest job, each to a power of two) took at most
``inline_max_s`` in its recent calls (``CallCosts``) runs on the event loop instead of the worker thread.
For a small model the hop costs more than the call: the worker has to be woken and to take the GIL from a
busy loop, and the loop idles until the results come back (demo model at 16 clients, 2 cores: a no-op
model in the thread served ~30% fewer requests/s than the same on the loop). A shape never measured runs
in the thread, so a dear model's batches (and a small model's large ones) never run on the loop.

Bounded memory: a job is refused with ``QueueFullError`` (HTTP 429) when the rows already waiting plus its
own would exceed ``max_queue`` (a lone job is always admitted, whatever its size). A caller that goes
away (client disconnect) has its job removed from the queue at once, so it never takes a batch slot.

No caller ever hangs: every job of a batch is resolved in a ``finally`` (a batch function that returns the
wrong number of results fails its group with ``BatchError``), and if the collector task itself dies, the
queued jobs fail and new ones are refused with ``ModelUnavailableError`` (HTTP 503); ``on_failure`` tells
the owner (the registry marks the model failed, so ``/ready`` and ``/health`` say so).

The batcher knows nothing about models: ``start`` gives it ``run_batch(key, payloads) -> results``, one
result per payload; a result that is an exception fails only its own job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from .deadlines import request_deadline_s
from .errors import (
    BatchError,
    DeadlineExceededError,
    ModelUnavailableError,
    QueueFullError,
    ShuttingDownError,
)
from .timing import JobTiming

log = logging.getLogger("lnserve.batcher")

RunBatch = Callable[[Hashable, list[Any]], Sequence[Any]]
# queue times and deadlines: monotonic and sub-microsecond. Not the event loop's clock: uvloop's ``time()``
# has whole milliseconds, so every X-Queue-Time-Ms read 0.000 or 1.000 and deadlines were cut to the ms
now = time.perf_counter


class BatchObserver(Protocol):
    """What the batcher reports (implemented by the Prometheus metrics)."""

    def batch(self, model: str, rows: int, tokens: int, waits: list[float]) -> None: ...

    def rejected(self, model: str) -> None: ...

    def cancelled(self, model: str) -> None: ...

    def expired(self, model: str) -> None: ...

    def depth(self, model: str, rows: int) -> None: ...


@dataclass(eq=False)
class _Job:
    key: Hashable
    payload: Any
    rows: int
    tokens: int
    enqueued: float  # ``now()`` when queued
    future: asyncio.Future[Any] = field(repr=False)
    deadline_s: float | None = None  # longest queue wait before it is dropped
    started: float = 0.0  # ``now()`` when its batch started
    inference_s: float = 0.0  # its model call's duration
    batch_rows: int = 0  # rows in its model call


@dataclass(frozen=True)
class BatchLimits:
    max_batch_size: int = 64
    max_batch_tokens: int = 8192
    max_wait_s: float = 0.0
    inflight_wait_s: float = 0.0  # at most this long for requests in flight elsewhere in the server
    max_queue: int = 1024
    retry_after_s: int = 1
    deadline_s: float | None = None  # default queue deadline (a request's X-Request-Timeout-Ms overrides it)
    inline_max_s: float = 0.0  # a batch whose model call is predicted under this runs on the event loop


class MicroBatcher:
    """Gathers concurrent jobs for one model into batches run in one worker thread."""

    def __init__(
        self,
        *,
        name: str,
        limits: BatchLimits,
        observer: BatchObserver | None = None,
        on_failure: Callable[[str], None] | None = None,
        in_flight: Callable[[], int] | None = None,
    ) -> None:
        self.name, self.limits, self._observer, self._on_failure = name, limits, observer, on_failure
        self._in_flight = in_flight
        self._run_batch: RunBatch | None = None
        self._dead: str | None = None  # why the collector stopped, once it has
        self._jobs: deque[_Job] = deque()
        self._taken: list[_Job] = []  # the batch being formed or run
        self._pending_rows = self._pending_tokens = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lnserve-{name}")
        self._costs = CallCosts()

    @property
    def depth(self) -> int:
        """Rows waiting (not yet in a running batch)."""
        return self._pending_rows

    @property
    def failure(self) -> str | None:
        """Why the collector stopped (it takes no more work), or None while it runs."""
        return self._dead

    def start(self, run_batch: RunBatch) -> None:
        """Start collecting jobs for ``run_batch``; call from the running event loop."""
        self._run_batch = run_batch
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._collect(), name=f"batcher-{self.name}")
            self._task.add_done_callback(self._collector_done)

    async def run_exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the model's worker thread (loading, warm-up): never concurrently with a batch."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def submit(self, key: Hashable, payload: Any, *, rows: int, tokens: int) -> Any:
        """Queue one job and wait for its result (``submit_timed`` without the times)."""
        return (await self.submit_timed(key, payload, rows=rows, tokens=tokens))[0]

    async def submit_timed(
        self, key: Hashable, payload: Any, *, rows: int, tokens: int
    ) -> tuple[Any, JobTiming]:
        """Queue one job and wait for its result, returned with the job's times.

        Raises:
            QueueFullError: the queue has no room; nothing was queued.
            ShuttingDownError: the batcher is draining.
            ModelUnavailableError: the collector has died; nothing will run.
            BatchError: the job's batch failed for a reason that is not the job's own.
        """
        if self._dead is not None:
            raise ModelUnavailableError(f"model {self.name!r} is unavailable ({self._dead}); restart lnserve")
        if self._closing or self._task is None:
            raise ShuttingDownError(f"model {self.name!r} is not taking work (shutting down or not started)")
        if self._pending_rows and self._pending_rows + rows > self.limits.max_queue:
            if self._observer:
                self._observer.rejected(self.name)
            raise QueueFullError(
                f"model {self.name!r} has {self._pending_rows} sentences queued (max_queue "
                f"{self.limits.max_queue}); retry later",
                retry_after=self.limits.retry_after_s,
            )
        loop = asyncio.get_running_loop()
        job = _Job(key, payload, rows, tokens, now(), loop.create_future())
        job.deadline_s = request_deadline_s(self.limits.deadline_s)
        self._jobs.append(job)
        self._account(job, +1)
        self._wakeup.set()
        try:
            result = await job.future
        except asyncio.CancelledError:
            self._withdraw(job)
            raise
        timing = JobTiming(job.started - job.enqueued, job.inference_s, job.batch_rows)
        return result, timing

    async def close(self) -> None:
        """Finish every queued job, then stop the collector and the worker thread."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await asyncio.wait({self._task})  # a collector that died has already failed its jobs
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)
        # nothing runs any more: let go of the model (``run_batch`` closes over it), so that a closed
        # batcher someone still holds does not keep a reloaded model's old version in memory
        self._run_batch = None
        self._task = None

    # -- internals ----------------------------------------------------------------------------------
    def _collector_done(self, task: asyncio.Task[None]) -> None:
        """The collector ended: normal after ``close``; otherwise fail what waits and refuse new work."""
        if task.cancelled():
            reason = "the batch collector was cancelled"
        elif (exc := task.exception()) is not None:
            reason = f"the batch collector failed: {type(exc).__name__}: {exc}"
            log.error("batch collector of model %s died", self.name, exc_info=exc)
        else:
            return  # closed after draining
        self._dead = reason
        error = ModelUnavailableError(f"model {self.name!r} is unavailable ({reason}); restart lnserve")
        for job in [*self._taken, *self._jobs]:
            if not job.future.done():
                job.future.set_exception(error)
        self._jobs.clear()
        self._pending_rows = self._pending_tokens = 0
        if self._on_failure is not None:
            self._on_failure(reason)

    def _account(self, job: _Job, sign: int) -> None:
        self._pending_rows += sign * job.rows
        self._pending_tokens += sign * job.tokens
        if self._observer:
            self._observer.depth(self.name, self._pending_rows)

    def _withdraw(self, job: _Job) -> None:
        """The caller went away: free its queue room now (if its batch has not started)."""
        job.future.cancel()
        try:
            self._jobs.remove(job)
        except ValueError:
            return  # already taken into a batch
        self._account(job, -1)
        if self._observer:
            self._observer.cancelled(self.name)

    def _full(self) -> bool:
        return (
            self._pending_rows >= self.limits.max_batch_size
            or self._pending_tokens >= self.limits.max_batch_tokens
        )

    async def _collect(self) -> None:
        while True:
            if not self._jobs:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_company()
            batch = self._take()
            if batch:
                try:
                    await self._run(batch)
                except Exception:  # the collector must outlive any one batch
                    log.exception("batch for model %s failed", self.name)
            self._taken = []

    async def _wait_for_company(self) -> None:
        await self._wait_until(self._jobs[0].enqueued + self.limits.max_wait_s, lambda: False)
        if self._in_flight is None or self.limits.inflight_wait_s <= 0 or not self._jobs:
            return
        # requests the server holds that are not queued here: bodies being parsed, handlers before their
        # submit, and those just answered whose (closed-loop) clients are about to send again. Only for a
        # small batch (under max_batch_size / 16 rows, 4 by default), where a model call's fixed cost
        # weighs most (300 -> 1024 LN-GRU, 1 thread: 3.2 ms for 1 row, 6.8 ms for 4, 12.7 ms for 8);
        # a larger batch runs at once and the rest form the next batch while it runs: measured
        # (benchmarks/http_load.py), waiting to fill it left the model idle longer than it saved
        small = max(1, self.limits.max_batch_size // 16)
        target = max(len(self._jobs), min(self._in_flight(), small))
        if target > len(self._jobs) and self._pending_rows < small:
            await self._wait_until(
                now() + self.limits.inflight_wait_s,
                lambda: len(self._jobs) >= target or self._pending_rows >= small,
            )

    async def _wait_until(self, deadline: float, enough: Callable[[], bool]) -> None:
        """Until ``deadline`` (``now()``), a full batch, ``enough()`` or close, woken by each new job."""
        while self._jobs and not self._full() and not self._closing and not enough():
            remaining = deadline - now()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                return

    def _take(self) -> list[_Job]:
        """Jobs in arrival order up to the batch limits (at least one). Taken jobs are held in
        ``self._taken`` until their batch has run, so a collector that dies midway still fails them."""
        batch = self._taken = []
        rows = tokens = 0
        while self._jobs:
            job = self._jobs[0]
            if batch and (
                rows + job.rows > self.limits.max_batch_size
                or tokens + job.tokens > self.limits.max_batch_tokens
            ):
                break
            batch.append(self._jobs.popleft())
            self._account(job, -1)
            if job.future.done() or self._expire(job):
                batch.pop()
                continue
            rows, tokens = rows + job.rows, tokens + job.tokens
        return batch

    def _expire(self, job: _Job) -> bool:
        """Drop a job that waited past its deadline (it never takes a batch slot): its caller gets 504."""
        if job.deadline_s is None:
            return False
        waited = now() - job.enqueued
        if waited <= job.deadline_s:
            return False
        job.future.set_exception(
            DeadlineExceededError(
                f"model {self.name!r}: the request waited {waited * 1000:.0f} ms in the queue, past its "
                f"deadline of {job.deadline_s * 1000:.0f} ms (X-Request-Timeout-Ms / request_timeout_ms); "
                "it was not run"
            )
        )
        if self._observer:
            self._observer.expired(self.name)
        return True

    async def _run(self, batch: list[_Job]) -> None:
        """Run one batch; every job's future is resolved when this returns, whatever happened."""
        loop = asyncio.get_running_loop()
        started = now()
        for job in batch:
            job.started = started
        try:
            if self._observer:
                self._observer.batch(
                    self.name,
                    sum(j.rows for j in batch),
                    sum(j.tokens for j in batch),
                    [started - j.enqueued for j in batch],
                )
            groups: dict[Hashable, list[_Job]] = {}
            for job in batch:
                groups.setdefault(job.key, []).append(job)
            shape = CallCosts.shape(groups)
            if self.limits.inline_max_s > 0 and self._costs.predicted(shape) <= self.limits.inline_max_s:
                outcomes = self._run_groups(groups)  # cheaper than the hop to the worker thread and back
            else:
                outcomes = await loop.run_in_executor(self._executor, self._run_groups, groups)
            self._costs.record(shape, sum(seconds for _, _, seconds in outcomes))
            for jobs, outcome, seconds in outcomes:
                rows = sum(j.rows for j in jobs)
                for job in jobs:
                    job.inference_s, job.batch_rows = seconds, rows
                _resolve(jobs, outcome)
        finally:
            left = [job for job in batch if not job.future.done()]
            if left:
                error = BatchError(f"model {self.name!r}: the batch failed before its results were delivered")
                for job in left:
                    job.future.set_exception(error)

    def _run_groups(
        self, groups: dict[Hashable, list[_Job]]
    ) -> list[tuple[list[_Job], Sequence[Any] | BaseException, float]]:
        """Worker thread: one model call per group, timed; a failing group fails only its own jobs."""
        outcomes: list[tuple[list[_Job], Sequence[Any] | BaseException, float]] = []
        assert self._run_batch is not None
        for key, jobs in groups.items():
            start = time.perf_counter()
            try:
                outcome: Sequence[Any] | BaseException = self._run_batch(key, [j.payload for j in jobs])
            except Exception as exc:
                outcome = exc
            outcomes.append((jobs, outcome, time.perf_counter() - start))
        return outcomes


class CallCosts:
    """What a batch's model calls cost, by shape: the groups' keys, the rows and the longest job (in tokens),
    each size rounded up to a power of two. A shape's prediction is the least of its last ``window`` costs:
    a call timed in the worker thread also counts the waits for the GIL the event loop holds, which the
    smallest of several leaves out. A shape never measured is predicted to cost infinitely much."""

    def __init__(self, window: int = 16) -> None:
        self._window = window
        self._seen: dict[Hashable, deque[float]] = {}

    @staticmethod
    def shape(groups: dict[Hashable, list[_Job]]) -> Hashable:
        jobs = [j for js in groups.values() for j in js]
        rows, longest = sum(j.rows for j in jobs), max(j.tokens for j in jobs)
        return (tuple(groups), rows.bit_length(), longest.bit_length())

    def predicted(self, shape: Hashable) -> float:
        seen = self._seen.get(shape)
        return min(seen) if seen else float("inf")

    def record(self, shape: Hashable, seconds: float) -> None:
        if (seen := self._seen.get(shape)) is None:
            seen = self._seen[shape] = deque(maxlen=self._window)
        seen.append(seconds)


def _resolve(jobs: list[_Job], outcome: Sequence[Any] | BaseException) -> None:
    """Hand each job its result; a failed call, or one with the wrong number of results, fails them all."""
    if not isinstance(outcome, BaseException):
        n = len(outcome) if isinstance(outcome, Sequence) else None
        if n != len(jobs):
            outcome = BatchError(f"the batch function returned {n} results for {len(jobs)} jobs")
    for i, job in enumerate(jobs):
        if job.future.done():  # the caller went away while its batch ran
            continue
        result = outcome if isinstance(outcome, BaseException) else outcome[i]
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)
