"""A two-raylet Ray cluster with token authentication on this host, as docs/scaling-out.md sets one up:
``ray start --head`` and ``ray start --address`` (each ``--block``, in its own session, so that stopping it
stops exactly what it started), both with ``RAY_AUTH_MODE=token`` and the cluster's token, on loopback
addresses (the head advertises 127.0.0.2, the worker 127.0.0.3; Ray's own listeners bind every interface,
which the token guards).

Stopped at the end: SIGTERM to each ``ray start`` (it stops its processes), then SIGKILL to its session if
it has not finished within ``STOP_TIMEOUT_S``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from lnserve.app.scale.proxy import CALLBACK as PROXY_CALLBACK
from tests.e2e.server import free_port

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 45.0
RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class RayCluster:
    address: str  # HEAD:PORT, what --address takes
    token: str
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """What every process that joins needs: workers, and the lnserve driver."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    @property
    def node_env(self) -> dict[str, str]:
        """``ray start``'s environment: the token, and lnserve's 503 for a lost replica in each node's proxy
        (docs/scaling-out.md)."""
        return {**self.env, "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_CALLBACK}

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the worker first, then the head
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            with suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_TIMEOUT_S)
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever of its session is left
            if proc.poll() is None:
                proc.wait()


def _ports() -> list[str]:
    """Every port a raylet would otherwise take at a fixed default (two on one host would collide)."""
    names = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port")  # fmt: skip
    return [a for name in names for a in (name, str(free_port()))]


def _start(cluster: RayCluster, name: str, args: list[str]) -> None:
    log = open(cluster.logs / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until stopped
    env = {**os.environ, **cluster.node_env}
    proc = subprocess.Popen(
        [RAY, "start", "--block", "--disable-usage-stats", "--num-cpus", "2",
         "--object-store-memory", str(100 * 1024 * 1024), *_ports(), *args],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    log.close()
    cluster.procs.append(proc)


def _wait_started(cluster: RayCluster, name: str) -> None:
    """Until ``ray start`` says so in its log (it then blocks, watching its processes)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    log = cluster.logs / f"{name}.log"
    while b"Ray runtime started" not in log.read_bytes():
        proc = cluster.procs[-1]
        if proc.poll() is not None:
            raise RuntimeError(f"ray start ({name}) exited with {proc.returncode}:\n{cluster.log()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"ray start ({name}) not started in {START_TIMEOUT_S}s:\n{cluster.log()}")
        time.sleep(0.2)


@contextmanager
def ray_cluster(tmp: Path) -> Iterator[RayCluster]:
    """A head and one worker raylet, token auth on; stopped when the block ends."""
    logs = tmp / "ray-cluster"
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cluster = RayCluster(f"{HEAD_IP}:{port}", secrets.token_hex(32), logs)
    session = tempfile.mkdtemp(prefix="lnray-")  # short: Ray's socket paths must fit in 107 bytes
    try:
        _start(cluster, "head", ["--head", "--node-ip-address", HEAD_IP, "--port", str(port),
                                 "--include-dashboard", "false", "--ray-client-server-port", str(free_port()),
                                 "--temp-dir", session])  # fmt: skip
        _wait_started(cluster, "head")
        _start(cluster, "worker", ["--address", cluster.address, "--node-ip-address", WORKER_IP])
        _wait_started(cluster, "worker")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(session, ignore_errors=True)
