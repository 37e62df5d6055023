"""The ``lnserve serve --ray`` driver's own life on a real local Ray instance (127.0.0.1): SIGTERM ends it
within the drain timeout, and a cluster that goes away (its GCS killed with SIGKILL) ends it with one line,
``lnserve: error [cluster_lost]: ...``, and exit 1, instead of hanging in Ray's retries. Behind Serve's
proxy and with direct ingress alike."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")
pytestmark = pytest.mark.ray

DRAIN_S = 6.0
EXIT_SLACK_S = 3.0  # the interpreter's own exit after the driver is done


INGRESSES = pytest.mark.parametrize("ingress", ["proxy", "direct"])


def _start(tmp_path: Path, ingress: str) -> LiveServer:
    env = {"LNSERVE_DRAIN_TIMEOUT_S": str(DRAIN_S), "LNSERVE_SCORER": "numpy"}
    return start_server(tmp_path, "--ray", "--replicas", "1", "--ingress", ingress, env=env, timeout=300)


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its command line (from /proc: Linux)."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                found[child] = cmdlines.get(child, "")
                frontier.append(child)
    return found


@INGRESSES
def test_sigterm_ends_the_driver_within_the_drain_timeout(tmp_path: Path, ingress: str) -> None:
    server = _start(tmp_path, ingress)
    assert httpx.post(f"{server.url}/encode", json={"sentences": ["a dog"]}, timeout=60).status_code == 200
    began = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(DRAIN_S + EXIT_SLACK_S)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        pytest.fail(f"still running {DRAIN_S + EXIT_SLACK_S}s after SIGTERM:\n{server.log()[-3000:]}")
    assert code == 0, server.log()[-3000:]
    assert time.monotonic() - began <= DRAIN_S + EXIT_SLACK_S


@INGRESSES
def test_a_lost_cluster_ends_the_driver_with_one_line(tmp_path: Path, ingress: str) -> None:
    server = _start(tmp_path, ingress)
    try:
        gcs = [p for p, cmd in _descendants(server.proc.pid).items() if "gcs_server" in cmd]
        assert gcs, "no gcs_server below the driver"
        for p in gcs:
            os.kill(p, signal.SIGKILL)
        code = server.proc.wait(60)
    finally:
        server.stop(timeout=5)
    log = server.log()
    errors = [line for line in log.splitlines() if line.startswith("lnserve: error")]
    assert code == 1, log[-3000:]
    assert len(errors) == 1 and errors[0].startswith("lnserve: error [cluster_lost]: lost the Ray cluster")
    assert "Traceback" not in log.split(errors[0])[1] if errors else True
