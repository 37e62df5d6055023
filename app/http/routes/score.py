"""``POST /score``: caption x image scores with the model's own error, without a gallery: the HTTP twin of
``lnserve score`` (which takes vectors; here the captions and image features are encoded first)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ....converters.families import has_image_encoder
from ...runtime.errors import EncodeInputError
from ...runtime.retrieval import metric_for, score_info
from ...runtime.scoring import error_matrix
from ...serving.errors import TooManySentencesError
from ..answers import (
    FLOAT_BYTES,
    check_answer_bytes,
    json_answer,
    limit_of,
    small,
)
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, SettingsDep
from ..schemas import VectorJSONResponse
from ..schemas.tokenize_score import ScoreRequest, ScoreResponse
from .gallery_helpers import encode_inputs

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/score", response_model=ScoreResponse, response_class=VectorJSONResponse)
async def score(
    body: ScoreRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Order-violation (or negative-cosine, for symmetric models) errors between every caption and every
    image: lower is better. Encoding goes through the model's micro-batcher like ``/encode``."""
    entry = registry.get(body.model)
    if not has_image_encoder(entry.manifest):
        raise EncodeInputError(
            f"model {entry.name!r} is {entry.manifest.get('family')}: /score needs an order-embedding model "
            "(caption x image scores)"
        )
    TooManySentencesError.check(len(body.captions), settings.max_sentences, "captions")
    TooManySentencesError.check(len(body.images), settings.max_sentences, "images")
    limit = limit_of(request)
    size = len(body.captions) * (len(body.images) * FLOAT_BYTES + 2) + 256
    check_answer_bytes(size, limit, f"{len(body.captions)} x {len(body.images)} scores")
    caps, ims = await encode_inputs(
        request, entry, texts=body.captions, images=body.images, pretokenized=body.pretokenized,
        truncate=body.truncate,
    )  # fmt: skip
    assert caps is not None and ims is not None
    method = entry.manifest["options"]["method"]
    errs = await run_in_threadpool(error_matrix, caps, ims, method)
    answer = {"model": entry.name, "score": score_info(metric_for(method, "order-embedding")), "scores": errs}
    return await json_answer(answer, limit=limit, inline=small(size))
