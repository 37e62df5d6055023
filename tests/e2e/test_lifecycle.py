"""Starting and stopping ``lnserve serve`` (real processes): what cannot start fails as one line, exit 2;
SIGTERM with requests still running at the drain deadline answers each of them with JSON and exits in time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from lnserve.app.demo_model.data import ensure_demo_artifact
from tests.e2e.rawhttp import RawConnection, RawResponse
from tests.e2e.server import ROOT, LiveServer, free_port, start_server
from tests.support.crafted_models import unbuildable_model

DEADLINE_S = 60.0
JSON = {"Content-Type": "application/json"}


def _serve(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lnserve serve`` expected to stop by itself; a server that keeps running fails the test."""
    env = {**os.environ, "LNSERVE_GALLERIES_DIR": str(tmp / "galleries"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", "from lnserve.app.cli import main; main()", "serve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def _one_line_error(proc: subprocess.CompletedProcess[str], code: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lnserve: error [{code}]: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line_error(_serve(tmp_path, "--port", str(port)), "address_in_use")
    assert f"127.0.0.1:{port} is already in use" in line


def test_a_model_missing_its_weights_is_one_line_and_exit_2(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(ensure_demo_artifact(), model)
    (model / "weights.safetensors").unlink()
    proc = _serve(tmp_path, "--models", str(model), "--port", str(free_port()))
    assert "weights.safetensors" in _one_line_error(proc, "manifest_mismatch")


def test_a_model_that_cannot_be_built_at_startup_stops_the_server_with_exit_2(tmp_path: Path) -> None:
    """Its files match the manifest, so only building the ONNX session (in the background) finds it."""
    model = unbuildable_model(tmp_path / "model")
    proc = _serve(tmp_path, "--models", str(model), "--port", str(free_port()))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lnserve: error [model_load_failed]: model 'unbuildable' cannot be loaded (")
    assert "onnx_model_invalid" in last and "Traceback" not in proc.stderr


@pytest.mark.slow  # over 10 s
def test_requests_cut_by_the_drain_deadline_get_a_json_503_and_the_process_exits(tmp_path: Path) -> None:
    """50 requests at SIGTERM with a 2 s drain timeout: 40 clients still sending their body (not in flight
    yet) and 10 requests queued behind a 6 s batching wait. None can finish in time."""
    drain_s = 2.0
    env = {"LNSERVE_DRAIN_TIMEOUT_S": str(drain_s), "LNSERVE_MAX_WAIT_MS": "6000"}
    env["LNSERVE_MAX_INFLIGHT"] = "64"  # all 10 admitted
    env["LNSERVE_MAX_BODY_READS_PER_CLIENT"] = "0"  # all 40 bodies awaited
    srv = start_server(tmp_path, env=env, timeout=120)
    body = json.dumps({"sentences": ["a red circle on the left"]}).encode()
    slow = [RawConnection(srv.url, timeout=DEADLINE_S) for _ in range(40)]
    queued: list[httpx.Response | Exception] = []

    def post() -> None:
        try:
            queued.append(httpx.post(srv.url + "/encode", content=body, headers=JSON, timeout=DEADLINE_S))
        except httpx.HTTPError as exc:
            queued.append(exc)

    senders = [threading.Thread(target=post) for _ in range(10)]
    try:
        for conn in slow:
            conn.send_head("POST", "/encode", {"Content-Type": "application/json"}, len(body))
        for t in senders:
            t.start()
        _wait_until_in_flight(srv, 10, bodies=40)
        signalled = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        cut: list[RawResponse] = [conn.read_response() for conn in slow]
        for t in senders:
            t.join(DEADLINE_S)
        srv.proc.wait(DEADLINE_S)
        exited = time.monotonic() - signalled
    finally:
        for conn in slow:
            conn.close()
        srv.stop()
    assert len(queued) == 10 and all(isinstance(r, httpx.Response) for r in queued), queued
    responses = [(r.status, r.headers.get("content-type"), r.body) for r in cut]
    responses += [(r.status_code, r.headers.get("content-type"), r.content) for r in queued]  # type: ignore[union-attr]
    for status, ctype, raw in responses:
        assert status == 503 and ctype == "application/json", (status, raw[:200])
        assert json.loads(raw)["error"]["code"] == "shutting_down"
    assert all(r.headers.get("connection") == "close" for r in cut)
    # the deadline plus one second, and one more of slack for a busy machine
    print(f"exited {exited:.2f} s after SIGTERM")
    assert exited < drain_s + 2.0, f"exited {exited:.2f} s after SIGTERM (drain timeout {drain_s} s)"
    assert '"msg": "shut down"' in srv.log()


def _wait_until_in_flight(srv: LiveServer, n: int, *, bodies: int) -> None:
    """``n`` requests in flight and ``bodies`` more whose body the server awaits."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        text = httpx.get(srv.url + "/metrics", timeout=10).text
        if (
            f"lnserve_inflight_requests {float(n)}" in text
            and f"lnserve_bodies_arriving {float(bodies)}" in text
        ):
            return
        time.sleep(0.02)
    pytest.fail(f"never saw {n} requests in flight and {bodies} bodies arriving")


def _children(pid: int) -> set[int]:
    """Live descendants of ``pid`` (from /proc: every thread's children)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += sorted(kids - found)
            found |= kids
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is gone for this purpose)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc")
def test_worker_processes_die_with_a_killed_server(tmp_path: Path) -> None:
    """kill -9 runs no shutdown: the body-parsing worker (and multiprocessing's resource tracker, which
    lives while the worker holds its pipe) must still go, within seconds, not run on forever."""
    server = start_server(tmp_path)
    try:
        big = json.dumps({"sentences": ["a red circle on the left"] * 200, "bogus": "x" * 70_000})
        r = httpx.post(server.url + "/encode", content=big, headers=JSON, timeout=DEADLINE_S)
        assert r.status_code == 422, r.text  # parsed (and refused) by the worker process
        workers = _children(server.proc.pid)
        assert workers, "no worker process was started"
        server.proc.kill()
        server.proc.wait(DEADLINE_S)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in workers if _alive(p)], "worker processes outlived the killed server"
    finally:
        server.stop()
