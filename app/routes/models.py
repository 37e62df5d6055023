"""``GET /models`` and ``GET /info``: what is served, how, and within which limits."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from lnserve.app.deps import GalleriesDep, RegistryDep, SettingsDep
from lnserve.app.schemas import Info, ModelList

router = APIRouter(tags=["models"])


def _version() -> str:
    try:
        return version("lnserve")
    except PackageNotFoundError:
        return "0+unknown"


@router.get("/models", response_model=ModelList)
async def models(registry: RegistryDep) -> ModelList:
    """Every served model: name, dims, cell types, state, backend and providers."""
    return ModelList.model_validate({"default": registry.default_name, "models": registry.describe()})


@router.get("/info", response_model=Info)
async def info(registry: RegistryDep, settings: SettingsDep, store: GalleriesDep) -> Info:
    """Version, models, the execution providers actually in use, the galleries, and the request limits."""
    galleries = await run_in_threadpool(store.list)
    return Info.model_validate(
        {
            "version": _version(),
            "backend": settings.backend,
            "ready": registry.ready,
            "default_model": registry.default_name,
            "models": registry.describe(),
            "galleries": [
                {"name": g.name, "kind": g.kind, "model": g.model, "count": g.count, "metric": g.metric}
                for g in galleries
            ],
            "limits": settings.limits(),
        }
    )
