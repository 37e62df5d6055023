"""``GET /health`` (the process is alive) and ``GET /ready`` (every model loaded and warmed up)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..deps import RegistryDep
from ..schemas import Health, Readiness

PUBLIC = True  # no API key: orchestrators probe these
router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, responses={503: {"model": Health}})
async def health(registry: RegistryDep) -> JSONResponse:
    """Liveness: 200 while the process serves HTTP, even before models are ready; 503 once a model has
    failed (at run time: a session error, out of memory, a dead batcher), so that it gets restarted."""
    failures = registry.failures()
    if failures:
        return JSONResponse(Health(status="failed", errors=failures).model_dump(), status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/ready", response_model=Readiness, responses={503: {"model": Readiness}})
async def ready(registry: RegistryDep) -> JSONResponse:
    """Readiness: 200 once every model is loaded and warmed up, 503 before (or if one failed)."""
    body = Readiness(
        ready=registry.ready,
        models={name: e.state for name, e in registry.entries.items()},
        errors={name: e.error for name, e in registry.entries.items() if e.error},
    )
    return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)
