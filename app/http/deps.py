"""What handlers declare they need (``Annotated`` aliases), the API-key check, and disconnect handling
(``cancel_on_disconnect``, from ``lnserve.app.http.disconnects``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..galleries.protocol import GalleryStoreAPI
from ..serving.registry import ModelEntry, ModelRegistry
from ..settings import Settings
from .disconnects import cancel_on_disconnect

__all__ = ["cancel_on_disconnect"]  # re-exported: the routes import it from here
_bearer = HTTPBearer(auto_error=False, description="Required only when LNSERVE_API_KEY is set.")


# what ``create_app`` serves besides the registry, the galleries and the settings (each given to it, or its
# default): the reload of ``POST /models/NAME/reload`` (``ModelRegistry.reload``; under Ray every replica's,
# ``scale.reload.ClusterReload``), ``/info``'s engine, and the text ``GET /metrics`` answers
ReloadModel = Callable[[str], Awaitable[ModelEntry]]
DescribeEngine = Callable[[], dict[str, Any]]
RenderMetrics = Callable[[], bytes]


def registry_of(request: Request) -> ModelRegistry:
    """The served registry, without a dependency: for the hot routes (``/encode``), where FastAPI's solve of
    a dependency per request costs more than the route's own work on the event loop."""
    return request.app.state.registry


# async, like every dependency on a request's path: FastAPI runs a plain ``def`` dependency in its thread
# pool, a hop to another thread and back per dependency per request (measured: 0.25 ms of the event loop's
# ~0.6 ms per /encode request under load, benchmarks/http_load.py)
async def get_registry(request: Request) -> ModelRegistry:
    return registry_of(request)


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


# typed as the interface both engines implement (``GalleryStore`` in one process, ``ShardedGalleries`` in a
# Ray replica; what ``create_app`` takes): routes may call only what it declares
async def get_galleries(request: Request) -> GalleryStoreAPI:
    return request.app.state.galleries


async def get_reload(request: Request) -> ReloadModel:
    return request.app.state.reload


async def get_engine_info(request: Request) -> DescribeEngine:
    return request.app.state.engine_info


async def get_render_metrics(request: Request) -> RenderMetrics:
    return request.app.state.render_metrics


RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GalleriesDep = Annotated[GalleryStoreAPI, Depends(get_galleries)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ReloadDep = Annotated[ReloadModel, Depends(get_reload)]
EngineDep = Annotated[DescribeEngine, Depends(get_engine_info)]
RenderMetricsDep = Annotated[RenderMetrics, Depends(get_render_metrics)]


async def require_api_key(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Declares the bearer scheme on every router but health and metrics (OpenAPI's ``security``). The key
    itself is checked once, by ``RequestContextMiddleware`` (``_key_refused``), before any body is
    read: a request that reaches a route has passed it."""


# dependencies that only declare something in the OpenAPI schema and do nothing when a request runs
DECLARATION_ONLY: tuple[object, ...] = (require_api_key,)


def runtime_dependant(dependant: Dependant) -> Dependant:
    """``dependant`` without its ``DECLARATION_ONLY`` dependencies: what a request must solve. FastAPI
    solves each dependency on every request: ``require_api_key`` and the bearer scheme under it were two of
    /encode's four solves, which took a quarter of the app's CPU (cProfile, 16 concurrent callers), to
    produce nothing. The schema keeps them (``OffloadedBodyRoute``)."""
    kept = [d for d in dependant.dependencies if d.call not in DECLARATION_ONLY]
    if len(kept) == len(dependant.dependencies):
        return dependant
    return dataclasses.replace(dependant, dependencies=kept)
