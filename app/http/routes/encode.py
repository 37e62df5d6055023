"""``POST /encode`` and ``POST /encode/images``: the native encoding API."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from ..answers import check_answer_bytes, json_answer, limit_of, small, vectors_bytes
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, cancel_on_disconnect, registry_of
from ..schemas import (
    EncodeImagesRequest,
    EncodeImagesResponse,
    EncodeRequest,
    EncodeResponse,
    VectorJSONResponse,
    encode_vectors,
)
from .encode_helpers import encode_texts

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/encode", response_model=EncodeResponse, response_class=VectorJSONResponse)
async def encode(body: EncodeRequest, request: Request) -> Response:
    """Encode sentences into vectors (micro-batched with concurrent requests)."""
    # the registry straight from the app, not through RegistryDep: FastAPI solves every dependency on every
    # request, and this is the hot route (see deps.runtime_dependant)
    registry = registry_of(request)
    entry = registry.get(body.model)
    entry.check_count(len(body.sentences))  # too many: that error, not the answer's size
    limit = limit_of(request)
    size = vectors_bytes(len(body.sentences), entry.manifest["dims"]["output_dim"], body.encoding)
    check_answer_bytes(size, limit, f"{len(body.sentences)} vectors")
    vectors, seqs = await encode_texts(
        request,
        entry,
        body.sentences,
        pretokenized=body.pretokenized,
        eos=body.eos,
        truncate=body.truncate,
        normalize=body.normalize,
    )
    answer = {
        "model": entry.name,
        "dim": int(vectors.shape[1]),
        "encoding": body.encoding,
        "vectors": encode_vectors(vectors, body.encoding),
        "token_counts": [len(s) for s in seqs],
        "unk_counts": entry.unk_counts(seqs),
    }
    return await json_answer(answer, limit=limit, inline=small(size))


@router.post("/encode/images", response_model=EncodeImagesResponse, response_class=VectorJSONResponse)
async def encode_images(body: EncodeImagesRequest, request: Request, registry: RegistryDep) -> Response:
    """Map CNN image features into the order-embedding space (order-embedding models only)."""
    entry = registry.get(body.model)
    entry.check_count(len(body.features))
    limit = limit_of(request)
    size = vectors_bytes(len(body.features), entry.manifest["dims"]["output_dim"], body.encoding)
    check_answer_bytes(size, limit, f"{len(body.features)} vectors")
    vectors = await cancel_on_disconnect(request, entry.encode_images(body.features))
    answer = {
        "model": entry.name,
        "dim": int(vectors.shape[1]),
        "encoding": body.encoding,
        "vectors": encode_vectors(vectors, body.encoding),
    }
    return await json_answer(answer, limit=limit, inline=small(size))
