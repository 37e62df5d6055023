"""``lnserve serve --ray`` end to end: a real local Ray instance (127.0.0.1) running 2 encoding replicas and
2 gallery shards, driven over HTTP on loopback, next to a single-process ``lnserve serve`` on the same models.

Covered here (the shared HTTP and retrieval suites also run against a Ray-served instance): golden parity,
sharded retrieval equal to one store (same ids, scores and tie order), a write through one replica read
through the other, metrics summed over replicas, a gallery damaged on one shard before start-up quarantined
as a whole while the rest serves (and what crashed creates left on each shard cleaned), and a replica killed
with SIGKILL under load (every request answered 200 or 503, or failed in transit and so never acknowledged;
every acknowledged item still there; the replica replaced).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lnserve.app.galleries.store import ModelRef
from lnserve.app.scale.shard_store import ShardStore, shard_root
from lnserve.converters.artifact import read_artifact
from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.e2e.server import LiveServer, start_server
from tests.support.poll import wait_until

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

TOL = 1e-5
MODELS = ("oe_order_lngru", "oe_symmetric_gru")
IMAGES = np.load(LEGACY / "order_embedding" / "images.npy")  # (12, 20)
CAPTIONS: list[str] = inputs()["order_embedding"]["captions"]  # 40
RAY_ARGS = ("--ray", "--replicas", "2", "--shards", "2")
ENV = {"LNSERVE_SCORER": "numpy"}


def ray_args(*extra: str) -> tuple[str, ...]:
    return (*RAY_ARGS, *extra)


LEFTOVERS = (".x.creating-crashed", ".y.removed-0")


def _plant(root: Path, artifact: Path) -> None:
    """What the Ray service finds at start-up: galleries ``intact`` and ``rotten`` (items 0-3 on shard 0,
    4-7 on shard 1, as the coordinator places two batches), a bit flipped in ``rotten``'s rows on shard 1
    (only the start-up verification can find it), and what crashed creates and removes left on each shard."""
    ref = ModelRef.from_artifact(read_artifact(artifact))
    vecs = np.abs(np.random.default_rng(0).normal(size=(8, ref.dim))).astype(np.float32)
    for name in ("intact", "rotten"):
        parts = [ShardStore(shard_root(root, i, 2), scorer="numpy") for i in range(2)]
        for part in reversed(parts):  # shard 0 last: the commit point
            part.create(name, kind="images", model=ref)
        for i, part in enumerate(parts):
            rows = range(4 * i, 4 * i + 4)
            part.add_placed(name, vecs[rows], ids=[f"{name}-{j}" for j in rows], payloads=None, model=ref,
                            global_start=4 * i)  # fmt: skip
    rotten = shard_root(root, 1, 2) / "rotten" / "vectors.f32"
    data = bytearray(rotten.read_bytes())
    data[4 * ref.dim + 3] ^= 0x10  # row 1 of the part (item rotten-5)
    rotten.write_bytes(bytes(data))
    for i in range(2):
        for leftover in LEFTOVERS:
            (shard_root(root, i, 2) / leftover).mkdir()
        (shard_root(root, i, 2) / LEFTOVERS[0] / "write.lock").touch()


@pytest.fixture(scope="module")
def servers(
    artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, LiveServer]]:
    models = [a for name in MODELS for a in ("--models", str(artifacts[name]))]
    ray_tmp = tmp_path_factory.mktemp("ray")
    _plant(ray_tmp / "galleries", artifacts[MODELS[0]])
    ray = start_server(ray_tmp, *ray_args(*models), env=ENV, timeout=300)
    try:
        single = start_server(tmp_path_factory.mktemp("single"), *models, env=ENV)
    except BaseException:
        ray.stop()
        raise
    yield ray, single
    single.stop()
    assert ray.stop(timeout=60) in (0, -signal.SIGTERM), ray.log()[-3000:]


@pytest.fixture(scope="module")
def ray_client(servers: tuple[LiveServer, LiveServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=servers[0].url, timeout=120.0) as c:
        yield c


@pytest.fixture(scope="module")
def single_client(servers: tuple[LiveServer, LiveServer]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=servers[1].url, timeout=120.0) as c:
        yield c


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def test_info_reports_the_engine(ray_client: httpx.Client, single_client: httpx.Client) -> None:
    engine = _ok(ray_client.get("/info"))["engine"]
    assert engine["name"] == "ray" and engine["replicas"] == 2 and engine["shards"] == 2 and engine["replica"]
    assert _ok(single_client.get("/info"))["engine"] == {
        "name": "process", "replicas": 1, "shards": 1, "replica": None
    }  # fmt: skip


def test_encode_parity_with_goldens(ray_client: httpx.Client) -> None:
    for name in MODELS:
        gold, caps = golden(name), inputs()["order_embedding"]["captions"]
        for _ in range(4):  # several requests: both replicas answer some
            out = _ok(
                ray_client.post("/encode", json={"model": name, "sentences": caps, "pretokenized": True})
            )
            diff = np.abs(np.asarray(out["vectors"], dtype=np.float64) - gold["sent_emb"]).max()
            assert diff <= TOL, f"{name}: {diff}"
        ims = _ok(ray_client.post("/encode/images", json={"model": name, "features": IMAGES.tolist()}))
        assert np.abs(np.asarray(ims["vectors"]) - gold["img_emb"]).max() <= TOL


def _build(c: httpx.Client, name: str, model: str) -> None:
    """The same writes on both servers: several batches (both shards get some), planted exact duplicates
    (ties across shards) and a deleted item (a tombstone, which still counts in positions)."""
    _ok(c.post("/galleries", json={"name": name, "kind": "images", "model": model}), 201)
    rows = np.concatenate([IMAGES, IMAGES[:4], IMAGES[::3], IMAGES[5:9], IMAGES])  # 12 + 4 + 4 + 4 + 12
    for b, start in enumerate(range(0, len(rows), 5)):
        items = [
            {"id": f"{name}-{start + i}", "image": r.tolist(), "payload": {"b": b}}
            for i, r in enumerate(rows[start : start + 5])
        ]
        _ok(c.post(f"/galleries/{name}/items", json={"items": items}))
    _ok(c.delete(f"/galleries/{name}/items/{name}-3"), 204)


@pytest.mark.parametrize("model", MODELS)
def test_sharded_retrieval_equals_one_store(
    servers: tuple[LiveServer, LiveServer], ray_client: httpx.Client, single_client: httpx.Client, model: str
) -> None:
    name = f"same-{model}"
    for c in (ray_client, single_client):
        _build(c, name, model)
    ray_root = Path(servers[0].log_path).parent / "galleries"
    for shard in ("shard-0-of-2", "shard-1-of-2"):  # both shards hold part of the gallery
        assert (ray_root / shard / name / "vectors.f32").stat().st_size > 0
    assert (
        _ok(ray_client.get(f"/galleries/{name}"))["count"]
        == _ok(single_client.get(f"/galleries/{name}"))["count"]
    )
    for k in (1, 3, 10, 1000):
        body = {"gallery": name, "queries": [{"text": t} for t in CAPTIONS], "k": k, "pretokenized": True}
        ours, theirs = (
            _ok(ray_client.post("/retrieve", json=body)),
            _ok(single_client.post("/retrieve", json=body)),
        )
        # every metric sums in a fixed order (runtime.retrieval.LANES): identical floats, ids and tie order
        assert ours == theirs, (k, ours["score"]["metric"])


def _replica(r: httpx.Response) -> str:
    return r.headers["x-lnserve-replica"]


def test_a_write_through_one_replica_is_read_through_the_other(ray_client: httpx.Client) -> None:
    _ok(ray_client.post("/galleries", json={"name": "shared", "kind": "images", "model": MODELS[0]}), 201)
    seen: set[str] = set()
    for i in range(6):
        r = ray_client.post(
            "/galleries/shared/items", json={"items": [{"id": f"x{i}", "image": IMAGES[i].tolist()}]}
        )
        _ok(r)
        writer = _replica(r)
        for _ in range(200):  # routing is randomised: poll (bounded) until the other replica answers
            got = ray_client.get(f"/galleries/shared/items/x{i}")
            assert got.status_code == 200, got.text  # every replica sees it at once
            if _replica(got) != writer:
                seen.add(writer)
                break
        else:
            pytest.fail("one replica answered 200 requests in a row")
    assert _ok(ray_client.get("/galleries/shared"))["count"] == 6
    assert len(seen) >= 1


def test_metrics_are_summed_over_replicas(ray_client: httpx.Client) -> None:
    def encoded() -> float:
        text = ray_client.get("/metrics").text
        line = 'lnserve_requests_total{method="POST",route="/encode",status="200"} '
        return sum(float(x.split(" ")[-1]) for x in text.splitlines() if x.startswith(line))

    before = encoded()
    answered = {_replica(ray_client.post("/encode", json={"sentences": [f"dog {i}"]})) for i in range(20)}
    assert encoded() - before == 20
    assert len(answered) == 2  # both replicas served some: the sum covers both


def test_a_gallery_damaged_on_one_shard_is_quarantined_while_the_rest_serves(
    servers: tuple[LiveServer, LiveServer], ray_client: httpx.Client
) -> None:
    listed = {g["name"]: g for g in _ok(ray_client.get("/galleries"))["galleries"]}
    summary = {g["name"]: g for g in _ok(ray_client.get("/info"))["galleries"]}
    for entry in (listed["rotten"], summary["rotten"]):
        assert entry["state"] == "corrupt", entry
        assert "rows 0-3 do not match their checksum" in entry["reason"], entry  # the part's own rows
        assert entry["reason"].endswith("(in shard-1-of-2)"), entry  # where to check and repair
    assert listed["intact"]["state"] == "ok" and listed["intact"]["count"] == 8
    assert summary["rotten"]["count"] == 8  # what could still be read, of both shards
    item = {"items": [{"id": "new", "image": IMAGES[0].tolist()}]}
    calls = [  # the part on shard 0 (items rotten-0..3) is refused too: the gallery is one
        ray_client.post("/retrieve", json={"gallery": "rotten", "query": {"text": "a dog"}}),
        ray_client.post("/galleries/rotten/items", json=item),
        ray_client.get("/galleries/rotten"),
        ray_client.get("/galleries/rotten/items/rotten-0"),
        ray_client.delete("/galleries/rotten/items/rotten-1"),
        ray_client.post(
            "/retrieve", json={"gallery": "intact", "query": {"id": "rotten-0", "gallery": "rotten"}}
        ),
    ]
    for r in calls:
        assert r.status_code == 503, (r.request.url, r.text)
        error = r.json()["error"]
        assert error["code"] == "gallery_corrupt" and error["request_id"], error
        assert "do not match their checksum" in error["message"], error
        assert error["message"].endswith("(in shard-1-of-2)"), error
    out = _ok(ray_client.post("/retrieve", json={"gallery": "intact", "query": {"text": "a dog"}, "k": 8}))
    assert sorted(h["id"] for h in out["results"]) == [f"intact-{j}" for j in range(8)]
    assert _ok(ray_client.post("/galleries/intact/items", json=item))["count"] == 9
    root = Path(servers[0].log_path).parent / "galleries"
    assert not [p for i in range(2) for p in shard_root(root, i, 2).iterdir() if p.name in LEFTOVERS]
    deadline = time.monotonic() + 60  # replica log lines reach the driver's log asynchronously
    while "gallery rotten is corrupt and quarantined" not in servers[0].log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "gallery rotten is corrupt and quarantined" in servers[0].log()


def test_a_clients_forwarded_address_is_not_believed_behind_serves_proxy(
    servers: tuple[LiveServer, LiveServer], ray_client: httpx.Client
) -> None:
    """Serve's proxy is a uvicorn that believed ``X-Forwarded-For`` from 127.0.0.1 (its default): a local
    client could pass as any address, in the replicas' access log and against the per-client body bound.
    With no trusted proxy configured the replica sees the peer (tests/e2e/test_bodies_in_flight.py has the
    table for ``lnserve serve``)."""
    rid = uuid.uuid4().hex
    headers = {"X-Forwarded-For": "198.51.100.7", "X-Request-ID": rid}
    assert ray_client.post("/encode", json={"sentences": ["a dog"]}, headers=headers).status_code == 200

    def clients() -> list[object]:
        return [r.get("client") for r in servers[0].json_records() if r.get("request_id") == rid]

    wait_until(lambda: bool(clients()), "the replica's access-log line")  # Ray forwards it later
    assert clients() == ["127.0.0.1"]


def test_every_replica_log_line_is_printed(
    servers: tuple[LiveServer, LiveServer], ray_client: httpx.Client
) -> None:
    """Ray merges log lines of one pattern (numbers ignored) from several processes into "[repeated 2x across
    cluster]" unless RAY_DEDUP_LOGS=0 when ray is imported; ``serve --ray`` sets it, so nothing may import ray
    before (the missing-extra check once did, and access-log lines of one replica were lost)."""
    rids = [uuid.uuid4().hex for _ in range(8)]
    for rid in rids:
        r = ray_client.post("/encode", json={"sentences": ["a dog"]}, headers={"X-Request-ID": rid})
        assert r.status_code == 200

    def seen() -> set[object]:
        return {r.get("request_id") for r in servers[0].json_records()}

    wait_until(lambda: set(rids) <= seen(), "every request's access-log line")
    assert "across cluster]" not in servers[0].log()


def test_concurrent_clients_behind_one_address_are_all_served(ray_client: httpx.Client) -> None:
    """32 clients from one address (a gateway, a batch job) behind Serve's proxy: every body reaches a
    replica through calls to the proxy, so none is there at once; the per-client bound on bodies arriving
    (8) refused about half of these with 429 before the replicas gave bodies a grace to arrive. (Threads,
    not asyncio.run: this process's implicit event loop, which a library created, must stay referenced.)"""
    start = threading.Barrier(32)

    def client(i: int) -> list[int]:
        with httpx.Client(base_url=ray_client.base_url, timeout=120.0) as c:
            start.wait(60)
            sentences = [[CAPTIONS[(i + k) % len(CAPTIONS)]] for k in range(4)]
            return [c.post("/encode", json={"sentences": s}).status_code for s in sentences]

    with ThreadPoolExecutor(32) as pool:
        statuses = [code for codes in pool.map(client, range(32)) for code in codes]
    assert statuses == [200] * 128, {code: statuses.count(code) for code in set(statuses)}


def test_replica_killed_under_load(ray_client: httpx.Client) -> None:
    pids: dict[str, int] = {}
    seen_by = time.monotonic() + 120  # by time: right after a load Serve's router may favour one replica
    while len(pids) < 2 and time.monotonic() < seen_by:
        engine = _ok(ray_client.get("/info"))["engine"]
        pids[engine["replica"]] = engine["pid"]
    assert len(pids) == 2, pids
    _ok(ray_client.post("/galleries", json={"name": "load", "kind": "images", "model": MODELS[0]}), 201)
    acked: list[str] = []
    statuses: list[int] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        with httpx.Client(base_url=ray_client.base_url, timeout=60.0) as c:
            b = 0
            while not stop.is_set():
                items = [{"id": f"w{w}-{b}-{i}", "image": IMAGES[i].tolist()} for i in range(3)]
                b += 1
                try:
                    r = c.post("/galleries/load/items", json={"items": items})
                except httpx.TransportError:
                    continue  # failed in transit: never acknowledged
                statuses.append(r.status_code)
                if r.status_code == 200:
                    acked.extend(r.json()["ids"])

    def encoder() -> None:
        with httpx.Client(base_url=ray_client.base_url, timeout=60.0) as c:
            while not stop.is_set():
                try:
                    statuses.append(c.post("/encode", json={"sentences": ["a dog", "a cat"]}).status_code)
                except httpx.TransportError:
                    continue

    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(writer, 0), pool.submit(writer, 1), pool.submit(encoder), pool.submit(encoder)]
        deadline = time.monotonic() + 60
        while len(acked) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        victim = next(iter(pids))
        os.kill(pids[victim], signal.SIGKILL)
        killed_at = len(statuses)
        replaced = False
        while time.monotonic() < deadline + 120 and not replaced:
            try:
                engine = httpx.get(f"{ray_client.base_url}/info", timeout=10).json()["engine"]
            except (httpx.TransportError, ValueError, KeyError):
                continue
            replaced = engine["replica"] not in pids
        after = len(statuses)
        while len(statuses) < after + 20 and time.monotonic() < deadline + 180:
            time.sleep(0.01)  # the replaced service keeps answering under the same load
        stop.set()
        for j in jobs:
            j.result()
    assert replaced, "the killed replica was not replaced"
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    assert statuses[killed_at:].count(200) >= 20
    count = _ok(ray_client.get("/galleries/load"))["count"]
    out = _ok(ray_client.post("/retrieve", json={"gallery": "load", "query": {"text": "a dog"}, "k": 1000}))
    stored = {h["id"] for h in out["results"]}
    assert set(acked) <= stored and len(stored) == count  # nothing acknowledged was lost
    assert count - len(acked) <= 3 * 2  # at most each writer's one in-flight batch, committed unacknowledged


def test_ray_flags_need_ray_and_consistent_bounds() -> None:
    for args, needle in (
        (("serve", "--replicas", "2"), "need --ray"),
        (("serve", "--ray", "--min-replicas", "2"), "both --min-replicas and --max-replicas"),
        (("serve", "--ray", "--replicas", "2", "--min-replicas", "1", "--max-replicas", "2"), "not both"),
        (("serve", "--ray", "--shards", "0"), "--shards must be at least 1"),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
