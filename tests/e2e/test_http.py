"""End to end against a real ``lnserve serve`` process (uvicorn on 127.0.0.1) with httpx.

One server holds every converted golden fixture (API key on, small limits); vectors through HTTP must match
the legacy goldens to <= 1e-5 in both encodings. Queue, disconnect and SIGTERM behaviour get their own
small demo-model servers with a deliberately tiny queue or a long batching wait.
"""

from __future__ import annotations

import base64
import json
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY, OE_MODELS, ST_VARIANTS, golden, inputs
from tests.e2e.engines import ENGINES, engine_args, start_timeout
from tests.e2e.server import LiveServer, start_server

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
    deadline = time.monotonic() + 30  # the line is written after the response (Ray forwards it later)
    while not (hits := _access_lines(server, "trace-123")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hits and hits[0]["status"] == 200 and hits[0]["route"] == "/models" and "duration_ms" in hits[0]


def _access_lines(server: LiveServer, request_id: str) -> list[dict[str, Any]]:
    """JSON log lines of one request; on Ray each line carries the replica's prefix before the JSON."""
    lines = [line[line.index('{"ts"') :] for line in server.log().splitlines() if '{"ts"' in line]
    return [x for x in map(json.loads, lines) if x.get("request_id") == request_id]


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
def tiny_queue(tmp_path: Path) -> Iterator[LiveServer]:
    """max_queue 1 and a 300 ms batching wait: a second concurrent request finds the queue full."""
    srv = start_server(tmp_path, env={"LNSERVE_MAX_QUEUE": "1", "LNSERVE_MAX_WAIT_MS": "300"})
    yield srv
    srv.stop()


def test_429_with_retry_after_then_disconnect_frees_the_slot(tiny_queue: LiveServer) -> None:
    url = tiny_queue.url + "/encode"
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda i: httpx.post(url, json={"sentences": [f"dog {i}"]}), range(8)))
    statuses = sorted(r.status_code for r in responses)
    assert 200 in statuses and 429 in statuses, statuses
    assert set(statuses) <= {200, 429}
    full = next(r for r in responses if r.status_code == 429)
    assert full.headers["retry-after"] == "1" and full.json()["error"]["code"] == "queue_full"

    # a client that gives up while queued is withdrawn: the next request is admitted at once
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json={"sentences": ["a cat"]}, timeout=0.1)
    time.sleep(0.05)
    assert httpx.post(url, json={"sentences": ["a dog"]}).status_code == 200
    metrics = httpx.get(tiny_queue.url + "/metrics").text
    assert 'lnserve_cancelled_total{model="demo-lngru"} 1.0' in metrics
    assert 'lnserve_rejected_total{model="demo-lngru"}' in metrics


def test_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    srv = start_server(tmp_path, env={"LNSERVE_MAX_WAIT_MS": "1500"})
    result: dict[str, httpx.Response] = {}
    sender = threading.Thread(
        target=lambda: result.update(
            r=httpx.post(srv.url + "/encode", json={"sentences": ["a dog"]}, timeout=30)
        )
    )
    sender.start()
    time.sleep(0.5)  # the request is queued, its batch waits 1.5 s for company
    srv.proc.send_signal(signal.SIGTERM)
    sender.join(30)
    assert result["r"].status_code == 200 and len(result["r"].json()["vectors"]) == 1
    # uvicorn re-raises the captured SIGTERM once it has drained and run the lifespan shutdown
    assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    assert '"msg": "shut down"' in srv.log()
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.url + "/health", timeout=1)
