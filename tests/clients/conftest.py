"""The clients users already have, against a real ``lnserve serve`` on 127.0.0.1 (the demo model).

No network but loopback: the clients' telemetry, token and price-list lookups are turned off through their
own environment variables (set here, before any of them is imported), and a guard fails any test whose
process opens a connection anywhere else. Each client library is a dev dependency; a missing one skips its
tests with the reason.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.server import LiveServer, start_server

# before any client is imported: what each would otherwise fetch or send over the internet
_OFFLINE_ENV = {
    "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm downloads its price list at import otherwise
    "LITELLM_TELEMETRY": "False",
    "LANGCHAIN_TRACING_V2": "false",  # langchain / langsmith
    "LANGSMITH_TRACING": "false",
    "DO_NOT_TRACK": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
os.environ.update(_OFFLINE_ENV)
for _var in (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
):
    os.environ.pop(_var, None)
    os.environ.pop(_var.lower(), None)

ALIAS = "text-embedding-ada-002"
SENTENCES = ["a red circle on the left", "a blue square", "two green triangles at the top"]


def _loopback(address: Any) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return True  # a Unix socket path


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection to a non-loopback address fails the test that opened it."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        assert _loopback(address), f"a client tried to reach {address!r}: tests are loopback only"
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        assert _loopback(address), f"a client tried to reach {address!r}: tests are loopback only"
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The demo server, with an OpenAI-style alias for the demo model."""
    srv = start_server(
        tmp_path_factory.mktemp("clients"), env={"LNSERVE_MODEL_ALIASES": f"{ALIAS}=demo-lngru"}
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def v1(server: LiveServer) -> str:
    return server.url + "/v1"


def encode(server: LiveServer, sentences: list[str], *, normalize: bool | None = None) -> np.ndarray:
    """The vectors lnserve's own ``/encode`` gives: what every client must get back."""
    body: dict[str, Any] = {"sentences": sentences}
    if normalize is not None:
        body["normalize"] = normalize
    r = httpx.post(server.url + "/encode", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["vectors"], dtype=np.float32)
