"""Overload and hostile bodies against real ``lnserve serve`` processes (demo model, 127.0.0.1).

Requests are held in flight deterministically with raw connections that send their headers but not yet
their body; assertions are on outcomes (status, code, which request finished first), and the one latency
bound (``/health`` under attack) is ten times looser than the stall it guards against.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from tests.e2e.rawhttp import RawConnection
from tests.e2e.server import LiveServer, start_server
from tests.support.poll import wait_until

KEY = "overload-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"Content-Type": "application/json"}
DIM_IMAGE = 120  # the demo model's image feature width
DEADLINE_S = 30.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, what, timeout=DEADLINE_S, every=0.02)


def _metric(server: LiveServer, name: str, labels: str = "") -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The demo model behind an API key, default limits (max_body_bytes 4 MiB, max_sentences 256)."""
    srv = start_server(tmp_path_factory.mktemp("keyed"), env={"LNSERVE_API_KEY": KEY})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """At most 2 requests in flight; an idle model waits 3 s for company, so concurrent jobs share batches
    (and requests sent together stay in flight that long)."""
    env = {"LNSERVE_MAX_INFLIGHT": "2", "LNSERVE_MAX_WAIT_MS": "3000"}
    srv = start_server(tmp_path_factory.mktemp("narrow"), env=env)
    yield srv
    srv.stop()


# -- max_inflight -----------------------------------------------------------------------------------
def test_requests_beyond_max_inflight_get_an_immediate_429_and_the_admitted_ones_finish(
    narrow: LiveServer,
) -> None:
    body = json.dumps({"sentences": ["a red circle on the left"]}).encode()
    held = [RawConnection(narrow.url) for _ in range(2)]
    try:
        for conn in held:  # admitted with their bodies, then waiting (max_wait_ms) for company
            conn.send_head("POST", "/encode", JSON, len(body))
            conn.sock.sendall(body)
        _wait_for(lambda: _metric(narrow, "lnserve_inflight_requests") == 2, "2 requests in flight")

        r = httpx.post(narrow.url + "/encode", json={"sentences": ["a blue square"]}, timeout=DEADLINE_S)
        assert r.status_code == 429, r.text  # answered while both admitted requests are still open
        err = r.json()["error"]
        assert err["code"] == "overloaded" and "max_inflight 2" in err["message"] and err["request_id"]
        assert r.headers["retry-after"] == "1"
        for probe in ("/health", "/ready", "/metrics"):  # probes are neither refused nor counted
            assert httpx.get(narrow.url + probe, timeout=DEADLINE_S).status_code == 200, probe
        assert _metric(narrow, "lnserve_overloaded_total") == 1.0

        responses = [conn.read_response() for conn in held]
        assert [x.status for x in responses] == [200, 200], [x.body[:200] for x in responses]
    finally:
        for conn in held:
            conn.close()
    assert httpx.post(narrow.url + "/encode", json={"sentences": ["a cross"]}).status_code == 200


def test_an_unencodable_row_fails_only_its_own_request_in_a_shared_batch(narrow: LiveServer) -> None:
    good = json.dumps({"features": [[0.5] * DIM_IMAGE]}).encode()
    bad = json.dumps({"features": [[0.5] * DIM_IMAGE, [1e20] * DIM_IMAGE]}).encode()
    batches = _metric(narrow, "lnserve_batch_size_count", '{model="demo-lngru"}')
    conns = [RawConnection(narrow.url) for _ in range(2)]
    try:
        for conn, body in zip(conns, (good, bad), strict=True):
            conn.send_head("POST", "/encode/images", JSON, len(body))
        for conn, body in zip(conns, (good, bad), strict=True):  # both jobs arrive within the 3 s wait
            conn.sock.sendall(body)
        ok, refused = (conn.read_response() for conn in conns)
    finally:
        for conn in conns:
            conn.close()
    assert _metric(narrow, "lnserve_batch_size_count", '{model="demo-lngru"}') == batches + 1  # one batch
    assert ok.status == 200 and np.isfinite(np.asarray(ok.json()["vectors"], dtype=np.float32)).all()
    assert refused.status == 422, refused.body
    err = refused.json()["error"]
    assert err["code"] == "invalid_input" and err["message"].startswith("feature row 1 cannot be encoded")


# -- the API key and the size limit come before the body ----------------------------------------------
@pytest.mark.parametrize(
    ("headers", "length", "status", "code"),
    [
        ({}, 4_000_000, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong"}, 4_000_000, 401, "unauthorized"),
        (AUTH, (4 << 20) + 1, 413, "request_too_large"),
    ],
)
def test_refused_before_the_body_is_read(
    keyed: LiveServer, headers: dict[str, str], length: int, status: int, code: str
) -> None:
    """Only the headers are sent: a server that read (or waited for) the body would never answer."""
    with RawConnection(keyed.url, timeout=DEADLINE_S) as conn:
        conn.send_head("POST", "/encode/images", {**JSON, **headers}, length)
        r = conn.read_response()
    assert r.status == status and r.json()["error"]["code"] == code, r.body
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


# -- large bodies are parsed off the event loop ------------------------------------------------------
def test_million_row_bodies_do_not_stall_health_or_other_clients(keyed: LiveServer) -> None:
    """Two clients keep posting 4 MB bodies of 10^6 one-number rows (each ~1 s of JSON parsing and
    validation, which used to run on the event loop: every other request waited seconds). The bound on the
    median ``/health`` latency is generous for a busy machine and far below a stalled loop."""
    hostile = b'{"features": [' + b",".join([b"[0]"] * 1_000_000) + b"]}"
    stop = threading.Event()
    outcomes: list[tuple[int, str]] = []

    def attack() -> None:
        with httpx.Client(base_url=keyed.url, headers={**AUTH, **JSON}, timeout=120) as c:
            while not stop.is_set():
                r = c.post("/encode/images", content=hostile)
                outcomes.append((r.status_code, r.json()["error"]["code"]))

    attackers = [threading.Thread(target=attack) for _ in range(2)]
    for t in attackers:
        t.start()
    health: list[float] = []
    encoded = 0
    try:
        with httpx.Client(base_url=keyed.url, headers=AUTH, timeout=120) as c:
            deadline = time.monotonic() + 120
            while len(outcomes) < 4 and time.monotonic() < deadline:
                start = time.perf_counter()
                assert c.get("/health").status_code == 200
                health.append(time.perf_counter() - start)
                encoded += c.post("/encode", json={"sentences": ["a red circle"]}).status_code == 200
    finally:
        stop.set()
        for t in attackers:
            t.join(120)
    assert len(outcomes) >= 4 and set(outcomes) == {(422, "too_many_sentences")}, outcomes[:5]
    median = float(np.median(health))
    assert len(health) >= 10 and encoded >= 10, (len(health), encoded)
    assert median < 0.5, f"/health took {median:.3f} s (median of {len(health)}) during the attack"


def test_a_large_valid_body_gives_the_vectors_small_ones_give(keyed: LiveServer) -> None:
    feats = np.random.default_rng(0).normal(0, 1, (200, DIM_IMAGE)).astype(np.float32)
    big = json.dumps({"features": feats.tolist()}).encode()
    assert len(big) > 256 * 1024  # well over the inline-parsing threshold
    with httpx.Client(base_url=keyed.url, headers={**AUTH, **JSON}, timeout=60) as c:
        r = c.post("/encode/images", content=big)
        assert r.status_code == 200, r.text
        parts = [c.post("/encode/images", json={"features": f.tolist()}) for f in np.split(feats, 20)]
    together = np.asarray(r.json()["vectors"], dtype=np.float32)
    apart = np.concatenate([np.asarray(p.json()["vectors"], dtype=np.float32) for p in parts])
    assert float(np.abs(together - apart).max()) <= 1e-5


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        ({"features": [[0.5] * DIM_IMAGE] * 300}, "too_many_sentences", "300 items in one request"),
        ({"sentences": ["a red circle " * 30] * 300}, "too_many_sentences", "300 items in one request"),
        ({"features": [[0.5] * DIM_IMAGE] * 200, "bogus": 1}, "invalid_request", "bogus"),
        ({"features": [[0.5] * DIM_IMAGE] * 200 + [["x"]]}, "invalid_request", "features[200][0]"),
    ],
)
def test_large_bodies_are_checked_like_small_ones(
    keyed: LiveServer, body: dict[str, object], code: str, needle: str
) -> None:
    raw = json.dumps(body).encode()
    assert len(raw) > 64 * 1024
    path = "/encode" if "sentences" in body else "/encode/images"
    r = httpx.post(keyed.url + path, content=raw, headers={**AUTH, **JSON}, timeout=60)
    assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text
    assert needle in r.json()["error"]["message"]


def test_large_invalid_json_is_a_422(keyed: LiveServer) -> None:
    raw = b'{"features": [' + b"[0.5]," * 20_000 + b"]"  # truncated
    r = httpx.post(keyed.url + "/encode/images", content=raw, headers={**AUTH, **JSON}, timeout=60)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text


def test_a_client_gone_in_the_middle_of_a_large_body_is_a_499_not_an_error(narrow: LiveServer) -> None:
    with RawConnection(narrow.url) as conn:
        conn.send_head("POST", "/encode", JSON, 1 << 20)
        conn.sock.sendall(b'{"sentences": ["a red circle')
    labels = '{method="POST",route="/encode",status="499"}'
    _wait_for(lambda: _metric(narrow, "lnserve_requests_total", labels) == 1.0, "the request recorded as 499")
    assert "unhandled error" not in narrow.log() and "Traceback" not in narrow.log()
