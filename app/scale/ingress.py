"""Direct ingress (``lnserve serve --ray --ingress direct``): each encoding replica serves HTTP itself.

Behind Serve's HTTP proxy every request crosses two processes (proxy -> replica) and Serve's request
machinery on both sides, which costs several times the CPU of the request itself. Here each replica runs
lnserve's own uvicorn stack (the one ``lnserve serve`` runs: httptools with the header and body deadlines,
the app's body-read caps, limits and drain) on the service's port, bound with ``SO_REUSEPORT``: every
replica of a node listens on the same port and the kernel spreads new connections over them. The app is
the replica's very app (Serve already ran its lifespan, so uvicorn runs none), on the replica's event loop,
so reload, health checks, ``/metrics`` and the galleries keep going over deployment handles.

What it gives up (docs/scaling-out.md): a connection belongs to one replica for its life (a replica that
dies drops its connections: no ``503 replica_unavailable``), Serve does not see these requests (no
autoscaling on them), and each node serves its own replicas on its own port (one address per node, for
the user's load balancer).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI

from ..http.lifecycle import Lifecycle
from ..http.server import LnserveServer, bind_socket, uvicorn_config
from ..settings import Settings

log = logging.getLogger("lnserve.scale")

INGRESS_MODES = ("proxy", "direct")
START_POLL_S = 0.01
STOP_GRACE_S = 2.0  # past the drain deadline and uvicorn's own backstop: give up waiting for the server


class ReplicaServer(LnserveServer):
    """lnserve's server inside a replica: Ray owns the process's signals, Serve stops the replica."""

    def __init__(self, app: FastAPI, settings: Settings) -> None:
        lifecycle: Lifecycle = app.state.lifecycle
        super().__init__(uvicorn_config(app, settings, lifespan="off"), lifecycle, settings.drain_timeout_s)
        lifecycle.on_fatal = None  # models are loaded before this server starts; Serve replaces a sick one

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # never install handlers: the replica's process is Ray's (uvicorn would, on a main thread)


@asynccontextmanager
async def direct_ingress(app: FastAPI, settings: Settings) -> AsyncIterator[None]:
    """Serve ``app`` on ``settings.host:port`` (shared with the node's other replicas) while inside.

    Raises:
        AddressInUseError: something that does not share the port (another server) listens on it.
        BindError: the address cannot be listened on on this node.
    """
    sock = bind_socket(settings.host, settings.port, reuse_port=True)
    server = ReplicaServer(app, settings)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="lnserve-direct-ingress")
    try:
        while not server.started:
            if task.done():  # failed while starting: its error, here
                task.result()
                raise RuntimeError("the direct ingress server stopped while starting")
            await asyncio.sleep(START_POLL_S)
        log.info("replica serving on http://%s:%d (direct ingress)", settings.host, settings.port)
        yield
    finally:
        server.handle_exit(signal.SIGTERM, None)  # as on SIGTERM: the drain deadline counts from now
        try:
            await asyncio.wait_for(task, settings.drain_timeout_s + STOP_GRACE_S + 1.0)
        except Exception:
            log.exception("the direct ingress server did not stop cleanly")
        sock.close()
