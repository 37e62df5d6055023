"""OpenAI-compatible ``POST /v1/embeddings`` and ``GET /v1/models``, so existing OpenAI clients work."""

from __future__ import annotations

from fastapi import APIRouter, Request

from lnserve.app.body_parsing import OffloadedBodyRoute
from lnserve.app.deps import RegistryDep, cancel_on_disconnect
from lnserve.app.runtime.errors import EncodeInputError
from lnserve.app.schemas import (
    EmbeddingsRequest,
    EmbeddingsResponse,
    OpenAIModelList,
    VectorJSONResponse,
    encode_vectors,
)

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OffloadedBodyRoute)


@router.post("/embeddings", response_model=EmbeddingsResponse, response_class=VectorJSONResponse)
async def embeddings(body: EmbeddingsRequest, request: Request, registry: RegistryDep) -> VectorJSONResponse:
    """Embed a string or a list of strings (raw text, the model's tokenizer and defaults)."""
    entry = registry.get(body.model)
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts:
        raise EncodeInputError("input is an empty list")
    dim = entry.manifest["dims"]["output_dim"]
    if body.dimensions is not None and body.dimensions != dim:
        raise EncodeInputError(
            f"dimensions={body.dimensions} is not supported: model {entry.name!r} gives {dim}"
        )
    seqs, _ = await entry.prepare_async(texts, pretokenized=False, eos=None, truncate=False)
    vectors = await cancel_on_disconnect(request, entry.encode_ids(seqs, normalize=None))
    encoded = encode_vectors(vectors, body.encoding_format)
    tokens = sum(len(s) for s in seqs)
    return VectorJSONResponse(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
            "model": entry.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


@router.get("/models", response_model=OpenAIModelList)
async def openai_models(registry: RegistryDep) -> OpenAIModelList:
    """The served models, in OpenAI's list shape."""
    return OpenAIModelList.model_validate({"data": [{"id": name} for name in registry.entries]})
