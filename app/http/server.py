"""Running the app under uvicorn, for ``lnserve serve``.

Everything that can fail at startup fails before the server starts, as one line and exit 2: the model
directories are read and checked (``read_artifact``: manifest, every file present and intact) and the port
is bound here, not by uvicorn (which logged the error and exited 3 after starting the app). A model that
still cannot be built while the server starts (an ONNX session error) stops it the same way, exit 2.

On SIGTERM the server stops accepting connections and lets requests in flight finish until
``drain_timeout_s`` after the signal; those still running then get a JSON 503 ``shutting_down``
(``lnserve.app.http.lifecycle``), and the process exits within about a second of the deadline.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import importlib.util
import logging
import math
import socket
import time
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LifespanType

from ...converters.artifact import read_artifact
from ..serving.registry import ModelDirs, resolve_model_dirs
from ..settings import Settings
from .connection_deadlines import deadline_protocol
from .errors import AddressInUseError, BindError
from .head_limits import h11_protocol
from .lifecycle import Lifecycle
from .main import create_app

log = logging.getLogger("lnserve.server")
_UVICORN_GRACE_S = 1.0  # uvicorn's own cancel comes this long after our drain deadline, as a backstop


def check_models(settings: Settings, model_dirs: ModelDirs | None = None) -> None:
    """Read every configured model directory (``model_dirs`` where already resolved) and check its files
    against its manifest.

    Raises:
        ArtifactError: a directory is not an artifact, or a file is missing, truncated or modified.
        UserInputError: two models share a name, or the default model is not among them.
    """
    for _, path, _ in model_dirs if model_dirs is not None else resolve_model_dirs(settings):
        read_artifact(path)


def bind_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A socket bound to ``host:port`` (uvicorn listens on it). ``reuse_port``: other sockets of this user
    that set it too may bind the same port, and the kernel spreads new connections over them (the Ray
    replicas of one node, ``lnserve.app.scale.ingress``); a socket without it still finds the port taken.

    Raises:
        AddressInUseError: the port is taken.
        BindError: any other reason the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then (with proto 0 every
    # response written as headers + body waited ~40 ms for the client's delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUseError(
                f"{host}:{port} is already in use (is another server running there?); "
                "choose another port with --port or LNSERVE_PORT"
            ) from None
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def fast_paths(parser: str = "auto") -> tuple[str, str]:
    """uvicorn's HTTP parser and event loop: httptools and uvloop (dependencies) where they import, else
    h11 and asyncio (uvloop has no Windows build); ``parser`` (``http_parser``) other than auto names it."""
    http = parser if parser != "auto" else "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return http, loop


def freeze_start_up() -> None:
    """What start-up left alive (~150,000 objects on the demo model: the modules, the app, the models),
    frozen out of the garbage collector's passes once every model has loaded. Unfrozen, each full pass
    walked them all while holding the GIL: at 16 clients on the demo model one pass every 2-4 s, each
    stalling the event loop 40-120 ms (measured with ``gc.callbacks``). Called by ``lnserve serve``'s own
    server, never by the app's lifespan, which test processes also run."""
    gc.collect()
    gc.freeze()


class LnserveServer(uvicorn.Server):
    """uvicorn's server, telling the app when the drain began and stopping when the app says so."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, drain_timeout_s: float) -> None:
        super().__init__(config)
        self.lifecycle, self.drain_timeout_s = lifecycle, drain_timeout_s
        self.signalled_at: float | None = None
        lifecycle.on_fatal = self._stop
        lifecycle.on_loaded = freeze_start_up

    def _stop(self) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Signal handler: the drain deadline counts from the signal, not from uvicorn noticing it."""
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        began = self.signalled_at if self.signalled_at is not None else time.monotonic()
        left = max(0.0, began + self.drain_timeout_s - time.monotonic())
        self.lifecycle.begin_drain(asyncio.get_running_loop().time() + left)
        await super().shutdown(sockets)


def serve_app(settings: Settings, model_dirs: ModelDirs | None = None) -> None:
    """Check the models, bind the port, serve until SIGTERM / SIGINT. ``model_dirs``: the models as
    ``resolve_model_dirs`` found them, when the caller already resolved them (else resolved here, once).

    Raises:
        LnserveError: a model or the address is unusable (before serving), or a model failed to load
            while the server started (after stopping it).
    """
    if model_dirs is None:
        model_dirs = resolve_model_dirs(settings)
    check_models(settings, model_dirs)
    sock = bind_socket(settings.host, settings.port)
    try:  # the port is ours from here on: closed whatever fails
        lifecycle = _serve_on(sock, settings, model_dirs)
    finally:
        sock.close()
    if lifecycle.fatal is not None:
        raise lifecycle.fatal


def _serve_on(sock: socket.socket, settings: Settings, model_dirs: ModelDirs) -> Lifecycle:
    """Build the app and serve it on ``sock`` until the server stops; returns its lifecycle (``fatal`` is set
    when a model failed while starting)."""
    app: FastAPI = create_app(settings, model_dirs=model_dirs)
    config = uvicorn_config(app, settings)
    lifecycle: Lifecycle = app.state.lifecycle
    server = LnserveServer(config, lifecycle, settings.drain_timeout_s)
    log.info(
        "listening on http://%s:%d (http %s, loop %s)",
        settings.host, sock.getsockname()[1], *fast_paths(settings.http_parser),
    )  # fmt: skip
    server.run(sockets=[sock])
    return lifecycle


def uvicorn_config(app: FastAPI, settings: Settings, *, lifespan: LifespanType = "auto") -> uvicorn.Config:
    """uvicorn's configuration for lnserve: the fast paths, the head limits and JSON protocol errors with
    either parser, the connection deadlines (header and body timeouts) with httptools, no access log of
    uvicorn's (the app writes its own), the drain's backstop. ``lifespan="off"`` where something else
    already runs the app's lifespan (a Ray replica)."""
    http, loop = fast_paths(settings.http_parser)
    limits = {"max_url_bytes": settings.max_url_bytes, "max_header_bytes": settings.max_header_bytes}
    protocol: type[asyncio.Protocol] = (
        deadline_protocol(
            header_timeout_s=settings.header_timeout_s, body_timeout_s=settings.body_timeout_s, **limits
        )
        if http == "httptools"
        else h11_protocol(**limits)
    )
    return uvicorn.Config(
        app,
        http=protocol,
        loop=loop,
        lifespan=lifespan,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=math.ceil(settings.drain_timeout_s + _UVICORN_GRACE_S),  # whole seconds
        server_header=False,
        # X-Forwarded-For / -Proto believed only from the configured proxies (uvicorn's default trusts
        # 127.0.0.1: any local client could pass as any number of addresses); lnserve.app.http.client_identity
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies) or None,
    )
