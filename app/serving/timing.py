"""Per-request model timings: what ``X-Queue-Time-Ms``, ``X-Inference-Time-Ms`` and ``X-Batch-Size`` report.

Timings travel back WITH the results: the micro-batcher returns each job's ``JobTiming`` beside its result
(``MicroBatcher.submit_timed``), ``serving.encoding`` puts them on what it returns, and the route records
them into the ``RequestTiming`` the middleware opened for the request (``RequestTiming.record``). A request
whose jobs are several (text and images, or more than one model call) reports the longest queue wait, the
summed model time and the largest batch. A request that ran no model job reports nothing.

Only the request's queue deadline (``X-Request-Timeout-Ms``) goes IN through a context variable
(``current_timing``, read by ``deadlines.request_deadline_s``): it must reach the batcher under every flow
that submits a job, and nothing comes back that way.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class JobTiming:
    """One batcher job's times, returned with its result (``MicroBatcher.submit_timed``)."""

    queue_s: float = 0.0  # from enqueue to the start of the job's batch
    inference_s: float = 0.0  # the model call that ran the job
    batch_size: int = 0  # rows in that model call, the job's own included


@dataclass
class RequestTiming:
    timeout_s: float | None = None  # X-Request-Timeout-Ms: this request's queue deadline (None: the default)
    jobs: int = 0
    queue_s: float = 0.0  # from enqueue to the start of the job's batch
    inference_s: float = 0.0  # the model call(s) that ran the job
    batch_size: int = 0  # rows (sentences / images) in that model call, the job's own included

    def add(self, *, queue_s: float, inference_s: float, batch_size: int) -> None:
        self.jobs += 1
        self.queue_s = max(self.queue_s, queue_s)
        self.inference_s += inference_s
        self.batch_size = max(self.batch_size, batch_size)

    def record(self, *jobs: JobTiming) -> None:
        """Jobs this request ran, as their results brought their times back."""
        for job in jobs:
            self.add(queue_s=job.queue_s, inference_s=job.inference_s, batch_size=job.batch_size)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Response headers, or none when the request ran no model job."""
        if not self.jobs:
            return []
        return [
            (b"x-queue-time-ms", f"{self.queue_s * 1000:.3f}".encode()),
            (b"x-inference-time-ms", f"{self.inference_s * 1000:.3f}".encode()),
            (b"x-batch-size", str(self.batch_size).encode()),
        ]


# the request's deadline, going in (see the module docstring); the middleware sets it for each request
current_timing: ContextVar[RequestTiming | None] = ContextVar("lnserve_request_timing", default=None)
