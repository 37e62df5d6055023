"""``POST /encode`` and ``POST /encode/images``: the native encoding API."""

from __future__ import annotations

from fastapi import APIRouter, Request

from lnserve.app.http.body_parsing import OffloadedBodyRoute
from lnserve.app.http.deps import RegistryDep, cancel_on_disconnect
from lnserve.app.http.routes.encode_helpers import encode_texts
from lnserve.app.http.schemas import (
    EncodeImagesRequest,
    EncodeImagesResponse,
    EncodeRequest,
    EncodeResponse,
    VectorJSONResponse,
    encode_vectors,
)
from lnserve.app.serving.registry import ModelRegistry

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/encode", response_model=EncodeResponse, response_class=VectorJSONResponse)
async def encode(body: EncodeRequest, request: Request) -> VectorJSONResponse:
    """Encode sentences into vectors (micro-batched with concurrent requests)."""
    # the registry straight from the app, not through RegistryDep: FastAPI solves every dependency on every
    # request, and this is the hot route (see deps.runtime_dependant)
    registry: ModelRegistry = request.app.state.registry
    entry = registry.get(body.model)
    vectors, seqs = await encode_texts(
        request,
        entry,
        body.sentences,
        pretokenized=body.pretokenized,
        eos=body.eos,
        truncate=body.truncate,
        normalize=body.normalize,
    )
    return VectorJSONResponse(
        {
            "model": entry.name,
            "dim": int(vectors.shape[1]),
            "encoding": body.encoding,
            "vectors": encode_vectors(vectors, body.encoding),
            "token_counts": [len(s) for s in seqs],
            "unk_counts": entry.unk_counts(seqs),
        }
    )


@router.post("/encode/images", response_model=EncodeImagesResponse, response_class=VectorJSONResponse)
async def encode_images(
    body: EncodeImagesRequest, request: Request, registry: RegistryDep
) -> VectorJSONResponse:
    """Map CNN image features into the order-embedding space (order-embedding models only)."""
    entry = registry.get(body.model)
    vectors = await cancel_on_disconnect(request, entry.encode_images(body.features))
    return VectorJSONResponse(
        {
            "model": entry.name,
            "dim": int(vectors.shape[1]),
            "encoding": body.encoding,
            "vectors": encode_vectors(vectors, body.encoding),
        }
    )
