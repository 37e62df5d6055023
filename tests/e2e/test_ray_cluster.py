"""``lnserve serve --ray --address`` on a two-raylet Ray cluster with token authentication (``ray start
--head`` + ``ray start --address`` on loopback addresses, ``tests.e2e.ray_cluster``), as docs/scaling-out.md
runs it. (The retrieval suite runs through such a cluster too: ``test_http_retrieval``'s ``ray-cluster``.)

One driver's life on it: without the token it is refused with one line; with it, it serves (2 replicas and
2 shards fill both raylets' CPUs); a second server asking for another port than the one the cluster's Serve
proxy already uses is refused with one line naming that port, and one asking for that port serves; when
the cluster goes away under it, it exits 1 with one line instead of hanging.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.ray_cluster import driver_args, ray_cluster
from tests.e2e.server import ROOT, free_port, start_server

pytest.importorskip("ray.serve", reason="needs the ray extra: pip install 'lnserve[ray]'")
pytestmark = pytest.mark.ray

LOST_EXIT_S = 60.0


def _serve_cli(
    tmp: Path, env: dict[str, str], *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``lnserve serve`` expected to exit by itself (a refusal)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", "from lnserve.app.cli import main; main()", "serve", *args],
        cwd=ROOT, env={**os.environ, "LNSERVE_GALLERIES_DIR": str(tmp / "galleries"), **env},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _one_error_line(output: str, code: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("lnserve: error")]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].startswith(f"lnserve: error [{code}]: "), errors[0]
    return errors[0]


def test_a_driver_on_a_token_auth_cluster(tmp_path: Path) -> None:
    env = {"LNSERVE_SCORER": "numpy"}
    with ray_cluster(tmp_path) as cluster:
        args = driver_args(cluster.address, [])  # the docs' command; no --models: the demo model
        # no token: one line, exit 2, nothing deployed
        no_token = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
        proc = _serve_cli(tmp_path, no_token, *args, "--port", str(free_port()))
        line = _one_error_line(proc.stderr, "cluster_unreachable")
        assert proc.returncode == 2 and cluster.address in line and "RAY_AUTH_TOKEN" in line
        assert "Traceback" not in proc.stderr

        # the token: it serves, and stops leaving the cluster running with Serve's proxy on its port
        first = start_server(tmp_path, *args, env={**env, **cluster.env}, timeout=300)
        port = int(first.url.rsplit(":", 1)[1])
        r = httpx.post(f"{first.url}/encode", json={"sentences": ["a dog on a table"]}, timeout=60)
        assert r.status_code == 200, r.text
        assert first.stop(timeout=60) == 0, first.log()[-3000:]

        # another port: refused, naming the port that Serve uses on this cluster
        other = free_port()
        proc = _serve_cli(tmp_path, {**env, **cluster.env}, *args, "--port", str(other))
        line = _one_error_line(proc.stderr, "address_in_use")
        assert proc.returncode == 2 and f":{port}" in line and f"--port {port}" in line and str(other) in line
        assert "Traceback" not in proc.stderr

        # that port: it serves there
        second = start_server(tmp_path, *args, env={**env, **cluster.env},
                              timeout=300, port=port)  # fmt: skip
        deadline = time.monotonic() + 30  # /ready answers once the app runs, just before the driver logs it
        while f"serving on ray at http://127.0.0.1:{port}" not in second.log():
            assert time.monotonic() < deadline, second.log()[-3000:]
            time.sleep(0.1)
        assert httpx.get(f"{second.url}/ready", timeout=30).status_code == 200

        # the cluster goes away: the driver leaves with one line and exit 1
        cluster.stop()
        try:
            code = second.proc.wait(LOST_EXIT_S)
        except subprocess.TimeoutExpired:
            second.stop(timeout=5)
            pytest.fail(
                f"the driver still ran {LOST_EXIT_S}s after the cluster stopped:\n{second.log()[-3000:]}"
            )
        assert code == 1, second.log()[-3000:]
        _one_error_line(second.log(), "cluster_lost")
        assert "Traceback" not in second.log().split("lnserve: error")[-1]
