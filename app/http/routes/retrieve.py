"""``POST /retrieve``: exact top-k of a gallery for text, image-feature or stored-item queries.

Text and image queries are encoded through the model's micro-batcher (as ``/encode``); id queries reuse a
stored vector. Queries are grouped by kind (a caption fills the caption slot of E(caption, image), an image
the image slot), each group is one store search in a worker thread, and the results return in request order.
Every response carries ``score`` (metric, direction, meaning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...galleries.layout import GalleryInfo
from ...serving import retrieval
from ..answers import answer_made_off_loop, check_answer_bytes, hits_bytes, limit_of
from ..body_parsing import OffloadedBodyRoute
from ..deps import GalleriesDep, RegistryDep, SettingsDep
from ..schemas.retrieval import RetrieveRequest, RetrieveResponse
from .gallery_helpers import retrieval_queries, served_model

router = APIRouter(tags=["retrieval"], route_class=OffloadedBodyRoute)


@router.post("/retrieve", response_model=RetrieveResponse)
async def retrieve(
    body: RetrieveRequest,
    request: Request,
    registry: RegistryDep,
    store: GalleriesDep,
    settings: SettingsDep,
) -> Response:
    """Best-first ``{id, score, payload}`` per query; ``score`` says which direction is better."""
    limit, queries = limit_of(request), retrieval_queries(body)
    search = await retrieval.retrieve(
        store, body.gallery, queries, body.k, served_model(request, registry, body),
        model_named=body.model is not None, max_queries=settings.max_sentences,
        before_encoding=_refusals(queries, body.k, limit),
    )  # fmt: skip
    # queries x k hits, each with its payload (any JSON): found, written within max_answer_bytes and freed
    # in a worker thread
    return await answer_made_off_loop(_shaped(search, one=body.query is not None), limit=limit)


def _shaped(search: Callable[[], dict[str, Any]], *, one: bool) -> Callable[[], dict[str, Any]]:
    """The answer: ``results`` is one list for ``query``, one list per query for ``queries``."""

    def answer() -> dict[str, Any]:
        found = search()
        return {**found, "results": found["results"][0]} if one else found

    return answer


def _refusals(queries: list[retrieval.Query], k: int, limit: int) -> Callable[[GalleryInfo], None]:
    """What is refused once the gallery is known, before encoding or searching: hits without their payloads
    already over the answer's bound."""

    def refuse(info: GalleryInfo) -> None:
        size = hits_bytes(len(queries), k, info.count)
        check_answer_bytes(size, limit, f"{len(queries)} queries x {min(k, info.count)} hits")

    return refuse
