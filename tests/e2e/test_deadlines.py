"""Request deadlines over a real server. The model is made to hold requests in its queue deterministically:
an idle model waits ``max_wait_ms`` for company, so every request queues that long. A request whose
``X-Request-Timeout-Ms`` is shorter is dropped unrun (504 ``deadline_exceeded``, counted in /metrics, no
batch slot spent: the batch-size histogram does not move for it), one within its deadline runs, a bad
header is a 422, and the server keeps serving."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx

from tests.e2e.server import LiveServer, start_server

MODEL = "oe_order_gru"


def _metric(server: LiveServer, name: str, labels: str = "") -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def test_requests_past_their_deadline_are_dropped_unrun(artifacts: dict[str, Path], tmp_path: Path) -> None:
    env = {"LNSERVE_MAX_WAIT_MS": "1500"}  # every request queues 1.5 s (waiting for company)
    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env=env)
    lab = f'{{model="{MODEL}"}}'
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            batches = _metric(server, "lnserve_batch_size_count", lab)
            rows = _metric(server, "lnserve_batch_size_sum", lab)
            r = c.post("/encode", json={"sentences": ["a", "b"]}, headers={"X-Request-Timeout-Ms": "100"})
            assert r.status_code == 504, r.text
            err = r.json()["error"]
            assert err["code"] == "deadline_exceeded" and "deadline of 100 ms" in err["message"]
            assert err["request_id"] == r.headers["x-request-id"]
            assert _metric(server, "lnserve_deadline_exceeded_total", lab) == 1
            assert _metric(server, "lnserve_batch_size_count", lab) == batches  # no model call for it

            # under load: expiring and patient requests queued together; only the patient ones run
            results: dict[str, httpx.Response] = {}

            def post(name: str, timeout_ms: str | None) -> None:
                headers = {"X-Request-Timeout-Ms": timeout_ms} if timeout_ms else {}
                body = {"sentences": [f"{name} x"]}
                results[name] = httpx.post(server.url + "/encode", json=body, headers=headers, timeout=60)

            threads = [threading.Thread(target=post, args=(f"short{i}", "50")) for i in range(6)]
            threads += [threading.Thread(target=post, args=(f"long{i}", "60000")) for i in range(2)]
            threads += [threading.Thread(target=post, args=("default", None))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            codes = {name: r.status_code for name, r in results.items()}
            assert all(codes[f"short{i}"] == 504 for i in range(6)), codes
            assert codes["long0"] == codes["long1"] == codes["default"] == 200, codes
            ran = _metric(server, "lnserve_batch_size_sum", lab) - rows
            assert ran == 3  # the three patient sentences, none of the six expired ones
            assert _metric(server, "lnserve_deadline_exceeded_total", lab) == 7

            for bad in ("0", "soon", "-1"):
                r = c.post("/encode", json={"sentences": ["a"]}, headers={"X-Request-Timeout-Ms": bad})
                assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
                assert "X-Request-Timeout-Ms" in r.json()["error"]["message"]
            assert c.post("/encode", json={"sentences": ["a"]}).status_code == 200
    finally:
        server.stop()


def test_the_default_deadline_comes_from_the_setting(artifacts: dict[str, Path], tmp_path: Path) -> None:
    env = {"LNSERVE_MAX_WAIT_MS": "1000", "LNSERVE_REQUEST_TIMEOUT_MS": "200"}  # the warm-up has no deadline
    server = start_server(tmp_path, "--models", str(artifacts[MODEL]), env=env)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            r = c.post("/encode", json={"sentences": ["a"]})
            assert r.status_code == 504 and "deadline of 200 ms" in r.json()["error"]["message"], r.text
            r = c.post("/encode", json={"sentences": ["a"]}, headers={"X-Request-Timeout-Ms": "30000"})
            assert r.status_code == 200, r.text
    finally:
        server.stop()
