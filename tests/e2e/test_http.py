"""End to end against a real ``lnserve serve`` process (uvicorn on 127.0.0.1) with httpx.

One server holds every converted golden fixture (API key on, small limits); vectors through HTTP must match
the legacy goldens to <= 1e-5 in both encodings. Queue, disconnect and SIGTERM behaviour get their own
small demo-model servers with a deliberately tiny queue or a long batching wait.

Nothing waits a fixed time for something to happen: the tests poll (logs, the queue depth in /metrics) with a
deadline. A request is held in the queue by a batching wait far longer than any test (60 s) and released by
a second request that fills its batch; a request is held in flight across SIGTERM by sending its body only
after the signal (``Expect: 100-continue`` proves the server is already waiting for it).
"""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY, OE_MODELS, ST_VARIANTS, golden, inputs
from tests.e2e.engines import ENGINES, engine_args, start_timeout
from tests.e2e.server import LiveServer, start_server
from tests.support.poll import wait_until

TOL = 1e-5
KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = {"LNSERVE_MAX_SENTENCES": "50", "LNSERVE_MAX_TOKENS": "20", "LNSERVE_MAX_BODY_BYTES": "65536"}


@pytest.fixture(scope="module", params=ENGINES)
def server(
    request: pytest.FixtureRequest, artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("http")
    models = [a for name in (*OE_MODELS, *ST_VARIANTS) for a in ("--models", str(artifacts[name]))]
    srv = start_server(
        tmp,
        *engine_args(request.param),
        *models,
        env={"LNSERVE_API_KEY": KEY, **LIMITS},
        timeout=start_timeout(request.param),
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60.0) as c:
        yield c


def _metric(server: LiveServer, name: str, model: str = "demo-lngru") -> float | None:
    """One sample of /metrics, e.g. ``lnserve_queue_depth``; None when absent."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def _close(ours: Any, gold: np.ndarray, what: str) -> None:
    ours = np.asarray(ours, dtype=np.float32)
    assert ours.shape == gold.shape, f"{what}: {ours.shape} != {gold.shape}"
    diff = float(np.abs(ours.astype(np.float64) - gold.astype(np.float64)).max())
    assert diff <= TOL, f"{what}: max |diff| {diff:.3g}"


def _b64(rows: list[str]) -> np.ndarray:
    return np.stack([np.frombuffer(base64.b64decode(r), dtype="<f4") for r in rows])


def _encode(client: httpx.Client, **body: Any) -> dict[str, Any]:
    r = client.post("/encode", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


# -- parity -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", OE_MODELS)
def test_order_embedding_parity(client: httpx.Client, name: str) -> None:
    gold, caps = golden(name), inputs()["order_embedding"]["captions"]
    out = _encode(client, model=name, sentences=caps, pretokenized=True)
    assert out["model"] == name and out["dim"] == gold["sent_emb"].shape[1]
    _close(out["vectors"], gold["sent_emb"], "sent_emb")
    assert out["token_counts"] == gold["n_steps"].tolist()
    raw = _encode(client, model=name, sentences=caps, pretokenized=True, normalize=False, encoding="base64")
    _close(_b64(raw["vectors"]), gold["sent_hidden_raw"], "sent_hidden_raw")
    images = np.load(LEGACY / "order_embedding" / "images.npy")
    r = client.post("/encode/images", json={"model": name, "features": images.tolist()})
    assert r.status_code == 200, r.text
    _close(r.json()["vectors"], gold["img_emb"], "img_emb")


def test_tei_routes_answer_with_the_default_model_to_golden_precision(client: httpx.Client) -> None:
    """TEI serves one model: the default (the first here). Its vectors are the goldens, as through /encode
    (TEI sends raw text: the captions that raw-text tokenisation leaves as they are, lowercase words)."""
    name = OE_MODELS[0]
    every = inputs()["order_embedding"]["captions"]
    rows = [i for i, c in enumerate(every) if re.fullmatch(r"[a-z]+( [a-z]+)*", c)]
    assert len(rows) >= 10
    full = golden(name)
    gold, caps = {k: full[k][rows] for k in ("sent_emb", "sent_hidden_raw")}, [every[i] for i in rows]
    r = client.post("/embed", json={"inputs": caps})
    assert r.status_code == 200, r.text
    _close(r.json(), gold["sent_emb"], "sent_emb via /embed")
    raw = client.post("/", json={"inputs": caps, "normalize": False})
    _close(raw.json(), gold["sent_hidden_raw"], "sent_hidden_raw via POST /")
    sims = client.post("/similarity", json={"inputs": {"source_sentence": caps[0], "sentences": caps}}).json()
    unit = gold["sent_emb"] / np.linalg.norm(gold["sent_emb"], axis=1, keepdims=True)
    _close(sims, unit @ unit[0], "cosine similarity")
    assert client.get("/info").json()["model_id"] == name


@pytest.mark.parametrize("name", ST_VARIANTS)
def test_skip_thoughts_parity(client: httpx.Client, name: str) -> None:
    gold, sents = golden(name), inputs()["skipthoughts"]["sentences"]
    for norm in (0, 1):
        for eos in (0, 1):
            body = {"model": name, "sentences": sents, "pretokenized": True, "normalize": bool(norm)}
            out = _encode(client, **body, eos=bool(eos), encoding="base64")
            _close(_b64(out["vectors"]), gold[f"feat_norm{norm}_eos{eos}"], f"{name} norm={norm} eos={eos}")


def test_base64_round_trip_is_exact(client: httpx.Client) -> None:
    caps = inputs()["order_embedding"]["captions"][:10]
    floats = _encode(client, model="oe_order_lngru", sentences=caps, pretokenized=True)
    b64 = _encode(client, model="oe_order_lngru", sentences=caps, pretokenized=True, encoding="base64")
    assert b64["encoding"] == "base64" and len(b64["vectors"]) == 10
    np.testing.assert_array_equal(_b64(b64["vectors"]), np.asarray(floats["vectors"], dtype=np.float32))


def test_unk_counts_say_how_many_words_the_model_does_not_know(client: httpx.Client) -> None:
    oe = _encode(client, model="oe_order_lngru", sentences=["a dog on a bus", "a zqxj dog wvkp", "zqxj"])
    assert oe["token_counts"] == [6, 5, 2] and oe["unk_counts"] == [0, 2, 1]  # eos is known
    sents = ["robots are cool", "robots zqxj"]
    st = _encode(client, model="skipthoughts_gru", sentences=sents, pretokenized=True)
    assert st["token_counts"] == [3, 2] and st["unk_counts"] == [0, 1]


# -- OpenAI-compatible --------------------------------------------------------------------------------
def test_openai_embeddings_shapes(client: httpx.Client) -> None:
    """The requests the OpenAI Python client sends: base64 by default, a string or a list."""
    texts = ["a dog on a red bus", "two people standing next to a white table"]
    native = _encode(client, model="oe_order_gru", sentences=texts)
    r = client.post(
        "/v1/embeddings", json={"input": texts, "model": "oe_order_gru", "encoding_format": "base64"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "oe_order_gru"
    assert [d["index"] for d in body["data"]] == [0, 1] and all(
        d["object"] == "embedding" for d in body["data"]
    )
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="float32") for d in body["data"]])
    _close(got, np.asarray(native["vectors"], dtype=np.float32), "openai vs /encode")
    assert body["usage"]["prompt_tokens"] == sum(native["token_counts"]) == body["usage"]["total_tokens"]

    single = client.post("/v1/embeddings", json={"input": texts[0], "model": "oe_order_gru", "user": "u1"})
    assert single.status_code == 200 and len(single.json()["data"]) == 1
    _close([single.json()["data"][0]["embedding"]], got[:1], "single string input")
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and {m["id"] for m in models["data"]} >= set(OE_MODELS)


def test_openai_errors(client: httpx.Client) -> None:
    r = client.post("/v1/embeddings", json={"input": "a dog", "model": "text-embedding-3-small"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = client.post("/v1/embeddings", json={"input": "a dog", "model": "oe_order_gru", "dimensions": 3})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
    r = client.post("/v1/embeddings", json={"input": [[1, 2, 3]], "model": "oe_order_gru"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "token_ids_unsupported"  # issue 23
    r = client.post("/v1/embeddings", json={"input": [{"a": 1}], "model": "oe_order_gru"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


# -- models, info, readiness, metrics ----------------------------------------------------------------
def test_models_and_info(client: httpx.Client) -> None:
    models = client.get("/models").json()
    assert models["default"] == OE_MODELS[0]
    by_name = {m["name"]: m for m in models["models"]}
    assert set(by_name) == {*OE_MODELS, *ST_VARIANTS}
    assert by_name["oe_order_rlngru"]["cells"] == {"sentence": "rlngru"}
    assert by_name["skipthoughts_lngru"]["family"] == "skip-thoughts"
    info = client.get("/info").json()
    assert info["ready"] is True and info["backend"] == "onnx" and info["version"]
    assert info["limits"]["max_sentences"] == 50 and info["limits"]["max_tokens"] == 20
    assert all(m["providers"] == ["CPUExecutionProvider"] and m["state"] == "ready" for m in info["models"])


def test_health_ready_metrics_need_no_key(server: LiveServer, client: httpx.Client) -> None:
    _encode(client, sentences=["a dog"])
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    ready = httpx.get(server.url + "/ready")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    text = httpx.get(server.url + "/metrics").text
    assert 'lnserve_requests_total{method="POST",route="/encode",status="200"}' in text
    for name in ("lnserve_request_duration_seconds", "lnserve_queue_wait_seconds", "lnserve_batch_size"):
        assert f"{name}_bucket" in text
    assert "lnserve_tokens_total" in text


def test_access_log_is_json_with_request_id(server: LiveServer, client: httpx.Client) -> None:
    r = client.get("/models", headers={"X-Request-ID": "trace-123"})
    assert r.headers["x-request-id"] == "trace-123"

    wait_until(
        lambda: bool(_access_lines(server, "trace-123")), "the access log line"
    )  # Ray forwards it later
    hit = _access_lines(server, "trace-123")[0]
    assert hit["status"] == 200 and hit["route"] == "/models" and "duration_ms" in hit


def _access_lines(server: LiveServer, request_id: str) -> list[dict[str, Any]]:
    """JSON log lines of one request; on Ray each line carries the replica's prefix before the JSON."""
    return [x for x in server.json_records() if x.get("request_id") == request_id]


# -- error paths ------------------------------------------------------------------------------------
def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and err["request_id"] == r.headers["x-request-id"]
    return err  # type: ignore[no-any-return]


def test_401_without_or_with_wrong_key(server: LiveServer) -> None:
    r = httpx.post(server.url + "/encode", json={"sentences": ["a dog"]})
    _error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(
        server.url + "/encode", json={"sentences": ["a"]}, headers={"Authorization": "Bearer nope"}
    )
    _error(r, 401, "unauthorized")
    _error(httpx.get(server.url + "/info"), 401, "unauthorized")


def test_404_unknown_model_and_route(client: httpx.Client) -> None:
    _error(client.post("/encode", json={"model": "nope", "sentences": ["a"]}), 404, "model_not_found")
    _error(client.post("/encode/images", json={"model": "nope", "features": [[0.0]]}), 404, "model_not_found")
    _error(client.get("/no/such/route"), 404, "not_found")


def test_413_body_too_large(client: httpx.Client) -> None:
    big = {"sentences": ["a dog " * 3000] * 10}
    _error(client.post("/encode", json=big), 413, "request_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted while streaming
        yield b'{"sentences": ["'
        for _ in range(100):
            yield b"a dog " * 200
        yield b'"]}'

    r = client.post("/encode", content=chunks(), headers={"Content-Type": "application/json"})
    _error(r, 413, "request_too_large")


def test_422_paths(client: httpx.Client) -> None:
    _error(client.post("/encode", json={"sentences": ["a"] * 51}), 422, "too_many_sentences")
    long = " ".join(["dog"] * 30)
    err = _error(client.post("/encode", json={"sentences": ["a", long]}), 422, "sentence_too_long")
    assert "sentence 1" in err["message"]
    cut = _encode(client, sentences=["a", long], truncate=True)
    assert cut["token_counts"] == [2, 20]
    _error(client.post("/encode", json={"sentences": []}), 422, "invalid_request")
    _error(client.post("/encode", json={"sentences": ["a"], "bogus": 1}), 422, "invalid_request")
    _error(client.post("/encode", json={"sentences": "a dog"}), 422, "invalid_request")
    r = client.post("/encode", content=b'{"sentences": [', headers={"Content-Type": "application/json"})
    _error(r, 422, "invalid_request")
    _error(client.post("/encode", json={"sentences": [""], "eos": False}), 422, "invalid_input")
    body = {"model": "skipthoughts_gru", "features": [[0.0] * 20]}
    _error(client.post("/encode/images", json=body), 422, "invalid_input")
    _error(client.post("/encode/images", json={"features": [[0.0] * 20, [0.0]]}), 422, "invalid_input")
    _error(client.post("/encode/images", json={"features": [[0.0] * 19]}), 422, "invalid_input")


# -- queue, disconnect, drain (demo model, own servers) -------------------------------------------------
@pytest.fixture
def held_queue(tmp_path: Path) -> Iterator[LiveServer]:
    """Room for 2 queued sentences, batches of 2, and a 60 s wait for company: a lone queued sentence stays
    queued until a second one fills its batch, however slow the machine."""
    env = {"LNSERVE_MAX_QUEUE": "2", "LNSERVE_MAX_BATCH_SIZE": "2", "LNSERVE_MAX_WAIT_MS": "60000"}
    srv = start_server(tmp_path, env=env, wait_ready=False)
    try:
        _keep_warm_up_company(srv)
        yield srv
    finally:
        srv.stop()


def _keep_warm_up_company(srv: LiveServer, timeout: float = 120.0) -> None:
    """Until /ready: whenever a lone job waits for company (the warm-up goes through the batcher), send one
    sentence to fill its batch, so start-up never sits out the 60 s wait."""
    deadline = time.monotonic() + timeout
    while httpx.get(srv.url + "/ready", timeout=10).status_code != 200:
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.log()
        if _metric(srv, "lnserve_queue_depth") == 1.0:
            company = httpx.post(srv.url + "/encode", json={"sentences": ["a red circle"]}, timeout=60)
            assert company.status_code == 200, company.text
        else:
            time.sleep(0.01)


def _post_in_background(url: str, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}
    sender = threading.Thread(target=lambda: result.update(r=httpx.post(url, json=body, timeout=120)))
    sender.start()
    return sender, result


def _send_and_keep_open(server: LiveServer, body: dict[str, Any]) -> socket.socket:
    """A raw POST /encode whose client can then go away (close the socket) while the job is queued."""
    u = urlparse(server.url)
    data = json.dumps(body).encode()
    sock = socket.create_connection((u.hostname, u.port), timeout=30)
    head = f"POST /encode HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_429_with_retry_after_then_disconnect_frees_the_slot(held_queue: LiveServer) -> None:
    url = held_queue.url + "/encode"
    queued, first = _post_in_background(url, {"sentences": ["a red circle"]})
    wait_until(lambda: _metric(held_queue, "lnserve_queue_depth") == 1.0, "the first sentence to queue")

    full = httpx.post(url, json={"sentences": ["a blue square", "a green star"]})  # 1 + 2 > max_queue
    assert full.status_code == 429 and full.headers["retry-after"] == "1"
    assert full.json()["error"]["code"] == "queue_full"
    company = httpx.post(url, json={"sentences": ["a red square"]}, timeout=60)  # fills the batch of 2
    queued.join(60)
    assert company.status_code == 200 and first["r"].status_code == 200

    # a client that goes away while queued is withdrawn at once: its room is free for the next request
    gone = _send_and_keep_open(held_queue, {"sentences": ["a cat"]})
    wait_until(lambda: _metric(held_queue, "lnserve_queue_depth") == 1.0, "the abandoned sentence to queue")
    gone.close()
    wait_until(lambda: _metric(held_queue, "lnserve_cancelled_total") == 1.0, "the withdrawal")
    assert _metric(held_queue, "lnserve_queue_depth") == 0.0
    both = httpx.post(
        url, json={"sentences": ["a dog", "a bus"]}, timeout=60
    )  # 2 rows: 429 if "a cat" stayed
    assert both.status_code == 200, both.text
    assert _metric(held_queue, "lnserve_rejected_total") == 1.0


def _read_until(sock: socket.socket, marker: bytes | None) -> bytes:
    """Read until ``marker`` arrives, or (``None``) until the server closes the connection."""
    data = b""
    while marker is None or marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            assert marker is None, f"connection closed; got {data!r}"
            break
        data += chunk
    return data


def test_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    u = urlparse(srv.url)
    body = json.dumps({"sentences": ["a dog"]}).encode()
    head = f"POST /encode HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
    with socket.create_connection((u.hostname, u.port), timeout=60) as sock:
        sock.sendall(f"{head}Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        assert _read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100")  # the app awaits our body
        srv.proc.send_signal(signal.SIGTERM)
        # uvicorn has stopped accepting and now waits (up to drain_timeout_s) for in-flight requests
        wait_until(lambda: "Waiting for connections to close" in srv.log(), "the server to start draining")
        sock.sendall(body)  # the request completes only now, during the drain: it must still be answered
        response = _read_until(sock, None)  # draining: the server closes the connection after answering
    assert response.startswith(b"HTTP/1.1 200"), response[:300]
    vectors = json.loads(response.split(b"\r\n\r\n", 1)[1])["vectors"]
    assert len(vectors) == 1
    # uvicorn re-raises the captured SIGTERM once it has drained and run the lifespan shutdown
    assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    assert '"msg": "shut down"' in srv.log()
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.url + "/health", timeout=1)
