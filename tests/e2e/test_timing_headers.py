"""Timing headers over a real server: ``X-Queue-Time-Ms``, ``X-Inference-Time-Ms`` and ``X-Batch-Size`` on
encode and retrieve responses, the same values in the Prometheus histograms, and a batch size that shows
requests sharing a model call (two requests queued behind busy batches run together: both report 2)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from lnserve.app.galleries.store import GalleryStore, ModelRef
from lnserve.app.runtime.engine import Engine
from tests.conftest import LEGACY
from tests.e2e.server import LiveServer, start_server
from tests.support.poll import wait_until

MODEL = "oe_order_gru"
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")
HEADERS = ("x-queue-time-ms", "x-inference-time-ms", "x-batch-size")


def _metric(server: LiveServer, name: str, labels: str = "") -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def _timings(r: httpx.Response) -> tuple[float, float, int]:
    assert r.status_code == 200, r.text
    return (
        float(r.headers["x-queue-time-ms"]),
        float(r.headers["x-inference-time-ms"]),
        int(r.headers["x-batch-size"]),
    )


def test_timing_headers_and_histograms(artifacts: dict[str, Path], tmp_path: Path) -> None:
    engine = Engine.open(artifacts[MODEL], backend="torch")
    store = GalleryStore(tmp_path / "galleries", scorer="numpy")
    store.create("ims", kind="images", model=ModelRef.from_artifact(engine.artifact))
    store.add("ims", engine.encode_images(IMAGES), ids=[f"i{j}" for j in range(len(IMAGES))])
    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env={"LNSERVE_SCORER": "numpy"})
    try:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            # a lone request: its batch is its own sentences
            r = c.post("/encode", json={"sentences": ["a", "b c", "d e f"]})
            queue, inference, size = _timings(r)
            assert size == 3 and queue >= 0 and inference > 0
            # queue times come from a high-resolution clock: not whole milliseconds (uvloop's loop clock
            # had only those, so every queue time read 0.000 or 1.000, and deadlines had that grain too)
            queues = [_timings(c.post("/encode", json={"sentences": ["a b"]}))[0] for _ in range(5)]
            assert any(q != int(q) for q in [queue, *queues]), queues
            assert _timings(c.post("/encode/images", json={"features": IMAGES[:5].tolist()}))[2] == 5
            r = c.post("/retrieve", json={"gallery": "ims", "query": {"text": "a man"}, "k": 2})
            assert _timings(r)[2] == 1
            # nothing run by the model, nothing to report: listings, probes, refused input
            assert not any(h in c.get("/galleries/ims").headers for h in HEADERS)
            assert not any(h in c.get("/health").headers for h in HEADERS)
            r = c.post("/encode", json={"sentences": []})
            assert r.status_code == 422 and not any(h in r.headers for h in HEADERS)

            # the histograms hold the same numbers, per route
            label = '{route="/encode"}'
            before = {n: _metric(server, n + "_count", label) for n in ("lnserve_request_inference_seconds",)}
            sums = _metric(server, "lnserve_request_inference_seconds_sum", label)
            sizes = _metric(server, "lnserve_request_batch_size_sum", label)
            got = [_timings(c.post("/encode", json={"sentences": ["x"] * n})) for n in (1, 2, 4)]
            after = _metric(server, "lnserve_request_inference_seconds_count", label)
            assert after - before["lnserve_request_inference_seconds"] == 3
            new_sum = _metric(server, "lnserve_request_inference_seconds_sum", label) - sums
            assert abs(new_sum - sum(g[1] for g in got) / 1000) < 1e-5
            assert _metric(server, "lnserve_request_batch_size_sum", label) - sizes == 7
            assert _metric(server, "lnserve_request_queue_seconds_count", label) >= 4

    finally:
        server.stop()


@pytest.mark.slow  # over 10 s
def test_batch_size_shows_requests_sharing_a_model_call(artifacts: dict[str, Path], tmp_path: Path) -> None:
    """An idle model waits max_wait_ms for company, up to max_batch_size rows: the second request fills the
    batch, so both run in one call of 2 (the first one queued for as long as it waited)."""
    env = {"LNSERVE_MAX_BATCH_SIZE": "2", "LNSERVE_MAX_WAIT_MS": "5000"}
    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env=env)
    depth = f'{{model="{MODEL}"}}'
    results: dict[str, httpx.Response] = {}

    def post(name: str) -> None:
        results[name] = httpx.post(server.url + "/encode", json={"sentences": [name]}, timeout=120)

    try:
        first = threading.Thread(target=post, args=("first",))
        first.start()
        wait_until(lambda: _metric(server, "lnserve_queue_depth", depth) == 1, "the first job queued")
        post("second")
        first.join(120)
        (q1, i1, n1), (q2, i2, n2) = _timings(results["first"]), _timings(results["second"])
        assert n1 == n2 == 2 and i1 == i2  # one model call
        assert q1 > q2 >= 0
    finally:
        server.stop()
