"""The encoding replicas: ``create_app`` as a Ray Serve ingress deployment.

Each replica builds the very app ``lnserve serve`` runs (every route, error, limit, the API key and the
middleware), given what differs on Ray (the galleries -> the shards, the reload -> every replica's,
``/metrics`` -> the sum of all replicas, ``/info`` -> the engine), and loads its models once, during its
start-up, before Serve sends it traffic: the app's lifespan opens and loads the models, and the replica waits
for that to finish. Each replica keeps its own micro-batcher, so ``max_ongoing_requests`` must allow a full
batch to form.

Health: ``check_health`` (called by Serve every ``health_check_period_s``) runs the warm-up sentence through
every loaded model while its queue is idle; a session that broke fails it, and Serve replaces the replica.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..http.lifecycle import Lifecycle
from ..http.main import create_app, model_registry
from ..http.metrics import Metrics
from ..log_setup import JsonFormatter
from ..serving.registry import ModelRegistry, warmup_ids
from ..settings import Settings
from .galleries import ShardedGalleries
from .ingress import direct_ingress
from .metrics import ClusterMetrics, local_families
from .reload import BROADCAST_TIMEOUT_S, ClusterReload, StagedVersions

log = logging.getLogger("lnserve.scale")

INGRESS_APP = "lnserve"
INGRESS_DEPLOYMENT = "lnserve"
LOAD_POLL_S = 0.05
# behind Serve's proxy each body read is a call to the proxy, so no body is ever there at once: 32 clients
# behind one address (a gateway, a batch job) got 429 for half their requests with no grace
PROXY_BODY_GRACE_MS = 1000.0


@dataclass(frozen=True)
class Topology:
    """How the service is laid out on Ray; reported by ``/info``."""

    shards: int
    replicas: int | None = None  # fixed count, or None with autoscaling bounds
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpus_per_replica: float = 0.0
    ingress: str = "proxy"  # "direct": each replica serves HTTP itself (scale.ingress)


async def probe_models(registry: ModelRegistry) -> None:
    """Encode the warm-up sentence with every ready model whose queue is idle; raise if one fails.

    A busy model is skipped: it is evidently answering, and a probe queued behind real batches could
    time out and have a working replica replaced. Models that never loaded are ``/ready``'s business.
    """
    for entry in registry.entries.values():
        if entry.state != "ready" or entry.batcher.depth:
            continue
        seqs = warmup_ids(entry)
        try:
            await entry.encode_ids(seqs, normalize=None)
        except Exception as exc:
            raise RuntimeError(f"model {entry.name!r} failed its health probe: {exc}") from exc


def _until_loaded(
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[Any]],
    then: Callable[[FastAPI], AbstractAsyncContextManager[Any]] | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[Any]]:
    """The app's own lifespan, which also waits until every model is loaded (or failed) before serving;
    ``then`` (the direct ingress) runs inside it once they are, and stops before the app does."""

    @asynccontextmanager
    async def wrapped(app: FastAPI) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            registry: ModelRegistry = app.state.registry
            while any(e.state in ("pending", "loading") for e in registry.entries.values()):
                await asyncio.sleep(LOAD_POLL_S)
            if then is None:
                yield state
                return
            async with then(app):
                yield state

    return wrapped


class ReplicaHeader:
    """``X-Lnserve-Replica`` on every response: which replica answered (logs, debugging, tests)."""

    def __init__(self, app: ASGIApp, replica: Callable[[], str]) -> None:
        self.app, self.replica = app, replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = (b"x-lnserve-replica", self.replica().encode())

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, receive, send_with_header)


def _replica_id() -> str:
    from ray import serve

    return str(serve.get_replica_context().replica_id.unique_id)


def _json_logs(level: str) -> None:
    """lnserve's JSON log lines in a replica, without touching the handlers Ray installs on the root."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("lnserve")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


class LnserveReplica:
    """One replica: the FastAPI app built late (``__serve_build_asgi_app__``), in the replica's process."""

    def __init__(self, settings: Settings, topology: Topology) -> None:
        if topology.ingress == "proxy" and settings.body_arrival_grace_ms is None:
            settings = settings.model_copy(update={"body_arrival_grace_ms": PROXY_BODY_GRACE_MS})
        self.settings, self.topology = settings, topology
        self._self_handle: Any = None
        self._registry: ModelRegistry | None = None
        self._metrics: Metrics | None = None
        self._staged: StagedVersions | None = None
        _json_logs(settings.log_level)

    def __serve_build_asgi_app__(self) -> FastAPI:
        lifecycle, metrics = Lifecycle(), Metrics()  # this replica's: its requests, its batches
        registry = model_registry(self.settings, metrics=metrics, lifecycle=lifecycle)
        expected = self.topology.replicas or self.topology.min_replicas or 1
        app = create_app(
            self.settings,
            lifecycle=lifecycle,
            metrics=metrics,
            registry=registry,
            galleries=ShardedGalleries.connect(self.topology.shards),
            reload=ClusterReload(registry, self._broadcast, identity=_replica_id, expected=expected),
            engine_info=self.engine_info,
            render_metrics=ClusterMetrics(metrics, self._handle).render,
        )
        self._registry, self._metrics = registry, metrics
        self._staged = StagedVersions(registry)
        direct = self.topology.ingress == "direct"
        app.router.lifespan_context = _until_loaded(
            app.router.lifespan_context, partial(direct_ingress, settings=self.settings) if direct else None
        )
        app.add_middleware(ReplicaHeader, replica=_replica_id)
        return app

    def _handle(self) -> Any:
        if self._self_handle is None:
            from ray import serve

            self._self_handle = serve.get_deployment_handle(INGRESS_DEPLOYMENT, app_name=INGRESS_APP)
        return self._self_handle

    async def _broadcast(self, method: str, *args: Any) -> list[Any]:
        """``method`` on every replica of the deployment (this one included): results or exceptions."""
        response = self._handle().broadcast(method, *args)
        return await response.results_async(timeout_s=BROADCAST_TIMEOUT_S, return_exceptions=True)

    # the two-phase reload (scale.reload): called on every replica by the coordinating one
    async def replica_identity(self) -> str:
        return _replica_id()

    async def stage_reload(self, token: str, name: str) -> tuple[str, Any]:
        assert self._staged is not None
        return await self._staged.stage(token, name)

    async def commit_reload(self, token: str) -> str | None:
        assert self._staged is not None
        return await self._staged.commit(token)

    async def abort_reload(self, token: str) -> None:
        assert self._staged is not None
        await self._staged.abort(token)

    async def check_health(self) -> None:
        if self._registry is not None:
            await probe_models(self._registry)

    async def metrics_families(self) -> list[Any]:
        """This replica's metric samples (``ClusterMetrics`` broadcasts for them)."""
        assert self._metrics is not None
        return local_families(self._metrics)

    def engine_info(self) -> dict[str, Any]:
        """``/info``'s ``engine``: Ray, this replica, the replica count now, the bounds and the shards."""
        from ray import serve

        ctx = serve.get_replica_context()
        return {
            "name": "ray",
            "replica": str(ctx.replica_id.unique_id),
            "pid": os.getpid(),
            "replicas": int(getattr(ctx, "world_size", 0) or 0) or self.topology.replicas,
            **{k: v for k, v in asdict(self.topology).items() if k != "replicas"},
        }
