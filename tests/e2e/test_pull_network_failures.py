"""Every way the network can fail ``lnserve pull``, through the real CLI against a misbehaving server on
127.0.0.1 (issue 30, findings 11 and 12).

Each failure must end with one line ``lnserve: error [code]: ...`` and exit 2, within a bound, with no
artifact and no staging directory. The unfixed pull answered a redirect loop with "internal error" (exit 1),
and a server that trickled a byte at a time (in its body or in its headers) kept it running for as long as
the server liked: there was no stall timeout and no overall deadline. What a stalled or late download
received is not kept.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

NAME, FILE = "lngru-order", "lngru_order_add0.npz"  # the set's first file: what every case is asked for
STALL_S = 1.0  # --stall-timeout of these runs
DEADLINE_S = 3.0  # --deadline of the deadline cases (their stall timeout is far longer)
DRIP_S = 0.2  # one byte every DRIP_S: never silent long enough for a read timeout


def _head(status: str, *headers: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers, "Connection: close", "", ""])).encode()


def _drip(conn: socket.socket, data: Iterator[bytes], stop: threading.Event) -> None:
    for byte in data:
        if stop.is_set():
            return
        conn.sendall(byte)
        time.sleep(DRIP_S)


def _endless_header_bytes() -> Iterator[bytes]:
    yield from (bytes([b]) for b in b"HTTP/1.1 200 OK\r\n")
    while True:
        yield from (bytes([b]) for b in b"X-Slow: a\r\n")


Behaviour = Callable[[socket.socket, str, threading.Event], None]


def _redirect(to: Callable[[str], str]) -> Behaviour:
    def act(conn: socket.socket, path: str, stop: threading.Event) -> None:
        conn.sendall(_head("302 Found", f"Location: {to(path)}", "Content-Length: 0"))

    return act


def _send(raw: bytes) -> Behaviour:
    def act(conn: socket.socket, path: str, stop: threading.Event) -> None:
        conn.sendall(raw)

    return act


def _reset(conn: socket.socket, path: str, stop: threading.Event) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST


def _drip_body(conn: socket.socket, path: str, stop: threading.Event) -> None:
    conn.sendall(_head("200 OK", "Content-Length: 100000"))
    _drip(conn, iter(lambda: b"x", None), stop)


def _drip_headers(conn: socket.socket, path: str, stop: threading.Event) -> None:
    _drip(conn, _endless_header_bytes(), stop)


def _hop(path: str) -> str:
    parts = path.split("/")  # /hops/N/FILE -> /hops/N+1/FILE
    return "/".join([*parts[:2], str(int(parts[2]) + 1), *parts[3:]])


BEHAVIOURS: dict[str, Behaviour] = {
    "redirect-loop": _redirect(lambda path: path),
    "too-many-redirects": _redirect(_hop),
    "redirect-to-ftp": _redirect(lambda path: "ftp://127.0.0.1/x"),
    "redirect-to-a-bad-url": _redirect(lambda path: "http://[::1"),
    "reset": _reset,
    "closed-without-answer": _send(b""),
    "garbage-instead-of-http": _send(b"\x00\x01garbage\r\n\r\n"),
    "bad-status-line": _send(b"HTTP/1.1 abc Nope\r\n\r\n"),
    "status-999": _send(_head("999 Whatever", "Content-Length: 0")),
    "status-403": _send(_head("403 Forbidden", "Content-Length: 0")),
    "status-500": _send(_head("500 Internal Server Error", "Content-Length: 0")),
    "bad-content-length": _send(_head("200 OK", "Content-Length: abc") + b"x"),
    "two-content-lengths": _send(_head("200 OK", "Content-Length: 5", "Content-Length: 7") + b"12345"),
    "negative-content-length": _send(_head("200 OK", "Content-Length: -5") + b"12345"),
    "short-body": _send(_head("200 OK", "Content-Length: 1000") + b"x" * 10),
    "stall-in-body": _drip_body,
    "stall-in-headers": _drip_headers,
}


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        conn: socket.socket = self.request
        conn.settimeout(30)
        request = b""
        try:
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            path = request.split(b" ", 2)[1].decode()
            case = path.split("/")[1]
            BEHAVIOURS["too-many-redirects" if case == "hops" else case](conn, path, server.stop)
        except OSError:
            pass  # the client gave up: what these servers are for


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stop = threading.Event()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.stop.set()
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Case:
    codes: tuple[str, ...]  # acceptable error codes
    bound_s: float  # the run must end within this
    stall: float = STALL_S
    deadline: float = 600.0
    base: str | None = None  # the path under the server (default: the case's name)


_QUICK = 30.0  # a refusal: the time to start the CLI and make a few tries, on a loaded machine
CASES: dict[str, Case] = {
    "redirect-loop": Case(("download_failed",), _QUICK),
    "too-many-redirects": Case(("download_failed",), _QUICK, base="hops/0"),
    "redirect-to-ftp": Case(("download_failed",), _QUICK),
    "redirect-to-a-bad-url": Case(("download_failed",), _QUICK),
    "connection-refused": Case(("offline",), _QUICK),
    "reset": Case(("download_failed", "truncated"), _QUICK),
    "closed-without-answer": Case(("download_failed",), _QUICK),
    "garbage-instead-of-http": Case(("download_failed",), _QUICK),
    "bad-status-line": Case(("download_failed",), _QUICK),
    "status-999": Case(("download_failed",), _QUICK),
    "status-403": Case(("download_failed",), _QUICK),
    "status-500": Case(("download_failed",), _QUICK),
    "bad-content-length": Case(("download_failed",), _QUICK),
    "two-content-lengths": Case(("download_failed",), _QUICK),
    "negative-content-length": Case(("download_failed",), _QUICK),
    "short-body": Case(("truncated",), _QUICK),
    # two tries of STALL_S each, plus start-up: far less than the minute the unfixed pull ran on
    "stall-in-body": Case(("stalled",), _QUICK),
    "stall-in-headers": Case(("stalled",), _QUICK),
    "deadline-in-body": Case(
        ("deadline_exceeded",), _QUICK, stall=60.0, deadline=DEADLINE_S, base="stall-in-body"
    ),
    "deadline-in-headers": Case(
        ("deadline_exceeded",), _QUICK, stall=60.0, deadline=DEADLINE_S, base="stall-in-headers"
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pull_network_failure_is_one_line_and_exit_2(case: str, server: str, tmp_path: Path) -> None:
    spec = CASES[case]
    base = f"http://127.0.0.1:{_closed_port()}" if case == "connection-refused" else server
    root = tmp_path / "models"
    args = ("--retries", "2", "--backoff", "0.01", "--stall-timeout", str(spec.stall))
    start = time.monotonic()
    try:
        proc = run_cli_bounded(
            "pull", NAME, "--dir", str(root), "--base-url", f"{base}/{spec.base or case}", *args,
            "--deadline", str(spec.deadline), timeout=spec.bound_s + 60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: pull still running after {spec.bound_s + 60:.0f} s")
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert any(lines[0].startswith(f"lnserve: error [{code}]: ") for code in spec.codes), lines[0]
    assert "Traceback" not in proc.stderr and len(lines[0]) < 1000
    assert took < spec.bound_s, f"{case}: took {took:.1f} s"
    assert not (root / NAME).exists()
    assert not [p.name for p in root.iterdir() if p.name.startswith(f".{NAME}.")] if root.exists() else True
    if spec.codes[0] in ("stalled", "deadline_exceeded"):
        assert "stall" in lines[0] or "deadline" in lines[0]
        downloads = root / ".downloads" / NAME
        left = sorted(p.name for p in downloads.iterdir()) if downloads.exists() else []
        assert left == [], f"{case}: left {left}"  # no partial file of a trickle


def run_cli_bounded(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``tests.conftest.run_cli`` with the caller's timeout (that helper waits up to 300 s)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
