"""No heavy request stalls the event loop: ``/health`` answers within 250 ms while each runs, and big answers
do not keep their memory. A table of heavy paths against a real demo server: a maximal ``/retrieve`` answer
(256 queries x ``k=1000``, 31 MB: within ``max_answer_bytes``) and one refused while written (1 KB payloads:
268 MB on main, where ``/health`` waited 1.5 s and 6.4 s), the largest ``/encode``, ``/v1/embeddings``, TEI
``/embed``, ``/tokenize`` and ``/score``, a gallery add of ``max_sentences`` items, and a model reload. Add a
row to ``HEAVY`` for a new heavy path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.server import LiveServer, start_server

pytestmark = pytest.mark.slow

HEALTH_MS = 250.0  # the most /health may take while a heavy path runs (the max over every probe)
LONG = " ".join(["a", "dog", "runs", "on", "the", "beach"] * 42)  # 252 words: within max_tokens (256)
DEMO = "demo-lngru"
DEMO_IMAGE_DIM = 120
rng = np.random.default_rng(0)


def _images(n: int) -> list[list[float]]:
    return rng.standard_normal((n, DEMO_IMAGE_DIM)).tolist()  # type: ignore[no-any-return]


def _items(n: int) -> list[dict[str, Any]]:
    return [{"image": row, "payload": {"t": "x" * 1000}} for row in _images(n)]


# name -> (method, path, JSON body or None, the status it answers)
HEAVY: dict[str, tuple[str, str, Any, int]] = {
    "retrieve: 256 queries x k=1000, 31 MB": (
        "POST", "/retrieve", {"gallery": "demo-images", "queries": [{"text": "a dog"}] * 256, "k": 1000}, 200,
    ),
    "retrieve: 256 x 1000 hits with 1 KB payloads (refused while written)": (
        "POST", "/retrieve", {"gallery": "big", "queries": [{"text": "a dog"}] * 256, "k": 1000}, 413,
    ),
    "encode: 256 sentences x 253 tokens": ("POST", "/encode", {"sentences": [LONG] * 256}, 200),
    "encode/images: 256 rows": ("POST", "/encode/images", {"features": _images(256)}, 200),
    "v1/embeddings: 256 inputs x 253 tokens": (
        "POST", "/v1/embeddings", {"model": DEMO, "input": [LONG] * 256}, 200,
    ),
    "tei embed: 256 inputs": ("POST", "/embed", {"inputs": [LONG] * 256}, 200),
    "tokenize: 256 x 253 tokens echoed": ("POST", "/tokenize", {"sentences": [LONG] * 256}, 200),
    "tei embed_all: one sentence of 253 tokens (every prefix encoded)": (
        "POST", "/embed_all", {"inputs": [LONG]}, 200,
    ),
    "tei decode: 256 x 253 ids": ("POST", "/decode", {"ids": [[5] * 253] * 256}, 200),
    "score: 256 captions x 256 images": (
        "POST", "/score", {"captions": [LONG] * 256, "images": _images(256)}, 200,
    ),
    "gallery add: 256 items with 1 KB payloads": (
        "POST", "/galleries/adds/items", {"items": _items(256)}, 200,
    ),
    "reload of the model": ("POST", f"/models/{DEMO}/reload", None, 200),
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The demo server (its model and its 500-image gallery), reload allowed, and a 1,024-item gallery."""
    live = start_server(tmp_path_factory.mktemp("loop"), env={"LNSERVE_RELOAD_WITHOUT_KEY": "true"})
    with httpx.Client(base_url=live.url, timeout=120) as c:
        for name in ("big", "adds"):
            r = c.post("/galleries", json={"name": name, "kind": "images", "model": DEMO})
            assert r.status_code == 201, r.text
        for _ in range(4):
            assert c.post("/galleries/big/items", json={"items": _items(256)}).status_code == 200
    yield live
    live.stop()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class _Probe:
    """/health every 20 ms on its own connection (and the server's RSS), until stopped."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.pid = url, pid
        self.latencies: list[float] = []
        self.peak_rss = _rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while not self._stop.is_set():
                t = time.perf_counter()
                r = c.get("/health")
                self.latencies.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text
                self.peak_rss = max(self.peak_rss, _rss_mb(self.pid))
                time.sleep(0.02)

    def during(self, work: Callable[[], httpx.Response]) -> httpx.Response:
        self._thread.start()
        time.sleep(0.1)
        try:
            return work()
        finally:
            time.sleep(0.1)
            self._stop.set()
            self._thread.join()


@pytest.mark.parametrize("name", list(HEAVY))
def test_health_answers_while_a_heavy_path_runs(server: LiveServer, name: str) -> None:
    method, path, body, status = HEAVY[name]
    with httpx.Client(base_url=server.url, timeout=300) as c:
        worst: list[float] = []
        for _ in range(2):  # twice: the first run of a path may warm what the second reuses
            probe = _Probe(server.url, server.proc.pid)
            r = probe.during(lambda: c.request(method, path, json=body))
            assert r.status_code == status, (name, r.status_code, r.text[:300])
            assert len(probe.latencies) >= 2, name
            worst.append(max(probe.latencies))
        print(f"{name}: /health max {max(worst):.0f} ms, answer {len(r.content) / 1e6:.1f} MB")
        assert max(worst) < HEALTH_MS, f"{name}: /health took {max(worst):.0f} ms (runs: {worst})"


def test_big_answers_do_not_keep_their_memory(server: LiveServer) -> None:
    """RSS before, at the peak of and after a series of maximal answers (31 MB each), and of answers refused
    while written: printed, with generous bounds (main: 844 MB peak, +140 MB after two 268 MB answers)."""
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=300) as c:
        series = [HEAVY["retrieve: 256 queries x k=1000, 31 MB"]] * 5
        series += [HEAVY["retrieve: 256 x 1000 hits with 1 KB payloads (refused while written)"]] * 3
        before = _rss_mb(pid)
        probe = _Probe(server.url, pid)

        def run_series() -> httpx.Response:
            for method, path, body, status in series:
                r = c.request(method, path, json=body)
                assert r.status_code == status, r.text[:300]
            return r

        probe.during(run_series)
        time.sleep(1.0)
        after = _rss_mb(pid)
    print(f"RSS MB: before {before:.0f}, peak {probe.peak_rss:.0f}, after {after:.0f}")
    assert probe.peak_rss - before < 300, (before, probe.peak_rss, after)
    assert after - before < 100, (before, probe.peak_rss, after)
