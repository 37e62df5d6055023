"""Slow and silent clients against real ``lnserve serve`` processes (demo model, raw sockets on loopback).

Clients that send headers and a byte of a body, then go quiet, must neither lock others out nor hold
their connection for ever: every route that reads a body (taken from the app's own routes) answers a body
that stops arriving with 408 ``request_timeout`` at ``body_timeout_s`` and closes the connection; headers
that stop arriving get the same at ``header_timeout_s``; 32 silent bodies hold no slot of ``max_inflight``.
Distinct clients are distinct loopback addresses (127.0.0.x), as the per-client bound sees them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from lnserve.app.http.main import create_app
from lnserve.app.settings import Settings
from tests.e2e.rawhttp import RawConnection
from tests.e2e.server import LiveServer, start_server

JSON = {"Content-Type": "application/json"}
TIMEOUT_S = 2.0  # header and body deadline of the ``short`` server
SLACK_S = 8.0  # how much later than the deadline an answer may come on a loaded machine


def metric(server: LiveServer, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def closed(conn: RawConnection) -> bool:
    """The server closed the connection (EOF) rather than leaving it open."""
    try:
        return conn.file.read(1) == b""
    except ConnectionError:  # reset: closed with bytes of ours unread
        return True
    except TimeoutError:
        return False


def body_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the app that reads a request body, path parameters filled in."""
    paths = create_app(Settings()).openapi()["paths"]
    found = []
    for path, operations in sorted(paths.items()):
        for method, operation in sorted(operations.items()):
            if "requestBody" in operation:
                found.append((method.upper(), re.sub(r"\{[^}]+\}", "x", path)))
    return found


BODY_ROUTES = body_routes()


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"LNSERVE_BODY_TIMEOUT_S": str(TIMEOUT_S), "LNSERVE_HEADER_TIMEOUT_S": str(TIMEOUT_S)}
    srv = start_server(tmp_path_factory.mktemp("short"), env=env)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Default limits (max_inflight 32, 8 bodies arriving per client) and a body deadline longer than the
    test, so that silent clients stay for its whole length."""
    srv = start_server(tmp_path_factory.mktemp("patient"), env={"LNSERVE_BODY_TIMEOUT_S": "120"})
    yield srv
    srv.stop()


def test_the_app_has_body_routes() -> None:
    """The enumeration below finds the routes (a change to how routes are declared must not empty it)."""
    paths = {p for _, p in BODY_ROUTES}
    assert {"/encode", "/encode/images", "/retrieve", "/score", "/tokenize"} <= paths, paths
    assert len(BODY_ROUTES) >= 8


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_every_body_route_answers_a_stalled_body_with_408_and_closes(
    short: LiveServer, chunked: bool
) -> None:
    conns = [
        RawConnection(short.url, timeout=TIMEOUT_S + SLACK_S, source=f"127.0.0.{10 + i}")
        for i in range(len(BODY_ROUTES))
    ]
    try:
        start = time.monotonic()
        for conn, (method, path) in zip(conns, BODY_ROUTES, strict=True):
            conn.send_head(method, path, JSON, None if chunked else 100)
            conn.sock.sendall(b"1\r\n{\r\n" if chunked else b"{")  # one byte of the body, then nothing
        for conn, (method, path) in zip(conns, BODY_ROUTES, strict=True):
            r = conn.read_response()
            where = f"{method} {path}"
            assert r.status == 408, (where, r.body[:300])
            assert r.json()["error"]["code"] == "request_timeout", where
            assert "body_timeout_s" in r.json()["error"]["message"], where
            assert r.headers.get("connection") == "close", where
            assert closed(conn), where
        assert TIMEOUT_S * 0.9 <= time.monotonic() - start < TIMEOUT_S + SLACK_S
    finally:
        for conn in conns:
            conn.close()
    assert httpx.post(short.url + "/encode", json={"sentences": ["a red circle"]}).status_code == 200


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /encode HTTP/1.1\r\nHost: x\r\n", b"GET /hea"],
    ids=["nothing", "half the headers", "half the request line"],
)
def test_headers_that_stop_arriving_close_the_connection(short: LiveServer, sent: bytes) -> None:
    with RawConnection(short.url, timeout=TIMEOUT_S + SLACK_S) as conn:
        conn.sock.sendall(sent)
        if sent:  # a request has begun: it is told why
            r = conn.read_response()
            assert r.status == 408 and r.json()["error"]["code"] == "request_timeout", r.body
            assert "header_timeout_s" in r.json()["error"]["message"]
        assert closed(conn)


def test_a_kept_alive_connection_gets_the_header_deadline_for_its_next_request(short: LiveServer) -> None:
    with RawConnection(short.url, timeout=TIMEOUT_S + SLACK_S) as conn:
        assert conn.request("GET", "/health").status == 200
        conn.sock.sendall(b"GET /health HTTP/1.1\r\nHo")
        assert conn.read_response().status == 408
        assert closed(conn)


def test_a_refused_body_that_keeps_dripping_is_cut(short: LiveServer) -> None:
    """Refused before its body (413 by Content-Length), the connection is kept for the next request; a
    client that keeps dripping the refused body is cut at the body deadline all the same."""
    with RawConnection(short.url, timeout=TIMEOUT_S + SLACK_S) as conn:
        conn.send_head("POST", "/encode", JSON, 5 << 20)
        assert conn.read_response().status == 413
        deadline = time.monotonic() + TIMEOUT_S + SLACK_S
        with pytest.raises(OSError):  # broken pipe / reset once the server has closed it
            while time.monotonic() < deadline:
                conn.sock.sendall(b" ")
                time.sleep(0.2)
        assert time.monotonic() < deadline


def test_silent_bodies_hold_no_inflight_slot(patient: LiveServer) -> None:
    """32 clients (4 addresses, 8 each: the per-client bound) send headers and one byte of a body or none
    (Content-Length or chunked) and go quiet: every other request is still served; a ninth silent body from
    one of those addresses is refused at once, and the connection closed."""
    silent: list[RawConnection] = []
    body = json.dumps({"sentences": ["a red circle on the left"]}).encode()
    try:
        for i in range(32):
            conn = RawConnection(patient.url, source=f"127.0.0.{2 + i % 4}")
            conn.send_head("POST", "/encode", JSON, None if i % 2 else len(body))
            if i % 3:  # and every third nothing of its body
                conn.sock.sendall(b"1\r\n{\r\n" if i % 2 else body[:1])
            silent.append(conn)
        held = ("lnserve_bodies_arriving", "lnserve_inflight_requests")  # (before the fix: in flight)
        wait_for(lambda: sum(metric(patient, m) for m in held) == 32, "32 silent requests held")
        with httpx.Client(base_url=patient.url, timeout=30) as c:
            for _ in range(5):
                r = c.post("/encode", json={"sentences": ["a blue square"]})
                assert r.status_code == 200, r.text
            assert c.get("/health").status_code == 200
        assert metric(patient, "lnserve_inflight_requests") == 0

        with RawConnection(patient.url, source="127.0.0.2") as ninth:
            ninth.send_head("POST", "/encode", JSON, len(body))
            ninth.sock.sendall(body[:1])
            r = ninth.read_response()
            assert r.status == 429 and r.json()["error"]["code"] == "overloaded", r.body
            assert "max_body_reads_per_client 8" in r.json()["error"]["message"]
            assert r.headers["retry-after"] == "1" and closed(ninth)

        # a silent client that finishes its body is served like any other
        silent[0].sock.sendall(body)
        assert silent[0].read_response().status == 200
    finally:
        for conn in silent:
            conn.close()
    wait_for(lambda: metric(patient, "lnserve_bodies_arriving") == 0, "the silent clients gone")


GRACE_S = 5.0  # of the ``graceful`` server: far above a body sent 0.1 s after its headers on a loaded machine


@pytest.fixture(scope="module")
def graceful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Two bodies arriving per client, and a grace for a third (what a Ray replica behind Serve's proxy
    gets by default)."""
    env = {
        "LNSERVE_BODY_TIMEOUT_S": "120",
        "LNSERVE_MAX_BODY_READS_PER_CLIENT": "2",
        "LNSERVE_BODY_ARRIVAL_GRACE_MS": str(GRACE_S * 1000),
    }
    srv = start_server(tmp_path_factory.mktemp("graceful"), env=env)
    yield srv
    srv.stop()


def test_a_client_at_its_bound_gets_the_grace_for_its_next_body(graceful: LiveServer) -> None:
    """At its bound (two silent bodies), a client's third request is served when its body arrives within
    the grace, or when one of its other bodies arrives meanwhile; a body that does neither is refused when
    the grace ends, as at once without one."""
    body = json.dumps({"sentences": ["a red circle on the left"]}).encode()
    source = "127.0.0.9"
    silent = [RawConnection(graceful.url, source=source) for _ in range(2)]
    try:
        for conn in silent:
            conn.send_head("POST", "/encode", JSON, len(body))
            conn.sock.sendall(body[:1])
        wait_for(lambda: metric(graceful, "lnserve_bodies_arriving") == 2, "two silent bodies")

        with RawConnection(graceful.url, source=source) as late:  # the rest comes 0.1 s later
            late.send_head("POST", "/encode", JSON, len(body))
            late.sock.sendall(body[:1])
            time.sleep(0.1)
            late.sock.sendall(body[1:])
            r = late.read_response()
            assert r.status == 200, r.body

        with RawConnection(graceful.url, source=source) as stalled:  # never more than a byte
            started = time.monotonic()
            stalled.send_head("POST", "/encode", JSON, len(body))
            stalled.sock.sendall(body[:1])
            r = stalled.read_response()
            assert r.status == 429 and r.json()["error"]["code"] == "overloaded", r.body
            assert "2 requests from this client are still sending" in r.json()["error"]["message"]
            assert time.monotonic() - started >= GRACE_S - 0.5  # not at once: after the grace
            assert closed(stalled)

        with RawConnection(graceful.url, source=source) as waiting:  # another of the client's bodies arrives
            waiting.send_head("POST", "/encode", JSON, len(body))
            waiting.sock.sendall(body[:1])
            wait_for(lambda: metric(graceful, "lnserve_bodies_arriving") == 3, "the third body waiting")
            silent[0].sock.sendall(body[1:])
            assert silent[0].read_response().status == 200
            waiting.sock.sendall(body[1:])
            r = waiting.read_response()
            assert r.status == 200, r.body
    finally:
        for conn in silent:
            conn.close()
