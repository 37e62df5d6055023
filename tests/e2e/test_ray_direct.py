"""``lnserve serve --ray --ingress direct``: the replicas serve the port themselves (a real local Ray
instance, real uvicorn in each replica, loopback only).

Two replicas listen on the one port (``SO_REUSEPORT``): each answers ``/encode`` with the single-process
server's vectors, both get connections, lnserve's connection hardening (header and body deadlines) holds
on them, the galleries still work through the shards, a port already taken is refused with one line, and
the driver exits 0 on SIGTERM. The all-replica reload through this ingress is in ``test_ray_reload.py``.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import LEGACY, golden, inputs, run_cli
from tests.e2e.rawhttp import RawConnection
from tests.e2e.server import LiveServer, start_server
from tests.e2e.test_slow_clients import closed

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

MODEL = "oe_order_lngru"
TOL = 1e-5
TIMEOUT_S = 2.0  # header and body deadlines of the direct server
SLACK_S = 8.0  # how much later than the deadline an answer may come on a loaded machine
BOTH_WITHIN_S = 120.0  # new connections until both replicas have answered
ENV = {
    "LNSERVE_SCORER": "numpy",
    "LNSERVE_HEADER_TIMEOUT_S": str(TIMEOUT_S),
    "LNSERVE_BODY_TIMEOUT_S": str(TIMEOUT_S),
}
CLOSE = {"Connection": "close"}  # one connection per request: the kernel picks a replica for each


@pytest.fixture(scope="module")
def servers(
    artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, LiveServer]]:
    models = ("--models", str(artifacts[MODEL]))
    direct = start_server(
        tmp_path_factory.mktemp("direct"), "--ray", "--replicas", "2", "--ingress", "direct", *models,
        env=ENV, timeout=300,
    )  # fmt: skip
    try:
        single = start_server(tmp_path_factory.mktemp("single"), *models, env=ENV)
    except BaseException:
        direct.stop()
        raise
    yield direct, single
    single.stop()
    assert direct.stop(timeout=60) in (0, -signal.SIGTERM), direct.log()[-3000:]


def _from_each_replica(url: str, request: Callable[[httpx.Client], httpx.Response]) -> dict[str, Any]:
    """One answer (JSON) from each of the two replicas, each request on a new connection."""
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + BOTH_WITHIN_S
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"only {sorted(seen)} answered within {BOTH_WITHIN_S} s"
        with httpx.Client(base_url=url, timeout=120.0, headers=CLOSE) as c:
            r = request(c)
        assert r.status_code == 200, r.text
        seen.setdefault(r.headers["x-lnserve-replica"], r.json())
    return seen


def test_both_replicas_take_connections_on_the_one_port(servers: tuple[LiveServer, LiveServer]) -> None:
    infos = _from_each_replica(servers[0].url, lambda c: c.get("/info"))
    engines = [body["engine"] for body in infos.values()]
    assert {e["ingress"] for e in engines} == {"direct"}
    assert len({e["pid"] for e in engines}) == 2  # two processes answer on one port
    assert all(e["name"] == "ray" and e["replicas"] == 2 for e in engines), engines


def test_encode_matches_the_single_process_server(servers: tuple[LiveServer, LiveServer]) -> None:
    captions: list[str] = inputs()["order_embedding"]["captions"]
    body = {"model": MODEL, "sentences": captions, "pretokenized": True}
    single = httpx.post(servers[1].url + "/encode", json=body, timeout=120.0)
    assert single.status_code == 200, single.text
    expected = np.asarray(single.json()["vectors"], dtype=np.float64)
    assert np.abs(expected - golden(MODEL)["sent_emb"]).max() <= TOL
    answers = _from_each_replica(servers[0].url, lambda c: c.post("/encode", json=body))
    for replica, out in answers.items():
        diff = np.abs(np.asarray(out["vectors"], dtype=np.float64) - expected).max()
        assert diff <= TOL, f"replica {replica}: {diff}"


def test_headers_that_stop_arriving_get_408_and_are_closed(servers: tuple[LiveServer, LiveServer]) -> None:
    conns = [RawConnection(servers[0].url, timeout=TIMEOUT_S + SLACK_S) for _ in range(4)]
    try:
        start = time.monotonic()
        for conn in conns:
            conn.sock.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\n")  # half the headers, then nothing
        for conn in conns:
            r = conn.read_response()
            assert r.status == 408 and r.json()["error"]["code"] == "request_timeout", r.body
            assert "header_timeout_s" in r.json()["error"]["message"]
            assert closed(conn)
        assert TIMEOUT_S * 0.9 <= time.monotonic() - start < TIMEOUT_S + SLACK_S
    finally:
        for conn in conns:
            conn.close()


def test_a_body_that_stops_arriving_gets_408_and_is_closed(servers: tuple[LiveServer, LiveServer]) -> None:
    conns = [RawConnection(servers[0].url, timeout=TIMEOUT_S + SLACK_S) for _ in range(4)]
    try:
        for conn in conns:
            conn.send_head("POST", "/encode", {"Content-Type": "application/json"}, 100)
            conn.sock.sendall(b"{")  # one byte of the body, then nothing
        for conn in conns:
            r = conn.read_response()
            assert r.status == 408 and r.json()["error"]["code"] == "request_timeout", r.body
            assert "body_timeout_s" in r.json()["error"]["message"]
            assert r.headers.get("connection") == "close"
            assert closed(conn)
    finally:
        for conn in conns:
            conn.close()
    r = httpx.post(servers[0].url + "/encode", json={"sentences": ["a red circle"]}, timeout=60.0)
    assert r.status_code == 200, r.text


def test_galleries_work_through_the_shards(servers: tuple[LiveServer, LiveServer]) -> None:
    images = np.load(LEGACY / "order_embedding" / "images.npy")
    items = [{"id": f"im-{i}", "image": row.tolist()} for i, row in enumerate(images[:6])]
    with httpx.Client(base_url=servers[0].url, timeout=120.0) as c:
        r = c.post("/galleries", json={"name": "direct", "kind": "images", "model": MODEL})
        assert r.status_code == 201, r.text
        r = c.post("/galleries/direct/items", json={"items": items})
        assert r.status_code == 200, r.text
    # written through one replica, read through each
    got = _from_each_replica(servers[0].url, lambda c: c.get("/galleries/direct"))
    assert {body["count"] for body in got.values()} == {len(items)}


def test_a_taken_port_is_refused_with_one_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = run_cli("serve", "--ray", "--ingress", "direct", "--port", str(port))
    assert proc.returncode == 2, proc.stderr
    assert "address_in_use" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_direct_ingress_flags() -> None:
    for args, needle in (
        (("serve", "--ingress", "direct"), "need --ray"),
        (("serve", "--ray", "--ingress", "sideways"), "--ingress must be one of proxy, direct"),
        (
            ("serve", "--ray", "--ingress", "direct", "--min-replicas", "1", "--max-replicas", "2"),
            "autoscaling needs --ingress proxy",
        ),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
