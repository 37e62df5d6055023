"""Prometheus metrics, in a registry per app so that several apps (tests) never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

from lnserve.app.serving.timing import RequestTiming

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """Request counts and latency by route, plus what the batcher reports (it is a ``BatchObserver``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        r = self.registry
        self.requests = Counter(
            "lnserve_requests",
            "HTTP requests by route and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "lnserve_request_duration_seconds",
            "HTTP request latency.",
            ["route"],
            buckets=_LATENCY,
            registry=r,
        )
        self.queue_wait = Histogram(
            "lnserve_queue_wait_seconds", "Time a job waited before its batch ran.", ["model"],
            buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self.batch_rows = Histogram(
            "lnserve_batch_size",
            "Sentences (or images) per model call.",
            ["model"],
            buckets=_SIZES,
            registry=r,
        )
        self.tokens = Counter("lnserve_tokens", "Tokens encoded.", ["model"], registry=r)
        self.queue_depth = Gauge("lnserve_queue_depth", "Sentences waiting.", ["model"], registry=r)
        self.rejected_jobs = Counter("lnserve_rejected", "Jobs refused with 429.", ["model"], registry=r)
        self.cancelled_jobs = Counter(
            "lnserve_cancelled", "Jobs withdrawn because the client went away.", ["model"], registry=r
        )
        self.expired_jobs = Counter(
            "lnserve_deadline_exceeded",
            "Jobs dropped unrun: they waited in the queue past their deadline (504).",
            ["model"],
            registry=r,
        )
        self.overloaded = Counter(
            "lnserve_overloaded",
            "Requests refused with 429: max_inflight requests were in flight.",
            registry=r,
        )
        self.inflight = Gauge(
            "lnserve_inflight_requests",
            "Requests in flight (health, ready and metrics not counted).",
            registry=r,
        )
        self.bodies_arriving = Gauge(
            "lnserve_bodies_arriving",
            "Requests whose body is still arriving (not in flight yet; at most max_body_reads_per_client "
            "per client address).",
            registry=r,
        )

        # per request, the values of its X-Queue-Time-Ms / X-Inference-Time-Ms / X-Batch-Size headers
        self.request_queue = Histogram(
            "lnserve_request_queue_seconds", "Per request that ran the model: its longest queue wait.",
            ["route"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self.request_inference = Histogram(
            "lnserve_request_inference_seconds", "Per request that ran the model: time in model calls.",
            ["route"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self.request_batch = Histogram(
            "lnserve_request_batch_size", "Per request that ran the model: rows in its (largest) model call.",
            ["route"], buckets=_SIZES, registry=r,
        )  # fmt: skip

    def timing(self, route: str, timing: RequestTiming) -> None:
        """A request's model timings (the same numbers as its timing headers); nothing if it ran no job."""
        if timing.jobs:
            self.request_queue.labels(route).observe(timing.queue_s)
            self.request_inference.labels(route).observe(timing.inference_s)
            self.request_batch.labels(route).observe(timing.batch_size)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    # -- BatchObserver ------------------------------------------------------------------------------
    def batch(self, model: str, rows: int, tokens: int, waits: list[float]) -> None:
        self.batch_rows.labels(model).observe(rows)
        self.tokens.labels(model).inc(tokens)
        for w in waits:
            self.queue_wait.labels(model).observe(w)

    def rejected(self, model: str) -> None:
        self.rejected_jobs.labels(model).inc()

    def cancelled(self, model: str) -> None:
        self.cancelled_jobs.labels(model).inc()

    def expired(self, model: str) -> None:
        self.expired_jobs.labels(model).inc()

    def depth(self, model: str, rows: int) -> None:
        self.queue_depth.labels(model).set(rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
