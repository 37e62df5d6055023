"""What handlers declare they need (``Annotated`` aliases), the API-key check, and disconnect handling."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lnserve.app.galleries.store import GalleryStore
from lnserve.app.serving.errors import ClientClosedError
from lnserve.app.serving.registry import ModelRegistry
from lnserve.app.settings import Settings

T = TypeVar("T")
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


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first; then cancel it, freeing its queue slot.

    The body has been read by then, so the next ASGI message can only be ``http.disconnect``.
    """
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the request itself was cancelled (drain deadline): so is its work
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise ClientClosedError("client disconnected before its result was ready")
    return task.result()
