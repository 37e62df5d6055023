"""``POST /encode`` and ``POST /encode/images``: the native encoding API."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...serving.encoding import encode_images as encode_features
from ...serving.encoding import encode_texts
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
from .encode_helpers import AnswerBound

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/encode", response_model=EncodeResponse, response_class=VectorJSONResponse)
async def encode(body: EncodeRequest, request: Request) -> Response:
    """Encode sentences into vectors (micro-batched with concurrent requests)."""
    bound = AnswerBound(request, body.encoding)
    # the registry straight from the app, not through RegistryDep: FastAPI solves every dependency on every
    # request, and this is the hot route (see deps.runtime_dependant)
    work = encode_texts(
        registry_of(request), body.model, body.sentences, pretokenized=body.pretokenized, eos=body.eos,
        truncate=body.truncate, normalize=body.normalize, admit=bound.admit,
    )  # fmt: skip
    done = await cancel_on_disconnect(request, work)
    vectors = encode_vectors(done.vectors, body.encoding)
    return await bound.send(
        {"model": done.model, "dim": int(done.vectors.shape[1]), "encoding": body.encoding,
         "vectors": vectors, "token_counts": done.token_counts, "unk_counts": done.unk_counts},
        done.timing,
    )  # fmt: skip


@router.post("/encode/images", response_model=EncodeImagesResponse, response_class=VectorJSONResponse)
async def encode_images(body: EncodeImagesRequest, request: Request, registry: RegistryDep) -> Response:
    """Map CNN image features into the order-embedding space (order-embedding models only)."""
    bound = AnswerBound(request, body.encoding)
    work = encode_features(registry, body.model, body.features, admit=bound.admit)
    done = await cancel_on_disconnect(request, work)
    answer = {
        "model": done.model,
        "dim": int(done.vectors.shape[1]),
        "encoding": body.encoding,
        "vectors": encode_vectors(done.vectors, body.encoding),
    }
    return await bound.send(answer, done.timing)
