"""The FastAPI app factory. Importing this module is cheap; models load in the lifespan.

``create_app`` takes what the app serves (registry, galleries, metrics, reload, ...; one process's when not
given, a Ray replica's from ``lnserve.app.scale.deployment``), keeps each on ``app.state`` for the routes'
typed dependencies (``deps``), and wires error handlers, middleware and the routers named in
``lnserve.app.http.routes.ROUTER_MODULES``. ``lifespan`` is the one place that starts and stops things.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from starlette.routing import BaseRoute, Mount

from lnserve.errors import LnserveError, MissingExtraError

from ..galleries.demo import install_demo_gallery
from ..galleries.errors import GalleryCorruptError
from ..galleries.layout import CorruptGallery, GalleryEntry, GalleryInfo
from ..galleries.protocol import GalleryStoreAPI
from ..galleries.store import GalleryStore
from ..serving.errors import ModelLoadError
from ..serving.galleries import warm_scorer
from ..serving.registry import ModelDirs, ModelRegistry
from ..settings import Settings
from .body_parsing import BodyParser, OffloadedBodyRoute
from .deps import DescribeEngine, ReloadModel, RenderMetrics, require_api_key
from .errors import install_error_handlers
from .fast_routes import FastRoutes
from .lifecycle import Lifecycle
from .metrics import Metrics
from .middleware import RequestContextMiddleware
from .routes import FAST_ROUTES, ROUTER_MODULES
from .schemas import ErrorBody

log = logging.getLogger("lnserve.app")

_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorBody} for s in (401, 404, 413, 422, 429, 503)}
# how OpenTelemetry is told to load a global provider from the environment (the only way one can appear in
# a process that ``lnserve serve`` runs)
_OTEL_PROVIDER_VARS = (
    "OTEL_PYTHON_TRACER_PROVIDER",
    "OTEL_PYTHON_METER_PROVIDER",
    "OTEL_PYTHON_LOGGER_PROVIDER",
)


def telemetry_config() -> dict[str, bool] | None:
    """FastAPI's native OpenTelemetry: its defaults (on, global providers) when the environment names a
    provider, else off. Left on, FastAPI asks OpenTelemetry on every request whether a provider has been
    set, and each ask reads three environment variables: measured, ~10% of the event loop's time per
    request under load (benchmarks/http_load.py) for spans nobody collects."""
    if any(name in os.environ for name in _OTEL_PROVIDER_VARS):
        return None
    return {"tracing": False, "metrics": False, "logs": False}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Startup: read the model manifests (errors stop startup), then load and warm up in the background
    so ``/health`` answers at once and ``/ready`` turns true when done; a model that fails to load stops
    the server (``Lifecycle.startup_failed``). Shutdown (after uvicorn has drained in-flight requests on
    SIGTERM): stop loading, finish queued batches, stop the worker threads and the body parser."""
    registry: ModelRegistry = app.state.registry
    await registry.open()
    await _open_galleries(app.state.galleries)
    loading = asyncio.create_task(_load(app), name="load-models")
    try:
        yield
    finally:
        loading.cancel()
        with suppress(asyncio.CancelledError):
            await loading
        app.state.body_parser.close()
        await registry.close()
        log.info("shut down")


async def _load(app: FastAPI) -> None:
    """Background start-up: every gallery verified against its checksums, the demo gallery (when the demo
    model is served), then the models, so that ``/ready`` implies all three."""
    settings: Settings = app.state.settings
    try:
        _log_quarantined(await asyncio.to_thread(app.state.galleries.verify_all))
    except Exception:  # each gallery is also verified on first use: never stop the models over this
        log.exception("could not verify the galleries")
    if not settings.models:
        try:
            info = await asyncio.to_thread(
                install_demo_gallery, app.state.galleries, precision=settings.precision
            )
            log.info("demo gallery %s ready (%d images)", info.name, info.count)
            warm_scorer(app.state.galleries)
        except GalleryCorruptError as exc:
            log.error("demo gallery not installed: %s", exc)
        except Exception:  # the demo gallery is a convenience: never fail serving over it
            log.exception("could not install the demo gallery")
    failed = await app.state.registry.load()
    if not failed:
        app.state.lifecycle.loaded()
        return
    name, error = next(iter(failed.items()))
    code = error.code if isinstance(error, LnserveError) else type(error).__name__
    app.state.lifecycle.startup_failed(
        error  # its own code and fix (pip install 'lnserve[torch]'), which the message names
        if isinstance(error, MissingExtraError)
        else ModelLoadError(f"model {name!r} cannot be loaded ({code}: {error})")
    )


async def _open_galleries(store: GalleryStoreAPI) -> None:
    """Clean what crashed creations left, list the galleries (a broken root fails startup, not the first
    query; a damaged gallery is quarantined, never fatal); warm the scorer they need."""
    for leftover in await asyncio.to_thread(store.clean_leftovers):
        log.info("removed %s left in %s by an interrupted create or remove", leftover, store.root)
    galleries = await asyncio.to_thread(store.list)
    names = ", ".join(g.name for g in galleries) or "-"
    log.info("%d galleries in %s: %s", len(galleries), store.root, names)  # faults: logged by _load
    if any(isinstance(g, GalleryInfo) for g in galleries):  # every metric scans with the kernel
        warm_scorer(store)


def _log_quarantined(galleries: list[GalleryEntry]) -> None:
    for g in galleries:
        if isinstance(g, CorruptGallery):
            log.error("gallery %s is corrupt and quarantined (503 gallery_corrupt): %s", g.name, g.reason)


def process_engine() -> dict[str, Any]:
    """``/info``'s ``engine`` of one process (``lnserve serve`` without Ray)."""
    return {"name": "process", "replicas": 1, "shards": 1}


def model_registry(
    settings: Settings, *, metrics: Metrics, lifecycle: Lifecycle, model_dirs: ModelDirs | None = None
) -> ModelRegistry:
    """The registry an app serves: its batches reported to ``metrics``, the middleware's in-flight count
    (``lifecycle``) as the batchers' hint. ``model_dirs``: the models already resolved (``lnserve serve``),
    so start-up reads the directories once."""
    return ModelRegistry(
        settings, observer=metrics, in_flight=lambda: lifecycle.inflight, model_dirs=model_dirs
    )


def create_app(
    settings: Settings | None = None,
    *,
    model_dirs: ModelDirs | None = None,
    lifecycle: Lifecycle | None = None,
    metrics: Metrics | None = None,
    registry: ModelRegistry | None = None,
    galleries: GalleryStoreAPI | None = None,
    reload: ReloadModel | None = None,
    engine_info: DescribeEngine | None = None,
    render_metrics: RenderMetrics | None = None,
) -> FastAPI:
    """Build the app that serves what it is given, one process's by default. With no settings, read them
    from ``LNSERVE_*`` environment variables.

    ``lifecycle``: what the server and the app tell each other (drain, fatal start-up errors); ``metrics``:
    where requests and batches are counted; ``registry``: the models (``model_registry`` over those two and
    ``model_dirs``, which only this default reads); ``galleries``: the gallery store (``GalleryStore`` of
    ``settings.galleries_dir``); ``reload``: what ``POST /models/NAME/reload`` calls (``registry.reload``);
    ``engine_info``: ``/info``'s engine (``process_engine``); ``render_metrics``: what ``GET /metrics``
    answers (``metrics.render``)."""
    settings = settings or Settings()
    lifecycle = Lifecycle() if lifecycle is None else lifecycle
    metrics = Metrics() if metrics is None else metrics
    if registry is None:
        registry = model_registry(settings, metrics=metrics, lifecycle=lifecycle, model_dirs=model_dirs)
    if galleries is None:
        galleries = GalleryStore(settings.galleries_dir, scorer=settings.scorer)
    # /docs and /redoc load Swagger UI / ReDoc from assets shipped in the fastapi-offline wheel (served
    # under /static-offline-docs), not from a CDN: an offline or air-gapped host still gets its docs
    app = FastAPIOffline(
        title="lnserve",
        summary="Sentence (and image) encoders of the layer-normalisation era, served over HTTP.",
        lifespan=lifespan,
        telemetry=telemetry_config(),
        # no trailing-slash redirects: a 307 to the path without its '/' made DELETE of item id '../'
        # (sent as ..%2F) reach DELETE /galleries/NAME once the client resolved the dot segment; a path
        # matches as sent or is a 404 / 405
        redirect_slashes=False,
    )
    # the API's description (the docs pages, their scripts and styles, the schema) is public, with or
    # without an API key: it is the same for everyone and holds no data, and a browser cannot send a Bearer
    # key when it opens a page; every operation it describes stays behind the key (Swagger UI's Authorize)
    described = [route for route in app.routes if hasattr(route, "path")]
    docs = frozenset(r.path for r in described if not isinstance(r, Mount))
    docs_prefixes = tuple(r.path + "/" for r in described if isinstance(r, Mount))
    # set here once, never replaced: the routes read them through ``deps``
    app.state.settings = settings
    app.state.lifecycle = lifecycle
    app.state.body_parser = BodyParser()
    app.state.metrics = metrics
    app.state.registry = registry
    app.state.galleries = galleries
    app.state.reload = registry.reload if reload is None else reload
    app.state.engine_info = process_engine if engine_info is None else engine_info
    app.state.render_metrics = metrics.render if render_metrics is None else render_metrics
    install_error_handlers(app)
    probes: set[str] = set()  # the public routes: never refused by the middleware nor counted in flight
    routes: list[BaseRoute] = []
    for name in ROUTER_MODULES:
        module = importlib.import_module(f"lnserve.app.http.routes.{name}")
        routes += module.router.routes
        public = getattr(module, "PUBLIC", False)
        app.include_router(
            module.router,
            dependencies=[] if public else [Depends(require_api_key)],
            responses={} if public else _ERRORS,
        )
        if public:
            probes |= {route.path for route in module.router.routes if hasattr(route, "path")}
    fast = [r for r in routes if isinstance(r, OffloadedBodyRoute) and r.path in FAST_ROUTES]
    # innermost of ours: every guard (and CORS) runs before it
    app.add_middleware(FastRoutes, routes=fast, handlers=app.exception_handlers)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(
        RequestContextMiddleware,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        log_access=settings.access_log,
        max_inflight=settings.inflight_limit(),
        retry_after_s=settings.retry_after_s,
        api_key=settings.api_key,
        public_paths=frozenset(probes | docs),
        public_prefixes=docs_prefixes,
        probe_paths=frozenset(probes),
        lifecycle=lifecycle,
        body_timeout_s=settings.body_timeout_s,
        max_body_reads_per_client=settings.max_body_reads_per_client,
        body_arrival_grace_s=settings.body_arrival_grace_s(),
        max_body_bytes_arriving=settings.body_bytes_arriving_limit(),
        routes=routes,
        cors=bool(settings.cors_origins),
    )
    return app
