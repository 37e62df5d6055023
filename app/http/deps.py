"""What handlers declare they need (``Annotated`` aliases), the API-key check, and disconnect handling
(``cancel_on_disconnect``, from ``lnserve.app.http.disconnects``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..galleries.store import GalleryStore
from ..serving.registry import ModelRegistry
from ..settings import Settings
from .disconnects import cancel_on_disconnect

__all__ = ["cancel_on_disconnect"]  # re-exported: the routes import it from here
_bearer = HTTPBearer(auto_error=False, description="Required only when LNSERVE_API_KEY is set.")


# async, like every dependency on a request's path: FastAPI runs a plain ``def`` dependency in its thread
# pool, a hop to another thread and back per dependency per request (measured: 0.25 ms of the event loop's
# ~0.6 ms per /encode request under load, benchmarks/http_load.py)
async def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_galleries(request: Request) -> GalleryStore:
    return request.app.state.galleries


RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GalleriesDep = Annotated[GalleryStore, Depends(get_galleries)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


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
