"""``GET /models`` and ``GET /info``: what is served, how, and within which limits."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from ...settings import Settings
from ..deps import EngineDep, GalleriesDep, RegistryDep, SettingsDep
from ..schemas import Info, ModelList

router = APIRouter(tags=["models"])


def lnserve_version() -> str:
    try:
        return version("lnserve")
    except PackageNotFoundError:
        return "0+unknown"


@router.get("/models", response_model=ModelList)
async def models(registry: RegistryDep) -> ModelList:
    """Every served model: name, dims, cell types, state, backend and providers."""
    return ModelList.model_validate({"default": registry.default_name, "models": registry.describe()})


@router.get("/info", response_model=Info)
async def info(registry: RegistryDep, settings: SettingsDep, store: GalleriesDep, engine: EngineDep) -> Info:
    """Version, engine (one process or Ray, replicas, shards), models, the execution providers actually in
    use, the galleries, and the request limits."""
    galleries = await run_in_threadpool(store.list)
    models = registry.describe()
    default = next((m for m in models if m["default"]), None)
    return Info.model_validate(
        {
            **_tei_fields(default, settings),
            "version": lnserve_version(),
            "backend": settings.backend,
            "precision": settings.precision,
            "engine": engine(),  # one process's, or a Ray replica's (lnserve.app.scale)
            "ready": registry.ready,
            "default_model": registry.default_name,
            "models": models,
            "galleries": [g.summary() for g in galleries],  # damaged ones too, with state and reason
            "limits": settings.limits(),
        }
    )


TEI_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8"}


def _tei_fields(default: dict[str, Any] | None, settings: Settings) -> dict[str, Any]:
    """text-embeddings-inference's ``/info`` fields, beside ours: TEI load tests and dashboards read them."""
    return {
        "model_id": default["name"] if default else None,
        "model_sha": default["sha256"] if default else None,
        "model_dtype": TEI_DTYPES[default["precision"]] if default else None,
        "max_concurrent_requests": settings.inflight_limit(),
        "max_input_length": settings.max_tokens,
        "max_batch_tokens": settings.max_batch_tokens,
        "max_batch_requests": settings.max_batch_size,
        "max_client_batch_size": settings.max_sentences,
    }
