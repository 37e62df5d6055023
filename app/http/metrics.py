"""Prometheus metrics, in a registry per app so that several apps (tests) never collide."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

from ..serving.timing import RequestTiming

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
        self.body_bytes_arriving = Gauge(
            "lnserve_body_bytes_arriving",
            "Bytes read so far of the bodies still arriving (at most max_body_bytes_arriving).",
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

        # labelled children bound once per label values and kept here: ``labels()`` checks and locks on
        # every call (measured ~1% of the event loop's time per /encode request under load). The label
        # values are bounded: route templates, HTTP methods, statuses, model names
        self._by_request: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._by_route: dict[str, tuple[Any, Any, Any]] = {}
        self._by_model: dict[str, tuple[Any, Any, Any, Any]] = {}

    def watch(
        self,
        *,
        inflight: Callable[[], float],
        bodies_arriving: Callable[[], float],
        body_bytes_arriving: Callable[[], float],
    ) -> None:
        """Read the gauges at scrape time from the counts themselves, instead of setting them on every
        request (each ``set`` takes a lock)."""
        self.inflight.set_function(inflight)
        self.bodies_arriving.set_function(bodies_arriving)
        self.body_bytes_arriving.set_function(body_bytes_arriving)

    def timing(self, route: str, timing: RequestTiming) -> None:
        """A request's model timings (the same numbers as its timing headers); nothing if it ran no job."""
        if timing.jobs:
            children = self._by_route.get(route)
            if children is None:
                children = self._by_route[route] = (
                    self.request_queue.labels(route),
                    self.request_inference.labels(route),
                    self.request_batch.labels(route),
                )
            queue, inference, batch = children
            queue.observe(timing.queue_s)
            inference.observe(timing.inference_s)
            batch.observe(timing.batch_size)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._by_request.get(key)
        if children is None:
            children = self._by_request[key] = (
                self.requests.labels(route, method, str(status)),
                self.latency.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def _model(self, model: str) -> tuple[Any, Any, Any, Any]:
        """``model``'s batch size, tokens, queue wait and queue depth children."""
        children = self._by_model.get(model)
        if children is None:
            children = self._by_model[model] = (
                self.batch_rows.labels(model),
                self.tokens.labels(model),
                self.queue_wait.labels(model),
                self.queue_depth.labels(model),
            )
        return children

    # -- BatchObserver ------------------------------------------------------------------------------
    def batch(self, model: str, rows: int, tokens: int, waits: list[float]) -> None:
        batch_rows, tokens_total, queue_wait, _ = self._model(model)
        batch_rows.observe(rows)
        tokens_total.inc(tokens)
        for w in waits:
            queue_wait.observe(w)

    def rejected(self, model: str) -> None:
        self.rejected_jobs.labels(model).inc()

    def cancelled(self, model: str) -> None:
        self.cancelled_jobs.labels(model).inc()

    def expired(self, model: str) -> None:
        self.expired_jobs.labels(model).inc()

    def depth(self, model: str, rows: int) -> None:
        self._model(model)[3].set(rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
