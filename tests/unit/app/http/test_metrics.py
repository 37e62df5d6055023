"""The metrics keep their bound children and read the in-flight gauges at scrape time: what they expose is
what every request and batch recorded, whatever the label values."""

from __future__ import annotations

from lnserve.app.http.metrics import Metrics
from lnserve.app.serving.timing import RequestTiming


def _samples(metrics: Metrics) -> dict[str, float]:
    out = {}
    for line in metrics.render().decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_every_request_and_batch_is_counted_under_its_own_labels() -> None:
    m = Metrics()
    for status in (200, 200, 422):
        m.request("/encode", "POST", status, 0.002)
    m.request("/tokenize", "POST", 200, 0.3)
    timing = RequestTiming()
    timing.add(queue_s=0.001, inference_s=0.004, batch_size=3)
    m.timing("/encode", timing)
    m.timing("/encode", RequestTiming())  # ran no job: not observed
    m.batch("demo", 3, 21, [0.001, 0.002, 0.0005])
    m.batch("other", 1, 5, [0.0])
    m.depth("demo", 7)
    s = _samples(m)
    assert s['lnserve_requests_total{method="POST",route="/encode",status="200"}'] == 2
    assert s['lnserve_requests_total{method="POST",route="/encode",status="422"}'] == 1
    assert s['lnserve_requests_total{method="POST",route="/tokenize",status="200"}'] == 1
    assert s['lnserve_request_duration_seconds_count{route="/encode"}'] == 3
    assert s['lnserve_request_duration_seconds_bucket{le="0.25",route="/tokenize"}'] == 0
    assert s['lnserve_request_batch_size_count{route="/encode"}'] == 1
    assert s['lnserve_request_inference_seconds_sum{route="/encode"}'] == 0.004
    assert (
        s['lnserve_batch_size_count{model="demo"}'] == 1 and s['lnserve_batch_size_sum{model="other"}'] == 1
    )
    assert s['lnserve_tokens_total{model="demo"}'] == 21
    assert s['lnserve_queue_wait_seconds_count{model="demo"}'] == 3
    assert s['lnserve_queue_depth{model="demo"}'] == 7


def test_the_in_flight_gauges_read_the_counts_when_scraped() -> None:
    m = Metrics()
    counts = {"inflight": 0, "arriving": 0, "bytes": 0}
    m.watch(
        inflight=lambda: counts["inflight"],
        bodies_arriving=lambda: counts["arriving"],
        body_bytes_arriving=lambda: counts["bytes"],
    )
    counts.update(inflight=5, arriving=2, bytes=300)
    s = _samples(m)
    assert s["lnserve_inflight_requests"] == 5 and s["lnserve_bodies_arriving"] == 2
    assert s["lnserve_body_bytes_arriving"] == 300
