"""OpenAI-compatible ``POST /v1/embeddings``, ``GET /v1/models`` and ``GET /v1/models/{id}``, so existing
OpenAI clients work (names from ``LNSERVE_MODEL_ALIASES`` too)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.openapi.models import Example
from starlette.responses import Response

from ..answers import check_answer_bytes, json_answer, limit_of, small, vectors_bytes
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, SettingsDep
from ..schemas import (
    EmbeddingsRequest,
    EmbeddingsResponse,
    OpenAIModel,
    OpenAIModelList,
    VectorJSONResponse,
    encode_vectors,
)
from .encode_helpers import check_dimensions, encode_texts, text_inputs

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OffloadedBodyRoute)


@router.post("/embeddings", response_model=EmbeddingsResponse, response_class=VectorJSONResponse)
async def embeddings(body: EmbeddingsRequest, request: Request, registry: RegistryDep) -> Response:
    """Embed a string or a list of strings (raw text, the model's tokenizer and defaults)."""
    texts = text_inputs(body.input)
    entry = registry.get(body.model)
    check_dimensions(entry, body.dimensions)
    entry.check_count(len(texts))  # too many: that error, not the answer's size
    limit = limit_of(request)
    size = vectors_bytes(len(texts), entry.manifest["dims"]["output_dim"], body.encoding_format)
    size += len(texts) * 48  # {"object":"embedding","index":N,"embedding":...},
    check_answer_bytes(size, limit, f"{len(texts)} embeddings")
    vectors, seqs = await encode_texts(request, entry, texts)
    encoded = encode_vectors(vectors, body.encoding_format)
    tokens = sum(len(s) for s in seqs)
    answer = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
        "model": entry.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return await json_answer(answer, limit=limit, inline=small(size))


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
