"""Model faults at run time, against a real ``lnserve serve`` with crafted models (``tests/support``):
vectors that are not finite, a session error (500, keep-alive kept, the model reported failed), and counts
that must be integers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.e2e.rawhttp import RawConnection
from tests.e2e.server import LiveServer, start_server
from tests.support.crafted_models import (
    SILENT_WORD,
    batch_of_one_model,
    silent_word_model,
    zero_image_bias_model,
)

DIM_IMAGE = 120


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("crafted")
    silent, one = silent_word_model(tmp / "silent"), batch_of_one_model(tmp / "one")
    zero = zero_image_bias_model(tmp / "zero")
    srv = start_server(tmp, "--models", str(silent), "--models", str(one), "--models", str(zero))
    yield srv
    srv.stop()


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["request_id"] == r.headers["x-request-id"], err
    return str(err["message"])


@pytest.mark.parametrize("value", [3e38, 1e37, 1e20])
def test_image_features_that_overflow_are_a_422_naming_the_row(crafted: LiveServer, value: float) -> None:
    body = {"model": "silent-word", "features": [[0.5] * DIM_IMAGE, [value] * DIM_IMAGE]}
    r = httpx.post(crafted.url + "/encode/images", json=body, timeout=60)
    assert _error(r, 422, "invalid_input").startswith("feature row 1 cannot be encoded")


def test_a_zero_bias_model_warms_up_and_a_zero_row_is_a_422(crafted: LiveServer) -> None:
    """The warm-up image must not be a row without a direction (it stopped such a model from loading)."""
    assert httpx.get(crafted.url + "/ready").json()["models"]["zero-image-bias"] == "ready"
    body = {"model": "zero-image-bias", "features": [[1.0] * DIM_IMAGE, [0.0] * DIM_IMAGE]}
    r = httpx.post(crafted.url + "/encode/images", json=body, timeout=60)
    assert _error(r, 422, "invalid_input").startswith("feature row 1 cannot be encoded")


def test_a_sentence_without_a_direction_is_a_422_naming_it(crafted: LiveServer) -> None:
    """The silent word keeps the state at zero: its unit vector does not exist (it was a row of nulls)."""
    body = {"model": "silent-word", "sentences": ["a red circle", SILENT_WORD]}
    r = httpx.post(crafted.url + "/encode", json=body, timeout=60)
    assert _error(r, 422, "invalid_input").startswith("sentence 1 cannot be encoded")
    body = {"model": "silent-word", "input": ["a blue square", f"{SILENT_WORD} {SILENT_WORD}"]}
    r = httpx.post(crafted.url + "/v1/embeddings", json=body, timeout=60)
    assert _error(r, 422, "invalid_input").startswith("sentence 1 cannot be encoded")
    ok = httpx.post(crafted.url + "/encode", json={"model": "silent-word", "sentences": ["a red circle"]})
    assert ok.status_code == 200 and np.isfinite(np.asarray(ok.json()["vectors"], dtype=np.float32)).all()


@pytest.mark.parametrize("k", [True, "5", 5.0])
def test_k_must_be_an_integer(crafted: LiveServer, k: object) -> None:
    body = {"gallery": "no-such-gallery", "query": {"text": "a red circle"}, "k": k}
    r = httpx.post(crafted.url + "/retrieve", json=body, timeout=60)
    assert "k:" in _error(r, 422, "invalid_request")
    body["k"] = 5  # an integer passes the schema and reaches the gallery lookup
    _error(httpx.post(crafted.url + "/retrieve", json=body, timeout=60), 404, "gallery_not_found")


@pytest.mark.parametrize("dimensions", [True, "64", 64.0])
def test_dimensions_must_be_an_integer(crafted: LiveServer, dimensions: object) -> None:
    body = {"model": "silent-word", "input": "a red circle", "dimensions": dimensions}
    r = httpx.post(crafted.url + "/v1/embeddings", json=body, timeout=60)
    assert "dimensions" in _error(r, 422, "invalid_request")
    body["dimensions"] = 64
    assert httpx.post(crafted.url + "/v1/embeddings", json=body, timeout=60).status_code == 200


def test_a_session_error_is_a_json_500_on_a_usable_connection_and_marks_the_model_failed(
    crafted: LiveServer,
) -> None:
    """Last in this module: it leaves the server reporting a failed model."""
    assert httpx.get(crafted.url + "/health").json() == {"status": "ok"}
    two = json.dumps({"model": "batch-of-one", "sentences": ["a red circle", "a blue square"]}).encode()
    with RawConnection(crafted.url) as conn:
        r = conn.request("POST", "/encode", two)
        assert r.status == 500, r.body
        err = r.json()["error"]
        assert err["code"] == "internal_error" and err["request_id"] == r.headers["x-request-id"]
        assert r.headers.get("connection", "keep-alive").lower() != "close"
        again = conn.request("GET", "/models")  # the same keep-alive connection
        assert again.status == 200 and {m["name"] for m in again.json()["models"]} >= {"batch-of-one"}

    ready = httpx.get(crafted.url + "/ready")
    assert ready.status_code == 503
    models = {"silent-word": "ready", "batch-of-one": "failed", "zero-image-bias": "ready"}
    assert ready.json()["models"] == models
    assert ready.json()["errors"]["batch-of-one"].startswith("run time: ")
    health = httpx.get(crafted.url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert health.json()["errors"]["batch-of-one"].startswith("run time: ")
    assert '"model batch-of-one failed: run time: ' in crafted.log()
