"""A two-raylet Ray cluster with token authentication on this host, started by the commands of
docs/scaling-out.md as written there: the head's block and the worker's block each run in ``bash -e``, with
only ``HEAD_IP:6379`` replaced and, appended to their ``ray start`` line, what two raylets on one test host
need (``--block``, free ports instead of fixed defaults, loopback addresses: the head advertises 127.0.0.2,
the worker 127.0.0.3; Ray's own listeners bind every interface, which the token guards). The head's block
makes the token in its own ``$HOME`` (a temporary folder, never the user's ``~/.ray``); the worker reads it
from ``head_auth_token``, the copy the docs tell the reader to make. The driver's command and environment
are the doc's too (``driver_args``, ``RayCluster.env``).

Each block runs in its own session, so stopping it stops exactly what it started: SIGTERM (``ray start
--block`` stops its processes), then SIGKILL to the session if it has not ended within ``STOP_TIMEOUT_S``.
"""

from __future__ import annotations

import os
import re
import shlex
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

from tests.e2e.server import ROOT, free_port

DOC = ROOT / "docs" / "scaling-out.md"
DOC_ADDRESS = "HEAD_IP:6379"
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 45.0
VENV_BIN = str(Path(sys.executable).parent)


def doc_blocks() -> tuple[str, str, str]:
    """The head's, the worker's and the driver's bash blocks of the page's *The commands* section."""
    section = DOC.read_text(encoding="utf-8").split("## The commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 3, blocks
    return blocks[0], blocks[1], blocks[2]


def _exports(block: str) -> dict[str, str]:
    """``export A=B`` lines of a block (literal values only: the driver's block has no others)."""
    out: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            for word in shlex.split(line)[1:]:
                name, _, value = word.partition("=")
                out[name] = value
    return out


def driver_args(address: str, models: list[str]) -> list[str]:
    """The doc's ``lnserve serve`` arguments, with the test's address, loopback host and models."""
    line = next(x for x in doc_blocks()[2].splitlines() if x.startswith("lnserve serve "))
    args = shlex.split(line.replace(DOC_ADDRESS, address))[2:]
    args[args.index("--host") + 1] = "127.0.0.1"
    i = args.index("--models")
    return [*args[:i], *(a for m in models for a in ("--models", m)), *args[i + 2 :]]


@dataclass
class RayCluster:
    address: str  # HEAD:PORT, what --address takes
    home: Path  # the head's $HOME: its ~/.ray/auth_token
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def token(self) -> str:
        return (self.home / ".ray" / "auth_token").read_text().strip()

    @property
    def env(self) -> dict[str, str]:
        """The driver's environment, as the docs run it on the head: the block's exports, the head's HOME
        (where the token is)."""
        return {**_exports(doc_blocks()[2]), "HOME": str(self.home)}

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


def _ports() -> str:
    """Every port a raylet would otherwise take at a fixed default (two on one host would collide)."""
    names = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port")  # fmt: skip
    return " ".join(f"{name} {free_port()}" for name in names)


def _run_block(cluster: RayCluster, name: str, block: str, extra: str, home: Path, cwd: Path) -> None:
    """The doc's block in ``bash -e``, ``HEAD_IP:6379`` replaced, ``extra`` appended to ``ray start``."""
    script = block.replace(DOC_ADDRESS, cluster.address)
    script = re.sub(r"^(ray start .*)$", lambda m: f"{m.group(1)} {extra}", script, flags=re.M)
    log = open(cluster.logs / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until stopped
    env = {**os.environ, "HOME": str(home), "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)  # only what the block sets
    proc = subprocess.Popen(["bash", "-ec", script], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
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
    session = Path(tempfile.mkdtemp(prefix="lnray-"))  # short: Ray's socket paths must fit in 107 bytes
    cluster = RayCluster(f"{HEAD_IP}:{free_port()}", session / "head-home", logs)
    worker_home = session / "worker-home"
    for home in (cluster.home, worker_home):
        home.mkdir()
    head, worker, _ = doc_blocks()
    port = cluster.address.rsplit(":", 1)[1]
    try:
        head = head.replace("--port 6379", f"--port {port}")
        common = f"--block --disable-usage-stats --num-cpus 2 --object-store-memory {100 * 2**20}"
        head_extra = (
            f"{common} {_ports()} --node-ip-address {HEAD_IP} --include-dashboard false "
            f"--ray-client-server-port {free_port()} --temp-dir {session / 'ray'}"
        )
        _run_block(cluster, "head", head, head_extra, cluster.home, session)
        _wait_started(cluster, "head")
        shutil.copyfile(cluster.home / ".ray" / "auth_token", session / "head_auth_token")  # the docs' copy
        worker_extra = f"{common} {_ports()} --node-ip-address {WORKER_IP}"
        _run_block(cluster, "worker", worker, worker_extra, worker_home, session)
        _wait_started(cluster, "worker")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(session, ignore_errors=True)
