"""Galleries and ``/retrieve`` end to end against a real ``lnserve serve`` on 127.0.0.1.

Parity: galleries built over HTTP from the fixture images / captions, queried with the golden captions /
images, give the golden error matrix ``errs`` (40 captions x 12 images) to <= 1e-5 in float32 with the
same rankings, both directions. Durability: galleries survive a restart, and a kill -9 during a bulk
insert loses no acknowledged item and shows no partial one. Plus concurrency and every documented 4xx.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lnserve.app.runtime.scoring import order_violation
from tests.conftest import LEGACY, OE_MODELS, golden, inputs
from tests.e2e.engines import ENGINES, RAY_CLUSTER, engine_args, start_timeout
from tests.e2e.ray_cluster import driver_args, ray_cluster
from tests.e2e.server import LiveServer, start_server

TOL = 1e-5
KEY = "retrieval-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")  # (12, 20) CNN features
CAPTIONS: list[str] = inputs()["order_embedding"]["captions"]  # 40, whitespace-tokenised


@pytest.fixture(scope="module", params=[*ENGINES, RAY_CLUSTER])
def server(
    request: pytest.FixtureRequest, artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    models = [a for n in (*OE_MODELS, "skipthoughts_gru") for a in ("--models", str(artifacts[n]))]
    tmp = tmp_path_factory.mktemp("retrieval")
    with ExitStack() as stack:
        args, env = [*engine_args(request.param), *models], {"LNSERVE_API_KEY": KEY}
        if request.param == "ray-cluster":  # the command of docs/scaling-out.md
            cluster = stack.enter_context(ray_cluster(tmp))
            args, env = driver_args(cluster.address, models[1::2]), {**env, **cluster.env}
        srv = start_server(tmp, *args, env=env, timeout=start_timeout(request.param))
        yield srv
        srv.stop()


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120.0) as c:
        yield c


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def _error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text


def _images_gallery(c: httpx.Client, name: str, model: str) -> None:
    _ok(c.post("/galleries", json={"name": name, "kind": "images", "model": model}), 201)
    items = [{"id": f"img{j}", "image": IMAGES[j].tolist(), "payload": {"j": j}} for j in range(len(IMAGES))]
    added = _ok(c.post(f"/galleries/{name}/items", json={"items": items}))
    assert added["ids"] == [f"img{j}" for j in range(len(IMAGES))] and added["count"] == len(IMAGES)


def _captions_gallery(c: httpx.Client, name: str, model: str) -> None:
    _ok(c.post("/galleries", json={"name": name, "kind": "captions", "model": model}), 201)
    items = [{"id": f"cap{i}", "text": t} for i, t in enumerate(CAPTIONS)]
    _ok(c.post(f"/galleries/{name}/items", json={"items": items, "pretokenized": True}))


def _assert_ranked(hits: list[dict[str, Any]], gold: np.ndarray, prefix: str, top: int | None = None) -> None:
    """Scores equal the golden row sorted best first (<= 1e-5, as float32) and the ranking is the same."""
    order = np.argsort(gold, kind="stable")[:top]  # lower is better; ties in insertion order, as the store
    assert [h["id"] for h in hits] == [f"{prefix}{i}" for i in order]
    scores = np.array([h["score"] for h in hits], dtype=np.float64)
    assert np.array_equal(scores.astype(np.float32), scores), "scores are not float32 values"
    assert float(np.abs(scores - gold[order].astype(np.float64)).max()) <= TOL


# -- parity with the golden error matrices ----------------------------------------------------------
@pytest.mark.parametrize("name", OE_MODELS)
def test_caption_queries_match_golden_errs(client: httpx.Client, name: str) -> None:
    errs = golden(name)["errs"]  # (40 captions, 12 images), the model's own method
    _images_gallery(client, f"ims-{name}", name)
    queries = [{"text": t} for t in CAPTIONS]
    body = {"gallery": f"ims-{name}", "queries": queries, "k": 12, "pretokenized": True}
    out = _ok(client.post("/retrieve", json=body))
    assert out["gallery"] == f"ims-{name}" and out["model"] == name  # no model named: the gallery's own
    metric = "negative_cosine" if name == "oe_symmetric_gru" else "order_violation"
    assert out["score"]["metric"] == metric and out["score"]["direction"] == "lower_is_better"
    assert len(out["results"]) == len(CAPTIONS)
    for i, hits in enumerate(out["results"]):
        _assert_ranked(hits, errs[i], "img")
    assert out["results"][0][0]["payload"] == {"j": int(np.argmin(errs[0]))}
    one = _ok(client.post("/retrieve", json={**body, "queries": None, "query": queries[3], "k": 5}))
    _assert_ranked(one["results"], errs[3], "img", top=5)  # one query: a flat list


@pytest.mark.parametrize("name", OE_MODELS)
def test_image_queries_match_golden_errs_columns(client: httpx.Client, name: str) -> None:
    errs = golden(name)["errs"]
    _captions_gallery(client, f"caps-{name}", name)
    body = {
        "gallery": f"caps-{name}",
        "model": name,
        "k": 40,
        "queries": [{"image": r} for r in IMAGES.tolist()],
    }
    out = _ok(client.post("/retrieve", json=body))
    for j, hits in enumerate(out["results"]):
        _assert_ranked(hits, errs[:, j], "cap")
    assert out["results"][0][0]["payload"] == {"text": CAPTIONS[int(np.argmin(errs[:, 0]))]}
    # a stored image as the query, from an images gallery of the same model: as good as its features
    _images_gallery(client, f"src-{name}", name)
    by_id = {"gallery": f"caps-{name}", "k": 40, "query": {"id": "img5", "gallery": f"src-{name}"}}
    _assert_ranked(_ok(client.post("/retrieve", json=by_id))["results"], errs[:, 5], "cap")


def test_order_and_cosine_directions(client: httpx.Client) -> None:
    """Order violation and negative cosine: lower is better, ascending; skip-thoughts cosine: descending."""
    for name in ("oe_order_gru", "oe_symmetric_gru"):
        _images_gallery(client, f"dir-{name}", name)
        hits = _ok(client.post("/retrieve", json={"gallery": f"dir-{name}", "query": {"text": "a dog"}}))
        scores = [h["score"] for h in hits["results"]]
        assert scores == sorted(scores) and hits["score"]["direction"] == "lower_is_better"
    assert min(scores) >= -1.0 - TOL  # negative cosine of unit vectors
    _ok(client.post("/galleries", json={"name": "st", "kind": "captions", "model": "skipthoughts_gru"}), 201)
    texts = ["a dog runs", "a cat sleeps", "two men talk", "a dog runs fast"]
    items = [{"id": str(i), "text": t} for i, t in enumerate(texts)]
    _ok(client.post("/galleries/st/items", json={"items": items}))
    out = _ok(client.post("/retrieve", json={"gallery": "st", "query": {"text": "a cat sleeps"}, "k": 4}))
    assert out["score"] == {**out["score"], "metric": "cosine", "direction": "higher_is_better"}
    scores = [h["score"] for h in out["results"]]
    assert scores == sorted(scores, reverse=True)
    assert out["results"][0]["id"] == "1" and abs(scores[0] - 1.0) <= TOL
    by_id = _ok(client.post("/retrieve", json={"gallery": "st", "query": {"id": "1"}, "k": 4}))["results"]
    assert [h["id"] for h in by_id] == [h["id"] for h in out["results"]]
    assert np.allclose([h["score"] for h in by_id], scores, rtol=0, atol=TOL)


# -- the rest of the API ----------------------------------------------------------------------------
def test_list_get_delete_and_info(client: httpx.Client) -> None:
    _images_gallery(client, "listed", "oe_order_lngru")
    listed = {g["name"]: g for g in _ok(client.get("/galleries"))["galleries"]}
    assert listed["listed"]["count"] == 12 and listed["listed"]["score"]["direction"] == "lower_is_better"
    one = _ok(client.get("/galleries/listed"))
    assert (
        one["kind"] == "images"
        and one["model"] == "oe_order_lngru"
        and one["dim"] == golden("oe_order_lngru")["img_emb"].shape[1]
    )
    assert _ok(client.get("/galleries/listed/items/img3")) == {"id": "img3", "payload": {"j": 3}}
    _ok(client.delete("/galleries/listed/items/img3"), 204)
    _error(client.get("/galleries/listed/items/img3"), 404, "item_not_found")
    hits = _ok(client.post("/retrieve", json={"gallery": "listed", "query": {"text": "a dog"}, "k": 100}))
    assert len(hits["results"]) == 11 and "img3" not in {h["id"] for h in hits["results"]}
    info = {g["name"]: g for g in _ok(client.get("/info"))["galleries"]}
    want = {"name": "listed", "state": "ok", "reason": None, "kind": "images", "model": "oe_order_lngru"}
    assert info["listed"] == {**want, "count": 11, "metric": "order_violation"}


def test_bad_inputs(client: httpx.Client) -> None:
    _images_gallery(client, "bad", "oe_order_gru")
    q = {"text": "a dog"}
    _error(client.post("/retrieve", json={"gallery": "nope", "query": q}), 404, "gallery_not_found")
    _error(client.post("/galleries/nope/items", json={"items": [q]}), 404, "gallery_not_found")
    _error(client.get("/galleries/nope"), 404, "gallery_not_found")
    _error(client.post("/retrieve", json={"gallery": "bad", "query": q, "model": "oe_order_lngru"}), 422,
           "gallery_mismatch")  # fmt: skip
    _error(
        client.post("/retrieve", json={"gallery": "bad", "query": q, "model": "zzz"}), 404, "model_not_found"
    )
    image = {"image": IMAGES[0].tolist()}
    _error(client.post("/retrieve", json={"gallery": "bad", "query": image}), 422, "gallery_mismatch")
    _error(client.post("/galleries/bad/items", json={"items": [q]}), 422, "gallery_mismatch")
    _error(client.post("/galleries", json={"name": "st-ims", "kind": "images", "model": "skipthoughts_gru"}),
           422, "gallery_mismatch")  # fmt: skip
    for k in (0, 1001, -1):
        _error(client.post("/retrieve", json={"gallery": "bad", "query": q, "k": k}), 422, "invalid_request")
    _error(
        client.post("/retrieve", json={"gallery": "bad", "query": q, "queries": [q]}), 422, "invalid_request"
    )
    _error(client.post("/retrieve", json={"gallery": "bad"}), 422, "invalid_request")
    narrow = {"image": IMAGES[0, :19].tolist()}
    _error(client.post("/galleries/bad/items", json={"items": [narrow]}), 422, "invalid_input")
    _ok(
        client.post("/galleries", json={"name": "bad-caps", "kind": "captions", "model": "oe_order_gru"}), 201
    )
    _error(client.post("/retrieve", json={"gallery": "bad-caps", "query": narrow}), 422, "invalid_input")
    _error(client.post("/galleries", json={"name": "bad", "kind": "images", "model": "oe_order_gru"}), 409,
           "gallery_exists")  # fmt: skip
    _error(client.post("/galleries", json={"name": "../x", "kind": "images"}), 422, "invalid_request")
    _error(
        client.post("/galleries/bad/items", json={"items": [{**image, "id": "img0"}]}), 409, "duplicate_item"
    )
    for item in (
        '{"text": "a dog \\ud800"}',
        '{"id": "\\ud800", "text": "a dog"}',
        '{"text": "a", "payload": "\\udfff"}',
    ):
        body = f'{{"items": [{item}]}}'  # a lone surrogate, escaped as JSON allows: refused before any write
        r = client.post(
            "/galleries/bad-caps/items", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422, r.text  # pydantic refuses some fields itself (invalid_request)
        assert r.json()["error"]["code"] in ("invalid_input", "invalid_request")
    assert client.get("/galleries/bad-caps").json()["count"] == 0
    _error(client.delete("/galleries/bad/items/none"), 404, "item_not_found")
    _error(client.post("/retrieve", json={"gallery": "bad", "query": {"id": "none"}}), 404, "item_not_found")
    _error(
        client.post("/galleries/bad/items", json={"items": [{"text": "x", **image}]}), 422, "invalid_request"
    )
    assert (
        httpx.post(client.base_url.join("/retrieve"), json={"gallery": "bad", "query": q}).status_code == 401
    )
    assert _ok(client.get("/galleries/bad"))["count"] == 12  # nothing above added anything


def test_concurrent_inserts_and_queries(client: httpx.Client) -> None:
    _ok(client.post("/galleries", json={"name": "busy", "kind": "captions", "model": "oe_order_gru"}), 201)
    words = CAPTIONS[:10]

    def insert(w: int) -> list[str]:
        ids = []
        for b in range(6):
            items = [{"id": f"w{w}-{b}-{i}", "text": words[(w + b + i) % 10]} for i in range(5)]
            ids += _ok(client.post("/galleries/busy/items", json={"items": items, "pretokenized": True}))[
                "ids"
            ]
        return ids

    def query(r: int) -> int:
        for _ in range(8):
            out = _ok(
                client.post("/retrieve", json={"gallery": "busy", "query": {"text": words[r]}, "k": 50})
            )
            scores = [h["score"] for h in out["results"]]
            assert scores == sorted(scores)
        return len(out["results"])

    with ThreadPoolExecutor(8) as pool:
        writers = [pool.submit(insert, w) for w in range(4)]
        readers = [pool.submit(query, r) for r in range(4)]
        ids = [i for f in writers for i in f.result()]
        assert all(f.result() >= 0 for f in readers)
    assert len(set(ids)) == 120 and _ok(client.get("/galleries/busy"))["count"] == 120
    out = _ok(client.post("/retrieve", json={"gallery": "busy", "query": {"text": words[0]}, "k": 1000}))
    assert {h["id"] for h in out["results"]} == set(ids)


# -- durability -------------------------------------------------------------------------------------
def _single_model_server(tmp: Path, artifacts: dict[str, Path]) -> LiveServer:
    # numpy scorer: these servers test storage, and compiling the kernel in each would cost CPU
    return start_server(tmp, "--models", str(artifacts["oe_order_gru"]), env={"LNSERVE_SCORER": "numpy"})


def test_galleries_survive_a_restart(artifacts: dict[str, Path], tmp_path: Path) -> None:
    first = _single_model_server(tmp_path, artifacts)
    try:
        with httpx.Client(base_url=first.url, timeout=60.0) as c:
            _images_gallery(c, "kept", "oe_order_gru")
            _ok(c.delete("/galleries/kept/items/img0"), 204)
            before = _ok(c.post("/retrieve", json={"gallery": "kept", "query": {"text": "a dog"}, "k": 20}))
    finally:
        first.stop()  # SIGTERM: a graceful shutdown
    second = _single_model_server(tmp_path, artifacts)
    try:
        with httpx.Client(base_url=second.url, timeout=60.0) as c:
            info = _ok(c.get("/info"))["galleries"]
            assert [(g["name"], g["count"]) for g in info] == [("kept", 11)]
            after = _ok(c.post("/retrieve", json={"gallery": "kept", "query": {"text": "a dog"}, "k": 20}))
            assert after == before
    finally:
        second.stop()


def _features(batch: int, n: int) -> np.ndarray:
    return np.random.default_rng(batch).normal(size=(n, IMAGES.shape[1])).astype(np.float32)


def test_kill_9_during_bulk_insert_keeps_every_acknowledged_item(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    batch_size = 25
    srv = _single_model_server(tmp_path, artifacts)
    acked: list[str] = []
    with httpx.Client(base_url=srv.url, timeout=60.0) as c:
        _ok(c.post("/galleries", json={"name": "bulk", "kind": "images"}), 201)

    def bulk() -> None:
        with httpx.Client(base_url=srv.url, timeout=60.0) as c:
            for b in range(100_000):
                feats = _features(b, batch_size).tolist()
                items = [
                    {"id": f"b{b}-{i}", "image": f, "payload": {"b": b, "i": i}} for i, f in enumerate(feats)
                ]
                try:
                    r = c.post("/galleries/bulk/items", json={"items": items})
                except httpx.TransportError:
                    return  # the server died mid-request: this batch was never acknowledged
                assert r.status_code == 200, r.text
                acked.extend(r.json()["ids"])

    writer = threading.Thread(target=bulk)
    writer.start()
    while len(acked) < 10 * batch_size and writer.is_alive():
        threading.Event().wait(0.01)
    srv.proc.kill()  # SIGKILL, most likely mid-insert
    srv.proc.wait()
    writer.join(60)
    assert not writer.is_alive() and len(acked) >= 10 * batch_size

    again = _single_model_server(tmp_path, artifacts)
    try:
        with httpx.Client(base_url=again.url, timeout=60.0) as c:
            count = _ok(c.get("/galleries/bulk"))["count"]
            assert count - len(acked) in (0, batch_size)  # at most the in-flight batch, and all of it
            out = _ok(c.post("/retrieve", json={"gallery": "bulk", "query": {"text": "a dog"}, "k": 1000}))
            hits = {h["id"]: h for h in out["results"]}
            assert len(hits) == count and set(acked) <= set(hits)
            batches = sorted({h["payload"]["b"] for h in hits.values()})
            assert batches == list(range(count // batch_size))  # whole batches only, in order
            # no torn vector: every stored item scores exactly as its features do when encoded afresh
            text = _ok(c.post("/encode", json={"sentences": ["a dog"]}))["vectors"]
            for b in batches:
                ims = _ok(c.post("/encode/images", json={"features": _features(b, batch_size).tolist()}))[
                    "vectors"
                ]
                want = order_violation(np.asarray(text, np.float32), np.asarray(ims, np.float32))[0]
                got = [hits[f"b{b}-{i}"]["score"] for i in range(batch_size)]
                assert np.abs(np.asarray(got) - want).max() <= TOL
                assert all(hits[f"b{b}-{i}"]["payload"] == {"b": b, "i": i} for i in range(batch_size))
            # the store drops any unacknowledged tail on the next write
            more = [{"id": "after", "image": IMAGES[0].tolist()}]
            _ok(c.post("/galleries/bulk/items", json={"items": more}))
            assert _ok(c.get("/galleries/bulk"))["count"] == count + 1
    finally:
        again.stop()
