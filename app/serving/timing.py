"""Per-request model timings: what ``X-Queue-Time-Ms``, ``X-Inference-Time-Ms`` and ``X-Batch-Size`` report.

The middleware opens a ``RequestTiming`` for each request (a context variable, so that it follows the
request's task and the tasks it starts); the micro-batcher adds one entry per job it completes. A request
whose jobs are several (text and images, or more than one model call) reports the longest queue wait, the
summed model time and the largest batch. A request that ran no model job reports nothing.
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

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Response headers, or none when the request ran no model job."""
        if not self.jobs:
            return []
        return [
            (b"x-queue-time-ms", f"{self.queue_s * 1000:.3f}".encode()),
            (b"x-inference-time-ms", f"{self.inference_s * 1000:.3f}".encode()),
            (b"x-batch-size", str(self.batch_size).encode()),
        ]


current_timing: ContextVar[RequestTiming | None] = ContextVar("lnserve_request_timing", default=None)


def record_job(job: JobTiming) -> None:
    """Add a completed job to the current request's timing (nothing outside a request): the response
    headers cover every route that runs a model, whatever flow it runs through."""
    timing = current_timing.get()
    if timing is not None:
        timing.add(queue_s=job.queue_s, inference_s=job.inference_s, batch_size=job.batch_size)
