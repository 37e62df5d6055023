"""Every route that runs a model reports its jobs' times (``X-Queue-Time-Ms``, ``X-Inference-Time-Ms``,
``X-Batch-Size``) and counts them in its route's histograms. The times come back with each result and the
route records them (``AnswerBound.send``, ``record_timings``): a table over every such route, so that a
route that forgets to record them is caught."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server

IMAGE = [1.0] * 120  # the demo model's dim_image
HEADERS = ("x-queue-time-ms", "x-inference-time-ms", "x-batch-size")

# (method path, body, route label in /metrics, the largest batch the request can report at least)
ROUTES: list[tuple[str, dict[str, Any], str, int]] = [
    ("/encode", {"sentences": ["a b", "c"]}, "/encode", 2),
    ("/encode/images", {"features": [IMAGE] * 3}, "/encode/images", 3),
    ("/v1/embeddings", {"input": ["a b", "c"]}, "/v1/embeddings", 2),
    ("/embed", {"inputs": ["a b", "c"]}, "/embed", 2),
    ("/", {"inputs": ["a b", "c"]}, "/", 2),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}}, "/similarity", 3),
    ("/embed_all", {"inputs": ["a b"]}, "/embed_all", 2),
    ("/score", {"captions": ["a b", "c"], "images": [IMAGE] * 3}, "/score", 3),
    ("/galleries/caps/items", {"items": [{"text": "a b"}, {"text": "c"}]}, "/galleries/{name}/items", 2),
    ("/galleries/ims/items", {"items": [{"image": IMAGE}] * 3}, "/galleries/{name}/items", 3),
    ("/retrieve", {"gallery": "caps", "queries": [{"text": "a"}, {"image": IMAGE}], "k": 1}, "/retrieve", 1),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("timing"))
    try:
        for name, kind in (("caps", "captions"), ("ims", "images")):
            r = httpx.post(live.url + "/galleries", json={"name": name, "kind": kind}, timeout=60)
            assert r.status_code == 201, r.text
        yield live
    finally:
        live.stop()


def _count(server: LiveServer, route: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    name = "lnserve_request_inference_seconds_count"
    m = re.search(rf'^{name}{{route="{re.escape(route)}"}} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize(("path", "body", "route", "rows"), ROUTES, ids=[f"{r[0]} {r[2]}" for r in ROUTES])
def test_every_route_that_runs_a_model_reports_its_times(
    server: LiveServer, path: str, body: dict[str, Any], route: str, rows: int
) -> None:
    before = _count(server, route)
    r = httpx.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert all(h in r.headers for h in HEADERS), dict(r.headers)
    assert float(r.headers["x-inference-time-ms"]) > 0 and float(r.headers["x-queue-time-ms"]) >= 0
    assert int(r.headers["x-batch-size"]) >= rows
    assert _count(server, route) - before == 1
