"""``POST /score``: caption x image scores with the model's own error, without a gallery: the HTTP twin of
``lnserve score`` (which takes vectors; here the captions and image features are encoded first)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...runtime.retrieval import score_info
from ...serving import encoding
from ..answers import FLOAT_BYTES
from ..body_parsing import OffloadedBodyRoute
from ..deps import RegistryDep, cancel_on_disconnect
from ..schemas import VectorJSONResponse
from ..schemas.tokenize_score import ScoreRequest, ScoreResponse
from .encode_helpers import AnswerBound

router = APIRouter(tags=["encode"], route_class=OffloadedBodyRoute)


@router.post("/score", response_model=ScoreResponse, response_class=VectorJSONResponse)
async def score(body: ScoreRequest, request: Request, registry: RegistryDep) -> Response:
    """Order-violation (or negative-cosine, for symmetric models) errors between every caption and every
    image: lower is better. Encoding goes through the model's micro-batcher like ``/encode``."""
    bound = AnswerBound(request)
    size = len(body.captions) * (len(body.images) * FLOAT_BYTES + 2) + 256
    what = f"{len(body.captions)} x {len(body.images)} scores"
    work = encoding.score(
        registry, body.model, body.captions, body.images, pretokenized=body.pretokenized,
        truncate=body.truncate, admit=lambda: bound.check(size, what),
    )  # fmt: skip
    done = await cancel_on_disconnect(request, work)
    info = score_info(done.metric)
    return await bound.send({"model": done.model, "score": info, "scores": done.errors}, *done.timings)
