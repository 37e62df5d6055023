"""OpenAI-compatible ``POST /v1/embeddings``, ``GET /v1/models`` and ``GET /v1/models/{id}``, so existing
OpenAI clients work (names from ``LNSERVE_MODEL_ALIASES`` too)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.openapi.models import Example
from starlette.responses import Response

from ...serving.encoding import encode_texts
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, SettingsDep, cancel_on_disconnect, registry_of
from ..schemas import (
    EmbeddingsRequest,
    EmbeddingsResponse,
    OpenAIModel,
    OpenAIModelList,
    VectorJSONResponse,
    encode_vectors,
)
from .encode_helpers import AnswerBound, text_inputs

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OffloadedBodyRoute)


@router.post("/embeddings", response_model=EmbeddingsResponse, response_class=VectorJSONResponse)
async def embeddings(body: EmbeddingsRequest, request: Request) -> Response:
    """Embed a string or a list of strings (raw text, the model's tokenizer and defaults)."""
    texts = text_inputs(body.input)
    # each vector is wrapped: {"object":"embedding","index":N,"embedding":...},
    bound = AnswerBound(request, body.encoding_format, per_row=48, what="embeddings")
    registry = registry_of(request)  # not RegistryDep: no dependency to solve (``fast_routes``)
    work = encode_texts(registry, body.model, texts, dimensions=body.dimensions, admit=bound.admit)
    done = await cancel_on_disconnect(request, work)
    encoded = encode_vectors(done.vectors, body.encoding_format)
    tokens = sum(done.token_counts)
    answer = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
        "model": done.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return await bound.send(answer, done.timing)


@router.get("/models", response_model=OpenAIModelList)
async def openai_models(registry: RegistryDep, settings: SettingsDep) -> OpenAIModelList:
    """The served models, then their aliases (``LNSERVE_MODEL_ALIASES``), in OpenAI's list shape."""
    names = [*registry.entries, *settings.model_aliases]
    return OpenAIModelList.model_validate({"data": [{"id": name} for name in names]})


@router.get("/models/{model_id:path}", response_model=OpenAIModel)
async def openai_model(
    model_id: Annotated[str, Path(openapi_examples={"demo": Example(value="demo-lngru")})],
    registry: RegistryDep,
) -> OpenAIModel:
    """One served model (or alias) in OpenAI's shape; 404 ``model_not_found`` for any other name."""
    registry.get(model_id)
    return OpenAIModel(id=model_id)
