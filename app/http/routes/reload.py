"""``POST /models/{name}/reload``: serve a new version of a model's artifact without a restart.

Behind the API key (like every non-public route); with no key set it is refused (403 ``reload_disabled``)
unless ``reload_without_key`` allows it: a reload is an admin action, and an open one let anyone make the
server load models over and over. It loads only what is in the model's own configured directory (e.g.
re-converted or pulled into the volume), never a path from the request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.openapi.models import Example

from ..deps import RegistryDep, ReloadDep, SettingsDep
from ..errors import ReloadDisabledError
from ..schemas import ErrorBody, ModelInfo

router = APIRouter(tags=["models"])


@router.post(
    "/models/{name}/reload",
    response_model=ModelInfo,
    responses={
        403: {"model": ErrorBody, "description": "reload_disabled"},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody, "description": "model_renamed, reload_in_progress"},
        422: {"model": ErrorBody, "description": "reload_failed"},
    },
)
async def reload_model(
    name: Annotated[str, Path(openapi_examples={"demo": Example(value="demo-lngru")})],
    registry: RegistryDep,
    settings: SettingsDep,
    reload: ReloadDep,
) -> ModelInfo:
    """Load the artifact now in the model's directory beside the serving version, warm it up, switch to it
    atomically and retire the old version once its last request ends; on failure the old version serves on
    and the reason is returned. ``name`` may be an alias: the model it names is reloaded.
    Under ``serve --ray`` every replica does so, or none (the reload ``create_app`` was given:
    ``scale.reload``)."""
    if settings.api_key is None and not settings.reload_without_key:
        raise ReloadDisabledError(
            "reload is an admin action and this server has no API key: set LNSERVE_API_KEY (then send "
            "Authorization: Bearer <key>), or LNSERVE_RELOAD_WITHOUT_KEY=true to allow it without one"
        )
    entry = await reload(name)
    return ModelInfo.model_validate(entry.describe(default=entry.name == registry.default_name))
