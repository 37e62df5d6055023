"""A real ``lnserve serve`` process on a free 127.0.0.1 port, polled until ``/ready`` (as TEI's tests do)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.growing_files import json_records

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        """The whole log so far, for substring checks and messages; parse records with ``json_records``."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def json_records(self) -> list[dict[str, Any]]:
        """The server's JSON log records, complete lines only (the server may be writing the last one)."""
        return json_records(self.log_path)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def start_server(
    tmp: Path,
    *args: str,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    timeout: float = 120.0,
    prefix: Sequence[str] = (),
    port: int | None = None,
) -> LiveServer:
    """Start ``lnserve serve --port <free or port>`` with ``args``; settings through ``env`` (LNSERVE_*);
    ``prefix``: a command that runs the server (e.g. in its own mount namespace), ending in its exec."""
    port = port or free_port()
    log_path = tmp / f"server-{port}.log"
    full_env = {
        **os.environ,
        "LNSERVE_GALLERIES_DIR": str(tmp / "galleries"),  # never the user's own galleries
        "LNSERVE_THREADS": "1",
        **(env or {}),
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-I",  # only the installed package: the checkout's folders are not top-level imports
                "-c",
                "from lnserve.app.cli import main; main()",
                "serve",
                "--port",
                str(port),
                *args,
            ],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    path = "/ready" if wait_ready else "/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(server.url + path, timeout=2.0).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server not {path} after {timeout}s:\n{server.log()}")
